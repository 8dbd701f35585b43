"""The allocation solver: brute-force optimum, weight monotonicity, weight-0 leftovers, contracts."""
from __future__ import annotations

import numpy as np
import pytest

from sketchql.approx.allocator import allocate
from sketchql.approx.precision_model import AggregateModel, JoinRecallModel, propagate


def _agg(rows, k=1.0, mem=1000.0, cpu=10.0, contract=False, error=0.05):
    return AggregateModel(np.atleast_1d(np.asarray(rows, float)), np.full(np.size(rows), k), error, 0.95,
                          memory_full=mem, cpu_full=cpu, contract=contract)


def _objective(models, weights, xs):
    return sum(w * m.evaluate(x)[0] for w, m, x in zip(weights, models, xs))


@pytest.mark.parametrize("budget", [150.0, 400.0, 900.0, 1500.0])
def test_two_operator_allocation_equals_the_brute_force_grid_optimum(budget):
    a = _agg([4000.0, 800.0], k=1.2, mem=1000.0)
    b = _agg([300.0], k=0.8, mem=800.0)
    w = [2.0, 1.0]
    res = allocate([a, b], w, memory=budget)
    # brute force on a fine grid of both rates
    g = np.linspace(1e-3, 1.0, 600)
    pa, ma, _ = a.evaluate_grid(g[:, None])
    pb, mb, _ = b.evaluate_grid(g[:, None])
    tot = w[0] * pa[:, None] + w[1] * pb[None, :]
    ok = (ma[:, None] + mb[None, :]) <= budget
    best = tot[ok].max()
    assert res.memory <= budget * (1 + 1e-6)
    assert res.objective >= best - 2e-3, (res.objective, best)


def test_cpu_and_memory_budgets_together_and_a_join_model():
    a = _agg([2000.0], mem=1000.0, cpu=100.0)
    j = JoinRecallModel(rate_in=10.0, memory_full=3000.0, b0=20.0, b_max=200.0)
    res = allocate([a, j], [1.0, 1.0], memory=2000.0, cpu=800.0)
    assert res.memory <= 2000.0 * (1 + 1e-6) and res.cpu <= 800.0 * (1 + 1e-6)
    # brute force over (p_a) x (p_j, b)
    ga = np.linspace(1e-3, 1, 200)
    pj, bj = np.meshgrid(np.linspace(1e-3, 1, 60), np.linspace(1, 200, 60))
    gj = np.stack([pj.ravel(), bj.ravel()], 1)
    Pa, Ma, Ca = a.evaluate_grid(ga[:, None])
    Pj, Mj, Cj = j.evaluate_grid(gj)
    tot = Pa[:, None] + Pj[None, :]
    ok = ((Ma[:, None] + Mj[None, :]) <= 2000.0) & ((Ca[:, None] + Cj[None, :]) <= 800.0)
    assert res.objective >= tot[ok].max() - 5e-3


def test_raising_a_weight_never_lowers_that_querys_precision():
    models = [_agg([1500.0], mem=1000.0), _agg([600.0, 300.0], mem=900.0), _agg([5000.0], k=2.0, mem=1200.0)]
    prev = -1.0
    for w0 in [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0]:
        res = allocate(models, [w0, 1.0, 1.0], memory=900.0)
        assert res.precision[0] >= prev - 1e-9, (w0, res.precision[0], prev)
        prev = res.precision[0]
    assert prev > allocate(models, [0.25, 1.0, 1.0], memory=900.0).precision[0]


def test_weight_zero_query_gets_only_leftovers():
    a, b = _agg([2000.0], mem=1000.0), _agg([2000.0], mem=1000.0)
    z = _agg([2000.0], mem=1000.0)
    tight = allocate([a, b, z], [1.0, 1.0, 0.0], memory=600.0)
    # the positive-weight queries are served as if z did not exist
    alone = allocate([a, b], [1.0, 1.0], memory=600.0)
    assert abs(tight.objective - alone.objective) < 1e-3     # less only by z's floor (1 byte)
    used = sum(m.evaluate(x)[1] for m, x in zip([a, b], tight.knobs[:2]))
    assert z.evaluate(tight.knobs[2])[1] <= 600.0 - used + 1e-6
    roomy = allocate([a, b, z], [1.0, 1.0, 0.0], memory=2600.0)
    assert roomy.knobs[0][0] == pytest.approx(1.0) and roomy.knobs[1][0] == pytest.approx(1.0)
    assert 0.5 < roomy.knobs[2][0] <= 0.6 + 1e-6       # 600 bytes left over


