"""Exact window operators: the fallback of every approximate plan and the oracle.

Data model (``sketchql.operators.changes``)
-------------------------------------------
* :class:`Batch` -- columnar rows (``columns``: name -> numpy array) plus a
  float64 ``ts`` event-time array.  ``as_batch(df_or_table_or_dict, ts_col)``
  converts pandas / pyarrow / dict input.
* :class:`Changes` -- the change stream every operator emits: rows, ``sign``
  (+1 enters / −1 leaves the result), ``at`` (when the change happens) and
  ``rid`` (row identity; a −1 repeats the rid of its +1).  Sorted by
  ``(at, sign)``.  ISTREAM = ``istream(ch)``, DSTREAM = ``dstream(ch)``,
  RSTREAM = ``rstream(ch, times)`` (the whole relation at every instant of
  ``times``); ``snapshot(ch, τ)`` is the relation at one τ.

Time
----
Only the data clock and heartbeats move time; a tuple with timestamp ts is in
a window of range w at τ iff τ − w < ts ≤ τ (it leaves at ts + w).  Every
operator has a ``clock`` and one primitive::

    out: Changes = op.step(now, *inputs)   # inputs per port, times in [clock, now]

which processes the inputs *and every expiration due up to ``now``*, returning
the output changes with ``at <= now`` in time order (so no answer waits for
the next matching tuple: reference case W3).  Shortcuts: ``op.push(data,
port=0)`` = step to the data's latest time; ``op.advance(now)`` = step with no
input (heartbeat).  A multi-input operator must get all its ports' changes
covering ``[clock, now]`` in one ``step`` call -- i.e. the plan owner steps
every upstream operator to the same ``now`` and then the join; inside a step
everything is resolved with vectorized interval logic (a row lives on
``[start, end)``; a composite lives on ``[max start, min end)`` and exists
iff that is non-empty), so the order of events inside a step never matters.
Input older than the clock raises :class:`~sketchql.errors.LateTupleError`.

Every operator has ``stats()`` -> ``{"state_rows", "tuples_in",
"tuples_out", "work", ...}`` and ``update_pattern`` (``"weakest"``,
``"weak"``, ``"strict"`` -- golab-ozsu-update-pattern-aware) for the planner.

Operators
---------
``WindowSpec``  window description: ``WindowSpec.range(w, slide=None)``,
    ``WindowSpec.rows(n)``, ``WindowSpec.partitioned(cols, n)``,
    ``WindowSpec.now()``, ``WindowSpec.unbounded()``.
``WindowScan(spec)``  input: :class:`Batch` (raw stream tuples, ts >= clock);
    output: + when a tuple enters the window, − when it leaves (RANGE: at
    ts + w; RANGE w SLIDE s: CQL hopping/tumbling -- visible at τ iff
    ⌊τ/s⌋s − w < ts ≤ ⌊τ/s⌋s, so + at ⌈ts/s⌉s and − at ⌈(ts+w)/s⌉s; ROWS n:
    − when the n-th younger tuple arrives; PARTITION BY cols ROWS n: per
    partition; NOW: leaves just after ts; UNBOUNDED: never).
``Select(predicate)``  predicate: ``callable(columns: dict) -> bool array``,
    a triple ``(col, op, value)`` with op in ``= == != <> < <= > >= in``, or a
    list of those (AND).  Works on Changes (and ``Select.filter(batch)``).
``Project(outputs)``  ``["a", "b"]`` or ``{"new": "old" | callable(columns)}``.
``SymmetricHashJoin(on, prefixes=("", ""))``  two inputs (Changes); ``on`` =
    ``[(left_col, right_col), ...]`` equalities; output columns are the left
    columns with prefix[0] and the right columns with prefix[1] (a name
    clash raises).  A pair exists while both members are alive, so it
    expires when the first of the pair expires (W5).  Output row ts = max of
    the members' ts.
``MJoin(n_inputs, conditions, prefixes=None, probe_orders=None)``  multi-way
    hash join with no intermediate state (Viglas/MJoin): ``conditions`` =
    ``[((i, col_i), (j, col_j)), ...]``; each new (or expiring) tuple of input
    i probes the other inputs in ``probe_orders[i]`` (default: the other
    inputs in index order, each joined through a condition linking it to what
    is already bound), checking every member's lifetime against the partial
    composite as it goes (W1: a composite is valid only if all members are
    alive at the newest member's ts).  ``set_probe_order(i, order)``.
``StaticJoin(table, on, prefix="")``  join a change stream with a static
    relation (Batch / DataFrame / dict); ``on = [(stream_col, table_col)]``;
    non-retroactive: updates of the table (``set_table``) affect only later
    tuples.
``Aggregate(group_by, aggs)``  ``aggs`` = list of :class:`AggSpec`
    (``AggSpec(func, column=None, name=None, q=None)``, func in ``count``,
    ``sum``, ``avg``, ``min``, ``max``, ``count_distinct``, ``median``,
    ``quantile``).  Emits, per group and change time, −old row / +new row;
    a group that loses its last tuple emits a − and no + (W6) -- it
    disappears.  Without group_by there is one row from the first step on;
    on an empty window COUNT reads 0 and SUM/AVG/MIN/MAX/... NULL (NaN).
    SUM/COUNT/AVG are maintained by subtraction (vectorized cumulative sums);
    MIN/MAX rescan a group only when its extreme leaves (``stats()["rescans"]``).
``Distinct(columns=None, mode="replace")``  duplicate elimination on
    ``columns``; ``mode="replace"`` is δ* (state <= 2 × output: the
    representative plus the youngest duplicate; when the representative
    expires the youngest replaces it -- W4; valid when the input expires in
    FIFO order, i.e. update pattern weakest); ``mode="count"`` keeps every
    copy (for strict inputs).
``MinusAll(columns)``  two inputs: S MINUS ALL R on ``columns``; keeps
    max(0, n_S − m_R) copies of each value, emitting negative tuples when that
    count falls (W7).

``SetOp(kind, all, columns, right_columns=None)``  UNION / EXCEPT / INTERSECT
    [ALL] by per-value counts n (left), m (right): EXCEPT ALL max(0, n − m),
    INTERSECT ALL min(n, m), the set forms 0/1; negative tuples only for
    EXCEPT when a right arrival removes results.  ``UnionAll(columns,
    right_columns=None)`` merges two change streams.
``SemiJoin(on, anti=False, null_aware=False)``  IN / EXISTS (semi) and NOT
    EXISTS / NOT IN (anti; ``null_aware`` gives SQL NOT IN's NULL rules): a
    left row leaves by a negative tuple when a matching right row arrives and
    comes back once when the last one leaves.

``Chain(*ops)``  a linear pipeline of single-input operators with the same
``push`` / ``advance`` / ``step`` / ``stats``.

Example (W3)::

    >>> import numpy as np
    >>> from sketchql.operators.exact import *
    >>> q = Chain(WindowScan(WindowSpec.range(10)), Select(("price", ">", 4)),
    ...           Aggregate([], [AggSpec("sum", "price", "s")]))
    >>> ch = q.push(Batch({"price": np.array([6., 9.])}, ts=np.array([1., 2.])))
    >>> ch = q.advance(12)
    >>> [(float(a), float(v)) for a, v, s in zip(ch.at, ch.columns["s"], ch.sign) if s > 0]
    [(11.0, 9.0), (12.0, nan)]
"""
from ..changes import Batch, Changes, as_batch, dstream, istream, rstream, snapshot
from .base import STR, WK, WKS, Operator
from .window import WindowScan, WindowSpec
from .stateless import Project, Select, Chain
from .join import MJoin, StaticJoin, SymmetricHashJoin
from .aggregate import AggSpec, Aggregate
from .distinct import Distinct
from .minus import MinusAll
from .setops import SetOp, UnionAll
from .semijoin import SemiJoin

__all__ = [
    "Batch", "Changes", "as_batch", "snapshot", "rstream", "istream", "dstream",
    "Operator", "WKS", "WK", "STR",
    "WindowSpec", "WindowScan", "Select", "Project", "Chain",
    "SymmetricHashJoin", "MJoin", "StaticJoin",
    "AggSpec", "Aggregate", "Distinct", "MinusAll", "SetOp", "UnionAll", "SemiJoin",
]
