"""Pipelined ingest (sketchql.service.producers): batches tagged X-Producer-Id / X-Producer-Seq are admitted
in sequence order whatever order they arrive in, a retried number is answered without applying the batch
again, a gap is refused with a 409 after a bounded wait, a refused batch fails its waiting successors fast,
and a kill -9 with several batches in flight loses nothing acknowledged (a client resending everything
without a 2xx gets each batch applied exactly once).  Real server processes where it matters."""
import threading
import time

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from sketchql.service.app import create_app
from sketchql.service.producers import Producers, parse_headers
from sketchql.service.errors import ApiError

from service_server import Server, arrow_body, make_batches

ARROW = "application/vnd.apache.arrow.stream"
DDL = "CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts"


def _headers(producer, seq):
    return {"content-type": ARROW, "x-producer-id": producer, "x-producer-seq": str(seq)}


def _post(url, body, producer, seq, out, key=None):
    with httpx.Client(base_url=url, timeout=60) as c:
        r = c.post("/streams/S/batches", content=body, headers=_headers(producer, seq))
    out[seq if key is None else key] = (r.status_code, r.json())


def test_out_of_order_arrivals_are_admitted_in_sequence_order_and_retries_are_not_applied_twice(tmp_path):
    bodies = [arrow_body(b) for b in make_batches(4, 300, seed=3)]   # times increase: out of order = late
    srv = Server(tmp_path / "data", ["--no-demo"])
    try:
        srv.wait_ready()
        assert srv.client.post("/streams", json={"sql": DDL}).status_code == 201
        out = {}
        late = [threading.Thread(target=_post, args=(srv.url, bodies[s], "p", s, out)) for s in (3, 2, 1)]
        for th in late:                        # 3, 2, 1 arrive first and wait for their turn
            th.start()
            time.sleep(0.15)
        assert not out, "a batch was answered before its predecessors arrived"
        _post(srv.url, bodies[0], "p", 0, out)
        for th in late:
            th.join(60)
        assert {s: out[s][0] for s in range(4)} == {0: 200, 1: 200, 2: 200, 3: 200}, out
        assert [out[s][1]["sequence"] for s in range(4)] == [0, 1, 2, 3]
        seqs = [out[s][1]["seq"] for s in range(4)]
        assert seqs == sorted(seqs), f"log order {seqs} is not the sequence order"
        st = srv.client.get("/streams/S").json()["stats"]
        assert st["tuples_in"] == 4 * 300

        # a retry of an admitted number (and two concurrent copies of a new one): applied once
        dup = srv.client.post("/streams/S/batches", content=bodies[1], headers=_headers("p", 1))
        assert dup.status_code == 200 and dup.json()["duplicate"] is True and dup.json()["accepted"] == 0
        nxt = arrow_body(make_batches(5, 300, seed=3)[4])
        both = {}
        ths = [threading.Thread(target=_post, args=(srv.url, nxt, "p", 4, both, i)) for i in range(2)]
        for th in ths:
            th.start()
        for th in ths:
            th.join(60)
        assert sorted(r[0] for r in both.values()) == [200, 200]
        assert sorted(bool(r[1].get("duplicate")) for r in both.values()) == [False, True]
        assert srv.client.get("/streams/S").json()["stats"]["tuples_in"] == 5 * 300
        prod = srv.client.get("/health").json()["producers"]
        assert prod["producers"] == 1 and prod["duplicates"] == 2
        # producers are independent; a new one starts at 0
        r = srv.client.post("/streams/S/batches", content=arrow_body(make_batches(6, 300, seed=3)[5]),
                            headers=_headers("other", 0))
        assert r.status_code == 200 and r.json()["accepted"] == 300
    finally:
        srv.stop()


def test_a_gap_is_refused_after_a_bounded_wait_and_a_refusal_fails_the_waiting_successors(tmp_path):
    b = make_batches(3, 50, seed=4)
    srv = Server(None, ["--no-demo", "--max-sequence-wait", "0.5"])
    try:
        srv.wait_ready()
        assert srv.client.post("/streams", json={"sql": DDL}).status_code == 201
        t = time.monotonic()
        r = srv.client.post("/streams/S/batches", content=arrow_body(b[1]), headers=_headers("g", 1))
        took = time.monotonic() - t
        assert r.status_code == 409 and r.json()["error"]["type"] == "sequence_gap", r.text
        assert r.json()["error"]["expected"] == 0 and 0.4 < took < 10
        r = srv.client.post("/streams/S/batches", content=arrow_body(b[1]), headers=_headers("g", 10_000))
        assert r.status_code == 409 and "window" in r.json()["error"]["message"]      # at once
        assert srv.client.get("/streams/S").json()["stats"]["tuples_in"] == 0

        # batch 0 admitted; batch 1 is refused (late); batch 2, waiting for 1, is answered 409 at once
        assert srv.client.post("/streams/S/batches", content=arrow_body(b[1]),
                               headers=_headers("g", 0)).status_code == 200
        out = {}
        waiting = threading.Thread(target=_post, args=(srv.url, arrow_body(b[2]), "g", 2, out))
        waiting.start()
        time.sleep(0.1)
        r = srv.client.post("/streams/S/batches", content=arrow_body(b[0]), headers=_headers("g", 1))
        assert r.status_code == 400 and r.json()["error"]["type"] == "LateTupleError"
        waiting.join(30)
        assert out[2][0] == 409 and "refused" in out[2][1]["error"]["message"]
        # the refused number is not consumed: resent (fixed), then the next one
        assert srv.client.post("/streams/S/batches", content=arrow_body(b[2]),
                               headers=_headers("g", 1)).status_code == 200
        assert srv.client.get("/streams/S").json()["stats"]["tuples_in"] == 100
        # header checks
        for h, msg in (({"x-producer-id": "g"}, "missing"), ({"x-producer-id": "a b", "x-producer-seq": "0"}, "1-128"),
                       ({"x-producer-id": "g", "x-producer-seq": "-1"}, "integer")):
            r = srv.client.post("/streams/S/batches", content=arrow_body(b[2]), headers={"content-type": ARROW, **h})
            assert r.status_code == 400 and r.json()["error"]["type"] == "bad_producer" and msg in r.text
    finally:
        srv.stop()


