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
