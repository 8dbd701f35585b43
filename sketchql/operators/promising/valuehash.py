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
and a round is one compiled pass (:meth:`ValueHash.round`).

Why compiled: the numpy round (a merge, two ``searchsorted``, a
``lexsort``, a ``cumsum`` and the calls around them, ~30 numpy calls) cost
100-300 us per round in the bench at 100 ms -- each call ~1-2 us warm, 2-3x
that with the caches cold after the other operators' ticks --, plus ~57 us
to join the waiting batches' every column; with ~6 rounds and ~114 waiting
ticks (~3 us each) in a 1.7-1.9 ms share desc shed whole rounds (desc /
CompiledSHJ 0.60-0.94).  :meth:`ValueHash.round` and :meth:`ValueHash.pairs`
are one kernel call each (~18 + 6 us warm, ~40-80 us in situ).

State: one array of the kept arrivals ``(code, rid, ts)`` in ``(code,
rid)`` order, ``code = 2 v + side`` for the join value ``v`` (so a value's
rows of each stream are one contiguous block); rows arrive in rid order, so
new rows sorted by code (stable) and merged in after the stored rows of
their code keep the order.  Values beyond
``+-2^61`` are coded by a hash instead (``wide``), and a match then also
checks the stored value.  Expiry drops the rows with ``ts <= horizon``.

Probe of an arrival ``x`` (side ``s``, value ``v``, ``x.rid``, ``x.ts``):
the block ``[lo, hi)`` of code ``2 v + (1 - s)``, narrowed by :meth:`ValueHash.round`
to the exact partner range by binary searches, then the pairs ``y`` of the block with ``y.rid <
x.rid`` (found by the *later* member, as everywhere in PT-Join: no
duplicates) and ``y.ts > x.ts - w`` (the window; ``|x.ts - y.ts| < w``
since ``y`` is not later).  Its cost is known before the scan: ``probe +
compare * (hi - lo)`` work units, so desc can order the probes by their
exact stored partner counts (heaviest first) and stop where the account
ends.  Every pair produced is an exact join pair; with every value kept and
every arrival probed the answer is the exact join.

>>> h = ValueHash(window=10.0)
>>> side, rid, ts, val, lo, hi, cum, ccum = h.round(     # streams 0 and 1 are the two sides
...     np.array([5, 7, 5, 5, 9]), np.array([0, 0, 0, 1, 1]), 0, 1, np.array([0, 1, 2, 3, 4]),
...     np.array([0.0, 1.0, 2.0, 3.0, 4.0]), horizon=-1.0)
>>> rid.tolist(), (hi - lo).tolist()         # heaviest first: rid 3 (value 5) has 2 partners
([3, 0, 1, 2, 4], [2, 0, 0, 0, 0])
>>> i, y_rid, y_ts = h.match(val, rid, ts, lo, hi)
>>> rid[i].tolist(), y_rid.tolist()
([3, 3], [0, 2])
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
_E64 = np.zeros(0, np.int64)
_NO_CARRY = (_E64, _E64, np.zeros(0, np.float64), _E64, _E64)


