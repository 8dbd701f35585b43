"""The engine: the runtime that ties streams, indexes, plans and queries together.

Modules: ``batches`` (validation), ``streams`` (StreamHandle), ``relation`` (maintained
results), ``query`` (Query), ``index_adapter`` (declared summaries), ``facade`` (Engine).

The Engine façade: DDL, continuous queries, pushing batches, results.

>>> import numpy as np
>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.execute("CREATE STREAM Sales (price DOUBLE) TIMESTAMP ts")
>>> q = eng.register("SELECT SUM(price) AS s FROM Sales [RANGE 10] WHERE price > 4")
>>> eng.push("Sales", {"ts": [1.0, 2.0, 3.0], "price": [6.0, 9.0, 2.0]})
>>> eng.heartbeat("Sales", 12.0)
>>> # at 12 the window (2, 12] holds no row over 4: SUM of an empty set is NULL (NaN), as in SQL
>>> q.snapshot(2.0)["s"].tolist(), q.snapshot(11.0)["s"].tolist(), q.snapshot(12.0)["s"].tolist()
([15.0], [9.0], [nan])

Time: every stream has a clock = the latest timestamp pushed to it or the
latest heartbeat.  A query advances to the *minimum* clock of the streams it
reads (a join cannot move past a stream that may still deliver older
tuples); tuples beyond that are buffered inside the query.  Every operator is
stepped to the same time, so expirations are reported when they happen (W3),
not when the next tuple arrives.  A tuple older than its stream's clock is
rejected with :class:`~sketchql.errors.LateTupleError`, nothing of its batch
applied (data must arrive in event-time order per stream; a batch may be
unsorted internally).  A stream that arrives out of order sets a ``slack``
(``SLACK n SECONDS``, or the knob ``slack`` / its other name ``allowed_lateness``):
its tuples are held back and released in timestamp order, the stream's clock
trailing its newest tuple by the slack (:mod:`sketchql.engine.ordering`).

Results: a query's answer is a change stream (+1 / −1 rows with the time
``at`` of the change).  ``query.changes()`` returns it (the retained part:
the newest ``retain_changes`` rows, a query knob); ``query.results()``
returns it as a DataFrame in the query's view (ISTREAM: the +1 rows, DSTREAM:
the −1 rows, RSTREAM / relation: all changes; CQL's default is ISTREAM for a
non-aggregate query over streams, the relation otherwise);
``query.snapshot(t)`` is the relation at time t (exact back to
``query.snapshot_from``; the current relation is maintained incrementally, so
memory follows the window state, not the history);  iterating over the query
(or ``query.poll()``) yields the batches of changes not consumed yet.
"""

from .errors import BatchError, HistoryUnavailable, SnapshotPastClock
from .query import PollResult, Query
from .streams import StreamHandle
from .facade import Engine

__all__ = ["Engine", "Query", "StreamHandle", "BatchError", "HistoryUnavailable", "SnapshotPastClock", "PollResult"]
