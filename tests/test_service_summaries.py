"""/summaries: load a summary written the way Spark writes it (a .sqs file or a summary
store), built here in-process without Spark; HTTP estimates equal the in-process ones;
bad paths are refused clearly; live CREATE SUMMARY indexes answer too."""
import os

import numpy as np
import pytest

from test_service_helpers import client
from sketchql.index import SummaryDeclaration, StreamIndex
from sketchql.service import Limits
from sketchql.spark.store import StorePublisher
from sketchql.spark.summary_file import encode_summary
from sketchql.summaries import CountSketch


@pytest.fixture()
def data():
    rng = np.random.default_rng(11)
    keys = rng.zipf(1.4, 20_000) % 500
    ts = np.sort(rng.uniform(0, 100, keys.size))
    return keys, ts


def _sketch(keys):
    return CountSketch(d=5, w=256, seed=3).update(keys)


def test_load_sqs_file_and_estimate_equals_in_process(tmp_path, data):
    keys, _ = data
    cs = _sketch(keys)
    path = tmp_path / "cs_item.sqs"
    path.write_bytes(encode_summary(cs, {"name": "cs_item", "column": "item", "rows": int(keys.size)}))
    c = client(Limits(summary_roots=(str(tmp_path),)))
    r = c.post("/summaries/load", json={"path": str(path)})
    assert r.status_code == 201, r.text
    info = r.json()
    assert info["name"] == "cs_item" and info["kind"] == "countsketch" and info["meta"]["rows"] == keys.size
    values = [0, 1, 2, 7, 499, 12345]
    r = c.get("/summaries/cs_item/estimate", params=[("value", str(v)) for v in values] + [("confidence", "0.9")])
    assert r.status_code == 200, r.text
    est = r.json()["estimates"]
    assert [e["value"] for e in est] == values
    assert [e["estimate"] for e in est] == cs.estimate(np.array(values)).astype(float).tolist()
    assert all(e["error_bound"] == pytest.approx(cs.error_bound(0.9)) for e in est)
    exact = np.bincount(keys, minlength=13000)
    inside = [abs(e["estimate"] - exact[v]) <= e["error_bound"] for e, v in zip(est, values)]
    assert sum(inside) >= len(values) - 1
    assert [s["name"] for s in c.get("/summaries").json()["summaries"]] == ["cs_item"]
    # a plain count sketch has no time
    r = c.get("/summaries/cs_item/estimate", params={"value": 1, "t_from": 0})
    assert r.status_code == 400
    assert c.delete("/summaries/cs_item").status_code == 200
    assert c.get("/summaries/cs_item").status_code == 404


def test_load_store_with_index_and_time_ranges(tmp_path, data):
    keys, ts = data
    ix = StreamIndex(SummaryDeclaration("s_item", "Sales", "item", granularity=10.0, rate=2, depth=3))
    ix.ingest(keys, ts)
    cs = _sketch(keys)
    pub = StorePublisher(str(tmp_path / "store"))
    pub.publish("s_item", encode_summary(ix, {"name": "s_item"}), {"name": "s_item"}, batch_id=None)
    pub.publish("cs_item", encode_summary(cs, {"name": "cs_item"}), {"name": "cs_item"}, batch_id=None)
    c = client(Limits(summary_roots=(str(tmp_path),)))
    r = c.post("/summaries/load", json={"path": str(tmp_path / "store")})
    assert r.status_code == 400 and r.json()["error"]["type"] == "ambiguous_summary"
    assert r.json()["error"]["choices"] == ["cs_item", "s_item"]
    r = c.post("/summaries/load", json={"path": "file://" + str(tmp_path / "store"), "name": "s_item"})
    assert r.status_code == 201, r.text
    assert r.json()["kind"] == "index"
    values = [0, 1, 3, 42]
    for t_from, t_to in ((None, None), (20.0, 65.5), (95.0, 100.0)):
        params = [("value", str(v)) for v in values]
        if t_from is not None:
            params += [("t_from", str(t_from)), ("t_to", str(t_to))]
        r = c.get("/summaries/s_item/estimate", params=params)
        assert r.status_code == 200, r.text
        tf = -np.inf if t_from is None else t_from
        tt = np.inf if t_to is None else t_to
        exp = ix.estimate(np.array(values), tf, tt)
        bound = ix.error_bound(np.array(values), tf, tt, 0.95)
        got = r.json()["estimates"]
        assert [e["estimate"] for e in got] == exp.tolist()
        assert [e["error_bound"] for e in got] == pytest.approx(bound.tolist())
    r = c.get("/summaries/s_item/estimate", params={"value": 1, "t_from": 5, "t_to": 5})
    assert r.status_code == 400 and r.json()["error"]["parameter"] == "t_from"
    r = c.post("/summaries/load", json={"path": str(tmp_path / "store"), "name": "nope"})
    assert r.status_code == 404 and "cs_item" in r.json()["error"]["message"]