def _arr(x, dtype) -> np.ndarray:
    """``x`` as a C-contiguous writable 1-d array of ``dtype`` (no copy when it is one): the
    kernels' argument types stay fixed (another dtype or a readonly array would make numba
    compile or load another specialization inside a timed round)."""
    if type(x) is np.ndarray and x.dtype == dtype and x.flags.c_contiguous and x.flags.writeable:
        return x
    return np.array(x, dtype)


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
        self._t_max = -np.inf          # newest stored ts (round: are the rows still in ts order?)
        self._mono = True              # every row so far came in non-decreasing ts (round's window search)
        self._carry = _NO_CARRY        # (side, rid, ts, val, code) of arrivals carried to the next round
        self._last = _NO_CARRY + (_E64,)   # the last round's candidates in its order (round)
        self.dropped = 0               # candidates let go unprobed (carry, round)
        self.stored = 0                # rows stored by round in all

    def __len__(self) -> int:
        return int(self.code.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.code.nbytes + self.val.nbytes + self.rid.nbytes + self.ts.nbytes)

    def _widen(self) -> None:
        self.wide = True
        ls, lr, lt, lv, lc = self._carry
        if lr.shape[0]:
            self._carry = (ls, lr, lt, lv, _fold(lv) * 2 + ls)
        if self.code.shape[0]:
            self.code = _fold(self.val) * 2 + (self.code & 1)
            o = np.argsort(self.code, kind="stable")
            self.code, self.val, self.rid, self.ts = self.code[o], self.val[o], self.rid[o], self.ts[o]

    def round(self, val, stream, s0: int, s1: int, rid, ts, horizon: float, c_probe: float = 1.0,
              c_cmp: float = 1.0):
        """One hash round's fixed part in one compiled pass (``PTJoin._tick_hash``).

        The arrivals of streams ``s0`` (side 0) and ``s1`` (side 1) -- in rid
        order, not older than the stored rows -- are stored (the rows with ``ts
        <= horizon`` expire in the same merge).  The candidates to probe are
        these arrivals and those carried from the last round (:meth:`carry`);
        each finds its exact partner range ``[lo, hi)``: the other side's rows
        of its value with ``y.rid < x.rid`` (binary search on rid inside the
        value's block) and ``y.ts > x.ts - w`` (on ts: a block in rid order is
        in ts order), so ``hi - lo`` is the number of pairs its probe yields (an
        upper bound once ``wide``: hashed codes may collide) and it costs
        ``c_probe + c_cmp * (hi - lo)``.  A carried arrival left without
        partners (they expired) is let go (``dropped``).  Returns the
        candidates heaviest first (most partners; rid order among equals):
        ``(side, rid, ts, val, lo, hi, cum, ccum)``, ``cum`` the cumulative cost
        and ``ccum`` the cumulative compares in that order; :meth:`pairs` writes
        any prefix's pairs."""
        val = _arr(val, np.int64)
        stream = _arr(stream, np.int64)
        rid = _arr(rid, np.int64)
        ts = _arr(ts, np.float64)
        code = _fold(val) * 2 + (stream == s1) if self.wide else _E64
        ls, lr, lt, lv, lc = self._carry
        r = _round_kernel(self.code, self.val, self.rid, self.ts, self._t_max, self._mono, val, stream,
                          int(s0), int(s1), rid, ts, code, self.wide, float(horizon), self.window,
                          float(c_probe), float(c_cmp), ls, lr, lt, lv, lc)
        p = r[0]
        if p < 0:   # a value beyond +-2^61: hash the codes and redo
            self._widen()
            return self.round(val, stream, s0, s1, rid, ts, horizon, c_probe, c_cmp)
        self.code, self.val, self.rid, self.ts = r[1][:p], r[2][:p], r[3][:p], r[4][:p]
        self._t_max, self._mono = r[15], r[16]
        self.stored += int(r[5].shape[0]) - int(ls.shape[0]) + int(r[17])
        self.dropped += r[17]
        self._last = (r[5], r[6], r[7], r[8], r[13], r[12])
        self._carry = _NO_CARRY
        return r[5:13]

    def carry(self, start: int, cap: int) -> int:
        """Carry the last round's candidates ``start : start + cap`` (in its order:
        the heaviest not probed) into the next round's candidates.  Those without
        partners (the order's tail) have nothing to find -- a later partner finds
        them -- and are settled; the rest beyond the cap are let go (added to
        ``dropped`` and returned)."""
        side, rid, ts, val, code, ccum = self._last
        n = rid.shape[0]
        if n and start < n:   # the candidates up to the last one with partners
            tot = int(ccum[-1])
            n = int(np.searchsorted(ccum, tot, "left")) + 1 if tot > 0 else 0
        stop = min(n, start + max(int(cap), 0))
        self._carry = (side[start:stop], rid[start:stop], ts[start:stop], val[start:stop], code[start:stop]) \
            if stop > start else _NO_CARRY
        gone = max(n - max(stop, start), 0)
        self.dropped += gone
        return gone

    @property
    def carried(self) -> int:
        """Arrivals carried into the next round (not probed yet)."""
        return int(self._carry[1].shape[0])

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
        if ENABLED:
            return _pairs_alloc(self.rid, self.ts, self.val, self.wide, _arr(val, np.int64), _arr(x_rid, np.int64),
                                _arr(x_ts, np.float64), _arr(x_side, np.int64), _arr(lo, np.int64),
                                _arr(hi, np.int64), self.window)
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
        k, y_rid, y_ts = self.match(val, x_rid, x_ts, lo, hi)
        s0 = x_side[k] == 0
        xr, xt = x_rid[k], x_ts[k]
        return (np.where(s0, xr, y_rid), np.where(s0, y_rid, xr), np.where(s0, xt, y_ts),
                np.where(s0, y_ts, xt), val[k])


