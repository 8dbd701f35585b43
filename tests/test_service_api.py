"""HTTP API: streams, batches (JSON rows / columns / NDJSON), queries and their change
streams checked against brute-force oracles; structured errors; limits; /metrics."""
import json
from collections import Counter

import numpy as np
import pytest

from test_service_helpers import client, parse_prometheus, read_all
from sketchql.service import Limits

W = 5.0


def _data(seed, n, t0=0.0, keys=6):
    rng = np.random.default_rng(seed)
    ts = t0 + np.sort(rng.uniform(0, 20, n))
    return {"k": rng.integers(0, keys, n), "v": np.round(rng.normal(10, 3, n), 3), "ts": ts}


def _rows(d):
    return [{"k": int(k), "v": float(v), "ts": float(t)} for k, v, t in zip(d["k"], d["v"], d["ts"])]


def _setup(c):
    r = c.post("/streams", json={"sql": "CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts;\n"
                                        "CREATE STREAM B (k INT, v DOUBLE) TIMESTAMP ts"})
    assert r.status_code == 201, r.text
    assert r.json()["created"] == ["A", "B"]


def _push_three_ways(c, name, d):
    """Split d in three batches: JSON rows, JSON columns, NDJSON."""
    n = len(d["ts"])
    cuts = [0, n // 3, 2 * n // 3, n]
    parts = [{k: v[cuts[i]:cuts[i + 1]] for k, v in d.items()} for i in range(3)]
    r1 = c.post(f"/streams/{name}/batches", json={"rows": _rows(parts[0])})
    r2 = c.post(f"/streams/{name}/batches",
                json={"columns": {"k": parts[1]["k"].tolist(), "v": parts[1]["v"].tolist(),
                                  "ts": parts[1]["ts"].tolist()}})
    nd = "\n".join(json.dumps(r) for r in _rows(parts[2])) + "\n"
    r3 = c.post(f"/streams/{name}/batches", content=nd.encode(), headers={"Content-Type": "application/x-ndjson"})
    for r, p in zip((r1, r2, r3), parts):
        assert r.status_code == 200, r.text
        assert r.json()["accepted"] == len(p["ts"])


def test_window_join_over_http_matches_brute_force():
    c = client()
    _setup(c)
    r = c.post("/queries", json={"sql": f"SELECT A.k, A.v AS va, B.v AS vb, A.ts AS ta, B.ts AS tb "
                                        f"FROM A [RANGE {W:g}], B [RANGE {W:g}] WHERE A.k = B.k"})
    assert r.status_code == 201, r.text
    qid = r.json()["id"]
    a, b = _data(1, 90), _data(2, 80)
    # interleave by time so both clocks move: push A and B in halves
    half_a, half_b = 45, 40
    _push_three_ways(c, "A", {k: v[:half_a] for k, v in a.items()})
    _push_three_ways(c, "B", {k: v[:half_b] for k, v in b.items()})
    _push_three_ways(c, "A", {k: v[half_a:] for k, v in a.items()})
    _push_three_ways(c, "B", {k: v[half_b:] for k, v in b.items()})
    end = 30.0
    for s in ("A", "B"):
        assert c.post(f"/streams/{s}/heartbeat", json={"ts": end}).status_code == 200
    got = read_all(c, qid)
    assert all(r["sign"] == 1 for r in got)          # ISTREAM view of a join
    got_c = Counter((r["row"]["k"], r["row"]["va"], r["row"]["vb"], r["row"]["ta"], r["row"]["tb"], r["at"])
                    for r in got)
    # oracle: a pair joins iff equal keys and the earlier one is still in the window at the later's time
    exp = Counter()
    for i in range(len(a["ts"])):
        for j in range(len(b["ts"])):
            ta, tb = float(a["ts"][i]), float(b["ts"][j])
            if a["k"][i] == b["k"][j] and abs(ta - tb) < W:
                exp[(int(a["k"][i]), float(a["v"][i]), float(b["v"][j]), ta, tb, max(ta, tb))] += 1
    assert sum(exp.values()) > 20
    assert got_c == exp
    info = c.get(f"/queries/{qid}").json()
    assert "Join" in info["explain"] and info["stats"]["result_rows"] == len(got)
    assert info["sql"].startswith("SELECT A.k")


def test_grouped_aggregate_snapshots_match_brute_force():
    c = client()
    _setup(c)
    qid = c.post("/queries", json={"sql": f"SELECT k, COUNT(*) AS n, SUM(v) AS s FROM A [RANGE {W:g}] "
                                          f"GROUP BY k"}).json()["id"]
    a = _data(5, 120)
    _push_three_ways(c, "A", a)
    c.post("/streams/A/heartbeat", json={"ts": 25.0})
    for t in (3.0, 7.5, 12.25, 19.9, 25.0):
        r = c.get(f"/queries/{qid}/snapshot", params={"at": t})
        assert r.status_code == 200, r.text
        got = {row["k"]: (row["n"], row["s"]) for row in r.json()["rows"] if row["n"] > 0}
        inw = (a["ts"] > t - W) & (a["ts"] <= t)
        exp = {}
        for k in np.unique(a["k"][inw]):
            m = inw & (a["k"] == k)
            exp[int(k)] = (int(m.sum()), float(a["v"][m].sum()))
        assert set(got) == set(exp), t
        for k in exp:
            assert got[k][0] == exp[k][0]
            assert got[k][1] == pytest.approx(exp[k][1], abs=1e-9)
    # the relation view carries both signs and the cursor sees each change once
    rows = read_all(c, qid, page=50)
    assert {r["sign"] for r in rows} == {1, -1}
    assert c.get(f"/queries/{qid}/results", params={"since": len(rows)}).json()["rows"] == []


def test_syntax_error_reports_line_and_column():
    c = client()
    _setup(c)
    r = c.post("/queries", json={"sql": "SELECT k\nFROM A [RANGE]"})
    assert r.status_code == 400
    e = r.json()["error"]
    assert e["type"] == "SketchQLSyntaxError"
    assert (e["line"], e["column"], e["token"]) == (2, 14, "]")
    assert "a number" in e["expected"]
    r = c.post("/streams", json={"sql": "CREATE STREAM X (a INT"})
    assert r.status_code == 400 and r.json()["error"]["line"] == 1
    # semantic errors are structured too
    r = c.post("/queries", json={"sql": "SELECT k FROM Nowhere"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "SketchQLSemanticError"
    # a SELECT is not DDL
    r = c.post("/streams", json={"sql": "SELECT k FROM A"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "wrong_endpoint"


def test_unknown_resources_are_404():
    c = client()
    _setup(c)
    r = c.post("/streams/Nope/batches", json={"rows": [{"k": 1, "v": 1.0, "ts": 1.0}]})
    assert r.status_code == 404 and r.json()["error"]["name"] == "Nope"
    assert c.get("/streams/Nope").status_code == 404
    assert c.get("/queries/999").status_code == 404
    assert c.get("/queries/999/results").status_code == 404
    assert c.delete("/queries/999").status_code == 404
    assert c.get("/summaries/none/estimate", params={"value": 1}).status_code == 404
    r = c.get("/no/such/endpoint")
    assert r.status_code == 404 and r.json()["error"]["type"] == "not_found"
    r = c.get("/queries/abc")
    assert r.status_code == 422 and r.json()["error"]["parameter"] == "qid"


def test_bad_batches_name_column_and_row_and_lose_nothing():
    c = client()
    _setup(c)
    qid = c.post("/queries", json={"sql": "SELECT k, v FROM A [RANGE 100]"}).json()["id"]
    good = _rows(_data(3, 10))
    assert c.post("/streams/A/batches", json={"rows": good}).json()["accepted"] == 10
    clock = c.get("/streams/A").json()["stats"]["clock"]

    def bad(rows, **kw):
        r = c.post("/streams/A/batches", json={"rows": rows}, **kw)
        assert r.status_code == 400, r.text
        return r.json()["error"]

    later = [{"k": 1, "v": 1.0, "ts": 30.0 + i} for i in range(4)]
    rows = [dict(r) for r in later]
    rows[2]["k"] = "abc"                                 # wrong type
    e = bad(rows)
    assert (e["column_name"], e["row"], e["stream"]) == ("k", 2, "A") and "INT" in e["message"]
    rows = [dict(r) for r in later]
    rows[3]["kk"] = 5                                    # unknown column
    e = bad(rows)
    assert (e["column_name"], e["row"]) == ("kk", 3)
    rows = [dict(r) for r in later]
    del rows[1]["v"]                                     # missing column
    e = bad(rows)
    assert (e["column_name"], e["row"]) == ("v", 1)
    rows = [dict(r) for r in later]
    rows[1]["k"] = 2.5                                   # INT with a fraction: the engine's check
    e = bad(rows)
    assert (e["type"], e["column_name"], e["row"]) == ("BatchError", "k", 1)
    rows = [dict(r) for r in later]
    rows[2]["ts"] = None                                 # NULL timestamp
    e = bad(rows)
    assert (e["column_name"], e["row"]) == ("ts", 2)
    rows = [dict(r) for r in later]
    rows[3]["ts"] = clock - 50                           # late tuple
    e = bad(rows)
    assert e["type"] == "LateTupleError" and e["row"] == 3
    # NDJSON: bad line and bad value report the line too
    nd = b'{"k": 1, "v": 1.0, "ts": 40}\n{"k": 1, "v": "x", "ts": 41}\n'
    r = c.post("/streams/A/batches", content=nd, headers={"Content-Type": "application/x-ndjson"})
    e = r.json()["error"]
    assert r.status_code == 400 and (e["column_name"], e["row"], e["line"]) == ("v", 1, 2)
    r = c.post("/streams/A/batches", content=b'{"k": 1, "v": 1.0, "ts": 40}\n{"k": \n',
               headers={"Content-Type": "application/x-ndjson"})
    assert r.status_code == 400 and r.json()["error"]["line"] == 2
    r = c.post("/streams/A/batches", content=b'{"rows": [', headers={"Content-Type": "application/json"})
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_json"
    r = c.post("/streams/A/batches", json={"columns": {"k": [1, 2], "v": [1.0], "ts": [50.0, 51.0]}})
    assert r.status_code == 400 and r.json()["error"]["column_name"] == "v"
    # nothing of the rejected batches was taken; earlier data intact; later batches work
    st = c.get("/streams/A").json()["stats"]
    assert st["tuples_in"] == 10 and st["clock"] == clock
    assert c.post("/streams/A/batches", json={"rows": later}).json()["accepted"] == 4
    got = read_all(c, qid)
    exp = sorted((r["k"], r["v"]) for r in good + later)
    assert sorted((r["row"]["k"], r["row"]["v"]) for r in got) == exp


def test_limits_refuse_whole_requests():
    lim = Limits(max_body_bytes=2000, max_batch_rows=5, max_sql_chars=200, max_queries=2, max_results_limit=10,
                 max_streams=3)
    c = client(lim)
    _setup(c)
    big = [{"k": 1, "v": 1.0, "ts": float(i)} for i in range(100)]
    r = c.post("/streams/A/batches", json={"rows": big})
    assert r.status_code == 413 and r.json()["error"]["limit"] == "max_body_bytes"
    r = c.post("/streams/A/batches", json={"rows": big[:6]})
    assert r.status_code == 413 and r.json()["error"]["limit"] == "max_batch_rows"
    r = c.post("/queries", json={"sql": "SELECT k FROM A WHERE " + " OR ".join(["k = 1"] * 40)})
    assert r.status_code == 413 and r.json()["error"]["limit"] == "max_sql_chars"
    for _ in range(2):
        assert c.post("/queries", json={"sql": "SELECT k FROM A"}).status_code == 201
    r = c.post("/queries", json={"sql": "SELECT k FROM A"})
    assert r.status_code == 422 and r.json()["error"]["limit"] == "max_queries"
    r = c.get("/queries/1/results", params={"limit": 11})
    assert r.status_code == 422 and r.json()["error"]["limit"] == "max_results_limit"
    r = c.post("/streams", json={"sql": "CREATE STREAM C (a INT); CREATE STREAM D (a INT)"})
    assert r.status_code == 422 and r.json()["error"]["limit"] == "max_streams"
    # nothing was lost: a batch within the limits still goes in
    assert c.post("/streams/A/batches", json={"rows": big[:5]}).json()["accepted"] == 5
    assert c.get("/limits").json()["max_batch_rows"] == 5


def test_result_log_keeps_newest_rows_and_reports_missed():
    c = client(Limits(max_retained_rows=10))
    _setup(c)
    qid = c.post("/queries", json={"sql": "SELECT k FROM A [RANGE 100]"}).json()["id"]
    c.post("/streams/A/batches", json={"rows": _rows(_data(9, 25))})
    r = c.get(f"/queries/{qid}/results", params={"since": 0, "limit": 100}).json()
    assert r["missed"] == 15 and len(r["rows"]) == 10 and r["rows"][0]["seq"] == 15 and r["next"] == 25


def test_delete_query_and_list():
    c = client()
    _setup(c)
    q1 = c.post("/queries", json={"sql": "SELECT k FROM A"}).json()["id"]
    q2 = c.post("/queries", json={"sql": "SELECT COUNT(*) AS n FROM B [RANGE 10]"}).json()["id"]
    assert [q["id"] for q in c.get("/queries").json()["queries"]] == [q1, q2]
    assert c.delete(f"/queries/{q1}").json()["deleted"] == q1
    assert [q["id"] for q in c.get("/queries").json()["queries"]] == [q2]
    names = [s["name"] for s in c.get("/streams").json()["streams"]]
    assert names == ["A", "B"]


def test_metrics_parse_as_prometheus_text():
    c = client()
    _setup(c)
    qid = c.post("/queries", json={"sql": "SELECT k FROM A [RANGE 100]"}).json()["id"]
    d = _data(4, 12)
    c.post("/streams/A/batches", json={"rows": _rows(d)})
    c.post("/streams/A/batches", json={"rows": [{"k": "x", "v": 1.0, "ts": 99.0}] * 3})   # rejected
    r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    m = parse_prometheus(r.text)
    lab = lambda **kw: frozenset(kw.items())  # noqa: E731
    assert m[("sketchql_stream_tuples_total", lab(stream="A"))] == 12
    assert m[("sketchql_stream_tuples_total", lab(stream="B"))] == 0
    assert m[("sketchql_stream_batches_total", lab(stream="A"))] == 1
    assert m[("sketchql_stream_rejected_batches_total", lab(stream="A"))] == 1
    assert m[("sketchql_stream_rejected_rows_total", lab(stream="A"))] == 3
    assert m[("sketchql_stream_clock_seconds", lab(stream="A"))] == pytest.approx(float(d["ts"].max()))
    assert m[("sketchql_stream_clock_seconds", lab(stream="B"))] == float("-inf")
    assert m[("sketchql_queries", frozenset())] == 1
    assert m[("sketchql_query_result_rows_total", lab(query=str(qid)))] == 12
    assert ("sketchql_http_requests_total", lab(method="POST", status="400")) in m


def test_arrow_ipc_batches_and_tables():
    import pyarrow as pa

    c = client()
    _setup(c)
    qid = c.post("/queries", json={"sql": "SELECT k, v FROM A [RANGE 100]"}).json()["id"]
    d = _data(8, 20)
    table = pa.table({"k": d["k"], "v": d["v"], "ts": d["ts"]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    r = c.post("/streams/A/batches", content=sink.getvalue().to_pybytes(),
               headers={"Content-Type": "application/vnd.apache.arrow.stream"})
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] == 20 and r.json()["clock"] == pytest.approx(float(d["ts"].max()))
    got = sorted((x["row"]["k"], x["row"]["v"]) for x in read_all(c, qid))
    assert got == sorted(zip(d["k"].tolist(), d["v"].tolist()))
    r = c.post("/streams/A/batches", content=b"not arrow", headers={"Content-Type": "application/vnd.apache.arrow.stream"})
    assert r.status_code == 400
    r = c.post("/streams/A/batches", content=b"k,v", headers={"Content-Type": "text/csv"})
    assert r.status_code == 415
    # tables take rows too (no timestamp)
    assert c.post("/streams", json={"sql": "CREATE TABLE T (k INT, name STRING)"}).status_code == 201
    r = c.post("/streams/T/batches", json={"rows": [{"k": 1, "name": "one"}, {"k": 2, "name": None}]})
    assert r.status_code == 200 and r.json()["accepted"] == 2 and r.json()["clock"] is None
    r = c.post("/streams/T/batches", json={"rows": [{"k": 1, "name": 5}]})
    assert r.status_code == 400 and r.json()["error"]["column_name"] == "name"


def test_reader_told_what_the_engine_dropped():
    """When the engine's retained change log overflows between two reads, the
    HTTP cursor reports the dropped rows as missed instead of losing them silently."""
    c = client()
    _setup(c)
    qid = c.post("/queries", json={"sql": "SELECT A.k, A.ts FROM A [RANGE 5]"}).json()["id"]
    q = c.app.state.sketchql.engine.queries[0]
    q.set_knob("retain_changes", 10)
    d = _data(5, 60)
    r = c.post("/streams/A/batches", json={"rows": _rows(d)})
    assert r.status_code == 200, r.text
    body = c.get(f"/queries/{qid}/results?since=0&limit=1000").json()
    # ISTREAM view: one + row per tuple entering the window; the engine kept only 10 changes
    assert 0 < len(body["rows"]) <= 10
    assert body["missed"] + len(body["rows"]) == len(d["ts"])
    assert [r["row"]["ts"] for r in body["rows"]] == sorted(d["ts"])[-len(body["rows"]):]


def _without_batch_route(app):
    """The same app with the BatchRoute fast path taken out (requests then reach the FastAPI route)."""
    from sketchql.service.batch_route import BatchRoute
    app.user_middleware = [m for m in app.user_middleware if m.cls is not BatchRoute]
    app.middleware_stack = None
    return app


def test_batch_fast_path_answers_exactly_like_the_fastapi_route():
    """Oracle: the declared FastAPI route (the fast path must be invisible to clients)."""
    from service_server import arrow_body
    d = _data(11, 60)
    big = "x" * 200
    reqs = [
        ("POST", "/streams/A/batches", {"json": {"rows": _rows(d)[:20]}}),
        ("POST", "/streams/A/batches", {"content": arrow_body({k: v[20:40] for k, v in d.items()}),
                                        "headers": {"content-type": "application/vnd.apache.arrow.stream"}}),
        ("POST", "/streams/A/batches", {"content": "\n".join(json.dumps(r) for r in _rows(d)[40:]).encode(),
                                        "headers": {"content-type": "application/x-ndjson"}}),
        ("POST", "/streams/A/batches", {"json": {"rows": [{"k": "one", "v": 1.0, "ts": 30.0}]}}),   # type error
        ("POST", "/streams/A/batches", {"json": {"rows": [{"k": 1, "v": 1.0, "ts": 0.0}]}}),        # late
        ("POST", "/streams/A/batches", {"content": b"{", "headers": {"content-type": "application/json"}}),
        ("POST", "/streams/A/batches", {"content": b"a,b", "headers": {"content-type": "text/csv"}}),
        ("POST", "/streams/A/batches", {"content": b"\xff\x00junk",
                                        "headers": {"content-type": "application/vnd.apache.arrow.stream"}}),
        ("POST", "/streams/Nope/batches", {"json": {"rows": []}}),
        ("POST", "/streams/A/batches", {"json": {"rows": [{"k": 1, "v": 1.0, "ts": 31.0, "pad": big}] * 40}}),  # 413
        ("POST", "/streams/A/batches", {"json": {"rows": [{"k": 1, "v": 1.0, "ts": 31.0 + i} for i in range(30)]}}),
        ("POST", "/streams/A/batches", {"json": {"rows": [{"k": 1, "v": 1.0, "ts": 70.0}]},          # pipelined
                                        "headers": {"x-producer-id": "p", "x-producer-seq": "0"}}),
        ("POST", "/streams/A/batches", {"json": {"rows": [{"k": 1, "v": 1.0, "ts": 70.0}]},          # its retry
                                        "headers": {"x-producer-id": "p", "x-producer-seq": "0"}}),
        ("POST", "/streams/A/batches", {"json": {"rows": [{"k": 1, "v": 1.0, "ts": 70.0}]},
                                        "headers": {"x-producer-id": "p", "x-producer-seq": "x"}}),   # 400
        ("POST", "/streams/A/batches/", {"json": {"rows": []}}),       # not the batch path: FastAPI answers both
        ("GET", "/streams/A/batches", {}),
    ]
    lim = Limits(max_body_bytes=4000, max_batch_rows=25)
    fast, slow = client(lim), client(lim)
    _without_batch_route(slow.app)
    outs = []
    for c in (fast, slow):
        _setup(c)
        got = []
        for method, path, kw in reqs:
            r = c.request(method, path, **kw)
            got.append((r.status_code, r.headers.get("content-type"), r.json()))
        got.append(c.get("/metrics").text.count("sketchql_rows_rejected_total"))
        got.append(c.get("/streams/A").json()["stats"])
        outs.append(got)
    assert outs[0] == outs[1]
    statuses = [g[0] for g in outs[0][:len(reqs)]]
    assert statuses[:3] == [200, 200, 200] and statuses[3:10] == [400, 400, 400, 415, 400, 404, 413]
    assert statuses[10] == 413 and statuses[11:14] == [200, 200, 400] and statuses[15] == 405


def test_results_fast_path_answers_exactly_like_the_fastapi_route():
    """Oracle: the FastAPI route with the ResultsRoute middleware taken out."""
    from sketchql.service.results_route import ResultsRoute, plain_params

    assert plain_params(b"since=3&limit=10") == {"since": 3, "limit": 10} and plain_params(b"") == {}
    assert plain_params(b"since=3&since=4") is None and plain_params(b"since=-1") is None
    assert plain_params(b"since=%33") is None and plain_params(b"x=1") is None

    def run(c):
        _setup(c)
        qid = c.post("/queries", json={"sql": "SELECT k, v FROM A [RANGE 5 SECONDS] WHERE v > 9"}).json()["id"]
        c.post("/streams/A/batches", json={"rows": _rows(_data(3, 40))})
        qs = ["", "?since=0", "?since=0&limit=5", "?limit=3&since=2", "?since=7&limit=1000", "?limit=0",
              "?limit=-5", "?since=-1", f"?since={10**26}", "?since=abc", "?since=1&since=2", "?since=%31",
              "?since=999999", "?limit=501", "?limit=99999999", "?since=1&extra=2", "?since=+1"]
        got = []
        for q in qs:
            for ident in (qid, 99, "abc", "0"):
                r = c.get(f"/queries/{ident}/results{q}")
                got.append((q, ident, r.status_code, r.headers.get("content-type"), r.content))
        return got

    fast, slow = client(Limits(max_results_limit=500)), client(Limits(max_results_limit=500))
    slow.app.user_middleware = [m for m in slow.app.user_middleware if m.cls is not ResultsRoute]
    slow.app.middleware_stack = None
    a, b = run(fast), run(slow)
    assert a == b
    statuses = {s for _, _, s, _, _ in a}
    assert {200, 404, 422} <= statuses
    assert any(s == 200 and b'"rows":[{' in body for _, _, s, _, body in a)


def test_ndjson_line_count_equals_the_row_wise_count():
    """The fast NDJSON path's check for two objects on one line counts non-blank lines with numpy when
    every line starts with '{'; oracle: the row-wise count (splitlines, strip) on random bodies."""
    import random

    from sketchql.service.ingest import _nonblank_lines

    rng = random.Random(3)
    parts = [b"{}", b"{", b'{"a": 1}', b"x", b" ", b"\t", b"\n", b"\n", b"\r", b"\r\n", b"\x0b", b"\x0c"]
    for _ in range(20_000):
        body = b"".join(rng.choice(parts) for _ in range(rng.randint(0, 14)))
        assert _nonblank_lines(body) == sum(1 for line in body.splitlines() if line.strip()), body
    body = b"\n".join(b'{"k": %d}' % i for i in range(1000))
    assert _nonblank_lines(body) == _nonblank_lines(body + b"\n") == 1000
