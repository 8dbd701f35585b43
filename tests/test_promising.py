"""Promising-tuple operators (PT-Join, PT-Selection, PT-Aggregates) and their
baselines, checked against the brute-force oracles of sketchql.data."""
import math

import numpy as np
import pytest

from sketchql.approx import WorkBudget, evaluate_join, mse, replay
from sketchql.data import exact_join_pairs, generate_stores, interleave, make_range_queries
from sketchql.errors import SketchQLError
from sketchql.operators.promising import (
    PerQueryAggregate, PTAggregate, PTJoin, PTJoinGroup, PTSelection, SimpleSelection, SimpleSHJ,
    build_promising_operator,
)


def _key(a, b, n):
    return np.sort(np.asarray(a, np.int64) * (n + 1) + np.asarray(b, np.int64))


@pytest.fixture(scope="module")
def small():
    return interleave(generate_stores(2, duration=40.0, mean_interarrival=0.05, n_items=300, seed=11))


@pytest.fixture(scope="module")
def loaded():
    """Two stores at 20 ms for 50 s: heavy enough that budgets bind."""
    return interleave(generate_stores(2, duration=50.0, mean_interarrival=0.02, seed=12))


# ----------------------------------------------------------------- PT-Join
@pytest.mark.parametrize("source", ["index", "mini"])
@pytest.mark.parametrize("pref", ["desc", "weighted"])
@pytest.mark.parametrize("window", [10.0, math.inf])
def test_unlimited_budget_gives_the_exact_join(small, source, pref, window):
    op = PTJoin(window=window, preference=pref, source=source)
    replay(small, {"pt": op}, WorkBudget.unlimited(), tick_seconds=0.5)
    a, b = op.pairs()
    ea, eb = exact_join_pairs(small, window)
    assert np.array_equal(_key(a, b, len(small)), _key(ea, eb, len(small)))


@pytest.mark.parametrize("pref", ["desc", "asc", "weighted"])
def test_tight_budget_output_is_exact_subset_without_duplicates(loaded, pref):
    op = PTJoin(window=20.0, preference=pref, source="index")
    replay(loaded, {"pt": op}, WorkBudget(units_per_second=1000), tick_seconds=0.25)
    a, b = op.pairs()
    r = evaluate_join(loaded, 20.0, a, b)
    assert r["n_produced"] > 0
    assert r["invalid"] == 0 and r["duplicates"] == 0
    assert r["pct_output"] < 100.0
    res = op.result()
    # both timestamps are carried and are the members' timestamps
    assert np.array_equal(res["ts_a"], loaded.ts[a]) and np.array_equal(res["ts_b"], loaded.ts[b])
    assert np.array_equal(res["value"], loaded.item[a])


def test_baseline_shj_unlimited_is_exact(small):
    for nb in (None, 16):
        shj = SimpleSHJ(window=10.0, n_buckets=nb)
        replay(small, {"s": shj}, WorkBudget.unlimited())
        a, b = shj.pairs()
        ea, eb = exact_join_pairs(small, 10.0)
        assert np.array_equal(_key(a, b, len(small)), _key(ea, eb, len(small)))


def _run_join(arr, window, ups, backlog=0.0):
    qs = [PTJoin(window=window, preference=p, name=p) for p in ("desc", "weighted", "asc")]
    shj = SimpleSHJ(window=window, max_backlog=backlog)
    replay(arr, {"pt": PTJoinGroup(qs, cpu="separate"), "shj": shj}, WorkBudget(units_per_second=ups),
           tick_seconds=0.25)
    res = {q.name: evaluate_join(arr, window, *q.pairs()) for q in qs}
    res["shj"] = evaluate_join(arr, window, *shj.pairs())
    return res


@pytest.fixture(scope="module")
def join_results(loaded):
    return _run_join(loaded, 20.0, 1000.0)


def test_desc_beats_shj_on_output(join_results):
    assert join_results["desc"]["pct_output"] > 1.2 * join_results["shj"]["pct_output"]


def test_asc_output_is_mostly_outliers(join_results):
    # outliers first, then (budget left) the rest: the share of outliers is far above
    # SHJ's, and asc finds several times more outlier pairs than desc or SHJ
    asc, shj, desc = join_results["asc"], join_results["shj"], join_results["desc"]
    # the share depends on the budget left once the outliers are probed (then the rest):
    # with the bounded cell scans and 256 value buckets asc finds the same outlier pairs
    # (5.2 % of the exact join, 5.1 % before) and more of the rest (15.4 % vs 11.6 %), so
    # the share fell from 0.44 (5.1x SHJ's) to 0.34 (3.9x); the outlier pairs found are checked below.
    # Cheaper scans again (issue 16: the run's end read on from its start, a cursor per merged
    # zone's handle): the same 8,335 outlier pairs, 28,842 pairs in all (27,617 before): 0.302 -> 0.289
    assert asc["outlier_precision"] >= 0.25
    assert asc["outlier_precision"] > 3 * shj["outlier_precision"]
    n_out = {k: r["n_produced"] * r["outlier_precision"] for k, r in (("asc", asc), ("shj", shj), ("desc", desc))}
    assert n_out["asc"] > 3 * max(n_out["shj"], n_out["desc"])
    assert asc["n_produced"] < desc["n_produced"]


