"""Asynchronous apply of HTTP batches (sketchql.service.applier): a 2xx means validated and durable, the
engine applies the batch afterwards in log order.  Checked here with the apply held back by a gate:
every refusal still happens before the answer (types, lateness and the time-jump bound against the clock
*including queued batches*), reads wait for what was acknowledged before them (read-your-writes), other
mutations apply in log order, the queue is bounded, an apply error is reported and not lost, a crash with
batches still queued loses none of them, and a checkpoint taken meanwhile includes them."""
import logging
import threading

import numpy as np
import pytest
from fastapi.testclient import TestClient

from sketchql.service.app import create_app
from sketchql.service.durability import OpLog
from sketchql.service.limits import Limits
from sketchql.service.state import ServiceState

ARROW = "application/vnd.apache.arrow.stream"


def arrow(cols) -> bytes:
    import pyarrow as pa

    t = pa.table({k: pa.array(v) for k, v in cols.items()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def batch(k, ts):
    return {"k": np.asarray(k, dtype=np.int64), "ts": np.asarray(ts, dtype=np.float64)}


class Gate:
    """Holds the apply thread before each engine push until opened."""

    def __init__(self, state):
        self.open_ = threading.Event()
        self.entered = threading.Event()
        orig = state.applier._apply

        def gated(item):
            self.entered.set()
            self.open_.wait(30)
            orig(item)

        state.applier._apply = gated

    def open(self):
        self.open_.set()


def _app(tmp_path=None, **kw):
    app = create_app(demo=False, data_dir=None if tmp_path is None else str(tmp_path), sync=False, **kw)
    return app, app.state.sketchql


def test_ack_before_apply_and_reads_wait_for_acknowledged_batches():
    app, st = _app()
    with TestClient(app) as c:
        c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).raise_for_status()
        qid = c.post("/queries", json={"sql": "SELECT k FROM S [NOW]"}).json()["id"]
        gate = Gate(st)
        r = c.post("/streams/S/batches", content=arrow(batch([1, 2, 3], [0.5, 1.0, 1.5])),
                   headers={"content-type": ARROW})
        assert r.status_code == 200 and r.json()["accepted"] == 3 and r.json()["clock"] == 1.5
        gate.entered.wait(10)
        assert st.engine.stream("S").tuples_in == 0 and st.applier.pending + 1 == st.applier.admitted - \
            st.applier.applied                                       # acknowledged, not applied yet
        got = {}

        def read():
            got["res"] = c.get(f"/queries/{qid}/results?since=0&limit=10").json()
            got["stream"] = c.get("/streams/S").json()

        th = threading.Thread(target=read)
        th.start()
        th.join(0.5)
        assert th.is_alive(), "a read must wait for the batches acknowledged before it"
        gate.open()
        th.join(30)
        assert sorted(r["row"]["k"] for r in got["res"]["rows"]) == [1, 2, 3]
        assert got["stream"]["stats"]["tuples_in"] == 3


def test_every_refusal_happens_before_the_answer_against_the_queued_clock():
    app, st = _app(limits=Limits(max_time_jump=10.0))
    with TestClient(app) as c:
        c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).raise_for_status()
        gate = Gate(st)
        post = lambda cols: c.post("/streams/S/batches", content=arrow(cols), headers={"content-type": ARROW})
        assert post(batch([1], [100.0])).status_code == 200
        gate.entered.wait(10)
        second = _posting(lambda: post(batch([2], [105.0])))      # queued: the engine clock is still unset
        _until(lambda: st.applier.admitted == 2)                  # (answered once batch 1 is applied)
        late = post(batch([3], [104.0]))                          # older than the queued clock 105
        assert late.status_code == 400 and "older than the stream clock 105" in late.json()["error"]["message"]
        jump = post(batch([4], [116.0]))                          # > 105 + 10, though the engine has no clock
        assert jump.status_code == 400 and jump.json()["error"]["type"] == "TimeJumpError"
        bad = c.post("/streams/S/batches", content=arrow({"k": ["x"], "ts": [106.0]}), headers={"content-type": ARROW})
        assert bad.status_code == 400 and "'k'" in bad.json()["error"]["message"]
        frac = post({"k": np.array([1.5]), "ts": np.array([106.0])})
        assert frac.status_code == 400 and "INT" in frac.json()["error"]["message"]
        # refused with the queue full and batch 1 still held: none of them waited for room
        assert st.applier.applied == 0 and st.applier.pending == 1 and not second.done()
        gate.open()
        assert second.result(30).status_code == 200
        s = c.get("/streams/S").json()["stats"]
        assert s["tuples_in"] == 2 and s["clock"] == 105.0
        reasons = s["rejected_rows_by_reason"]
        assert reasons == {"late": 1, "time_jump": 1, "invalid": 2}
        assert st.applier.error_count == 0


