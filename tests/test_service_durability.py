"""Durable state: a real server killed with SIGKILL at several points (between batches, with a batch in
flight, in the middle of a checkpoint) and restarted loses nothing it acknowledged: its summaries equal an
uninterrupted in-process run byte for byte, every query's results equal the reference's row for row,
queries continue, ids are never reused.  Plus in-process checks of the log, the checkpoint and recovery."""
import glob
import os
import threading
import time

import numpy as np
import pytest

from service_server import Server, arrow_body, make_batches
from sketchql.engine.checkpoint import dumps, loads
from sketchql.service.durability import OpLog, decode_columns, encode_columns
from sketchql.service.state import ServiceState

DDL = ("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts; "
       "CREATE SUMMARY sk ON S (k) WITH GRANULARITY 5 SECONDS AND COLLAPSE(2, 3)")
QUERIES = ["SELECT k, v FROM S [RANGE 5 SECONDS] WHERE v > 0.5",
           "SELECT k, COUNT(*) AS n FROM S [RANGE 10 SECONDS] GROUP BY k",
           "SELECT COUNT(*) AS n, SUM(v) AS sv FROM S [RANGE 20 SECONDS SLIDE 5 SECONDS]"]


def _index_bytes(state) -> dict:
    return {f"{d.name}.{a}": ix.to_bytes() for d in state.engine.catalog.summaries for a, ix in d.index.items()}


def _rows(state, qid):
    log = state.logs[qid]
    out = log.read(0, log.total)
    assert out["missed"] == 0
    return [(r["seq"], r["sign"], r["at"], tuple(sorted(r["row"].items()))) for r in out["rows"]]


def test_arrow_payload_round_trip():
    cols = {"k": np.array([1, 2], dtype=np.int64), "v": np.array([0.5, np.nan]), "s": np.array(["a", None], object),
            "b": np.array([True, False])}
    back = decode_columns(encode_columns(cols))
    assert back["k"].dtype == np.int64 and back["k"].tolist() == [1, 2]
    assert back["v"][0] == 0.5 and np.isnan(back["v"][1])
    assert back["s"].tolist() == ["a", None] and back["b"].tolist() == [True, False]


def test_snapshot_continues_exactly_like_the_original():
    batches = make_batches(12, 400, seed=1)
    a, b = ServiceState(seed=3), ServiceState(seed=3)
    for st in (a, b):
        st.execute_ddl(DDL)
        for sql in QUERIES:
            st.register(sql)
    for cols in batches[:6]:
        for st in (a, b):
            st.push("S", dict(cols), len(cols["ts"]))
    restored = loads(dumps({"engine": b.engine, "logs": b.logs}))
    b.engine, b.logs = restored["engine"], restored["logs"]
    for cols in batches[6:]:
        for st in (a, b):
            st.push("S", dict(cols), len(cols["ts"]))
    assert _index_bytes(a) == _index_bytes(b)
    for q in a.engine.queries:
        assert _rows(a, q.id) == _rows(b, q.id)


def test_recover_from_checkpoint_and_log_tail(tmp_path):
    batches = make_batches(10, 300, seed=2)
    ref = ServiceState(seed=3)
    st = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    for s in (ref, st):
        s.execute_ddl(DDL)
        for sql in QUERIES:
            s.register(sql)
    for i, cols in enumerate(batches):
        for s in (ref, st):
            s.push("S", dict(cols), len(cols["ts"]))
        if i == 4:
            info = st.checkpoint()
            assert info["seq"] == st.store.last_seq
            assert st.store.count_after(0)[0] == 0          # the log before the checkpoint is dropped
    for s in (ref, st):
        s.heartbeat("S", 40.0)
    dropped = st.drop_query(2)
    assert dropped["deleted"] == 2
    ref.drop_query(2)
    st.store.close()
    again = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    info = again.recover()
    assert info["checkpoint_seq"] > 0 and info["replayed_ops"] == 5 + 1 + 1 and not info["errors"]
    assert _index_bytes(again) == _index_bytes(ref)
    assert [q.id for q in again.engine.queries] == [1, 3]
    for q in ref.engine.queries:
        assert _rows(again, q.id) == _rows(ref, q.id)
    assert again.register("SELECT k FROM S [NOW]")["id"] == 4            # ids are never reused
    again.store.close()


