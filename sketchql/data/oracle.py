"""Brute-force (vectorized) window-join oracle over :class:`Arrivals`.

Pair semantics (the same the promising-tuple operators use): a tuple ``x``
of stream ``a`` and a tuple ``y`` of stream ``b`` join iff
``x.item == y.item`` and ``|x.ts - y.ts| < w`` (equivalently: the later one,
on its arrival at time tau, finds the earlier one inside its window
``tau - w < ts <= tau``).  Every pair is counted once, by the later arrival
(global ``seq``), so ties in timestamps are broken by arrival order.
``w = inf`` is the whole-stream window.
"""
from __future__ import annotations

import numpy as np

from ..errors import SketchQLError
from .generator import Arrivals


def _counts_one_side(arr: Arrivals, probe: np.ndarray, build: np.ndarray, window: float, key: str):
    keys = getattr(arr, key)
    bk = keys[build]
    order = np.argsort(bk, kind="stable")  # (key, seq) order; ts increases within a key
    b_idx = build[order]
    bk = bk[order]
    n = len(arr) + 1
    # upper bound: build tuples of the same key that arrived before the probe
    bkey_seq = bk.astype(np.int64) * n + arr.seq[b_idx]
    pk = keys[probe].astype(np.int64)
    upper = np.searchsorted(bkey_seq, pk * n + arr.seq[probe], side="left")
    if np.isinf(window):
        lower = np.searchsorted(bkey_seq, pk * n, side="left")
    else:
        t0 = float(arr.ts.min()) if len(arr) else 0.0
        span = float(arr.ts.max() - t0) + window + 1.0
        bkey_ts = bk.astype(np.float64) * span + (arr.ts[b_idx] - t0)
        lower = np.searchsorted(bkey_ts, pk * span + (arr.ts[probe] - window - t0), side="right")
        lower = np.maximum(lower, np.searchsorted(bkey_seq, pk * n, side="left"))
    return np.maximum(upper - lower, 0), lower, upper, b_idx


def window_match_counts(arr: Arrivals, window: float, a: int = 0, b: int = 1, key: str = "item") -> np.ndarray:
    """Per arrival (array of len(arr)): the number of earlier tuples of the
    *other* stream (``a`` <-> ``b``) it joins with; 0 for other streams."""
    if window <= 0:
        raise SketchQLError(f"window_match_counts: window must be > 0 seconds, got {window!r}")
    out = np.zeros(len(arr), np.int64)
    ia = np.flatnonzero(arr.stream == a)
    ib = np.flatnonzero(arr.stream == b)
    out[ia] = _counts_one_side(arr, ia, ib, window, key)[0]
    out[ib] = _counts_one_side(arr, ib, ia, window, key)[0]
    return out


def window_sizes(arr: Arrivals, window: float, a: int = 0, b: int = 1) -> np.ndarray:
    """Per arrival: how many earlier tuples of the other stream are in its window."""
    out = np.zeros(len(arr), np.int64)
    for p, q in ((a, b), (b, a)):
        ip = np.flatnonzero(arr.stream == p)
        iq = np.flatnonzero(arr.stream == q)
        upper = np.searchsorted(arr.seq[iq], arr.seq[ip], side="left")
        if np.isinf(window):
            lower = np.zeros_like(upper)
        else:
            lower = np.searchsorted(arr.ts[iq], arr.ts[ip] - window, side="right")
        out[ip] = np.maximum(upper - lower, 0)
    return out


def join_selectivity(arr: Arrivals, window: float = 60.0, a: int = 0, b: int = 1, warmup: float | None = None) -> float:
    """Average join selectivity: sum of matches / sum of window sizes over all
    arrivals of streams a and b after ``warmup`` seconds (default: one window,
    so every window is full), i.e. ``P[x.item == y.item]`` over (arrival x,
    window tuple y of the other stream) pairs."""
    m = window_match_counts(arr, window, a, b)
    n = window_sizes(arr, window, a, b)
    if warmup is None:
        warmup = window if np.isfinite(window) else 0.0
    keep = (arr.ts >= arr.ts.min() + warmup) & ((arr.stream == a) | (arr.stream == b))
    den = n[keep].sum()
    return float(m[keep].sum() / den) if den else 0.0


def exact_join_pairs(arr: Arrivals, window: float, a: int = 0, b: int = 1, key: str = "item"):
    """Materialize the exact window join: arrays ``(seq_a, seq_b)`` (global
    arrival numbers of the stream-a and stream-b member of every pair),
    sorted by (seq_a, seq_b).  Use on small inputs (the output is big)."""
    res_a, res_b = [], []
    for p, q in ((a, b), (b, a)):
        ip = np.flatnonzero(arr.stream == p)
        iq = np.flatnonzero(arr.stream == q)
        cnt, lower, upper, b_idx = _counts_one_side(arr, ip, iq, window, key)
        tot = int(cnt.sum())
        if tot == 0:
            continue
        rep = np.repeat(np.arange(ip.shape[0]), cnt)
        starts = np.repeat(lower[cnt > 0] if False else np.where(cnt > 0, lower, 0), cnt)
        offs = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        probe_seq = arr.seq[ip[rep]]
        build_seq = arr.seq[b_idx[starts + offs]]
        if p == a:
            res_a.append(probe_seq); res_b.append(build_seq)
        else:
            res_a.append(build_seq); res_b.append(probe_seq)
    if not res_a:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    sa = np.concatenate(res_a); sb = np.concatenate(res_b)
    o = np.lexsort((sb, sa))
    return sa[o], sb[o]


def window_value_counts(arr: Arrivals, window: float, a: int = 0, b: int = 1, key: str = "item") -> np.ndarray:
    """Per arrival ``x`` of streams a/b: how many tuples of a and b (``x``
    included) with ``x``'s key arrived up to ``x`` and are inside its window
    ``(x.ts - w, x.ts]`` -- the value's frequency in the window when ``x``
    arrives.  0 for arrivals of other streams."""
    sel = np.flatnonzero((arr.stream == a) | (arr.stream == b))
    out = np.zeros(len(arr), np.int64)
    if sel.shape[0] == 0:
        return out
    # count earlier-or-equal tuples: the probe counts itself (seq + 1 as bound)
    keys = getattr(arr, key)
    bk = keys[sel]
    order = np.argsort(bk, kind="stable")
    b_idx = sel[order]
    bk = bk[order].astype(np.int64)
    n = len(arr) + 1
    bkey_seq = bk * n + arr.seq[b_idx]
    pk = keys[sel].astype(np.int64)
    upper = np.searchsorted(bkey_seq, pk * n + arr.seq[sel], side="right")
    first = np.searchsorted(bkey_seq, pk * n, side="left")
    if np.isinf(window):
        lower = first
    else:
        t0 = float(arr.ts.min())
        span = float(arr.ts.max() - t0) + window + 1.0
        bkey_ts = bk.astype(np.float64) * span + (arr.ts[b_idx] - t0)
        lower = np.maximum(np.searchsorted(bkey_ts, pk * span + (arr.ts[sel] - window - t0), side="right"), first)
    out[sel] = upper - lower
    return out
