"""The allocator chooses window_scale and the sampler where they pay (brute force and measured oracles)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from sketchql.approx.allocator import allocate
from sketchql.approx.precision_model import AggregateModel
from sketchql.engine import Engine
from sketchql.operators.exact.window import WindowScan

W = 10.0
RATE = 200.0


def _model(**kw):
    base = dict(group_rows=[800.0, 300.0], k=[0.6, 0.9], error=0.05, conf=0.95, memory_full=1000.0,
                cpu_full=10.0, contract=False)
    base.update(kw)
    return AggregateModel(**base)


@pytest.mark.parametrize("budget", [4.0, 8.0, 30.0, 200.0])
def test_rate_and_window_scale_equal_the_brute_force_optimum(budget):
    """Outlier index active (1 % of rows, 30 % of the variance): below its own cost only window
    reduction fits; above it the optimum mixes both.  The solver matches a fine (p, s) grid."""
    m = _model(window_ok=True, outlier_share=0.01, out_var=0.3)
    other = _model(group_rows=[500.0], k=[1.0], memory_full=800.0)
    res = allocate([m, other], [2.0, 1.0], memory=budget)
    assert res.memory <= budget * (1 + 1e-6)
    p, s = np.meshgrid(np.geomspace(1e-3, 1, 150), np.geomspace(m.s_min, 1, 60))
    g = np.column_stack([p.ravel(), s.ravel()])
    Pm, Mm, _ = m.evaluate_grid(g)
    q = np.geomspace(1e-3, 1, 300)
    Po, Mo, _ = other.evaluate_grid(q[:, None])
    tot = 2.0 * Pm[:, None] + Po[None, :]
    ok = (Mm[:, None] + Mo[None, :]) <= budget
    assert ok.any()
    assert res.objective >= tot[ok].max() - 2e-3
    if budget < 0.011 * 1000.0:          # sampling alone costs at least p_min + 1 % of the rows
        assert res.knobs[0][1] < 1.0


def test_contract_keeps_the_window_whole():
    m = _model(window_ok=True, outlier_share=0.01, out_var=0.3, contract=True)
    need = m.needed()
    assert need[1] == 1.0
    assert m.evaluate(need)[0] >= 0.95 * 0.9     # planned at 85 % of the error bound


def _data(kind: str, seed: int = 0, dur: float = 6 * W):
    rng = np.random.default_rng(seed)
    n = int(RATE * dur)
    ts = np.sort(rng.uniform(0, dur, n))
    g = rng.integers(0, 4, n)
    v = rng.pareto(1.5, n) + 1.0 if kind == "pareto" else rng.uniform(10.0, 11.0, n)
    return ts, g, v


def _run(data, budget, batch_s, sampler=None, rate=None, window_scale=None, agg="SUM"):
    eng = Engine(seed=2)
    eng.execute("CREATE STREAM S (g INT, v DOUBLE) TIMESTAMP ts")
    q = eng.register(f"SELECT g, {agg}(v) AS a FROM S [RANGE {W:g}] GROUP BY g WITH ERROR 0.01 CONFIDENCE 0.95")
    q.set_knob("audit_share", 0.0)
    if sampler is not None:
        q.set_knob("sampler", sampler)
    if rate is not None:
        q.set_knob("sample_rate", rate)
    if window_scale is not None:
        q.set_knob("window_scale", window_scale)
    eng.budgets["memory_bytes"] = budget
    ts, g, v = data
    errs, held = [], []
    t, i = 0.0, 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while t < ts[-1]:
            t1 = t + batch_s
            j = int(np.searchsorted(ts, t1, side="right"))
            eng.push("S", {"ts": ts[i:j], "g": g[i:j], "v": v[i:j]})
            eng.heartbeat("S", t1)
            i, t = j, t1
            if t >= 2.5 * W:
                m = (ts > t - W) & (ts <= t)
                snap = q.snapshot()
                got = dict(zip(snap["g"].tolist(), snap["a"].tolist()))
                for gg in range(4):
                    errs.append(abs(got.get(gg, np.nan) / v[m & (g == gg)].sum() - 1))
                rows = sum(int(((n.op._start <= q.clock) & (n.op._end > q.clock)).sum())
                           for n in q.plan.nodes if isinstance(n.op, WindowScan) and n.op._cols is not None)
                held.append(rows * eng._precision.row_bytes["s"])
    return eng, q, float(np.nanmedian(errs)), float(np.mean(held))


def test_the_allocator_picks_varopt_on_heavy_tails_and_it_pays_measured():
    data = _data("pareto")
    eng, q, err_auto, _ = _run(data, 3000, 0.5)
    knobs = q.precision()["knobs"]
    assert knobs["sampler"] == "varopt"
    assert eng.allocator.decision()["per_query"][str(q.id)]["knobs"]["sampler"] == "varopt"
    # measured oracle: the same rate, each sampler pinned by hand, errors against the exact sums
    r = knobs["sample_rate"]
    _, _, err_b, _ = _run(data, 3000, 0.5, sampler="bernoulli", rate=r)
    _, _, err_v, _ = _run(data, 3000, 0.5, sampler="varopt", rate=r)
    assert err_v < 0.85 * err_b, (err_v, err_b)


def test_a_sampler_set_by_hand_is_left_alone():
    eng, q, _, _ = _run(_data("pareto"), 3000, 0.5, sampler="reservoir")
    assert q.precision()["knobs"]["sampler"] == "reservoir"


def test_window_reduction_where_sampling_alone_cannot_fit_measured_memory():
    """Batches of 2 s (400 rows) keep the Bernoulli sampler's outlier index active: sampling costs
    at least 1 % of the rows on top of its rate.  With the sampler set to bernoulli by hand, a
    budget below that is met only by window reduction -- measured as the rows the window really
    holds -- while sampling alone (window pinned whole) overflows it."""
    data = _data("uniform")
    budget = 500                      # bytes: about 0.5 % of a full window (2000 rows)
    eng, q, err, held = _run(data, budget, 2.0, sampler="bernoulli")
    k = q.precision()["knobs"]
    assert k["sampler"] == "bernoulli" and k["window_scale"] < 1.0
    assert held <= budget * 1.25, (held, budget)
    eng2, q2, err2, held2 = _run(data, budget, 2.0, sampler="bernoulli", window_scale=1.0)
    assert q2.precision()["knobs"]["window_scale"] == 1.0
    assert held2 > 1.5 * budget                    # sampling alone overflows the budget
    assert np.isfinite(err)                        # every group still answered
