"""Defects of the second user audit of the service (issue 12), each through HTTP: non-ASCII digits in
X-Producer-Seq, forgotten producers' resends, unbounded DDL summaries, the result buffer flag after a
restart, retain_changes below the buffer, request headers, SSE clients, and the minor ones (receipt clock
of a shed batch, successors of a batch refused before its turn, estimate values, /demo batches after a
restart, DROP SUMMARY's answer)."""
import json
import socket
import threading
import time

import numpy as np
import pytest
from fastapi.testclient import TestClient

from test_service_helpers import client
from sketchql.service import Limits, create_app

JSON = {"content-type": "application/json"}


def _push(c, stream, rows, pid=None, seq=None):
    h = {} if pid is None else {"x-producer-id": pid, "x-producer-seq": str(seq)}
    return c.post(f"/streams/{stream}/batches", json={"rows": rows}, headers=h)


def _count(c, qid):
    """The COUNT(*) of a one-row aggregate query, from its snapshot."""
    r = c.get(f"/queries/{qid}/snapshot")
    assert r.status_code == 200, r.text
    rows = r.json()["rows"]
    return rows[0]["n"] if rows else 0


# -- D1: X-Producer-Seq with non-ASCII digits -----------------------------------------------------------
@pytest.mark.parametrize("seq", ["\u00b2", "\u00b9", "1\u00b3"])          # str.isdigit() is True for them
def test_non_ascii_digit_sequence_number_is_400_bad_producer(seq):
    c = client()
    assert c.post("/streams", json={"sql": "CREATE STREAM A (k INT) TIMESTAMP ts"}).status_code == 201
    r = c.post("/streams/A/batches", json={"rows": [{"k": 1, "ts": 1}]},
               headers={"x-producer-id": "p", "x-producer-seq": seq.encode("latin-1")})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["type"] == "bad_producer"
    from sketchql.service.errors import ApiError
    from sketchql.service.producers import parse_headers
    with pytest.raises(ApiError) as ei:                # (under uvicorn the ValueError was a 500)
        parse_headers("p", seq)
    assert ei.value.status == 400


# -- D2: a forgotten producer's batches ---------------------------------------------------------------
def _d2_setup(c):
    assert c.post("/streams", json={"sql": "CREATE STREAM A (k INT) TIMESTAMP ts"}).status_code == 201
    q = c.post("/queries", json={"sql": "SELECT COUNT(*) AS n FROM A [RANGE 1000]"})
    assert q.status_code == 201
    return q.json()["id"]


def test_forgotten_producer_resend_is_409_unknown_producer_not_applied_twice():
    c = client(Limits(max_producers=2, max_sequence_wait_s=10.0))
    qid = _d2_setup(c)
    assert _push(c, "A", [{"k": 1, "ts": 1}], "A", 0).json()["accepted"] == 1
    assert _push(c, "A", [{"k": 2, "ts": 2}], "B", 0).status_code == 200
    assert _push(c, "A", [{"k": 3, "ts": 3}], "C", 0).status_code == 200       # A is forgotten
    t0 = time.monotonic()
    r = _push(c, "A", [{"k": 1, "ts": 4}], "A", 0)                            # A's resend of its acked batch
    assert r.status_code == 409 and r.json()["error"]["type"] == "unknown_producer", r.text
    r = _push(c, "A", [{"k": 1, "ts": 4}], "A", 1)                            # and its next one: at once
    assert r.status_code == 409 and r.json()["error"]["type"] == "unknown_producer"
    assert time.monotonic() - t0 < 5.0
    assert _count(c, qid) == 3
    st = c.get("/health").json()["producers"]
    assert st["forgotten"] == 1 and st["evicted"] == 1 and st["unknown_producer"] == 2
    assert c.get("/limits").json()["max_forgotten_producers"] == 100_000


def test_forgotten_record_is_bounded_and_the_oldest_dropped():
    c = client(Limits(max_producers=1, max_forgotten_producers=2))
    _d2_setup(c)
    for i, pid in enumerate("PQRS"):
        assert _push(c, "A", [{"k": 1, "ts": i + 1}], pid, 0).status_code == 200
    st = c.get("/health").json()["producers"]
    assert st["forgotten"] == 2 and st["forgotten_dropped"] == 1 and st["evicted"] == 3
    assert _push(c, "A", [{"k": 1, "ts": 9}], "Q", 1).json()["error"]["type"] == "unknown_producer"
    assert _push(c, "A", [{"k": 1, "ts": 9}], "R", 1).json()["error"]["type"] == "unknown_producer"


