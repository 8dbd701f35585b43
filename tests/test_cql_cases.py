"""Reference cases W1, W3-W7 (shared/reference/cases.md) through SQL on the Engine, and
RSTREAM / ISTREAM / DSTREAM consistency with the snapshots at every instant."""
import numpy as np
import pandas as pd
import pytest

from sketchql.engine import Engine


def _eng(*ddl):
    e = Engine()
    for d in ddl:
        e.execute(d)
    return e


def _events(q, col):
    ch = q.changes()
    return [(float(a), int(s), v) for a, s, v in zip(ch.at, ch.sign, ch.columns[col])]


def test_w1_three_way_join_sql():
    e = _eng(*[f"CREATE STREAM S{i} (attr INT) TIMESTAMP ts" for i in (1, 2, 3)])
    q = e.register("SELECT S1.ts, S2.ts, S3.ts FROM S1 [RANGE 100], S2 [RANGE 100], S3 [RANGE 100] "
                   "WHERE S1.attr = S2.attr AND S2.attr = S3.attr")
    e.push("S1", {"ts": [90.0, 100.0], "attr": [1, 1]})
    e.push("S2", {"ts": [150.0, 180.0], "attr": [1, 1]})
    e.heartbeat("S1", 210)
    e.heartbeat("S2", 210)
    e.push("S3", {"ts": [195.0, 205.0], "attr": [1, 1]})      # one lazy batch, evaluated at 210
    ins = q.results(view="istream")
    got = sorted(map(tuple, ins[["S1.ts", "S2.ts", "S3.ts"]].to_numpy().tolist()))
    assert got == [(100, 150, 195), (100, 180, 195)]


def test_w3_sql_with_coalesce():
    e = _eng("CREATE STREAM Sales (price DOUBLE) TIMESTAMP ts")
    q = e.register("SELECT COALESCE(SUM(price), 0) AS s FROM Sales [RANGE 10] WHERE price > 4")
    big = {1: 6, 2: 9, 6: 5, 8: 8, 15: 7}
    for t in range(1, 26):
        ts, pr = [t], [big.get(t, 2)]
        if t in big and t % 2 == 0:
            ts, pr = [t, t], [big[t], 2]
        elif t not in big and t % 2 == 1:
            ts, pr = [], []
        if ts:
            e.push("Sales", {"ts": np.asarray(ts, float), "price": np.asarray(pr, float)})
        e.heartbeat("Sales", t)
    ans = {a: v for a, s, v in _events(q, "s") if s > 0}
    assert ans == {1: 6, 2: 15, 6: 20, 8: 28, 11: 22, 12: 13, 15: 20, 16: 15, 18: 7, 25: 0}


def test_w4_distinct_sql():
    e = _eng("CREATE STREAM S (v VARCHAR) TIMESTAMP ts")
    q = e.register("SELECT DISTINCT v FROM S [RANGE 10]")
    for t, v in [(1, "x"), (2, "x"), (3, "y"), (4, "y")]:
        e.push("S", {"ts": [float(t)], "v": [v]})
    e.heartbeat("S", 20)
    ch = q.changes()
    ev = [(float(a), int(s), v, float(t)) for a, s, v, t in zip(ch.at, ch.sign, ch.columns["v"], ch.ts)]
    assert ev == [(1, 1, "x", 1), (3, 1, "y", 3), (11, -1, "x", 1), (11, 1, "x", 2), (12, -1, "x", 2),
                  (13, -1, "y", 3), (13, 1, "y", 4), (14, -1, "y", 4)]