def test_contract_needs_are_lower_bounds_and_unfit_ones_are_reported():
    c = _agg([1000.0], mem=1000.0, contract=True, error=0.05)
    need = c.needed()[0]
    other = _agg([1000.0], mem=1000.0)
    res = allocate([c, other], [0.1, 10.0], memory=1000.0)
    assert res.knobs[0][0] >= need - 1e-9 and not res.infeasible
    res = allocate([c, other], [1.0, 1.0], memory=need * 1000.0 * 0.5)
    assert 0 in res.infeasible
    assert res.infeasible[0]["memory_bytes"] == pytest.approx(need * 1000.0)


def test_precision_propagates_bottom_up_through_a_plan():
    from sketchql.engine import Engine
    eng = Engine()
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    q = eng.register("SELECT A.k FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k")
    nodes = q.plan.nodes
    scans = [n for n in nodes if n.kind == "scan"]
    r = propagate(nodes, {scans[0].source: 0.5, scans[1].source: 0.4})
    assert r[id(nodes[0])]["recall"] == pytest.approx(0.2)
    assert r[id(scans[0])]["recall"] == 0.5


def test_model_calibration_moves_towards_the_measurement():
    m = _agg([1000.0])
    m.calibrate(measured_rel=0.2, predicted_rel=0.1)
    assert m.calib > 1.0
    j = JoinRecallModel(b0=50.0)
    for b in (10.0, 20.0, 40.0):
        j.calibrate(b, 1 - np.exp(-b / 10.0))
    assert j.b0 == pytest.approx(10.0, rel=1e-6)


@pytest.mark.parametrize("seed,n_grid", [(s, n) for s in range(4) for n in (3, 40)])
def test_the_optimum_is_never_below_a_uniform_split_or_a_common_rate(seed, n_grid):
    """Brute force of the two baselines inside the allocator's feasible set: a memory split evenly
    (water-filling) and one sampling rate for every query, each the best that fits."""
    from sketchql.approx.allocator import baseline_candidates
    rng = np.random.default_rng(seed)
    models = [_agg(rng.uniform(100, 5000, rng.integers(1, 4)), k=rng.uniform(0.3, 2.0), mem=rng.uniform(500, 3000))
              for _ in range(2)]
    models.append(JoinRecallModel(rate_in=10.0, memory_full=float(rng.uniform(1000, 6000)), b0=20.0, b_max=200.0))
    w = rng.uniform(0.5, 3.0, 3)
    budget = float(rng.uniform(0.02, 0.6) * sum(m.memory_full for m in models))
    res = allocate(models, w, memory=budget, n_grid=n_grid)
    assert res.memory <= budget * (1 + 1e-6)
    # brute force: the uniform split and the common rate on a fine grid, the join at b_max
    g = np.geomspace(1e-3, 1.0, 4000)
    P, Mm = [], []
    for m in models:
        x = np.column_stack([g, np.full(len(g), 200.0)]) if m.dims == 2 else g[:, None]
        p, mm, _ = m.evaluate_grid(x)
        P.append(p)
        Mm.append(mm)
    common = [int(i) for i in range(len(g)) if sum(mm[i] for mm in Mm) <= budget]
    if common:
        i = common[-1]
        assert res.objective >= sum(wq * p[i] for wq, p in zip(w, P)) - 1e-6
    for L in np.geomspace(1.0, budget, 300):
        idx = [max(int(np.searchsorted(mm, L, side="right")) - 1, 0) for mm in Mm]
        if sum(mm[i] for mm, i in zip(Mm, idx)) <= budget:
            assert res.objective >= sum(wq * p[i] for wq, p, i in zip(w, P, idx)) - 1e-6
    cands = baseline_candidates(models, budget, None, [None] * 3, res.knobs)
    assert set(cands) == {"uniform", "proportional"}
    for c in cands.values():
        assert sum(m.evaluate(x)[1] for m, x in zip(models, c)) <= budget * (1 + 1e-9)
