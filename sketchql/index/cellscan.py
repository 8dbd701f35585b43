"""Timestamp-bounded cell scans: compare only the ``(t_from, t_to]`` part of a cell.

A cell (zone, value bucket) of a compacted zone is the slice
``offsets[b]:offsets[b+1]`` of the zone's chunk.  Inside a bucket the tuples
stay in arrival order (:mod:`sketchql.index.zone`), which is timestamp order
whenever the stream arrived in order and the zone's chunks were concatenated
oldest first.  Then the part of a cell inside a probe's window ``(t_from,
t_to]`` is one contiguous run ``[lo, hi)`` that two searches find, and only
that run needs its values compared:

* ``lo`` = first position with ``ts > t_from``, searched only when the
  zone's oldest tuple is not already newer than ``t_from``
  (``need_lo``; else ``lo`` = the cell's start, no compare);
* ``hi`` = first position with ``ts > t_to``, looked for only when the
  zone's newest tuple is newer than ``t_to`` (``need_hi``; else the cell's
  end).

``lo`` is searched by galloping from the cell's start (the tuples cut off
are the oldest ones) -- 1, 2, 4, ... positions, then a binary search of the
last step -- so a search that removes ``k`` tuples examines about ``2
log2(k + 1) + 1`` of them.  ``hi`` is not searched: the run is read on from
``lo`` until the first tuple newer than ``t_to``, the only tuple examined
beyond the run (none at the cell's end; it is not counted again when the
search for ``lo`` already examined it: an empty run).  (Until issue 16 ``hi``
was searched by galloping back from the cell's end, ``~2 log2(k + 1) + 1``
compares to cut ``k`` newer tuples; the run is read anyway, so reading on
costs one.  Full bench, desc at 60 ms: compares without output 11.5k ->
10.0k, desc output / the Figure 11 bound 93.11 -> 93.49 %.)
The work reported (``compares``, the unit of a full scan: one tuple
examined) is the number of distinct tuples examined: those the search and
the end of the run read outside the run, plus the run ``hi - lo`` (a search
step that lands inside the run reads a tuple the run reads anyway), capped
at the cell's size (a position read twice may be counted twice by the
tally; the distinct count never exceeds the cell) -- so a bounded scan never
costs more than a full one, whose cost is what PT-Join's probe estimates
assume.  A cell whose
timestamps are not sorted (late tuples, chunks concatenated out of time
order: :func:`cells_sorted` says so per chunk) is compared in full, every
tuple's value and timestamp, as before.

Expiry cursor (``cursor``, :func:`new_cursor`; PT-Join's probes through
``StreamIndex.scan_matching_many(..., cursors=)``, issue 16): the start of
a probe's window only moves forward, yet each scan searched for it from the
cell's start again, past every tuple the window had left (full bench at 60
ms: ~70k such tuples in 11k scanned cells, ~9.7k compares; 4.7k with the
cursor).
A cursor per cell keeps ``(n, t)``: the cell's first ``n`` tuples are ``<=
t`` and the next one is newer.  A window starting at ``tf >= t`` gallops on
from the cursor, which then moves to ``(lo, tf)``: each expired tuple is
passed once (galloping, about ``2 log2(k + 1) + 1`` compares for ``k``
tuples newly expired since the cell's last scan); a window starting before
``t`` (an older probe) gallops back from the cursor, over tuples of its own
run.  Charged as above: the tuples actually examined outside the run.
Positions inside a cell do not move while chunks are only appended
(:mod:`sketchql.index.zone`); ``Zone.epoch`` changes when they may
(absorb, canonical order) and voids the cursors kept for the older epoch.

Matches are written in cell order (row by row, position order inside a
cell), exactly the tuples with ``value == key`` and ``t_from < ts <= t_to``.

>>> import numpy as np
>>> V = np.array([7, 8, 7, 7, 9], np.int64); T = np.array([1.0, 2.0, 2.0, 3.0, 1.5])
>>> off = np.array([0, 4, 5], np.int64)         # bucket 0: rows 0..3 (sorted), bucket 1: row 4
>>> cells_sorted(T, off)
True
>>> row, pos, work = scan_cells(V, T, off, np.array([0]), np.array([7]), np.array([1.0]), np.array([2.0]),
...                             np.array([True]), np.array([True]))
>>> pos.tolist(), work
([2], 4)
"""
from __future__ import annotations

