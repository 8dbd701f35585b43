"""Change signal for self-adjusting time zones (paper section 3.3).

Why not ``CountSketch.confidence()`` alone: it is ``1 - sqrt(F2/w)/L1``, a
function of the zone's skew.  Mixing two different distributions *lowers*
F2/L1^2, so an abrupt change makes it go *up*: it cannot see a change.

Signal used here.  Let H be the zone's tuples before the recent sub-window
R (the last ``check_every`` tuples), with counts n_H, n_R, frequency vectors
f_H, f_R, and suppose both are multinomial samples of distributions p_H,
p_R.  Then

    E[<f_H, f_R>]      = n_H n_R <p_H, p_R>
    E[F2(f) - n]       = n (n - 1) ||p||^2           (unbiased, any p)

so the *noise-corrected cosine*

    rho = (<f_H, f_R> / (n_H n_R)) /
          sqrt( (F2_H - n_H) / (n_H (n_H - 1)) * (F2_R - n_R) / (n_R (n_R - 1)) )

estimates cos(p_H, p_R): about 1 for a stationary stream whatever its skew
(the sampling noise of ``F2`` has been removed), and about the overlap of
the two distributions after a change (about 0 when the heavy items change).
All three quantities come from the count sketches: ``<f_H, f_R>`` is the
median over rows of the row inner products of the two tables (the sketch
inner-product estimator, unbiased per row) and ``F2`` the median of the rows'
squared norms.  When a distribution has no repeated values (F2 - n <= 0)
there is no evidence and rho = 1.

The zone's confidence is ``min(rho clipped to [0, 1], sketch confidence)``
where the sketch confidence is ``CountSketch.confidence()`` of the zone
(``1 - sqrt(F2/w)/L1``); a new zone starts when it drops below ``theta``.

>>> import numpy as np
>>> a = np.zeros((1, 8), dtype=np.int64); a[0, 0] = 900; a[0, 1] = 100
>>> b = np.zeros((1, 8), dtype=np.int64); b[0, 0] = 90; b[0, 1] = 10
>>> round(similarity(a, 1000, b, 100), 3)
1.0
>>> c = np.zeros((1, 8), dtype=np.int64); c[0, 5] = 100
>>> round(similarity(a, 1000, c, 100), 3)
0.0
"""
from __future__ import annotations

import math

import numpy as np


def _med(x: np.ndarray) -> float:
    """Median of a short vector (one value per sketch row)."""
    x = np.sort(x)
    k = len(x)
    return float(x[k // 2]) if k % 2 else float(0.5 * (x[k // 2 - 1] + x[k // 2]))


def _rho(ip: float, f2h: float, n_h: int, f2r: float, n_r: int) -> float:
    if n_h < 2 or n_r < 2:
        return 1.0
    a_h = (f2h - n_h) / (n_h * (n_h - 1.0))
    a_r = (f2r - n_r) / (n_r * (n_r - 1.0))
    if a_h <= 0 or a_r <= 0:
        return 1.0
    rho = (ip / (float(n_h) * n_r)) / math.sqrt(a_h * a_r)
    return float(min(1.0, max(0.0, rho)))


def similarity(h: np.ndarray, n_h: int, r: np.ndarray, n_r: int) -> float:
    """Noise-corrected cosine rho between two (d, w) sketch tables (see module doc)."""
    hf = h.astype(np.float64)
    rf = r.astype(np.float64)
    return _rho(_med(np.einsum("ij,ij->i", hf, rf)), _med(np.einsum("ij,ij->i", hf, hf)), n_h,
                _med(np.einsum("ij,ij->i", rf, rf)), n_r)


def sketch_confidence(t: np.ndarray, n: int) -> float:
    """``CountSketch.confidence()`` of a (d, w) table holding n tuples."""
    if n <= 0:
        return 1.0
    tf = t.astype(np.float64)
    f2 = _med(np.einsum("ij,ij->i", tf, tf))
    return 1.0 - min(1.0, math.sqrt(f2 / t.shape[1]) / n)


def zone_confidence(total: np.ndarray, n_total: int, recent: np.ndarray, n_recent: int) -> float:
    """Confidence of a zone whose whole sketch is ``total`` and recent sub-window ``recent``.

    One pass: per row, F2(total) = F2(H) + 2 <H, R> + F2(R) with H = total - recent.
    """
    hf = np.subtract(total, recent, dtype=np.float64)
    rf = recent if recent.dtype == np.float64 else recent.astype(np.float64)
    ip = np.einsum("ij,ij->i", hf, rf)
    f2h = np.einsum("ij,ij->i", hf, hf)
    f2r = np.einsum("ij,ij->i", rf, rf)
    rho = _rho(_med(ip), _med(f2h), n_total - n_recent, _med(f2r), n_recent)
    f2t = _med(f2h + 2 * ip + f2r)
    conf = 1.0 - min(1.0, math.sqrt(max(f2t, 0.0) / total.shape[1]) / n_total) if n_total > 0 else 1.0
    return min(rho, conf)