def warm() -> None:
    """Load (or compile) the kernels outside any timed round: their first call in
    a process reads numba's cache (tens of ms), which a wall-clock round would
    otherwise be charged."""
    if ENABLED:
        z = np.zeros(1, np.int64)
        f = np.zeros(1, np.float64)
        _pairs_kernel(z, f, z, False, z, z, f, z, z, z, 1.0, z.copy(), z.copy(), f.copy(), f.copy(), z.copy())
        h = ValueHash(1.0)
        side, rid, ts, val, lo, hi, cum, ccum = h.round(z, z, 0, 1, z, f, -1.0)
        h.pairs(val, rid, ts, side, lo, hi)


def scratch_round_seconds(window: float, n: int = 64, reps: int = 5) -> float:
    """Real seconds of the fixed part of a hash round on scratch data (``n``
    arrivals per round: :meth:`ValueHash.round` and a first probe batch's
    :meth:`ValueHash.pairs`); the smallest of ``reps`` runs (the first pays
    first-use costs, timing noise is one-sided).  A prior for the measured
    round cost."""
    import time

    rng = np.random.default_rng(0)
    best = np.inf
    h = ValueHash(window)
    for r in range(reps):
        val = rng.integers(0, 16, n).astype(np.int64)
        stream = (rng.random(n) < 0.5).astype(np.int64)
        rid = np.arange(r * n, (r + 1) * n, dtype=np.int64)
        ts = np.sort(rng.random(n)) + r
        t = time.perf_counter()
        side, rid, ts, val, lo, hi, cum, ccum = h.round(val, stream, 0, 1, rid, ts, r - 1.0)
        np.searchsorted(cum, 8.0, "right")
        h.pairs(val[:8], rid[:8], ts[:8], side[:8], lo[:8], hi[:8])
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


def _pairs_alloc_py(rid, ts, sval, wide, x_val, x_rid, x_ts, x_side, lo, hi, w):
    """:func:`_pairs_kernel` with its output arrays allocated inside (one call per probe batch)."""
    tot = 0
    for i in range(lo.shape[0]):
        if hi[i] > lo[i]:
            tot += hi[i] - lo[i]
    a = np.empty(tot, np.int64)
    b = np.empty(tot, np.int64)
    ta = np.empty(tot, np.float64)
    tb = np.empty(tot, np.float64)
    v = np.empty(tot, np.int64)
    n = _pairs_kernel(rid, ts, sval, wide, x_val, x_rid, x_ts, x_side, lo, hi, w, a, b, ta, tb, v)
    return a[:n], b[:n], ta[:n], tb[:n], v[:n]


_pairs_alloc = numba.njit(cache=True, nogil=True)(_pairs_alloc_py) if ENABLED else _pairs_alloc_py


def _bsearch(arr, lo, hi, x, right):
    """First index in ``[lo, hi)`` of the sorted ``arr`` with ``arr[i] > x`` (``right``) / ``>= x``."""
    while lo < hi:
        h = (lo + hi) >> 1
        if arr[h] < x or (right and arr[h] == x):
            lo = h + 1
        else:
            hi = h
    return lo


_bsearch_py = _bsearch
_bsearch = numba.njit(cache=True, nogil=True)(_bsearch_py) if ENABLED else _bsearch_py


