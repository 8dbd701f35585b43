"""Compiled (numba) per-change loops of the exact operators.

Some maintenance is inherently sequential per value (δ*'s representative
and youngest duplicate; the extremes of MIN/MAX).  These kernels run that
sequence over a step's changes in one compiled loop over integer arrays
(value codes, signs, row references); the operators gather columns with
numpy afterwards.  ``cache=True``: compiled once per machine.
"""
from __future__ import annotations

import numba
import numpy as np

NONE = np.iinfo(np.int64).min        # "no row" in a reference array


@numba.njit(cache=True)
def distinct_replace(code, sign, rid, at, rep, aux, ref_rid_store, last_plus):
    """δ* over one step (golab-ozsu update-pattern paper §5.3.1), per change in (at, sign) order.

    ``rep[c]`` / ``aux[c]``: row references of value c's representative and youngest
    duplicate (``>= 0``: slot of the stored rows; ``< 0``: −(i+1) for input row i;
    NONE: absent).  Updates them in place and returns the emitted (ref, sign, at) and an
    error flag (1: a stored youngest duplicate left before its representative -- the input
    does not expire in FIFO order).  A representative promoted and retracted at the same
    instant cancels out (sign 0 in the output; ``last_plus[c]`` is scratch, one per code).
    """
    n = len(code)
    out_ref = np.empty(2 * n, np.int64)
    out_sign = np.empty(2 * n, np.int8)
    out_at = np.empty(2 * n, np.float64)
    k = 0
    for i in range(n):
        c = code[i]
        me = -(i + 1)
        if sign[i] > 0:
            if rep[c] == NONE:
                rep[c] = me
                out_ref[k] = me
                out_sign[k] = 1
                out_at[k] = at[i]
                last_plus[c] = k
                k += 1
            else:
                aux[c] = me
        else:
            r = rep[c]
            if r == NONE:
                continue
            rr = rid[-r - 1] if r < 0 else ref_rid_store[r]
            if rr == rid[i]:
                lp = last_plus[c]
                if lp >= 0 and out_ref[lp] == r and out_sign[lp] == 1 and out_at[lp] == at[i]:
                    out_sign[lp] = 0          # shown and withdrawn at one instant: nothing
                else:
                    out_ref[k] = r
                    out_sign[k] = -1
                    out_at[k] = at[i]
                    k += 1
                y = aux[c]
                if y == NONE:
                    rep[c] = NONE
                else:
                    rep[c] = y
                    aux[c] = NONE
                    out_ref[k] = y
                    out_sign[k] = 1
                    out_at[k] = at[i]
                    last_plus[c] = k
                    k += 1
            else:
                y = aux[c]
                if y != NONE:
                    yr = rid[-y - 1] if y < 0 else ref_rid_store[y]
                    if yr == rid[i]:
                        return out_ref[:k], out_sign[:k], out_at[:k], 1
    return out_ref[:k], out_sign[:k], out_at[:k], 0


KIND_MIN, KIND_MAX, KIND_COUNT_DISTINCT, KIND_QUANTILE = 0, 1, 2, 3


@numba.njit(cache=True)
def _fen_add(tree, i, d):
    i += 1
    n = len(tree) - 1
    while i <= n:
        tree[i] += d
        i += i & (-i)


@numba.njit(cache=True)
def _fen_prefix(tree, i):
    # sum of counts at positions < i
    s = 0
    while i > 0:
        s += tree[i]
        i -= i & (-i)
    return s


@numba.njit(cache=True)
def _fen_find(tree, target):
    # smallest position p with prefix(p + 1) >= target (target >= 1)
    n = len(tree) - 1
    pos = 0
    step = 1
    while step * 2 <= n:
        step *= 2
    while step > 0:
        if pos + step <= n and tree[pos + step] < target:
            pos += step
            target -= tree[pos]
        step //= 2
    return pos


