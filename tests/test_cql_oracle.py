"""CQL through SQL against DuckDB on the same window contents.

Seeded random streams with ties in time, fed to the Engine in random step
batches with heartbeats; at evaluation instants τ the query's snapshot equals
DuckDB's answer over the tuples inside each window at τ (window predicates of
tests/test_exact_oracle.py).  Covers set operations, [NOT] IN / [NOT] EXISTS,
subqueries in FROM, landmark windows, NaN join keys and global aggregates
over empty windows, over every window kind.
"""
import duckdb
import numpy as np
import pytest

from sketchql.engine import Engine
from test_exact_oracle import WINDOWS, assert_same, eval_times, make_stream, step_times, window_sql

SQLW = {
    "range": "[RANGE 7]", "slide": "[RANGE 8 SLIDE 3]", "tumble": "[RANGE 5 SLIDE 5]", "rows": "[ROWS 6]",
    "part": "[PARTITION BY k ROWS 2]", "now": "[NOW]", "unbounded": "[UNBOUNDED]",
    "landmark": "[UNBOUNDED START AT 20]", "band": "[UNBOUNDED START AT 10 END AT 40]",
}


@pytest.fixture(scope="module")
def con():
    c = duckdb.connect()
    yield c
    c.close()


def streams(seed, n=60, nk=4, nan=False):
    a, b = make_stream(seed, n=n, nk=nk), make_stream(seed + 31, n=n, nk=nk)
    if nan:
        a.loc[a.seq % 5 == 0, "v"] = np.nan
        b.loc[b.seq % 7 == 0, "v"] = np.nan
    return a, b


def run(sqls, dfs, seed, names=("S", "R")):
    """Register ``sqls`` on a fresh engine, feed ``dfs`` (one per stream) step by step."""
    eng = Engine()
    for nm in names:
        eng.execute(f"CREATE STREAM {nm} (seq INT, k INT, v DOUBLE) TIMESTAMP ts")
    qs = [eng.register(q) for q in sqls]
    prev = -np.inf
    times = step_times(seed, list(dfs))
    for t in times:
        for nm, d in zip(names, dfs):
            sub = d[(d.ts > prev) & (d.ts <= t)]
            if len(sub):
                eng.push(nm, sub[["ts", "seq", "k", "v"]])
        for nm in names:
            eng.heartbeat(nm, float(t))
        prev = t
    return qs, times


def check(con, q, dfs, spec, sql_at, cols, seed, what, times):
    for name, d in zip(("a", "b"), dfs):
        con.register(name, d)
    for tau in eval_times(seed, list(dfs), spec):
        if tau < times[0]:
            continue
        theirs = con.execute(sql_at(tau)).df()
        assert_same(q.snapshot(tau), theirs, cols, tau, what)


SEEDS = [0, 1]
PAIRS = [("range", "rows"), ("slide", "part"), ("unbounded", "range"), ("now", "tumble"),
         ("landmark", "range"), ("band", "slide"), ("rows", "now"), ("part", "unbounded")]
# every window kind on each side at least once (seed 0), a second seed on three pairs
GRID = [(0, wl, wr) for wl, wr in PAIRS] + [(1, "range", "rows")]
SETOPS = ["UNION", "UNION ALL", "EXCEPT", "EXCEPT ALL", "INTERSECT", "INTERSECT ALL"]


