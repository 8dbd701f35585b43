"""sketchql.approx: budgets, metrics and the replay driver."""
import math

import numpy as np
import pytest

from sketchql.approx import (
    TimeBudget, WorkBudget, evaluate_join, freshness, hist_mse, mse, outlier_precision,
    outlier_values, output_ratio, relative_error, replay,
)
from sketchql.approx.replay import arrival_gaps, batch_bounds
from sketchql.data import exact_join_pairs, generate_stores, interleave
from sketchql.errors import SketchQLError


def test_hist_mse_definition():
    ex = np.arange(1, 101)
    assert hist_mse(ex, ex, k=100) == 0.0
    # exact uniform over 4 bins, produced all in the first bin
    e = np.array([0, 1, 2, 3]) * 1.0
    got = hist_mse(e, np.array([0.0, 0.0]), k=4)
    assert math.isclose(got, (1 - 0.25) ** 2 + 3 * 0.25 ** 2)
    # empty produced answer: sum (h1/N1)^2
    assert math.isclose(hist_mse(e, np.zeros(0), k=4), 4 * 0.25 ** 2)
    # weights == repeated values
    assert math.isclose(hist_mse(np.array([1, 2]), np.array([1]), k=2, exact_weights=np.array([3, 1])),
                        hist_mse(np.array([1, 1, 1, 2]), np.array([1]), k=2))
    with pytest.raises(SketchQLError):
        hist_mse(np.zeros(0), np.zeros(0))


def test_outliers_lowest_five_percent():
    # 20 values in the answer: value v occurs v times in the input
    inp = np.repeat(np.arange(1, 21), np.arange(1, 21))
    out = outlier_values(np.arange(1, 21), inp, q=0.05)
    assert out.tolist() == [1]
    assert outlier_precision(np.array([1, 1, 5, 7]), out) == 0.5


def test_simple_metrics():
    assert output_ratio(5, 10) == 0.5
    assert freshness(np.array([1.0, 5.0]), np.array([2.0, 1.0])) == 2.5
    assert mse([1, 3], [2, 2]) == 1.0
    assert relative_error([1, 3], [2, 2]) == 0.5


def test_budgets():
    b = WorkBudget(units_per_second=1000)
    assert b.allowance(np.array([0.01, 0.1])).tolist() == [10.0, 100.0]
    assert WorkBudget(units_per_arrival=3).allowance(np.array([1.0, 2.0])).tolist() == [3.0, 3.0]
    assert WorkBudget.unlimited().is_unlimited
    assert b.share(0.5).units_per_second == 500
    with pytest.raises(SketchQLError):
        WorkBudget()
    with pytest.raises(SketchQLError):
        WorkBudget(units_per_arrival=1, units_per_second=1)
    with pytest.raises(SketchQLError):
        WorkBudget(units_per_arrival=-1)
    tb = TimeBudget(t_ins=7e-6, t_hit=10e-6)
    # N_o/p = (lambda - t_ins) / t_hit
    assert math.isclose(tb.outputs_per_input(0.01), (0.01 - 7e-6) / 10e-6)
    assert tb.outputs_per_input(1e-6) == 0.0


class _Recorder:
    def __init__(self):
        self.seen = []
        self.units = []

    def tick(self, batch, allowance):
        self.seen.append(batch.seq.copy())
        self.units.append(np.asarray(allowance).copy())


def test_replay_gives_everyone_the_same_batches_and_budget():
    arr = interleave(generate_stores(2, duration=10.0, seed=1))
    a, b = _Recorder(), _Recorder()
    replay(arr, {"a": a, "b": b}, WorkBudget(units_per_second=100), tick_seconds=0.5)
    assert all(np.array_equal(x, y) for x, y in zip(a.seen, b.seen))
    assert np.array_equal(np.concatenate(a.seen), np.arange(len(arr)))
    tot = np.concatenate(a.units)
    assert np.allclose(tot, 100 * arrival_gaps(arr.ts))
    bb = batch_bounds(arr.ts, tick_seconds=0.5)
    assert bb[0] == 0 and bb[-1] == len(arr)
    assert np.array_equal(batch_bounds(arr.ts, batch_size=7)[:3], [0, 7, 14])


