"""Several batches per request (``X-Arrow-Batches: each``): every record batch of the Arrow stream is a batch
of its own -- its own checks against the clock the batches before it leave, its own engine push -- and the
request is all or nothing.  Oracle: the same batches sent one per request (the single-batch path)."""
import numpy as np
import pyarrow as pa
from fastapi.testclient import TestClient

from sketchql.service.app import create_app
from sketchql.service.limits import Limits

from service_server import Server, arrow_body, make_batches

ARROW = "application/vnd.apache.arrow.stream"
DDL = "CREATE STREAM {s} (k INT, v DOUBLE) TIMESTAMP ts"
QUERY = "SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM {s} [RANGE 3 SECONDS SLIDE 1 SECONDS] GROUP BY k"


def multi(batches) -> bytes:
    """One Arrow IPC stream whose record batches are ``batches``."""
    tabs = [pa.table({k: pa.array(v) for k, v in b.items()}) for b in batches]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, tabs[0].schema) as w:
        for t in tabs:
            w.write_table(t)
    return sink.getvalue().to_pybytes()


def each(producer=None, seq=None):
    h = {"content-type": ARROW, "x-arrow-batches": "each"}
    if producer is not None:
        h.update({"x-producer-id": producer, "x-producer-seq": str(seq)})
    return h


def _rows(c, qid):
    r = c.get(f"/queries/{qid}/results", params={"since": 0, "limit": 10_000}).json()
    return sorted((x["sign"], x["at"], tuple(sorted(x["row"].items()))) for x in r["rows"])


def test_each_record_batch_is_pushed_like_a_batch_sent_alone():
    data = make_batches(9, 300, seed=4)
    c = TestClient(create_app(demo=False))
    ids = {}
    for s in ("M", "O"):
        assert c.post("/streams", json={"sql": DDL.format(s=s)}).status_code == 201
        ids[s] = c.post("/queries", json={"sql": QUERY.format(s=s)}).json()["id"]
    receipts = []
    for i in range(0, 9, 3):                                       # 3 requests of 3 batches
        r = c.post("/streams/M/batches", content=multi(data[i:i + 3]), headers=each())
        assert r.status_code == 200, r.text
        receipts.append(r.json())
    alone = []
    for b in data:                                                 # the oracle: one batch per request
        r = c.post("/streams/O/batches", content=arrow_body(b), headers={"content-type": ARROW})
        assert r.status_code == 200, r.text
        alone.append(r.json())
    parts = [p for r in receipts for p in r["batches"]]
    assert [p["accepted"] for p in parts] == [a["accepted"] for a in alone] == [300] * 9
    assert [p["clock"] for p in parts] == [a["clock"] for a in alone]
    assert [r["accepted"] for r in receipts] == [900] * 3
    assert [r["clock"] for r in receipts] == [alone[i]["clock"] for i in (2, 5, 8)]
    sm, so = c.get("/streams/M").json()["stats"], c.get("/streams/O").json()["stats"]
    assert (sm["tuples_in"], sm["batches"], sm["clock"]) == (so["tuples_in"], so["batches"], so["clock"]) \
        == (2700, 9, alone[-1]["clock"])
    rows = _rows(c, ids["M"])
    assert rows and rows == _rows(c, ids["O"])


def test_a_refused_record_batch_refuses_the_whole_request_and_keeps_its_number():
    data = make_batches(4, 50, seed=5)
    c = TestClient(create_app(demo=False))
    c.post("/streams", json={"sql": DDL.format(s="S")})
    late = dict(data[3], ts=data[0]["ts"].copy())                  # record batch 1 goes back in time
    r = c.post("/streams/S/batches", content=multi([data[1], late, data[2]]), headers=each("p", 0))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["type"] == "LateTupleError" and err["batch_index"] == 1 and "record batch 1" in err["message"]
    st = c.get("/streams/S").json()["stats"]
    assert st["tuples_in"] == 0 and st["clock"] is None            # the valid record batch 0 was not admitted
    assert 'sketchql_stream_rejected_rows_by_reason_total{stream="S",reason="late"} 150' in c.get("/metrics").text
    # its number was not consumed: the fixed request goes under the same number, a retry is a duplicate
    r = c.post("/streams/S/batches", content=multi(data[:3]), headers=each("p", 0))
    assert r.status_code == 200 and r.json()["accepted"] == 150
    r = c.post("/streams/S/batches", content=multi(data[:3]), headers=each("p", 0))
    assert r.status_code == 200 and r.json()["duplicate"] is True and r.json()["accepted"] == 0
    assert c.get("/streams/S").json()["stats"]["tuples_in"] == 150
    # a null INT in the last record batch: same, with its position, column and row
    bad = {"k": [None] + data[3]["k"][1:].tolist(), "v": data[3]["v"], "ts": data[3]["ts"] + 10.0}
    r = c.post("/streams/S/batches", content=multi([data[3], bad]), headers=each("p", 1))
    err = r.json()["error"]
    assert r.status_code == 400 and (err["batch_index"], err["column_name"], err["row"]) == (1, "k", 0)
    assert c.get("/streams/S").json()["stats"]["tuples_in"] == 150


