"""Defects of a user audit of the service (issue 12), each through HTTP: oversized integers and deep
nesting in every JSON body, NUL bytes in paths, non-finite snapshot times, chunked bodies over the
limit, stalled bodies, DELETE of a CREATE SUMMARY summary, ALTER STREAM over HTTP, one rejected-batch
count, and error messages that say where."""
import asyncio
import json
import re
import socket
import sys
import threading
import time

import pytest
from fastapi import FastAPI

from service_server import arrow_body, free_port
from test_service_helpers import client, parse_prometheus
from sketchql.service import Limits, create_app

BIG = "1" + "0" * 5000                        # an integer literal over Python's 4300-digit conversion limit
NDJSON = {"content-type": "application/x-ndjson"}
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def c():
    cl = client(Limits(max_body_bytes=200_000, max_time_jump=100.0))
    assert cl.post("/streams", json={"sql": "CREATE STREAM T (k INT, v DOUBLE) TIMESTAMP ts"}).status_code == 201
    assert cl.post("/queries", json={"sql": "SELECT k FROM T [RANGE 1000]"}).status_code == 201
    return cl


def _err(r, status, typ=None):
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/json")
    e = r.json()["error"]
    assert e["status"] == status and e["message"]
    if typ is not None:
        assert e["type"] == typ, e
    return e


def _pos(text: str, needle: str):
    """1-based (line, column) of ``needle`` in ``text`` -- the oracle for the reported positions."""
    off = text.index(needle)
    return text.count("\n", 0, off) + 1, off - (text.rfind("\n", 0, off) + 1) + 1


# -- 4: integers over 4300 digits, and deep nesting, in every JSON body ---------------------------------
def test_huge_integer_in_ndjson_batch_is_400_at_its_line_and_column(c):
    body = '{"k": 1, "v": 0.5, "ts": 1}\n{"k": 2, "v": 0.5, "ts": 1}\n{"v": 0.5, "k": ' + BIG + ', "ts": 2}\n'
    e = _err(c.post("/streams/T/batches", content=body, headers=NDJSON), 400, "invalid_json")
    line, col = _pos(body, BIG)
    assert (e["line"], e["column"], e["row"], e["stream"]) == (line, col, 2, "T") == (3, 17, 2, "T")
    assert "4300 digits" in e["message"]


def test_huge_integer_in_json_batch_is_400_with_position(c):
    body = '{"rows": [\n  {"k": 1, "v": 0.5, "ts": 1},\n  {"k": ' + BIG + ', "v": 0.5, "ts": 2}]}'
    e = _err(c.post("/streams/T/batches", content=body, headers=JSON), 400, "invalid_json")
    assert (e["line"], e["column"]) == _pos(body, BIG) and e["stream"] == "T"
    body = '{"columns": {"k": [' + BIG + '], "v": [1.0], "ts": [1.0]}}'
    e = _err(c.post("/streams/T/batches", content=body, headers=JSON), 400, "invalid_json")
    assert (e["line"], e["column"]) == _pos(body, BIG)


@pytest.mark.parametrize("method,path", [
    ("PATCH", "/control/engine/engine"), ("POST", "/queries"), ("POST", "/streams"), ("POST", "/explain"),
    ("POST", "/streams/T/heartbeat"), ("PATCH", "/queries/1"), ("PATCH", "/queries/1/contract"),
    ("PATCH", "/engine/budgets"), ("POST", "/summaries/load")])
def test_huge_integer_and_deep_nesting_in_any_body_is_400_with_position(c, method, path):
    body = '{"x":\n  [1, ' + BIG + ']}'
    e = _err(c.request(method, path, content=body, headers=JSON), 400, "invalid_json")
    assert (e["line"], e["column"]) == _pos(body, BIG) == (2, 7)
    assert "There was an error parsing the body" not in e["message"]
    deep = '{"x": ' + "[" * 50_000 + "]" * 50_000 + "}"
    e = _err(c.request(method, path, content=deep, headers=JSON), 400, "invalid_json")
    assert "nested too deeply" in e["message"] and e["line"] == 1 and 7 < e["column"] < 50_000