@numba.njit(cache=True)
def holistic(kind, q, g, pos, sign, last, lo, hi, pc, pf):
    """MIN / MAX / COUNT(DISTINCT) / QUANTILE over per-group sorted (value, count) runs.

    The state of one aggregate is one array of (group, value) pairs sorted by group then
    value, with counts ``pc`` and float values ``pf``; ``lo[r], hi[r]`` bound the segment of
    change r's group, ``pos[r]`` its pair (−1: NULL, ignored).  Changes come grouped by
    group, in time order inside a group.  Per group the kernel keeps the position of the
    extreme (rescanning forward/backward only when the extreme's last copy leaves), the
    number of distinct values, and -- for quantiles -- a Fenwick tree over all counts for
    the k-th value.  Returns the aggregate after every change flagged in ``last`` and the
    number of rescans.
    """
    n = len(g)
    res = np.full(n, np.nan)
    N = len(pc)
    tree = np.zeros(N + 1, np.int64)
    if kind == KIND_QUANTILE:
        for i in range(N):
            if pc[i]:
                _fen_add(tree, i, pc[i])
    rescans = 0
    cur_g = -1
    cur = -1
    nd = 0
    tot = 0
    for r in range(n):
        a, b = lo[r], hi[r]
        if g[r] != cur_g:
            cur_g = g[r]
            cur = -1
            nd = 0
            tot = 0
            if kind == KIND_MIN:
                for p in range(a, b):
                    if pc[p] > 0:
                        cur = p
                        break
            elif kind == KIND_MAX:
                for p in range(b - 1, a - 1, -1):
                    if pc[p] > 0:
                        cur = p
                        break
            else:
                for p in range(a, b):
                    if pc[p] > 0:
                        nd += 1
                        tot += pc[p]
        p = pos[r]
        if p >= 0:
            s = sign[r]
            before = pc[p]
            pc[p] = before + s
            if kind == KIND_QUANTILE:
                _fen_add(tree, p, s)
                tot += s
            elif kind == KIND_COUNT_DISTINCT:
                if before == 0 and s > 0:
                    nd += 1
                elif before + s == 0 and s < 0:
                    nd -= 1
            elif kind == KIND_MIN:
                if s > 0:
                    if cur < 0 or p < cur:
                        cur = p
                elif pc[p] == 0 and p == cur:
                    rescans += 1
                    cur = -1
                    for x in range(p + 1, b):
                        if pc[x] > 0:
                            cur = x
                            break
            else:
                if s > 0:
                    if cur < 0 or p > cur:
                        cur = p
                elif pc[p] == 0 and p == cur:
                    rescans += 1
                    cur = -1
                    for x in range(p - 1, a - 1, -1):
                        if pc[x] > 0:
                            cur = x
                            break
        if last[r]:
            if kind == KIND_MIN or kind == KIND_MAX:
                if cur >= 0:
                    res[r] = pf[cur]
            elif kind == KIND_COUNT_DISTINCT:
                res[r] = nd
            elif tot > 0:
                base = _fen_prefix(tree, a)
                x = q * (tot - 1)
                k0 = int(np.floor(x))
                k1 = min(k0 + 1, tot - 1)
                v0 = pf[_fen_find(tree, base + k0 + 1)]
                v1 = pf[_fen_find(tree, base + k1 + 1)]
                res[r] = v0 + (v1 - v0) * (x - k0)
    return res, rescans


