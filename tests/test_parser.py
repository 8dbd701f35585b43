"""Parser and semantic analysis: paper examples parse, malformed queries give the
documented error at the documented position, fuzzing never escapes the two
documented error classes."""
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sketchql.engine import Engine
from sketchql.errors import SketchQLSemanticError, SketchQLSyntaxError
from sketchql.planner import ast as A
from sketchql.planner.parser import parse, parse_one, parse_query
from sketchql.planner.plan import instantiate

# Every example query of the papers (papers/*.txt).  Placeholders of the
# templates are instantiated: Figure 3's "attr1, attr2, ..." -> two columns,
# "FADE FACTOR" / "WINDOW w" -> a number / a duration, Patroumpas' "[Window
# signature]" -> [RANGE 10 SLIDE 1] and AGGR -> SUM / MAX.  The CQL paper's
# typographic quotes are kept as printed.
PAPER_QUERIES = [
    # ali-aref-eltabakh, Figure 3 (a) and (b)
    "CREATE SUMMARY summary_name ON stream (attr) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)",
    "SELECT attr1, attr2 FROM stream1, stream2 WHERE attr1 = attr2 WITH PREFERENCE desc attr1 "
    "FADE FACTOR 0.8 WINDOW 1 MINUTE",
    "SELECT attr1 FROM stream1 WHERE attr1 > 0 WITH PREFERENCE asc attr1 FADE FACTOR 0.5 WINDOW 30 seconds",
    "SELECT attr1 FROM stream1 WHERE attr1 > 0 WITH PREFERENCE weighted attr1 FADE FACTOR 1 WINDOW 2 minutes",
    # Figure 6, with each preference kind
    *[f"""SELECT S1.ItemNo, S1.TimeStamp, S2.TimeStamp
FROM Store1 S1, Store2 S2
WHERE S1.ItemNo= S2.ItemNo
WITH PREFERENCE {k}
SUMMARY.Estimate.Count(S1.ItemNo),
SUMMARY.Estimate.Count(S2.ItemNo)
FADE FACTOR 0.8
WINDOW 1 MINUTE""" for k in ("desc", "asc", "weighted")],
    # DESIGN.md
    "CREATE STREAM Store1 (ItemNo INT, Price DOUBLE) TIMESTAMP ts",
    "CREATE SUMMARY s1 ON Store1 (ItemNo) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)",
    # stream-cidr2003, section 2.1
    "Select Count(*)\nFrom Requests S [Range 1 Day Preceding]\nWhere S.domain = ‘stanford.edu’",
    "Select Count(*)\nFrom Requests S\n[Partition By S.client_id\nRows 10 Preceding\n"
    "Where S.domain = ‘stanford.edu’]\nWhere S.URL Like ‘http://cs.stanford.edu/%’",
    "Select T.URL\nFrom\n(Select client_id, URL\nFrom Requests S, Domains R\nWhere S.domain = R.domain\n"
    "And R.type = ’commerce’) T Sample(10)\nWhere T.client_id Between 1 And 1000",
    "Select * From S",
    # patroumpas-sellis Q1, Q2, Q2', Q3, Q4-Q6
    "SELECT AVG(Temperature)\n     FROM Readings [RANGE 60 MINUTES SLIDE 1 MINUTE]",
    "SELECT * FROM Readings\n     WHERE Temperature >= 30",
    "SELECT *\n        FROM Readings [RANGE 60 MINUTES SLIDE 1 MINUTE]\n        WHERE Temperature >= 30",
    "SELECT P.stationID, MAX(P.humidity), AVG(S.temperature)\nFROM P [UNBOUNDED START AT '07:00:00'],\n"
    "S [RANGE 60 MINUTES SLIDE 1 MINUTE]\nWHERE P.stationID = S.stationID AND S.Temperature >= 30\n"
    "GROUP BY P.stationID",
    "SELECT DISTINCT protocol, localIP, remoteIP\n      FROM NetTrace [RANGE 10 SLIDE 1];",
    "SELECT localIP, SUM(duration)\n      FROM NetTrace [RANGE 10 SLIDE 1]\n      GROUP BY localIP;",
    "SELECT localIP, MAX(duration)\n      FROM NetTrace [ROWS 1000]\n      GROUP BY localIP;",
    "SELECT *\n      FROM TraceA [RANGE 10 SLIDE 1], TraceB [RANGE 10 SLIDE 1]\n"
    "      WHERE TraceA.localIP = TraceB.remoteIP;",
    # hammad et al. Q1 (Figure 1a) as in reference case W3
    "SELECT SUM(price) FROM Sales [RANGE 1 HOUR] WHERE price > 4",
    "SELECT SUM(price) FROM Sales [RANGE 10] WHERE price > 4",
    # the language of the issue
    "SELECT ISTREAM a FROM s [NOW]",
    "SELECT DSTREAM a FROM s [UNBOUNDED]",
    "SELECT RSTREAM a, COUNT(DISTINCT b), MEDIAN(c), QUANTILE(c, 0.9) FROM s [RANGE 500 ms] GROUP BY a",
    "SELECT a FROM s [PARTITION BY a, b ROWS 3] SAMPLE(50) x WHERE x.a <> 2",
    "SELECT a FROM s [RANGE 2 hours SLIDE 10 min] WITH ERROR 0.05 CONFIDENCE 0.95 WITHIN 5 MS PER TUPLE "
    "ON MISS RETURN",
    "SELECT a FROM s WITH PREFERENCE desc SUMMARY.Estimate.Count(a) * 2 + 1 WITHIN 100 PROBES PER TUPLE "
    "ON MISS FAIL",
    "SELECT a FROM s EXACT",
    "EXPLAIN SELECT a FROM s [RANGE 1 d]",
    "DROP STREAM s; DROP TABLE IF EXISTS t; DROP SUMMARY x; DROP QUERY q1",
    "CREATE TABLE Domains (domain STRING, type STRING)",
]


