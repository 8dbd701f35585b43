"""Shared subplans, window stores and queues.

Oracle: the same query set with sharing off (engine knob ``share_plans``), every
result compared; plus the read-position / freeing behaviour of the shared queue.
"""
import numpy as np
import pandas as pd
import pytest

from sketchql.engine import Engine
from sketchql.engine.sharing import SharedOperator

QUERIES = [
    "SELECT v FROM S [RANGE 5] WHERE v > 0.5",
    "SELECT v, k FROM S [RANGE 12] WHERE v > 0.5",
    "SELECT k FROM S [UNBOUNDED] WHERE v > 0.5",
    "SELECT v FROM S [RANGE 2]",
    "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM S [RANGE 10] GROUP BY k",
    "SELECT k, SUM(v) AS total FROM S [RANGE 10] GROUP BY k",
    "SELECT MAX(v) AS m FROM S [RANGE 10] WHERE v > 0.5",
    "SELECT S.k, S.v, T.w FROM S [RANGE 4], T [RANGE 4] WHERE S.k = T.k",
    "SELECT S.k, T.w FROM S [RANGE 4], T [RANGE 4] WHERE S.k = T.k",
    "SELECT S.k, T.w FROM S [RANGE 8], T [RANGE 4] WHERE S.k = T.k",
    "SELECT ISTREAM k, COUNT(*) AS c FROM T [RANGE 6] GROUP BY k",
    "SELECT k, COUNT(*) AS c FROM T [RANGE 6] GROUP BY k",
]


def _run(share, scheduler="inline", late_query=False):
    eng = Engine(seed=4)
    eng.set_control("share_plans", share)
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts; CREATE STREAM T (k INT, w DOUBLE) TIMESTAMP ts")
    if scheduler != "inline":
        eng.set_control("scheduler", scheduler)
        eng.set_control("quantum", 20)
    qs = [eng.register(q) for q in QUERIES]
    for q in qs:
        q.set_knob("retain_changes", None)
    rng = np.random.default_rng(7)
    peak = 0
    for t0 in range(0, 40, 2):
        for name, col in (("S", "v"), ("T", "w")):
            ts = np.sort(rng.uniform(t0, t0 + 2, 30))
            eng.push(name, {"ts": ts, "k": rng.integers(0, 5, 30), col: np.round(rng.random(30), 3)})
        if late_query and t0 == 20:
            qs.append(eng.register(QUERIES[0]))
            qs[-1].set_knob("retain_changes", None)
        peak = max(peak, _state_bytes(eng))
    eng.heartbeat("S", 60.0)
    eng.heartbeat("T", 60.0)
    eng.run()
    return eng, qs, peak


def _state_bytes(eng):
    """Rows held by window stores and operator synopses (each shared object once)."""
    seen, tot = set(), 0
    for q in eng.queries:
        for n in q.plan.nodes:
            op = n.op
            real = getattr(getattr(op, "shared", None), "op", None) or op
            if id(real) in seen:
                continue
            seen.add(id(real))
            tot += int(real.state_size()) if hasattr(real, "state_size") else 0
    return tot + eng.sharing.stats()["store_rows"]


def _norm(df):
    return df.sort_values(list(df.columns)).reset_index(drop=True)


@pytest.mark.parametrize("scheduler", ["inline", "chain"])
def test_shared_and_unshared_give_identical_results(scheduler):
    _, q0, peak0 = _run(False)
    eng, q1, peak1 = _run(True, scheduler)
    for a, b in zip(q0, q1):
        pd.testing.assert_frame_equal(_norm(a.results()), _norm(b.results()))
        for t in (5.0, 17.3, 33.0, 41.0):
            pd.testing.assert_frame_equal(_norm(a.snapshot(t)), _norm(b.snapshot(t)))
    st = eng.sharing.stats()
    # stores: S WHERE v > 0.5 (4 windows: 5, 12, unbounded, 10), S (6 scans), T (5 scans)
    assert st["stores"] == 3 and st["store_consumers"] == 15
    assert st["shared_operators"] >= 3
    assert peak1 < 0.5 * peak0


def test_a_query_registered_later_shares_the_store_from_its_start():
    _, q0, _ = _run(False, late_query=True)
    _, q1, _ = _run(True, late_query=True)
    pd.testing.assert_frame_equal(_norm(q0[-1].results()), _norm(q1[-1].results()))
    assert len(q1[-1].results()) < len(q1[0].results())           # no past data replayed


def test_shared_queue_frees_a_step_once_every_consumer_read_it():
    class Op:
        calls = 0

        def step(self, now, *inputs):
            Op.calls += 1
            return [now]
    sh = SharedOperator(Op())
    a, b = sh.consumer(), sh.consumer()
    assert a.step(1.0) == [1.0] and a.step(2.0) == [2.0]
    assert len(sh.queue) == 2 and Op.calls == 2           # b has read nothing yet
    assert b.step(1.0) == [1.0] and len(sh.queue) == 1    # step 1 read by both: freed
    assert b.step(2.0) == [2.0] and len(sh.queue) == 0 and Op.calls == 2
    with pytest.raises(Exception, match="advance together"):
        a.step(3.0); b.step(4.0)


