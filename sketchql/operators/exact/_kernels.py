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
