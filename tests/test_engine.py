"""Engine end to end through SQL: reference cases W3, W6 (and W1, W4, W5, W7-like
checks), snapshot equivalence with DuckDB over the tuples inside the window at
many evaluation times, batch validation, views, knobs and the CLI."""
import numpy as np
import pandas as pd
import pytest

duckdb = pytest.importorskip("duckdb")

from sketchql.cli import main  # noqa: E402
from sketchql.engine import BatchError, Engine  # noqa: E402
from sketchql.errors import LateTupleError, SketchQLSemanticError, SketchQLSyntaxError  # noqa: E402


# ------------------------------------------------------------------ reference cases
def test_w3_sum_with_delayed_answers_through_sql():
    eng = Engine()
    eng.execute("CREATE STREAM Sales (price DOUBLE) TIMESTAMP ts")
    # SQL: the SUM of an empty window is NULL; W3's 25:0 is COALESCE(SUM(price), 0)
    q = eng.register("SELECT COALESCE(SUM(price), 0) AS \"SUM(price)\" FROM Sales [RANGE 10] WHERE price > 4")
    price = np.full(25, 2.0)
    for t, p in [(1, 6), (2, 9), (6, 5), (8, 8), (15, 7)]:
        price[t - 1] = p
    for t in range(1, 26):                      # one tuple per tick, as in the case
        eng.push("Sales", {"ts": [float(t)], "price": [price[t - 1]]})
    ch = q.changes()
    plus = [(float(a), float(v)) for a, v, s in zip(ch.at, ch.columns["SUM(price)"], ch.sign) if s > 0]
    assert plus == [(1, 6), (2, 15), (6, 20), (8, 28), (11, 22), (12, 13), (15, 20), (16, 15), (18, 7), (25, 0)]


def test_w3_answers_reported_by_heartbeat_without_new_tuples():
    eng = Engine()
    eng.execute("CREATE STREAM Sales (price DOUBLE) TIMESTAMP ts")
    q = eng.register("SELECT COALESCE(SUM(price), 0) AS s FROM Sales [RANGE 10] WHERE price > 4")
    eng.push("Sales", {"ts": [1.0, 2.0], "price": [6.0, 9.0]})
    eng.heartbeat("Sales", 11.5)
    assert q.snapshot(11.0)["s"].tolist() == [9.0]
    assert q.clock == 11.5
    eng.heartbeat("Sales", 12.0)
    assert q.snapshot()["s"].tolist() == [0.0]


def test_w6_group_disappears():
    eng = Engine()
    eng.execute("CREATE STREAM S (g STRING, v DOUBLE) TIMESTAMP ts")
    q = eng.register("SELECT g, SUM(v) AS s FROM S [RANGE 10] GROUP BY g")
    eng.push("S", {"ts": [1.0, 2.0], "g": ["a", "a"], "v": [5.0, 3.0]})
    eng.heartbeat("S", 20)
    assert q.snapshot(2.0).to_dict("records") == [{"g": "a", "s": 8.0}]
    assert q.snapshot(11.0).to_dict("records") == [{"g": "a", "s": 3.0}]
    assert len(q.snapshot(12.0)) == 0          # the group is gone, not reported as 0


def test_w1_three_way_join_checks_every_member():
    eng = Engine()
    eng.execute("CREATE STREAM S1 (attr INT) TIMESTAMP ts; CREATE STREAM S2 (attr INT) TIMESTAMP ts;"
                "CREATE STREAM S3 (attr INT) TIMESTAMP ts")
    q = eng.register("SELECT S1.ts AS t1, S2.ts AS t2, S3.ts AS t3 FROM S1 [RANGE 100], S2 [RANGE 100], "
                     "S3 [RANGE 100] WHERE S1.attr = S2.attr AND S2.attr = S3.attr")
    eng.push("S1", {"ts": [90.0, 100.0], "attr": [1, 1]})
    eng.push("S2", {"ts": [150.0, 180.0], "attr": [1, 1]})
    eng.push("S3", {"ts": [195.0, 205.0], "attr": [1, 1]})
    for s in ("S1", "S2", "S3"):
        eng.heartbeat(s, 210)
    ins = q.results()
    got = sorted(map(tuple, ins[["t1", "t2", "t3"]].to_numpy().tolist()))
    assert got == [(100, 150, 195), (100, 180, 195)]