@pytest.mark.parametrize("sql", PAPER_QUERIES)
def test_paper_examples_parse(sql):
    stmts = parse(sql)
    assert stmts and all(isinstance(s, (A.Query, A.CreateStream, A.CreateTable, A.CreateSummary,
                                        A.Drop, A.Explain)) for s in stmts)


def test_parse_details():
    q = parse_query(PAPER_QUERIES[4])
    assert q.preference.kind == "desc" and len(q.preference.exprs) == 2
    assert isinstance(q.preference.exprs[0], A.SummaryEstimate)
    assert q.fade == 0.8 and q.window == 60.0
    q = parse_query("select a from s [range 2 hours slide 10 min] within 5 ms per tuple on miss exact")
    w = q.select.from_items[0].window
    assert (w.kind, w.size, w.slide) == ("range", 7200.0, 600.0)
    assert (q.contract.budget, q.contract.budget_unit, q.contract.on_miss) == (5.0, "ms", "exact")
    q = parse_query("select a from s within 2 seconds per tuple")
    assert (q.contract.budget, q.contract.budget_unit) == (2000.0, "ms")
    s = parse_one("CREATE SUMMARY x ON s (a) WITH GRANULARITY 250 ms AND COLLAPSE(2, 4)")
    assert (s.granularity, s.rate, s.depth) == (0.25, 2.0, 4.0)
    q = parse_query("SELECT a FROM s [PARTITION BY a ROWS 3 WHERE a > 1] SAMPLE(50) x")
    fi = q.select.from_items[0]
    assert fi.alias == "x" and fi.sample == 50.0 and fi.window.kind == "partition" and fi.window.where is not None
    # keywords usable as names where a name is expected; quoted identifiers
    q = parse_query('SELECT S1.TimeStamp, "select" FROM s S1')
    assert q.select.items[0].expr.name == "TimeStamp" and q.select.items[1].expr.name == "select"


@pytest.mark.parametrize("sql,unit_seconds", [
    ("1 ms", 1e-3), ("2 milliseconds", 2e-3), ("3 s", 3.0), ("3 sec", 3.0), ("1 second", 1.0),
    ("4 SECONDS", 4.0), ("2 min", 120.0), ("2 minutes", 120.0), ("1 HOUR", 3600.0), ("1.5 hours", 5400.0),
    ("1 day", 86400.0), ("7", 7.0), (".5 s", 0.5)])
