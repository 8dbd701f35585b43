"""WITH PREFERENCE queries through the SQL engine (promising-tuple join).

Oracles: brute-force numpy window join (equal items, |ts1 - ts2| < w) and the
same query evaluated EXACT by the engine.
"""
from collections import Counter

import numpy as np
import pytest

from sketchql.data import generate_stores
from sketchql.engine import Engine
from sketchql.errors import SketchQLSemanticError

DDL = """
CREATE STREAM Store1 (ItemNo INT, price DOUBLE) TIMESTAMP ts;
CREATE STREAM Store2 (ItemNo INT, price DOUBLE) TIMESTAMP ts;
CREATE SUMMARY s1 ON Store1 (ItemNo) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4);
CREATE SUMMARY s2 ON Store2 (ItemNo) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)
"""
PREF = ("SUMMARY.Estimate.Count(S1.ItemNo), SUMMARY.Estimate.Count(S2.ItemNo) FADE FACTOR 0.8 "
        "WINDOW 1 MINUTE")
FIG6 = ("SELECT S1.ItemNo, S1.ts, S2.ts FROM Store1 S1, Store2 S2 WHERE S1.ItemNo = S2.ItemNo "
        "WITH PREFERENCE {pref} " + PREF + " {tail}")
DURATION = 90.0


@pytest.fixture(scope="module")
def stores():
    return generate_stores(2, duration=DURATION, n_items=300, seed=11)


def _feed(eng, stores, step=5.0, on_step=None):
    a, b = stores
    for k, t0 in enumerate(np.arange(0.0, DURATION, step)):
        for name, s in (("Store1", a), ("Store2", b)):
            m = (s.ts >= t0) & (s.ts < t0 + step)
            eng.push(name, {"ts": s.ts[m], "ItemNo": s.item[m], "price": s.price[m]})
        if on_step is not None:
            on_step(k)
    eng.heartbeat("Store1", DURATION + 200)
    eng.heartbeat("Store2", DURATION + 200)


def _run(stores, pref="desc", tail="WITHIN 50 PROBES PER TUPLE", seed=0, on_step=None):
    eng = Engine(seed=seed)
    eng.execute(DDL)
    q = eng.register(FIG6.format(pref=pref, tail=tail))
    q.set_knob("retain_changes", None)
    _feed(eng, stores, on_step=on_step and (lambda k: on_step(q, k)))
    return q


def _triples(q):
    r = q.results()
    assert list(r.columns[:3]) == ["ItemNo", "S1.ts", "S2.ts"]
    assert (r["__sign"] == 1).all()
    return Counter(zip(r["ItemNo"].tolist(), r["S1.ts"].tolist(), r["S2.ts"].tolist()))


@pytest.fixture(scope="module")
def brute(stores):
    a, b = stores
    m = (a.item[:, None] == b.item[None, :]) & (np.abs(a.ts[:, None] - b.ts[None, :]) < 60.0)
    i, j = np.nonzero(m)
    return Counter(zip(a.item[i].tolist(), a.ts[i].tolist(), b.ts[j].tolist()))


@pytest.fixture(scope="module")
def exact(stores):
    return _triples(_run(stores, tail="EXACT"))


def test_exact_oracle_agrees_with_brute_force(exact, brute):
    assert exact == brute and sum(brute.values()) > 1000


def test_figure6_tight_budget_subset_no_duplicates(stores, brute):
    q = _run(stores)
    assert q.plan.engine == "promising"
    got = _triples(q)
    assert max(got.values()) == 1                       # no duplicates
    assert not (got - brute)                            # every pair is an exact join result
    assert 0 < sum(got.values()) < sum(brute.values())  # tight budget: fewer, but some
    st = q.stats()["promising"]
    assert st["pt_pairs"] == sum(got.values()) and st["pt_pairs_lost"] == 0
    assert st["pt_budget_units_per_tuple"] == 50.0 and st["pt_work"] > 0 and "pt_queue" in st
    assert st["pt_units_given"] == 50.0 * st["pt_tuples_in"]


def test_huge_budget_equals_exact_join(stores, exact):
    q = _run(stores, tail="WITHIN 1000000 PROBES PER TUPLE")
    assert _triples(q) == exact