@numba.njit(cache=True)
def distinct_count(code, sign, at, pos_plus, rid_lo, rid_hi, rid_order, alive, seg_lo, seg_hi, rep_pos):
    """Duplicate elimination that keeps every copy (for inputs with negative tuples).

    The copies are one array sorted by (value code, arrival); ``alive`` marks the live ones
    (a copy added in this step turns alive at its + change, ``pos_plus``); a − change
    retracts the first live copy among the positions ``rid_order[rid_lo:rid_hi]`` holding
    its rid.  ``rep_pos[c]``: the representative of value c (−1: none); when it leaves, the
    youngest live copy (scan back from the end of c's segment) replaces it.  Returns the
    emitted (position, sign, at) and an error flag (1: retraction of an unknown row).
    """
    n = len(code)
    out_pos = np.empty(2 * n, np.int64)
    out_sign = np.empty(2 * n, np.int8)
    out_at = np.empty(2 * n, np.float64)
    k = 0
    for i in range(n):
        c = code[i]
        if sign[i] > 0:
            p = pos_plus[i]
            alive[p] = True
            if rep_pos[c] < 0:
                rep_pos[c] = p
                out_pos[k] = p
                out_sign[k] = 1
                out_at[k] = at[i]
                k += 1
        else:
            p = -1
            for j in range(rid_lo[i], rid_hi[i]):
                q = rid_order[j]
                if alive[q]:
                    p = q
                    break
            if p < 0:
                return out_pos[:k], out_sign[:k], out_at[:k], 1
            alive[p] = False
            if rep_pos[c] == p:
                out_pos[k] = p
                out_sign[k] = -1
                out_at[k] = at[i]
                k += 1
                rep_pos[c] = -1
                for q in range(seg_hi[c] - 1, seg_lo[c] - 1, -1):
                    if alive[q]:
                        rep_pos[c] = q
                        out_pos[k] = q
                        out_sign[k] = 1
                        out_at[k] = at[i]
                        k += 1
                        break
    return out_pos[:k], out_sign[:k], out_at[:k], 0


# -- window join (MJoin) ----------------------------------------------------------------------

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@numba.njit(cache=True)
def _splitmix_step(z, r):
    # one SplitMix64 chaining step, bit-identical to ``changes.mix_rids`` (uint64 wraps)
    z = z * _GOLDEN + r
    z = z ^ (z >> np.uint64(30))
    z = z * _M1
    z = z ^ (z >> np.uint64(27))
    z = z * _M2
    z = z ^ (z >> np.uint64(31))
    return z


@numba.njit(cache=True)
def mix_rows(rids):
    """``changes.mix_rids(*rids)`` for a (K, n) uint64 array (the int64 rids viewed as uint64):
    the same SplitMix64 chain over the K members of each column, compiled (one pass)."""
    K, n = rids.shape
    out = np.empty(n, np.uint64)
    for r in range(n):
        z = np.uint64(0)
        for k in range(K):
            z = _splitmix_step(z, rids[k, r])
        out[r] = z
    return out


@numba.njit(cache=True)
def join_extend(lo, hi, total, o, s_, e_, nw_, sj, ej, newj, touchedj, skip_touched):
    """One probe level of MJoin: extend partial composites by the matching live rows of input j.

    Partial composite p (lifetime ``[s_[p], e_[p])``, ``nw_[p]``: has a new member) matches the
    rows ``o[lo[p]:hi[p]]`` of input j (equal key codes, ``o`` orders j's rows by code).  The
    pair (p, b) is kept iff b is not a touched row when ``skip_touched`` (the composite is built
    by its lowest-index touched member), and its lifetime ``[max(s, sj[b]), min(e, ej[b]))`` is
    non-empty -- or it is a composite shown earlier (no new member) that now ends (finite end).
    Output in the order of (p, run position), like ``expand_matches``: (p, b, start, end, new).
    """
    out_p = np.empty(total, np.int64)
    out_b = np.empty(total, np.int64)
    out_s = np.empty(total, np.float64)
    out_e = np.empty(total, np.float64)
    out_nw = np.empty(total, np.bool_)
    k = 0
    for p in range(len(lo)):
        sp, ep, wp = s_[p], e_[p], nw_[p]
        for q in range(lo[p], hi[p]):
            b = o[q]
            if skip_touched and touchedj[b]:
                continue
            ns = max(sp, sj[b])
            ne = min(ep, ej[b])
            nw = wp or newj[b]
            if ns < ne or (not np.isinf(ne) and not nw):
                out_p[k] = p
                out_b[k] = b
                out_s[k] = ns
                out_e[k] = ne
                out_nw[k] = nw
                k += 1
    return out_p[:k], out_b[:k], out_s[:k], out_e[:k], out_nw[:k]