def test_malformed_heartbeat_body_names_line_and_column_not_parameter_1(c):
    body = '{"ts":\n 1,,}'
    e = _err(c.post("/streams/T/heartbeat", content=body, headers=JSON), 400, "invalid_json")
    assert (e["line"], e["column"]) == (2, 4)
    assert e.get("parameter") != "1"


def test_dashboard_control_route_parses_like_the_service_and_is_documented():
    from sketchql.service.dashboard import router
    from sketchql.service.state import ServiceState
    from fastapi.testclient import TestClient

    app = FastAPI()
    app.include_router(router)
    app.state.sketchql = ServiceState()
    from sketchql.service.errors import ApiError

    @app.exception_handler(ApiError)
    async def _api(request, exc):
        from fastapi.responses import JSONResponse
        return JSONResponse(exc.body(), status_code=exc.status)

    body = '{"x": ' + BIG + '}'
    e = _err(TestClient(app).patch("/dashboard/api/control/engine/engine", content=body, headers=JSON), 400,
             "invalid_json")
    assert (e["line"], e["column"]) == _pos(body, BIG)
    op = client().get("/openapi.json").json()["paths"]["/dashboard/api/control/{kind}/{name}"]["patch"]
    schema = op["requestBody"]["content"]["application/json"]["schema"]
    assert schema["type"] == "object"


# -- 5: NUL in a summary path ---------------------------------------------------------------------------------
def test_nul_byte_in_summary_path_is_400(c):
    e = _err(c.post("/summaries/load", json={"path": "/root/\u0000x"}), 400, "bad_summary_path")
    assert e["path"] == "/root/\u0000x" and "index 6" in e["message"]


# -- 6: snapshot at a non-finite time ---------------------------------------------------------------------------
@pytest.mark.parametrize("at", ["nan", "inf", "-inf", "1e400", BIG, "-" + BIG])
def test_snapshot_at_non_finite_is_422_like_estimate(c, at):
    e = _err(c.get("/queries/1/snapshot", params={"at": at}), 422, "bad_parameter")
    assert e["parameter"] == "at"
    # a finite at is answered up to the query clock (past it: refused, test_engine_audit2)
    assert c.post("/streams/T/heartbeat", json={"ts": 1}).status_code == 200
    assert c.get("/queries/1/snapshot", params={"at": "1"}).status_code == 200


# -- 7: chunked bodies over the limit -----------------------------------------------------------------------------
def _chunks(piece: bytes, n: int):
    for _ in range(n):
        yield piece


@pytest.mark.parametrize("method,path,ctype,piece", [
    ("POST", "/streams/T/batches", "application/x-ndjson", b'{"k": 1, "v": 0.5, "ts": 1.0}\n'),
    ("POST", "/streams/T/batches", "application/json", b" " * 1000),
    ("POST", "/queries", "application/json", b" " * 1000),
    ("POST", "/streams/T/heartbeat", "application/json", b" " * 1000),
    ("PATCH", "/control/engine/engine", "application/json", b" " * 1000),
])
def test_chunked_body_over_the_limit_is_413(c, method, path, ctype, piece):
    lim = c.app.state.sketchql.limits.max_body_bytes
    n = lim // len(piece) + 2
    r = c.request(method, path, content=_chunks(piece, n), headers={"content-type": ctype})
    e = _err(r, 413, "limit_exceeded")
    assert e["limit"] == "max_body_bytes" and e["maximum"] == lim
    assert r.headers.get("connection") == "close"


def test_chunked_body_under_the_limit_works(c):
    before = c.get("/streams/T").json()["stats"]["tuples_in"]
    rows = b"".join(b'{"k": %d, "v": 0.5, "ts": 2.0}\n' % i for i in range(100))
    r = c.post("/streams/T/batches", content=_chunks(rows, 1), headers=NDJSON)
    assert r.status_code == 200 and r.json()["accepted"] == 100, r.text
    assert c.get("/streams/T").json()["stats"]["tuples_in"] == before + 100


