"""Snapshot equivalence of the exact operators against DuckDB.

For seeded random streams (ties in ts, random step boundaries, heartbeats),
every operator and every window type: the relation obtained by replaying the
operator's change stream up to τ equals what DuckDB computes over the tuples
inside the window at τ (window predicate ts > τ − w AND ts <= τ; ROW_NUMBER
for ROWS n and PARTITION BY ... ROWS n).  Compared as multisets.
"""
import math

import duckdb
import numpy as np
import pandas as pd
import pytest

from sketchql.operators.exact import (AggSpec, Aggregate, Batch, Changes, Chain, Distinct, MJoin,
                                      MinusAll, Project, Select, SemiJoin, StaticJoin, SymmetricHashJoin,
                                      WindowScan, WindowSpec, snapshot)

WINDOWS = {
    "range": WindowSpec.range(7),
    "slide": WindowSpec.range(8, slide=3),
    "tumble": WindowSpec.range(5, slide=5),
    "rows": WindowSpec.rows(6),
    "part": WindowSpec.partitioned(["k"], 2),
    "now": WindowSpec.now(),
    "unbounded": WindowSpec.unbounded(),
    "landmark": WindowSpec.landmark(20.0),
    "band": WindowSpec.landmark(10.0, 40.0),
}


def make_stream(seed, n=120, nk=4):
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.choice([0.0, 0.5, 1.0, 1.0, 2.0], size=n)) + 1
    return pd.DataFrame({"seq": np.arange(n), "ts": ts, "k": rng.integers(0, nk, n),
                         "v": rng.integers(0, 10, n).astype(float)})


def window_sql(table, spec, tau):
    tau = float(tau)
    if spec.kind == "range":
        t = tau if spec.slide is None else math.floor(tau / spec.slide) * spec.slide
        return f"(SELECT * FROM {table} WHERE ts > {t!r} - {spec.w!r} AND ts <= {t!r})"
    if spec.kind == "now":
        return f"(SELECT * FROM {table} WHERE ts = {tau!r})"
    if spec.kind == "unbounded":
        band = (f" AND ts >= {spec.start!r}" if spec.start is not None else "") + \
               (f" AND ts <= {spec.end!r}" if spec.end is not None else "")
        return f"(SELECT * FROM {table} WHERE ts <= {tau!r}{band})"
    part = f"PARTITION BY {', '.join(spec.partition_by)} " if spec.kind == "partition" else ""
    return (f"(SELECT * EXCLUDE (rn) FROM (SELECT *, ROW_NUMBER() OVER ({part}ORDER BY ts DESC, seq DESC) rn "
            f"FROM {table} WHERE ts <= {tau!r}) WHERE rn <= {spec.n})")