def test_w4_distinct_replacement_through_sql():
    eng = Engine()
    eng.execute("CREATE STREAM S (v STRING) TIMESTAMP ts")
    q = eng.register("SELECT RSTREAM DISTINCT v FROM S [RANGE 10]")
    eng.push("S", {"ts": [1.0, 2.0, 3.0, 4.0], "v": ["x", "x", "y", "y"]})
    eng.heartbeat("S", 20)
    for t, want in [(1, ["x"]), (3, ["x", "y"]), (11, ["x", "y"]), (12, ["y"]), (13, ["y"]), (14, [])]:
        assert sorted(q.snapshot(t)["v"].tolist()) == want, t
    ch = q.changes()
    # at 11 the representative x@1 leaves and x@2 replaces it
    at11 = [(int(s), float(ts)) for s, ts, a in zip(ch.sign, ch.ts, ch.at) if a == 11]
    assert at11 == [(-1, 1.0), (1, 2.0)]


def test_w5_join_results_do_not_expire_in_arrival_order():
    eng = Engine()
    eng.execute("CREATE STREAM W1 (k STRING) TIMESTAMP ts; CREATE STREAM W2 (k STRING) TIMESTAMP ts")
    q = eng.register("SELECT DSTREAM W1.ts AS a, W2.ts AS b FROM W1 [RANGE 10], W2 [RANGE 10] WHERE W1.k = W2.k")
    eng.push("W1", {"ts": [1.0, 5.0], "k": ["k1", "k2"]})
    eng.push("W2", {"ts": [6.0, 7.0], "k": ["k2", "k1"]})
    eng.heartbeat("W1", 30)
    eng.heartbeat("W2", 30)
    d = q.results()
    assert list(zip(d["a"], d["b"], d["__at"])) == [(1.0, 7.0, 11.0), (5.0, 6.0, 15.0)]


# ------------------------------------------------------------------ DuckDB oracle
def _rand_stream(rng, n, t_end, keys=5, with_g=True):
    ts = np.sort(np.round(rng.uniform(0, t_end, n) * 2) / 2)     # ties and exact window edges
    d = {"ts": ts, "k": rng.integers(0, keys, n), "x": np.round(rng.uniform(0, 1, n), 3)}
    if with_g:
        d["g"] = rng.choice(np.array(["p", "q", "r"], dtype=object), n)
    return d


def _push_interleaved(eng, rng, streams: dict, t_end):
    """Push each stream in random-size batches, interleaved in time order."""
    cuts = np.sort(rng.uniform(0, t_end, 12))
    lo = -np.inf
    for hi in list(cuts) + [np.inf]:
        for name, d in streams.items():
            m = (d["ts"] > lo) & (d["ts"] <= hi)
            if m.any():
                eng.push(name, {c: v[m] for c, v in d.items()})
        lo = hi
    for name in streams:
        eng.heartbeat(name, t_end + 60)


def _norm(df, cols):
    df = df[cols].copy()
    for c in cols:
        if df[c].dtype.kind in "fc":
            df[c] = df[c].astype(float).round(6)
        elif df[c].dtype.kind in "iub":
            df[c] = df[c].astype(float)
    return sorted(map(tuple, df.to_numpy().tolist()), key=lambda r: tuple(map(str, r)))


def _eval_times(rng, data, w, t_end):
    ts = np.concatenate([d["ts"] for d in data])
    edges = np.concatenate([ts, ts + w, ts + w - 0.25])
    return np.unique(np.concatenate([rng.choice(edges, 25), rng.uniform(0, t_end + w, 10)]))