def test_durations(sql, unit_seconds):
    q = parse_query(f"SELECT a FROM s [RANGE {sql}]")
    assert q.select.from_items[0].window.size == pytest.approx(unit_seconds)


# (query, line, column, offending token or None for end of input)
MALFORMED = [
    ("SELECT FROM s", 1, 8, "FROM"),
    ("SELECT a FROM", 1, 14, None),
    ("SELECT a FROM s WHERE a >", 1, 26, None),
    ("SELECT a FROM s [RANGE]", 1, 23, "]"),
    ("SELECT a FROM s WHERE a ? 1", 1, 25, "?"),
    ("SELECT a\nFROM s\nWHERE a = = 1", 3, 11, "="),
    ("", 1, 1, None),
    ("SELEC a FROM s", 1, 1, "SELEC"),
    ("SELECT a FROM s [RANGE 10 SLIDE]", 1, 32, "]"),
    ("SELECT a FROM s [ROWS 10", 1, 25, None),
    ("SELECT a FROM s WITH PREFERENCE", 1, 32, None),
    ("SELECT a FROM s FADE FACTOR", 1, 28, None),
    ("SELECT a FROM s WITHIN 10 BANANAS PER TUPLE", 1, 27, "BANANAS"),
    ("SELECT a FROM s ON MISS PANIC", 1, 25, "PANIC"),
    ("CREATE STREAM s (a INT,)", 1, 24, ")"),
    ("CREATE SUMMARY x ON s (a) WITH GRANULARITY 10 SECONDS", 1, 54, None),
    ("SELECT a FROM s [RANGE 10 fortnights]", 1, 27, "fortnights"),
    ("SELECT a FROM s GROUP a", 1, 23, "a"),
    ("SELECT COUNT(*) FROM s HAVING", 1, 30, None),
    ("SELECT a FROM s WINDOW 1 MINUTE WINDOW 2 MINUTES", 1, 40, None),
    ("SELECT a FROM s [RANGE 1] [ROWS 2]", 1, 27, None),
    ("SELECT 'abc FROM s", 1, 8, "'"),
    ("SELECT a FROM s FADE FACTOR 1e999 WITH PREFERENCE a", 1, 29, "1e999"),
]


@pytest.mark.parametrize("sql,line,column,token", MALFORMED)
def test_malformed_queries(sql, line, column, token):
    with pytest.raises(SketchQLSyntaxError) as ei:
        parse(sql)
    e = ei.value
    assert (e.line, e.column) == (line, column), str(e)
    if token is not None:
        assert e.token == token
    assert f"line {line}, column {column}" in str(e)


def test_syntax_error_lists_expected():
    with pytest.raises(SketchQLSyntaxError) as ei:
        parse("SELECT a FROM s [RANGE]")
    assert "a number" in ei.value.expected and "UNBOUNDED" in ei.value.expected
    with pytest.raises(SketchQLSyntaxError) as ei:
        parse("SELECT a")
    assert "FROM" in ei.value.expected


DDL = """
CREATE STREAM Store1 (ItemNo INT, Price DOUBLE, Name STRING) TIMESTAMP ts;
CREATE STREAM Store2 (ItemNo INT, Price DOUBLE) TIMESTAMP ts;
CREATE TABLE Items (ItemNo INT, Label STRING);
CREATE SUMMARY s1 ON Store1 (ItemNo) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)
"""