import weakref

import numpy as np

try:   # pragma: no cover - numba is a hard dependency of the compiled index path
    import numba

    ENABLED = True
except Exception:   # pragma: no cover
    numba = None
    ENABLED = False


def _njit(f):
    return numba.njit(cache=True, nogil=True)(f) if ENABLED else f


@_njit
def _sorted_kernel(T, off):
    nb = off.shape[0] - 1
    for b in range(nb):
        for i in range(off[b] + 1, off[b + 1]):
            if T[i] < T[i - 1]:
                return False
    return True


def cells_sorted(ts, offsets) -> bool:
    """True iff every bucket slice ``ts[offsets[b]:offsets[b+1]]`` is non-decreasing."""
    ts = np.asarray(ts, np.float64)
    offsets = np.asarray(offsets, np.int64)
    if ENABLED:
        return bool(_sorted_kernel(ts, offsets))
    if ts.shape[0] < 2:
        return True
    bad = np.flatnonzero(np.diff(ts) < 0) + 1          # positions i with ts[i] < ts[i-1]
    return bool(np.isin(bad, offsets).all())   # a drop only where a bucket starts


#: zone -> (its compacted chunk, cells_sorted of it): checked once per chunk
#: (a chunk never changes; a zone's next compaction is a new chunk)
_SORTED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def chunk_sorted(zone, chunk) -> bool:
    """:func:`cells_sorted` of ``zone``'s compacted ``chunk``, cached per zone
    until the zone is compacted into a new chunk (one pass per chunk)."""
    hit = _SORTED.get(zone)
    if hit is not None and hit[0] is chunk:
        return hit[1]
    ok = cells_sorted(chunk.ts, chunk.offsets)
    _SORTED[zone] = (chunk, ok)
    return ok


@_njit
def _first_above_from_start(T, st, en, x, tf, tt, steps):
    """Smallest i in [st, en] with T[i] > x (T sorted on [st, en)), galloping
    from ``st``; ``steps[0]`` counts the examined tuples outside the window's
    run (``tf < T <= tt``: those are counted once, by the run); ``steps[1]``
    is set to 1 when ``T[i]`` itself was examined (0: ``i == en``)."""
    steps[1] = 0
    if st >= en:
        return st
    steps[0] += 1 if (T[st] <= tf or T[st] > tt) else 0
    if T[st] > x:
        steps[1] = 1
        return st
    prev = st          # T[prev] <= x
    step = 1
    seen = 0
    while True:
        nxt = st + step
        if nxt >= en:
            hi = en
            break
        steps[0] += 1 if (T[nxt] <= tf or T[nxt] > tt) else 0
        if T[nxt] > x:
            hi = nxt
            seen = 1
            break
        prev = nxt
        step *= 2
    lo = prev + 1      # answer in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        steps[0] += 1 if (T[mid] <= tf or T[mid] > tt) else 0
        if T[mid] > x:
            hi = mid
            seen = 1
        else:
            lo = mid + 1
    steps[1] = seen
    return lo


@_njit
def _first_above_from_end(T, st, en, x, tf, tt, steps):
    """Smallest i in [st, en] with T[i] > x (T sorted on [st, en)), galloping
    back from ``en``; counts like :func:`_first_above_from_start` (``steps[1]``:
    ``T[i]`` examined)."""
    steps[1] = 0
    if st >= en:
        return en
    steps[0] += 1 if (T[en - 1] <= tf or T[en - 1] > tt) else 0
    if T[en - 1] <= x:
        return en
    nxt_hi = en - 1    # T[nxt_hi] > x
    step = 1
    while True:
        p = en - 1 - step
        if p < st:
            lo = st
            break
        steps[0] += 1 if (T[p] <= tf or T[p] > tt) else 0
        if T[p] <= x:
            lo = p + 1
            break
        nxt_hi = p
        step *= 2
    hi = nxt_hi        # answer in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        steps[0] += 1 if (T[mid] <= tf or T[mid] > tt) else 0
        if T[mid] > x:
            hi = mid
        else:
            lo = mid + 1
    steps[1] = 1
    return lo