# -- 8: a stalled body ----------------------------------------------------------------------------------------------
def test_stalled_body_gets_408_from_the_middleware():
    """ASGI level: a body that stops arriving is answered 408 after ``body_read_timeout_s``."""
    app = create_app(demo=False, limits=Limits(body_read_timeout_s=0.3))
    assert app.state.sketchql.limits.to_dict()["body_read_timeout_s"] == 0.3
    sent = []

    async def run():
        first = [True]

        async def receive():
            if first[0]:
                first[0] = False
                return {"type": "http.request", "body": b'{"sql": "SELE', "more_body": True}
            await asyncio.sleep(3600)

        async def send(msg):
            sent.append(msg)
        scope = {"type": "http", "method": "POST", "path": "/queries", "raw_path": b"/queries", "root_path": "",
                 "query_string": b"", "headers": [(b"content-type", b"application/json"),
                                                  (b"content-length", b"1000")],
                 "scheme": "http", "server": ("t", 80), "client": ("c", 1), "http_version": "1.1",
                 "asgi": {"version": "3.0"}}
        t0 = time.monotonic()
        await asyncio.wait_for(app(scope, receive, send), 10)
        return time.monotonic() - t0

    took = asyncio.run(run())
    assert 0.3 <= took < 3
    start = [m for m in sent if m["type"] == "http.response.start"]
    assert len(start) == 1 and start[0]["status"] == 408
    assert (b"connection", b"close") in [(k.lower(), v) for k, v in start[0]["headers"]]
    err = json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))["error"]
    assert err["type"] == "body_timeout" and err["limit"] == "body_read_timeout_s" and err["received"] == 13


def _serve(app):
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and th.is_alive()
        time.sleep(0.02)
    return server, th, port


def _read_response(sock, timeout):
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            return data, False
        if not chunk:
            return data, True                 # the server closed the connection
        data += chunk


@pytest.mark.parametrize("path,ctype", [("/streams/T/batches", "application/x-ndjson"),
                                        ("/queries", "application/json")])
def test_stalled_body_over_a_real_socket_is_408_and_closed(path, ctype):
    app = create_app(demo=False, limits=Limits(body_read_timeout_s=0.5))
    server, th, port = _serve(app)
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            body = b'{"sql": "CREATE STREAM T (k INT, v DOUBLE) TIMESTAMP ts"}'
            s.sendall(b"POST /streams HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body) + body)
            data = b""
            while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
                data += s.recv(65536)
            assert data.startswith(b"HTTP/1.1 201"), data
            t0 = time.monotonic()
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\nContent-Length: 1000\r\n\r\n"
                      .encode() + b"0123456789")
            data, closed = _read_response(s, 10)
            took = time.monotonic() - t0
        assert data.startswith(b"HTTP/1.1 408"), data
        assert closed and 0.5 <= took < 5, (closed, took)
        head, _, payload = data.partition(b"\r\n\r\n")
        assert b"connection: close" in head.lower()
        assert json.loads(payload)["error"]["type"] == "body_timeout"
    finally:
        server.should_exit = True
        th.join(10)


def test_body_read_timeout_flag_reaches_limits():
    from sketchql.service.commands import register
    import argparse

    p = argparse.ArgumentParser()
    register(p.add_subparsers())
    assert p.parse_args(["serve", "--body-read-timeout", "2.5"]).body_read_timeout == 2.5
    assert p.parse_args(["serve", "--body-read-timeout", "none"]).body_read_timeout is None
    assert p.parse_args(["serve"]).body_read_timeout == 30.0
    assert client().get("/limits").json()["body_read_timeout_s"] == 30.0


# -- 9: DELETE /summaries/{name} of a CREATE SUMMARY summary --------------------------------------------------------
def test_delete_drops_a_sql_created_summary():
    cl = client()
    assert cl.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts; CREATE SUMMARY sa ON S (k) "
                                            "WITH GRANULARITY 5 SECONDS AND COLLAPSE(2, 3)"}).status_code == 201
    assert [s["name"] for s in cl.get("/summaries").json()["summaries"]] == ["sa"]
    r = cl.delete("/summaries/sa")
    assert r.status_code == 200 and r.json() == {"ok": True, "deleted": "sa"}, r.text
    assert cl.get("/summaries").json()["summaries"] == []
    assert cl.app.state.sketchql.engine.catalog.summaries == [] or not list(cl.app.state.sketchql.engine.catalog.summaries)
    _err(cl.delete("/summaries/sa"), 404, "not_found")
    # the name is free again, as after DROP SUMMARY
    assert cl.post("/streams", json={"sql": "CREATE SUMMARY sa ON S (k) WITH GRANULARITY 5 SECONDS "
                                            "AND COLLAPSE(2, 3)"}).status_code == 201