ORACLE_CASES = [
    # (sql, duckdb template with {A}/{B}/{C} = windowed sources, output columns, window w, streams)
    ("SELECT k, x FROM A [RANGE 10] WHERE x > 0.3 AND k <> 2",
     "SELECT k, x FROM {A} WHERE x > 0.3 AND k <> 2", ["k", "x"], 10, "A"),
    ("SELECT k, x * 2 + 1 AS y, g FROM A [RANGE 7.5] WHERE g IN ('p', 'q') OR x BETWEEN 0.1 AND 0.2",
     "SELECT k, x * 2 + 1 AS y, g FROM {A} WHERE g IN ('p', 'q') OR x BETWEEN 0.1 AND 0.2",
     ["k", "y", "g"], 7.5, "A"),
    ("SELECT A.k, A.x, B.x AS bx FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k AND A.x > 0.2",
     "SELECT A.k, A.x, B.x AS bx FROM {A} A, {B} B WHERE A.k = B.k AND A.x > 0.2", ["k", "x", "bx"], 10, "AB"),
    ("SELECT A.k, A.ts AS ta, B.ts AS tb FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k AND A.x < B.x",
     "SELECT A.k, A.ts AS ta, B.ts AS tb FROM {A} A, {B} B WHERE A.k = B.k AND A.x < B.x",
     ["k", "ta", "tb"], 10, "AB"),
    ("SELECT A.k, B.x AS bx, C.x AS cx FROM A [RANGE 10], B [RANGE 10], C [RANGE 10] "
     "WHERE A.k = B.k AND B.k = C.k",
     "SELECT A.k, B.x AS bx, C.x AS cx FROM {A} A, {B} B, {C} C WHERE A.k = B.k AND B.k = C.k",
     ["k", "bx", "cx"], 10, "ABC"),
    ("SELECT k, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, MIN(x) AS mn, MAX(x) AS mx FROM A [RANGE 10] GROUP BY k",
     "SELECT k, COUNT(*) AS n, SUM(x) AS s, AVG(x) AS a, MIN(x) AS mn, MAX(x) AS mx FROM {A} GROUP BY k",
     ["k", "n", "s", "a", "mn", "mx"], 10, "A"),
    ("SELECT g, COUNT(DISTINCT k) AS d, MEDIAN(x) AS m FROM A [RANGE 10] WHERE x > 0.1 GROUP BY g "
     "HAVING COUNT(*) > 1",
     "SELECT g, COUNT(DISTINCT k) AS d, MEDIAN(x) AS m FROM {A} WHERE x > 0.1 GROUP BY g HAVING COUNT(*) > 1",
     ["g", "d", "m"], 10, "A"),
    ("SELECT A.g, SUM(B.x) AS s FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k GROUP BY A.g",
     "SELECT A.g, SUM(B.x) AS s FROM {A} A, {B} B WHERE A.k = B.k GROUP BY A.g", ["g", "s"], 10, "AB"),
    ("SELECT DISTINCT k, g FROM A [RANGE 10]", "SELECT DISTINCT k, g FROM {A}", ["k", "g"], 10, "A"),
    ("SELECT DISTINCT A.k FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k",
     "SELECT DISTINCT A.k FROM {A} A, {B} B WHERE A.k = B.k", ["k"], 10, "AB"),
]


@pytest.mark.parametrize("case", range(len(ORACLE_CASES)))
@pytest.mark.parametrize("seed", [1, 2])
def test_snapshot_equivalence_with_duckdb(case, seed):
    sql, dsql, cols, w, names = ORACLE_CASES[case]
    rng = np.random.default_rng(seed * 100 + case)
    t_end = 60.0
    eng = Engine()
    data = {}
    for nm in names:
        eng.execute(f"CREATE STREAM {nm} (k INT, x DOUBLE, g STRING) TIMESTAMP ts")
        data[nm] = _rand_stream(rng, 120 if len(names) < 3 else 60, t_end)
    q = eng.register(sql)
    _push_interleaved(eng, rng, data, t_end)
    con = duckdb.connect()
    for nm, d in data.items():
        con.register(f"{nm}_all", pd.DataFrame(d))
    for tau in map(float, _eval_times(rng, list(data.values()), w, t_end)):
        win = {nm: f"(SELECT * FROM {nm}_all WHERE ts > {tau!r} - {w!r} AND ts <= {tau!r})" for nm in names}
        expect = con.execute(dsql.format(**win)).df()
        got = q.snapshot(float(tau))
        assert _norm(got, cols) == _norm(expect, cols), f"tau={tau}"


