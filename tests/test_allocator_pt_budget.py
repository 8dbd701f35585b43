"""Promising-tuple joins under an engine CPU budget (audit defect 6).

Oracles: the realized shares of universe sampling are counted key by key (brute force), the
join's recall against a brute-force band join on the same data, the CPU against the units the
PT operators actually charged (``pt_work``)."""
import warnings

import numpy as np
import pytest

from sketchql.approx.precision_model import JoinRecallModel
from sketchql.approx.sampling import Sampler, universe_keep
from sketchql.operators.changes import Batch


def _zipf_keys(n, n_keys, s, rng):
    w = 1.0 / np.arange(1, n_keys + 1) ** s
    return rng.choice(n_keys, size=n, p=w / w.sum()).astype(np.int64)


@pytest.mark.parametrize("skew", [0.0, 1.2])
def test_measured_shares_match_the_hash_that_is_used(skew):
    """The model's s(p) / g(p) from the samplers' hash bins equal the tuple and pair shares that
    universe sampling at rate p really keeps (counted key by key), where p^1 can be far off."""
    rng = np.random.default_rng(3)
    seed = 5 * 7919 + 41
    k1, k2 = _zipf_keys(20000, 200, skew, rng), _zipf_keys(20000, 200, skew, rng)
    sides = []
    for k in (k1, k2):
        smp = Sampler(1.0, "universe", key="k", hash_seed=seed)
        smp.track_keys = True
        smp(Batch({"k": k}, ts=np.zeros(len(k))))
        assert smp.key_bins().sum() == pytest.approx(len(k))
        sides.append(smp.key_bins())
    tc, pc = JoinRecallModel.cdfs(sides)
    m = JoinRecallModel(tuple_cdf=tc, pair_cdf=pc)
    keys = np.arange(200, dtype=np.int64)
    n1, n2 = np.bincount(k1, minlength=200), np.bincount(k2, minlength=200)
    # the oracle's bin of each key (the top 10 bits of its hash), for the two things binning changes:
    # keys sharing a bin add cross pairs, and the bin that holds p is interpolated linearly
    from sketchql.summaries.hashing import hash64
    kb = (hash64(keys, seed) >> np.uint64(50)).astype(np.int64)
    bp1, bp2 = np.bincount(kb, n1, 16384), np.bincount(kb, n2, 16384)
    cross = (bp1 * bp2).sum() - (n1 * n2).sum()
    worst_naive = 0.0
    for p in (0.02, 0.05, 0.1, 0.2, 0.5, 0.9):
        kept = universe_keep(keys, p, seed)
        s_true = (n1[kept].sum() + n2[kept].sum()) / (n1.sum() + n2.sum())
        g_true = (n1[kept] * n2[kept]).sum() / (n1 * n2).sum()
        g, s = m.shares(p)
        j = int(p * 16384)
        tol_s = (bp1[j] + bp2[j]) / (n1.sum() + n2.sum())
        tol_g = (bp1[j] * bp2[j] + cross) / (n1 * n2).sum()
        assert abs(s - s_true) <= tol_s + 1e-9, (p, s, s_true)
        assert abs(g - g_true) <= tol_g + 1e-9, (p, g, g_true)
        assert tol_g < 0.05
        worst_naive = max(worst_naive, abs(p - g_true))
    if skew > 0:
        assert worst_naive > 0.05        # the expectation p is not what one hash keeps


def test_shares_default_to_the_expectation_without_measurements():
    m = JoinRecallModel(rate_in=100.0, memory_full=1e4)
    g, s = m.shares(0.3)
    assert g == pytest.approx(0.3) and s == pytest.approx(0.3)
    assert m.evaluate([0.3, 10.0])[2] == pytest.approx(0.3 * 100.0 * 11.0)


def test_budget_floor_is_the_users_within():
    m = JoinRecallModel(rate_in=100.0, memory_full=1e4, b_min=20.0)
    assert m.bounds()[1][0] == 20.0
    assert m.floor()[1] == 20.0


# -- the engine on the audit's workload ---------------------------------------------------
_PAIRS = None


def _data():
    from sketchql.data import generate_stores
    return generate_stores(2, duration=40.0, mean_interarrival=0.01, n_items=200, seed=7)