def test_data_dir_is_locked_by_one_server(tmp_path):
    from sketchql.service.durability import DataDirError

    a = OpLog(str(tmp_path))
    with pytest.raises(DataDirError, match="in use"):
        OpLog(str(tmp_path))
    a.close()
    OpLog(str(tmp_path)).close()


def test_torn_checkpoint_is_ignored(tmp_path):
    log = OpLog(str(tmp_path), sync=False)
    log.write_checkpoint(0, b"state-0")
    s = log.append("heartbeat", {"stream": "S", "ts": 1.0})
    log.wait(s)
    good = log.read_checkpoint()
    assert good == (0, b"state-0")
    with open(os.path.join(str(tmp_path), f"checkpoint-{5:020d}.ckpt"), "wb") as fh:
        fh.write(b"SQCKPT01" + b"\x00" * 10)                      # torn: short header, no payload
    assert log.read_checkpoint() == (0, b"state-0")
    log.close()


def _blocked_commit_client(tmp_path):
    from fastapi.testclient import TestClient
    from sketchql.service import create_app

    app = create_app(demo=False, data_dir=str(tmp_path), sync=False)
    c = TestClient(app)
    c.__enter__()                      # one event loop for all requests (they run concurrently)
    c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts; CREATE STREAM T (k INT) TIMESTAMP ts"})
    return c, app.state.sketchql.store


def _post_in_thread(c, name, ts, out):
    def run():
        out[name] = c.post(f"/streams/{name}/batches", json={"rows": [{"k": 1, "ts": ts}, {"k": 2, "ts": ts + 1}]})
    th = threading.Thread(target=run)
    th.start()
    return th


def _tuples_in(c, name):
    return c.get(f"/streams/{name}").json()["stats"]["tuples_in"]


def test_batch_is_answered_only_after_its_commit_and_the_fsync_wait_blocks_no_thread(tmp_path):
    """The 2xx waits for the group commit covering the batch's record; meanwhile the ingest thread
    applies the next batches (their records join the next commit) and other requests are served."""
    c, store = _blocked_commit_client(tmp_path)
    try:
        out = {}
        with store._db_lock:                               # the writer cannot commit
            threads = [_post_in_thread(c, "S", 1.0, out), _post_in_thread(c, "T", 5.0, out)]
            deadline = time.monotonic() + 30
            while (_tuples_in(c, "S"), _tuples_in(c, "T")) != (2, 2):   # both applied, event loop free
                assert time.monotonic() < deadline, "the second batch was not applied while the first waited"
                time.sleep(0.02)
            time.sleep(0.2)
            assert not out and all(th.is_alive() for th in threads)        # neither acknowledged yet
            assert store.durable_seq < store.last_seq
        for th in threads:
            th.join(30)
        assert {k: r.status_code for k, r in out.items()} == {"S": 200, "T": 200}
        assert max(r.json()["seq"] for r in out.values()) <= store.durable_seq
        assert not store._waiters
    finally:
        c.__exit__(None, None, None)


def test_a_batch_whose_log_cannot_be_written_gets_503(tmp_path):
    c, store = _blocked_commit_client(tmp_path)
    try:
        out = {}
        with store._db_lock:
            th = _post_in_thread(c, "S", 1.0, out)
            deadline = time.monotonic() + 30
            while _tuples_in(c, "S") != 2:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            store.db.close()                               # the commit will fail: disk gone
        th.join(30)
        r = out["S"]
        assert r.status_code == 503 and r.json()["error"]["type"] == "not_durable", r.text
        assert "could not be made durable" in r.json()["error"]["message"]
        r = c.post("/streams/S/batches", json={"rows": [{"k": 3, "ts": 9.0}]})
        assert r.status_code == 503                        # and so is every later change
    finally:
        try:
            c.__exit__(None, None, None)
        except Exception:
            pass