# (query, marker): the error must point at the first occurrence of marker
# (or at "@@" when the marker is given as an explicit (line, column))
SEMANTIC = [
    ("SELECT a FROM Nope", "Nope"),
    ("SELECT Foo FROM Store1", "Foo"),
    ("SELECT X.ItemNo FROM Store1 S", "X.ItemNo"),
    ("SELECT ItemNo FROM Store1, Store2 WHERE Store1.ItemNo = Store2.ItemNo", "ItemNo"),
    ("SELECT Label FROM Store1 S, Items [RANGE 10] WHERE S.ItemNo = Items.ItemNo", "[RANGE"),
    ("SELECT S1.ItemNo FROM Store1 S1, Store2 S2\nWHERE S1.ItemNo = S2.ItemNo\n"
     "WITH PREFERENCE desc S1.Name", "S1.Name"),
    ("SELECT ItemNo FROM Store1 WITH PREFERENCE desc SUMMARY.Estimate.Count(ItemNo) FADE FACTOR 1.5", "1.5"),
    ("SELECT ItemNo FROM Store1 WITH PREFERENCE desc SUMMARY.Estimate.Count(ItemNo) FADE FACTOR 0", "0"),
    ("SELECT ItemNo FROM Store1 WITH PREFERENCE desc SUMMARY.Estimate.Count(Price)", "Price"),
    ("SELECT ItemNo FROM Store1 WHERE SUMMARY.Estimate.Count(ItemNo) > 1", "SUMMARY"),
    ("SELECT ItemNo FROM Store1 WHERE SUM(Price) > 1", "SUM"),
    ("SELECT ItemNo, SUM(Price) FROM Store1", "ItemNo"),
    ("SELECT SUM(Name) FROM Store1", "Name"),
    ("SELECT ItemNo FROM Store1 WHERE Name > 3", "Name"),
    ("SELECT ItemNo FROM Store1 WHERE Price + Name > 3", "Name"),
    ("SELECT ItemNo FROM Store1 [ROWS 0]", "[ROWS"),
    ("SELECT ItemNo FROM Store1 [RANGE 0 SECONDS]", "[RANGE"),
    ("SELECT ItemNo FROM Store1 SAMPLE(150)", "Store1"),
    ("SELECT S1.Price FROM Store1 S1, Store2 S2", "SELECT"),
    ("SELECT ItemNo FROM Store1 WITH ERROR 1.5", "1.5"),
    ("SELECT ItemNo FROM Store1 WITH ERROR 0.1 CONFIDENCE 2", "0.1"),
    ("SELECT ItemNo FROM Store1 WITHIN 0 PROBES PER TUPLE", "0"),
    ("SELECT ItemNo FROM Store1 FADE FACTOR 0.5", "0.5"),
    ("SELECT ItemNo FROM Store1 WITH ERROR 0.1 EXACT", "EXACT"),
    ("SELECT ItemNo FROM Store1 [UNBOUNDED START AT '07:00' END AT '06:00']", "[UNBOUNDED"),
    ("SELECT x FROM (SELECT ItemNo AS x FROM Store1) T [RANGE 5]", "[RANGE"),
    ("SELECT ItemNo FROM Store1 WHERE FOO(ItemNo) > 1", "FOO"),
    ("SELECT ItemNo FROM Store1 S, Store1 S", "Store1 S\x00"),
    ("SELECT ItemNo FROM Store1 HAVING ItemNo > 1", "ItemNo > 1"),
    ("SELECT Label FROM Items", "SELECT"),
]


def _where(sql, marker):
    if marker.endswith("\x00"):          # the second occurrence
        m = marker[:-1]
        off = sql.index(m, sql.index(m) + 1)
    else:
        off = sql.rindex(marker) if marker in ("0",) else sql.index(marker)
    line = sql.count("\n", 0, off) + 1
    col = off - (sql.rfind("\n", 0, off) + 1) + 1
    return line, col


@pytest.fixture
def engine():
    eng = Engine()
    eng.execute(DDL)
    return eng


@pytest.mark.parametrize("sql,marker", SEMANTIC)
def test_semantic_errors(engine, sql, marker):
    line, column = _where(sql, marker)
    with pytest.raises(SketchQLSemanticError) as ei:
        engine.explain(sql)
    e = ei.value
    assert (e.line, e.column) == (line, column), str(e)


