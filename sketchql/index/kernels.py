"""Compiled (numba) kernels of the index's probe side.

The numpy query path (:mod:`sketchql.index.query`, ``StreamIndex.probe_many``
with ``use_kernels=False``) answers a probe batch with ~150 numpy calls
(hashing, the speculative pyramid descent, the gather of the surviving
cells) plus a view rebuild/patch after every ingest.  At the default stream
rate (a 60 s window holds ~600 tuples, a 5 s probe batch ~50 probes) those
calls cost far more than the work they do, so the compiled path does the
same computation in a few loops over an incrementally maintained view
(:mod:`sketchql.index.kview`):

- :func:`probe_kview`: hashing of the probe keys (the fused hash of
  :class:`~sketchql.index.hasher.CellHasher`, bit for bit, also available
  alone as :func:`hash_cells`), then per granularity, per probe, a *real*
  top-down descent of the pyramid: nodes of a granularity are stored leaves
  first and root last, so walking them backwards visits every parent before
  its children; a node is reached iff its parent passed (a root always is);
  a reached node overlapping the probe's window (``lo <= t_to`` and ``hi >
  t_from``) costs one estimate (``visited``) = the median over the d rows of
  ``sign * counter`` and passes iff the estimate reaches its threshold
  ``max(min_estimate, prune_sigma sqrt(F2 / w))``.  A passing leaf is a
  region; its cell (leaf, bucket) is then scanned and every tuple with the
  probe's value and ``t_from < ts <= t_to`` is a match.  This equals the
  level-by-level descent (``StreamIndex._promising_regions_levelwise``) and
  the speculative numpy descent: same regions in the same order
  (granularity, probe, slot), same matches in the same order (region by
  region, cell order), same ``visited`` / ``flat`` / ``work`` counters; only
  unreached nodes are never estimated.  With ``sketch=False`` (structure
  T1, no summaries) every overlapping non-empty zone is a region.
- :func:`probe_packed`: the entry point the index calls: :func:`probe_kview` with the view's and
  the output buffers' arrays read from int64 descriptors (:func:`pack_view`, :func:`pack_arena`,
  :func:`pack_bufs`) instead of passed one by one (numba unboxes every argument at every call),
  and a deferred hot-zone refresh (:func:`refresh_hot_packed`) applied first.
- :func:`scan_window`: the raw-window join of structure T1 (paper Figure 9):
  the window's tuples sorted by time, per probe a binary search of
  ``(t_from, t_to]`` and a linear comparison of the values in it
  (one kernel, :func:`scan_window_emit`, writing the matching tuples).
- maintenance helpers: :func:`seg_append` / :func:`seg_relayout` (the hot zone's
  per-bucket segments), :func:`pyramid_ranges`, :func:`row_norms_into` /
  :func:`row_median_into` (exact row norms and F2 medians of pyramid nodes),
  :func:`refresh_gran` (ranges + F2 of one granularity's view part, fused),
  :func:`concat_perm` (merging a zone's chunks).  Each has a numpy
  equivalent used when ``ENABLED`` is False (the tests compare both).

Outputs are written into caller-provided arrays; when those are too small
the kernel only counts and the wrapper (:func:`probe_k`, :func:`scan_k`,
:func:`scan_window`) retries with larger ones (growing arrays inside a
loop would make numba reference-count them at every iteration).  The
index keeps them in a :class:`BufferPool` (recycled between calls, large
results borrow them instead of being copied out).

Threads: every kernel called from Python is ``nogil=True`` (array code only, no Python
objects), so ingest and probes do not hold the GIL while they run (a service's event loop runs
beside its apply thread); callers still serialize access to one index.

Compile time: every kernel is ``@numba.njit(cache=True)``.  The first use in
a fresh clone compiles them: ~10 s for all of them on this shared 2-core
machine (measured: the probe kernel ~4 s for int64 values + ~2 s for
float64, the hash ~1.7 s, every other kernel 0.2-0.4 s), once: the machine
code is then cached in ``sketchql/index/__pycache__``, and later processes
load it (~0.8 s including importing numba).  (Do not run this file as a
top-level script, e.g. ``python -m doctest kernels.py``: numba would cache
the kernels under the module name ``kernels``; use ``pytest
--doctest-modules sketchql/index``.)
:func:`warm_up` forces that compile/load for the types the index uses (int64
and float64 values), e.g. before a timed region; without it the first probe
pays it.  Values are compared in their stored dtype; the compiled probe is
used for int64 and float64 stored values with keys of the same kind (other
dtypes and strings use the numpy path automatically).  Set ``ENABLED =
False`` (or the environment variable ``SKETCHQL_NO_NUMBA=1`` before import)
to force the numpy paths everywhere.

>>> import numpy as np
>>> V = np.array([3, 5, 3, 3]); T = np.array([1.0, 2.0, 3.0, 4.0])
>>> n, mp, mj, work = scan_window(V, T, np.array([3]), np.array([1.0]), np.array([4.0]))
>>> int(n), mj[:n].tolist(), int(work)          # (1, 4]: ts=1 excluded
(2, [2, 3], 3)
"""
from __future__ import annotations

import mmap
import os
import sys

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

ENABLED = os.environ.get("SKETCHQL_NO_NUMBA", "") in ("", "0")

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def _exact(a):
    """Compile-time: whether values of array ``a`` equal under ``==`` are the same value (integers; not
    floats: 0.0 == -0.0).  Then a match's value is the probe key and is written as a fill."""


@overload(_exact)
def _exact_impl(a):
    r = isinstance(a.dtype, types.Integer)
    return lambda a: r


@numba.njit(cache=True, inline="always")
def _mix(z):
    z = z ^ (z >> _S30)
    z = z * _M1
    z = z ^ (z >> _S27)
    z = z * _M2
    return z ^ (z >> _S31)


@numba.njit(cache=True, nogil=True)
def _hash_into(codes, hp, B, bucket, idx, sgn):
    """:func:`hash_cells` into given arrays, parameters packed as in :func:`probe_kview`."""
    d = idx.shape[0]
    logw = np.int64(hp[3])
    shift = hp[2]
    w = np.int64(1) << logw
    wm = w - 1
    ub = np.uint64(B)
    pow2 = (B & (B - 1)) == 0
    for i in range(codes.shape[0]):
        c = codes[i]
        if B == 1:
            bucket[i] = 0
        elif pow2:
            bucket[i] = np.int64(_mix(c + hp[0]) & (ub - np.uint64(1)))
        else:
            bucket[i] = np.int64(_mix(c + hp[0]) % ub)
        hs = _mix(c + hp[1])
        for r in range(d):
            z = np.int64((hs * hp[4 + r]) >> shift)
            sgn[r, i] = 1 - 2 * (z >> logw)
            idx[r, i] = (z & wm) + r * w


def hash_cells(codes, off_b, off_s, mult, shift, logw, B):
    """(bucket (P,), idx (d, P) = r w + col, sgn (d, P)) of uint64 key codes, as
    ``CellHasher._fused`` computes them (the hash :func:`probe_kview` runs on its keys)."""
    P, d = len(codes), len(mult)
    hp = np.concatenate([np.array([off_b, off_s, shift, logw], dtype=np.uint64),
                         np.asarray(mult, dtype=np.uint64)])
    bucket = np.zeros(P, dtype=np.int64)
    idx = np.zeros((d, P), dtype=np.int64)
    sgn = np.zeros((d, P), dtype=np.int64)
    _hash_into(np.ascontiguousarray(codes, dtype=np.uint64), hp, int(B), bucket, idx, sgn)
    return bucket, idx, sgn


@numba.njit(cache=True)
def _insert_sorted(rows, r, x):
    """Insertion step: ``rows[:r]`` is sorted; place ``x`` so that ``rows[:r + 1]`` is."""
    j = r - 1
    while j >= 0 and rows[j] > x:
        rows[j + 1] = rows[j]
        j -= 1
    rows[j + 1] = x


@numba.njit(cache=True, inline="always")
def _median5(a, b, c, d, e):
    """Median of five values with min/max and selects only (no data-dependent branches to mispredict).

    Sort the pairs (a, b), (c, d); the smaller of the two minima has three larger values, so it is
    below the median: replace it by e and repeat; the median is then the smallest of the three left.
    """
    a, b = min(a, b), max(a, b)
    c, d = min(c, d), max(c, d)
    s = a < c                                          # make c the smaller minimum
    a, b, c, d = (c if s else a), (d if s else b), (a if s else c), (b if s else d)
    c, d = min(e, d), max(e, d)                        # c (rank <= 2) replaced by e
    s = a < c
    a, b, c, d = (c if s else a), (d if s else b), (a if s else c), (b if s else d)
    return min(a, d)                                   # the smallest of a <= b and d


@numba.njit(cache=True, nogil=True)
def _key_groups(keys, gid):
    """``gid[p]`` = the group of probe p's key, groups numbered in order of first appearance, two keys
    in one group iff their 64 bits are equal (so they also hash alike); ``gid[p] = -1`` for a key no
    other probe of the batch carries.  Open addressing on ``_mix`` of the bits, table >= 2P slots:
    O(P).  Returns the number of groups of two or more probes."""
    P = keys.shape[0]
    kb = keys.view(np.uint64)
    cap = 16
    while cap < 2 * P:
        cap <<= 1
    msk = np.uint64(cap - 1)
    slot = np.full(cap, -1, dtype=np.int64)
    first = np.empty(P, dtype=np.int64)          # per raw group: its first probe
    size = np.zeros(P, dtype=np.int64)
    ng = 0
    for p in range(P):
        x = kb[p]
        h = _mix(x) & msk
        while True:
            sl = slot[h]
            if sl < 0:
                slot[h] = ng
                first[ng] = p
                gid[p] = ng
                ng += 1
                break
            if kb[first[np.uint64(sl)]] == x:
                gid[p] = sl
                break
            h = (h + np.uint64(1)) & msk
    for p in range(P):
        size[np.uint64(gid[p])] += 1
    renum = np.full(ng, -1, dtype=np.int64)
    n2 = 0
    for g in range(ng):
        if size[g] > 1:
            renum[g] = n2
            n2 += 1
    for p in range(P):
        gid[p] = renum[np.uint64(gid[p])]
    return n2