@numba.njit(cache=True)
def _time_rank(idx, c, off, times, ranks, t):
    # rank of time t among the step's times, read from a member row whose time is t (ranks
    # precomputed per row, -1 when not among them); -1 when no member has it.  Branch-free
    # on purpose (a search here as a fallback makes the whole loop several times slower).
    r = -1
    for k in range(idx.shape[0]):
        g = off[k] + idx[k, c]
        cand = ranks[g] if times[g] == t else -1
        r = max(r, cand)
    return r


@numba.njit(cache=True)
def join_emit(idx, s_, e_, nw, ev, off, start_all, end_all, rs_all, re_all, ts_all, rid_all):
    """The changes of a step's composites in (at, sign) order, built in one compiled pass.

    Composite c (members ``idx[k, c]`` of input k; lifetime ``[s_[c], e_[c])``; ``nw[c]``: has a
    new member) emits + at ``s_[c]`` when new and alive, and − at ``e_[c]`` when its end is
    finite and it was shown (alive, or emitted in an earlier step).  Order: by time, − before +
    at equal times, then by composite index -- a stable counting sort on the rank of the time
    among ``ev`` (the sorted distinct start / end times of the step's touched rows; every
    emitted time is a member's start or end, whose rank is precomputed per row in ``rs_all`` /
    ``re_all``).  If a time is not found that way a stable merge sort is used instead.  The
    per-row arrays are the inputs' arrays concatenated, input k at offset ``off[k]``.  Returns
    (comp: the composite of each output, sign, at, ts = max member ts, rid = SplitMix64 mix of
    the member rids, as ``mix_rows``).
    """
    K, n = idx.shape
    E = len(ev)
    km = np.full(n, -1, np.int64)
    kp = np.full(n, -1, np.int64)
    cnt = np.zeros(2 * E + 1, np.int64)
    exact = True
    m = 0
    for c in range(n):
        live = s_[c] < e_[c]
        if nw[c] and live:
            r = _time_rank(idx, c, off, start_all, rs_all, s_[c])
            if r >= 0:
                kp[c] = 2 * r + 1
                cnt[2 * r + 2] += 1
            else:
                exact = False
                kp[c] = 0
            m += 1
        if not np.isinf(e_[c]) and (live or not nw[c]):
            r = _time_rank(idx, c, off, end_all, re_all, e_[c])
            if r >= 0:
                km[c] = 2 * r
                cnt[2 * r + 1] += 1
            else:
                exact = False
                km[c] = 0
            m += 1
    # destination of each composite's − (dm) and + (dp) output (overwrites the keys)
    dm = km
    dp = kp
    if exact:
        for b in range(1, 2 * E + 1):
            cnt[b] += cnt[b - 1]
        for c in range(n):
            b = km[c]
            if b >= 0:
                dm[c] = cnt[b]
                cnt[b] += 1
            b = kp[c]
            if b >= 0:
                dp[c] = cnt[b]
                cnt[b] += 1
    else:
        # retractions first, then a stable sort on the time
        seq_c = np.empty(m, np.int64)
        seq_at = np.empty(m, np.float64)
        j = 0
        for c in range(n):
            if km[c] >= 0:
                seq_c[j] = c
                seq_at[j] = e_[c]
                j += 1
        nm = j
        for c in range(n):
            if kp[c] >= 0:
                seq_c[j] = c
                seq_at[j] = s_[c]
                j += 1
        o = np.argsort(seq_at, kind="mergesort")
        for j in range(m):
            if o[j] < nm:
                dm[seq_c[o[j]]] = j
            else:
                dp[seq_c[o[j]]] = j
    # one sequential pass over the composites, scattering their rows to their positions
    comp = np.empty(m, np.int64)
    sign = np.empty(m, np.int8)
    at = np.empty(m, np.float64)
    ts = np.empty(m, np.float64)
    rid = np.empty(m, np.uint64)
    for c in range(n):
        if dm[c] < 0 and dp[c] < 0:
            continue
        z = np.uint64(0)
        t = -np.inf
        for k in range(K):
            g = off[k] + idx[k, c]
            x = ts_all[g]
            if k == 0 or x > t or x != x:        # np.maximum (NaN propagates)
                t = x
            z = _splitmix_step(z, rid_all[g])
        j = dm[c]
        if j >= 0:
            comp[j] = c
            sign[j] = -1
            at[j] = e_[c]
            ts[j] = t
            rid[j] = z
        j = dp[c]
        if j >= 0:
            comp[j] = c
            sign[j] = 1
            at[j] = s_[c]
            ts[j] = t
            rid[j] = z
    return comp, sign, at, ts, rid