def test_bad_summary_paths_are_refused_clearly(tmp_path, data):
    c = client(Limits(max_summaries=1, max_summary_file_bytes=50_000, summary_roots=(str(tmp_path),)))
    r = c.post("/summaries/load", json={"path": str(tmp_path / "missing.sqs")})
    assert r.status_code == 404 and r.json()["error"]["path"].endswith("missing.sqs")
    assert not (tmp_path / "missing.sqs").exists()
    (tmp_path / "empty").mkdir()
    r = c.post("/summaries/load", json={"path": str(tmp_path / "empty")})
    assert r.status_code == 400 and "manifest" in r.json()["error"]["message"]
    (tmp_path / "notes.txt").write_text("hello")
    r = c.post("/summaries/load", json={"path": str(tmp_path / "notes.txt")})
    assert r.status_code == 400 and "not a sketchql summary" in r.json()["error"]["message"]
    (tmp_path / "broken.sqs").write_bytes(b"SQSF\x07\x00")
    r = c.post("/summaries/load", json={"path": str(tmp_path / "broken.sqs")})
    assert r.status_code == 400 and r.json()["error"]["type"] == "SummaryError"
    big = CountSketch(d=5, w=4096, seed=0)
    (tmp_path / "big.sqs").write_bytes(encode_summary(big, {"name": "big"}))
    r = c.post("/summaries/load", json={"path": str(tmp_path / "big.sqs")})
    assert r.status_code == 413 and r.json()["error"]["limit"] == "max_summary_file_bytes"
    r = c.post("/summaries/load", json={"path": "s3://bucket/x"})
    assert r.status_code == 403 and "s3" in r.json()["error"]["message"]     # only files below the roots
    r = c.post("/summaries/load", json={"path": 7})
    assert r.status_code == 422 and r.json()["error"]["parameter"] == "path"
    r = c.post("/summaries/load", json={"path": "x", "bogus": 1})
    assert r.status_code == 422 and r.json()["error"]["parameter"] == "bogus"
    keys, _ = data
    for i, nm in enumerate(("a", "b")):
        p = tmp_path / f"{nm}.sqs"
        p.write_bytes(encode_summary(_sketch(keys[:100 * (i + 1)]), {"name": nm}))
    assert c.post("/summaries/load", json={"path": str(tmp_path / "a.sqs")}).status_code == 201
    r = c.post("/summaries/load", json={"path": str(tmp_path / "b.sqs")})
    assert r.status_code == 422 and r.json()["error"]["limit"] == "max_summaries"
    # reloading the same name replaces it (does not count twice)
    r = c.post("/summaries/load", json={"path": str(tmp_path / "b.sqs"), "as": "a"})
    assert r.status_code == 201
    est = c.get("/summaries/a/estimate", params={"value": int(keys[0])}).json()["estimates"][0]["estimate"]
    assert est == float(_sketch(keys[:200]).estimate(np.array([keys[0]]))[0])


def test_summary_roots_confine_loading(tmp_path, data):
    keys, _ = data
    inside = tmp_path / "in"
    inside.mkdir()
    (inside / "cs.sqs").write_bytes(encode_summary(_sketch(keys), {"name": "cs"}))
    (tmp_path / "out.sqs").write_bytes(encode_summary(_sketch(keys), {"name": "out"}))
    c = client(Limits(summary_roots=(str(inside),)))
    assert c.post("/summaries/load", json={"path": str(inside / "cs.sqs")}).status_code == 201
    r = c.post("/summaries/load", json={"path": str(inside / ".." / "out.sqs")})
    assert r.status_code == 403 and r.json()["error"]["type"] == "forbidden_path"


def test_live_summary_estimates_equal_its_index():
    c = client()
    c.post("/streams", json={"sql": "CREATE STREAM S (item INT, name STRING) TIMESTAMP ts; "
                                    "CREATE SUMMARY si ON S (item) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)"})
    rng = np.random.default_rng(2)
    n = 3000
    item = rng.zipf(1.5, n) % 50
    ts = np.sort(rng.uniform(0, 60, n))
    r = c.post("/streams/S/batches", json={"columns": {"item": item.tolist(), "name": ["x"] * n,
                                                       "ts": ts.tolist()}})
    assert r.status_code == 200, r.text
    r = c.get("/summaries/si/estimate", params=[("value", "0"), ("value", "1"), ("t_from", "10"), ("t_to", "50")])
    assert r.status_code == 200, r.text
    got = [e["estimate"] for e in r.json()["estimates"]]
    ix = c.app.state.sketchql.engine.catalog.summary("si").index["item"]
    assert got == ix.estimate(np.array([0, 1]), 10.0, 50.0).tolist()
    exact = [float(((item == v) & (ts > 10) & (ts <= 50)).sum()) for v in (0, 1)]
    b = [e["error_bound"] for e in r.json()["estimates"]]
    assert all(abs(g - e) <= bb + 1e-9 or abs(g - e) <= 0.05 * e for g, e, bb in zip(got, exact, b))
    assert {s["name"]: s["origin"] for s in c.get("/summaries").json()["summaries"]} == {"si": "live"}
    # a loaded summary may not shadow a live one
    assert c.get("/summaries/si").json()["origin"] == "live"


def test_loaded_summary_may_not_shadow_a_live_one(tmp_path, data):
    keys, _ = data
    (tmp_path / "si.sqs").write_bytes(encode_summary(_sketch(keys), {"name": "si"}))
    c = client(Limits(summary_roots=(str(tmp_path),)))
    c.post("/streams", json={"sql": "CREATE STREAM S (item INT) TIMESTAMP ts; "
                                    "CREATE SUMMARY si ON S (item) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)"})
    r = c.post("/summaries/load", json={"path": str(tmp_path / "si.sqs")})
    assert r.status_code == 409 and r.json()["error"]["type"] == "name_conflict"
    r = c.post("/summaries/load", json={"path": str(tmp_path / "si.sqs"), "as": "si_spark"})
    assert r.status_code == 201 and r.json()["name"] == "si_spark"