def test_sigkill_with_several_batches_in_flight_loses_nothing_acknowledged(tmp_path):
    data, rows, n = tmp_path / "data", 2000, 40
    batches = make_batches(n, rows, seed=11)
    bodies = [arrow_body(b) for b in batches]
    args = ["--no-demo", "--checkpoint-every-tuples", str(10 ** 9), "--checkpoint-interval", "3600"]
    srv = Server(data, args)
    srv.wait_ready()
    assert srv.client.post("/streams", json={"sql": DDL}).status_code == 201
    assert srv.client.post("/queries", json={"sql": "SELECT COUNT(*) AS n FROM S [RANGE 10 SECONDS]"}).status_code == 201
    acked, lock, nxt = set(), threading.Lock(), [0]

    def worker():                                   # 4 batches in flight, like a pipelined client
        with httpx.Client(base_url=srv.url, timeout=60) as c:
            while True:
                with lock:
                    i = nxt[0]
                    nxt[0] += 1
                if i >= n:
                    return
                try:
                    r = c.post("/streams/S/batches", content=bodies[i], headers=_headers("crash", i))
                except httpx.HTTPError:
                    return
                if r.status_code == 200:
                    with lock:
                        acked.add(i)
                if i == 8:                          # a checkpoint in the middle: restore + log replay
                    c.post("/admin/checkpoint")

    ths = [threading.Thread(target=worker) for _ in range(4)]
    for th in ths:
        th.start()
    deadline = time.monotonic() + 60
    while len(acked) < 20 and time.monotonic() < deadline:
        time.sleep(0.005)
    srv.kill9()
    for th in ths:
        th.join(60)
    assert 20 <= len(acked) < n, f"{len(acked)} acknowledged before the kill"

    srv = Server(data, args)
    try:
        h = srv.wait_ready()
        assert not h["recovery"]["errors"]
        tin = srv.client.get("/streams/S").json()["stats"]["tuples_in"]
        assert tin % rows == 0
        k = tin // rows                              # admitted in sequence order: the durable batches are 0..k-1
        assert max(acked) < k, f"acknowledged {sorted(acked)} but only {k} batches survived"
        # the client resends every batch it has no 2xx for (and, to be sure, all the others): each once
        dups = 0
        for i in range(n):
            r = srv.client.post("/streams/S/batches", content=bodies[i], headers=_headers("crash", i))
            assert r.status_code == 200, r.text
            dups += bool(r.json().get("duplicate"))
            assert bool(r.json().get("duplicate")) == (i < k)
        assert dups == k
        assert srv.client.get("/streams/S").json()["stats"]["tuples_in"] == n * rows
        assert srv.client.get("/queries/1/results", params={"since": 0, "limit": 1}).status_code == 200
    finally:
        srv.stop()


def test_producer_table_survives_a_clean_restart_through_the_checkpoint(tmp_path):
    b = make_batches(3, 20, seed=2)
    app = create_app(demo=False, data_dir=str(tmp_path), sync=False)
    with TestClient(app) as c:
        c.post("/streams", json={"sql": DDL})
        for i in range(2):
            assert c.post("/streams/S/batches", content=arrow_body(b[i]), headers=_headers("q", i)).status_code == 200
        assert c.post("/admin/checkpoint").status_code == 200
    app = create_app(demo=False, data_dir=str(tmp_path), sync=False)
    with TestClient(app) as c:
        r = c.post("/streams/S/batches", content=arrow_body(b[1]), headers=_headers("q", 1))
        assert r.json()["duplicate"] is True
        assert c.post("/streams/S/batches", content=arrow_body(b[2]), headers=_headers("q", 2)).json()["accepted"] == 20
        assert c.get("/streams/S").json()["stats"]["tuples_in"] == 60
        assert c.get("/limits").json()["max_sequence_wait_s"] == 10.0