def test_when_durable_futures(tmp_path):
    import asyncio

    from sketchql.service.durability import DataDirError

    log = OpLog(str(tmp_path), sync=False)

    async def main():
        loop = asyncio.get_running_loop()
        assert log.when_durable(None, loop) is None
        with log._db_lock:
            s1 = log.append("heartbeat", {"stream": "S", "ts": 1.0})
            s2 = log.append("heartbeat", {"stream": "S", "ts": 2.0})
            f1, f2 = log.when_durable(s1, loop), log.when_durable(s2, loop)
            await asyncio.sleep(0.1)
            assert not f1.done() and not f2.done()
        await asyncio.wait_for(asyncio.gather(f1, f2), 30)
        assert log.when_durable(s2, loop) is None and log.durable_seq >= s2
        with log._db_lock:
            s3 = log.append("heartbeat", {"stream": "S", "ts": 3.0})
            f3 = log.when_durable(s3, loop)
            log.db.close()
        with pytest.raises(DataDirError, match="cannot be written"):
            await asyncio.wait_for(f3, 30)
        f4 = log.when_durable(log.append.__self__.last_seq + 1, loop)
        with pytest.raises(DataDirError):
            await f4

    asyncio.run(main())
    log.close()


# ---------------------------------------------------------------------- a real server, SIGKILLed
def _push(srv, cols, i):
    if i % 2:
        r = srv.client.post("/streams/S/batches", content=arrow_body(cols),
                            headers={"content-type": "application/vnd.apache.arrow.stream"})
    else:
        r = srv.client.post("/streams/S/batches", json={"columns": {k: v.tolist() for k, v in cols.items()}})
    assert r.status_code == 200, r.text
    return r.json()


def _server_rows(srv, qid):
    out, since = [], 0
    while True:
        r = srv.client.get(f"/queries/{qid}/results", params={"since": since, "limit": 10_000})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["missed"] == 0
        out += [(x["seq"], x["sign"], x["at"], tuple(sorted(x["row"].items()))) for x in body["rows"]]
        if body["next"] == since:
            return out
        since = body["next"]


