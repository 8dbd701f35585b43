"""PT COUNT's ~95 % error bound holds at a small budget (issue 16, audit hX section 4).

``SELECT COUNT(*) ... WHERE S.k BETWEEN 2 AND 300 WITH PREFERENCE desc S.k WITHIN 1 PROBES PER
TUPLE`` on Zipf keys through SQL and :class:`Engine`, pushed in batches of 1, 2, 5 and 10 s, on
the shared and on the private value layer.  Oracle: numpy's count of the window ``(now - 10,
now]`` at every answer after t = 15 s.  The documented promise (aggregates module doc): the
bound holds in about 90-97.5 % of the steps; it must not be bought by inflating the bound
(its median stays a small share of the estimate).

On the shared layer at 1 unit per tuple half of the arrivals are shed: they are in the layer but
not the query's scanned ones.  The shed tuples of the zone straddling the window start that a
scan compared were pro-rated as if they had arrived after the scan (their times are known and
earlier): at 5 s pushes the estimate was 2.2 % high and only 41-47 % of the answers were inside
the bound (worst miss 28.8x the bound).
"""
import warnings

import numpy as np
import pytest

from sketchql.engine import Engine

W = 10.0
SQL = ("SELECT COUNT(*) AS a FROM S [RANGE 10] WHERE S.k BETWEEN 2 AND 300 "
       "WITH PREFERENCE desc S.k WITHIN 1 PROBES PER TUPLE")


def _run(share: bool, step: float, seed: int, duration: float = 60.0, rate: float = 300.0):
    """(estimates, errors, true counts) of every answer after t = 15 s."""
    rng = np.random.default_rng(100 + seed)
    n = int(duration * rate)
    ts = np.sort(rng.uniform(0, duration, n))
    k = np.minimum(rng.zipf(1.4, n), 800)
    eng = Engine(seed=seed)
    eng.set_control("share_indexes", share)
    eng.execute("CREATE STREAM S (k INT) TIMESTAMP ts")
    q = eng.register(SQL)
    est, err, true = [], [], []
    for t0 in np.arange(0, duration, step):
        m = (ts >= t0) & (ts < t0 + step)
        if not m.any():
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            eng.push("S", {"ts": ts[m], "k": k[m]})
        if t0 < 15:
            continue
        now = ts[m][-1]
        true.append(int(((ts > now - W) & (ts <= now) & (k >= 2) & (k <= 300)).sum()))
        s = q.snapshot()
        est.append(float(s["a"].iloc[0]))
        err.append(float(s["a_error"].iloc[0]))
    return np.array(est), np.array(err), np.array(true, np.float64)


def _pooled(share: bool, step: float, answers: int):
    """Answers of enough data seeds to reach ``answers`` of them."""
    parts = []
    seed, got = 0, 0
    while got < answers:
        parts.append(_run(share, step, seed))
        got += parts[-1][0].shape[0]
        seed += 1
    return tuple(np.concatenate([p[i] for p in parts]) for i in range(3))


def _check(share, step, answers, min_cover):
    est, err, true = _pooled(share, step, answers)
    assert np.isfinite(err).all() and (err >= 0).all()
    inside = np.abs(est - true) <= err + 1e-9
    cover = inside.mean()
    worst = np.max(np.abs(est - true) / np.maximum(err, 1e-12))
    bias = np.mean((est - true) / true)
    msg = (f"share={share} step={step}: {inside.sum()}/{inside.shape[0]} inside the bound, "
           f"worst miss {worst:.1f}x the bound, mean relative bias {bias:+.4f}, "
           f"median bound/estimate {np.median(err / est):.4f}")
    assert cover >= min_cover, msg
    # not bought by inflating: the bound stays a small share of the count (a 2x sampling of the
    # arrivals on the private layer gives ~3 %; the shared layer holds every arrival: ~0)
    assert np.median(err / est) <= (0.01 if share else 0.06), msg
    assert abs(bias) <= (0.002 if share else 0.01), msg


@pytest.mark.parametrize("share", [True, False], ids=["shared", "private"])
@pytest.mark.parametrize("step", [2.0, 5.0])
def test_pt_count_bound_covers(share, step):
    _check(share, step, 60, 0.9)


@pytest.mark.slow
@pytest.mark.parametrize("share", [True, False], ids=["shared", "private"])
@pytest.mark.parametrize("step", [1.0, 2.0, 5.0, 10.0])
def test_pt_count_bound_covers_every_push_size(share, step):
    _check(share, step, 200, 0.9)
