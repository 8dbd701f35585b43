"""Interval coverage of the sampled estimators against the simulated oracle.

For each estimator (COUNT, SUM, AVG, quantile, distinct count), each reduction
(per-query sampling, load shedding at the input) and each data set (uniform
and Zipf-skewed), TRIALS seeded trials draw the kept rows from a fixed window
(vectorized: one keep-mask row per trial).  A 95 % interval must cover the
truth in 94–97 % of the trials, and its median width must be at most 1.5×
the oracle interval (the 2.5 %–97.5 % quantiles of the estimator's own error
over the trials).  The inclusion probabilities come from the library's
samplers (outlier index, keyed shedding by hash), not from the test.
"""
from __future__ import annotations

import numpy as np
import pytest

from sketchql.approx import estimators as E
from sketchql.approx.sampling import outlier_mask, universe_keep

TRIALS = 5000          # >= 200 per estimator; 5000 keeps the Monte-Carlo error of the coverage ~0.3 %
N = 3000
CONF = 0.95


def _data(kind: str, rng):
    if kind == "uniform":
        return rng.uniform(0.0, 100.0, N)
    # Zipf-skewed: values from a Zipf law over 1..1000 ranks mapped to a heavy-tailed magnitude
    ranks = np.minimum(rng.zipf(1.3, N), 1000)
    return rng.lognormal(0.0, 1.0, N) * (1000.0 / ranks) ** 0.35


def _pi(kind: str, x, rate: float):
    """Inclusion probability per row: the sampler's Bernoulli rate with its outlier index (sampling),
    or the stream shedder's keep rate with outliers protected (shedding)."""
    pi = np.full(len(x), rate)
    om = outlier_mask({"x": x}, ["x"], 0.01)
    pi[om] = 1.0
    return pi


def _check(name, est, lo, hi, truth):
    cov = float(np.mean((lo <= truth) & (truth <= hi)))
    err = est - truth
    oracle = np.quantile(err, 0.975) - np.quantile(err, 0.025)
    width = float(np.median(hi - lo))
    assert 0.94 <= cov <= 0.97, f"{name}: coverage {cov:.3f}"
    assert width <= 1.5 * oracle, f"{name}: width {width:.4g} vs oracle {oracle:.4g}"
    return cov, width / oracle


@pytest.mark.parametrize("data", ["uniform", "zipf"])
@pytest.mark.parametrize("reduction,rate", [("sampling", 0.1), ("shedding", 0.3)])
def test_count_sum_avg_quantile_coverage(data, reduction, rate):
    rng = np.random.default_rng({"uniform": 1, "zipf": 2}[data] * 10 + (reduction == "shedding"))
    x = _data(data, rng)
    pi = _pi(reduction, x, rate)
    keep = rng.random((TRIALS, N)) < pi[None, :]
    w = 1.0 / pi
    ww = w * (w - 1.0)
    n = keep.sum(1)
    s0 = keep @ w
    s1 = keep @ (w * x)
    v0, v1, v2 = keep @ ww, keep @ (ww * x), keep @ (ww * x * x)
    _check(f"COUNT {data} {reduction}", *E.count_interval(n, s0, CONF, v0), N)
    _check(f"SUM {data} {reduction}", *E.sum_interval(s1, v2, CONF), x.sum())
    _check(f"AVG {data} {reduction}", *E.avg_interval(n, s0, s1, v0, v1, v2, CONF), x.mean())
    # quantile: rows sorted per trial, padded with +inf (no outlier index for quantiles: plain rate)
    keep_q = rng.random((TRIALS, N)) < rate
    xs = np.sort(np.where(keep_q, x[None, :], np.inf), axis=1)
    nq = keep_q.sum(1)
    truth = float(np.quantile(x, 0.5))       # continuous quantile, like the exact operator
    _check(f"MEDIAN {data} {reduction}", *E.quantile_interval_matrix(xs, nq, 0.5, rate, CONF), truth)


@pytest.mark.parametrize("data", ["uniform", "zipf"])
@pytest.mark.parametrize("reduction,rate", [("sampling", 0.1), ("shedding", 0.3)])
def test_distinct_count_coverage(data, reduction, rate):
    rng = np.random.default_rng(7 + (data == "zipf") * 3 + (reduction == "shedding"))
    if data == "uniform":
        values = rng.integers(0, 4000, 20000)
    else:
        values = np.minimum(rng.zipf(1.2, 20000), 10**6)
    distinct = np.unique(values)
    D = len(distinct)
    # universe sampling / keyed shedding: the library's hash decides, one hash seed per trial
    d = np.array([universe_keep(distinct, rate, seed=t).sum() for t in range(4000)])
    _check(f"COUNT(DISTINCT) {data} {reduction}", *E.distinct_interval(d, rate, CONF), D)


def test_exact_when_everything_is_kept():
    n = np.array([10.0, 20.0])
    est, lo, hi = E.count_interval(n, n, CONF)
    assert (lo == n).all() and (hi == n).all()
    est, lo, hi = E.avg_interval(n, n, 3 * n, 0 * n, 0 * n, 0 * n, CONF)
    assert (lo == 3).all() and (hi == 3).all()


def test_intervals_shrink_with_the_sample():
    a = E.count_interval(np.array([100.0]), np.array([1000.0]), CONF)
    b = E.count_interval(np.array([500.0]), np.array([1000.0]), CONF)
    assert (b[2] - b[1]) < (a[2] - a[1])


def test_bad_confidence_is_refused():
    with pytest.raises(ValueError, match="confidence"):
        E.z_of(1.5)