@pytest.mark.parametrize("checkpoint", [False, True])
def test_forgotten_producers_survive_restart_and_a_smaller_max_producers_forgets_into_the_record(
        tmp_path, checkpoint):
    d = str(tmp_path / "data")
    app = create_app(demo=False, data_dir=d, limits=Limits(max_producers=2))
    c = TestClient(app)
    qid = _d2_setup(c)
    for i, pid in enumerate("ABC"):                                          # A forgotten (limit 2)
        assert _push(c, "A", [{"k": 1, "ts": i + 1}], pid, 0).status_code == 200
    if checkpoint:
        assert c.post("/admin/checkpoint").status_code == 200
    app.state.sketchql.applier.close()
    app.state.sketchql.store.close()
    app = create_app(demo=False, data_dir=d, limits=Limits(max_producers=1))  # B forgotten by the restart
    c = TestClient(app)
    for pid in "AB":
        r = _push(c, "A", [{"k": 1, "ts": 9}], pid, 0)
        assert r.status_code == 409 and r.json()["error"]["type"] == "unknown_producer", (pid, r.text)
    assert _push(c, "A", [{"k": 1, "ts": 9}], "C", 0).json()["duplicate"] is True
    assert _count(c, qid) == 3
    app.state.sketchql.applier.close()
    app.state.sketchql.store.close()


# -- D4: one summary limit for DDL and loads --------------------------------------------------------------
def test_create_summary_ddl_is_bounded_atomically_by_max_summaries():
    c = client(Limits(max_summaries=3))
    assert c.post("/streams", json={"sql": "CREATE STREAM A (k INT, j INT) TIMESTAMP ts"}).status_code == 201
    ddl = "CREATE SUMMARY s{} ON A (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)"
    assert c.post("/streams", json={"sql": ddl.format(1) + ";" + ddl.format(2)}).status_code == 201
    r = c.post("/streams", json={"sql": ddl.format(3) + ";" + ddl.format(4)})     # 4 > 3: nothing created
    assert r.status_code == 422, r.text
    e = r.json()["error"]
    assert e["limit"] == "max_summaries" and e["maximum"] == 3 and "max_summaries" in e["message"]
    names = sorted(s["name"] for s in c.get("/summaries").json()["summaries"])
    assert names == ["s1", "s2"]
    assert c.post("/streams", json={"sql": ddl.format(3)}).status_code == 201
    assert c.post("/streams", json={"sql": ddl.format(4)}).status_code == 422
    assert c.get("/limits").json()["max_summaries"] == 3


def test_loaded_summaries_count_the_created_ones(tmp_path):
    from sketchql.summaries import CountSketch
    from sketchql.spark.summary_file import encode_summary

    c = client(Limits(max_summaries=2, summary_roots=(str(tmp_path),)))
    assert c.post("/streams", json={"sql": "CREATE STREAM A (k INT) TIMESTAMP ts; CREATE SUMMARY s1 ON A (k) "
                                           "WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)"}).status_code == 201
    for i in (1, 2):
        p = tmp_path / f"f{i}.sqs"
        p.write_bytes(encode_summary(CountSketch(d=3, w=64, seed=i), {"name": f"f{i}"}))
    assert c.post("/summaries/load", json={"path": str(tmp_path / "f1.sqs")}).status_code == 201
    r = c.post("/summaries/load", json={"path": str(tmp_path / "f2.sqs")})
    assert r.status_code == 422 and r.json()["error"]["limit"] == "max_summaries", r.text


# -- minor: DROP SUMMARY's answer; estimate values of an INT attribute; receipt clock of a shed batch -------
def test_drop_summary_ddl_answers_200_with_what_was_dropped():
    c = client()
    r = c.post("/streams", json={"sql": "CREATE STREAM A (k INT) TIMESTAMP ts; CREATE SUMMARY s1 ON A (k) "
                                        "WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)"})
    assert r.status_code == 201 and r.json()["created"] == ["A", "s1"]
    r = c.post("/streams", json={"sql": "DROP SUMMARY s1"})
    assert r.status_code == 200, r.text
    assert r.json()["created"] == [] and r.json()["dropped"] == ["s1"]


@pytest.mark.parametrize("value", ["abc", "1e400", "1.5", "nan", "9223372036854775808", "-9223372036854775809",
                                   "99999999999999999999999"])                   # (the last three: not int64)