@pytest.mark.parametrize("pref", ["asc", "weighted"])
def test_other_preferences_run(stores, brute, pref):
    got = _triples(_run(stores, pref=pref))
    assert max(got.values(), default=1) == 1 and not (got - brute)
    assert sum(got.values()) < sum(brute.values())
    if pref == "weighted":
        assert sum(got.values()) > 0


def test_same_seed_same_output(stores):
    r1 = _run(stores, pref="weighted", seed=5).results()
    r2 = _run(stores, pref="weighted", seed=5).results()
    assert r1.equals(r2)


def test_budget_knob_and_ms_and_default(stores, brute):
    base = _run(stores)
    n_base = base.stats()["promising"]["pt_pairs"]

    def bump(q, k):
        if k == 3:
            q.set_knob("budget", 5000)
    q = _run(stores, on_step=bump)
    st = q.stats()["promising"]
    assert st["pt_budget_units_per_tuple"] == 5000.0
    assert st["pt_units_given"] > 50.0 * st["pt_tuples_in"]
    assert st["pt_pairs"] > n_base and not (_triples(q) - brute)
    # WITHIN n MS: n / 1000 * BENCH_UNITS_PER_SECOND units per tuple (2000/s -> 2 units per ms)
    q = _run(stores, tail="WITHIN 25 MS PER TUPLE")
    assert q.stats()["promising"]["pt_budget_units_per_tuple"] == 50.0
    assert q.results().equals(base.results())
    # no WITHIN: the documented default
    from sketchql.planner.promising_plan import DEFAULT_BUDGET_UNITS
    q = _run(stores, tail="")
    assert q.stats()["promising"]["pt_budget_units_per_tuple"] == DEFAULT_BUDGET_UNITS


def test_explain_shows_promising_operator():
    eng = Engine()
    eng.execute(DDL)
    text = eng.explain(FIG6.format(pref="desc", tail="WITHIN 50 PROBES PER TUPLE"))
    assert "PromisingTupleJoin ON S1.ItemNo = S2.ItemNo PREFERENCE desc FADE 0.8 WINDOW 60 s" in text
    assert "SymmetricHashJoin" not in text.split("join orders")[0]


def test_unsupported_shapes_raise_clearly():
    eng = Engine()
    eng.execute(DDL)
    with pytest.raises(SketchQLSemanticError, match="two-stream equi-joins.*add EXACT"):
        eng.register("SELECT ItemNo FROM Store1 WHERE price > 3 WITH PREFERENCE desc "
                     "SUMMARY.Estimate.Count(ItemNo) WINDOW 1 MINUTE")
    with pytest.raises(SketchQLSemanticError, match="aggregates"):
        eng.register("SELECT COUNT(*) FROM Store1 S1, Store2 S2 WHERE S1.ItemNo = S2.ItemNo "
                     "WITH PREFERENCE desc " + PREF)
    with pytest.raises(SketchQLSemanticError, match="INT columns"):
        eng.register("SELECT S1.ts FROM Store1 S1, Store2 S2 WHERE S1.price = S2.price "
                     "WITH PREFERENCE desc S1.price WINDOW 1 MINUTE")
    # EXPLAIN still shows the (exact) plan and why it cannot run
    assert "cannot run it" in eng.explain("SELECT ItemNo FROM Store1 WITH PREFERENCE desc "
                                          "SUMMARY.Estimate.Count(ItemNo) WINDOW 1 MINUTE")


def test_residual_filter_and_projection_above_pt_join(stores, brute):
    eng = Engine()
    eng.execute(DDL)
    q = eng.register("SELECT S1.ItemNo AS item, S2.ts - S1.ts AS d FROM Store1 S1, Store2 S2 "
                     "WHERE S1.ItemNo = S2.ItemNo AND S1.price > 50 WITH PREFERENCE desc " + PREF +
                     " WITHIN 1000000 PROBES PER TUPLE")
    q.set_knob("retain_changes", None)
    _feed(eng, stores)
    a, b = stores
    m = ((a.item[:, None] == b.item[None, :]) & (np.abs(a.ts[:, None] - b.ts[None, :]) < 60.0)
         & (a.price[:, None] > 50))
    i, j = np.nonzero(m)
    want = sorted(zip(a.item[i].tolist(), np.round(b.ts[j] - a.ts[i], 9).tolist()))
    r = q.results()
    got = sorted(zip(r["item"].tolist(), np.round(r["d"].to_numpy(), 9).tolist()))
    assert got == want and len(want) > 0