#: above this many (node, key group) pairs the matching does not share cell scans per key (memory)
SHARE_MAX = 1 << 20
#: batches of fewer probes do not share work per key: few repeats, and the grouping's tables cost about
#: what they save (a ~50-probe batch at ~600 tuples per window, ~3 outputs per probe: warm kernel
#: 6.5-6.7 us grouped vs 6.4-6.5 not)
SHARE_MIN_P = 64


@numba.njit(cache=True, inline="always")
def _first_above(T, lo, n, x):
    """The first i in [lo, lo + n) with ``T[i] > x`` (lo + n if none); ``T[lo:lo+n]`` non-decreasing."""
    a = lo
    b = lo + n
    while a < b:
        m = (a + b) >> np.uint64(1)
        if T[m] > x:
            b = m
        else:
            a = m + np.uint64(1)
    return a


@numba.njit(cache=True, nogil=True)
def _match_regions(nr, rp, rk, bucket, keys, tf, tt, B, hot_k, clen, cstart,
                   Vc, Tc, Rc, HV, HT, HR, hstart, mp, rend, mv, mt, mr, gid, ng, ct, cr):
    """The matching half of :func:`probe_kview`: regions ``0 .. nr - 1`` (probe ``rp``, node ``rk``) in
    order, each cell's tuples with the probe's value and ``t_from < ts <= t_to`` appended to the match
    arrays (beyond their length only counted), region r's ending at ``rend[r]`` (its region row is
    not written per match: :class:`~sketchql.index.results.Matches` expands it from ``rend`` when
    asked); returns the number of matches.  A cold cell is
    ``Vc/Tc/Rc[cstart[c]:][:clen[c]]``, a cell of the hot leaf ``HV/HT/HR[hstart[b]:][:clen[c]]`` (its
    bucket's segment of the hot arena): both contiguous, in arrival order.

    Indexes whose sign the compiler cannot prove (cell starts, probe rows read from arrays) are
    unsigned: numba wraps a signed index that may be negative (a compare and select per access, and
    the extra live values spill registers), which made this loop ~2x slower per tuple.  The scan
    loop writes only the per-tuple columns (ts, row id; the value too for float values, where
    ``==`` does not make the bits equal); the region's constant columns (probe, and
    the value = the key for integers) are filled after it, in loops the compiler vectorizes.

    Probes of one key share their cell scans (integer values; ``gid`` >= 0: the probe's key group
    among the ``ng`` keys that two or more probes of the batch carry, :func:`_key_groups`): the
    first region of a (node, key group) pair compares the cell's values with the key once and
    copies the equal tuples' (ts, row id) into the scratch ``ct``/``cr`` (cell order kept; while
    the scratch has room), noting whether their ts are non-decreasing (a cell holds its tuples in
    arrival order: in time order unless out-of-order tuples were routed to it).  Every region of
    that pair then takes its matches from that run: when sorted, the window ``(t_from, t_to]`` is
    the sub-run between two binary searches, copied (ts, row ids) and filled (probe, value) in one
    loop; otherwise each entry's ts is checked.  One loop per region rather than one per column:
    after an ingest the branch predictor does not know the regions' lengths, and every short loop's
    exit mispredicts once per region (~740 regions per 6k batch): with the copies and fills in one
    loop (and the two fills of an unshared region in one) the kernel after the ingests took ~5%
    less (in-situ kernel sums 819/829 -> 778 us over the 6 --quick 6k calls, 16 runs each, copies
    of the old kernel compiled alike: 837-839), the same warm (the repeat knows the lengths).  Same matches, same order as the per-probe scan (equal
    keys are equal values for integers).  A 5 s batch at ~6,000 tuples per window has ~500 probes
    of ~200 keys; the Zipf-hot keys carry most of the output and most of the probes.
    """
    cap_m = mp.shape[0]
    nm = 0
    cap_c = ct.shape[0] if ng > 0 and _exact(Vc) else 0
    nl = clen.shape[0] // B if B > 0 else 0
    if cap_c > 0 and nl * ng <= SHARE_MAX:
        cst = np.full(nl * ng, -1, dtype=np.int64)      # (node, group) -> run start in ct/cr, -1: not yet
        cln = np.empty(nl * ng, dtype=np.int64)
        csr = np.empty(nl * ng, dtype=np.int64)         # run sorted by ts (1) or not (0)
    else:                                               # (no sharing: no allocation, empty views)
        cap_c = 0
        cst = gid[:0]
        cln = gid[:0]
        csr = gid[:0]
    nc = np.uint64(0)
    for r in range(nr):
        p = rp[r]
        up = np.uint64(p)
        k = rk[r]
        b = bucket[up]
        key = keys[up]
        a = tf[up]
        e = tt[up]
        c = k * B + b
        n = clen[np.uint64(c)]
        if k == hot_k:
            V_ = HV
            T_ = HT
            R_ = HR
            s = hstart[np.uint64(b)]
        else:
            V_ = Vc
            T_ = Tc
            R_ = Rc
            s = cstart[np.uint64(c)]
        gp = gid[up] if cap_c > 0 else -1
        if gp >= 0:
            mi = np.uint64(k * ng + gp)
            cs = cst[mi]
            if cs < 0 and nc + np.uint64(n) <= np.uint64(cap_c):     # first region of (node, key)
                u = nc
                last = -np.inf
                srt = True
                # branch-free (room checked above): every tuple is written at the run's end, which advances
                # on a match (whether a tuple matches is data: a branch per tuple mispredicts in situ)
                for j in range(np.uint64(s), np.uint64(s + n)):
                    t = T_[j]
                    ct[u] = t
                    cr[u] = R_[j]
                    hit = V_[j] == key
                    srt &= (t >= last) | (not hit)
                    last = t if hit else last
                    u += np.uint64(hit)
                cs = np.int64(nc)
                cst[mi] = cs
                cln[mi] = np.int64(u - nc)
                csr[mi] = 1 if srt else 0
                nc = u
            if cs >= 0:
                ucs = np.uint64(cs)
                ln = np.uint64(cln[mi])
                u0 = np.uint64(nm)
                if csr[mi] != 0:
                    j0 = _first_above(ct, ucs, ln, a)
                    j1 = _first_above(ct, j0, ucs + ln - j0, e)
                    cnt = j1 - j0
                    if u0 + cnt <= np.uint64(cap_m):
                        for q in range(cnt):            # (one loop for the four columns: see the docstring)
                            mt[u0 + q] = ct[j0 + q]
                            mr[u0 + q] = cr[j0 + q]
                            mp[u0 + q] = p
                            mv[u0 + q] = key
                    u = u0 + cnt
                else:
                    u = u0
                    for j in range(ucs, ucs + ln):
                        t = ct[j]
                        if t > a and t <= e:
                            if u < np.uint64(cap_m):
                                mt[u] = t
                                mr[u] = cr[j]
                            u += np.uint64(1)
                if u <= np.uint64(cap_m) and csr[mi] == 0:
                    for q in range(u0, u):
                        mp[q] = p
                    for q in range(u0, u):
                        mv[q] = key
                nm = np.int64(u)
                rend[r] = nm
                continue
        if nm + n <= cap_m:
            u0 = np.uint64(nm)
            u = u0
            for j in range(np.uint64(s), np.uint64(s + n)):
                if V_[j] == key:
                    t = T_[j]
                    if t > a and t <= e:
                        if not _exact(V_):
                            mv[u] = V_[j]
                        mt[u] = t
                        mr[u] = R_[j]
                        u += np.uint64(1)
            if _exact(V_):                    # the region's constant columns: a vectorized fill
                for q in range(u0, u):
                    mp[q] = p
                    mv[q] = key
            else:
                for q in range(u0, u):
                    mp[q] = p
            nm = np.int64(u)
            rend[r] = nm
        else:
            for j in range(s, s + n):
                if V_[j] == key:
                    t = T_[j]
                    if t > a and t <= e:
                        if nm < cap_m:
                            mp[nm] = p
                            mv[nm] = V_[j]
                            mt[nm] = t
                            mr[nm] = R_[j]
                        nm += 1
        rend[r] = nm
    return nm