@_njit
def _scan_kernel(V, T, off, b, keys, tf, tt, need_lo, need_hi, srt, out_row, out_pos, cur_n, cur_t, use_cur):
    """Fill ``out_row`` / ``out_pos`` (only counted beyond their length);
    returns (matches, tuples examined).  Where the outputs have room for a
    whole run, the run is indexed unsigned (numba wraps signed indexes that
    may be negative: a compare and select per access, ~2x per tuple in the
    index's probe kernel)."""
    steps = np.zeros(2, np.int64)
    work = 0
    nm = 0
    cap = out_row.shape[0]
    for r in range(b.shape[0]):
        st = off[b[r]]
        en = off[b[r] + 1]
        if st >= en:
            continue
        key = keys[r]
        if srt:
            steps[0] = 0
            steps[1] = 0
            if not need_lo[r]:
                lo = st
            elif use_cur:
                c = st + cur_n[b[r]]
                if c > en:   # pragma: no cover - a cursor never passes its cell (reset on reorder)
                    c = st
                    cur_n[b[r]] = 0
                    cur_t[b[r]] = -np.inf
                if tf[r] >= cur_t[b[r]]:
                    # every tuple before the cursor is <= cur_t <= tf: gallop on from the cursor
                    lo = _first_above_from_start(T, c, en, tf[r], tf[r], tt[r], steps)
                    cur_n[b[r]] = lo - st
                    cur_t[b[r]] = tf[r]
                else:
                    # the cut lies before the cursor: gallop back from it (the tuples
                    # between the cut and the cursor are in the window's run)
                    lo = _first_above_from_end(T, st, c, tf[r], tf[r], tt[r], steps)
            else:
                lo = _first_above_from_start(T, st, en, tf[r], tf[r], tt[r], steps)
            if need_hi[r]:
                # the run's end: read on from its start (the run is read anyway); the first newer
                # tuple stops it and is the only one examined beyond the run -- unless the search
                # for the start already examined it (an empty run)
                hi = lo
                while hi < en and T[hi] <= tt[r]:
                    hi += 1
                if hi < en and not (hi == lo and steps[1] == 1):
                    steps[0] += 1
            else:
                hi = en
            run = hi - lo if hi > lo else 0
            # distinct tuples examined: at most the cell (a position both searches
            # read is counted twice here, hence the cap)
            work += min(steps[0] + run, en - st)
            if run > 0 and nm + run <= cap:        # room for the whole run: unsigned indexes (no wrap test)
                u = np.uint64(nm)
                for i in range(np.uint64(lo), np.uint64(hi)):
                    if V[i] == key:
                        out_row[u] = r
                        out_pos[u] = i
                        u += np.uint64(1)
                nm = np.int64(u)
                continue
            for i in range(lo, hi):
                if V[i] == key:
                    if nm < cap:
                        out_row[nm] = r
                        out_pos[nm] = i
                    nm += 1
        else:
            work += en - st
            a = tf[r]
            e = tt[r]
            if nm + (en - st) <= cap:
                u = np.uint64(nm)
                for i in range(np.uint64(st), np.uint64(en)):
                    if V[i] == key and T[i] > a and T[i] <= e:
                        out_row[u] = r
                        out_pos[u] = i
                        u += np.uint64(1)
                nm = np.int64(u)
                continue
            for i in range(st, en):
                if V[i] == key and T[i] > a and T[i] <= e:
                    if nm < cap:
                        out_row[nm] = r
                        out_pos[nm] = i
                    nm += 1
    return nm, work


def _scan_numpy(V, T, off, b, keys, tf, tt):
    """Full-cell scan (no search): every tuple of the cell compared."""
    st = off[b]
    ln = off[b + 1] - st
    tot = int(ln.sum())
    if tot == 0:
        e = np.zeros(0, np.int64)
        return e, e, 0
    rep = np.repeat(np.arange(b.shape[0]), ln)
    pos = np.arange(tot) - np.repeat(np.cumsum(ln) - ln, ln) + st[rep]
    m = (V[pos] == keys[rep]) & (T[pos] > tf[rep]) & (T[pos] <= tt[rep])
    return rep[m].astype(np.int64), pos[m].astype(np.int64), tot