def _posting(fn):
    """Run ``fn`` (a request) on a thread; the future of its answer."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(max_workers=1)
    fut = pool.submit(fn)
    pool.shutdown(wait=False)
    return fut


def _until(cond, timeout=10.0):
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.005)


def test_a_2xx_comes_after_the_previous_batch_is_applied_so_reads_wait_for_one_apply_at_most():
    """At most one acknowledged batch waits to be applied: batch n is answered only once batch n-1 is
    applied (both durable already), so a read waits for at most one apply."""
    app, st = _app()
    with TestClient(app) as c:
        c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).raise_for_status()
        qid = c.post("/queries", json={"sql": "SELECT k FROM S [NOW]"}).json()["id"]
        seen = []                                     # (number acknowledged, batches applied then)
        real_ack = st.applier.acknowledged
        st.applier.acknowledged = lambda n: (seen.append((n, st.applier.applied)), real_ack(n))[1]
        gate = Gate(st)
        post = lambda i: c.post("/streams/S/batches", content=arrow(batch([i], [float(i)])),
                                headers={"content-type": ARROW})
        assert post(1).status_code == 200                 # nothing before it: answered while held
        gate.entered.wait(10)
        second = _posting(lambda: post(2))
        _until(lambda: st.applier.admitted == 2)          # validated, logged, queued ...
        import time
        time.sleep(0.3)
        assert not second.done(), "batch 2 must not be answered while batch 1 is not applied"
        assert st.applier.acked == 1 and st.applier.pending == 1
        gate.open()
        assert second.result(30).status_code == 200
        assert [n for n, _ in seen] == [1, 2] and seen[0][1] == 0
        assert all(applied >= n - 1 for n, applied in seen)   # each answered once the one before was applied
        rows = c.get(f"/queries/{qid}/results?since=0&limit=10").json()["rows"]
        assert [r["row"]["k"] for r in rows] == [1, 2]


def test_other_mutations_apply_in_log_order(tmp_path):
    app, st = _app(tmp_path)
    with TestClient(app) as c:
        c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).raise_for_status()
        gate = Gate(st)
        assert c.post("/streams/S/batches", content=arrow(batch([1, 2], [1.0, 2.0])),
                      headers={"content-type": ARROW}).status_code == 200
        gate.entered.wait(10)
        out = {}
        th = threading.Thread(target=lambda: out.update(hb=c.post("/streams/S/heartbeat", json={"ts": 5.0})))
        th.start()
        th.join(0.5)
        assert th.is_alive(), "a heartbeat waits for the queued batch to be applied first"
        gate.open()
        th.join(30)
        assert out["hb"].status_code == 200 and out["hb"].json()["clock"] == 5.0
        late = c.post("/streams/S/batches", content=arrow(batch([3], [4.0])), headers={"content-type": ARROW})
        assert late.status_code == 400
        kinds = [o.kind for o in st.store.ops_after(0)]
        assert kinds == ["ddl", "push", "heartbeat"]


def test_apply_queue_is_bounded():
    st = ServiceState(max_pending=2)
    st.execute_ddl("CREATE STREAM S (k INT) TIMESTAMP ts")
    gate = Gate(st)
    done = []

    def admit(i):
        st.admit("S", batch([i], [float(i)]), 1)
        done.append(i)

    first = threading.Thread(target=admit, args=(0,))
    first.start()
    first.join(10)
    gate.entered.wait(10)                       # item 0 is being applied (held), the queue is empty
    ths = [threading.Thread(target=admit, args=(i,)) for i in (1, 2, 3)]
    for th in ths:
        th.start()
        th.join(0.3)
    assert st.applier.pending == 2 and sorted(done) == [0, 1, 2], "the third waiting admission must block"
    gate.open()
    for th in ths:
        th.join(30)
    with st.lock:
        assert st.engine.stream("S").tuples_in == 4 and sorted(done) == [0, 1, 2, 3]


def test_an_apply_error_is_reported_loudly_and_the_next_batches_apply(caplog):
    app, st = _app()
    with TestClient(app) as c:
        c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).raise_for_status()
        real = st.engine.push
        calls = []

        def flaky(name, cols, **kw):
            calls.append(len(cols))
            if len(calls) == 2:
                raise RuntimeError("simulated engine bug")
            return real(name, cols, **kw)

        st.engine.push = flaky
        with caplog.at_level(logging.ERROR, logger="sketchql.service"):
            for i in range(3):
                r = c.post("/streams/S/batches", content=arrow(batch([i], [float(i)])), headers={"content-type": ARROW})
                assert r.status_code == 200
            health = c.get("/health").json()
        assert health["status"] == "degraded" and health["apply"]["errors"] == 1
        assert "simulated engine bug" in health["apply"]["last_errors"][0]["error"]
        assert any("simulated engine bug" in rec.getMessage() for rec in caplog.records)
        assert 'reason="apply_error"' in c.get("/metrics").text
        assert c.get("/streams/S").json()["stats"]["tuples_in"] == 2      # batches 0 and 2


def test_queued_batches_survive_a_crash(tmp_path):
    st = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False), max_pending=8)
    st.execute_ddl("CREATE STREAM S (k INT) TIMESTAMP ts")
    st.register("SELECT k FROM S [NOW]")
    gate = Gate(st)                               # never opened: the process "dies" with batches queued
    bodies = [batch(np.arange(i * 5, i * 5 + 5), np.arange(i * 5, i * 5 + 5) * 0.1) for i in range(4)]
    seqs = [st.admit("S", b, 5, arrow(b))["seq"] for b in bodies]
    st.store.wait(seqs[-1])                       # acknowledged = durable
    gate.entered.wait(10)
    assert st.engine.stream("S").tuples_in == 0
    st.store.close()                              # no checkpoint, no drain: like kill -9
    again = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    info = again.recover()
    assert not info["errors"] and info["replayed_tuples"] == 20
    rows = again.results(1, 0, 100)["rows"]
    assert sorted(r["row"]["k"] for r in rows) == list(range(20))
    assert again.engine.stream("S").tuples_in == 20
    again.store.close()


def test_a_checkpoint_taken_while_batches_are_queued_includes_them(tmp_path):
    st = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False), max_pending=8)
    st.execute_ddl("CREATE STREAM S (k INT) TIMESTAMP ts")
    gate = Gate(st)
    for i in range(3):
        st.admit("S", batch([i], [float(i)]), 1)
    gate.entered.wait(10)
    out = {}
    th = threading.Thread(target=lambda: out.update(ck=st.checkpoint()))
    th.start()
    th.join(0.3)
    assert th.is_alive()                          # the snapshot waits for the queued batches
    gate.open()
    th.join(30)
    assert out["ck"]["seq"] == st.store.last_seq
    st.store.close()
    again = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    info = again.recover()
    assert info["replayed_ops"] == 0 and again.engine.stream("S").tuples_in == 3
    again.store.close()


@pytest.mark.parametrize("fmt", ["ndjson", "arrow"])
def test_acknowledged_results_equal_the_in_process_engine(fmt):
    rng = np.random.default_rng(5)
    batches = []
    for i in range(12):
        ts = np.sort(rng.uniform(i, i + 1, 50))
        batches.append({"k": rng.integers(0, 7, 50).astype(np.int64), "ts": ts})
    sql = "SELECT k, COUNT(*) AS n FROM S [RANGE 3 SECONDS] GROUP BY k"
    app, st = _app()
    with TestClient(app) as c:
        c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).raise_for_status()
        qid = c.post("/queries", json={"sql": sql}).json()["id"]
        for b in batches:
            if fmt == "arrow":
                body, ct = arrow(b), ARROW
            else:
                body = "\n".join(f'{{"k": {k}, "ts": {t!r}}}' for k, t in zip(b["k"].tolist(), b["ts"].tolist()))
                body, ct = body.encode(), "application/x-ndjson"
            assert c.post("/streams/S/batches", content=body, headers={"content-type": ct}).status_code == 200
        res = c.get(f"/queries/{qid}/results?since=0&limit=10000").json()
    want = _sync_rows(batches, sql)
    assert len(want) > 50
    assert [(r["sign"], r["at"], r["row"]["k"], r["row"]["n"]) for r in res["rows"]] == want


def _sync_rows(batches, sql):
    """The rows of the synchronous path (ServiceState.push: engine push then collect) on the same batches."""
    st = ServiceState(seed=7)
    st.execute_ddl("CREATE STREAM S (k INT) TIMESTAMP ts")
    qid = st.register(sql)["id"]
    for b in batches:
        st.push("S", dict(b), len(b["ts"]))
    return [(r["sign"], r["at"], r["row"]["k"], r["row"]["n"]) for r in st.results(qid, 0, 10000)["rows"]]


def test_http_backpressure_waits_for_room_without_blocking_the_server():
    app, st = _app()
    with TestClient(app) as c:
        c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).raise_for_status()
        gate = Gate(st)
        post = lambda i: c.post("/streams/S/batches", content=arrow(batch([i], [float(i)])),
                                headers={"content-type": ARROW})
        assert post(0).status_code == 200
        gate.entered.wait(10)                     # batch 0 is being applied (held)
        k = st.applier.max_pending
        queued = []
        for i in range(1, k + 1):                 # one at a time: untagged batches are admitted on arrival
            queued.append(_posting(lambda i=i: post(i)))
            _until(lambda i=i: st.applier.pending == i)
        # the queue holds k (answered once batch 0 is applied)
        last = _posting(lambda: post(k + 1))
        import time
        time.sleep(0.5)
        assert not last.done() and st.applier.pending == k and st.applier.admitted == k + 1, \
            "a full queue makes the next batch wait"
        assert c.get("/limits").json()["max_batch_rows"] > 0      # the event loop still serves others
        assert c.get("/health").json()["apply"]["pending"] == k    # /health does not wait for the queue
        gate.open()
        assert all(f.result(30).status_code == 200 for f in queued + [last])
        assert c.get("/streams/S").json()["stats"]["tuples_in"] == k + 2


def test_engine_validate_gives_the_verdict_push_gives_and_changes_nothing():
    """Admission checks batches with the engine's public ``Engine.validate``: the same batch push accepts
    (typed, time-sorted), the same refusal push raises, and the engine is left as it was."""
    from sketchql.engine import Engine
    from sketchql.errors import SketchQLError

    def fresh():
        e = Engine(seed=1)
        e.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts; CREATE TABLE T (k INT, name STRING)")
        e.push("S", {"k": [1], "v": [0.5], "ts": [10.0]})
        return e

    e = fresh()
    good = {"k": np.array([3, 4]), "v": np.array([1, 2]), "ts": np.array([12.0, 11.0])}
    b = e.validate("S", good)
    assert b.ts.tolist() == [11.0, 12.0] and b.columns["k"].tolist() == [4, 3]
    assert b.columns["v"].dtype == np.float64 and e.stream("S").tuples_in == 1 and e.stream("S").clock == 10.0
    cases = [{"k": [1], "v": [0.1], "ts": [9.0]},               # late against the stream clock 10
             {"k": ["x"], "v": [0.1], "ts": [12.0]},            # type
             {"k": [1], "ts": [12.0]},                          # missing column
             {"k": [1], "v": [0.1], "ts": [float("nan")]}]      # NaN time
    for bad in cases:
        with pytest.raises(SketchQLError) as by_validate:
            e.validate("S", bad)
        other = fresh()
        with pytest.raises(SketchQLError) as by_push:
            other.push("S", bad)
        assert type(by_validate.value) is type(by_push.value) and str(by_validate.value) == str(by_push.value)
    assert e.stream("S").tuples_in == 1 and e.stream("S").rejected_batches == 0
    # a caller's own clock (batches it accepted but has not pushed yet) moves the lateness bound
    with pytest.raises(SketchQLError):
        e.validate("S", {"k": [1], "v": [0.1], "ts": [11.0]}, clock=20.0)
    assert e.validate("T", {"k": [1], "name": ["a"]}).columns["name"].tolist() == ["a"]
    assert not e.input_buffered("S")
    e.controls.set("stream", "S", "slack", 5.0)
    assert e.input_buffered("S") and len(e.validate("S", {"k": [1], "v": [0.1], "ts": [1.0]})) == 1


def test_the_background_dashboard_sampler_waits_for_a_quiet_moment_during_an_ingest():
    """The dashboard's background sampler holds ``state.lock`` for a frame; it no longer takes it while
    batches are being admitted or applied (only when the apply queue has been idle, or after
    ``max_defer``), so it does not stall an ingest every second.  A page asking for a frame still gets one."""
    import time

    from sketchql.service.dashboard_data import DashboardFeed

    st = ServiceState(max_pending=4)
    st.execute_ddl("CREATE STREAM S (k INT) TIMESTAMP ts")
    feed = DashboardFeed(st, interval=0.01, max_defer=3600)
    feed.start()
    try:
        _until(lambda: feed.seq >= 1)                  # the first frame at once
        gate = Gate(st)
        st.admit("S", batch([1], [1.0]), 1)
        st.admit("S", batch([2], [2.0]), 1)            # one applying (held), one waiting
        gate.entered.wait(10)
        seq = feed.seq
        time.sleep(0.4)                               # 40 intervals with the ingest in progress
        assert feed.seq == seq, "the background sampler must not take the lock while batches wait"
        gate.open()
        _until(lambda: st.applier.applied == 2)
        _until(lambda: feed.seq >= seq + 2)            # once the queue is quiet, sampling resumes
        assert feed.latest(max_age=0)["seq"] > seq + 1  # and a page asking for a frame gets a new one
    finally:
        feed.stop()
    capped = DashboardFeed(st, interval=0.01, max_defer=0.05)
    st.applier.last_active = time.monotonic() + 3600     # "busy" for an hour: the cap still samples
    capped.start()
    try:
        _until(lambda: capped.seq >= 3)
    finally:
        capped.stop()
