"""Planner: the multi-join cost model reproduces reference case W2, plans are
annotated with update patterns and state structures, the engine choice follows
the contract, EXPLAIN shows it all."""
import itertools

import pytest

from sketchql.engine import Engine
from sketchql.errors import SketchQLSemanticError
from sketchql.planner.cost import JoinStream, all_orders, best_order, eager_costs, order_cost, phi
from sketchql.planner.plan import StreamStats

# Table 5 / Table 9 of golab-ozsu-sliding-window-multijoins: (λ, T, v)
TABLE5 = [JoinStream(10, 100, 500), JoinStream(1, 100, 50), JoinStream(1, 200, 40), JoinStream(3, 100, 5)]


def test_w2_pairwise_and_three_way_sizes():
    got = {f"{i + 1}{j + 1}": phi(TABLE5, [i, j]) for i, j in itertools.combinations(range(4), 2)}
    assert got == {"12": 200, "13": 400, "14": 600, "23": 400, "24": 600, "34": 1500}
    assert phi(TABLE5, [0, 1, 2]) == 800 and phi(TABLE5, [0, 1, 3]) == 1200
    # the size of a join does not depend on the order it is computed in
    for perm in itertools.permutations(range(4)):
        assert phi(TABLE5, perm) == pytest.approx(phi(TABLE5, range(4)))


def test_w2_eager_costs_and_optimum():
    assert eager_costs(TABLE5, (0, 1, 2, 3)) == [3800, 3800, 2400, 6000]
    assert order_cost(TABLE5, (0, 1, 2, 3)) == 16000
    order, cost = best_order(TABLE5)
    assert order == (0, 1, 2, 3) and cost == 16000
    table = all_orders(TABLE5)
    assert table[-1][1] == 86850                       # "nearly 90000"
    # section 5.1: S2, S1, S3, S4 is fifth-best at 19600
    assert [o for o, _ in table].index((1, 0, 2, 3)) == 4 and order_cost(TABLE5, (1, 0, 2, 3)) == 19600


def test_w2_brute_force_cost_matches_formula():
    """Independent check: expected work of the eager algorithm by explicit nesting."""
    def brute(order):
        total = 0.0
        for i in range(4):
            rest = [r for r in order if r != i]
            # one new S_i tuple: scan rest[0]; every match scans the next window...
            work, partial, distinct = 0.0, 1.0, TABLE5[i].distinct
            for r in rest:
                n = TABLE5[r].rate * TABLE5[r].window
                work += partial * n
                partial = partial * n / max(distinct, TABLE5[r].distinct)
                distinct = min(distinct, TABLE5[r].distinct)
            total += TABLE5[i].rate * work
        return total
    for perm in itertools.permutations(range(4)):
        assert order_cost(TABLE5, perm) == pytest.approx(brute(perm))


def _w2_engine():
    eng = Engine()
    eng.execute("""CREATE STREAM S1 (a INT) TIMESTAMP ts; CREATE STREAM S2 (a INT) TIMESTAMP ts;
                   CREATE STREAM S3 (a INT) TIMESTAMP ts; CREATE STREAM S4 (a INT) TIMESTAMP ts""")
    stats = {"S1": StreamStats(10, {"a": 500}), "S2": StreamStats(1, {"a": 50}),
             "S3": StreamStats(1, {"a": 40}), "S4": StreamStats(3, {"a": 5})}
    eng._stats_for = lambda name: stats[name]
    return eng


W2_SQL = ("SELECT * FROM S4 [RANGE 100], S3 [RANGE 200], S2 [RANGE 100], S1 [RANGE 100] "
          "WHERE S1.a = S2.a AND S2.a = S3.a AND S3.a = S4.a")


def test_w2_through_sql_planner_picks_the_optimal_order():
    eng = _w2_engine()
    plan = eng._plan(__import__("sketchql.planner.parser", fromlist=["x"]).parse_query(W2_SQL))
    join = [n for n in plan.nodes if n.kind == "join"][0]
    aliases = join.params["aliases"]
    assert [aliases[i] for i in join.params["order"]] == ["S1", "S2", "S3", "S4"]
    assert join.cost.work == pytest.approx(16000)
    assert plan.join_orders[0] == (("S1", "S2", "S3", "S4"), pytest.approx(16000))
    assert plan.join_orders[-1][1] == pytest.approx(86850)
    # MJoin probe order of each input = the global order without it
    q = eng.register(W2_SQL)
    mj = [n for n in q.operators() if n.kind == "join"][0].op
    pos = {a: i for i, a in enumerate(aliases)}
    assert mj.probe_orders[pos["S3"]] == [pos["S1"], pos["S2"], pos["S4"]]
    text = eng.explain(W2_SQL)
    assert "(S1, S2, S3, S4): 16000" in text and "86850" in text


def _plan(eng, sql):
    from sketchql.planner.parser import parse_query
    return eng._plan(parse_query(sql))


@pytest.fixture
def eng():
    e = Engine()
    e.execute("""CREATE STREAM A (k INT, x DOUBLE, s STRING) TIMESTAMP ts;
                 CREATE STREAM B (k INT, y DOUBLE) TIMESTAMP ts;
                 CREATE TABLE T (k INT, name STRING);
                 CREATE SUMMARY sa ON A (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)""")
    return e


