"""Out-of-order input: a per-stream slack buffer (STREAM section 2.3, "slack").

A stream with slack ``s`` > 0 accepts tuples up to ``s`` seconds out of order.
Let ``M`` be the largest timestamp seen on the stream.  The buffer holds the
tuples with ``ts > M − s`` and *releases* in timestamp order (stable: arrival
order at equal times) every tuple with ``ts <= W``, the release watermark:

* ``W = M − s`` after each push (the slack allows it);
* ``W = t`` at a heartbeat ``t`` (the stream promises nothing older comes);
* ``W = G − timeout`` when a ``slack_timeout`` is set, ``G`` being the engine's
  data clock (the largest timestamp seen on any stream): a silent stream does not
  hold the other streams' queries back for ever.  Tuples released this way
  *before* the slack allowed it make the results from their time on possibly
  imprecise (a tuple may still arrive within the slack, older than ``W``): the
  queries reading the stream are marked (``query.possibly_imprecise()``).

A tuple older than the watermark already released (later than the slack) is
never dropped silently: it is counted (``late_beyond_slack``) and kept in the
stream's late log (``stream.late_tuples()``, the newest ``late_log`` rows), or
the push raises :class:`~sketchql.errors.LateTupleError` when the stream's
``late_policy`` is ``error`` -- then the whole batch is refused, nothing of
it applied.

Released tuples go through the normal path (indexes, queries) in timestamp
order, so the results over a stream shuffled within its slack equal those over
the sorted stream.

>>> import numpy as np
>>> from sketchql.operators.changes import Batch
>>> buf = SlackBuffer(slack=2.0)
>>> out, late = buf.offer(Batch({"v": np.array([3, 1, 2])}, ts=np.array([3.0, 1.0, 2.0])))
>>> out.ts.tolist(), late                      # W = 3 - 2 = 1
([1.0], None)
>>> out, _ = buf.offer(Batch({"v": np.array([5])}, ts=np.array([5.0])))
>>> out.ts.tolist(), buf.watermark             # W = 3
([2.0, 3.0], 3.0)
>>> out, late = buf.offer(Batch({"v": np.array([0])}, ts=np.array([2.5])))
>>> out, len(late), buf.late_beyond_slack      # 2.5 <= 3: later than the slack
(None, 1, 1)
>>> buf.release_until(10.0).ts.tolist()        # a heartbeat at 10
[5.0]
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..operators.changes import Batch

__all__ = ["SlackBuffer"]


class SlackBuffer:
    """The buffer of one stream (module doc)."""

    def __init__(self, slack: float = 0.0):
        self.slack = float(slack)
        self.max_seen = -math.inf
        self.watermark = -math.inf          # every tuple with ts <= watermark was released
        self._parts: list = []              # buffered Batches (each ts-sorted), with their stream rows unknown
        self.buffered_max = 0
        self.late_beyond_slack = 0
        self.released = 0
        self.released_by_timeout = 0
        self.timeouts = 0

    # -- state ----------------------------------------------------------------
    def __len__(self) -> int:
        return int(sum(len(b) for b in self._parts))

    @property
    def nbytes(self) -> int:
        return int(sum(sum(v.nbytes for v in b.columns.values()) + b.ts.nbytes for b in self._parts))

    def oldest(self) -> float:
        return min((float(b.ts[0]) for b in self._parts if len(b)), default=math.inf)

    # -- input ------------------------------------------------------------------
    def late(self, ts: np.ndarray) -> np.ndarray:
        """Which of the timestamps ``ts`` come later than the slack: at or below the released watermark."""
        return ts <= self.watermark

    def offer(self, b: Batch):
        """Take a validated batch; returns ``(released Batch or None, late Batch or None)``."""
        late = None
        if len(b):
            old = self.late(b.ts)
            if old.any():
                late = b.take(old)
                self.late_beyond_slack += len(late)
                b = b.take(~old)
        if len(b):
            self.max_seen = max(self.max_seen, float(b.ts.max()))
            self._parts.append(b)
            self.buffered_max = max(self.buffered_max, len(self))
        return self.release_until(self.max_seen - self.slack), late

    def release_until(self, w: float) -> Optional[Batch]:
        """Release every buffered tuple with ts <= w (sorted by ts, stable); the watermark becomes w."""
        if w <= self.watermark:
            return None
        self.watermark = float(w)
        if not self._parts:
            return None
        allb = Batch.concat(self._parts) if len(self._parts) > 1 else self._parts[0]
        o = np.argsort(allb.ts, kind="stable")
        allb = allb.take(o)
        k = int(np.searchsorted(allb.ts, w, side="right"))
        out, rest = allb.take(slice(0, k)), allb.take(slice(k, None))
        self._parts = [rest] if len(rest) else []
        self.released += k
        return out if k else None

    def timeout(self, w: float) -> Optional[Batch]:
        """Release up to ``w`` although the slack does not allow it yet (counted)."""
        if w <= self.watermark:
            return None
        out = self.release_until(w)
        if out is not None:
            self.timeouts += 1
            self.released_by_timeout += len(out)
        return out

    def stats(self) -> dict:
        return {"slack": self.slack, "buffered": len(self), "buffered_bytes": self.nbytes,
                "buffered_max": self.buffered_max, "watermark": self.watermark, "max_seen": self.max_seen,
                "released": self.released, "late_beyond_slack": self.late_beyond_slack,
                "released_by_timeout": self.released_by_timeout, "timeouts": self.timeouts}
