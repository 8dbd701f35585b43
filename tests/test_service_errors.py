"""Every error path answers 4xx with JSON saying what and where; the defects of issue 12 stay fixed;
registration is atomic; Arrow batches get JSON's checks; a Hypothesis fuzz never gets a 5xx."""
import json
import math

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from service_server import arrow_body
from test_service_helpers import client
from sketchql.service import Limits

ARROW = {"content-type": "application/vnd.apache.arrow.stream"}


@pytest.fixture(scope="module")
def c():
    cl = client(Limits(max_retained_rows=5, max_time_jump=100.0))
    cl.app.state.sketchql.limits.max_time_jump = 100.0
    assert cl.post("/streams", json={"sql": "CREATE STREAM S (k INT, v DOUBLE, s STRING, b BOOL) TIMESTAMP ts"}
                   ).status_code == 201
    assert cl.post("/queries", json={"sql": "SELECT k FROM S [RANGE 1000]"}).status_code == 201
    return cl


def _err(r, status, typ=None):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert e["status"] == status and e["message"]
    if typ is not None:
        assert e["type"] == typ, e
    return e


def _row(k=1, v=0.5, s="x", b=True, ts=1.0):
    return {"k": k, "v": v, "s": s, "b": b, "ts": ts}


def test_heartbeat_nan_and_friends(c):
    for body in (b'{"ts": NaN}', b'{"ts": Infinity}', b'{"ts": "soon"}', b'{"ts": true}', b'{}', b'[1]', b'{"ts":'):
        r = c.post("/streams/S/heartbeat", content=body, headers={"content-type": "application/json"})
        assert r.status_code in (400, 422), (body, r.text)
        assert "ts" in r.text or "JSON" in r.text or "object" in r.text
    _err(c.post("/streams/nope/heartbeat", json={"ts": 1.0}), 404, "not_found")


def test_time_jump_is_refused_and_counted(c):
    assert c.post("/streams/S/batches", json={"rows": [_row(ts=5.0)]}).status_code == 200
    e = _err(c.post("/streams/S/batches", json={"rows": [_row(ts=6.0), _row(ts=1e12)]}), 400, "TimeJumpError")
    assert e["row"] == 1 and e["limit"] == "max_time_jump"
    m = c.get("/metrics").text
    assert 'sketchql_stream_rejected_rows_by_reason_total{stream="S",reason="time_jump"} 2' in m
    assert c.get("/streams/S").json()["stats"]["clock"] == 5.0                  # the clock did not move
    assert c.post("/streams/S/batches", json={"rows": [_row(ts=7.0)]}).status_code == 200   # later rows fine
    _err(c.post("/streams/S/heartbeat", json={"ts": 1e12}), 400, "TimeJumpError")


def test_cursor_parameters(c):
    total = c.get("/queries/1/results").json()["total"]
    e = _err(c.get("/queries/1/results", params={"since": 10**26}), 422)
    assert e["parameter"] == "since" and e["total"] == total
    e = _err(c.get("/queries/1/results", params={"limit": -5}), 422)
    assert e["parameter"] == "limit" and "1..10000" in e["message"]
    _err(c.get("/queries/1/results", params={"since": -1}), 422)
    _err(c.get("/queries/1/results", params={"since": "x"}), 422)
    r = c.get("/queries/1/results", params={"since": total})
    assert r.status_code == 200 and r.json()["available"] == 0


def test_a_lagging_reader_is_told_exactly_what_it_missed(c):
    for i in range(4):
        c.post("/streams/S/batches", json={"rows": [_row(k=i, ts=10.0 + i + j / 10) for j in range(3)]})
    body = c.get("/queries/1/results", params={"since": 0, "limit": 100}).json()
    assert body["total"] >= 12 and body["first_available"] == body["total"] - 5       # buffer of 5 rows
    assert body["missed"] == body["first_available"] and len(body["rows"]) == 5
    assert c.get("/limits").json()["max_retained_rows"] == 5


def test_arrow_batches_get_the_json_checks(c):
    base = {"k": [1], "v": [0.5], "s": ["a"], "b": [True], "ts": [20.0]}
    cases = [({"ts": pa.array(["20"])}, "ts"), ({"k": pa.array([True])}, "k"), ({"b": pa.array([1])}, "b"),
             ({"k": pa.array([2**64 - 1], pa.uint64())}, "k"), ({"s": pa.array([3])}, "s"),
             ({"k": pa.array([None], pa.int64())}, "k")]
    for change, col in cases:
        cols = {k: pa.array(v) for k, v in base.items()}
        cols.update(change)
        e = _err(c.post("/streams/S/batches", content=arrow_body(cols), headers=ARROW), 400, "BatchError")
        assert e["column_name"] == col, e
    ok = {k: pa.array(v) for k, v in base.items()}
    ok["k"] = pa.array([7], pa.int16())
    assert c.post("/streams/S/batches", content=arrow_body(ok), headers=ARROW).status_code == 200
    _err(c.post("/streams/S/batches", content=b"not arrow", headers=ARROW), 400, "bad_batch")


