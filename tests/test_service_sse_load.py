"""Results without loss over a real server: an SSE client that disconnects and resumes with Last-Event-ID
gets every row exactly once (the rows equal the cursor reads and the in-process engine); nothing is dropped
while nobody reads; a bounded loopback load test (a few thousand requests, stops by itself) has no errors and
loses no tuple.  Plus the precision/budget API against the engine's own figures."""
import json
import threading

import httpx
import numpy as np
import pytest

from service_server import Server, arrow_body, make_batches
from test_service_helpers import client
from sketchql.service.state import ServiceState

DDL = "CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts"
Q = "SELECT k, v FROM S [RANGE 5 SECONDS] WHERE v > 0.3"


def _events(resp, want_rows):
    """Parse SSE 'rows' events until ``want_rows`` rows were read; returns (rows, last id)."""
    rows, last, data, eid = [], None, None, None
    for line in resp.iter_lines():
        if line.startswith("id: "):
            eid = line[4:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
        elif line == "" and data is not None:
            assert data["missed"] == 0
            assert [r["seq"] for r in data["rows"]] == list(range(data["since"], data["next"]))
            rows += data["rows"]
            last, data = eid, None
            if len(rows) >= want_rows:
                return rows, last
    return rows, last


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("sse") / "data", ["--no-demo"])
    s.wait_ready()
    yield s
    s.stop()


def test_sse_resume_with_last_event_id_exactly_once(srv):
    c = srv.client
    assert c.post("/streams", json={"sql": DDL}).status_code == 201
    qid = c.post("/queries", json={"sql": Q}).json()["id"]
    batches = make_batches(8, 200, seed=4)
    ref = ServiceState(seed=7)
    ref.execute_ddl(DDL)
    ref.register(Q)
    for b in batches[:4]:                       # nobody reads yet: the rows wait in the buffer
        assert c.post("/streams/S/batches", content=arrow_body(b),
                      headers={"content-type": "application/vnd.apache.arrow.stream"}).status_code == 200
        ref.push("S", dict(b), 200)
    first_total = c.get(f"/queries/{qid}/results").json()["total"]
    got = []
    with httpx.Client(base_url=srv.url, timeout=30) as sc:
        with sc.stream("GET", f"/queries/{qid}/stream", params={"limit": 50}) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            rows, last = _events(resp, first_total // 2)          # then drop the connection mid-stream
        got += rows
        for b in batches[4:]:
            c.post("/streams/S/batches", json={"columns": {k: v.tolist() for k, v in b.items()}})
            ref.push("S", dict(b), 200)
        total = c.get(f"/queries/{qid}/results").json()["total"]
        with sc.stream("GET", f"/queries/{qid}/stream", headers={"Last-Event-ID": last},
                       params={"limit": 50}) as resp:
            rows, _ = _events(resp, total - len(got))
        got += rows
    assert [r["seq"] for r in got] == list(range(total))          # every row exactly once, in order
    log = ref.logs[1].read(0, 10**6)["rows"]
    assert [(r["sign"], r["at"], r["row"]) for r in got] == [(r["sign"], r["at"], r["row"]) for r in log]


def test_sse_ends_when_the_query_is_deleted():
    c = client()
    c.post("/streams", json={"sql": DDL})
    qid = c.post("/queries", json={"sql": Q}).json()["id"]
    c.post("/streams/S/batches", json={"rows": [{"k": 1, "v": 0.9, "ts": 1.0}]})
    r = c.get(f"/queries/{qid}/stream", params={"max_events": 1})
    assert r.status_code == 200 and "event: rows" in r.text and "id: 1" in r.text
    c.delete(f"/queries/{qid}")
    assert c.get(f"/queries/{qid}/stream").status_code == 404


def test_bounded_loopback_load(srv):
    c = srv.client
    assert c.post("/streams", json={"sql": "CREATE STREAM L (k INT, v DOUBLE) TIMESTAMP ts"}).status_code == 201
    qid = c.post("/queries", json={"sql": "SELECT COUNT(*) AS n FROM L [RANGE 1000000 SECONDS]"}).json()["id"]
    n_writers, per_writer, rows = 4, 200, 20
    errors, acked = [], [0] * n_writers
    lock = threading.Lock()
    clock = [0.0]

    def writer(w):
        with httpx.Client(base_url=srv.url, timeout=30) as wc:
            for i in range(per_writer):
                with lock:                      # times increase across writers (no late tuples)
                    t0 = clock[0]
                    clock[0] += 1.0
                    body = {"columns": {"k": list(range(rows)), "v": [0.5] * rows,
                                        "ts": list(np.linspace(t0, t0 + 0.9, rows))}}
                    r = wc.post("/streams/L/batches", json=body)
                if r.status_code != 200:
                    errors.append(r.text)
                else:
                    acked[w] += rows

    def reader():
        with httpx.Client(base_url=srv.url, timeout=30) as rc:
            for i in range(200):
                for path in (f"/queries/{qid}/results?limit=10", "/streams/L", "/metrics"):
                    r = rc.get(path)
                    if r.status_code != 200:
                        errors.append(r.text)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(n_writers)] + \
        [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors[:3]
    assert sum(acked) == n_writers * per_writer * rows
    assert c.get("/streams/L").json()["stats"]["tuples_in"] == sum(acked)
    snap = c.get(f"/queries/{qid}/snapshot").json()
    assert snap["rows"][0]["n"] == sum(acked)                    # the query saw every tuple
    d = c.get("/durability").json()
    assert d["durable_seq"] == d["last_seq"] and d["commits"] <= d["committed_ops"]


def test_precision_budget_and_control_api_match_the_engine():
    c = client()
    c.post("/streams", json={"sql": DDL})
    qid = c.post("/queries", json={"sql": Q}).json()["id"]
    eng = c.app.state.sketchql.engine
    q = eng.queries[0]
    r = c.patch(f"/queries/{qid}/contract", json={"error": 0.05, "confidence": 0.9, "on_miss": "exact"})
    assert r.status_code == 200 and r.json()["error"] == 0.05
    assert (q.knobs()["error"], q.knobs()["confidence"], q.knobs()["on_miss"]) == (0.05, 0.9, "exact")
    assert c.patch(f"/queries/{qid}/contract", json={"error": None}).json()["error"] is None
    assert q.knobs()["error"] is None
    r = c.patch(f"/queries/{qid}", json={"weight": 3.0, "active": False})
    assert r.status_code == 200 and (q.weight, q.active) == (3.0, False)
    assert c.patch("/engine/budgets", json={"cpu_units_per_s": 500.0}).json()["cpu_units_per_s"] == 500.0
    assert eng.budgets["cpu_units_per_s"] == 500.0
    tables = c.get("/control").json()["tables"]
    assert {(t["kind"], t["name"]) for t in tables} == {(t.kind, t.name) for t in eng.controls.tables()}
    assert c.get(f"/control/query/q{qid}").json()["knobs"]["weight"]["value"] == 3.0
    r = c.patch("/control/stream/S", json={"allowed_lateness": 2.0, "sample_rate": 5})     # one bad: none set
    assert r.status_code == 422 and eng.stream("S").knobs()["allowed_lateness"] == 0.0
    p = c.get(f"/queries/{qid}/precision").json()
    if hasattr(q, "precision"):
        assert p["available"] is True and p["precision"]["exact"] == q.precision()["exact"]
    else:
        assert p["available"] is False and p["precision"] is None
    a = c.get("/allocator").json()
    assert a["available"] is (getattr(eng, "allocator", None) is not None)
    plan = c.get(f"/queries/{qid}/plan").json()
    assert plan["query"] == qid and plan["plan"]