def test_weighted_is_a_faithful_sample():
    """Hist-MSE (paper eq. 2), averaged over three stationary streams (no
    drift: with drift a budget-bound operator under-samples the busiest
    period whatever its order, which the histogram of the run then shows)."""
    acc = {"desc": [], "weighted": [], "shj": []}
    for seed in (12, 13, 14):
        arr = interleave(generate_stores(2, duration=50.0, mean_interarrival=0.02, seed=seed, drift_every=1e6))
        res = _run_join(arr, 20.0, 3000.0)
        for k in acc:
            acc[k].append(res[k]["hist_mse"])
    w, d, s = (float(np.mean(acc[k])) for k in ("weighted", "desc", "shj"))
    assert w < d / 10
    assert w < s


def test_desc_is_fresher_than_shj_on_whole_stream(loaded):
    res = _run_join(loaded, math.inf, 1000.0)
    assert res["desc"]["freshness"] < res["shj"]["freshness"]


def test_same_seed_same_output(loaded):
    outs = []
    for _ in range(2):
        op = PTJoin(window=20.0, preference="weighted", seed=3)
        replay(loaded, {"pt": op}, WorkBudget(units_per_second=500), tick_seconds=0.25)
        outs.append(op.pairs())
    assert np.array_equal(outs[0][0], outs[1][0]) and np.array_equal(outs[0][1], outs[1][1])
    op = PTJoin(window=20.0, preference="weighted", seed=4)
    replay(loaded, {"pt": op}, WorkBudget(units_per_second=500), tick_seconds=0.25)
    assert not np.array_equal(op.pairs()[0], outs[0][0])


def test_queries_share_the_cpu_by_weight(loaded):
    q1 = PTJoin(20.0, "desc", weight=3, name="q1")
    q2 = PTJoin(20.0, "desc", weight=1, name="q2")
    g = PTJoinGroup([q1, q2])
    replay(loaded, {"g": g}, WorkBudget(units_per_second=500), tick_seconds=0.25)
    w1, w2 = q1.stats()["work"], q2.stats()["work"]
    assert 2.5 < w1 / w2 < 3.5
    assert q1.stats()["outputs"] > q2.stats()["outputs"]


def test_bad_join_arguments():
    with pytest.raises(SketchQLError):
        PTJoin(preference="sideways")
    with pytest.raises(SketchQLError):
        PTJoin(fade=1.5)
    with pytest.raises(SketchQLError):
        PTJoin(window=0)
    with pytest.raises(SketchQLError):
        PTJoin(source="nope")


# ----------------------------------------------------------------- PT-Selection
@pytest.fixture(scope="module")
def one_stream():
    return interleave(generate_stores(1, duration=40.0, mean_interarrival=0.01, seed=13))