# -- holistic aggregates: merge of a step's (group, value) pairs into the sorted state ------------

@numba.njit(cache=True)
def pairs_merge(pg, pk, pf, pc, ng, nk, nf, o):
    """Merge new (group, key) pairs into the sorted, duplicate-free state (one linear pass).

    State: ``pg, pk`` sorted by (group, key), values ``pf``, counts ``pc``.  New pairs
    ``ng, nk, nf`` in the order ``o`` (sorted by (group, key), stable).  Equal pairs are
    merged (a state pair first, then the new ones in order; the first one's value is kept),
    new pairs adding count 0.  Returns the merged (group, key, value, count) arrays and the
    merged position of every new pair (by its index in ``ng``).
    """
    n_old = len(pg)
    n_new = len(o)
    cap = n_old + n_new
    mg = np.empty(cap, np.int64)
    mk = np.empty(cap, np.int64)
    mf = np.empty(cap, np.float64)
    mc = np.empty(cap, np.int64)
    pos = np.empty(len(ng), np.int64)
    i = 0
    j = 0
    m = 0
    while i < n_old or j < n_new:
        take_old = j >= n_new
        if not take_old and i < n_old:
            r = o[j]
            take_old = pg[i] < ng[r] or (pg[i] == ng[r] and pk[i] <= nk[r])
        if take_old:
            g, k, f, c, src = pg[i], pk[i], pf[i], pc[i], -1
            i += 1
        else:
            src = o[j]
            g, k, f, c = ng[src], nk[src], nf[src], 0
            j += 1
        if m > 0 and mg[m - 1] == g and mk[m - 1] == k:
            mc[m - 1] += c
        else:
            mg[m] = g
            mk[m] = k
            mf[m] = f
            mc[m] = c
            m += 1
        if src >= 0:
            pos[src] = m - 1
    return mg[:m], mk[:m], mf[:m], mc[:m], pos