def _round_kernel_py(code, sval, srid, sts, t_max, mono_in, in_val, in_stream, s0, s1, in_rid, in_ts, in_code,
                     wide, horizon, w, c_probe, c_cmp, l_side, l_rid, l_ts, l_val, l_code):
    n_in = in_val.shape[0]
    m = 0
    for i in range(n_in):
        if in_stream[i] == s0 or in_stream[i] == s1:
            m += 1
    x_val = np.empty(m, np.int64)
    x_side = np.empty(m, np.int64)
    x_rid = np.empty(m, np.int64)
    x_ts = np.empty(m, np.float64)
    x_code = np.empty(m, np.int64)
    k = 0
    mono = mono_in              # rows come in rid order with non-decreasing ts (the window search needs it)
    last = t_max
    for i in range(n_in):
        st = in_stream[i]
        if st != s0 and st != s1:
            continue
        s = 1 if st == s1 else 0
        v = in_val[i]
        if not wide and (v >= _LIM or v < -_LIM):
            return -1, code, sval, srid, sts, x_side, x_rid, x_ts, x_val, x_side, x_side, x_ts, x_side, \
                x_side, t_max, t_max, False, 0
        x_val[k] = v
        x_side[k] = s
        x_rid[k] = in_rid[i]
        t = in_ts[i]
        x_ts[k] = t
        if not (t >= last):
            mono = False
        last = max(last, t)
        x_code[k] = in_code[i] if wide else 2 * v + s
        k += 1
    o = np.argsort(x_code, kind="mergesort")
    # merge: the stored rows at or before the horizon are dropped; new rows go after the stored
    # rows of their code (they are later in rid)
    n = code.shape[0]
    nc = np.empty(n + m, np.int64)
    nv = np.empty(n + m, np.int64)
    nr = np.empty(n + m, np.int64)
    nt = np.empty(n + m, np.float64)
    i = 0
    j = 0
    p = 0
    t_min = np.inf
    while i < n or j < m:
        if j >= m or (i < n and code[i] <= x_code[o[j]]):
            if sts[i] > horizon:
                nc[p] = code[i]
                nv[p] = sval[i]
                nr[p] = srid[i]
                nt[p] = sts[i]
                t_min = min(t_min, sts[i])
                p += 1
            i += 1
        else:
            q = o[j]
            nc[p] = x_code[q]
            nv[p] = x_val[q]
            nr[p] = x_rid[q]
            nt[p] = x_ts[q]
            t_min = min(t_min, x_ts[q])
            p += 1
            j += 1
    # the candidates in rid order: the carried arrivals (stored already, sorted by rid), then the new
    nl = l_rid.shape[0]
    lo_ = np.argsort(l_rid, kind="mergesort")
    c = nl + m
    c_side = np.empty(c, np.int64)
    c_rid = np.empty(c, np.int64)
    c_ts = np.empty(c, np.float64)
    c_val = np.empty(c, np.int64)
    c_code = np.empty(c, np.int64)
    for z in range(nl):
        q = lo_[z]
        c_side[z] = l_side[q]
        c_rid[z] = l_rid[q]
        c_ts[z] = l_ts[q]
        c_val[z] = l_val[q]
        c_code[z] = l_code[q]
    for z in range(m):
        c_side[nl + z] = x_side[z]
        c_rid[nl + z] = x_rid[z]
        c_ts[nl + z] = x_ts[z]
        c_val[nl + z] = x_val[z]
        c_code[nl + z] = x_code[z]
    # each one's partners: the other side's rows of its value (code ^ 1), older than it (rid) and in
    # its window (ts > t - w): two binary searches for the value's block, two inside it (a block is in
    # rid order, hence in ts order)
    lo = np.empty(c, np.int64)
    hi = np.empty(c, np.int64)
    neg = np.empty(c, np.int64)
    keep = np.ones(c, np.bool_)
    dropped = 0
    for q in range(c):
        cc = c_code[q] ^ 1
        blo = _bsearch(nc, 0, p, cc, False)
        bhi = _bsearch(nc, blo, p, cc, True)
        e = _bsearch(nr, blo, bhi, c_rid[q], False)
        a = _bsearch(nt, blo, e, c_ts[q] - w, True) if mono else blo
        lo[q] = a
        hi[q] = e
        neg[q] = a - e
        if q < nl and e == a:   # a carried arrival left without partners: nothing to probe
            keep[q] = False
            neg[q] = 1
            dropped += 1
    # heaviest first (most partners), rid order among equals (a stable sort of the rid-ordered candidates)
    order = np.argsort(neg, kind="mergesort")
    r = c - dropped
    r_side = np.empty(r, np.int64)
    r_rid = np.empty(r, np.int64)
    r_ts = np.empty(r, np.float64)
    r_val = np.empty(r, np.int64)
    r_lo = np.empty(r, np.int64)
    r_hi = np.empty(r, np.int64)
    r_code = np.empty(r, np.int64)
    cum = np.empty(r, np.float64)
    ccum = np.empty(r, np.int64)
    acc = 0.0
    cc = 0
    for z in range(r):
        q = order[z]
        r_side[z] = c_side[q]
        r_rid[z] = c_rid[q]
        r_ts[z] = c_ts[q]
        r_val[z] = c_val[q]
        r_lo[z] = lo[q]
        r_hi[z] = hi[q]
        r_code[z] = c_code[q]
        d = hi[q] - lo[q]
        acc += c_probe + c_cmp * d
        cc += d
        cum[z] = acc
        ccum[z] = cc
    return p, nc, nv, nr, nt, r_side, r_rid, r_ts, r_val, r_lo, r_hi, cum, ccum, r_code, t_min, last, mono, dropped


_round_kernel = numba.njit(cache=True, nogil=True)(_round_kernel_py) if ENABLED else _round_kernel_py


def _fold(val: np.ndarray) -> np.ndarray:
    """A value in ``[-2^61, 2^61)`` per int64 value (a hash: collisions are
    told apart by the stored value)."""
    from ...summaries.hashing import hash64

    return (hash64(val, 0x5EED, "pt value hash") >> np.uint64(3)).astype(np.int64) - _LIM
