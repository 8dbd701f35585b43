"""Interval estimators for aggregates computed on samples (vectorized over groups or trials).

Every function takes numpy arrays (one entry per group, or per simulated trial)
and returns ``(estimate, lo, hi)`` at confidence ``conf``; ``z = Φ⁻¹((1 + conf) / 2)``.

Notation: a sampled row ``i`` was kept with probability ``π_i`` (per-query
sampling rate × the stream's keep probability) and carries the Horvitz–Thompson
weight ``w_i = 1 / π_i``.  The sums below run over the kept rows of one group.

* **COUNT**   ``N̂ = Σ w``; with uniform ``π = p`` the kept count ``n ~ Bin(N, p)``
  and the interval is the *score* (Wilson) interval inverted for ``N``: the
  roots of ``(n − N p)² = z² N p (1 − p)``,
  ``N = (B ± √(B² − 4 p² n²)) / (2 p²)``, ``B = 2 n p + z² p (1 − p)``
  (``p = n / Σ w``; exact, zero width, when ``p = 1``); ``lo >= n``.
* **SUM**     ``Ŝ = Σ w x``, ``V̂ = Σ w (w − 1) x²`` (HT variance of Poisson
  sampling); ``Ŝ ± z √V̂``.
* **AVG**     ratio ``x̄ = Σ w x / Σ w``; linearized variance
  ``V̂ = Σ w (w − 1) (x − x̄)² / (Σ w)²``; ``x̄ ± t √V̂`` (Student t, n − 1 df).
* **QUANTILE** sample quantile (interpolated, like the exact operator); the
  distribution-free order-statistic interval with the finite-population
  correction ``f = 1 − p``: ranks ``n q ∓ z √(n q (1 − q) f)``, rounded out.
* **COUNT(DISTINCT)** under *universe* (hash) sampling at rate ``p`` each
  distinct value is kept with all its copies independently with probability
  ``p``, so the kept distinct count ``d ~ Bin(D, p)``: the same score
  interval as COUNT with ``n = d``.

>>> import numpy as np
>>> est, lo, hi = count_interval(np.array([100.0]), np.array([1000.0]), 0.95)
>>> float(est[0]), bool(lo[0] < 1000 < hi[0])
(1000.0, True)
>>> count_interval(np.array([7.0]), np.array([7.0]), 0.95)[1].tolist()   # p = 1: exact
[7.0]
"""
from __future__ import annotations

import numpy as np
from scipy import stats as _st

__all__ = ["z_of", "count_interval", "sum_interval", "avg_interval", "quantile_interval",
           "distinct_interval", "relative_halfwidth"]


def z_of(conf: float) -> float:
    """Two-sided normal quantile for a confidence level in (0, 1)."""
    conf = float(conf)
    if not 0.0 < conf < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {conf}")
    return float(_st.norm.ppf(0.5 + conf / 2.0))


def _f(x):
    return np.asarray(x, dtype=np.float64)


def count_interval(n, sum_w, conf: float, var_w=None):
    """COUNT from ``n`` kept rows of total HT weight ``sum_w`` (module doc).

    With ``var_w = Σ w (w − 1)`` the rows kept with certainty (outlier index, ``w = 1``) are
    separated from the sampled ones as if the latter shared one rate: ``p = (Σw − n) / var_w``,
    ``n_r = (Σw − n) / (1/p − 1)`` sampled rows; the score interval covers those and the
    certain ``n − n_r`` rows are added exactly."""
    n, sw = _f(n), _f(sum_w)
    z = z_of(conf)
    with np.errstate(divide="ignore", invalid="ignore"):
        if var_w is None:
            p = np.where(sw > 0, np.minimum(n / sw, 1.0), 1.0)
            nr, fixed = n, 0.0
        else:
            v = _f(var_w)
            extra = sw - n
            p = np.where(v > 0, np.clip(extra / v, 1e-12, 1.0), 1.0)
            nr = np.where(v > 0, np.clip(extra * p / np.maximum(1 - p, 1e-12), 0.0, n), 0.0)
            fixed = n - nr
        B = 2 * nr * p + z * z * p * (1 - p)
        disc = np.sqrt(np.maximum(B * B - 4 * p * p * nr * nr, 0.0))
        lo = (B - disc) / (2 * p * p)
        hi = (B + disc) / (2 * p * p)
    lo = np.where(p >= 1.0, nr, np.maximum(lo, nr)) + fixed
    hi = np.where(p >= 1.0, nr, hi) + fixed
    return sw.copy(), lo, hi


