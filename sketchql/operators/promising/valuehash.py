"""Per-value hash of the kept arrivals: the state of desc's *hash rounds*
(wall-clock budget, private index; :meth:`.join.PTJoin._tick_hash`).

Why: on a wall-clock budget the index's upkeep is real time -- zone
detection, sketch and pyramid updates, COLLAPSE, dozens of numpy calls per
ingest, 0.3-0.6 ms per call whatever its size -- and under overload (the
bench's 50 and 100 ms streams get 1.7-4 ms of CPU for 30 s of data) the
upkeep alone exceeds the whole CPU share, so desc produced nothing.  When the
budget binds, desc's preference (the most output) is the classic
output-maximizing load shedding of a window join (Das, Gehrke, Riedewald,
SIGMOD 2003, "PROB": keep the tuples whose join value is frequent in the
other stream): keep the heaviest join values, by :mod:`.valueheat`, and
join exactly those.  For that an exact per-value hash is all the state
needed -- the summaries' job (which values are heavy) is done by the heat --
and it costs a handful of vectorized numpy calls per round, ~0.1 ms.

State: one array of the kept arrivals ``(code, rid, ts)`` in ``(code,
rid)`` order, ``code = 2 v + side`` for the join value ``v`` (so a value's
rows of each stream are one contiguous block); rows arrive in rid order, so
new rows sorted by code (stable) and merged in after the stored rows of
their code keep the order.  Values beyond
``+-2^61`` are coded by a hash instead (``wide``), and a match then also
checks the stored value.  Expiry drops the rows with ``ts <= horizon``.

Probe of an arrival ``x`` (side ``s``, value ``v``, ``x.rid``, ``x.ts``):
the block ``[lo, hi)`` of code ``2 v + (1 - s)`` (two ``searchsorted`` for
all probes at once), then the pairs ``y`` of the block with ``y.rid <
x.rid`` (found by the *later* member, as everywhere in PT-Join: no
duplicates) and ``y.ts > x.ts - w`` (the window; ``|x.ts - y.ts| < w``
since ``y`` is not later).  Its cost is known before the scan: ``probe +
compare * (hi - lo)`` work units, so desc can order the probes by their
exact stored partner counts (heaviest first) and stop where the account
ends.  Every pair produced is an exact join pair; with every value kept and
every arrival probed the answer is the exact join.

>>> h = ValueHash(window=10.0)
>>> h.add(np.array([5, 7, 5, 5, 9]), np.array([0, 0, 0, 1, 1]), np.array([0, 1, 2, 3, 4]),
...       np.array([0.0, 1.0, 2.0, 3.0, 4.0]))
>>> lo, hi = h.block(np.array([5, 9]), np.array([1, 1]))   # side 1's arrivals probe side 0's rows
>>> (hi - lo).tolist()
[2, 0]
>>> i, y_rid, y_ts = h.match(np.array([5, 9]), np.array([3, 4]), np.array([3.0, 4.0]), lo, hi)
>>> i.tolist(), y_rid.tolist()
([0, 0], [0, 2])
"""
from __future__ import annotations

import numpy as np

try:   # pragma: no cover - numba is a hard dependency; without it the numpy path runs
    import numba

    ENABLED = True
except Exception:   # pragma: no cover
    numba = None
    ENABLED = False


_LIM = 1 << 61