def test_estimate_value_the_int_attribute_cannot_hold_is_422(value):
    c = client()
    assert c.post("/streams", json={"sql": "CREATE STREAM A (k INT) TIMESTAMP ts; CREATE SUMMARY s1 ON A (k) "
                                           "WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)"}).status_code == 201
    assert _push(c, "A", [{"k": 1, "ts": 1}, {"k": 1, "ts": 2}]).status_code == 200
    r = c.get("/summaries/s1/estimate", params={"value": value})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["parameter"] == "value"
    r = c.get("/summaries/s1/estimate", params={"value": "1"})
    assert r.status_code == 200 and r.json()["estimates"][0]["estimate"] >= 2 - 1e-9, r.text
    for edge in ("9223372036854775807", "-9223372036854775808"):              # int64's own bounds: answered
        assert c.get("/summaries/s1/estimate", params={"value": edge}).status_code == 200


def test_receipt_clock_is_the_stream_clock_when_every_row_is_shed():
    c = client()
    assert c.post("/streams", json={"sql": "CREATE STREAM A (k INT) TIMESTAMP ts"}).status_code == 201
    assert _push(c, "A", [{"k": 1, "ts": 3}]).status_code == 200
    r = c.patch("/control/stream/A", json={"shed_rate": 0.9})
    assert r.status_code == 200, r.text
    for t in range(4, 24):                        # 1-row batches: most are shed whole
        rec = _push(c, "A", [{"k": 1, "ts": t}]).json()
        stats = c.get("/streams/A").json()["stats"]
        assert rec["clock"] == stats["clock"] == t, (rec, stats)
    assert stats["tuples_in"] - stats["tuples_kept"] >= 10


def test_demo_batches_survive_a_restart(tmp_path):
    d = str(tmp_path / "data")
    app = create_app(demo=True, seed=3, data_dir=d, demo_options={"max_tuples": 2000})
    st, feeder = app.state.sketchql, app.state.sketchql.demo
    for _ in range(4):
        feeder.step()
    before = TestClient(app).get("/demo").json()
    assert before["batches"] > 0
    st.store.close()
    app = create_app(demo=True, seed=3, data_dir=d, demo_options={"max_tuples": 2000})
    after = TestClient(app).get("/demo").json()
    assert (after["batches"], after["pushed"]) == (before["batches"], before["pushed"])
    app.state.sketchql.store.close()


# -- minor: successors of a producer's batch refused before its turn fail fast ---------------------------
def _producers_known(srv) -> int:
    return srv.client.get("/health").json()["producers"]["producers"]


def test_successors_of_a_batch_refused_before_its_turn_fail_fast(tmp_path):
    """Batch 0 of a producer is refused before its turn (body stalled: 408; too big: 413) while batch 1
    waits for it, or (``late``) before batch 1 arrives: batch 1 is a 409 at once, not after the wait."""
    from service_server import Server

    srv = Server(None, ["--no-demo", "--body-read-timeout", "1", "--max-sequence-wait", "8"])
    try:
        srv.wait_ready()
        assert srv.client.post("/streams", json={"sql": "CREATE STREAM A (k INT) TIMESTAMP ts"}).status_code == 201
        body = json.dumps({"rows": [{"ts": 1, "k": 1}]}).encode()
        for case, pid, late in (("stalled", "P", False), ("too_big", "Q", False), ("stalled", "R", True),
                                ("too_big", "S", True)):
            res = {}

            def seq1():
                t = time.monotonic()
                r = srv.client.post("/streams/A/batches", json={"rows": [{"ts": 2, "k": 1}]},
                                    headers={"x-producer-id": pid, "x-producer-seq": "1"})
                res["r"], res["s"] = r, time.monotonic() - t
            th = threading.Thread(target=seq1)
            if not late:                               # batch 1 waits for its turn before batch 0 is refused
                known = _producers_known(srv)
                th.start()
                deadline = time.monotonic() + 30
                while _producers_known(srv) == known:
                    assert time.monotonic() < deadline, "batch 1 never reached the producer table"
                    time.sleep(0.02)
            if case == "stalled":                      # seq 0's body stalls: 408 after 1 s
                sock = socket.create_connection(("127.0.0.1", srv.port))
                sock.sendall(b"POST /streams/A/batches HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
                             b"x-producer-id: %s\r\nx-producer-seq: 0\r\ncontent-length: %d\r\n\r\n"
                             % (pid.encode(), len(body)) + body[:10])
                sock.settimeout(30)
                assert b" 408 " in sock.recv(300)[:20]
                sock.close()
            else:                                      # seq 0 is over max_body_bytes: 413
                big = b'{"rows": [' + b'{"ts": 3, "k": 1},' * 500_000 + b'{"ts": 3, "k": 1}]}'
                try:
                    r = srv.client.post("/streams/A/batches", content=big,
                                        headers={"x-producer-id": pid, "x-producer-seq": "0", **JSON})
                    assert r.status_code == 413
                except Exception:                      # the server may close before reading it all
                    pass
            if late:                                   # batch 1 comes after the refusal
                th.start()
            th.join(30)
            r = res["r"]
            assert r.status_code == 409 and r.json()["error"]["type"] == "sequence_gap", (case, late, r.text)
            assert "refused" in r.json()["error"]["message"] and res["s"] < 5.0, (case, late, res["s"])
            ok = srv.client.post("/streams/A/batches", content=body,
                                 headers={"x-producer-id": pid, "x-producer-seq": "0", **JSON})
            assert ok.status_code == 200 and ok.json()["accepted"] == 1
    finally:
        srv.stop()


