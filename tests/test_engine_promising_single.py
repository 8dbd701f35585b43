"""Single-stream WITH PREFERENCE queries (PTSelection / PTAggregate) vs EXACT and brute force."""
import numpy as np
import pytest

from sketchql.engine import Engine
from sketchql.errors import SketchQLSemanticError

W = 10.0


def _data(seed=3, n=3000, dur=60.0):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.uniform(0, dur, n))
    k = rng.integers(0, 200, n)
    v = rng.gamma(2.0, 5.0, n) + k * 0.1
    return ts, k, v


def _run(sql_pt, sql_ex, budget_chunks=30, seed=3):
    ts, k, v = _data(seed)
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
    qp, qe = eng.register(sql_pt), eng.register(sql_ex)
    snaps = []
    for part in np.array_split(np.arange(len(ts)), budget_chunks):
        eng.push("S", {"ts": ts[part], "k": k[part], "v": v[part]})
        now = ts[part[-1]]
        m = (ts > now - W) & (ts <= now)
        snaps.append((qp.snapshot(), qe.snapshot(), m))
    return ts, k, v, snaps, qp


SEL = "SELECT S.k, S.v FROM S [RANGE 10] WHERE S.k BETWEEN 20 AND 60 "


def test_selection_huge_budget_equals_exact():
    ts, k, v, snaps, qp = _run(SEL + "WITH PREFERENCE desc S.k WITHIN 100000 PROBES PER TUPLE", SEL + "EXACT")
    assert "PromisingTupleSelection" in qp.explain()
    for pt, ex, m in snaps:
        brute = sorted(v[m & (k >= 20) & (k <= 60)].tolist())
        assert sorted(ex["v"].tolist()) == brute
        assert sorted(pt["v"].tolist()) == brute


def test_selection_tight_budget_subset():
    # 80 % of the tuples qualify: 1 unit per tuple left after the insert cannot scan them all
    sql = "SELECT S.k, S.v FROM S [RANGE 10] WHERE S.k >= 20 AND S.k < 181 "
    _, _, _, snaps, qp = _run(sql + "WITH PREFERENCE desc S.k WITHIN 2 PROBES PER TUPLE", sql + "EXACT")
    tot_pt = tot_ex = 0
    for pt, ex, m in snaps:
        assert set(pt["v"].tolist()) <= set(ex["v"].tolist())
        assert pt["k"].between(20, 180).all()
        tot_pt += len(pt)
        tot_ex += len(ex)
    assert 0 < tot_pt < tot_ex


@pytest.mark.parametrize("func,arg", [("AVG", "S.v"), ("SUM", "S.v"), ("COUNT", "*")])
def test_aggregate_huge_budget_equals_exact(func, arg):
    base = f"SELECT {func}({arg}) AS a FROM S [RANGE 10] WHERE S.k BETWEEN 20 AND 60 "
    ts, k, v, snaps, qp = _run(base + "WITH PREFERENCE weighted S.k WITHIN 100000 PROBES PER TUPLE", base + "EXACT")
    assert "PromisingTupleAggregate" in qp.explain()
    for pt, ex, m in snaps:
        sel = m & (k >= 20) & (k <= 60)
        brute = {"AVG": v[sel].mean(), "SUM": v[sel].sum(), "COUNT": sel.sum()}[func]
        assert ex["a"].iloc[0] == pytest.approx(brute, rel=1e-9)
        if func == "COUNT":   # answered from the zone counts: the window's boundary zone is interpolated
            assert abs(pt["a"].iloc[0] - brute) <= 3 * pt["a_error"].iloc[0] + 1.0
        else:
            assert pt["a"].iloc[0] == pytest.approx(brute, rel=1e-6)
        assert list(pt.columns[:2]) == ["a", "a_error"]


@pytest.mark.parametrize("func", ["AVG", "SUM", "COUNT"])
def test_aggregate_tight_budget_within_error(func):
    base = f"SELECT {func}(S.v) AS a FROM S [RANGE 10] WHERE S.k BETWEEN 20 AND 60 "
    ts, k, v, snaps, qp = _run(base + "WITH PREFERENCE weighted S.k WITHIN 3 PROBES PER TUPLE", base + "EXACT")
    ok = tot = 0
    for pt, ex, m in snaps[5:]:
        est, err = pt["a"].iloc[0], pt["a_error"].iloc[0]
        tot += 1
        ok += abs(est - ex["a"].iloc[0]) <= 3 * err + 1e-9
    assert ok >= 0.8 * tot


@pytest.mark.parametrize("sql", [
    "SELECT S.k FROM S [RANGE 10] WITH PREFERENCE desc S.k",                         # no range
    "SELECT S.k FROM S [RANGE 10] WHERE S.v > 3.0 WITH PREFERENCE desc S.k",         # DOUBLE column
    "SELECT MAX(S.v) FROM S [RANGE 10] WHERE S.k BETWEEN 1 AND 5 WITH PREFERENCE desc S.k",
    "SELECT S.k, AVG(S.v) FROM S [RANGE 10] WHERE S.k BETWEEN 1 AND 5 GROUP BY S.k WITH PREFERENCE desc S.k",
])
def test_unsupported_shapes_raise(sql):
    eng = Engine()
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
    with pytest.raises(SketchQLSemanticError, match="EXACT"):
        eng.register(sql)


def _pt_stats(q):
    return [o for o in q.stats()["operators"] if o["node"] == "pt_aggregate"][0]


@pytest.mark.parametrize("func,units", [("SUM", 1), ("AVG", 1), ("COUNT", 2)])
def test_aggregate_error_contract_on_miss_exact(func, units):
    arg = "*" if func == "COUNT" else "S.v"
    base = f"SELECT {func}({arg}) AS a FROM S [RANGE 10] WHERE S.k BETWEEN 20 AND 60 "
    pref = f"WITH PREFERENCE weighted S.k WITHIN {units} PROBES PER TUPLE "
    ts, k, v, snaps, qp = _run(base + pref + "WITH ERROR 0.01 ON MISS EXACT", base + "EXACT")
    st = _pt_stats(qp)
    assert st["pt_contract_misses"] > 0 and st["pt_exact_fallbacks"] == st["pt_contract_misses"]
    for pt, ex, m in snaps:
        est, err = pt["a"].iloc[0], pt["a_error"].iloc[0]
        assert err <= 0.01 * abs(est) + 1e-12          # every answer meets the contract ...
        if err == 0.0:                                  # ... the fallbacks are the exact answer
            sel = m & (k >= 20) & (k <= 60)
            brute = {"AVG": v[sel].mean(), "SUM": v[sel].sum(), "COUNT": sel.sum()}[func]
            assert est == pytest.approx(brute, rel=1e-9)
    # ON MISS RETURN (the default): estimates are returned as they are, misses counted
    _, _, _, snaps2, q2 = _run(base + pref + "WITH ERROR 0.01", base + "EXACT")
    st2 = _pt_stats(q2)
    assert st2["pt_contract_misses"] > 0 and st2["pt_exact_fallbacks"] == 0
    assert any(not (p["a_error"].iloc[0] <= 0.01 * abs(p["a"].iloc[0])) for p, _, _ in snaps2)