def test_semantic_messages(engine):
    with pytest.raises(SketchQLSemanticError, match="unknown column 'Foo'"):
        engine.explain("SELECT Foo FROM Store1")
    with pytest.raises(SketchQLSemanticError, match="table .* cannot have a window"):
        engine.explain("SELECT Label FROM Store1 S, Items [RANGE 10] WHERE S.ItemNo = Items.ItemNo")
    with pytest.raises(SketchQLSemanticError, match="not numeric"):
        engine.explain("SELECT ItemNo FROM Store1 WITH PREFERENCE desc Name")
    with pytest.raises(SketchQLSemanticError, match=r"FADE FACTOR must be in \(0, 1\]"):
        engine.explain("SELECT ItemNo FROM Store1 WITH PREFERENCE desc ItemNo FADE FACTOR 2")
    # a WINDOW clause of 0 is named as written and located at the clause (not as the FROM's RANGE)
    sql = "SELECT ItemNo FROM Store1 WITH PREFERENCE desc ItemNo WINDOW 0 SECONDS"
    with pytest.raises(SketchQLSemanticError, match="WINDOW must be positive, got 0") as ei:
        engine.explain(sql)
    assert ei.value.column >= sql.index("WINDOW") + 1          # (in the clause, not at FROM)
    with pytest.raises(SketchQLSemanticError, match="unknown column type"):
        engine.execute("CREATE STREAM z (a BLOB)")
    with pytest.raises(SketchQLSemanticError, match="already exists"):
        engine.execute("CREATE STREAM Store1 (a INT)")
    with pytest.raises(SketchQLSemanticError, match="COLLAPSE rate"):
        engine.execute("CREATE SUMMARY q ON Store1 (ItemNo) WITH GRANULARITY 1 s AND COLLAPSE(1, 4)")


# ------------------------------------------------------------------ fuzzing
_VALID = [q for q in PAPER_QUERIES] + [
    "SELECT S1.ItemNo, SUM(S1.Price) FROM Store1 S1 [RANGE 10], Store2 S2 [RANGE 5] "
    "WHERE S1.ItemNo = S2.ItemNo GROUP BY S1.ItemNo HAVING SUM(S1.Price) > 3",
    "SELECT DISTINCT Name FROM Store1 [ROWS 5] WHERE Price BETWEEN 1 AND 2 OR Name LIKE 'a%'",
]
_TOKENS = ["SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "[", "]", "(", ")", ",", ";", "*", "RANGE",
           "ROWS", "SLIDE", "PARTITION", "NOW", "UNBOUNDED", "WITH", "PREFERENCE", "desc", "FADE", "FACTOR",
           "WINDOW", "ERROR", "CONFIDENCE", "WITHIN", "MS", "PROBES", "PER", "TUPLE", "ON", "MISS", "EXACT",
           "Store1", "Store2", "Items", "ItemNo", "Price", "Name", "S1", ".", "=", "<", ">=", "AND", "OR",
           "NOT", "10", "0.5", "1e3", "-", "+", "/", "SECONDS", "'x'", "SUM", "COUNT", "SUMMARY", "Estimate",
           "Count", "DISTINCT", "ISTREAM", "CREATE", "STREAM", "TABLE", "DROP", "EXPLAIN", "AS", "BETWEEN",
           "LIKE", "IN", "IS", "NULL", "SAMPLE", "QUANTILE", "\n", "\"", "'", "--", "😀"]


def _check(engine, text):
    try:
        stmts = parse(text)
    except SketchQLSyntaxError:
        return
    for s in stmts:
        q = s.query if isinstance(s, A.Explain) else s
        if isinstance(q, A.Query):
            try:
                plan = engine._plan(q)
            except (SketchQLSemanticError, SketchQLSyntaxError):
                continue
            instantiate(plan.root, plan.bound, engine._tables)   # operators accept every planned query


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=80))
def test_fuzz_random_text(engine, text):
    _check(engine, text)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(_VALID), st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 3),
                                                     st.sampled_from(_TOKENS)), max_size=4))
def test_fuzz_mutated_queries(engine, base, edits):
    toks = base.split(" ")
    for pos, op, tok in edits:
        i = pos % (len(toks) + 1)
        if op == 0:
            toks.insert(i, tok)
        elif op == 1 and toks:
            toks.pop(i % len(toks))
        elif op == 2 and toks:
            toks[i % len(toks)] = tok
        else:
            toks = toks[:i]
    _check(engine, " ".join(toks))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(_TOKENS), max_size=25))
def test_fuzz_token_soup(engine, toks):
    _check(engine, " ".join(toks))