@pytest.mark.parametrize("sql,patterns", [
    ("SELECT k FROM A [RANGE 10] WHERE x > 1", {"scan": "weakest", "project": "weakest"}),
    ("SELECT k FROM A [ROWS 10] WHERE x > 1", {"scan": "weakest", "select": "weakest"}),
    ("SELECT k FROM A", {"scan": "monotonic", "project": "monotonic"}),
    ("SELECT k FROM A [PARTITION BY k ROWS 2]", {"scan": "weak"}),
    ("SELECT A.k FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k", {"scan": "weakest", "join": "weak"}),
    ("SELECT A.k FROM A, B WHERE A.k = B.k", {"join": "monotonic"}),
    ("SELECT k, SUM(x) FROM A [RANGE 10] GROUP BY k", {"aggregate": "weak"}),
    ("SELECT A.k, T.name FROM A [RANGE 10], T WHERE A.k = T.k", {"static_join": "weakest"}),
    ("SELECT DISTINCT k FROM A [RANGE 10]", {"distinct": "weak"}),
])
def test_update_pattern_annotation(eng, sql, patterns):
    plan = _plan(eng, sql)
    got = {}
    for n in plan.nodes:
        got.setdefault(n.kind, n.pattern)
    for kind, pat in patterns.items():
        assert got[kind] == pat, (kind, got)


def test_state_structures_follow_patterns(eng):
    p = _plan(eng, "SELECT DISTINCT k FROM A [RANGE 10]")
    d = [n for n in p.nodes if n.kind == "distinct"][0]
    assert d.params["mode"] == "replace" and "δ*" in d.structure
    p = _plan(eng, "SELECT DISTINCT A.k FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k")
    d = [n for n in p.nodes if n.kind == "distinct"][0]
    assert d.params["mode"] == "count"          # join output does not expire FIFO
    scan = [n for n in p.nodes if n.kind == "scan"][0]
    assert "FIFO" in scan.structure
    p = _plan(eng, "SELECT A.k FROM A [RANGE 10], B [PARTITION BY k ROWS 3] WHERE A.k = B.k")
    j = [n for n in p.nodes if n.kind == "join"][0]
    assert "B: expiration-partitioned buffer" in j.structure and "A: FIFO list" in j.structure


def test_filters_pushed_below_time_windows_only(eng):
    p = _plan(eng, "SELECT k FROM A [RANGE 10] WHERE x > 1")
    assert [n.kind for n in p.nodes] == ["project", "scan"]
    assert "pushed below the window" in p.nodes[-1].label
    p = _plan(eng, "SELECT k FROM A [ROWS 10] WHERE x > 1")
    assert [n.kind for n in p.nodes] == ["project", "select", "scan"]


def test_engine_choice_from_contract(eng):
    assert _plan(eng, "SELECT k FROM A [RANGE 10]").engine == "exact"
    assert _plan(eng, "SELECT k FROM A WITH PREFERENCE desc SUMMARY.Estimate.Count(k) EXACT").engine == "exact"
    p = _plan(eng, "SELECT k FROM A WITH PREFERENCE desc SUMMARY.Estimate.Count(k) WITHIN 10 PROBES PER TUPLE")
    assert p.engine == "promising"
    # the exact plan fits a generous budget and the contract falls back to exact
    p = _plan(eng, "SELECT k FROM A [RANGE 10] WITH PREFERENCE desc SUMMARY.Estimate.Count(k) "
                   "WITHIN 1000 PROBES PER TUPLE ON MISS EXACT")
    assert p.engine == "exact" and "fits the budget" in p.engine_reason
    with pytest.raises(SketchQLSemanticError, match="promising-tuple operators"):
        eng.register("SELECT k FROM A WITH PREFERENCE desc SUMMARY.Estimate.Count(k) FADE FACTOR 0.8 "
                     "WINDOW 1 MINUTE")
    q = eng.register("SELECT k FROM A WITH PREFERENCE desc SUMMARY.Estimate.Count(k) FADE FACTOR 0.8 "
                     "WINDOW 1 MINUTE EXACT")
    assert q.plan.engine == "exact"
    scan = [n for n in q.operators() if n.kind == "scan"][0]
    assert scan.params["window"].kind == "range" and scan.params["window"].size == 60.0


def test_explain_text(eng):
    text = eng.explain("EXPLAIN SELECT A.k, SUM(B.y) FROM A [RANGE 1 MINUTE], B [ROWS 100] "
                       "WHERE A.k = B.k AND A.x > 2 GROUP BY A.k")
    for part in ("engine: exact", "SymmetricHashJoin", "Aggregate SUM(B.y)", "[weak]", "[weakest]",
                 "cost: in=", "work=", "state: FIFO", "pushed below the window"):
        assert part in text, part
    text = eng.explain("SELECT k FROM A WITH PREFERENCE weighted SUMMARY.Estimate.Count(k) "
                       "WITHIN 5 PROBES PER TUPLE ON MISS RETURN")
    assert "engine: promising" in text and "budget 5 probes/tuple" in text


def test_cost_model_uses_observed_rates(eng):
    import numpy as np
    eng.push("A", {"ts": np.arange(0, 100, 0.1), "k": np.arange(1000) % 7, "x": np.ones(1000),
                   "s": np.array(["a"] * 1000, dtype=object)})
    p = _plan(eng, "SELECT k FROM A [RANGE 10]")
    scan = [n for n in p.nodes if n.kind == "scan"][0]
    assert scan.cost.rate_in == pytest.approx(1000 / 99.9, rel=1e-6)
    assert scan.cost.state == pytest.approx(10 * 1000 / 99.9, rel=1e-6)
