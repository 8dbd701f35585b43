"""Sharing after a checkpoint round trip (issue 12 audit): the registry of shared stores and
operators must survive ``checkpoint.dumps`` / ``loads``.  It used to key its member lists by
``id(obj)``; the restored objects have new ids, so registering a query that shares a window
store raised ``KeyError`` (HTTP 500) and the sharing notes silently said "shares nothing".

Oracles: a never-restarted engine fed the same operations (results row for row, sharing notes
equal) and a brute-force count over the pushed tuples."""
import numpy as np
import pandas as pd
import pytest

from sketchql.engine import Engine
from sketchql.engine.checkpoint import dumps, loads

DDL = "CREATE STREAM A (k INT, x DOUBLE) TIMESTAMP ts"
EARLY = ["SELECT COUNT(*) AS n FROM A [UNBOUNDED]",
         "SELECT k, COUNT(*) AS n FROM A [RANGE 10] GROUP BY k"]
LATE = ["SELECT COUNT(*) AS n FROM A [RANGE 10]",
        "SELECT k, COUNT(*) AS n FROM A [RANGE 10] GROUP BY k",
        "SELECT k, COUNT(*) AS n FROM A [RANGE 10] GROUP BY k",      # identical twin: shares operators
        "SELECT COUNT(*) AS n FROM A [UNBOUNDED]"]


def _batch(rng, t0, n=40):
    return {"ts": np.sort(rng.uniform(t0, t0 + 3, n)), "k": rng.integers(0, 4, n), "x": rng.random(n)}


def _norm(df):
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def _engine():
    e = Engine(seed=1)
    e.execute(DDL)
    for sql in EARLY:
        e.register(sql).set_knob("retain_changes", None)
    return e


def _late(e):
    qs = []
    for sql in LATE:
        q = e.register(sql)
        q.set_knob("retain_changes", None)
        qs.append(q)
    return qs


@pytest.mark.parametrize("legacy", [False, True])
def test_register_sharing_query_after_restore_equals_never_restarted(legacy):
    rng = np.random.default_rng(3)
    before = [_batch(rng, t) for t in (0, 3, 6)]
    after = [_batch(rng, t) for t in range(9, 40, 3)]
    ref, eng = _engine(), _engine()
    for b in before:
        ref.push("A", dict(b))
        eng.push("A", dict(b))
    if legacy:      # a snapshot written before the fix: members keyed by id() of the writer's objects
        eng.sharing.members = {id(k): v for k, v in eng.sharing.members.items()}
    eng = loads(dumps(eng))
    ref_q, q = _late(ref), _late(eng)
    assert [x._sharing_notes for x in q] == [x._sharing_notes for x in ref_q]
    assert any("shared with queries [1" in n for n in q[0]._sharing_notes)       # the store of query 1
    assert any("shared with queries" in n for n in q[2]._sharing_notes)          # the twin's operators
    for b in after:
        ref.push("A", dict(b))
        eng.push("A", dict(b))
    for a, b in zip(ref.queries, eng.queries):
        pd.testing.assert_frame_equal(_norm(a.results()), _norm(b.results()))
    # brute force: a late query sees the tuples pushed after its registration
    ts = np.concatenate([b["ts"] for b in after])
    allts = np.concatenate([b["ts"] for b in before + after])
    for t in (14.2, 25.7, 38.9):
        want = int(((ts > t - 10) & (ts <= t)).sum())
        assert int(q[0].snapshot(t)["n"].sum()) == want
        assert int(q[1].snapshot(t)["n"].sum()) == want
        assert int(eng.queries[0].snapshot(t)["n"].sum()) == int((allts <= t).sum())
    # dropping a sharer after the restore releases it from every registry entry
    shared = [n for n in q[1].plan.nodes if eng.sharing.shared_with(q[1], n)]
    assert shared and all(q[2].id in eng.sharing.shared_with(q[1], n) for n in shared)
    eng.deregister(q[2])
    assert all(q[2].id not in m for m in eng.sharing.members.values())
    assert all(q[2].id not in eng.sharing.shared_with(q[1], n) for n in q[1].plan.nodes)


def test_signatures_do_not_hold_stale_ids_after_restore():
    """Signatures name compiled code by the object itself: after a restore an entry of the
    registry still matches only the very object it was built from."""
    from sketchql.engine.sharing import _Same
    e = Engine(seed=1)
    e.execute(DDL)
    e.register("SELECT k FROM A [RANGE 10] WHERE x * 2 > 1")
    e2 = loads(dumps(e))
    keys = [k for k in e2.sharing.ops]
    found = []

    def walk(x):
        if isinstance(x, _Same):
            found.append(x)
        elif isinstance(x, tuple):
            for v in x:
                walk(v)
    walk(tuple(keys))
    assert found, "expected compiled code in a signature"
    live = {id(o) for qq in e2.queries for n in qq.plan.nodes for o in _objs(n.params)}
    assert all(id(s.obj) in live for s in found)


def _objs(x):
    if isinstance(x, dict):
        for v in x.values():
            yield from _objs(v)
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _objs(v)
    else:
        yield x


