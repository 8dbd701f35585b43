"""Window scan: turns raw stream tuples into the change stream of a CQL window."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from ...errors import SketchQLError
from ..changes import Batch, Changes
from ._keys import group_codes
from .base import Operator, WKS, STR

__all__ = ["WindowSpec", "WindowScan"]


@dataclass(frozen=True)
class WindowSpec:
    """A CQL window: ``kind`` in range / rows / partition / now / unbounded.

    * ``range(w)``: at τ holds tuples with τ − w < ts ≤ τ;
    * ``range(w, slide=s)``: hopping (s < w) or tumbling (s = w) window, which
      moves only at multiples of s: holds τ' − w < ts ≤ τ' with τ' = ⌊τ/s⌋·s;
    * ``rows(n)``: the n latest tuples (ties in ts by arrival order);
    * ``partitioned(cols, n)``: the n latest tuples of each partition;
    * ``now()``: the tuples with ts = τ; ``unbounded()``: everything so far;
    * ``landmark(start, end=None)``: a landmark window (Patroumpas-Sellis):
      holds the tuples with start ≤ ts ≤ τ (and ts ≤ end for an upper-bounded
      one, whose contents freeze once τ passes end); nothing ever expires
      (monotonic).

    >>> WindowSpec.range(60).kind, WindowSpec.rows(5).n
    ('range', 5)
    """

    kind: str
    w: float | None = None
    slide: float | None = None
    n: int | None = None
    partition_by: tuple = field(default_factory=tuple)
    start: float | None = None        # landmark lower bound (ts >= start)
    end: float | None = None          # landmark upper bound (ts <= end)

    @classmethod
    def range(cls, w: float, slide: float | None = None) -> "WindowSpec":
        w = float(w)
        if not w > 0:
            raise SketchQLError(f"RANGE window must be positive, got {w}")
        if slide is not None:
            slide = float(slide)
            if not slide > 0:
                raise SketchQLError(f"SLIDE must be positive, got {slide}")
        return cls("range", w=w, slide=slide)

    @classmethod
    def rows(cls, n: int) -> "WindowSpec":
        if int(n) != n or n < 0:
            raise SketchQLError(f"ROWS needs a non-negative integer, got {n}")
        return cls("rows", n=int(n))

    @classmethod
    def partitioned(cls, cols: Sequence[str], n: int) -> "WindowSpec":
        if isinstance(cols, str):
            cols = (cols,)
        if not cols:
            raise SketchQLError("PARTITION BY needs at least one column")
        if int(n) != n or n < 0:
            raise SketchQLError(f"ROWS needs a non-negative integer, got {n}")
        return cls("partition", n=int(n), partition_by=tuple(cols))

    @classmethod
    def now(cls) -> "WindowSpec":
        return cls("now")

    @classmethod
    def unbounded(cls) -> "WindowSpec":
        return cls("unbounded")

    @classmethod
    def landmark(cls, start: float | None, end: float | None = None) -> "WindowSpec":
        start = None if start is None else float(start)
        end = None if end is None else float(end)
        if start is not None and end is not None and end < start:
            raise SketchQLError(f"landmark window ends ({end}) before it starts ({start})")
        return cls("unbounded", start=start, end=end)

    @property
    def fifo(self) -> bool:
        """Do tuples leave in arrival order? (update pattern weakest)."""
        return self.kind != "partition"

    def contains(self, ts: np.ndarray, tau: float) -> np.ndarray:
        """Membership test for time-based kinds (the oracle's window predicate)."""
        if self.kind == "range":
            t = tau if self.slide is None else np.floor(tau / self.slide) * self.slide
            return (ts > t - self.w) & (ts <= t)
        if self.kind == "now":
            return ts == tau
        if self.kind == "unbounded":
            m = ts <= tau
            if self.start is not None:
                m &= ts >= self.start
            if self.end is not None:
                m &= ts <= self.end
            return m
        raise SketchQLError(f"{self.kind} windows are not time-based")


class WindowScan(Operator):
    """Window over one stream, with expiration driven by the data clock.

    Each tuple gets a lifetime [start, end): + is emitted at ``start``, − at
    ``end`` (see :class:`WindowSpec` for each kind).  ``step(now, batch)``
    inserts the batch (timestamps in [clock, now]) and emits every + and −
    due up to ``now`` in time order, including expirations between two
    arrivals (so a heartbeat ``advance(now)`` alone produces them).  Rows
    whose lifetime is empty (pushed out at the instant they arrive, e.g. ROWS
    n with more than n arrivals at one ts) are never emitted.  Each tuple gets
    a fresh ``rid`` (increasing).

    >>> import numpy as np
    >>> ws = WindowScan(WindowSpec.range(10))
    >>> ch = ws.push(Batch({"x": np.array([1, 2])}, ts=np.array([1.0, 2.0])))
    >>> ch = ws.advance(11.5)
    >>> ch.sign.tolist(), ch.at.tolist()
    ([-1], [11.0])
    """

    def __init__(self, spec: WindowSpec):
        super().__init__()
        if not isinstance(spec, WindowSpec):
            raise SketchQLError(f"WindowScan needs a WindowSpec, got {type(spec).__name__}")
        self.spec = spec
        self.update_pattern = WKS if spec.fifo else STR
        self._cols: dict[str, np.ndarray] | None = None
        self._ts = np.empty(0)
        self._rid = np.empty(0, np.int64)
        self._start = np.empty(0)
        self._end = np.empty(0)
        self._shown = np.empty(0, bool)
        self._next_rid = 0

    def state_size(self) -> int:
        return len(self._ts)

    def _lifetimes(self, ts: np.ndarray):
        s = self.spec
        if s.kind == "range":
            if s.slide is None:
                return ts.copy(), ts + s.w
            k = s.slide
            start = np.ceil(ts / k) * k
            end = np.ceil((ts + s.w) / k) * k
            return start, end
        if s.kind == "now":
            return ts.copy(), np.nextafter(ts, np.inf)
        end = np.full(len(ts), np.inf)
        if s.start is not None or s.end is not None:
            out = np.zeros(len(ts), bool)
            if s.start is not None:
                out |= ts < s.start
            if s.end is not None:
                out |= ts > s.end
            end[out] = ts[out]          # outside the landmark band: an empty lifetime, never emitted
        return ts.copy(), end

    def _count_based_ends(self):
        """ROWS / PARTITION: a row ends when the n-th younger row (of its
        partition) arrives."""
        s = self.spec
        open_ = np.flatnonzero(np.isinf(self._end))
        if not len(open_):
            return
        n = s.n
        if s.kind == "rows":
            if len(open_) > n:
                k = len(open_) - n
                self._end[open_[:k]] = self._ts[open_[n:]]
            return
        codes = group_codes([self._cols[c][open_] for c in s.partition_by])
        o = np.argsort(codes, kind="stable")          # rid order kept inside a partition
        idx = open_[o]
        c = codes[o]
        if len(idx) > n:
            same = np.zeros(len(idx), bool)
            same[: len(idx) - n] = c[: len(idx) - n] == c[n:]
            src = np.flatnonzero(same)
            self._end[idx[src]] = self._ts[idx[src + n]]
        self._work += len(idx)

    def _step(self, now, inputs):
        batch = inputs[0]
        if batch is not None and len(batch):
            if not isinstance(batch, Batch):
                raise SketchQLError("WindowScan input must be a Batch of raw tuples")
            if self._cols is None:
                self._cols = {k: v[:0] for k, v in batch.columns.items()}
            elif list(batch.columns) != list(self._cols):
                raise SketchQLError(
                    f"WindowScan: batch columns {batch.names} differ from earlier {list(self._cols)}")
            if self.spec.kind == "partition":
                miss = [c for c in self.spec.partition_by if c not in batch.columns]
                if miss:
                    raise SketchQLError(f"PARTITION BY column(s) {miss} not in the stream {batch.names}")
            n = len(batch)
            # arrival order = ts order (stable for ties)
            if np.any(np.diff(batch.ts) < 0):
                o = np.argsort(batch.ts, kind="stable")
                batch = batch.take(o)
            start, end = self._lifetimes(batch.ts)
            rid = np.arange(self._next_rid, self._next_rid + n, dtype=np.int64)
            self._next_rid += n
            self._cols = {k: np.concatenate([self._cols[k], batch.columns[k]]) for k in self._cols}
            self._ts = np.concatenate([self._ts, batch.ts])
            self._rid = np.concatenate([self._rid, rid])
            self._start = np.concatenate([self._start, start])
            self._end = np.concatenate([self._end, end])
            self._shown = np.concatenate([self._shown, np.zeros(n, bool)])
            if self.spec.kind in ("rows", "partition"):
                self._count_based_ends()
        if self._cols is None:
            return Changes.empty()
        self._work += len(self._ts)
        valid = self._start < self._end
        plus = valid & ~self._shown & (self._start <= now)
        # a row already shown whose lifetime became empty (a ROWS row pushed out by younger rows
        # of its own timestamp, in a later push) is retracted at that time too
        minus = (self._end <= now) & (self._shown | plus)
        ip, im = np.flatnonzero(plus), np.flatnonzero(minus)
        # (at, sign) order: retractions first, then a stable sort on the time (the order of
        # np.lexsort((sign, at))); the rows are gathered once, already in that order
        at = np.concatenate([self._end[im], self._start[ip]])
        o = np.argsort(at, kind="stable")
        sel = np.concatenate([im, ip])[o]
        out = Changes(Batch(self._cols, ts=self._ts).take(sel), np.where(o < len(im), -1, 1).astype(np.int8),
                      at[o], self._rid[sel], sort=False)
        self._shown |= plus
        keep = valid & (self._end > now)
        if not keep.all():
            self._cols = {k: v[keep] for k, v in self._cols.items()}
            self._ts, self._rid = self._ts[keep], self._rid[keep]
            self._start, self._end, self._shown = self._start[keep], self._end[keep], self._shown[keep]
        return out