def test_explain_and_dropping_a_query():
    eng = Engine()
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
    q1 = eng.register("SELECT k, SUM(v) AS s FROM S [RANGE 10] GROUP BY k")
    txt = eng.explain("SELECT k, SUM(v) AS s FROM S [RANGE 10] GROUP BY k")
    assert "Shared with other queries" in txt and "aggregate: shared with queries [1]" in txt
    q2 = eng.register("SELECT k, SUM(v) AS s FROM S [RANGE 30] GROUP BY k")
    assert "window store of S shared with queries [1]" in q2.explain()
    eng.push("S", {"ts": [1.0, 2.0], "k": [1, 1], "v": [1.0, 2.0]})
    eng.deregister(q1)
    eng.push("S", {"ts": [20.0], "k": [1], "v": [5.0]})
    assert q2.snapshot()["s"].tolist() == [8.0]
    assert eng.sharing.stats()["store_consumers"] == 1


def test_sql_selections_over_one_stream_share_one_pt_selection():
    def run(share):
        eng = Engine(seed=2)
        eng.set_control("share_plans", share)
        eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
        qs = [eng.register(f"SELECT S.k FROM S [RANGE 20] WHERE S.k BETWEEN {lo} AND {hi} "
                           "WITH PREFERENCE desc S.k WITHIN 100000 PROBES PER TUPLE")
              for lo, hi in [(0, 9), (5, 30), (40, 60)]]
        for q in qs:
            q.set_knob("retain_changes", None)
        rng = np.random.default_rng(1)
        k = rng.integers(0, 80, 600)
        ts = np.sort(rng.uniform(0, 60, 600))
        for i in range(0, 600, 50):
            eng.push("S", {"ts": ts[i:i + 50], "k": k[i:i + 50], "v": np.zeros(len(k[i:i + 50]))})
        eng.heartbeat("S", 100.0)
        return qs, (ts, k)
    shared, (ts, k) = run(True)
    private, _ = run(False)
    ops = {id(n.op.op) for q in shared for n in q.plan.nodes if n.kind == "pt_select"}
    assert len(ops) == 1                                              # one PTSelection, three queries
    assert len({id(n.op.op) for q in private for n in q.plan.nodes if n.kind == "pt_select"}) == 3
    for (lo, hi), a, b in zip([(0, 9), (5, 30), (40, 60)], shared, private):
        got = sorted(a.results()["k"].tolist())
        assert got == sorted(k[(k >= lo) & (k <= hi)].tolist())     # ample budget: the exact selection
        assert got == sorted(b.results()["k"].tolist())


PT_DDL = """
CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts;
CREATE STREAM B (k INT, v DOUBLE) TIMESTAMP ts;
CREATE SUMMARY sa ON A (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4);
CREATE SUMMARY sb ON B (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)
"""
PT_JOIN = ("SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k WITH PREFERENCE {p} A.k FADE FACTOR 0.8 "
           "WINDOW {w} SECONDS WITHIN {b} PROBES PER TUPLE")


def _pt_run(share_plans, specs, late=None):
    rng = np.random.default_rng(4)
    ts = np.round(np.arange(1, 321) * 0.25, 6)
    ka, kb = (rng.zipf(1.3, size=(2, ts.shape[0])) % 120).astype(np.int64)
    eng = Engine(seed=2)
    eng.set_control("share_plans", share_plans)
    eng.execute(PT_DDL)
    qs = [eng.register(PT_JOIN.format(p=p, w=w, b=b)) for p, w, b in specs]
    for q in qs:
        q.set_knob("retain_changes", None)
    for t0 in np.arange(0.0, 80.0, 5.0):
        if late is not None and t0 == 40.0:                     # registered after data
            qs.append(eng.register(PT_JOIN.format(p=late[0], w=late[1], b=late[2])))
            qs[-1].set_knob("retain_changes", None)
        m = (ts > t0) & (ts <= t0 + 5.0 + 1e-9)
        eng.push("A", {"ts": ts[m], "k": ka[m], "v": np.ones(m.sum())})
        eng.push("B", {"ts": ts[m], "k": kb[m], "v": np.ones(m.sum())})
    return eng, qs


def _pt_pairs(q):
    r = q.results()
    return sorted(zip(r["k"].tolist(), r["A.ts"].tolist(), r["B.ts"].tolist()))


def test_pt_queues_share_entry_columns_and_answers_do_not_change():
    specs = [("desc", 30, 4), ("weighted", 30, 6), ("asc", 30, 4), ("desc", 30, 12), ("desc", 20, 4)]
    eng_s, qs_s = _pt_run(True, specs, late=("weighted", 30, 4))
    eng_u, qs_u = _pt_run(False, specs, late=("weighted", 30, 4))
    for a, b in zip(qs_s, qs_u):                                # same pairs, query by query
        assert _pt_pairs(a) == _pt_pairs(b)
    queues = [[n for n in q.plan.nodes if n.kind == "pt_join"][0].op.op.queue for q in qs_s]
    t30 = queues[0].table
    assert t30 is not None and all(q.table is t30 for q in queues[1:4] + queues[5:])   # window 30 s: one table
    assert queues[4].table is not None and queues[4].table is not t30                  # window 20 s: its own
    st = eng_s.sharing.stats()
    assert st["pt_entry_tables"] == 2 and st["pt_entry_rows_reused"] > st["pt_entry_rows"]
    # the blocks are stored once: far fewer rows than the queues pushed together (the late query's
    # arrival numbers differ, so its blocks are its own)
    pushed = sum(q.counts["pushed"] for q in queues[:4] + queues[5:])
    assert t30.counts["stored_rows"] < 0.5 * pushed
    assert t30.counts["compacted"] > 0 and t30.rows < t30.counts["stored_rows"]
    unshared = [[n for n in q.plan.nodes if n.kind == "pt_join"][0].op.op.queue for q in qs_u]
    assert all(q.table is None for q in unshared)
    # detaching a query releases its queue from the table
    eng_s.execute(f"DROP QUERY q{qs_s[0].id}")
    assert len(t30.queues()) == 4