class ValueHash:
    """Kept arrivals of the two sides in ``(2 value + side, rid)`` order
    (module doc).  ``window`` seconds (``inf``: whole stream).  Rows are
    added in rid order (arrival order, non-decreasing ``ts``)."""

    def __init__(self, window: float):
        self.window = float(window)
        self.code = np.zeros(0, np.int64)
        self.val = np.zeros(0, np.int64)
        self.rid = np.zeros(0, np.int64)
        self.ts = np.zeros(0, np.float64)
        self.wide = False              # some value beyond +-2^61: codes are hashed, matches check the value
        self._t_min = np.inf           # oldest stored ts (expiry is skipped below it)

    def __len__(self) -> int:
        return int(self.code.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.code.nbytes + self.val.nbytes + self.rid.nbytes + self.ts.nbytes)

    def codes(self, val, side) -> np.ndarray:
        """``2 v + side`` (or, once ``wide``, a hash of ``v`` in place of ``v``)."""
        val = np.asarray(val, np.int64)
        if not self.wide and val.shape[0] and (int(val.max()) >= _LIM or int(val.min()) < -_LIM):
            self._widen()
        if self.wide:
            val = _fold(val)
        return val * 2 + np.asarray(side, np.int64)

    def _widen(self) -> None:
        self.wide = True
        if self.code.shape[0]:
            self.code = _fold(self.val) * 2 + (self.code & 1)
            o = np.argsort(self.code, kind="stable")
            self.code, self.val, self.rid, self.ts = self.code[o], self.val[o], self.rid[o], self.ts[o]

    def expire(self, horizon: float) -> int:
        """Drop the rows with ``ts <= horizon`` (partners of no later arrival);
        returns how many were dropped."""
        if self._t_min > horizon:
            return 0
        keep = self.ts > horizon
        gone = int(keep.shape[0] - keep.sum())
        self.code, self.val, self.rid, self.ts = self.code[keep], self.val[keep], self.rid[keep], self.ts[keep]
        self._t_min = float(self.ts.min()) if self.ts.shape[0] else np.inf
        return gone

    def add(self, val, side, rid, ts) -> None:
        """Store rows (given in rid order, all later than the stored ones):
        the new rows sorted by code (stable) are merged in after the stored
        rows of their code -- one ``searchsorted`` and a scatter per column."""
        val = np.asarray(val, np.int64)
        m = val.shape[0]
        if not m:
            return
        c = self.codes(val, side)
        o = np.argsort(c, kind="stable")
        c = c[o]
        n = self.code.shape[0]
        at = np.searchsorted(self.code, c, "right") + np.arange(m)   # output slots of the new rows
        old = np.ones(n + m, bool)
        old[at] = False
        cols = []
        for cur, new, dt in ((self.code, c, np.int64), (self.val, val[o], np.int64),
                             (self.rid, np.asarray(rid, np.int64)[o], np.int64),
                             (self.ts, np.asarray(ts, np.float64)[o], np.float64)):
            out = np.empty(n + m, dt)
            out[at] = new
            out[old] = cur
            cols.append(out)
        self.code, self.val, self.rid, self.ts = cols
        self._t_min = min(self._t_min, float(np.asarray(ts, np.float64)[0]))

    def block(self, val, side):
        """``(lo, hi)``: the stored rows of value ``val[k]`` on the *other*
        side than ``side[k]`` (the partners of an arrival of ``side``)."""
        c = self.codes(val, 1 - np.asarray(side, np.int64))
        return np.searchsorted(self.code, c, "left"), np.searchsorted(self.code, c, "right")

    def match(self, val, x_rid, x_ts, lo, hi):
        """Pairs of probes ``k`` (value ``val[k]``, rid ``x_rid[k]``, time
        ``x_ts[k]``, block ``[lo[k], hi[k])``): ``(k, y_rid, y_ts)`` for the
        stored ``y`` of the block with ``y.rid < x.rid`` and ``y.ts > x.ts -
        w``, sorted by ``k`` (within ``k`` in rid order).  Compares:
        ``sum(hi - lo)``."""
        cnt = (hi - lo).astype(np.int64, copy=False)
        tot = int(cnt.sum())
        if tot == 0:
            e = np.zeros(0, np.int64)
            return e, e, np.zeros(0, np.float64)
        k = np.repeat(np.arange(cnt.shape[0]), cnt)
        start = np.cumsum(cnt) - cnt
        pos = np.arange(tot) - (start - lo)[k]
        y_rid = self.rid[pos]
        y_ts = self.ts[pos]
        ok = (y_rid < np.asarray(x_rid, np.int64)[k]) & (y_ts > np.asarray(x_ts, np.float64)[k] - self.window)
        if self.wide:
            ok &= self.val[pos] == np.asarray(val, np.int64)[k]
        return k[ok], y_rid[ok], y_ts[ok]


    def pairs(self, val, x_rid, x_ts, x_side, lo, hi):
        """The join pairs of :meth:`match` as output columns ``(rid_a, rid_b,
        ts_a, ts_b, value)`` (stream a's member first; ``x_side[k]`` is probe
        ``k``'s stream), in :meth:`match`'s order: one compiled pass (numba)
        that stops a block's scan at the first row not older than the probe
        (a block is in rid order), or :meth:`match` and a scatter without numba."""
        val = np.asarray(val, np.int64)
        x_rid = np.asarray(x_rid, np.int64)
        x_ts = np.asarray(x_ts, np.float64)
        x_side = np.asarray(x_side, np.int64)
        lo = np.asarray(lo, np.int64)
        hi = np.asarray(hi, np.int64)
        tot = int((hi - lo).sum()) if lo.shape[0] else 0
        if tot == 0:
            e = np.zeros(0, np.int64)
            return e, e, np.zeros(0), np.zeros(0), e
        if ENABLED:
            a, b = np.empty(tot, np.int64), np.empty(tot, np.int64)
            ta, tb = np.empty(tot, np.float64), np.empty(tot, np.float64)
            v = np.empty(tot, np.int64)
            n = _pairs_kernel(self.rid, self.ts, self.val, self.wide, val, x_rid, x_ts, x_side, lo, hi,
                              self.window, a, b, ta, tb, v)
            return a[:n], b[:n], ta[:n], tb[:n], v[:n]
        k, y_rid, y_ts = self.match(val, x_rid, x_ts, lo, hi)
        s0 = x_side[k] == 0
        xr, xt = x_rid[k], x_ts[k]
        return (np.where(s0, xr, y_rid), np.where(s0, y_rid, xr), np.where(s0, xt, y_ts),
                np.where(s0, y_ts, xt), val[k])