@numba.njit(cache=True)
def _bisect(a, x, right):
    lo, hi = 0, len(a)
    while lo < hi:
        mid = (lo + hi) >> 1
        if a[mid] < x or (right and a[mid] == x):
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True)
def holistic_step(kinds, qs, g, key, fval, null, sign, last, pg, pk, pf, pc):
    """One step of a holistic aggregate's sorted (group, value, count) state, compiled end to end.

    The non-NULL changes' pairs (``g``, order ``key``, value ``fval``) are sorted by (group, key)
    (a sort by key, then a counting sort by group) and merged into the state (:func:`pairs_merge`);
    each change's group segment is found by binary search; :func:`holistic` runs the changes
    once per aggregate ``kinds[t]`` (``qs[t]``) reading this state (MIN, MAX, ... of one
    column share it); emptied pairs are dropped.  Returns (aggregate t after every change
    flagged in ``last``, as row t of a 2-D array; rescans; the new state pg, pk, pf, pc; error
    flag: 1 if a value was retracted that is not in its group).
    """
    n = len(g)
    ok = np.empty(n, np.int64)
    m = 0
    for r in range(n):
        if not null[r]:
            ok[m] = r
            m += 1
    ok = ok[:m]
    ng = g[ok]
    nk = key[ok]
    nf = fval[ok]
    # sort by (group, key): by key, then a stable counting sort by group.  The first sort
    # need not be stable: equal keys are equal values (the key is a bijection of the float
    # bits; fingerprint keys carry no value), so the merged state is the same either way.
    o1 = np.argsort(nk)
    G = 0
    for j in range(m):
        if ng[j] < 0:
            G = -1
            break
        G = max(G, ng[j] + 1)
    if G < 0 or G > 4 * m + 4096:
        o = o1[np.argsort(ng[o1], kind="mergesort")]
    else:
        cnt = np.zeros(G + 1, np.int64)
        for j in range(m):
            cnt[ng[j] + 1] += 1
        for b in range(1, G + 1):
            cnt[b] += cnt[b - 1]
        o = np.empty(m, np.int64)
        for j in range(m):
            x = o1[j]
            o[cnt[ng[x]]] = x
            cnt[ng[x]] += 1
    mg, mk, mf, mc, pos_ok = pairs_merge(pg, pk, pf, pc, ng, nk, nf, o)
    pos = np.full(n, -1, np.int64)
    for j in range(m):
        pos[ok[j]] = pos_ok[j]
    lo = np.empty(n, np.int64)
    hi = np.empty(n, np.int64)
    for r in range(n):
        if r > 0 and g[r] == g[r - 1]:
            lo[r] = lo[r - 1]
            hi[r] = hi[r - 1]
        else:
            lo[r] = _bisect(mg, g[r], False)
            hi[r] = _bisect(mg, g[r], True)
    T = len(kinds)
    res = np.empty((T, n))
    rescans = 0
    for t in range(T):
        pcw = mc.copy() if t < T - 1 else mc          # every pass starts from the step's counts
        r, rs = holistic(kinds[t], qs[t], g, pos, sign, last, lo, hi, pcw, mf)
        res[t] = r
        rescans += rs
    err = 0
    k = 0
    for p in range(len(mc)):
        if mc[p] < 0:
            err = 1
        if mc[p] > 0:
            mg[k] = mg[p]
            mk[k] = mk[p]
            mf[k] = mf[p]
            mc[k] = mc[p]
            k += 1
    return res, rescans, mg[:k].copy(), mk[:k].copy(), mf[:k].copy(), mc[:k].copy(), err


# -- KeyDict: fingerprint -> dense code, an open-addressing hash table --------------------------

@numba.njit(cache=True)
def _fp_slot(f, shift):
    # Fibonacci hashing: the top bits of fp * φ (the fingerprints of small numbers are not mixed)
    return np.int64((np.uint64(f) * _GOLDEN) >> shift)


@numba.njit(cache=True)
def keydict_build(fps, n, bits):
    """A table of 2**bits slots (code, −1: empty) holding codes 0..n-1 of fingerprints ``fps``."""
    table = np.full(1 << bits, -1, np.int64)
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    for c in range(n):
        s = _fp_slot(fps[c], shift)
        while table[s] >= 0:
            s = (s + 1) & mask
        table[s] = c
    return table


@numba.njit(cache=True)
def keydict_codes(fp, table, fps, n, bits, insert):
    """Codes of fingerprints ``fp`` (linear probing); unknown ones get the next codes in order
    of first appearance when ``insert`` (``fps`` must have room), else −1.  Returns (codes, n)."""
    mask = (1 << bits) - 1
    shift = np.uint64(64 - bits)
    out = np.empty(len(fp), np.int64)
    for i in range(len(fp)):
        f = fp[i]
        s = _fp_slot(f, shift)
        while True:
            c = table[s]
            if c < 0:
                if insert:
                    table[s] = n
                    fps[n] = f
                    out[i] = n
                    n += 1
                else:
                    out[i] = -1
                break
            if fps[c] == f:
                out[i] = c
                break
            s = (s + 1) & mask
    return out, n