@pytest.mark.parametrize("seed,wl,wr", GRID)
def test_set_operations(con, seed, wl, wr):
    a, b = streams(seed)
    sqls = [f"SELECT k FROM S {SQLW[wl]} {op} SELECT k FROM R {SQLW[wr]}" for op in SETOPS]
    sqls.append(f"SELECT k, v FROM S {SQLW[wl]} MINUS SELECT k, v FROM R {SQLW[wr]}")
    qs, times = run(sqls, (a, b), seed)
    sl, sr = WINDOWS[wl], WINDOWS[wr]
    for op, q in zip(SETOPS, qs):
        check(con, q, (a, b), sl, lambda t, op=op: f"SELECT k FROM {window_sql('a', sl, t)} {op} "
                                                    f"SELECT k FROM {window_sql('b', sr, t)}",
              ["k"], seed, f"{op} {wl}/{wr}", times)
    check(con, qs[-1], (a, b), sl, lambda t: f"SELECT k, v FROM {window_sql('a', sl, t)} EXCEPT "
                                             f"SELECT k, v FROM {window_sql('b', sr, t)}",
          ["k", "v"], seed, f"MINUS {wl}/{wr}", times)


@pytest.mark.parametrize("seed,wl,wr", GRID)
def test_subquery_predicates(con, seed, wl, wr):
    a, b = streams(seed, nan=True)
    sl, sr = WINDOWS[wl], WINDOWS[wr]
    cases = [
        (f"SELECT seq, k FROM S {SQLW[wl]} WHERE v NOT IN (SELECT v FROM R {SQLW[wr]})",
         lambda t: f"SELECT seq, k FROM {window_sql('a', sl, t)} WHERE v NOT IN (SELECT v FROM {window_sql('b', sr, t)})"),
        (f"SELECT seq, k FROM S {SQLW[wl]} WHERE k IN (SELECT k FROM R {SQLW[wr]} WHERE v > 4)",
         lambda t: f"SELECT seq, k FROM {window_sql('a', sl, t)} WHERE k IN (SELECT k FROM {window_sql('b', sr, t)} WHERE v > 4)"),
        (f"SELECT seq, k FROM S {SQLW[wl]} WHERE NOT EXISTS (SELECT * FROM R {SQLW[wr]} WHERE R.k = S.k AND R.v = S.v)",
         lambda t: f"SELECT seq, k FROM {window_sql('a', sl, t)} x WHERE NOT EXISTS (SELECT * FROM "
                   f"{window_sql('b', sr, t)} y WHERE y.k = x.k AND y.v = x.v)"),
        (f"SELECT seq, k FROM S {SQLW[wl]} WHERE EXISTS (SELECT * FROM R {SQLW[wr]} WHERE S.k = R.k) AND v > 2",
         lambda t: f"SELECT seq, k FROM {window_sql('a', sl, t)} x WHERE EXISTS (SELECT * FROM "
                   f"{window_sql('b', sr, t)} y WHERE y.k = x.k) AND v > 2"),
        (f"SELECT DISTINCT k FROM S {SQLW[wl]} WHERE v NOT IN (SELECT v FROM R {SQLW[wr]})",
         lambda t: f"SELECT DISTINCT k FROM {window_sql('a', sl, t)} WHERE v NOT IN (SELECT v FROM "
                   f"{window_sql('b', sr, t)})"),
        (f"SELECT seq FROM S {SQLW[wl]} WHERE NOT EXISTS (SELECT * FROM R {SQLW[wr]} WHERE v > 8)",
         lambda t: f"SELECT seq FROM {window_sql('a', sl, t)} WHERE NOT EXISTS (SELECT * FROM "
                   f"{window_sql('b', sr, t)} WHERE v > 8)"),
    ]
    qs, times = run([c[0] for c in cases], (a, b), seed)
    for (sql, at), q in zip(cases, qs):
        cols = ["seq"] if "SELECT seq FROM" in sql else ["k"] if "DISTINCT" in sql else ["seq", "k"]
        check(con, q, (a, b), sl, at, cols, seed, sql, times)


@pytest.mark.parametrize("seed,wl,wr", [(0, "range", "rows"), (0, "landmark", "range"), (1, "slide", "part"),
                                        (1, "unbounded", "now")])