# -- D5: a restart with another --result-buffer-rows ---------------------------------------------------------
@pytest.mark.parametrize("checkpoint", [False, True])
def test_restored_queries_take_the_current_result_buffer_size(tmp_path, checkpoint):
    d = str(tmp_path / "data")

    def start(rows):
        app = create_app(demo=False, data_dir=d, limits=Limits(max_retained_rows=rows))
        return app, TestClient(app)

    def stop(app):
        app.state.sketchql.applier.close()
        app.state.sketchql.store.close()

    app, c = start(100)
    assert c.post("/streams", json={"sql": "CREATE STREAM P (k INT) TIMESTAMP ts"}).status_code == 201
    qid = c.post("/queries", json={"sql": "SELECT k FROM P [RANGE 1000]"}).json()["id"]
    assert _push(c, "P", [{"k": i, "ts": 1 + i * 0.01} for i in range(150)]).status_code == 200
    if checkpoint:
        assert c.post("/admin/checkpoint").status_code == 200
    stop(app)
    app, c = start(40)                                   # shrunk: the 40 newest kept, the rest missed
    r = c.get(f"/queries/{qid}/results", params={"since": 0, "limit": 1000}).json()
    assert (r["buffer_rows"], r["missed"], r["total"], r["first_available"]) == (40, 110, 150, 110)
    assert [x["seq"] for x in r["rows"]] == list(range(110, 150))
    assert [x["row"]["k"] for x in r["rows"]] == list(range(110, 150))
    assert c.post("/admin/checkpoint").status_code == 200     # (else the next start replays the rows anew)
    stop(app)
    app, c = start(1000)                                 # grown: holds up to 1000 from now on
    assert _push(c, "P", [{"k": i, "ts": 10 + i * 0.01} for i in range(500)]).status_code == 200
    r = c.get(f"/queries/{qid}/results", params={"since": 0, "limit": 5000}).json()
    assert (r["buffer_rows"], r["missed"], r["total"], len(r["rows"])) == (1000, 110, 650, 540)
    assert c.get(f"/queries/{qid}").json()["knobs"]["retain_changes"] >= 1000
    stop(app)


# -- D6: the engine's retain_changes never below the result buffer ---------------------------------------
def test_one_large_operation_loses_no_rows_while_the_buffer_has_room():
    c = client()                                         # buffer 200 000 rows; engine default retention 100 000
    assert c.post("/streams", json={"sql": "CREATE STREAM B (k INT, v DOUBLE) TIMESTAMP ts"}).status_code == 201
    q = c.post("/queries", json={"sql": "SELECT b1.v, b2.v FROM B [RANGE 1000] b1, B [RANGE 1000] b2 "
                                        "WHERE b1.k = b2.k"}).json()["id"]
    assert c.get(f"/queries/{q}").json()["knobs"]["retain_changes"] >= 200_000
    assert _push(c, "B", [{"ts": 1 + i * 1e-6, "k": 7, "v": 1.0} for i in range(400)]).status_code == 200
    r = c.get(f"/queries/{q}/results", params={"since": 0, "limit": 1}).json()
    assert (r["missed"], r["first_available"], r["total"]) == (0, 0, 160_000)     # 400 x 400 pairs