def test_w5_join_expiry_order_sql():
    e = _eng("CREATE STREAM W1 (key VARCHAR, name VARCHAR) TIMESTAMP ts",
             "CREATE STREAM W2 (key VARCHAR, name VARCHAR) TIMESTAMP ts")
    q = e.register("SELECT W1.name AS l, W2.name AS r FROM W1 [RANGE 10], W2 [RANGE 10] WHERE W1.key = W2.key")
    for t, l, r in [(1, ("k1", "a"), None), (5, ("k2", "b"), None), (6, None, ("k2", "t")), (7, None, ("k1", "u"))]:
        if l:
            e.push("W1", {"ts": [float(t)], "key": [l[0]], "name": [l[1]]})
        if r:
            e.push("W2", {"ts": [float(t)], "key": [r[0]], "name": [r[1]]})
        e.heartbeat("W1", t)
        e.heartbeat("W2", t)
    e.heartbeat("W1", 20)
    e.heartbeat("W2", 20)
    ch = q.changes()
    ev = [(float(a), int(s), x + y) for a, s, x, y in zip(ch.at, ch.sign, ch.columns["l"], ch.columns["r"])]
    assert ev == [(6, 1, "bt"), (7, 1, "au"), (11, -1, "au"), (15, -1, "bt")]


def test_w6_group_disappears_sql():
    e = _eng("CREATE STREAM S (g INT, v DOUBLE) TIMESTAMP ts")
    q = e.register("SELECT g, SUM(v) AS s FROM S [RANGE 10] GROUP BY g")
    e.push("S", {"ts": [1.0, 2.0], "g": [1, 1], "v": [5.0, 3.0]})
    e.heartbeat("S", 30)
    assert q.snapshot(2)["s"].tolist() == [8]
    assert q.snapshot(11)["s"].tolist() == [3]
    assert len(q.snapshot(12)) == 0


@pytest.mark.parametrize("spelling", ["EXCEPT ALL", "MINUS ALL"])
def test_w7_except_all_sql(spelling):
    e = _eng("CREATE STREAM S (v VARCHAR) TIMESTAMP ts", "CREATE STREAM R (v VARCHAR) TIMESTAMP ts")
    q = e.register(f"SELECT v FROM S [RANGE 100] {spelling} SELECT v FROM R [RANGE 10]")
    assert q.view == "relation"                 # strict: the change stream is the default view

    def step(t, s=None, r=None):
        if s:
            e.push("S", {"ts": [float(t)], "v": [s]})
        if r:
            e.push("R", {"ts": [float(t)], "v": [r]})
        e.heartbeat("S", t)
        e.heartbeat("R", t)

    step(1, s="B"); step(2, s="A"); step(3, s="C")
    assert _events(q, "v") == [(1, 1, "B"), (2, 1, "A"), (3, 1, "C")]
    step(4, r="A")
    assert _events(q, "v")[-1] == (4, -1, "A")
    n = len(_events(q, "v"))
    step(5, r="E"); step(6, s="E")
    assert len(_events(q, "v")) == n
    step(16)
    assert _events(q, "v")[n:] == [(14, 1, "A"), (15, 1, "E")]
    op = [nd for nd in q.plan.nodes if nd.kind == "setop"][0].op
    assert op.stats()["negative_tuples"] == 1            # only A⁻ at 4 is premature


def test_negative_tuples_only_where_needed():
    """Disjoint values: a difference never removes a result early (update-pattern paper §5.3.2);
    UNION / INTERSECT never emit negative tuples."""
    e = _eng("CREATE STREAM S (v INT) TIMESTAMP ts", "CREATE STREAM R (v INT) TIMESTAMP ts")
    qs = {op: e.register(f"SELECT v FROM S [RANGE 5] {op} SELECT v FROM R [RANGE 3]")
          for op in ("EXCEPT ALL", "UNION", "INTERSECT ALL")}
    nq = e.register("SELECT v FROM S [RANGE 5] WHERE v NOT IN (SELECT v FROM R [RANGE 3])")
    for t in range(1, 30):
        e.push("S", {"ts": [float(t)], "v": [t % 4]})            # 0..3
        e.push("R", {"ts": [float(t)], "v": [10 + t % 3]})       # 10..12: disjoint
    for op, q in qs.items():
        node = [n for n in q.plan.nodes if n.kind == "setop"][0]
        assert node.op.stats()["negative_tuples"] == 0, op
        assert node.pattern == ("strict" if op == "EXCEPT ALL" else "weak")
    sj = [n for n in nq.plan.nodes if n.kind == "semijoin"][0]
    assert sj.op.stats()["negative_tuples"] == 0 and sj.pattern == "strict"