def test_sigkill_at_several_points_loses_nothing_acknowledged(tmp_path):
    data = tmp_path / "data"
    batches = make_batches(16, 250, seed=9)
    ref = ServiceState(seed=7)
    ref.execute_ddl(DDL)
    args = ["--no-demo", "--checkpoint-every-tuples", "1500", "--checkpoint-interval", "3600"]

    # run 1: declare, register, push; one background checkpoint happens (1500 tuples); SIGKILL between batches
    srv = Server(data, args)
    srv.wait_ready()
    assert srv.client.post("/streams", json={"sql": DDL}).status_code == 201
    for sql in QUERIES:
        assert srv.client.post("/queries", json={"sql": sql}).status_code == 201
        ref.register(sql)
    for i in range(7):
        _push(srv, batches[i], i)
        ref.push("S", dict(batches[i]), 250)
    deadline = time.monotonic() + 60
    while not glob.glob(str(data / "checkpoint-*.ckpt")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert glob.glob(str(data / "checkpoint-*.ckpt")), "the background checkpoint did not happen"
    srv.kill9()

    # run 2: recovered; delete a query, push with one batch in flight at the SIGKILL
    srv = Server(data, args)
    h = srv.wait_ready()
    assert h["recovery"]["checkpoint_seq"] > 0 and not h["recovery"]["errors"]
    assert [q["id"] for q in srv.client.get("/queries").json()["queries"]] == [1, 2, 3]
    assert srv.client.delete("/queries/3").status_code == 200
    ref.drop_query(3)
    for i in range(7, 10):
        _push(srv, batches[i], i)
        ref.push("S", dict(batches[i]), 250)
    inflight = threading.Thread(target=lambda: _try_push(srv, batches[10]))
    inflight.start()
    time.sleep(0.01)
    srv.kill9()
    inflight.join()

    # run 3: the in-flight batch is in or out as a whole; a checkpoint is SIGKILLed half-written
    srv = Server(data, args, env={"SKETCHQL_CHECKPOINT_PAUSE_S": "60"})
    srv.wait_ready()
    tin = srv.client.get("/streams/S").json()["stats"]["tuples_in"]
    assert tin in (10 * 250, 11 * 250)
    if tin == 11 * 250:                                   # committed before the kill: part of the state
        ref.push("S", dict(batches[10]), 250)
    r = srv.client.post("/queries", json={"sql": "SELECT k FROM S [NOW] WHERE k = 1"})
    assert r.status_code == 201 and r.json()["id"] == 4      # never 3 again
    ref.register("SELECT k FROM S [NOW] WHERE k = 1")
    for i in range(11, 13):
        _push(srv, batches[i], i)
        ref.push("S", dict(batches[i]), 250)
    threading.Thread(target=lambda: _try(srv.client.post, "/admin/checkpoint"), daemon=True).start()
    deadline = time.monotonic() + 60
    while not glob.glob(str(data / "checkpoint-*.tmp")) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert glob.glob(str(data / "checkpoint-*.tmp")), "the checkpoint did not start"
    srv.kill9()

    # run 4: recovered from the older checkpoint + the log; continue, then compare with the reference
    srv = Server(data, args)
    h = srv.wait_ready()
    assert not h["recovery"]["errors"]
    for i in range(13, 16):
        _push(srv, batches[i], i)
        ref.push("S", dict(batches[i]), 250)
    assert srv.client.post("/streams/S/heartbeat", json={"ts": 40.0}).status_code == 200
    ref.heartbeat("S", 40.0)
    assert srv.client.get("/streams/S").json()["stats"]["tuples_in"] == ref.engine.stream("S").tuples_in
    assert [q["id"] for q in srv.client.get("/queries").json()["queries"]] == [1, 2, 4]
    for q in ref.engine.queries:
        assert _server_rows(srv, q.id) == _rows(ref, q.id), f"query {q.id}"
    srv.stop()                                            # clean stop: a final checkpoint

    # the summaries on disk equal the uninterrupted run's, byte for byte
    store = OpLog(str(data))
    ck = store.read_checkpoint()
    store.close()
    assert ck is not None and not glob.glob(str(data / "checkpoint-*.tmp"))
    snap = loads(ck[1])
    got = {f"{d.name}.{a}": ix.to_bytes() for d in snap["engine"].catalog.summaries for a, ix in d.index.items()}
    assert got == _index_bytes(ref)


def _try(fn, *a, **kw):
    try:
        return fn(*a, **kw)
    except Exception:
        return None


def _try_push(srv, cols):
    _try(srv.client.post, "/streams/S/batches", content=arrow_body(cols),
         headers={"content-type": "application/vnd.apache.arrow.stream"})


def test_a_refused_logged_batch_is_skipped_on_replay(tmp_path):
    from sketchql.service.errors import ApiError
    from sketchql.service.ingest import ARROW_TYPES, parse_batch

    st = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    st.execute_ddl(DDL)
    good = make_batches(2, 50, seed=4)
    st.push("S", dict(good[1]), 50)
    with pytest.raises(ApiError, match="older than the stream clock"):
        st.push("S", dict(good[0]), 50)                       # logged first, refused by the engine: aborted
    body = arrow_body(good[1])
    body2 = arrow_body({k: v + (10.0 if k == "ts" else 0) for k, v in good[1].items()})
    cols, n = parse_batch(body2, ARROW_TYPES[0], st.schema("S"), 1000)
    st.push("S", cols, n, raw=body2)                           # logged as the raw Arrow body
    assert [o.kind for o in st.store.ops_after(0)] == ["ddl", "push", "push", "abort", "push"]
    ref = _index_bytes(st)
    st.store.close()
    again = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    info = again.recover()
    assert not info["errors"] and again.engine.stream("S").tuples_in == 100
    assert _index_bytes(again) == ref
    again.store.close()
    assert body != body2


def test_fresh_wipes_and_demo_resumes_where_it_stopped(tmp_path):
    from sketchql.service import create_app

    d = str(tmp_path / "data")
    app = create_app(demo=True, seed=3, data_dir=d, demo_options={"max_tuples": 2000})
    st, feeder = app.state.sketchql, app.state.sketchql.demo
    for _ in range(3):
        feeder.step()
    clock, ids = feeder.clock, [q.id for q in st.engine.queries]
    tin = st.engine.stream("Store1").tuples_in
    st.drop_query(ids[0])
    st.store.close()
    app = create_app(demo=True, seed=3, data_dir=d, demo_options={"max_tuples": 2000})
    st2, f2 = app.state.sketchql, app.state.sketchql.demo
    assert [q.id for q in st2.engine.queries] == ids[1:]                   # no second set-up, none re-added
    assert f2.clock == clock and st2.engine.stream("Store1").tuples_in == tin
    f2.step()
    assert f2.clock > clock and st2.engine.stream("Store1").tuples_in > tin
    st2.store.close()
    app = create_app(demo=False, data_dir=d, fresh=True)
    assert app.state.sketchql.engine.queries == [] and not app.state.sketchql.engine.catalog.streams
    app.state.sketchql.store.close()


def test_serve_keeps_state_in_a_default_data_dir(monkeypatch, tmp_path):
    import uvicorn

    from sketchql.cli import main
    from sketchql.service import commands

    seen = {}
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SKETCHQL_DATA_DIR", raising=False)
    monkeypatch.setattr(uvicorn, "run", lambda app, **k: seen.update(store=app.state.sketchql.store))
    assert main(["serve", "--no-demo"]) == 0
    assert seen["store"].path == str(tmp_path / commands.DEFAULT_DATA_DIR)
    seen["store"].close()
    assert main(["serve", "--no-demo", "--in-memory"]) == 0 and seen["store"] is None


def test_wal_checkpoints_run_off_the_commit_path_and_keep_every_op(tmp_path, monkeypatch):
    """The writer connection never checkpoints the WAL inside a commit (SQLite's automatic checkpoint
    fsyncs the database file in the commit that crosses 4 MB); the sketchql-wal thread does it on its
    own connection once enough was committed and the writer is idle, and nothing logged is lost."""
    import sqlite3

    import sketchql.service.durability as D

    monkeypatch.setattr(D, "WAL_CHECKPOINT_BYTES", 64 << 10)
    monkeypatch.setattr(D, "WAL_IDLE_S", 0.02)
    log = OpLog(str(tmp_path))
    assert log.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
    blob = os.urandom(40_000)
    seqs = [log.append("push", {"stream": "S", "i": i}, blob, 1) for i in range(6)]
    log.wait(seqs[-1])
    deadline = time.monotonic() + 30
    while log.status()["wal_checkpoints"] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    st = log.status()
    assert st["wal_checkpoints"] >= 1 and st["commit_ms_max"] > 0
    # the frames were copied into the database file: a fresh reader sees every op without the WAL's help
    other = sqlite3.connect(log.db_path)
    busy, frames, done = other.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    other.close()
    assert busy == 0 and frames == done
    assert os.path.getsize(log.db_path) > 6 * 40_000
    more = log.append("push", {"stream": "S", "i": 6}, blob, 1)        # the writer goes on after it
    log.wait(more)
    log.close()
    again = OpLog(str(tmp_path))
    ops = list(again.ops_after(0))
    assert [o.meta["i"] for o in ops] == list(range(7)) and all(o.payload == blob for o in ops)
    again.close()