@pytest.mark.parametrize("sql", LATE[:2] + LATE[3:])
def test_twins_registered_after_data_equal_unshared(sql):
    """Two identical queries registered after data share their operators (same epoch).  The first
    one's catch-up step at the streams' clock ran before the twin attached; the twin used to
    step the shared operator a second time at that time, and the next push then failed with
    "queries sharing a subplan must advance together".  Oracle: the same run with sharing off."""
    runs = []
    for share in (True, False):
        rng = np.random.default_rng(5)
        e = Engine(seed=1)
        e.set_control("share_plans", share)
        e.execute(DDL)
        for t in (0, 3, 6):
            e.push("A", _batch(rng, t))
        qs = [e.register(sql), e.register(sql)]
        if share:
            assert any("shared with queries" in n and "scan" not in n for n in qs[1]._sharing_notes)
        for t in range(9, 30, 3):
            e.push("A", _batch(rng, t))
        runs.append([_norm(q.results()) for q in qs])
    for a, b in zip(*runs):
        pd.testing.assert_frame_equal(a, b)
    pd.testing.assert_frame_equal(runs[0][0], runs[0][1])


def test_http_register_after_checkpoint_and_restart(tmp_path):
    """The audit's repro over HTTP: checkpoint, restart (a new app on the same data directory
    recovers from the checkpoint), register a query sharing the window store: 201, not 500, and
    its results count the tuples pushed after it (brute force)."""
    from fastapi.testclient import TestClient
    from sketchql.service.app import create_app

    def app():
        return create_app(demo=False, data_dir=str(tmp_path), sync=False, checkpoint_interval_s=1e9)

    with TestClient(app()) as c:
        assert c.post("/streams", json={"sql": DDL}).status_code == 201
        assert c.post("/queries", json={"sql": EARLY[0]}).status_code == 201
        r = c.post("/streams/A/batches", json={"rows": [{"ts": float(t), "k": 1, "x": 0.5} for t in range(1, 6)]})
        assert r.status_code == 200, r.text
        assert c.post("/admin/checkpoint").status_code == 200
    with TestClient(app()) as c:
        r = c.post("/queries", json={"sql": "SELECT COUNT(*) AS n FROM A [RANGE 10]"})
        assert r.status_code == 201, r.text
        qid = r.json()["id"]
        r = c.post("/queries", json={"sql": "SELECT k, COUNT(*) AS n FROM A [RANGE 10] GROUP BY k"})
        assert r.status_code == 201, r.text
        rows = [{"ts": 6.0 + 0.5 * i, "k": i % 3, "x": 0.1} for i in range(12)]
        assert c.post("/streams/A/batches", json={"rows": rows}).status_code == 200
        assert c.post("/streams/A/heartbeat", json={"ts": 20.0}).status_code == 200
        snap = c.get(f"/queries/{qid}/snapshot", params={"at": 15.0})
        assert snap.status_code == 200, snap.text
        want = sum(1 for x in rows if 5.0 < x["ts"] <= 15.0)
        body = snap.json()
        n = body["rows"][0][body["columns"].index("n")] if isinstance(body["rows"][0], list) else body["rows"][0]["n"]
        assert n == want


def test_real_server_sigkill_after_checkpoint_then_register(tmp_path):
    """The audit's repro on a real ``sketchql serve`` process: checkpoint, SIGKILL, restart,
    register a store-sharing query (was 500 KeyError), and its results are the tuples pushed
    after it (brute force)."""
    from service_server import Server

    srv = Server(tmp_path / "data", ["--no-demo", "--checkpoint-interval", "3600"])
    try:
        srv.wait_ready()
        assert srv.client.post("/streams", json={"sql": DDL}).status_code == 201
        assert srv.client.post("/queries", json={"sql": EARLY[0]}).status_code == 201
        rows = [{"ts": float(t), "k": t % 3, "x": 0.5} for t in range(1, 6)]
        assert srv.client.post("/streams/A/batches", json={"rows": rows}).status_code == 200
        assert srv.client.post("/admin/checkpoint").status_code == 200
    finally:
        srv.kill9()
    srv = Server(tmp_path / "data", ["--no-demo", "--checkpoint-interval", "3600"])
    try:
        h = srv.wait_ready()
        assert h["recovery"]["checkpoint_seq"] > 0 and not h["recovery"]["errors"]
        r = srv.client.post("/queries", json={"sql": "SELECT COUNT(*) AS n FROM A [RANGE 10]"})
        assert r.status_code == 201, r.text
        qid = r.json()["id"]
        assert qid > 1                      # ids are never reused
        later = [{"ts": 6.0 + 0.5 * i, "k": i % 3, "x": 0.1} for i in range(12)]
        assert srv.client.post("/streams/A/batches", json={"rows": later}).status_code == 200
        snap = srv.client.get(f"/queries/{qid}/snapshot", params={"at": 11.0}).json()
        assert snap["rows"][0]["n"] == sum(1 for x in later if 1.0 < x["ts"] <= 11.0)
        total = srv.client.get("/queries/1/snapshot", params={"at": 11.0}).json()
        assert total["rows"][0]["n"] == len(rows) + sum(1 for x in later if x["ts"] <= 11.0)
    finally:
        srv.stop()