@pytest.mark.parametrize("seed", [3, 4])
def test_rows_and_partition_windows_against_duckdb(seed):
    rng = np.random.default_rng(seed)
    eng = Engine()
    eng.execute("CREATE STREAM A (k INT, x DOUBLE, g STRING) TIMESTAMP ts")
    d = _rand_stream(rng, 150, 50.0)
    q1 = eng.register("SELECT k, x FROM A [ROWS 7] WHERE x > 0.4")
    q2 = eng.register("SELECT g, COUNT(*) AS n, SUM(x) AS s FROM A [PARTITION BY g ROWS 3] GROUP BY g")
    q3 = eng.register("SELECT COUNT(*) AS n, SUM(x) AS s FROM A [RANGE 10 SLIDE 5]")
    _push_interleaved(eng, rng, {"A": d}, 50.0)
    df = pd.DataFrame(d)
    df["seq"] = np.arange(len(df))
    con = duckdb.connect()
    con.register("A_all", df)
    taus = np.unique(np.concatenate([rng.choice(d["ts"], 30), rng.uniform(0, 60, 10)]))
    for tau in map(float, taus):
        upto = f"(SELECT * FROM A_all WHERE ts <= {tau!r})"
        e1 = con.execute(f"SELECT k, x FROM (SELECT * FROM {upto} ORDER BY seq DESC LIMIT 7) WHERE x > 0.4").df()
        assert _norm(q1.snapshot(tau), ["k", "x"]) == _norm(e1, ["k", "x"]), tau
        e2 = con.execute(f"SELECT g, COUNT(*) AS n, SUM(x) AS s FROM (SELECT *, row_number() OVER "
                         f"(PARTITION BY g ORDER BY seq DESC) AS r FROM {upto}) WHERE r <= 3 GROUP BY g").df()
        assert _norm(q2.snapshot(tau), ["g", "n", "s"]) == _norm(e2, ["g", "n", "s"]), tau
        t5 = float(np.floor(tau / 5) * 5)
        if t5 >= d["ts"][0]:       # a global aggregate has its row once input has entered the window
            e3 = con.execute(f"SELECT COUNT(*) AS n, COALESCE(SUM(x), 0) AS s FROM A_all "
                             f"WHERE ts > {t5!r} - 10 AND ts <= {t5!r}").df()
            assert _norm(q3.snapshot(tau), ["n", "s"]) == _norm(e3, ["n", "s"]), tau


def test_static_table_join_against_duckdb():
    rng = np.random.default_rng(9)
    eng = Engine()
    eng.execute("CREATE STREAM A (k INT, x DOUBLE, g STRING) TIMESTAMP ts; CREATE TABLE T (k INT, name STRING)")
    tab = {"k": np.array([0, 1, 2, 2]), "name": np.array(["zero", "one", "two", "deux"], dtype=object)}
    eng.push("T", tab)
    q = eng.register("SELECT A.k, A.x, T.name FROM A [RANGE 10], T WHERE A.k = T.k AND T.name <> 'one'")
    d = _rand_stream(rng, 100, 40.0)
    _push_interleaved(eng, rng, {"A": d}, 40.0)
    con = duckdb.connect()
    con.register("A_all", pd.DataFrame(d))
    con.register("T", pd.DataFrame(tab))
    for tau in map(float, np.unique(rng.choice(np.concatenate([d["ts"], d["ts"] + 10]), 30))):
        e = con.execute(f"SELECT A.k, A.x, T.name FROM A_all A, T WHERE A.k = T.k AND T.name <> 'one' "
                        f"AND A.ts > {tau!r} - 10 AND A.ts <= {tau!r}").df()
        assert _norm(q.snapshot(tau), ["k", "x", "name"]) == _norm(e, ["k", "x", "name"])