def test_limits_and_wrong_uses_answer_4xx():
    data = make_batches(5, 10, seed=6)
    c = TestClient(create_app(demo=False, limits=Limits(max_batches_per_request=3, max_batch_rows=10)))
    c.post("/streams", json={"sql": DDL.format(s="S")})
    c.post("/streams", json={"sql": "CREATE TABLE T (k INT, v DOUBLE, ts DOUBLE)"})
    r = c.post("/streams/S/batches", content=multi(data[:4]), headers=each())
    assert r.status_code == 413 and r.json()["error"]["limit"] == "max_batches_per_request"
    big = {k: np.concatenate([data[0][k], data[1][k]]) for k in data[0]}       # 20 rows > max_batch_rows
    r = c.post("/streams/S/batches", content=multi([data[0], big]), headers=each())
    assert r.status_code == 413 and r.json()["error"]["batch_index"] == 1
    r = c.post("/streams/S/batches", json={"rows": [{"k": 1, "v": 1.0, "ts": 1.0}]},
               headers={"x-arrow-batches": "each"})
    assert r.status_code == 400 and r.json()["error"]["header"] == "X-Arrow-Batches"
    r = c.post("/streams/S/batches", content=multi(data[:2]), headers={"content-type": ARROW, "x-arrow-batches": "all"})
    assert r.status_code == 400 and "'each'" in r.json()["error"]["message"]
    r = c.post("/streams/T/batches", content=multi(data[:2]), headers=each())
    assert r.status_code == 400 and "table" in r.json()["error"]["message"]
    assert c.get("/streams/S").json()["stats"]["tuples_in"] == 0
    # "one" (the default): the whole stream is one batch, as without the header
    r = c.post("/streams/S/batches", content=multi(data[:2]), headers={"content-type": ARROW, "x-arrow-batches": "one"})
    assert r.status_code == 413 and r.json()["error"]["limit"] == "max_batch_rows"
    r = c.post("/streams/S/batches", content=multi(data[:3]), headers=each())
    assert r.status_code == 200 and [p["accepted"] for p in r.json()["batches"]] == [10, 10, 10]


def test_kill9_replays_each_record_batch_as_its_own_push(tmp_path):
    data = make_batches(8, 400, seed=7)
    args = ["--no-demo", "--checkpoint-every-tuples", str(10 ** 9), "--checkpoint-interval", "3600"]
    srv = Server(tmp_path / "data", args)
    srv.wait_ready()
    c = srv.client
    c.post("/streams", json={"sql": DDL.format(s="S")})
    qid = c.post("/queries", json={"sql": QUERY.format(s="S")}).json()["id"]
    for i in range(0, 8, 4):
        assert c.post("/streams/S/batches", content=multi(data[i:i + 4]), headers=each("k", i // 4)).status_code == 200
    before = (c.get("/streams/S").json()["stats"], _rows(c, qid))
    srv.kill9()
    srv = Server(tmp_path / "data", args)
    try:
        h = srv.wait_ready()
        assert not h["recovery"]["errors"] and h["recovery"]["replayed_tuples"] == 3200
        st = srv.client.get("/streams/S").json()["stats"]
        assert (st["tuples_in"], st["batches"], st["clock"]) == (3200, 8, before[0]["clock"])
        assert _rows(srv.client, qid) == before[1]
        r = srv.client.post("/streams/S/batches", content=multi(data[4:]), headers=each("k", 1))
        assert r.json()["duplicate"] is True
    finally:
        srv.stop()