def test_json_batch_errors_say_where(c):
    e = _err(c.post("/streams/S/batches", json={"rows": [_row(ts=30.0), _row(k="x", ts=30.0)]}), 400)
    assert e["row"] == 1 and e["column_name"] == "k"
    e = _err(c.post("/streams/S/batches", json={"rows": [_row(ts=30.0), dict(_row(ts=30.0), zz=1)]}), 400)
    assert e["column_name"] == "zz"
    _err(c.post("/streams/S/batches", content=b'{"rows": [', headers={"content-type": "application/json"}), 400,
         "invalid_json")
    _err(c.post("/streams/S/batches", content=b"x", headers={"content-type": "text/csv"}), 415)
    e = _err(c.post("/streams/S/batches", json={"rows": [_row(ts=-5.0)]}), 400)
    assert "older than the stream clock" in e["message"]


def test_sql_and_resource_errors(c):
    e = _err(c.post("/queries", json={"sql": "SELECT FROM"}), 400)
    assert e["line"] == 1 and e["column"]
    _err(c.post("/queries", json={"sql": ""}), 422)
    _err(c.post("/queries", json={"sql": 3}), 422)
    _err(c.post("/queries", json={"sql": "SELECT k FROM S", "x": 1}), 422)
    _err(c.post("/queries", json={"sql": "CREATE STREAM Z (a INT)"}), 400)
    _err(c.post("/streams", json={"sql": "SELECT k FROM S"}), 400, "wrong_endpoint")
    _err(c.get("/queries/99"), 404, "not_found")
    _err(c.get("/queries/abc"), 422)
    _err(c.delete("/queries/99"), 404)
    _err(c.get("/nowhere"), 404)
    _err(c.put("/queries/1"), 405)
    _err(c.patch("/queries/1/contract", json={"on_miss": "panic"}), 422)
    _err(c.patch("/queries/1/contract", json={}), 422)
    _err(c.patch("/queries/1", json={"weight": -1}), 422)
    _err(c.patch("/engine/budgets", json={"memory_bytes": 0}), 422)
    _err(c.patch("/control/stream/S", json={"sample_rate": 7}), 422, "bad_control")
    _err(c.patch("/control/stream/S", content=b"{", headers={"content-type": "application/json"}), 400)
    _err(c.get("/control/query/q99"), 404)
    _err(c.get("/summaries/none/estimate", params={"value": 1}), 404)
    _err(c.post("/admin/checkpoint"), 409, "no_data_dir")
    _err(c.get("/queries/1/stream", params={"since": 10**9}), 422)
    _err(c.get("/queries/1/stream", headers={"Last-Event-ID": "abc"}), 422)
    big = "x" * (9 * 1024 * 1024)
    _err(c.post("/queries", content=big, headers={"content-type": "application/json"}), 413, "limit_exceeded")


def test_failed_registration_leaves_nothing(monkeypatch):
    from sketchql.engine.query import Query

    cl = client()
    cl.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"})
    cl.post("/streams/S/batches", json={"rows": [{"k": 1, "ts": 1.0}]})
    real = Query._advance

    def boom(self, now):                      # the OverflowError, raised after the query was added
        if "k > 5" in self.sql:
            raise OverflowError("cannot convert float infinity to integer")
        return real(self, now)

    monkeypatch.setattr(Query, "_advance", boom)
    r = cl.post("/queries", json={"sql": "SELECT k FROM S [RANGE 5] WHERE k > 5"})
    assert r.status_code == 500 and "nothing was registered" in r.json()["error"]["message"]
    assert cl.get("/queries").json()["queries"] == []
    monkeypatch.setattr(Query, "_advance", real)
    assert cl.post("/queries", json={"sql": "SELECT k FROM S [RANGE 5]"}).json()["id"] == 1
    assert len(cl.get("/queries").json()["queries"]) == 1


def test_explain_over_http(c):
    r = c.post("/queries", json={"sql": "EXPLAIN SELECT k FROM S [RANGE 10] WHERE k > 1"})
    assert r.status_code == 200 and r.json()["registered"] is False and "Plan for" in r.json()["explain"]
    p = c.post("/explain", json={"sql": "SELECT k FROM S [RANGE 10] WHERE k > 1"}).json()["plan"]
    kinds = [n["kind"] for n in p["nodes"]]
    assert "scan" in kinds and all(0 <= a < len(kinds) and 0 <= b < len(kinds) for a, b in p["edges"])
    assert len(c.get("/queries").json()["queries"]) == 1