def test_retain_changes_below_the_result_buffer_is_refused():
    c = client(Limits(max_retained_rows=500))
    assert c.post("/streams", json={"sql": "CREATE STREAM B (k INT) TIMESTAMP ts"}).status_code == 201
    q = c.post("/queries", json={"sql": "SELECT k FROM B [RANGE 10]"}).json()["id"]
    r = c.patch(f"/control/query/q{q}", json={"retain_changes": 499})
    assert r.status_code == 422, r.text
    e = r.json()["error"]
    assert e["knob"] == "retain_changes" and e["minimum"] == 500 and "result buffer" in e["message"]
    assert c.patch(f"/control/query/q{q}", json={"retain_changes": 500}).status_code == 200
    assert c.patch(f"/control/query/q{q}", json={"retain_changes": None}).status_code == 200


# -- D9: SSE clients bounded, woken only by their own query ----------------------------------------------
def test_notifier_wakes_only_the_query_that_grew_and_bounds_subscribers():
    import asyncio

    from sketchql.service.results import Notifier

    async def main():
        n = Notifier(max_subscribers=3)
        a1, a2, b = n.subscribe(1), n.subscribe(1), n.subscribe(2)
        assert n.subscribe(3) is None and n.refused == 1 and n.count == 3
        n.notify([1])
        await asyncio.wait_for(a1.wait(), 1)
        await asyncio.wait_for(a2.wait(), 1)
        await asyncio.sleep(0.01)
        assert not b.is_set()
        n.notify(None)
        await asyncio.wait_for(b.wait(), 1)
        n.unsubscribe(a1)
        assert n.subscribe(3) is not None and n.count == 3
    asyncio.run(main())


