"""Parsing and planning of the CQL additions: set operations, subqueries, landmark windows,
aliases, cost ties."""
import pytest

from sketchql.engine import Engine
from sketchql.errors import SketchQLSemanticError, SketchQLSyntaxError
from sketchql.planner import ast as A
from sketchql.planner.cost import JoinStream, all_orders
from sketchql.planner.parser import parse_query


@pytest.fixture
def eng():
    e = Engine()
    e.execute("CREATE STREAM S (k INT, v DOUBLE, name VARCHAR) TIMESTAMP ts; "
              "CREATE STREAM R (k INT, v DOUBLE, name VARCHAR) TIMESTAMP ts")
    return e


def test_set_operation_precedence_and_spellings():
    q = parse_query("SELECT k FROM S EXCEPT ALL SELECT k FROM R INTERSECT SELECT k FROM S UNION SELECT k FROM R")
    assert isinstance(q.select, A.SetOp) and q.select.op == "union"
    left = q.select.left
    assert left.op == "except" and left.all and left.right.op == "intersect" and not left.right.all
    assert parse_query("SELECT k FROM S MINUS SELECT k FROM R").select.op == "except"
    p = parse_query("(SELECT k FROM S UNION ALL SELECT k FROM R) EXCEPT SELECT k FROM S")
    assert p.select.op == "except" and p.select.left.op == "union" and p.select.left.all


def test_subquery_predicates_parse():
    q = parse_query("SELECT k FROM S WHERE k NOT IN (SELECT k FROM R) AND NOT EXISTS (SELECT * FROM R WHERE R.v = S.v)")
    a, b = q.select.where.items
    assert isinstance(a, A.InSubquery) and a.negated
    assert isinstance(b, A.Exists) and b.negated


@pytest.mark.parametrize("sql,line,col", [
    ("SELECT k FROM S UNION", 1, 22),
    ("SELECT k FROM S UNION ALL ALL SELECT k FROM R", 1, 27),
    ("SELECT k FROM S WHERE k IN (SELECT FROM R)", 1, 36),
])
def test_syntax_errors_point_at_the_text(sql, line, col):
    with pytest.raises(SketchQLSyntaxError) as ei:
        parse_query(sql)
    assert (ei.value.line, ei.value.column) == (line, col), str(ei.value)


@pytest.mark.parametrize("sql,msg", [
    ("SELECT k FROM S [RANGE 5] UNION SELECT k, v FROM R [RANGE 5]", "same number of columns"),
    ("SELECT name FROM S [RANGE 5] EXCEPT SELECT v FROM R [RANGE 5]", "str on the left"),
    ("SELECT k FROM S UNION SELECT ISTREAM k FROM R", "whole query"),
    ("SELECT k FROM S WHERE k IN (SELECT k, v FROM R)", "one column"),
    ("SELECT k FROM S WHERE k > 1 OR k IN (SELECT k FROM R)", "joined by AND"),
    ("SELECT k FROM S WHERE EXISTS (SELECT * FROM R WHERE R.k > S.k)", "only in equalities"),
    ("SELECT k FROM S [UNBOUNDED START AT 50 END AT 10]", "ends"),
    ("SELECT k FROM (SELECT k FROM S) AS d [ROWS 3]", "cannot take a window"),
    ("SELECT k FROM S [RANGE 5] UNION SELECT k FROM R [RANGE 5] WITH PREFERENCE desc k", "evaluated exactly"),
])
def test_semantic_errors(eng, sql, msg):
    with pytest.raises((SketchQLSemanticError, SketchQLSyntaxError), match=msg):
        eng.register(sql)


def test_landmark_times():
    w = parse_query("SELECT k FROM S [UNBOUNDED START AT '07:00' END AT 30000]").select.from_items[0].window
    assert (w.start_at, w.end_at) == (7 * 3600.0, 30000.0)
    w = parse_query("SELECT k FROM S [UNBOUNDED START AT '1970-01-02T00:00:00Z']").select.from_items[0].window
    assert w.start_at == 86400.0
    with pytest.raises(SketchQLSyntaxError, match="landmark time"):
        parse_query("SELECT k FROM S [UNBOUNDED START AT 'sunrise']")


def test_explain_patterns(eng):
    text = eng.explain("SELECT k FROM S [UNBOUNDED START AT 10] WHERE k NOT IN (SELECT k FROM R [RANGE 5]) "
                       "UNION ALL SELECT k FROM R [NOW]")
    assert "SemiJoin" in text and "UnionAll" in text and "landmark window" in text
    lines = {ln.split("<")[1].split(">")[0]: ln for ln in text.splitlines() if "<" in ln}
    assert "[strict]" in lines["SemiJoin"] and "[strict]" in lines["UnionAll"]
    assert "[monotonic]" in lines["WindowScan"] or any("[monotonic]" in ln for ln in text.splitlines())


def test_alias_without_as_is_not_a_time_unit(eng):
    q = parse_query("SELECT 1 s, 2 ms, k min FROM S [RANGE 10 s]")
    assert [it.alias for it in q.select.items] == ["s", "ms", "min"]
    assert q.select.from_items[0].window.size == 10.0


def test_cost_ties_use_a_tolerance_then_the_lexicographic_order():
    # (0,1,2) and (1,2,0) cost the same sum of terms, 0.24519 vs 0.24518999999999996 in floating point:
    # a raw sort would put (1,2,0) first; with the tolerance they tie and the lexicographic order decides
    st = [JoinStream(0.3, 0.7, 7.0), JoinStream(0.3, 0.3, 7.0), JoinStream(0.7, 0.7, 7.0)]
    tab = all_orders(st)
    assert tab[0][0] == (1, 0, 2)
    assert [o for o, _ in tab[1:3]] == [(0, 1, 2), (1, 2, 0)]
    assert tab[1][1] != tab[2][1]                           # the noise is really there
    assert [o for o, _ in tab[3:5]] == [(0, 2, 1), (2, 1, 0)]
    # exact ties too (identical streams): the lexicographic order wins
    same = [JoinStream(1, 10, 5)] * 4
    assert all_orders(same)[0][0] == (0, 1, 2, 3)