def test_table_rows_added_later_are_non_retroactive():
    eng = Engine()
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE TABLE T (k INT, name STRING)")
    q = eng.register("SELECT A.ts AS t, T.name FROM A [RANGE 100], T WHERE A.k = T.k")
    eng.push("A", {"ts": [1.0], "k": [1]})
    eng.push("T", {"k": [1], "name": ["one"]})
    eng.push("A", {"ts": [2.0], "k": [1]})
    assert q.snapshot(2.0).to_dict("records") == [{"t": 2.0, "name": "one"}]


# ------------------------------------------------------------------ time and views
def test_join_waits_for_the_slower_stream():
    eng = Engine()
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    q = eng.register("SELECT A.ts AS ta, B.ts AS tb FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k")
    eng.push("A", {"ts": [1.0, 5.0], "k": [1, 1]})
    assert q.clock == -np.inf and q.stats()["pending_tuples"] == 2
    eng.push("B", {"ts": [3.0], "k": [1]})
    assert q.clock == 3.0
    assert sorted(q.snapshot()["ta"].tolist()) == [1.0]
    eng.heartbeat("B", 6.0)
    assert q.clock == 5.0 and sorted(q.snapshot()["ta"].tolist()) == [1.0, 5.0]


def test_views_and_polling():
    eng = Engine()
    eng.execute("CREATE STREAM S (v INT) TIMESTAMP ts")
    qi = eng.register("SELECT ISTREAM v FROM S [RANGE 5]")
    qd = eng.register("SELECT DSTREAM v FROM S [RANGE 5]")
    qr = eng.register("SELECT RSTREAM v FROM S [RANGE 5]")
    qdef = eng.register("SELECT v FROM S [RANGE 5]")
    assert qdef.view == "istream" and qr.view == "rstream"
    eng.push("S", {"ts": [1.0, 2.0], "v": [10, 20]})
    first = list(qi)
    assert sum(len(b) for b in first) == 2 and list(qi) == []
    eng.heartbeat("S", 6.5)
    assert qi.results()["__sign"].tolist() == [1, 1]
    assert qd.results()[["v", "__at"]].values.tolist() == [[10, 6.0]]
    # RSTREAM: the whole relation at each instant the query advanced to (2.0, then 6.5)
    assert qr.results()[["v", "__at"]].values.tolist() == [[10, 2.0], [20, 2.0], [20, 6.5]]
    assert qr.results(view="changes")["__sign"].tolist() == [1, 1, -1]
    assert [len(b) for b in qd] == [1]


def test_registering_late_starts_at_the_stream_clock():
    eng = Engine()
    eng.execute("CREATE STREAM S (v INT) TIMESTAMP ts")
    eng.push("S", {"ts": [1.0, 2.0], "v": [1, 2]})
    q = eng.register("SELECT COUNT(*) AS n FROM S [RANGE 5]")
    assert q.clock == 2.0
    eng.push("S", {"ts": [3.0], "v": [3]})
    assert q.snapshot()["n"].tolist() == [1]


# ------------------------------------------------------------------ validation
@pytest.fixture
def eng():
    e = Engine()
    e.execute("CREATE STREAM S (k INT, x DOUBLE, name STRING) TIMESTAMP ts")
    return e


def _push_ok(e):
    q = e.register("SELECT k, x, name FROM S [RANGE 100]")
    e.push("S", pd.DataFrame({"ts": [1.0, 2.0], "k": [1, 2], "x": [0.5, 1.5], "name": ["a", "b"]}))
    return q