def test_not_in_value_reappears_exactly_once():
    e = _eng("CREATE STREAM S (v INT) TIMESTAMP ts", "CREATE STREAM R (v INT) TIMESTAMP ts")
    q = e.register("SELECT v FROM S [RANGE 100] WHERE v NOT IN (SELECT v FROM R [RANGE 5])")
    e.push("S", {"ts": [1.0, 1.0], "v": [7, 8]})
    e.push("R", {"ts": [2.0, 3.0, 4.0], "v": [7, 7, 7]})     # three copies arrive, one negative tuple
    e.heartbeat("S", 20)
    e.heartbeat("R", 20)
    ev = [x for x in _events(q, "v") if x[2] == 7]
    assert ev == [(1, 1, 7), (2, -1, 7), (9, 1, 7)]          # back once, when the last copy leaves at 9
    sj = [n for n in q.plan.nodes if n.kind == "semijoin"][0].op.stats()
    assert sj["negative_tuples"] == 1 and sj["reappearances"] == 1


def _multiset(df, cols):
    return sorted(map(tuple, df[cols].astype(object).where(pd.notna(df[cols]), None).to_numpy().tolist()),
                  key=repr)


@pytest.mark.parametrize("sql", [
    "SELECT v FROM S [RANGE 4]",
    "SELECT k, COUNT(*) AS n FROM S [ROWS 5] GROUP BY k",
    "SELECT k FROM S [RANGE 6] EXCEPT ALL SELECT k FROM R [RANGE 3 SLIDE 2]",
    "SELECT DISTINCT k FROM S [PARTITION BY k ROWS 1]",
])
def test_rstream_istream_dstream_consistent_with_snapshots(sql):
    e = _eng("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts", "CREATE STREAM R (k INT, v DOUBLE) TIMESTAMP ts")
    body = sql.split("SELECT ", 1)[1]
    views = {v: e.register(f"SELECT {v} {body}") for v in ("RSTREAM", "ISTREAM", "DSTREAM")}
    plain = e.register(sql)
    rng = np.random.default_rng(3)
    t = 0.0
    instants = []
    for _ in range(25):
        t += float(rng.choice([0.0, 0.5, 1.0, 2.0]))        # ties in time
        for s in ("S", "R"):
            n = int(rng.integers(0, 3))
            if n:
                e.push(s, {"ts": np.full(n, t), "k": rng.integers(0, 3, n), "v": rng.integers(0, 5, n) * 1.0})
            e.heartbeat(s, t)
        instants.append(t)
    cols = plain.names
    rs = views["RSTREAM"].results()
    assert set(rs["__at"].unique()) <= set(instants)
    prev = None
    for tau in sorted(set(instants)):
        snap = plain.snapshot(tau)
        at_tau = rs[rs["__at"] == tau]
        assert _multiset(at_tau, cols) == _multiset(snap, cols), tau        # RSTREAM = R(τ)
        if prev is not None:
            ins = views["ISTREAM"].results()
            dl = views["DSTREAM"].results()
            i_ = ins[(ins["__at"] > prev) & (ins["__at"] <= tau)]
            d_ = dl[(dl["__at"] > prev) & (dl["__at"] <= tau)]
            before = plain.snapshot(prev)
            lhs = pd.concat([before[cols], i_[cols]]) if len(i_) else before[cols]
            # R(τ) + DSTREAM(prev, τ] = R(prev) + ISTREAM(prev, τ]
            rhs = pd.concat([snap[cols], d_[cols]]) if len(d_) else snap[cols]
            assert _multiset(lhs, cols) == _multiset(rhs, cols), tau
        prev = tau
    # polling RSTREAM returns each instant's relation once
    polled = pd.concat([b.to_pandas() for b in views["RSTREAM"].poll()] or [pd.DataFrame(columns=cols)])
    assert len(polled) == len(rs)
    assert not views["RSTREAM"].poll()