def warm() -> None:
    """Load (or compile) the kernel outside any timed round: its first call in
    a process reads numba's cache (tens of ms), which a wall-clock round would
    otherwise be charged."""
    if ENABLED:
        z = np.zeros(1, np.int64)
        f = np.zeros(1, np.float64)
        _pairs_kernel(z, f, z, False, z, z, f, z, z, z, 1.0, z.copy(), z.copy(), f.copy(), f.copy(), z.copy())


def scratch_round_seconds(window: float, n: int = 64, reps: int = 5) -> float:
    """Real seconds of the fixed part of a hash round on scratch data (``n``
    arrivals per round, the numpy calls of ``PTJoin._tick_hash``'s fixed
    part: expire, add, block, the heaviest-first order, a first probe batch);
    the smallest of ``reps`` runs (the first pays first-use costs, timing
    noise is one-sided).  A prior for the measured round cost."""
    import time

    rng = np.random.default_rng(0)
    best = np.inf
    h = ValueHash(window)
    for r in range(reps):
        val = rng.integers(0, 16, n).astype(np.int64)
        side = (rng.random(n) < 0.5).astype(np.int64)
        rid = np.arange(r * n, (r + 1) * n, dtype=np.int64)
        ts = np.sort(rng.random(n)) + r
        t = time.perf_counter()
        h.expire(r - 1.0)
        h.add(val, side, rid, ts)
        lo, hi = h.block(val, side)
        o = np.lexsort((rid, lo - hi))
        np.cumsum(1.0 + (hi - lo)[o])
        k = o[:8]
        h.pairs(val[k], rid[k], ts[k], side[k], lo[k], hi[k])
        best = min(best, time.perf_counter() - t)
    return float(best)


def _pairs_kernel_py(rid, ts, sval, wide, x_val, x_rid, x_ts, x_side, lo, hi, w, out_a, out_b, out_ta, out_tb,
                     out_v):
    n = 0
    for i in range(lo.shape[0]):
        xr = x_rid[i]
        xt = x_ts[i]
        lim = xt - w
        xv = x_val[i]
        s0 = x_side[i] == 0
        for p in range(lo[i], hi[i]):
            y = rid[p]
            if y >= xr:          # the block is in rid order: the rest is newer than the probe
                break
            yt = ts[p]
            if yt > lim and (not wide or sval[p] == xv):
                if s0:
                    out_a[n] = xr
                    out_b[n] = y
                    out_ta[n] = xt
                    out_tb[n] = yt
                else:
                    out_a[n] = y
                    out_b[n] = xr
                    out_ta[n] = yt
                    out_tb[n] = xt
                out_v[n] = xv
                n += 1
    return n


_pairs_kernel = numba.njit(cache=True, nogil=True)(_pairs_kernel_py) if ENABLED else _pairs_kernel_py


def _fold(val: np.ndarray) -> np.ndarray:
    """A value in ``[-2^61, 2^61)`` per int64 value (a hash: collisions are
    told apart by the stored value)."""
    from ...summaries.hashing import hash64

    return (hash64(val, 0x5EED, "pt value hash") >> np.uint64(3)).astype(np.int64) - _LIM