def test_docs_are_offline(c):
    html = c.get("/docs").text
    assert "cdn" not in html.lower() and "/docs-assets/swagger-ui-bundle.js" in html
    js = c.get("/docs-assets/swagger-ui-bundle.js")
    assert js.status_code == 200 and len(js.content) > 100_000
    spec = c.get("/openapi.json").json()
    for path, method in (("/queries", "post"), ("/queries/{qid}/contract", "patch"), ("/streams/{name}/heartbeat",
                                                                                     "post")):
        assert "requestBody" in spec["paths"][path][method], path
    assert "ContractPatch" in spec["components"]["schemas"]


def test_demo_lists_only_live_queries():
    from fastapi.testclient import TestClient

    from sketchql.service import create_app

    cl = TestClient(create_app(demo=True, seed=3, demo_options={"max_tuples": 400}))
    ids = cl.get("/demo").json()["queries"]
    assert cl.delete(f"/queries/{ids[0]}").status_code == 200
    assert cl.get("/demo").json()["queries"] == ids[1:]


# ---------------------------------------------------------------------- fuzz
_json = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) |
                     st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=8),
                     lambda ch: st.lists(ch, max_size=4) | st.dictionaries(st.text(max_size=6), ch, max_size=4),
                     max_leaves=12)
_keys = st.sampled_from(["sql", "ts", "rows", "columns", "error", "confidence", "budget", "on_miss", "weight",
                         "active", "memory_bytes", "cpu_units_per_s", "path", "name", "as", "k", "v"])
_bodies = st.one_of(_json, st.dictionaries(_keys, _json, max_size=4),
                    st.fixed_dictionaries({"rows": st.lists(st.dictionaries(
                        st.sampled_from(["k", "v", "s", "b", "ts", "zz"]), _json, max_size=5), max_size=4)}))
_posts = st.sampled_from(["/streams", "/streams/S/batches", "/streams/S/heartbeat", "/queries", "/explain",
                          "/summaries/load"])
_patches = st.sampled_from(["/queries/1", "/queries/1/contract", "/engine/budgets", "/control/stream/S",
                            "/control/query/q1", "/control/engine/engine"])
_gets = st.sampled_from(["/queries/1/results", "/queries/1/snapshot", "/summaries/x/estimate", "/control",
                         "/queries/1/precision", "/queries/1/stream"])
_params = st.dictionaries(st.sampled_from(["since", "limit", "at", "value", "t_from", "t_to", "confidence",
                                           "type", "attr", "kind", "max_events"]),
                          st.text(max_size=10) | st.integers(-2**70, 2**70).map(str) |
                          st.sampled_from(["nan", "inf", "-inf", "1e308", "0", "1"]), max_size=4)


def _dump(x) -> bytes:
    return json.dumps(x, allow_nan=True).encode()


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=_posts | _patches, body=_bodies, raw=st.booleans())
def test_fuzz_bodies_never_5xx(fz, path, body, raw):
    method = "PATCH" if path in ("/queries/1", "/queries/1/contract", "/engine/budgets") or \
        path.startswith("/control") else "POST"
    content = _dump(body) if not raw else _dump(body)[: max(1, len(_dump(body)) // 2)]
    r = fz.request(method, path, content=content, headers={"content-type": "application/json"})
    assert r.status_code < 500, (method, path, content, r.text)
    if r.status_code >= 400:
        assert r.json()["error"]["message"]


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=_gets, params=_params)
def test_fuzz_query_strings_never_5xx(fz, path, params):
    if path.endswith("/stream"):
        params = dict(params, max_events="1")
        params.setdefault("since", "0")
    r = fz.get(path, params=params)
    assert r.status_code < 500, (path, params, r.text)


@pytest.fixture(scope="module")
def fz():
    cl = client(Limits(max_time_jump=1e6))
    cl.post("/streams", json={"sql": "CREATE STREAM S (k INT, v DOUBLE, s STRING, b BOOL) TIMESTAMP ts; "
                                     "CREATE SUMMARY x ON S (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)"})
    cl.post("/queries", json={"sql": "SELECT k, v FROM S [RANGE 100] WHERE v > 0.5"})
    rows = [{"k": int(i % 7), "v": float(i) / 10, "s": "a", "b": True, "ts": float(i)} for i in range(30)]
    cl.post("/streams/S/batches", json={"rows": rows})
    assert math.isfinite(cl.get("/streams/S").json()["stats"]["clock"])
    return cl


def test_fuzz_fixture_has_rows(fz):
    assert fz.get("/queries/1/results").json()["total"] > 0
    assert np.isfinite(fz.get("/queries/1/snapshot").json()["at"])