def step_times(seed, dfs):
    rng = np.random.default_rng(seed + 1000)
    allts = np.unique(np.concatenate([d.ts.to_numpy() for d in dfs]))
    cut = np.sort(rng.choice(allts, size=max(2, len(allts) // 4), replace=False))
    extra = rng.uniform(allts.min(), allts.max() + 20, size=10)      # heartbeats
    return np.unique(np.concatenate([cut, extra, [allts.max() + 30]]))


def drive(ops_step, dfs, times):
    """Feed each stream's tuples with ts in (prev, t] at step t; collect changes."""
    outs, prev = [], -np.inf
    for t in times:
        parts = []
        for d in dfs:
            m = (d.ts > prev) & (d.ts <= t)
            sub = d[m]
            parts.append(Batch({c: sub[c].to_numpy() for c in d.columns}, ts=sub.ts.to_numpy())
                         if len(sub) else None)
        outs.append(ops_step(float(t), parts))
        prev = t
    return Changes.concat(outs)


def eval_times(seed, dfs, spec):
    rng = np.random.default_rng(seed + 7)
    ts = np.unique(np.concatenate([d.ts.to_numpy() for d in dfs]))
    cand = [ts]
    if spec.kind == "range":
        cand.append(ts + spec.w)
    cand.append(rng.uniform(ts.min(), ts.max() + 10, 8))
    allc = np.unique(np.concatenate(cand))
    return rng.choice(allc, size=min(12, len(allc)), replace=False)


def assert_same(ours: pd.DataFrame, theirs: pd.DataFrame, cols, tau, what):
    a = ours[cols].copy() if len(ours) else pd.DataFrame({c: [] for c in cols})
    b = theirs[cols].copy()
    for df in (a, b):
        for c in cols:
            pass
            if df[c].dtype.kind in "fiub":
                df[c] = df[c].astype(float).round(9)
    a = a.sort_values(cols, na_position="first").reset_index(drop=True)
    b = b.sort_values(cols, na_position="first").reset_index(drop=True)
    assert len(a) == len(b), f"{what} at τ={tau}: {len(a)} rows vs DuckDB {len(b)}\nours:\n{a}\nduckdb:\n{b}"
    for c in cols:
        x, y = a[c].to_numpy(), b[c].to_numpy()
        if x.dtype.kind == "f" or y.dtype.kind == "f":
            x, y = x.astype(float), y.astype(float)
            ok = np.isclose(x, y, rtol=1e-9, atol=1e-9) | (np.isnan(x) & np.isnan(y))
        else:
            ok = x == y
        assert ok.all(), f"{what} at τ={tau}, column {c}:\nours:\n{a}\nduckdb:\n{b}"


SEEDS = [0, 1, 2]


@pytest.fixture(scope="module")
def con():
    c = duckdb.connect()
    yield c
    c.close()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("wname", list(WINDOWS))
def test_scan_select_project(con, seed, wname):
    spec = WINDOWS[wname]
    df = make_stream(seed)
    con.register("s", df)
    q = Chain(WindowScan(spec), Select([("v", ">", 2), ("k", "!=", 3)]),
              Project({"seq": "seq", "k": "k", "w": lambda c: c["v"] * 2 + 1}))
    ch = drive(lambda t, p: q.step(t, p[0]), [df], step_times(seed, [df]))
    for tau in eval_times(seed, [df], spec):
        ours = snapshot(ch, tau)
        theirs = con.execute(f"SELECT seq, k, v * 2 + 1 AS w FROM {window_sql('s', spec, tau)} "
                             f"WHERE v > 2 AND k <> 3").df()
        assert_same(ours, theirs, ["seq", "k", "w"], tau, f"scan/select/project {wname}")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("wname", list(WINDOWS))
def test_grouped_aggregates(con, seed, wname):
    spec = WINDOWS[wname]
    df = make_stream(seed)
    con.register("s", df)
    aggs = [AggSpec("count", None, "c"), AggSpec("sum", "v", "sv"), AggSpec("avg", "v", "av"),
            AggSpec("min", "v", "mn"), AggSpec("max", "v", "mx"), AggSpec("count_distinct", "v", "cd"),
            AggSpec("median", "v", "md"), AggSpec("quantile", "v", "q1", q=0.25)]
    q = Chain(WindowScan(spec), Aggregate(["k"], aggs))
    ch = drive(lambda t, p: q.step(t, p[0]), [df], step_times(seed, [df]))
    cols = ["k", "c", "sv", "av", "mn", "mx", "cd", "md", "q1"]
    for tau in eval_times(seed, [df], spec):
        theirs = con.execute(
            f"SELECT k, count(*) c, sum(v) sv, avg(v) av, min(v) mn, max(v) mx, count(DISTINCT v) cd, "
            f"median(v) md, quantile_cont(v, 0.25) q1 FROM {window_sql('s', spec, tau)} GROUP BY k").df()
        assert_same(snapshot(ch, tau), theirs, cols, tau, f"aggregate {wname}")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("wname", ["range", "slide", "rows", "part", "landmark"])
def test_global_aggregate(con, seed, wname):
    spec = WINDOWS[wname]
    df = make_stream(seed)
    con.register("s", df)
    q = Chain(WindowScan(spec), Select(("v", ">", 4)),
              Aggregate([], [AggSpec("sum", "v", "sv"), AggSpec("count", None, "c")]))
    times = step_times(seed, [df])
    ch = drive(lambda t, p: q.step(t, p[0]), [df], times)
    for tau in list(eval_times(seed, [df], spec)) + [float(times[0]) - 1.0]:
        ours = snapshot(ch, tau)
        if tau < times[0]:
            # before the first step the row exists only from the first (filtered) input on
            elig = df[df.v > 4]
            if spec.kind == "unbounded" and spec.start is not None:
                elig = elig[elig.ts >= spec.start]          # the landmark drops earlier tuples
            first = elig.ts.min()
            assert len(ours) == (1 if tau >= first else 0)
            if not len(ours):
                continue
        # SQL: a global aggregate has its row even over an empty window (COUNT 0, SUM NULL)
        theirs = con.execute(f"SELECT sum(v) sv, count(*) c FROM {window_sql('s', spec, tau)} "
                             f"WHERE v > 4").df()
        assert_same(ours, theirs, ["sv", "c"], tau, f"global aggregate {wname}")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("wl,wr", [("range", "range"), ("range", "rows"), ("slide", "part"),
                                   ("now", "unbounded"), ("tumble", "range")])
def test_two_way_join(con, seed, wl, wr):
    sl, sr = WINDOWS[wl], WINDOWS[wr]
    a, b = make_stream(seed, n=90), make_stream(seed + 50, n=90)
    con.register("a", a)
    con.register("b", b)
    L, R = WindowScan(sl), WindowScan(sr)
    j = SymmetricHashJoin([("k", "k")], prefixes=("l.", "r."))
    ch = drive(lambda t, p: j.step(t, L.step(t, p[0]), R.step(t, p[1])), [a, b], step_times(seed, [a, b]))
    for tau in eval_times(seed, [a, b], sl):
        theirs = con.execute(f'SELECT l.seq AS "l.seq", r.seq AS "r.seq", l.v + r.v AS sv '
                             f"FROM {window_sql('a', sl, tau)} l JOIN {window_sql('b', sr, tau)} r ON l.k = r.k").df()
        ours = snapshot(ch, tau)
        if len(ours):
            ours["sv"] = ours["l.v"] + ours["r.v"]
        assert_same(ours, theirs, ["l.seq", "r.seq", "sv"], tau, f"join {wl}/{wr}")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("order", [None, {0: [2, 1], 1: [2, 0], 2: [1, 0]}])
def test_three_way_mjoin(con, seed, order):
    specs = [WINDOWS["range"], WINDOWS["rows"], WindowSpec.range(4)]
    dfs = [make_stream(seed + 10 * i, n=70, nk=3) for i in range(3)]
    for i, d in enumerate(dfs):
        con.register(f"t{i}", d)
    scans = [WindowScan(s) for s in specs]
    j = MJoin(3, [((0, "k"), (1, "k")), ((1, "k"), (2, "k")), ((0, "v"), (2, "v"))],
              prefixes=["a.", "b.", "c."], probe_orders=order)
    ch = drive(lambda t, p: j.step(t, *[s.step(t, x) for s, x in zip(scans, p)]), dfs, step_times(seed, dfs))
    for tau in eval_times(seed, dfs, specs[0]):
        theirs = con.execute(
            f'SELECT a.seq AS "a.seq", b.seq AS "b.seq", c.seq AS "c.seq" FROM {window_sql("t0", specs[0], tau)} a, '
            f'{window_sql("t1", specs[1], tau)} b, {window_sql("t2", specs[2], tau)} c '
            f"WHERE a.k = b.k AND b.k = c.k AND a.v = c.v").df()
        assert_same(snapshot(ch, tau), theirs, ["a.seq", "b.seq", "c.seq"], tau, "mjoin")


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("wname,mode", [("range", "replace"), ("rows", "replace"), ("slide", "replace"),
                                        ("part", "count"), ("unbounded", "replace")])
def test_distinct(con, seed, wname, mode):
    spec = WINDOWS[wname]
    df = make_stream(seed)
    con.register("s", df)
    d = Distinct(["k", "v"], mode=mode)
    q = Chain(WindowScan(spec), Project(["k", "v"]), d)
    ch = drive(lambda t, p: q.step(t, p[0]), [df], step_times(seed, [df]))
    for tau in eval_times(seed, [df], spec):
        theirs = con.execute(f"SELECT DISTINCT k, v FROM {window_sql('s', spec, tau)}").df()
        assert_same(snapshot(ch, tau), theirs, ["k", "v"], tau, f"distinct {wname}")


def test_distinct_state_bound():
    df = make_stream(5, n=400, nk=3)
    d = Distinct(["k"])
    ws = WindowScan(WindowSpec.range(20))
    for t in np.unique(df.ts):
        sub = df[df.ts == t]
        d.step(t, ws.step(t, Batch({c: sub[c].to_numpy() for c in df.columns}, ts=sub.ts.to_numpy())))
        assert d.state_size() <= 2 * d.output_size()


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ws,wr", [("range", "rows"), ("unbounded", "range"), ("slide", "part")])
def test_minus_all(con, seed, ws, wr):
    s1, s2 = WINDOWS[ws], WINDOWS[wr]
    a, b = make_stream(seed, n=80, nk=3), make_stream(seed + 3, n=80, nk=3)
    con.register("a", a)
    con.register("b", b)
    S, R = WindowScan(s1), WindowScan(s2)
    m = MinusAll(["k"])
    ch = drive(lambda t, p: m.step(t, S.step(t, p[0]), R.step(t, p[1])), [a, b], step_times(seed, [a, b]))
    for tau in eval_times(seed, [a, b], s1):
        theirs = con.execute(f"SELECT k FROM {window_sql('a', s1, tau)} EXCEPT ALL "
                             f"SELECT k FROM {window_sql('b', s2, tau)}").df()
        assert_same(snapshot(ch, tau), theirs, ["k"], tau, f"minus {ws}/{wr}")


@pytest.mark.parametrize("seed", SEEDS)
def test_static_join_and_table_update(con, seed):
    df = make_stream(seed)
    t1 = pd.DataFrame({"k": [0, 1, 1, 2], "name": ["a", "b", "bb", "c"]})
    t2 = pd.DataFrame({"k": [0, 3], "name": ["z", "d"]})
    half = float(df.ts.iloc[len(df) // 2])
    con.register("s", df)
    spec = WINDOWS["range"]
    ws, sj = WindowScan(spec), StaticJoin(t1, on=[("k", "k")], prefix="t.")
    state = {"swapped": False}

    def stepper(t, p):
        if t > half and not state["swapped"]:
            out = sj.step(half, ws.step(half, p[0].take(p[0].ts <= half) if p[0] is not None else None))
            sj.set_table(t2)
            state["swapped"] = True
            rest = p[0].take(p[0].ts > half) if p[0] is not None else None
            return Changes.concat([out, sj.step(t, ws.step(t, rest if rest is not None and len(rest) else None))])
        return sj.step(t, ws.step(t, p[0]))

    ch = drive(stepper, [df], step_times(seed, [df]))
    con.register("t1", t1)
    con.register("t2", t2)
    for tau in eval_times(seed, [df], spec):
        w = window_sql("s", spec, tau)
        theirs = con.execute(
            f'SELECT s.seq, t."name" AS "t.name" FROM {w} s JOIN t1 t ON s.k = t.k WHERE s.ts <= {half!r} '
            f'UNION ALL SELECT s.seq, t."name" FROM {w} s JOIN t2 t ON s.k = t.k WHERE s.ts > {half!r}').df()
        assert_same(snapshot(ch, tau), theirs, ["seq", "t.name"], tau, "static join")


@pytest.mark.parametrize("seed", [0, 3])
@pytest.mark.parametrize("wl,wr", [("range", "rows"), ("unbounded", "range"), ("slide", "part"),
                                   ("now", "range"), ("landmark", "tumble")])
@pytest.mark.parametrize("mode", ["semi", "anti", "not_in"])
def test_semijoin(con, seed, wl, wr, mode):
    sl, sr = WINDOWS[wl], WINDOWS[wr]
    a, b = make_stream(seed, n=80, nk=5), make_stream(seed + 3, n=80, nk=4)
    a.loc[a.seq % 7 == 0, "v"] = np.nan
    b.loc[b.seq % 11 == 0, "v"] = np.nan
    con.register("a", a)
    con.register("b", b)
    S, R = WindowScan(sl), WindowScan(sr)
    on = [("v", "v")] if mode == "not_in" else [("k", "k"), ("v", "v")]
    m = SemiJoin(on, anti=mode != "semi", null_aware=mode == "not_in")
    ch = drive(lambda t, p: m.step(t, S.step(t, p[0]), R.step(t, p[1])), [a, b], step_times(seed, [a, b]))
    for tau in eval_times(seed, [a, b], sl):
        if mode == "not_in":
            q = (f"SELECT seq FROM {window_sql('a', sl, tau)} WHERE v NOT IN "
                 f"(SELECT v FROM {window_sql('b', sr, tau)})")
        else:
            q = (f"SELECT seq FROM {window_sql('a', sl, tau)} x WHERE {'NOT ' if mode == 'anti' else ''}EXISTS "
                 f"(SELECT * FROM {window_sql('b', sr, tau)} y WHERE y.k = x.k AND y.v = x.v)")
        assert_same(snapshot(ch, tau), con.execute(q).df(), ["seq"], tau, f"semijoin {mode} {wl}/{wr}")