@numba.njit(cache=True, nogil=True)
def probe_kview(min_est, sigma, keys, hp, bucket, idx, sgn, tf, tt,
                sketch, store, F2, wcols, bdw, dw, lo, hi, parent, leaf, gstart, B, cstart, clen,
                Vc, Tc, Rc, hot_k, HV, HT, HR, hstart,
                rp, rk, rest, rend, mp, mv, mt, mr, ct, cr):
    """Descent + matching of a probe batch over a :class:`~sketchql.index.kview.KernelView`.

    Node k's table is ``store[k]`` (all store nodes, empty ones with an empty
    range); the threshold of (k, b) is ``max(min_est, sigma * sqrt(max(F2[k,
    b], 0) / wcols))``; the cells of the hot leaf ``hot_k`` are the
    per-bucket segments of the arena (``HV``/``HT``/``HR`` from ``hstart[b]``, length
    ``clen``), the others the CSR ``cstart``/``clen`` into ``Vc``/``Tc``/``Rc``: every cell is
    read sequentially (the arena keeps each bucket's tuples contiguous as they arrive, see
    :class:`~sketchql.index.kview.HotArena`; it was a linked list per bucket, laid out in cell
    order by the probe whenever the arena had grown: ~8 ns per hot tuple after an ingest).
    Fills regions (``rp`` probe, ``rk`` node, ``rest`` raw estimate) and
    matches (``mp`` probe, ``mv``/``mt``/``mr`` value, ts, row id; region r's matches end at
    ``rend[r]``).  Returns (n_regions, n_matches, visited, flat, work);
    outputs beyond the arrays' length are only counted (see :func:`probe_k`),
    except that matches are found only once every region fits (they are
    found region by region from the region arrays, :func:`_match_regions`,
    after the whole descent: n_matches is 0 while the regions overflow).
    Two phases instead of matching inside the descent loop, and unsigned
    indexes where the sign is not provable: the fused loop kept ~40 values
    live and spilled them on every tuple (same regions, matches and order;
    warm kernel at ~6,000 tuples per window ~134 -> ~85 us per 534-probe
    batch).
    ``hp`` (uint64): empty, or the fused hash parameters ``[off_b, off_s,
    shift, logw, mult_0 .. mult_{d-1}]``: then ``bucket``/``idx``/``sgn``
    (buffers of at least P columns) are first filled from the key codes
    ``keys.view(uint64)`` as :func:`hash_cells` does.
    Probes of one key (equal 64 bits, :func:`_key_groups`; with sketches only: structure T1's raw
    zone scan stays per probe) share their work: a node's estimate and pass/fail for a key is
    computed by its first probe that reaches the node and reused by the others (``visited`` still
    counts one estimate per (probe, node) reached, as the reference does), and ``ct``/``cr`` are
    the scratch (ts, row id) of their shared cell scans (see :func:`_match_regions`; empty: no
    sharing of scans).
    """
    P = keys.shape[0]
    N = lo.shape[0]
    d = idx.shape[0]
    if sketch and hp.shape[0]:
        _hash_into(keys.view(np.uint64), hp, B, bucket, idx, sgn)
    cap_r = rp.shape[0]
    passed = np.zeros(N, dtype=np.bool_)
    est = np.zeros(N, dtype=np.float64)
    rows = np.empty(d, dtype=np.int64)
    share = sketch and P >= SHARE_MIN_P
    gid = np.empty(P if share else 0, dtype=np.int64)
    ng = _key_groups(keys, gid) if share else 0
    if ng > 0:
        memo = np.zeros(N * ng, dtype=np.int64)   # (node, key group): 0 not yet, 1 passed, 2 pruned
        mest = np.empty(N * ng, dtype=np.float64)
    else:
        memo = gid[:0]
        mest = est[:0]
    nr = 0
    nm = 0
    visited = 0
    flat = 0
    work = 0
    for g in range(gstart.shape[0] - 1):
        g0 = gstart[g]
        g1 = gstart[g + 1]
        for p in range(P):
            a = tf[p]
            e = tt[p]
            b = bucket[p]
            ub = np.uint64(b)
            gp = gid[p] if ng > 0 else -1
            for k in range(g1 - 1, g0 - 1, -1):
                uk = np.uint64(k)
                ok = hi[uk] > a and lo[uk] <= e
                if ok and leaf[uk]:
                    flat += 1
                par = parent[uk]
                if not (ok and (par < 0 or passed[np.uint64(par)])):
                    passed[uk] = False
                    continue
                visited += 1
                if not sketch:
                    passed[uk] = True
                    continue
                mi = np.uint64(k * ng + gp)
                if gp >= 0:
                    st = memo[mi]
                    if st != 0:                 # this key's estimate at this node: known from an earlier probe
                        est[uk] = mest[mi]
                        passed[uk] = st == 1
                        continue
                o = np.uint64(k * bdw + b * dw)
                if d == 5:                      # branchless median of 5 (the default d)
                    m = np.float64(_median5(store[o + np.uint64(idx[0, p])] * sgn[0, p],
                                            store[o + np.uint64(idx[1, p])] * sgn[1, p],
                                            store[o + np.uint64(idx[2, p])] * sgn[2, p],
                                            store[o + np.uint64(idx[3, p])] * sgn[3, p],
                                            store[o + np.uint64(idx[4, p])] * sgn[4, p]))
                else:
                    for r in range(d):
                        _insert_sorted(rows, r, store[o + idx[r, p]] * sgn[r, p])
                    if d % 2:
                        m = np.float64(rows[d // 2])
                    else:
                        m = (np.float64(rows[d // 2 - 1]) + np.float64(rows[d // 2])) / 2.0
                est[uk] = m
                thr = sigma * np.sqrt(max(F2[uk, ub], 0.0) / wcols)
                if thr < min_est:
                    thr = min_est
                passed[uk] = m >= thr
                if gp >= 0:
                    mest[mi] = m
                    memo[mi] = 1 if m >= thr else 2
            for k in range(g0, g1):
                uk = np.uint64(k)
                if not (leaf[uk] and passed[uk]):
                    continue
                if nr < cap_r:
                    rp[nr] = p
                    rk[nr] = k
                    rest[nr] = est[uk]
                work += clen[np.uint64(k * B + b)]
                nr += 1
    if nr <= cap_r:
        nm = _match_regions(nr, rp, rk, bucket, keys, tf, tt, B, hot_k, clen, cstart,
                            Vc, Tc, Rc, HV, HT, HR, hstart, mp, rend, mv, mt, mr, gid, ng, ct, cr)
    return nr, nm, visited, flat, work


# -- packed arguments -----------------------------------------------------------------------------
# numba's dispatcher types and unboxes every argument at every call: ~45 ns per array argument warm,
# about twice that after an ingest (cold caches), i.e. ~5 us per probe call with probe_kview's 41
# arguments.  The arrays a view or a buffer set binds change only when they are reallocated, so
# their addresses and sizes are written once into an int64 *descriptor* (:func:`pack_view`,
# :func:`pack_bufs`, :func:`pack_hot`) and the per-call entry points (:func:`probe_packed`,
# :func:`refresh_hot_packed`) rebuild the arrays from it inside compiled code (``numba.carray``: no
# copy).  The owner of a descriptor keeps references to the arrays it describes (KernelView.args,
# ProbeBuffers, KernelView._fast) and packs again whenever it replaces one of them.

#: view descriptor (:func:`pack_view`): array slots (address at 2 i, size at 2 i + 1), then scalars
_V_STORE, _V_F2, _V_LO, _V_HI, _V_PARENT, _V_LEAF, _V_GSTART, _V_CSTART, _V_CLEN, _V_VC, _V_TC, _V_RC, _V_HV, \
    _V_HT, _V_HR, _V_HSTART, _V_HP = range(17)
_V_SKETCH, _V_W, _V_BDW, _V_DW, _V_B, _V_HOTK, _V_F2C = range(40, 47)
VIEW_DESC = 48
#: buffer descriptor (:func:`pack_bufs`)
_B_RP, _B_RK, _B_REST, _B_REND, _B_MP, _B_MV, _B_MT, _B_MR, _B_CT, _B_CR, _B_BUCKET, _B_IDX, _B_SGN = range(13)
_B_D, _B_HCAP = 30, 31
BUF_DESC = 32
#: hot-refresh descriptor (:func:`pack_hot`)
_H_LOL, _H_HIL, _H_CLEN, _H_COUNT, _H_LO, _H_HI, _H_STORE, _H_RN, _H_ND, _H_FS, _H_F2, _H_F2V = range(12)
_H_SLOT, _H_SKETCH, _H_N, _H_B, _H_D, _H_W = range(24, 30)
HOT_DESC = 32


@intrinsic
def _voidptr(typingctx, addr):
    """An integer address as a ``void*`` (for ``numba.carray``)."""
    if not isinstance(addr, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], cgutils.voidptr_t)
    return types.voidptr(addr), codegen


@numba.njit(cache=True, inline="always")
def _put(desc, i, a):
    """Slot i of ``desc`` := (address, size) of the C-contiguous array ``a``."""
    if not a.flags.c_contiguous:
        raise ValueError("packed arrays must be C-contiguous")
    desc[2 * i] = a.ctypes.data
    desc[2 * i + 1] = a.size


@numba.njit(cache=True, inline="always")
def _vec(desc, i, dtype):
    """The 1-D array of slot i (no copy)."""
    return numba.carray(_voidptr(desc[2 * i]), desc[2 * i + 1], dtype)


@numba.njit(cache=True, nogil=True)
def pack_view(vd, sketch, store, F2, wcols, bdw, dw, lo, hi, parent, leaf, gstart, B, cstart, clen,
              Vc, Tc, Rc, hot_k, HV, HT, HR, hstart, hp):
    """Write the view arguments of :func:`probe_kview` (``KernelView.args``) and the fused hash
    parameters ``hp`` into the view descriptor ``vd`` (int64, ``VIEW_DESC``; ``wcols`` must be an
    integer)."""
    _put(vd, _V_STORE, store)
    _put(vd, _V_F2, F2)
    _put(vd, _V_LO, lo)
    _put(vd, _V_HI, hi)
    _put(vd, _V_PARENT, parent)
    _put(vd, _V_LEAF, leaf)
    _put(vd, _V_GSTART, gstart)
    _put(vd, _V_CSTART, cstart)
    _put(vd, _V_CLEN, clen)
    _put(vd, _V_VC, Vc)
    _put(vd, _V_TC, Tc)
    _put(vd, _V_RC, Rc)
    _put(vd, _V_HV, HV)
    _put(vd, _V_HT, HT)
    _put(vd, _V_HR, HR)
    _put(vd, _V_HSTART, hstart)
    _put(vd, _V_HP, hp)
    vd[_V_SKETCH] = 1 if sketch else 0
    vd[_V_W] = np.int64(wcols)
    vd[_V_BDW] = bdw
    vd[_V_DW] = dw
    vd[_V_B] = B
    vd[_V_HOTK] = hot_k
    vd[_V_F2C] = F2.shape[1]


@numba.njit(cache=True, nogil=True)
def pack_arena(vd, hot_k, HV, HT, HR, hstart):
    """Update only the hot leaf and its arena's arrays in the view descriptor ``vd`` (what changes when the
    arena is laid out again or another leaf becomes the hot one: 6 arguments instead of :func:`pack_view`'s
    24, whose unboxing after an ingest costs ~5 us)."""
    vd[_V_HOTK] = hot_k
    _put(vd, _V_HV, HV)
    _put(vd, _V_HT, HT)
    _put(vd, _V_HR, HR)
    _put(vd, _V_HSTART, hstart)


@numba.njit(cache=True, nogil=True)
def pack_bufs(bd, rp, rk, rest, rend, mp, mv, mt, mr, ct, cr, bucket, idx, sgn):
    """Write a :class:`ProbeBuffers` set's arrays (its ``outs`` and hash scratch) into ``bd``."""
    _put(bd, _B_RP, rp)
    _put(bd, _B_RK, rk)
    _put(bd, _B_REST, rest)
    _put(bd, _B_REND, rend)
    _put(bd, _B_MP, mp)
    _put(bd, _B_MV, mv)
    _put(bd, _B_MT, mt)
    _put(bd, _B_MR, mr)
    _put(bd, _B_CT, ct)
    _put(bd, _B_CR, cr)
    _put(bd, _B_BUCKET, bucket)
    _put(bd, _B_IDX, idx)
    _put(bd, _B_SGN, sgn)
    bd[_B_D] = idx.shape[0]
    bd[_B_HCAP] = idx.shape[1]


@numba.njit(cache=True, nogil=True)
def probe_packed(min_est, sigma, keys, tf, tt, vd, bd, hd, t_min, t_max):
    """:func:`probe_kview` with the view's and the buffers' arrays taken from their descriptors
    (:func:`pack_view`, :func:`pack_bufs`): the same computation and outputs, 10 arguments to unbox
    instead of 41.  The stored values, the match values and the keys share ``keys.dtype``.  When
    ``t_min <= t_max`` the view's pending hot refresh (``refresh_hot_packed(hd, t_min, t_max)``,
    ``KernelView.refresh_fast(defer=True)``) is applied first: one dispatch instead of two."""
    if t_min <= t_max:
        refresh_hot_packed(hd, t_min, t_max)
    vt = keys.dtype
    N = vd[2 * _V_LO + 1]
    d = bd[_B_D]
    hc = bd[_B_HCAP]
    idx = numba.carray(_voidptr(bd[2 * _B_IDX]), (d, hc), np.int64)
    sgn = numba.carray(_voidptr(bd[2 * _B_SGN]), (d, hc), np.int64)
    F2 = numba.carray(_voidptr(vd[2 * _V_F2]), (N, vd[_V_F2C]), np.float64)
    return probe_kview(min_est, sigma, keys, _vec(vd, _V_HP, np.uint64), _vec(bd, _B_BUCKET, np.int64), idx, sgn,
                       tf, tt, vd[_V_SKETCH] != 0, _vec(vd, _V_STORE, np.int64), F2, np.float64(vd[_V_W]),
                       vd[_V_BDW], vd[_V_DW], _vec(vd, _V_LO, np.float64), _vec(vd, _V_HI, np.float64),
                       _vec(vd, _V_PARENT, np.int64), _vec(vd, _V_LEAF, np.bool_), _vec(vd, _V_GSTART, np.int64),
                       vd[_V_B], _vec(vd, _V_CSTART, np.int64), _vec(vd, _V_CLEN, np.int64), _vec(vd, _V_VC, vt),
                       _vec(vd, _V_TC, np.float64), _vec(vd, _V_RC, np.int64), vd[_V_HOTK], _vec(vd, _V_HV, vt),
                       _vec(vd, _V_HT, np.float64), _vec(vd, _V_HR, np.int64), _vec(vd, _V_HSTART, np.int64),
                       _vec(bd, _B_RP, np.int64), _vec(bd, _B_RK, np.int64), _vec(bd, _B_REST, np.float64),
                       _vec(bd, _B_REND, np.int64), _vec(bd, _B_MP, np.int32), _vec(bd, _B_MV, vt),
                       _vec(bd, _B_MT, np.float64), _vec(bd, _B_MR, np.int64), _vec(bd, _B_CT, np.float64),
                       _vec(bd, _B_CR, np.int64))


@numba.njit(cache=True, nogil=True)
def seg_append(V, T, R, start, room, count, v, t, r, b):
    """Append tuples (arrival order) to a per-bucket segmented arena: tuple i goes to
    ``start[b[i]] + count[b[i]]``.  Returns False, writing nothing, when some bucket's segment has
    not room for its new tuples (``count + new > room``; the caller lays the arena out again with
    more room, :func:`seg_relayout`); True when all were appended."""
    B = count.shape[0]
    add = np.zeros(B, dtype=np.int64)
    for i in range(b.shape[0]):
        add[b[i]] += 1
    for bb in range(B):
        if count[bb] + add[bb] > room[bb]:
            return False
    for i in range(r.shape[0]):
        bb = b[i]
        j = start[bb] + count[bb]
        V[j] = v[i]
        T[j] = t[i]
        R[j] = r[i]
        count[bb] += 1
    return True


@numba.njit(cache=True, nogil=True)
def seg_relayout(V, T, R, start, count, V2, T2, R2, start2):
    """Copy every bucket's segment ``[start[b], start[b] + count[b])`` of V/T/R to ``start2[b]`` of
    V2/T2/R2 (the arena laid out with new room per bucket)."""
    for bb in range(count.shape[0]):
        s = start[bb]
        s2 = start2[bb]
        for j in range(count[bb]):
            V2[s2 + j] = V[s + j]
            T2[s2 + j] = T[s + j]
            R2[s2 + j] = R[s + j]


@numba.njit(cache=True, nogil=True)
def pyramid_ranges(lo_leaf, hi_leaf, lo, hi):
    """Node ranges of a pyramid stored level 0 first: leaves, then min/max of children pairs."""
    n = lo_leaf.shape[0]
    for i in range(n):
        lo[i] = lo_leaf[i]
        hi[i] = hi_leaf[i]
    src = 0
    dst = n
    while n > 1:
        for j in range(n // 2):
            lo[dst + j] = min(lo[src + 2 * j], lo[src + 2 * j + 1])
            hi[dst + j] = max(hi[src + 2 * j], hi[src + 2 * j + 1])
        src = dst
        dst += n // 2
        n //= 2


@numba.njit(cache=True, inline="always")
def _upper(T, x):
    """First index i with T[i] > x (T sorted): ``np.searchsorted(T, x, side="right")``."""
    a = 0
    e = T.shape[0]
    while a < e:
        m = (a + e) >> 1
        if T[m] <= x:
            a = m + 1
        else:
            e = m
    return a


@numba.njit(cache=True, nogil=True)
def scan_window_emit(V, T, R, keys, tf, tt, mp, mv, mt, mr):
    """Raw-window join: V/T sorted by time; per probe, tuples with t_from < ts <= t_to and V == key.

    Writes the matches (probe, value, ts, row id) in (probe, position)
    order as far as the arrays go (beyond, matches are only counted);
    returns (n_matches, work) with work = tuples compared (the window
    sizes).  :func:`scan_window` is the same kernel with row ids =
    positions.  Indexed unsigned as :func:`_match_regions` (numba's
    wrap-around of signed indexes made this loop ~2x slower: T1 scan t_hit
    at ~6,000 tuples per window 41 -> 19 ns per output, CPU time).  It writes all four columns
    in the loop, as before :func:`_match_regions` moved its constant columns to fills after the
    loop: for this kernel (one match per ~46 tuples compared) the fills gave no consistent gain
    (paired A/B over the bench's 6k batches, load 2.8-4: from 12% slower to 8% faster), so the
    raw scan keeps the loop it had and cannot have been weakened by that change.
    """
    P = keys.shape[0]
    cap = mp.shape[0]
    nm = 0
    work = 0
    for p in range(P):
        a = _upper(T, tf[p])
        e = _upper(T, tt[p])
        key = keys[p]
        if e > a:
            work += e - a
        if nm + (e - a) <= cap:               # room for every tuple: unsigned indexes, no capacity test
            u = np.uint64(nm)
            for j in range(np.uint64(a), np.uint64(e)):
                if V[j] == key:
                    mp[u] = p
                    mv[u] = V[j]
                    mt[u] = T[j]
                    mr[u] = R[j]
                    u += np.uint64(1)
            nm = np.int64(u)
        else:
            for j in range(a, e):
                if V[j] == key:
                    if nm < cap:
                        mp[nm] = p
                        mv[nm] = V[j]
                        mt[nm] = T[j]
                        mr[nm] = R[j]
                    nm += 1
    return nm, work


def _cap(n: int) -> int:
    return max(64, 1 << int(n).bit_length())


def scan_window(V, T, keys, tf, tt, cap: int = 256):
    """:func:`scan_window_emit` reporting positions in V instead of row ids, with outputs sized as
    needed: (n_matches, probe (int32), position, work)."""
    R = np.arange(len(V), dtype=np.int64)
    while True:
        mp = np.empty(cap, dtype=np.int32)
        mj = np.empty(cap, dtype=np.int64)
        nm, work = scan_window_emit(V, T, R, keys, tf, tt, mp, np.empty(cap, dtype=V.dtype), np.empty(cap), mj)
        if nm <= cap:
            return nm, mp, mj, work
        cap = _cap(nm)


class ProbeBuffers:
    """Reusable output arrays of :func:`probe_kview` / :func:`scan_window_emit` (grown to the
    largest batch seen); ``vdtype``: dtype of the stored values (for ``mv``).

    A :class:`BufferPool` may *lend* the match arrays to a result (views, no
    copy); :meth:`lent` tells whether any such view is still alive (numpy
    views hold a reference to their base array, so the base's reference
    count is above what this object alone holds).
    """

    def __init__(self, regions: int = 256, matches: int = 1024, vdtype=np.int64):
        self.vdtype = np.dtype(vdtype)
        self.bd = np.zeros(BUF_DESC, dtype=np.int64)      # descriptor of the arrays below (pack_bufs)
        self._hash = (-1, -1, _NO_HASH_ARRAYS)
        self.alloc(regions, matches)

    def hash_arrays(self, P: int, d: int):
        """(bucket, idx (d, cap), sgn (d, cap)) int64 scratch arrays with cap >= P columns (the first P
        are filled by the kernel; zeros when never written), reused while P fits and d repeats."""
        cap, dd, arrs = self._hash
        if dd != d or cap < P:              # (1.5x: batches of a steady stream vary by a few percent)
            cap = max(P + P // 2, 2 * cap if dd == d else 0, 16)
            arrs = (np.zeros(cap, dtype=np.int64), np.zeros((d, cap), dtype=np.int64),
                    np.zeros((d, cap), dtype=np.int64))
            self._hash = (cap, d, arrs)
            self._pack()
        return arrs

    def _pack(self) -> None:
        """Write the current arrays into the descriptor ``bd`` (after any of them was replaced)."""
        pack_bufs(self.bd, *self.outs, *self._hash[2])

    def alloc(self, regions: int, matches: int) -> None:
        """(Re)allocate: region arrays, and the five match arrays as views of *one* block
        (:func:`_block`: a large one starts on a 2 MiB boundary so the kernel's first writes fault
        it in huge pages)."""
        self.rp = np.empty(regions, dtype=np.int64)
        self.rk = np.empty(regions, dtype=np.int64)
        self.rest = np.empty(regions, dtype=np.float64)
        i8, f8 = np.dtype(np.int64), np.dtype(np.float64)
        # (rend is in the block too: a result borrows it with the matches, see BufferPool.take5; the
        # probe column is int32, see Matches)
        fields = (("mp", np.dtype(np.int32), matches), ("mv", self.vdtype, matches), ("mt", f8, matches),
                  ("mr", i8, matches), ("ct", f8, matches), ("cr", i8, matches), ("rend", i8, regions))
        # 64-byte aligned slices, each shifted by 37 cache lines more than the previous one: capacities
        # are powers of two, and streams written in lockstep at addresses equal modulo a large power
        # of two conflict in the caches (4.8M outputs into 2^23-entry arrays: 13.4 ns per output
        # instead of 1.8)
        sizes = [-(-n * t.itemsize // 64) * 64 + _STAGGER for _, t, n in fields]
        blk = _block(sum(sizes))
        o = 0
        for (name, t, n), sz in zip(fields, sizes):
            setattr(self, name, blk[o:o + n * t.itemsize].view(t))
            o += sz
        self._owner = blk if blk.base is None else blk.base                   # what every view refers to
        del blk
        self.outs = (self.rp, self.rk, self.rest, self.rend, self.mp, self.mv, self.mt, self.mr, self.ct, self.cr)
        self._pack()
        self._refs = self._refcounts()

    @property
    def nbytes(self) -> int:
        arrs = self.outs + (self._hash[2] if self._hash[0] >= 0 else ())  # (a huge-page block's slack is virtual)
        return sum(a.nbytes for a in arrs)

    def holds(self, a) -> bool:
        """Whether array ``a`` is a view of this set's match arrays."""
        return a.base is self._owner

    def _refcounts(self):
        return sys.getrefcount(self._owner)     # views (results' slices included) refer to the owner

    def lent(self) -> bool:
        """True while a result still holds a view of the match arrays (they must not be overwritten)."""
        return self._refcounts() != self._refs


class BufferPool:
    """Recycled output arrays of the compiled probe and scan of one index.

    Why: a probe batch of a large window emits millions of matches; copying
    them out of one reused buffer into fresh arrays writes every output
    twice, and fresh memory is page-faulted on first touch (expensive on a
    virtual machine).  So a large result *borrows* the buffer's arrays
    (``Matches`` fields are views of them) and the next call takes another
    set of the pool that no live result holds (:meth:`ProbeBuffers.lent`);
    the usual pattern ``m = ix.probe_many(..)`` in a loop ping-pongs between
    two sets and never allocates.  A result that is kept stays valid: its
    set is never written again while a view of it is alive (the pool then
    forgets it and allocates another).  Small results (or results that would
    pin a buffer more than 16x their size) are copied as before.

    Before a call the set is grown to 1.5x the matches the last call
    produced per probe (at least doubling it) (so a stream whose output per call varies does not
    re-run the kernel on overflow, nor page-fault fresh arrays at every new
    maximum; the kernel still retries with larger arrays when it overflows).

    >>> import numpy as np
    >>> pool = BufferPool(np.int64)
    >>> b = pool.get(10)
    >>> b.mp[:300] = 7
    >>> kept = pool.take(b, 300, min_lend=1)       # fills > 1/16 of the set: lent, views of b's arrays
    >>> pool.get(10) is b, b.lent()                 # a live result holds b: another set
    (False, True)
    >>> del kept
    >>> pool.get(10) is b                           # released: reused
    True
    """

    MIN_LEND = 1 << 13          # matches: below this a result is copied (cheap, cache resident)

    def __init__(self, vdtype, size: int = 2):
        self.vdtype = np.dtype(vdtype)
        self.size = size
        self.sets = []
        self.rate = 0.0         # matches per probe of the last call

    def get(self, P: int, d: int = 0) -> ProbeBuffers:
        """A set no live result holds, with room for the matches of ~P probes (last call's rate);
        ``d`` > 0: with hash scratch of d rows and >= P columns too (:meth:`ProbeBuffers.hash_arrays`)."""
        b = None
        for s in self.sets:
            if sys.getrefcount(s._owner) == s._refs:        # (not s.lent(), inlined)
                b = s
                break
        if b is None:
            if len(self.sets) >= self.size:
                self.sets.pop(0)            # held by a result: it is the result's now
            b = ProbeBuffers(vdtype=self.vdtype)
            self.sets.append(b)
        need = int(1.5 * P * self.rate)
        if need > len(b.mp):                # geometric: a slowly growing output re-allocates O(log) times
            b.alloc(len(b.rp), max(need, 2 * len(b.mp)))
        if d:
            h = b._hash
            if h[1] != d or h[0] < P:
                b.hash_arrays(P, d)
        return b

    @property
    def nbytes(self) -> int:
        """Memory of the sets the pool holds (a set lent to a result the pool dropped is the result's)."""
        return sum(s.nbytes for s in self.sets)

    def take(self, b: ProbeBuffers, nm: int, P: int = 0, fields=("mp", "mv", "mt", "mr"),
             min_lend: int = MIN_LEND):
        """The first ``nm`` entries of ``b``'s match arrays ``fields``: views (lent) when the result
        is large and fills at least 1/16 of the set, copies otherwise; records the rate.

        (A copy writes every output again into fresh, page-faulted memory: ~20 ns per output measured
        at ~50k outputs, more than the probe kernel itself; so only a result that would pin a set more
        than 16x its size is copied.)"""
        if P:
            self.rate = nm / P
        arrs = [getattr(b, f) for f in fields]
        if nm >= min_lend and 16 * nm >= len(b.mp):
            return [a[:nm] for a in arrs]
        return [a[:nm].copy() for a in arrs]

    def take4(self, b: ProbeBuffers, nm: int, P: int = 0):
        """``take(b, nm, P)`` of the four match columns (mp, mv, mt, mr), without the field lookups."""
        if P:
            self.rate = nm / P
        if nm >= self.MIN_LEND and 16 * nm >= len(b.mp):
            return b.mp[:nm], b.mv[:nm], b.mt[:nm], b.mr[:nm]
        return b.mp[:nm].copy(), b.mv[:nm].copy(), b.mt[:nm].copy(), b.mr[:nm].copy()

    def take5(self, b: ProbeBuffers, nm: int, nr: int, P: int):
        """``take4(b, nm, P)`` and the region ends ``rend[:nr]``: lent with the matches (a view of the
        same block, no copy), copied with them."""
        self.rate = nm / P
        if nm >= self.MIN_LEND and 16 * nm >= len(b.mp):
            return b.mp[:nm], b.mv[:nm], b.mt[:nm], b.mr[:nm], b.rend[:nr]
        return b.mp[:nm].copy(), b.mv[:nm].copy(), b.mt[:nm].copy(), b.mr[:nm].copy(), b.rend[:nr].copy()


#: placeholder hash scratch of a set whose hash arrays were never asked for (0 columns)
_NO_HASH_ARRAYS = (np.zeros(0, dtype=np.int64), np.zeros((1, 0), dtype=np.int64), np.zeros((1, 0), dtype=np.int64))
_HUGE = 1 << 21          # transparent huge page
_STAGGER = 37 * 64       # bytes between consecutive match arrays beyond their size (see ProbeBuffers.alloc)


def _block(nbytes: int) -> np.ndarray:
    """A writable uint8 array of ``nbytes``; from 2 MiB on, the 2 MiB-aligned inside of a private
    anonymous mapping advised for transparent huge pages (``MADV_HUGEPAGE``; plain ``np.empty``
    where that is not available).  Why: output sets grow with the output per call, and every fresh
    4 KiB page costs a fault on first touch (~2 us on this VM: ~0.5 ms per MB, more than writing
    the outputs); a huge page is faulted once per 2 MiB (~0.1-0.2 ms per MB).  Untouched parts of the
    mapping (the alignment slack, a set's unused tail) take no memory."""
    if nbytes < _HUGE or not _MADV:
        return np.empty(nbytes, dtype=np.uint8)
    size = -(-nbytes // _HUGE) * _HUGE + _HUGE
    try:
        mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        mm.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, ValueError, AttributeError):        # pragma: no cover - no THP here
        return np.empty(nbytes, dtype=np.uint8)
    raw = np.frombuffer(mm, dtype=np.uint8)
    off = (-raw.ctypes.data) % _HUGE
    return raw[off:off + nbytes]


_MADV = all(hasattr(mmap, k) for k in ("MADV_HUGEPAGE", "MAP_PRIVATE", "MAP_ANONYMOUS"))


#: room left after an overflow, as :meth:`BufferPool.get` leaves before a call: a call that outgrew
#: its set by a little would otherwise grow it again (fresh memory, faulted) at the next call
HEADROOM = 1.5


def probe_k(buf: ProbeBuffers, *args):
    """:func:`probe_kview` (args without the outputs) with ``buf``'s arrays, retried with larger
    ones when they were too small.  Returns (n_regions, n_matches, visited, flat, work)."""
    while True:
        nr, nm, visited, flat, work = probe_kview(*args, *buf.outs)
        if nr <= len(buf.rp) and nm <= len(buf.mp):
            return nr, nm, visited, flat, work
        buf.alloc(max(len(buf.rp), _cap(int(HEADROOM * nr))), max(len(buf.mp), _cap(int(HEADROOM * nm))))


def scan_k(buf: ProbeBuffers, V, T, R, keys, tf, tt):
    """:func:`scan_window_emit` into ``buf``'s (mp, mv, mt, mr), retried with larger arrays when
    they were too small.  Returns (n_matches, work)."""
    while True:
        nm, work = scan_window_emit(V, T, R, keys, tf, tt, buf.mp, buf.mv, buf.mt, buf.mr)
        if nm <= len(buf.mp):
            return nm, work
        buf.alloc(len(buf.rp), _cap(int(HEADROOM * nm)))


@numba.njit(cache=True)
def _node_row_norms(store, n, rownorm):
    """``rownorm[n, b, r] = sum_c store[n, b, r, c]^2`` for one node ``n`` (exact int64)."""
    for b in range(store.shape[1]):
        for r in range(store.shape[2]):
            acc = np.int64(0)
            for c in range(store.shape[3]):
                x = store[n, b, r, c]
                acc += x * x
            rownorm[n, b, r] = acc


@numba.njit(cache=True)
def _node_row_median(rownorm, n, f2, rows):
    """``f2[n, b] = median over r of rownorm[n, b, r]`` for one node ``n`` (numpy's sort-and-pick:
    the middle row, or ``0.5 * (a + b)`` of the middle two when d is even); ``rows``: scratch (d,)."""
    d = rownorm.shape[2]
    for b in range(rownorm.shape[1]):
        for r in range(d):
            _insert_sorted(rows, r, rownorm[n, b, r])
        if d % 2:
            f2[n, b] = rows[d // 2]
        else:
            f2[n, b] = 0.5 * (rows[d // 2 - 1] + rows[d // 2])


@numba.njit(cache=True, nogil=True)
def row_norms_into(store, nodes, rownorm):
    """``rownorm[n, b, r] = sum_c store[n, b, r, c]^2`` for n in ``nodes`` (exact int64)."""
    for n in nodes:
        _node_row_norms(store, n, rownorm)


@numba.njit(cache=True, nogil=True)
def row_median_into(rownorm, nodes, f2):
    """``f2[n, b] = median over r of rownorm[n, b, r]`` for n in ``nodes`` (:func:`_node_row_median`)."""
    rows = np.empty(rownorm.shape[2], dtype=rownorm.dtype)
    for n in nodes:
        _node_row_median(rownorm, n, f2, rows)


@numba.njit(cache=True, nogil=True)
def thresholds(f2, nodes, min_est, sigma, w):
    """``max(min_est, sigma * sqrt(max(f2[n], 0) / w))`` for n in ``nodes``: (len(nodes), B)."""
    out = np.empty((nodes.shape[0], f2.shape[1]))
    for i in range(nodes.shape[0]):
        for b in range(f2.shape[1]):
            x = sigma * np.sqrt(max(f2[nodes[i], b], 0.0) / w)
            out[i, b] = x if x > min_est else min_est
    return out


@numba.njit(cache=True, nogil=True)
def concat_perm(offs):
    """Positions, in the concatenation of C bucket-sorted chunks with offsets ``offs`` (C, B + 1),
    of the tuples in cell order (bucket, then chunk, then position)."""
    C = offs.shape[0]
    nb = offs.shape[1] - 1
    tot = 0
    for c in range(C):
        tot += offs[c, nb]
    perm = np.empty(tot, dtype=np.int64)
    k = 0
    for b in range(nb):
        base = 0
        for c in range(C):
            for j in range(offs[c, b], offs[c, b + 1]):
                perm[k] = base + j
                k += 1
            base += offs[c, nb]
    return perm


@numba.njit(cache=True, nogil=True)
def refresh_f2(store, rownorm, norm_dirty, f2_stale, f2):
    """``Granularity.f2_nodes`` in one call: recompute the row norms of the ``norm_dirty`` nodes
    (:func:`row_norms_into`), then the F2 medians of the stale ones (:func:`row_median_into`);
    clears both flags."""
    rows = np.empty(rownorm.shape[2], dtype=rownorm.dtype)
    for n in range(norm_dirty.shape[0]):
        if norm_dirty[n]:
            _node_row_norms(store, n, rownorm)
            norm_dirty[n] = False
            f2_stale[n] = True
        if f2_stale[n]:
            _node_row_median(rownorm, n, f2, rows)
            f2_stale[n] = False


@numba.njit(cache=True, nogil=True)
def refresh_gran(lo_leaf, hi_leaf, lo, hi, store, rownorm, norm_dirty, f2_stale, f2, F2):
    """One granularity's part of the compiled probe view in one call: :func:`pyramid_ranges`
    (``lo``/``hi``), :func:`refresh_f2` of the dirty/stale nodes (in place, as
    ``Granularity.f2_nodes``), then ``F2[:] = f2`` (the view's copy)."""
    pyramid_ranges(lo_leaf, hi_leaf, lo, hi)
    refresh_f2(store, rownorm, norm_dirty, f2_stale, f2)
    for n in range(f2.shape[0]):
        for b in range(f2.shape[1]):
            F2[n, b] = f2[n, b]


@numba.njit(cache=True, nogil=True)
def refresh_hot(lo_leaf, hi_leaf, slot, t_min, t_max, clen, count, sketch, lo, hi, store, rownorm, norm_dirty,
                f2_stale, f2, F2):
    """The compiled view's refresh when only G1's hot zone grew since the last one, in one call: the
    hot leaf's range ``lo_leaf/hi_leaf[slot] = t_min, t_max``, its cells' lengths ``clen[:] = count``
    (the arena's per-bucket counts), then G1's node ranges and F2 (:func:`refresh_gran`; without
    sketches (structure T1) the leaves' ranges only)."""
    lo_leaf[slot] = t_min
    hi_leaf[slot] = t_max
    for b in range(count.shape[0]):
        clen[b] = count[b]
    if sketch:
        refresh_gran(lo_leaf, hi_leaf, lo, hi, store, rownorm, norm_dirty, f2_stale, f2, F2)
    else:
        for i in range(lo_leaf.shape[0]):
            lo[i] = lo_leaf[i]
            hi[i] = hi_leaf[i]


@numba.njit(cache=True, nogil=True)
def pack_hot(hd, lo_leaf, hi_leaf, slot, clen, count, sketch, lo, hi, store, rownorm, norm_dirty, f2_stale, f2, F2):
    """Write :func:`refresh_hot`'s bound arguments (all but ``t_min``/``t_max``) into ``hd``
    (int64, ``HOT_DESC``); ``store`` (n, B, d, w), ``rownorm`` (n, B, d), ``f2``/``F2`` (n, B)."""
    _put(hd, _H_LOL, lo_leaf)
    _put(hd, _H_HIL, hi_leaf)
    _put(hd, _H_CLEN, clen)
    _put(hd, _H_COUNT, count)
    _put(hd, _H_LO, lo)
    _put(hd, _H_HI, hi)
    _put(hd, _H_STORE, store)
    _put(hd, _H_RN, rownorm)
    _put(hd, _H_ND, norm_dirty)
    _put(hd, _H_FS, f2_stale)
    _put(hd, _H_F2, f2)
    _put(hd, _H_F2V, F2)
    hd[_H_SLOT] = slot
    hd[_H_SKETCH] = 1 if sketch else 0
    hd[_H_N], hd[_H_B], hd[_H_D], hd[_H_W] = store.shape[0], store.shape[1], store.shape[2], store.shape[3]


@numba.njit(cache=True, nogil=True)
def pack_hot_arena(hd, slot, clen, count):
    """Update only what a new hot zone changes in a :func:`pack_hot` descriptor: its slot, its leaf's cell
    lengths ``clen`` and the arena's counts (4 arguments to unbox instead of 15)."""
    _put(hd, _H_CLEN, clen)
    _put(hd, _H_COUNT, count)
    hd[_H_SLOT] = slot


@numba.njit(cache=True, nogil=True)
def refresh_hot_packed(hd, t_min, t_max):
    """:func:`refresh_hot` with its bound arguments taken from the descriptor ``hd`` (:func:`pack_hot`)."""
    n, B, d, w = hd[_H_N], hd[_H_B], hd[_H_D], hd[_H_W]
    nf = hd[2 * _H_F2 + 1] // B
    store = numba.carray(_voidptr(hd[2 * _H_STORE]), (n, B, d, w), np.int64)
    rownorm = numba.carray(_voidptr(hd[2 * _H_RN]), (n, B, d), np.int64)
    f2 = numba.carray(_voidptr(hd[2 * _H_F2]), (nf, B), np.float64)
    F2 = numba.carray(_voidptr(hd[2 * _H_F2V]), (hd[2 * _H_F2V + 1] // B, B), np.float64)
    refresh_hot(_vec(hd, _H_LOL, np.float64), _vec(hd, _H_HIL, np.float64), hd[_H_SLOT], t_min, t_max,
                _vec(hd, _H_CLEN, np.int64), _vec(hd, _H_COUNT, np.int64), hd[_H_SKETCH] != 0,
                _vec(hd, _H_LO, np.float64), _vec(hd, _H_HI, np.float64), store, rownorm,
                _vec(hd, _H_ND, np.bool_), _vec(hd, _H_FS, np.bool_), f2, F2)


#: granularity descriptor (:func:`pack_gran`): one row per granularity of a view
_G_LOL, _G_HIL, _G_LO, _G_HI, _G_STORE, _G_RN, _G_ND, _G_FS, _G_F2, _G_F2V = range(10)
_G_N, _G_B, _G_D, _G_W = range(20, 24)
GRAN_DESC = 24


@numba.njit(cache=True, nogil=True)
def pack_gran(gd, lo_leaf, hi_leaf, lo, hi, store, rownorm, norm_dirty, f2_stale, f2, F2):
    """Write :func:`refresh_gran`'s arguments for one granularity into its descriptor row ``gd``
    (int64, ``GRAN_DESC``; ``store`` (n, B, d, w), ``rownorm`` (n, B, d), ``f2``/``F2`` (n, B))."""
    _put(gd, _G_LOL, lo_leaf)
    _put(gd, _G_HIL, hi_leaf)
    _put(gd, _G_LO, lo)
    _put(gd, _G_HI, hi)
    _put(gd, _G_STORE, store)
    _put(gd, _G_RN, rownorm)
    _put(gd, _G_ND, norm_dirty)
    _put(gd, _G_FS, f2_stale)
    _put(gd, _G_F2, f2)
    _put(gd, _G_F2V, F2)
    gd[_G_N], gd[_G_B], gd[_G_D], gd[_G_W] = store.shape[0], store.shape[1], store.shape[2], store.shape[3]


@numba.njit(cache=True, nogil=True)
def refresh_grans_packed(gd, which):
    """:func:`refresh_gran` of every granularity ``g`` with bit g of ``which`` set, arguments taken from
    the descriptor rows ``gd[g]`` (:func:`pack_gran`): one dispatch for a structural refresh instead
    of one per changed granularity (~4-5 us each after an ingest, mostly unboxing 10 arrays)."""
    for gi in range(gd.shape[0]):
        if not (which >> gi) & 1:
            continue
        g = gd[gi]
        n, B, d, w = g[_G_N], g[_G_B], g[_G_D], g[_G_W]
        store = numba.carray(_voidptr(g[2 * _G_STORE]), (n, B, d, w), np.int64)
        rownorm = numba.carray(_voidptr(g[2 * _G_RN]), (n, B, d), np.int64)
        f2 = numba.carray(_voidptr(g[2 * _G_F2]), (g[2 * _G_F2 + 1] // B, B), np.float64)
        F2 = numba.carray(_voidptr(g[2 * _G_F2V]), (g[2 * _G_F2V + 1] // B, B), np.float64)
        refresh_gran(_vec(g, _G_LOL, np.float64), _vec(g, _G_HIL, np.float64), _vec(g, _G_LO, np.float64),
                     _vec(g, _G_HI, np.float64), store, rownorm, _vec(g, _G_ND, np.bool_), _vec(g, _G_FS, np.bool_),
                     f2, F2)


@numba.njit(cache=True, nogil=True)
def csr_append(Vc, Tc, Rc, base, v, t, r, offsets, cstart, clen):
    """Append a zone's tuples (cell order, ``offsets`` (B + 1,)) to the view's cold CSR at ``base``
    (room checked by the caller) and point its cells there: ``cstart[b] = base + offsets[b]``,
    ``clen[b] = offsets[b + 1] - offsets[b]`` (``cstart``/``clen``: the leaf's B entries)."""
    n = r.shape[0]
    ub = np.uint64(base)                 # unsigned: no negative-index wraparound per access (plain copies)
    for i in range(n):
        Vc[ub + np.uint64(i)] = v[i]
    for i in range(n):
        Tc[ub + np.uint64(i)] = t[i]
    for i in range(n):
        Rc[ub + np.uint64(i)] = r[i]
    for b in range(cstart.shape[0]):
        cstart[b] = base + offsets[b]
        clen[b] = offsets[b + 1] - offsets[b]


@numba.njit(cache=True, nogil=True)
def add_dense(store, rownorm, path, delta, sign):
    """``store[p] += sign * delta`` for the pyramid nodes ``path`` (a leaf and its ancestors) with
    their row norms recomputed exactly in the same pass (``rownorm[p, b, r] = sum_c store[p, b, r,
    c]^2``, int64), while the rows are in cache: ``Granularity.add``/``remove`` of a dense (B, d,
    w) delta (a large batch, a COLLAPSE, an expiry) then leave no norm for the probe side to
    recompute.  ``store`` (n_nodes, B, d, w), ``rownorm`` (n_nodes, B, d), ``delta`` (B, d, w)."""
    for i in range(path.shape[0]):
        p = path[i]
        for b in range(store.shape[1]):
            for r in range(store.shape[2]):
                acc = np.int64(0)
                for c in range(store.shape[3]):
                    x = store[p, b, r, c] + sign * delta[b, r, c]
                    store[p, b, r, c] = x
                    acc += x * x
                rownorm[p, b, r] = acc


def comparable(vdtype, kdtype):
    """The common dtype the kernels compare stored values and keys in (int64 / float64), or None."""
    if vdtype is None or kdtype is None:
        return None
    v, k = np.dtype(vdtype), np.dtype(kdtype)
    ints = lambda t: t.kind in "bi" or (t.kind == "u" and t.itemsize < 8)
    if ints(v) and ints(k):
        return np.dtype(np.int64)
    if v.kind in "biuf" and k.kind in "biuf":
        return np.dtype(np.float64)
    return None


_WARM = False


def warm_up() -> None:
    """Compile (or load from the cache) every kernel for the argument types the index uses."""
    global _WARM
    if _WARM:
        return
    z = np.zeros(1, dtype=np.int64)
    f = np.zeros(1)
    for V in (z, f):
        seg_append(V.copy(), f.copy(), z.copy(), z.copy(), z + 1, z.copy(), V, f, z, z)
        seg_relayout(V, f, z, z, z, V.copy(), f.copy(), z.copy(), z)
        for sk in (True, False):
            probe_k(ProbeBuffers(1, 1, V.dtype), 0.5, 1.0, V, np.zeros(0, dtype=np.uint64), z,
                    np.zeros((2, 1), dtype=np.int64), np.ones((2, 1), dtype=np.int64), f, f,
                    sk, z, np.zeros((1, 1)), 1.0, 1, 1, f, f, z - 1, np.ones(1, dtype=np.bool_),
                    np.array([0, 1], dtype=np.int64), 1, z, z, V, f, z, -1, V, f, z, z)
        scan_window(V, f, V, f, f)
        scan_k(ProbeBuffers(1, 1, V.dtype), V, f, z, V, f, f)
        vd = np.zeros(VIEW_DESC, dtype=np.int64)
        buf = ProbeBuffers(1, 1, V.dtype)
        buf.hash_arrays(1, 2)
        view = (z, np.zeros((1, 1)), 1.0, 1, 1, f, f, z - 1, np.ones(1, dtype=np.bool_), np.array([0, 1], dtype=np.int64),
                1, z, z, V, f, z, -1, V, f, z, z, np.zeros(0, dtype=np.uint64))      # (alive while vd is used)
        for sk in (True, False):
            pack_view(vd, sk, *view)
            pack_arena(vd, -1, V, f, z, z)
            probe_packed(0.5, 1.0, V[:0], f[:0], f[:0], vd, buf.bd, vd, 1.0, 0.0)
    pyramid_ranges(f, f, f.copy(), f.copy())
    row_median_into(np.zeros((1, 1, 3), dtype=np.int64), z, np.zeros((1, 1)))
    row_norms_into(np.zeros((1, 1, 1, 2), dtype=np.int64), z, np.zeros((1, 1, 1), dtype=np.int64))
    refresh_f2(np.zeros((1, 1, 3, 2), dtype=np.int64), np.zeros((1, 1, 3), dtype=np.int64), np.ones(1, dtype=np.bool_),
               np.ones(1, dtype=np.bool_), np.zeros((1, 1)))
    refresh_gran(f, f, f.copy(), f.copy(), np.zeros((1, 1, 3, 2), dtype=np.int64), np.zeros((1, 1, 3), dtype=np.int64),
                 np.ones(1, dtype=np.bool_), np.ones(1, dtype=np.bool_), np.zeros((1, 1)), np.zeros((1, 1)))
    for sk in (True, False):
        refresh_hot(f.copy(), f.copy(), 0, 0.0, 1.0, z.copy(), z, sk, f.copy(), f.copy(),
                    np.zeros((1, 1, 3, 2), dtype=np.int64), np.zeros((1, 1, 3), dtype=np.int64),
                    np.ones(1, dtype=np.bool_), np.ones(1, dtype=np.bool_), np.zeros((1, 1)), np.zeros((1, 1)))
    hd = np.zeros(HOT_DESC, dtype=np.int64)
    tabs = (f.copy(), f.copy(), 0, z.copy(), z)
    tabs2 = (f.copy(), f.copy(), np.zeros((1, 1, 3, 2), dtype=np.int64), np.zeros((1, 1, 3), dtype=np.int64),
             np.ones(1, dtype=np.bool_), np.ones(1, dtype=np.bool_), np.zeros((1, 1)), np.zeros((1, 1)))
    for sk in (True, False):
        pack_hot(hd, *tabs, sk, *tabs2)
        pack_hot_arena(hd, 0, tabs[3], tabs[4])
        refresh_hot_packed(hd, 0.0, 1.0)
    gd = np.zeros((1, GRAN_DESC), dtype=np.int64)
    pack_gran(gd[0], f.copy(), f.copy(), f.copy(), f.copy(), np.zeros((1, 1, 3, 2), dtype=np.int64),
              np.zeros((1, 1, 3), dtype=np.int64), np.ones(1, dtype=np.bool_), np.ones(1, dtype=np.bool_),
              np.zeros((1, 1)), np.zeros((1, 1)))
    refresh_grans_packed(gd, 0)
    for V in (z, f):
        csr_append(V.copy(), f.copy(), z.copy(), 0, V, f, z, np.array([0, 1], dtype=np.int64), z.copy(), z.copy())
    add_dense(np.zeros((1, 1, 1, 2), dtype=np.int64), np.zeros((1, 1, 1), dtype=np.int64), z.copy(),
              np.zeros((1, 1, 2), dtype=np.int64), 1)
    thresholds(np.zeros((1, 1)), z, 0.5, 1.0, 64)
    concat_perm(np.zeros((1, 2), dtype=np.int64))
    sketch_add(np.zeros((1, 1, 1, 1), dtype=np.int64), np.zeros((1, 1, 1), dtype=np.int64), z.copy(), z, z.reshape(1, 1),
               z.reshape(1, 1) + 1, 0, 1, 1)
    _WARM = True


@numba.njit(cache=True, inline="always")
def _row_median(x):
    """Median over the d rows as the numpy block computes it: the middle of
    the sorted values (d odd), the mean of the two middle ones (d even)."""
    y = np.sort(x)
    n = y.shape[0]
    if n % 2:
        return y[n // 2]
    return (y[n // 2 - 1] + y[n // 2]) / 2.0


@numba.njit(cache=True, nogil=True, error_model="numpy")
def adaptive_checks(idx, bucket, sgn, pos, lim, lens, w, W, total, pending, n_total, n_pending, C, theta):
    """The confidence checks of one run of T4's adaptive G1 insert (the numpy
    block of :meth:`~sketchql.index.ingest_side.IngestSide._insert_adaptive`, same arithmetic): the
    segment sketches ``R_s`` of the run's check segments ``lens`` (detector
    columns ``(idx - r w + bucket w) mod W``; ``R_0`` includes the zone's
    pending sketch), the zone's history ``H_s = total - pending + R_0 + ... +
    R_{s-1}`` at each check, the confidence of the valid checks and the first
    check below ``theta``.

    Checks are evaluated one after the other and stop at the cut, on one
    running history ``H`` and one segment scratch ``R`` (d x W each): per row,
    ``ip = <H_s, R_s>`` and ``||R_s||^2`` are sums over the entries the segment
    touched (every entry for s = 0, which holds the pending sketch), and
    ``||H_{s+1}||^2 = ||H_s||^2 + 2 ip + ||R_s||^2`` (the numpy block's F2 of
    the zone after the check).  Every value is an integer-valued float64
    (exact below 2^53), so these sums equal the numpy block's dense ones bit
    for bit whatever their order.  (The dense version kept every segment's
    S and H: ~80 KB per check written per ingest, 0.7 MB for a 500-tuple
    run, which evicted the probe's data from the 1 MB L2 between ingest and
    probe.)

    Returns ``(cut, found, has_conf, conf_cut, new_total, new_pending,
    n_total_after, n_pending_after)`` (``new_pending`` is all zeros when the
    cut check completed a segment)."""
    d = idx.shape[0]
    nseg = lens.shape[0]
    DW = d * W
    any_valid = False
    npd = n_pending
    acc = n_total
    for s in range(nseg):
        npd = lens[s] + (n_pending if s == 0 else 0)
        acc += lens[s]
        if npd >= C and acc - npd >= C:
            any_valid = True
    H = np.empty(DW)                      # running history, flat (row r, column c) -> r W + c
    R = np.empty(DW)                      # the current segment (entries valid where mark == s + 1)
    mark = np.zeros(DW, np.int32)
    touched = np.empty(max(DW, (lens.max() if nseg else 0) * d), np.int64)
    hn = np.zeros(d)                      # ||H_s||^2 per row
    ip = np.zeros(d)
    f2r = np.zeros(d)
    f2t = np.zeros(d)
    for r in range(d):
        a = 0.0
        for j in range(W):
            h = total[r, j] - pending[r, j]
            H[r * W + j] = h
            R[r * W + j] = pending[r, j]
            mark[r * W + j] = 1
            touched[r * W + j] = r * W + j
            a += h * h
        hn[r] = a
    cut = nseg - 1
    found = False
    has_conf = False
    conf_cut = 0.0
    last_valid_conf = 0.0
    k = pos
    n_after = n_total
    npend = 0
    nt = DW
    for s in range(nseg):
        stamp = s + 1
        if s > 0:
            nt = 0
        for _ in range(lens[s]):
            bw = bucket[k] * w
            for r in range(d):
                p = r * W + (idx[r, k] - r * w + bw) % W
                if mark[p] != stamp:
                    mark[p] = stamp
                    R[p] = 0.0
                    touched[nt] = p
                    nt += 1
                R[p] += sgn[r, k]
            k += 1
        npend = lens[s] + (n_pending if s == 0 else 0)
        n_after += lens[s]
        valid = npend >= C and n_after - npend >= C
        if any_valid:
            for r in range(d):
                ip[r] = 0.0
                f2r[r] = 0.0
            for i in range(nt):
                p = touched[i]
                r = p // W
                x = R[p]
                ip[r] += H[p] * x
                f2r[r] += x * x
        for i in range(nt):
            p = touched[i]
            H[p] += R[p]
        if not any_valid:
            continue
        for r in range(d):
            f2t[r] = hn[r] + 2.0 * ip[r] + f2r[r]
        ipm = _row_median(ip)
        f2hm = _row_median(hn)
        f2rm = _row_median(f2r)
        f2tm = _row_median(f2t)
        for r in range(d):
            hn[r] = f2t[r]
        nh = float(n_after - npend)
        nr = float(npend)
        ah = (f2hm - nh) / (nh * (nh - 1))
        ar = (f2rm - nr) / (nr * (nr - 1))
        if ah > 0 and ar > 0 and nh > 1 and nr > 1:
            rho = (ipm / (nh * nr)) / np.sqrt(np.abs(ah * ar))
        else:
            rho = 1.0
        sconf = 1.0 - min(1.0, np.sqrt(max(f2tm, 0.0) / W) / float(n_after))
        rc = min(max(rho, 0.0), 1.0)
        conf = min(rc, sconf)
        if valid:
            last_valid_conf = conf
            if conf < theta:
                cut = s
                found = True
                conf_cut = conf
                break
    if any_valid:
        has_conf = True
        if not found:   # cut = the last check: its own conf if valid, else the last valid one's
            conf_cut = last_valid_conf
    new_total = H.reshape((d, W))
    new_pending = np.zeros((d, W))
    n_pend_after = 0
    if npend < C:                         # (only the last segment of a run can be incomplete)
        for i in range(nt):
            p = touched[i]
            new_pending[p // W, p % W] = R[p]
        n_pend_after = npend
    return cut, found, has_conf, conf_cut, new_total, new_pending, n_after, n_pend_after


@numba.njit(cache=True, nogil=True)
def sketch_add(store, rownorm, path, bucket, idx, sgn, a, b, w):
    """Add tuples ``a..b-1`` to the count sketches of the pyramid nodes ``path`` (a leaf and its
    ancestors), in place: per tuple k and row r, ``store[p, bucket_k, r, idx[r, k] - r w] +=
    sgn[r, k]`` and the row norm kept exact, ``||t + v||^2 = ||t||^2 + (2 t_c + v) v``.  Equal
    to adding the batch's summed delta (the counters are int64 and the norm updates telescope),
    without the delta's temporaries.  ``store`` (n_nodes, B, d, w), ``rownorm`` (n_nodes, B, d)."""
    d = idx.shape[0]
    for k in range(a, b):
        bk = bucket[k]
        for r in range(d):
            c = idx[r, k] - r * w
            v = sgn[r, k]
            for i in range(path.shape[0]):
                p = path[i]
                x = store[p, bk, r, c]
                rownorm[p, bk, r] += (2 * x + v) * v
                store[p, bk, r, c] = x + v