def test_sse_clients_past_max_sse_clients_get_503_json_and_other_queries_do_not_wake_them():
    from service_server import Server

    srv = Server(None, ["--no-demo", "--max-sse-clients", "3"])
    socks = []
    try:
        srv.wait_ready()
        assert srv.client.get("/limits").json()["max_sse_clients"] == 3
        assert srv.client.post("/streams", json={"sql": "CREATE STREAM P (k INT) TIMESTAMP ts"}).status_code == 201
        q1 = srv.client.post("/queries", json={"sql": "SELECT k FROM P [RANGE 5]"}).json()["id"]
        q2 = srv.client.post("/queries", json={"sql": "SELECT k FROM P [RANGE 5] WHERE k < 0"}).json()["id"]
        for _ in range(3):
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(f"GET /queries/{q2}/stream HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            s.settimeout(10)
            assert b" 200 " in s.recv(200)[:20]
            socks.append(s)
        r = srv.client.get(f"/queries/{q1}/stream")
        assert r.status_code == 503 and r.json()["error"]["limit"] == "max_sse_clients", r.text
        assert srv.client.get("/health").json()["sse"]["clients"] == 3
        woken = lambda: srv.client.get("/health").json()["sse"]["wakeups"]     # noqa: E731 (streams' wake-ups)
        w0 = woken()
        for t in range(5):                          # q1 grows, q2 does not: q2's streams are not woken
            assert srv.client.post("/streams/P/batches", json={"rows": [{"k": t, "ts": t + 1}]}).status_code == 200
        time.sleep(0.5)                             # (a notifier waking everyone: 15 wake-ups by now)
        assert woken() == w0
        assert srv.client.post("/streams/P/batches", json={"rows": [{"k": -1, "ts": 6}]}).status_code == 200
        deadline = time.monotonic() + 10            # q2 grows: each of its 3 streams woken, once
        while woken() < w0 + 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert woken() == w0 + 3
        for s in socks:
            assert b"event: rows" in _read_until(s, b"event: rows", 10)
        for s in socks:
            s.close()
        socks = []
        deadline, t = time.monotonic() + 20, 100     # slots come back when the clients leave (q2 rows: the
        while srv.client.get("/health").json()["sse"]["clients"] and time.monotonic() < deadline:   # write fails)
            srv.client.post("/streams/P/batches", json={"rows": [{"k": -1, "ts": t}]})
            t += 1
            time.sleep(0.2)
        assert srv.client.get("/health").json()["sse"]["clients"] == 0
    finally:
        for s in socks:
            s.close()
        srv.stop()


# -- D8: request heads bounded (bytes, time), connections bounded ---------------------------------------
def _recv_all(s, timeout=10.0) -> bytes:
    s.settimeout(timeout)
    got = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                return got
            got += d
    except (socket.timeout, ConnectionResetError):
        return got


def test_request_heads_and_connections_are_bounded():
    from service_server import Server

    srv = Server(None, ["--no-demo", "--max-header-bytes", "4096", "--header-read-timeout", "1.5",
                        "--max-connections", "8"])
    socks = []
    try:
        srv.wait_ready()
        lim = srv.client.get("/limits").json()
        assert (lim["max_header_bytes"], lim["header_read_timeout_s"], lim["max_connections"]) == (4096, 1.5, 8)
        # a large header: 431 JSON and closed, long before the client has sent it all
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sent = 0
        try:
            for _ in range(1000):                       # up to 64 MB
                s.sendall(b"a" * 65536)
                sent += 65536
        except (BrokenPipeError, ConnectionResetError):
            pass
        got = _recv_all(s)
        s.close()
        assert got.startswith(b"HTTP/1.1 431 "), got[:100]
        assert json.loads(got.split(b"\r\n\r\n", 1)[1])["error"]["limit"] == "max_header_bytes"
        assert sent < 64 * 65536
        # headers just under the limit pass (a 3000-byte header)
        r = srv.client.get("/health", headers={"x-pad": "p" * 3000})
        assert r.status_code == 200
        # a trickled head: 408 after the header timeout, connection closed
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
        t = time.monotonic()
        closed_at = None
        for i in range(20):
            time.sleep(0.25)
            try:
                s.sendall(b"X-a%d: b\r\n" % i)
            except (BrokenPipeError, ConnectionResetError):
                closed_at = time.monotonic() - t
                break
        got = _recv_all(s, 5.0)
        s.close()
        assert got.startswith(b"HTTP/1.1 408 "), got[:100]
        assert closed_at is None or closed_at < 4.0
        # a connection that sends nothing is closed after the header timeout too
        s = socket.create_connection(("127.0.0.1", srv.port))
        t = time.monotonic()
        got = _recv_all(s, 10.0)
        assert got.startswith(b"HTTP/1.1 408 ") and time.monotonic() - t < 5.0
        s.close()
        # connections: past max_connections a request is answered 503
        for _ in range(10):
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(f"GET /queries/1/stream HTTP/1.1\r\nHost: x\r\n\r\n".encode())  # 404, kept alive
            socks.append(s)
        time.sleep(0.3)
        statuses = []
        for s in socks:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        time.sleep(0.5)
        for s in socks:
            s.settimeout(2)
            try:
                statuses.append(s.recv(65536))
            except socket.timeout:
                statuses.append(b"")
        assert any(b" 503 " in x for x in statuses), [x[:40] for x in statuses]
        i = next(i for i, x in enumerate(statuses) if b" 503 " in x)
        busy = statuses[i] + _recv_all(socks[i], 3.0)        # the body may come in a later segment
        assert b"content-type: application/json" in busy.lower(), busy[:200]
        err = json.loads(busy.split(b"\r\n\r\n", 1)[1])["error"]
        assert (err["type"], err["limit"], err["value"]) == ("too_many_connections", "max_connections", 8)
        for s in socks:
            s.close()
        socks = []
        deadline = time.monotonic() + 10.0                            # the slots come back (the server
        while srv.client.get("/health").status_code != 200:          # sees the closes when it runs)
            assert time.monotonic() < deadline, "connection slots did not come back"
            time.sleep(0.1)
    finally:
        for s in socks:
            s.close()
        srv.stop()


# -- hK review: blank lines between requests do not dodge the header read timeout ------------------------
def _read_response(s) -> bytes:
    """One whole response (head and content-length body) from socket ``s``."""
    s.settimeout(10)
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, body = got.split(b"\r\n\r\n", 1)
    n = int([ln.split(b":")[1] for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length")][0])
    while len(body) < n:
        body += s.recv(65536)
    assert len(body) == n, (head, body)
    return head + b"\r\n\r\n" + body


def test_blank_lines_between_requests_do_not_hold_a_connection_past_the_header_timeout():
    from service_server import Server

    srv = Server(None, ["--no-demo", "--header-read-timeout", "1"])
    try:
        srv.wait_ready()
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n\r\n")        # a CRLF before the next request
        assert b" 200 " in _read_response(s)[:20]
        s.sendall(b"\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\n")        # blank lines are still allowed
        assert b" 200 " in _read_response(s)[:20]
        t = time.monotonic()
        got, closed_at = b"", None
        while time.monotonic() - t < 8.0:                                 # uvicorn's keep-alive: 5 s
            try:
                s.sendall(b"\r\n")
                s.settimeout(0.25)
                d = s.recv(65536)
                got += d
                if not d:
                    closed_at = time.monotonic() - t
                    break
            except socket.timeout:
                pass
            except (BrokenPipeError, ConnectionResetError):
                closed_at = time.monotonic() - t
                break
        s.close()
        assert closed_at is not None and closed_at < 3.5, closed_at
        assert got.startswith(b"HTTP/1.1 408 "), got[:100]
        assert json.loads(got.split(b"\r\n\r\n", 1)[1])["error"]["limit"] == "header_read_timeout_s"
    finally:
        srv.stop()


# -- hK review: the engine's automatic indexes do not count toward max_summaries --------------------------
def test_automatic_indexes_do_not_count_toward_max_summaries(tmp_path):
    from sketchql.summaries import CountSketch
    from sketchql.spark.summary_file import encode_summary

    c = client(Limits(max_summaries=2, summary_roots=(str(tmp_path),)))
    assert c.post("/streams", json={"sql": "CREATE STREAM A (k INT) TIMESTAMP ts; "
                                           "CREATE STREAM B (k INT) TIMESTAMP ts"}).status_code == 201
    r = c.post("/queries", json={"sql": "SELECT A.k, A.ts, B.ts FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k "
                                        "WITH PREFERENCE desc A.k WITHIN 3 PROBES PER TUPLE"})
    assert r.status_code == 201, r.text
    names = sorted(s["name"] for s in c.get("/summaries").json()["summaries"])
    assert names == ["_auto_A_k", "_auto_B_k"]                    # two, the limit: none of them counted
    ddl = "CREATE SUMMARY {} ON B (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)"
    assert c.post("/streams", json={"sql": ddl.format("s1")}).status_code == 201
    p = tmp_path / "f1.sqs"
    p.write_bytes(encode_summary(CountSketch(d=3, w=64, seed=1), {"name": "f1"}))
    assert c.post("/summaries/load", json={"path": str(p)}).status_code == 201, "the 2nd user summary"
    r = c.post("/streams", json={"sql": ddl.format("s2")})            # the 3rd: refused, counting 3, not 5
    assert r.status_code == 422 and r.json()["error"]["value"] == 3, r.text
    assert c.delete("/summaries/f1").status_code == 200
    assert c.post("/streams", json={"sql": ddl.format("s2")}).status_code == 201
    r = c.post("/summaries/load", json={"path": str(p)})
    assert r.status_code == 422 and r.json()["error"]["value"] == 3, r.text
    for name in ("_auto_C", "_AUTO_b_k"):                             # the prefix is the engine's
        r = c.post("/streams", json={"sql": ddl.format(name)})
        assert r.status_code == 400 and r.json()["error"]["type"] == "reserved_name", r.text
    assert c.post("/summaries/load", json={"path": str(p), "as": "_auto_A_k"}).status_code == 409


def test_refusing_a_new_producers_first_batch_records_it_bounded():
    import asyncio

    from sketchql.service.errors import ApiError
    from sketchql.service.producers import Producers

    async def main():
        p = Producers(max_producers=2, wait_s=5.0)
        p.refuse("N", 3)                               # not its first batch: nothing to record
        assert p.status()["producers"] == 0
        p.refuse("N", 0)
        assert p.status()["producers"] == 1
        t = time.monotonic()
        with pytest.raises(ApiError) as ei:
            await p.turn("N", 1)
        assert ei.value.status == 409 and "refused" in str(ei.value.message) and time.monotonic() - t < 1.0
        turn = await p.turn("N", 0)                    # its resend takes the turn
        assert not turn.duplicate
        p.refuse("M", 0)                               # the table is bounded: N busy, M in, then
        assert p.status()["producers"] == 2
        p.refuse("O", 0)                               # M (idle) forgotten for O, N busy stays
        st = p.status()
        assert st["producers"] == 2 and st["evicted"] == 1
    asyncio.run(main())


# -- hK review: the SSE streams of a failed query end -----------------------------------------------------
def _read_until(s, marker: bytes, timeout: float) -> bytes:
    s.settimeout(0.2)
    got, deadline = b"", time.monotonic() + timeout
    while marker not in got and time.monotonic() < deadline:
        try:
            d = s.recv(65536)
            if not d:
                break
            got += d
        except socket.timeout:
            pass
    return got


def test_sse_streams_of_a_failed_query_get_its_rows_then_end_and_free_their_slots():
    from service_server import Server

    srv = Server(None, ["--no-demo", "--max-sse-clients", "2"])
    socks = []
    try:
        srv.wait_ready()
        assert srv.client.post("/streams", json={"sql": "CREATE STREAM P (k INT) TIMESTAMP ts"}).status_code == 201
        q = srv.client.post("/queries", json={"sql": "SELECT k FROM P [RANGE 100]"}).json()["id"]
        assert srv.client.patch(f"/control/query/q{q}", json={"max_rows_per_step": 3}).status_code == 200
        assert srv.client.post("/streams/P/batches", json={"rows": [{"k": 1, "ts": 1}, {"k": 2, "ts": 2}]}
                               ).status_code == 200
        for _ in range(2):                                # the slots: both taken
            s = socket.create_connection(("127.0.0.1", srv.port))
            s.sendall(f"GET /queries/{q}/stream HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert b"event: rows" in _read_until(s, b"event: rows", 10)
            socks.append(s)
        assert srv.client.get(f"/queries/{q}/stream").status_code == 503
        r = srv.client.post("/streams/P/batches", json={"rows": [{"k": i, "ts": 3} for i in range(10)]})
        assert r.status_code == 200, r.text
        info = srv.client.get(f"/queries/{q}").json()
        assert info["state"] == "failed" and "max_rows_per_step" in info["error"], info
        listed = next(x for x in srv.client.get("/queries").json()["queries"] if x["id"] == q)
        assert (listed["state"], listed["error"]) == ("failed", info["error"])
        for s in socks:                                   # woken by the failure: end with the error, closed
            got = _read_until(s, b"event: end", 10)
            assert b"event: end" in got, got[-300:]
            end = json.loads(got.split(b"event: end\n", 1)[1].split(b"data: ", 1)[1].split(b"\n", 1)[0])
            assert end["state"] == "failed" and end["error"] == info["error"]
            s.close()
        socks = []
        deadline = time.monotonic() + 10
        while srv.client.get("/health").json()["sse"]["clients"]:
            assert time.monotonic() < deadline, "the failed query's SSE slots did not come back"
            time.sleep(0.05)
        # a stream opened on the failed query later: its rows, then the end, at once
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(f"GET /queries/{q}/stream?since=0 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        got = _read_until(s, b"event: end", 10)
        s.close()
        assert b'"k":1' in got and b'"k":2' in got and b"event: end" in got, got[-300:]
    finally:
        for s in socks:
            s.close()
        srv.stop()


# -- hK review: the engine moves the clock of a shed batch (no service-side heartbeat), live and on replay ----
@pytest.mark.parametrize("checkpoint", [False, True])
def test_shed_batches_move_the_clock_live_and_after_a_restart(tmp_path, checkpoint):
    d = str(tmp_path / "data")
    app = create_app(demo=False, data_dir=d)
    c = TestClient(app)
    assert c.post("/streams", json={"sql": "CREATE STREAM A (k INT) TIMESTAMP ts"}).status_code == 201
    q = c.post("/queries", json={"sql": "SELECT COUNT(*) AS n FROM A [RANGE 5]"}).json()["id"]
    assert _push(c, "A", [{"k": 1, "ts": 1}]).status_code == 200
    assert c.patch("/control/stream/A", json={"shed_rate": 0.9}).status_code == 200
    if checkpoint:
        assert c.post("/admin/checkpoint").status_code == 200
    for t in range(2, 30):
        assert _push(c, "A", [{"k": 1, "ts": t}, {"k": 2, "ts": t + 0.5}]).json()["clock"] == t + 0.5
    before = (c.get("/streams/A").json()["stats"], c.get(f"/queries/{q}").json()["clock"], _count(c, q))
    app.state.sketchql.applier.close()
    app.state.sketchql.store.close()
    app = create_app(demo=False, data_dir=d)
    c = TestClient(app)
    after = (c.get("/streams/A").json()["stats"], c.get(f"/queries/{q}").json()["clock"], _count(c, q))
    assert before[0]["clock"] == after[0]["clock"] == 29.5 and before[1:] == after[1:] and before[1] == 29.5
    assert before[0]["tuples_in"] - before[0]["tuples_kept"] >= 20
    app.state.sketchql.applier.close()
    app.state.sketchql.store.close()