@pytest.mark.parametrize("batch,match", [
    ({"ts": [3.0], "k": [1], "x": [1.0], "name": ["a"], "zzz": [1]}, r"stream S: unknown column\(s\) \['zzz'\]"),
    ({"ts": [3.0], "k": [1], "x": [1.0]}, r"stream S: batch lacks column\(s\) \['name'\]"),
    ({"ts": [3.0, 4.0], "k": [1, 2], "x": [1.0, "oops"], "name": ["a", "b"]},
     r"stream S: column 'x' is DOUBLE but row 1 holds 'oops'"),
    ({"ts": [3.0, 4.0], "k": [1, 2.5], "x": [1.0, 2.0], "name": ["a", "b"]},
     r"stream S: column 'k' is INT but row 1 holds 2.5"),
    ({"ts": [3.0, 4.0], "k": [1, 2], "x": [1.0, 2.0], "name": ["a", 7]},
     r"stream S: column 'name' is STRING but row 1 holds 7"),
    ({"ts": [3.0, np.nan], "k": [1, 2], "x": [1.0, 2.0], "name": ["a", "b"]}, r"NULL/NaN at row 1"),
    ({"ts": [3.0, 4.0], "k": [1, 2, 3], "x": [1.0, 2.0], "name": ["a", "b"]}, r"column 'x' has 2 rows, expected 3"),
    ([1, 2, 3], r"cannot read a batch from list"),
])
def test_bad_batches_are_rejected_and_nothing_is_lost(eng, batch, match):
    q = _push_ok(eng)
    before = q.snapshot().copy()
    with pytest.raises(BatchError, match=match):
        eng.push("S", batch)
    eng.push("S", {"ts": [5.0], "k": [3], "x": [2.5], "name": ["c"]})
    after = q.snapshot()
    assert len(after) == len(before) + 1
    assert eng.stream("S").stats()["rejected_batches"] == 1


def test_late_tuples_and_unknown_stream(eng):
    q = _push_ok(eng)
    with pytest.raises(LateTupleError, match=r"stream S: row 1 has timestamp 0.5"):
        eng.push("S", {"ts": [2.0, 0.5], "k": [1, 1], "x": [1.0, 1.0], "name": ["a", "a"]})
    assert len(q.snapshot()) == 2
    eng.stream("S").set_knob("allowed_lateness", 5)
    with pytest.raises(SketchQLSemanticError, match="unknown stream or table 'Nope'"):
        eng.push("Nope", {"ts": [1.0]})


def test_pyarrow_and_unsorted_batches(eng):
    import pyarrow as pa
    q = eng.register("SELECT k FROM S [RANGE 100]")
    eng.push("S", pa.table({"ts": [2.0, 1.0], "k": [2, 1], "x": [0.0, 0.0], "name": ["a", "b"]}))
    assert q.results()["k"].tolist() == [1, 2]


def test_stats_and_knobs(eng):
    q = _push_ok(eng)
    st = eng.stats()
    assert st["streams"]["S"]["tuples_in"] == 2
    qs = q.stats()
    assert qs["engine"] == "exact" and qs["operators"][-1]["operator"] == "WindowScan"
    assert all("update_pattern" in o for o in qs["operators"])
    q.set_knob("budget", 10)
    assert q.knobs()["budget"] == 10.0
    with pytest.raises(Exception, match="no knob"):
        q.set_knob("nope", 1)
    s = eng.stream("S")
    s.set_knob("sample_rate", 0.5)
    with pytest.raises(Exception, match="sample_rate"):
        s.set_knob("sample_rate", 0)
    scan = q.operators()[-1]
    assert scan.knobs()["sample"] == 1.0


def test_sample_clause_is_seeded_and_plausible():
    def run(seed):
        e = Engine(seed=seed)
        e.execute("CREATE STREAM S (v INT) TIMESTAMP ts")
        q = e.register("SELECT v FROM S SAMPLE(20)")
        e.push("S", {"ts": np.arange(5000, dtype=float), "v": np.arange(5000)})
        return q.results()["v"].to_numpy()
    a, b = run(1), run(1)
    assert np.array_equal(a, b) and 800 < len(a) < 1200