def test_delete_of_a_sql_summary_survives_a_restart(tmp_path):
    sql = "CREATE STREAM S (k INT) TIMESTAMP ts; CREATE SUMMARY sb ON S (k) WITH GRANULARITY 5 SECONDS " \
          "AND COLLAPSE(2, 3)"
    with client(data_dir=str(tmp_path), sync=False) as cl:
        assert cl.post("/streams", json={"sql": sql}).status_code == 201
        assert cl.delete("/summaries/sb").status_code == 200
    with client(data_dir=str(tmp_path), sync=False) as cl:
        assert cl.get("/summaries").json()["summaries"] == []
        _err(cl.get("/summaries/sb"), 404)


# -- 10: ALTER STREAM ... ADD CONSTRAINT over HTTP ----------------------------------------------------------------
def test_alter_stream_add_constraint_over_post_streams():
    from sketchql.service.auth import Auth

    cl = client()
    assert cl.post("/streams", json={"sql": "CREATE STREAM F (oid INT, y DOUBLE) TIMESTAMP ts"}).status_code == 201
    eng = cl.app.state.sketchql.engine
    before = len(eng.constraints.report()) if hasattr(eng.constraints, "report") else None
    r = cl.post("/streams", json={"sql": "ALTER STREAM F ADD CONSTRAINT ORDERED (oid) K 3"})
    assert r.status_code == 201, r.text
    rep = eng.constraints.report()
    assert len(rep) == (before or 0) + 1 and "ordered" in json.dumps(rep, default=str).lower()
    e = _err(cl.post("/streams", json={"sql": "ALTER STREAM Nope ADD CONSTRAINT ORDERED (oid) K 3"}), 400)
    assert "Nope" in e["message"]
    # admin only, like every other mutation
    sec = client(auth=Auth({"adm-secret-1": "admin", "rd-secret-2": "read"}))
    hdr = {"Authorization": "Bearer rd-secret-2"}
    assert sec.post("/streams", json={"sql": "CREATE STREAM F (oid INT) TIMESTAMP ts"},
                    headers={"Authorization": "Bearer adm-secret-1"}).status_code == 201
    _err(sec.post("/streams", json={"sql": "ALTER STREAM F ADD CONSTRAINT ORDERED (oid) K 3"}, headers=hdr), 403)
    _err(sec.post("/streams", json={"sql": "ALTER STREAM F ADD CONSTRAINT ORDERED (oid) K 3"}), 401)


# -- 11: small ones --------------------------------------------------------------------------------------------------
def test_rejected_batches_is_one_count_in_stream_stats_and_metrics():
    cl = client(Limits(max_time_jump=100.0))
    assert cl.post("/streams", json={"sql": "CREATE STREAM R (k INT) TIMESTAMP ts"}).status_code == 201
    assert cl.post("/streams/R/batches", json={"rows": [{"k": 1, "ts": 10.0}]}).status_code == 200
    bad = [("json", {"content": '{"rows": [{"k": "x", "ts": 11}]}'}),            # wrong type
           ("json", {"content": '{"rows": [{"k": 1, "ts": 1.0}]}'}),             # late
           ("json", {"content": '{"rows": [{"k": 1, "ts": 1e9}]}'}),             # time jump
           ("json", {"content": '{"rows": [{"k": 1, "ts": 11'}),                 # unparsable
           ("ndjson", {"content": '{"k": 1, "ts": 11}\n{"k": ' + BIG + ', "ts": 12}\n'}),
           ("arrow", {"content": arrow_body({"k": ["a"], "ts": [12.0]})})]
    ctype = {"json": "application/json", "ndjson": "application/x-ndjson",
             "arrow": "application/vnd.apache.arrow.stream"}
    for kind, kw in bad:
        r = cl.post("/streams/R/batches", headers={"content-type": ctype[kind]}, **kw)
        assert 400 <= r.status_code < 500, r.text
    stats = cl.get("/streams/R").json()["stats"]
    m = parse_prometheus(cl.get("/metrics").text)
    in_metrics = m[("sketchql_stream_rejected_batches_total", frozenset({("stream", "R")}))]
    assert stats["rejected_batches"] == in_metrics == len(bad)