def test_selection_unlimited_is_exact_and_resumes(one_stream):
    arr = one_stream
    qs = make_range_queries(arr.item, 10, seed=2)
    op = PTSelection(qs, domain=(1, 2000))
    seen = [set() for _ in qs]
    sizes = []

    def check(now):
        res = op.results()
        sizes.append([len(r) for r in res])
    replay(arr, {"pt": op}, WorkBudget.unlimited(), tick_seconds=0.5, callback=check)
    op.drain()
    for qi, ((lo, hi), r) in enumerate(zip(qs, op.results())):
        assert len(r) == len(np.unique(r))  # no duplicates
        assert np.array_equal(np.sort(r), np.flatnonzero((arr.item >= lo) & (arr.item <= hi)))
    # results grow tick by tick (resumed, not recomputed)
    s = np.array(sizes)
    assert (np.diff(s, axis=0) >= 0).all() and s[len(s) // 2].sum() > 0


def test_selection_beats_simple_under_load(one_stream):
    arr = one_stream
    qs = make_range_queries(arr.item, 100, seed=3)
    pt = PTSelection(qs, domain=(1, 2000))
    sb = SimpleSelection(qs)
    replay(arr, {"pt": pt, "sb": sb}, WorkBudget(units_per_second=2000), tick_seconds=0.25)
    ex = [((arr.item >= lo) & (arr.item <= hi)).sum() for lo, hi in qs]
    rp = np.mean([len(r) / e for r, e in zip(pt.results(), ex)])
    rs = np.mean([len(r) / e for r, e in zip(sb.results(), ex)])
    assert rp > 1.33 * rs
    for (lo, hi), r in zip(qs, pt.results()):
        assert len(r) == len(np.unique(r))
        assert ((arr.item[r] >= lo) & (arr.item[r] <= hi)).all()


def test_selection_window_expires_results(one_stream):
    arr = one_stream
    op = PTSelection([(1, 400)], window=5.0, domain=(1, 2000))
    replay(arr, {"pt": op}, WorkBudget.unlimited(), tick_seconds=0.5)
    cur = op.current(0)
    assert (arr.ts[cur] > op.now - 5.0).all()
    assert len(cur) < len(op.results()[0])


# ----------------------------------------------------------------- PT-Aggregates
def _agg_run(arr, func, qs, budget, window=20.0, every=2.0):
    pt = PTAggregate(qs, func=func, window=window, domain=(1, 2000))
    bl = PerQueryAggregate(qs, func=func, window=window)
    rec = []
    nxt = [window]

    def cb(now):
        if now >= nxt[0]:
            nxt[0] += every
            sel = (arr.ts <= now) & (arr.ts > now - window)
            ex = []
            for lo, hi in qs:
                v = arr.price[sel & (arr.item >= lo) & (arr.item <= hi)]
                ex.append({"avg": v.mean() if len(v) else np.nan, "sum": v.sum(), "count": len(v),
                           "median": float(np.median(v)) if len(v) else np.nan}[func])
            e, er = pt.answers(now)
            rec.append((e, er, bl.answers(now), np.array(ex)))
    replay(arr, {"pt": pt, "bl": bl}, budget, tick_seconds=0.25, callback=cb)
    return [np.concatenate([r[i] for r in rec]) for i in range(4)]


@pytest.mark.parametrize("func", ["avg", "sum", "median"])
def test_aggregates_unlimited_are_exact(one_stream, func):
    qs = make_range_queries(one_stream.item, 8, seed=4)
    est, err, base, ex = _agg_run(one_stream, func, qs, WorkBudget.unlimited())
    ok = np.isfinite(ex)
    assert np.allclose(est[ok], ex[ok]) and np.allclose(err[ok], 0.0)
    if func != "median":  # the baseline uses numpy's (mean-of-middle) median
        assert np.allclose(base[ok], ex[ok])


def test_count_comes_from_the_summaries(one_stream):
    qs = make_range_queries(one_stream.item, 8, seed=4)
    # 2 units per arrival admit every arrival (issue 16: a budget of 0 cannot pay the inserts);
    # COUNT never scans: the answer is the layer's counts
    est, err, base, ex = _agg_run(one_stream, "count", qs, WorkBudget(units_per_arrival=2.0))
    rel = np.abs(est - ex) / np.maximum(ex, 1)
    assert np.median(rel) < 0.1
    assert np.mean(np.abs(est - ex) <= err + 1) > 0.8


@pytest.mark.parametrize("func", ["avg", "sum"])
def test_aggregates_beat_per_query_and_errors_cover(one_stream, func):
    qs = make_range_queries(one_stream.item, 100, seed=5)
    est, err, base, ex = _agg_run(one_stream, func, qs, WorkBudget(units_per_second=2000))
    ok = np.isfinite(ex) & np.isfinite(base)
    assert mse(est[ok], ex[ok]) < mse(base[ok], ex[ok])
    cover = np.mean(np.abs(est[ok] - ex[ok]) <= err[ok] + 1e-9)
    assert cover >= 0.8, cover


# ----------------------------------------------------------------- engine entry
def test_build_promising_operator_from_plan_spec(small):
    op = build_promising_operator({"kind": "join", "window": 10.0, "preference": "desc", "fade": 0.8,
                                   "streams": (0, 1), "key": "item"})
    assert isinstance(op, PTJoin)
    replay(small, {"pt": op}, WorkBudget.unlimited(), tick_seconds=0.5)
    assert evaluate_join(small, 10.0, *op.pairs())["pct_output"] == 100.0
    sel = build_promising_operator({"kind": "selection", "predicates": [(1, 50)], "key": "item"})
    assert isinstance(sel, PTSelection)
    agg = build_promising_operator({"kind": "aggregate", "func": "SUM", "predicates": [(1, 50)],
                                    "key": "item", "value": "price", "window": 10.0})
    assert isinstance(agg, PTAggregate) and agg.preference == "desc"
    with pytest.raises(SketchQLError):
        build_promising_operator({"kind": "sort"})