def test_create_summary_builds_the_index():
    eng = Engine()
    eng.execute("CREATE STREAM Store1 (ItemNo INT, Price DOUBLE) TIMESTAMP ts;"
                "CREATE SUMMARY s1 ON Store1 (ItemNo) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)")
    decl = eng.catalog.summary("s1")
    eng.push("Store1", {"ts": [0.5, 1.0, 2.0, 3.0], "ItemNo": [1, 2, 1, 1], "Price": [1.0] * 4})
    if decl.index is None:
        pytest.skip("sketchql.index.StreamIndex not available")
    idx = decl.index["ItemNo"]
    assert idx.estimate(np.array([1, 2, 3]), 0.0, 3.0).tolist() == [3.0, 1.0, 0.0]
    with pytest.raises(SketchQLSemanticError, match="summaries"):
        eng.execute("DROP STREAM Store1")
    eng.execute("DROP SUMMARY s1")
    eng.execute("DROP STREAM Store1")
    assert eng.catalog.get("Store1") is None


def test_drop_statements():
    eng = Engine()
    eng.execute("CREATE STREAM S (v INT) TIMESTAMP ts; CREATE TABLE T (v INT)")
    q = eng.register("SELECT v FROM S")
    with pytest.raises(SketchQLSemanticError, match="read it"):
        eng.execute("DROP STREAM S")
    eng.execute(f"DROP QUERY q{q.id}; DROP STREAM S; DROP TABLE T; DROP TABLE IF EXISTS T")
    with pytest.raises(SketchQLSemanticError):
        eng.execute("DROP STREAM S")
    with pytest.raises(SketchQLSyntaxError):
        eng.execute("DROP S")


# ------------------------------------------------------------------ CLI
def test_cli_query_and_explain(tmp_path, capsys):
    (tmp_path / "q.sql").write_text("CREATE STREAM Sales (price DOUBLE) TIMESTAMP ts;\n"
                                    "SELECT COALESCE(SUM(price), 0) AS s FROM Sales [RANGE 10] WHERE price > 4;\n")
    (tmp_path / "s.csv").write_text("ts,price\n1,6\n2,9\n3,2\n6,5\n8,8\n15,7\n")
    assert main(["query", "--sql-file", str(tmp_path / "q.sql"), "--input", f"Sales={tmp_path / 's.csv'}",
                 "--heartbeat", "Sales=30", "--snapshot"]) == 0
    out = capsys.readouterr().out
    assert out.strip().splitlines()[-1] == "0.0"
    assert main(["explain", "CREATE STREAM s (a INT); SELECT a FROM s [RANGE 5] WHERE a > 1"]) == 0
    out = capsys.readouterr().out
    assert "WindowScan" in out and "[weakest]" in out
    assert main(["explain", "SELECT a FROM nope"]) == 2
    eng = Engine()
    eng.execute("CREATE STREAM s (a INT)")
    assert eng.execute("EXPLAIN SELECT a FROM s [NOW]").startswith("Plan for: SELECT a FROM s [NOW]")
    assert "unknown stream or table" in capsys.readouterr().err


def test_query_registered_mid_stream_sees_only_later_tuples_as_documented():
    """README ("A query sees the tuples pushed after it is registered"): a COUNT registered after
    100 tuples counts only the 4 pushed since (brute force over those), with or without an
    identical query registered earlier (which counts all of its window)."""
    import numpy as np
    from sketchql.engine import Engine

    ts = np.arange(0, 50, 0.25)
    k = np.arange(len(ts)) % 7
    e = Engine(seed=1)
    e.execute("CREATE STREAM A (k INT) TIMESTAMP ts")
    q1 = e.register("SELECT COUNT(*) AS n FROM A [RANGE 10] WHERE k > 2")
    e.push("A", {"ts": ts[:100], "k": k[:100]})
    q2 = e.register("SELECT COUNT(*) AS n FROM A [RANGE 10] WHERE k > 2")
    e.push("A", {"ts": ts[100:104], "k": k[100:104]})
    now = ts[103]
    assert q1.snapshot()["n"].tolist() == [int(((ts[:104] > now - 10) & (k[:104] > 2)).sum())]
    assert q2.snapshot()["n"].tolist() == [int((k[100:104] > 2).sum())]