def distinct_interval(d, p, conf: float):
    """COUNT(DISTINCT) from ``d`` kept distinct values under universe sampling at rate ``p``."""
    d, p = _f(d), np.broadcast_to(_f(p), np.shape(d))
    with np.errstate(divide="ignore", invalid="ignore"):
        return count_interval(d, np.where(p > 0, d / p, 0.0), conf)


def sum_interval(s1, v, conf: float):
    """SUM: ``s1 = Σ w x``, ``v = Σ w (w − 1) x²``."""
    s1, v = _f(s1), _f(v)
    h = z_of(conf) * np.sqrt(np.maximum(v, 0.0))
    return s1.copy(), s1 - h, s1 + h


def avg_interval(n, s0, s1, v0, v1, v2, conf: float):
    """AVG: ``s0 = Σ w``, ``s1 = Σ w x``, ``vk = Σ w (w − 1) x^k`` (module doc)."""
    n, s0, s1, v0, v1, v2 = map(_f, (n, s0, s1, v0, v1, v2))
    with np.errstate(divide="ignore", invalid="ignore"):
        m = s1 / s0
        var = (v2 - 2 * m * v1 + m * m * v0) / (s0 * s0)
        t = np.where(n > 1, _st.t.ppf(0.5 + conf / 2.0, np.maximum(n - 1, 1)), np.inf)
        h = t * np.sqrt(np.maximum(var, 0.0))
    h = np.where(v0 <= 0, 0.0, h)            # every weight 1: exact
    return m, m - h, m + h


def quantile_ranks(n, q: float, p, conf: float):
    """0-based (lo, hi) order-statistic indices of the quantile interval (module doc)."""
    n, p = _f(n), _f(p)
    z = z_of(conf)
    f = np.clip(1.0 - p, 0.0, 1.0)
    c = (n - 1) * q
    half = z * np.sqrt(n * q * (1 - q) * f)
    lo = np.clip(np.floor(c - half), 0, np.maximum(n - 1, 0)).astype(np.int64)
    hi = np.clip(np.ceil(c + half), 0, np.maximum(n - 1, 0)).astype(np.int64)
    return lo, hi


def _interp(sorted_vals: np.ndarray, q: float) -> float:
    n = len(sorted_vals)
    if n == 0:
        return np.nan
    pos = q * (n - 1)
    a = int(np.floor(pos))
    b = min(a + 1, n - 1)
    return float(sorted_vals[a] + (sorted_vals[b] - sorted_vals[a]) * (pos - a))


def quantile_interval(sorted_vals, q: float, p: float, conf: float):
    """Quantile of one sorted sample (a 1-d array) kept at rate ``p``: ``(est, lo, hi)``."""
    v = np.asarray(sorted_vals, dtype=np.float64)
    n = len(v)
    if n == 0:
        return np.nan, np.nan, np.nan
    est = _interp(v, q)
    if p >= 1.0:
        return est, est, est
    lo, hi = quantile_ranks(np.array([n]), q, np.array([p]), conf)
    return est, min(float(v[lo[0]]), est), max(float(v[hi[0]]), est)


def quantile_interval_matrix(samples: np.ndarray, counts: np.ndarray, q: float, p: float, conf: float):
    """Vectorized :func:`quantile_interval` over trials: ``samples`` is (trials, m) with each row
    sorted ascending and padded with +inf beyond ``counts[row]`` kept values."""
    counts = np.asarray(counts, np.int64)
    T = samples.shape[0]
    idx = np.arange(T)
    pos = q * (counts - 1)
    a = np.floor(pos).astype(np.int64)
    b = np.minimum(a + 1, counts - 1)
    va, vb = samples[idx, np.maximum(a, 0)], samples[idx, np.maximum(b, 0)]
    est = va + (vb - va) * (pos - a)
    lo, hi = quantile_ranks(counts, q, np.full(T, p), conf)
    lo_v = np.minimum(samples[idx, lo], est)
    hi_v = np.maximum(samples[idx, hi], est)
    if p >= 1.0:
        lo_v, hi_v = est.copy(), est.copy()
    return est, lo_v, hi_v


def relative_halfwidth(est, lo, hi):
    """max(est − lo, hi − est) / |est| (inf when est = 0 and the interval is not a point)."""
    est, lo, hi = _f(est), _f(lo), _f(hi)
    h = np.maximum(est - lo, hi - est)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(h <= 0, 0.0, h / np.abs(est))
    return r