def test_json_and_ndjson_batches_take_the_same_turns():
    c = TestClient(create_app(demo=False))
    c.post("/streams", json={"sql": "CREATE STREAM T (k INT) TIMESTAMP ts"})
    h = {"content-type": "application/x-ndjson", "x-producer-id": "n", "x-producer-seq": "0"}
    assert c.post("/streams/T/batches", content=b'{"k": 1, "ts": 1}', headers=h).json()["accepted"] == 1
    r = c.post("/streams/T/batches", json={"rows": [{"k": 1, "ts": 1}]}, headers={"x-producer-id": "n",
                                                                                 "x-producer-seq": "0"})
    assert r.json()["duplicate"] is True
    assert c.get("/streams/T").json()["stats"]["tuples_in"] == 1


def test_parse_headers_and_eviction():
    assert parse_headers(None, None) is None
    assert parse_headers("a-1", "17") == ("a-1", 17)
    with pytest.raises(ApiError):
        parse_headers("a", str(2 ** 63))
    p = Producers(max_producers=2, window=4, wait_s=0.1)
    p.record("a", 0)
    p.record("b", 0)
    p.record("c", 5)                         # a (least recently used, idle) is forgotten
    assert p.next_seq("a") is None and p.next_seq("c") == 6 and p.status()["evicted"] == 1
    p.restore({"x": 3, "y": 4, "z": 5})                     # a checkpoint of the older plain-table form
    snap = p.snapshot()
    assert len(snap["table"]) == 2 and set(snap["forgotten"]) == {"a", "b", "c", "x"}   # forgotten ids are recorded


def test_a_cancelled_request_keeps_its_turn_until_its_admission_is_over():
    """A request cancelled (server shutdown) while its batch is being admitted on the ingest thread: the
    admission finishes anyway, so a retry of the same number waits for it and is then a duplicate."""
    import asyncio

    from sketchql.service.batch_route import BatchIngest
    from sketchql.service.state import ServiceState

    st = ServiceState()
    st.execute_ddl("CREATE STREAM S (k INT) TIMESTAMP ts")
    ing = BatchIngest(st, st.limits)
    gate, entered = threading.Event(), threading.Event()
    real = st.admit

    def slow(*a, **kw):
        entered.set()
        gate.wait(10)
        return real(*a, **kw)

    st.admit = slow

    async def main():
        async def read_body(limit):
            return b'{"k": 1, "ts": 1.0}'

        first = asyncio.create_task(ing.ingest("S", read_body, "application/x-ndjson", ("p", "0")))
        await asyncio.get_running_loop().run_in_executor(None, entered.wait, 10)
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        retry = asyncio.create_task(ing.ingest("S", read_body, "application/x-ndjson", ("p", "0")))
        await asyncio.sleep(0.3)
        assert not retry.done(), "the retry went ahead while the first admission was still running"
        gate.set()
        return await asyncio.wait_for(retry, 10)

    try:
        r = asyncio.run(main())
        assert r["duplicate"] is True
        assert st.applier.wait_applied(1, 10) and st.engine.stream("S").tuples_in == 1
    finally:
        gate.set()
        ing.close()


def test_producer_window_max_producers_and_batches_per_request_flags():
    b = make_batches(6, 10, seed=8)
    srv = Server(None, ["--no-demo", "--producer-window", "2", "--max-producers", "2", "--max-batches-per-request",
                        "2", "--max-sequence-wait", "3"])
    try:
        srv.wait_ready()
        lim = srv.client.get("/limits").json()
        assert (lim["producer_window"], lim["max_producers"], lim["max_batches_per_request"]) == (2, 2, 2)
        assert srv.client.post("/streams", json={"sql": DDL}).status_code == 201
        t = time.monotonic()
        r = srv.client.post("/streams/S/batches", content=arrow_body(b[0]), headers=_headers("w", 2))
        assert r.status_code == 409 and "producer_window=2" in r.json()["error"]["message"]
        assert time.monotonic() - t < 2                          # refused at once, not after the 3 s wait
        r = srv.client.post("/streams/S/batches", content=arrow_body(b[0]), headers=_headers("w", 0))
        assert r.status_code == 200
        # a third producer evicts the least recently used idle one ("w"): its next batch is refused at once
        for i, p in enumerate(("x", "y")):
            assert srv.client.post("/streams/S/batches", content=arrow_body(b[1 + i]),
                                   headers=_headers(p, 0)).status_code == 200
        t = time.monotonic()
        r = srv.client.post("/streams/S/batches", content=arrow_body(b[3]), headers=_headers("w", 1))
        assert r.status_code == 409 and r.json()["error"]["type"] == "unknown_producer"
        assert time.monotonic() - t < 2
        assert srv.client.get("/health").json()["producers"]["evicted"] >= 1
    finally:
        srv.stop()
    for flag in ("--producer-window", "--max-producers", "--max-batches-per-request"):
        bad = Server(None, ["--no-demo", flag, "0"])
        assert bad.proc.wait(120) != 0 and f"{flag} must be >= 1" in bad.output()
        bad.stop()