def test_failed_registration_names_no_id_that_is_then_given():
    cl = client()
    assert cl.post("/streams", json={"sql": "CREATE STREAM F (carrier INT, delay DOUBLE) TIMESTAMP ts"}
                   ).status_code == 201
    rows = [{"carrier": i % 5, "delay": float(i % 17), "ts": i * 0.01} for i in range(2000)]
    assert cl.post("/streams/F/batches", json={"rows": rows}).status_code == 200
    assert cl.patch("/engine/budgets", json={"memory_bytes": 500}).status_code == 200
    q = "SELECT carrier, AVG(delay) AS d FROM F [RANGE 100] GROUP BY carrier WITH ERROR 0.01 CONFIDENCE 0.99"
    e = _err(cl.post("/queries", json={"sql": q + " ON MISS FAIL"}), 400)
    assert "infeasible" in e["message"]
    assert cl.patch("/engine/budgets", json={"memory_bytes": None}).status_code == 200
    r = cl.post("/queries", json={"sql": "SELECT carrier FROM F [RANGE 10]"})
    assert r.status_code == 201
    given = r.json()["id"]
    named = {int(x) for x in re.findall(r"\b[Qq]uery (\d+)\b", e["message"])}
    assert given not in named, (given, e["message"])


def test_readme_token_example_is_accepted():
    from sketchql.service.auth import load_tokens

    readme = open(__file__.rsplit("/tests/", 1)[0] + "/README.md").read()
    m = re.search(r'SKETCHQL_TOKENS="([^"]+)"', readme)
    assert m, "README shows a SKETCHQL_TOKENS example"
    tokens = load_tokens(None, env={"SKETCHQL_TOKENS": m.group(1)})
    assert sorted(tokens.values()) == ["admin", "read"]


def test_no_route_answers_the_generic_parse_error(c):
    """Every JSON-body route of the app reports a position for an unparsable body."""
    paths = c.get("/openapi.json").json()["paths"]
    for path, ops in paths.items():
        for method, op in ops.items():
            if "requestBody" not in op or "application/json" not in op["requestBody"].get("content", {}):
                continue
            url = path.replace("{name}", "T").replace("{qid}", "1").replace("{kind}", "engine")
            r = c.request(method.upper(), url, content='{"a": ' + BIG + "}", headers=JSON)
            assert r.status_code in (400, 409), (method, url, r.text)
            if r.status_code == 400:
                assert r.json()["error"]["type"] == "invalid_json" and r.json()["error"]["line"] == 1, (url, r.text)
    assert sys.get_int_max_str_digits() < 5000


def test_alter_stream_constraint_survives_a_restart(tmp_path):
    for checkpoint in (False, True):
        d = tmp_path / f"ck{int(checkpoint)}"
        with client(data_dir=str(d), sync=False) as cl:
            assert cl.post("/streams", json={"sql": "CREATE STREAM F (oid INT) TIMESTAMP ts"}).status_code == 201
            assert cl.post("/streams", json={"sql": "ALTER STREAM F ADD CONSTRAINT ORDERED (oid) K 3"}
                           ).status_code == 201
            want = cl.app.state.sketchql.engine.constraints.report()
            if checkpoint:
                assert cl.post("/admin/checkpoint").status_code == 200
        with client(data_dir=str(d), sync=False) as cl:
            assert cl.app.state.sketchql.engine.constraints.report() == want and len(want) == 1


def test_deeply_nested_summary_manifest_is_400(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    (store / "manifest.json").write_text('{"summaries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    cl = client(Limits(summary_roots=(str(tmp_path),)))
    e = _err(cl.post("/summaries/load", json={"path": str(store)}), 400, "bad_summary_path")
    assert "manifest.json" in e["message"] and e["path"] == str(store)