def test_evaluate_join_catches_invented_and_duplicate_pairs():
    arr = interleave(generate_stores(2, duration=20.0, n_items=30, seed=2))
    w = 5.0
    pa, pb = exact_join_pairs(arr, w)
    r = evaluate_join(arr, w, pa, pb)
    assert r["pct_output"] == 100.0 and r["hist_mse"] == 0.0
    assert r["invalid"] == 0 and r["duplicates"] == 0
    assert 0.0 < r["outlier_base_rate"] < 0.5
    # an invented pair: two tuples of different items
    i = int(np.flatnonzero(arr.stream == 0)[0])
    j = int(np.flatnonzero((arr.stream == 1) & (arr.item != arr.item[i]))[0])
    r2 = evaluate_join(arr, w, np.r_[pa, i, pa[0]], np.r_[pb, j, pb[0]])
    assert r2["invalid"] == 1 and r2["duplicates"] == 1


def _best_integer_output(m, budget):
    """Brute force: every prober i yields o_i in 0..m_i pairs at cost 1[o_i > 0] + o_i."""
    import itertools

    best = 0
    for o in itertools.product(*[range(k + 1) for k in m]):
        cost = sum(x + (x > 0) for x in o)
        if cost <= budget:
            best = max(best, sum(o))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_output_upper_bound_bounds_every_allocation(seed):
    from sketchql.approx import output_upper_bound

    rng = np.random.default_rng(seed)
    m = rng.integers(0, 6, 5)
    for budget in (0, 1, 3, 7, 12, 40):
        ub = output_upper_bound(m, budget)
        best = _best_integer_output(m.tolist(), budget)
        assert best <= ub + 1e-9 and ub < best + 1.0 + 1e-9   # fractional knapsack: within one output
    assert output_upper_bound(np.zeros(3), 10) == 0.0


def test_no_join_operator_beats_the_upper_bound():
    from sketchql.approx import output_upper_bound
    from sketchql.data import window_match_counts
    from sketchql.operators.promising import PTJoin, SimpleSHJ

    arr = interleave(generate_stores(2, duration=30.0, mean_interarrival=0.01, seed=4))
    budget = WorkBudget(units_per_second=2000)
    ops = {"shj": SimpleSHJ(20.0, max_backlog=500), "shj0": SimpleSHJ(20.0),
           "desc": PTJoin(20.0, "desc"), "mini": PTJoin(20.0, "desc", source="mini")}
    replay(arr, ops, budget, tick_seconds=0.25)
    ub = output_upper_bound(window_match_counts(arr, 20.0), float(budget.allowance(arrival_gaps(arr.ts)).sum()))
    n_exact = len(exact_join_pairs(arr, 20.0)[0])
    assert ub < n_exact   # the budget binds
    for name, op in ops.items():
        assert 0 < len(op.pairs()[0]) <= ub, name


def test_wall_clock_budget_runs_operators_on_real_time():
    from sketchql.operators.promising import PTJoin, PTJoinGroup, SimpleSHJ

    tb = TimeBudget(fraction=0.5, wall_clock=True)
    assert np.allclose(tb.allowance(np.array([0.01, 0.2])), [0.005, 0.1])
    with pytest.raises(SketchQLError):
        TimeBudget(fraction=0.0)
    arr = interleave(generate_stores(2, duration=10.0, mean_interarrival=0.02, seed=5))
    ops = {"pt": PTJoin(5.0, "desc"), "g": PTJoinGroup([PTJoin(5.0, "asc"), PTJoin(5.0, "weighted")]),
           "shj": SimpleSHJ(5.0, max_backlog=0.01)}
    replay(arr, ops, tb, tick_seconds=0.25)
    assert ops["pt"].wall and ops["shj"].wall and all(q.wall for q in ops["g"].queries)
    for op in (ops["pt"], ops["shj"], *ops["g"].queries):   # whatever the timing: exact subset, no duplicates
        r = evaluate_join(arr, 5.0, *op.pairs())
        assert r["invalid"] == 0 and r["duplicates"] == 0
    with pytest.raises(SketchQLError, match="wall-clock"):
        replay(arr, {"r": _Recorder()}, tb)