def test_subqueries_in_from(con, seed, wl, wr):
    a, b = streams(seed)
    sl, sr = WINDOWS[wl], WINDOWS[wr]
    cases = [
        (f"SELECT g, n FROM (SELECT k AS g, COUNT(*) AS n FROM S {SQLW[wl]} GROUP BY k) AS d WHERE n > 1",
         lambda t: f"SELECT g, n FROM (SELECT k AS g, count(*) AS n FROM {window_sql('a', sl, t)} GROUP BY k) d "
                   f"WHERE n > 1", ["g", "n"]),
        (f"SELECT d.k, R.seq FROM (SELECT DISTINCT k FROM S {SQLW[wl]}) AS d, R {SQLW[wr]} WHERE d.k = R.k",
         lambda t: f'SELECT d.k AS "k", r.seq AS "seq" FROM (SELECT DISTINCT k FROM {window_sql("a", sl, t)}) d '
                   f"JOIN {window_sql('b', sr, t)} r ON d.k = r.k", ["k", "seq"]),
        (f"SELECT SUM(x) AS s FROM (SELECT v AS x FROM S {SQLW[wl]} UNION ALL SELECT v FROM R {SQLW[wr]}) AS u",
         lambda t: f"SELECT sum(x) AS s FROM (SELECT v AS x FROM {window_sql('a', sl, t)} UNION ALL "
                   f"SELECT v FROM {window_sql('b', sr, t)}) u", ["s"]),
    ]
    qs, times = run([c[0] for c in cases], (a, b), seed)
    for (sql, at, cols), q in zip(cases, qs):
        check(con, q, (a, b), sl, at, cols, seed, sql, times)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("wl,wr", [("range", "range"), ("rows", "landmark"), ("slide", "part")])
def test_nan_join_keys_never_match(con, seed, wl, wr):
    a, b = streams(seed, nan=True)
    sl, sr = WINDOWS[wl], WINDOWS[wr]
    sql = f"SELECT S.seq, R.seq FROM S {SQLW[wl]}, R {SQLW[wr]} WHERE S.v = R.v"
    (q,), times = run([sql], (a, b), seed)
    check(con, q, (a, b), sl, lambda t: f'SELECT x.seq AS "S.seq", y.seq AS "R.seq" FROM {window_sql("a", sl, t)} x '
                                        f"JOIN {window_sql('b', sr, t)} y ON x.v = y.v",
          ["S.seq", "R.seq"], seed, "NaN join", times)
    assert a.v.isna().any() and b.v.isna().any()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("wname", ["range", "tumble", "rows", "now", "band"])
def test_global_aggregate_over_empty_window(con, seed, wname):
    a, _ = streams(seed)
    spec = WINDOWS[wname]
    sql = (f"SELECT COUNT(*) AS c, SUM(v) AS s, AVG(v) AS m, MAX(v) AS mx FROM S {SQLW[wname]} "
           f"WHERE v > 6")
    (q,), times = run([sql], (a,), seed, names=("S",))
    check(con, q, (a,), spec, lambda t: f"SELECT count(*) c, sum(v) s, avg(v) m, max(v) mx FROM "
                                        f"{window_sql('a', spec, t)} WHERE v > 6",
          ["c", "s", "m", "mx"], seed, f"empty-window aggregate {wname}", times)
    snaps = [q.snapshot(t) for t in times]
    assert all(len(s) == 1 for s in snaps)                # the row exists at every instant
    if wname in ("now", "tumble"):       # these windows are often empty at the step instants
        assert any(s.c.iloc[0] == 0 and np.isnan(s.s.iloc[0]) for s in snaps)   # COUNT 0, SUM NULL


def test_select_literal_alias():
    eng = Engine()
    eng.execute("CREATE STREAM S (v DOUBLE) TIMESTAMP ts")
    q = eng.register("SELECT 1 s, 2 AS ms, v h FROM S [RANGE 3]")
    eng.push("S", {"ts": [1.0], "v": [4.0]})
    assert list(q.snapshot(1.0).columns) == ["s", "ms", "h"]
    assert q.snapshot(1.0).iloc[0].tolist() == [1, 2, 4.0]