def compiled_dtype(values_dtype, keys_dtype) -> bool:
    """Whether the compiled scan handles these stored values / keys (int64 or float64, same kind)."""
    vd, kd = np.dtype(values_dtype), np.dtype(keys_dtype)
    return ENABLED and vd == kd and vd in (np.dtype(np.int64), np.dtype(np.float64))


_NO_CUR_N = np.zeros(1, np.int64)
_NO_CUR_T = np.zeros(1, np.float64)


def new_cursor(n_buckets: int):
    """An expiry cursor per cell of a zone (:func:`scan_cells`'s ``cursor``):
    ``(n, t)``, cell ``b``'s first ``n[b]`` tuples have ``ts <= t[b]`` and,
    the cell being sorted, the next one is newer."""
    return np.zeros(n_buckets, np.int64), np.full(n_buckets, -np.inf)


def scan_cells(V, T, off, b, keys, tf, tt, need_lo, need_hi, srt: bool = True, cursor=None):
    """Scan rows (bucket ``b[r]``, key ``keys[r]``, window ``(tf[r], tt[r]]``)
    of one compacted chunk (module doc).  Returns ``(row, pos, compares)``:
    the input row and chunk position of every match, in cell order.  Without
    the compiled kernel (or for other dtypes) every cell is compared in full.

    ``srt`` must be :func:`cells_sorted` of the chunk (the searches assume it).
    """
    b = np.asarray(b, np.int64)
    if not compiled_dtype(V.dtype, np.asarray(keys).dtype):
        return _scan_numpy(V, T, off, b, np.asarray(keys), tf, tt)
    keys = np.asarray(keys)
    need_lo = np.asarray(need_lo, np.bool_)
    need_hi = np.asarray(need_hi, np.bool_)
    cap = max(16, int(b.shape[0]) * 4)
    while True:
        out_row = np.empty(cap, np.int64)
        out_pos = np.empty(cap, np.int64)
        if cursor is None:
            cur_n, cur_t, use = _NO_CUR_N, _NO_CUR_T, False
        else:
            cur_n, cur_t, use = cursor[0], cursor[1], True
        nm, work = _scan_kernel(V, T, off, b, keys, tf, tt, need_lo, need_hi, bool(srt), out_row, out_pos,
                                cur_n, cur_t, use)
        if nm <= cap:
            return out_row[:nm], out_pos[:nm], int(work)
        cap = int(nm)


def reference_compares(ts_cell, t_from, t_to, need_lo: bool, need_hi: bool) -> int:
    """Pure-Python count of the work :func:`scan_cells` charges for one sorted
    cell: the tuples the galloping searches examine outside the window's run,
    plus the run, at most the cell's size; for tests."""
    n = len(ts_cell)
    seen = [0]
    looked = set()

    def look(p):
        looked.add(p)
        if ts_cell[p] <= t_from or ts_cell[p] > t_to:
            seen[0] += 1
        return ts_cell[p]

    def first_above(a, e, x, from_end):
        # smallest i in [a, e] with ts > x, galloping from the start or the end
        if a >= e:
            return a if not from_end else e
        if not from_end:
            if look(a) > x:
                return a
            prev, step = a, 1
            while True:
                nxt = a + step
                if nxt >= e:
                    hi = e
                    break
                if look(nxt) > x:
                    hi = nxt
                    break
                prev, step = nxt, step * 2
            lo = prev + 1
        else:
            if look(e - 1) <= x:
                return e
            hi, step = e - 1, 1
            while True:
                p = e - 1 - step
                if p < a:
                    lo = a
                    break
                if look(p) <= x:
                    lo = p + 1
                    break
                hi, step = p, step * 2
        while lo < hi:
            mid = (lo + hi) // 2
            if look(mid) > x:
                hi = mid
            else:
                lo = mid + 1
        return lo

    lo = first_above(0, n, t_from, False) if need_lo else 0
    hi = n
    if need_hi:   # read on from the run's start; the first newer tuple is examined (once)
        hi = lo
        while hi < n and ts_cell[hi] <= t_to:
            hi += 1
        if hi < n and not (hi == lo and lo in looked):
            seen[0] += 1
    return min(seen[0] + max(0, hi - lo), n)