def _brute_pairs(a, b, W=5.0):
    """Pairs with equal keys and |t1 - t2| < W (the PT join's window), counted per key."""
    ka, kb = np.asarray(a.item), np.asarray(b.item)
    ta, tb = np.asarray(a.ts), np.asarray(b.ts)
    tot = 0
    for k in np.union1d(ka, kb):
        x = ta[ka == k]
        y = np.sort(tb[kb == k])
        tot += int((np.searchsorted(y, x + W, "left") - np.searchsorted(y, x - W, "right")).sum())
    return tot


def _run(cpu, n_queries=3, end=40.0):
    from sketchql.engine import Engine
    a, b = _data()
    eng = Engine(seed=5)
    eng.set_control("share_indexes", True)
    eng.execute("CREATE STREAM S1 (k INT, p DOUBLE) TIMESTAMP ts; CREATE STREAM S2 (k INT, p DOUBLE) TIMESTAMP ts")
    eng.budgets["cpu_units_per_s"] = cpu
    qs = [eng.register("SELECT S1.k, S1.ts, S2.ts FROM S1, S2 WHERE S1.k = S2.k WITH PREFERENCE " + p +
                       " SUMMARY.Estimate.Count(S1.k), SUMMARY.Estimate.Count(S2.k) WINDOW 5 SECONDS "
                       "WITHIN 20 PROBES PER TUPLE") for p in ("desc", "weighted", "asc")[:n_queries]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for t0 in np.arange(0, end, 0.7):
            for name, s in (("S1", a), ("S2", b)):
                mm = (s.ts >= t0) & (s.ts < t0 + 0.7)
                eng.push(name, {"ts": s.ts[mm], "k": s.item[mm], "p": s.price[mm]})
    return eng, qs, a, b


def test_within_is_never_lowered_and_the_plan_does_not_churn():
    """Before: the allocator wrote 9.68 over WITHIN 20 and, since the contract's budget is in the
    re-plan signature, re-planned at every push (116 plans in 40 s)."""
    eng, qs, _, _ = _run(1000.0, n_queries=2, end=14.0)
    d = eng.allocator.decision()
    assert d["replans"] <= 12, d["replans"]
    for q in qs:
        per = d["per_query"][str(q.id)]
        assert per["within_probes"] == 20.0
        assert per["knobs"]["budget"] >= 20.0
        assert q.stats()["promising"]["pt_budget_units_per_tuple"] >= 20.0
        assert any("WITHIN 20" in n for n in per["notes"])
    # a budget set by hand is the user's new floor
    qs[0].set_knob("budget", 35.0)
    eng.allocator.tick(qs[0].clock)
    per = eng.allocator.decision()["per_query"][str(qs[0].id)]
    assert per["within_probes"] == 35.0 and per["knobs"]["budget"] >= 35.0


@pytest.mark.slow
@pytest.mark.parametrize("cpu", [1000.0, 3000.0, 10000.0])
def test_predicted_recall_and_cpu_against_brute_force(cpu):
    """Stated in the README (Precision and budgets): the predicted recall of each join is within
    2.5x of its brute-force recall where that is at least 0.01, within 0.002 below (before: 0.0166
    predicted, 0.0002 measured at 1000); the units the PT operators charged stay within 1.1 x the
    budget, and with the shadow plans' reservation they use at least 60 % of it (before: 10 %)."""
    eng, qs, a, b = _run(cpu)
    total = _brute_pairs(a, b)
    d = eng.allocator.decision()
    work = 0.0
    for q in qs:
        st = q.stats()["promising"]
        work += st["pt_work"] + st["pt_tuples_in"]          # a probe unit each, plus the tuple itself
        pred = d["per_query"][str(q.id)]["predicted_precision"]
        rec = st["pt_pairs"] / total
        if rec >= 0.01:
            assert max(pred / rec, rec / pred) <= 2.5, (cpu, q.id, pred, rec)
        else:
            assert abs(pred - rec) <= 0.002, (cpu, q.id, pred, rec)
        assert d["per_query"][str(q.id)]["knobs"]["budget"] >= 20.0
    t = 40.0
    assert work <= 1.1 * cpu * t, (work, cpu * t)
    assert work + d["cpu_shadow_plans"] * t >= 0.6 * cpu * t, (work, d["cpu_shadow_plans"], cpu * t)
