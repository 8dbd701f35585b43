"""The ingest fast path (``ServiceApp.batch_chain``) answers exactly like the full middleware stack.

Oracle: the same requests against an app whose ``batch_chain`` is None (every request through FastAPI,
Starlette and the three service middlewares); status, JSON body, WWW-Authenticate and the ``/metrics``
request counters must be identical, for accepted, refused, unauthorised and oversized batches.
"""
import io

import numpy as np
import pyarrow as pa
import pytest

from test_service_helpers import client
from sketchql.service import Limits
from sketchql.service.app import ServiceApp
from sketchql.service.auth import Auth

ADMIN, READ = "admin-token-0123456789", "read-token-0123456789"


def _arrow(batches) -> bytes:
    sink = io.BytesIO()
    rbs = [pa.RecordBatch.from_pydict(b) for b in batches]
    with pa.ipc.new_stream(sink, rbs[0].schema) as w:
        for rb in rbs:
            w.write_batch(rb)
    return sink.getvalue()


AR = {"content-type": "application/vnd.apache.arrow.stream"}
EACH = {**AR, "x-arrow-batches": "each"}
REQUESTS = [
    ("ok json", "/streams/S/batches", {"json": {"rows": [{"k": 1, "ts": 1.0}, {"k": 2, "ts": 2.0}]}}, "admin"),
    ("ok arrow each", "/streams/S/batches",
     {"content": _arrow([{"k": [3, 4], "ts": [3.0, 4.0]}, {"k": [5], "ts": [5.0]}]), "headers": EACH}, "admin"),
    ("late", "/streams/S/batches", {"json": {"rows": [{"k": 1, "ts": 0.5}]}}, "admin"),
    ("bad type arrow", "/streams/S/batches", {"content": _arrow([{"k": ["x"], "ts": [9.0]}]), "headers": AR},
     "admin"),
    ("unknown stream", "/streams/Nope/batches", {"json": {"rows": [{"k": 1, "ts": 1.0}]}}, "admin"),
    ("bad split header", "/streams/S/batches", {"json": {"rows": []}, "headers": {"x-arrow-batches": "x"}},
     "admin"),
    ("too big", "/streams/S/batches", {"content": b"x" * 5000, "headers": {"content-type": "application/json"}},
     "admin"),
    ("no token", "/streams/S/batches", {"json": {"rows": [{"k": 1, "ts": 9.0}]}}, None),
    ("read token", "/streams/S/batches", {"json": {"rows": [{"k": 1, "ts": 9.0}]}}, "read"),
    ("producer", "/streams/S/batches", {"json": {"rows": [{"k": 7, "ts": 10.0}]},
                                        "headers": {"x-producer-id": "p1", "x-producer-seq": "0"}}, "admin"),
    ("producer again", "/streams/S/batches", {"json": {"rows": [{"k": 7, "ts": 10.0}]},
                                              "headers": {"x-producer-id": "p1", "x-producer-seq": "0"}}, "admin"),
]


def _run(fast: bool):
    c = client(limits=Limits(max_body_bytes=4096), auth=Auth({ADMIN: "admin", READ: "read"}))
    assert isinstance(c.app, ServiceApp) and c.app.batch_chain is not None
    if not fast:
        c.app.batch_chain = None
    h = {"authorization": f"Bearer {ADMIN}"}
    assert c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}, headers=h).status_code == 201
    out = []
    for name, path, kw, role in REQUESTS:
        kw = dict(kw)
        headers = dict(kw.pop("headers", {}))
        if role is not None:
            headers["authorization"] = f"Bearer {ADMIN if role == 'admin' else READ}"
        r = c.post(path, headers=headers, **kw)
        out.append((name, r.status_code, r.json(), r.headers.get("www-authenticate")))
    metrics = [line for line in c.get("/metrics", headers=h).text.splitlines()
               if line.startswith(("sketchql_http_requests_total", "sketchql_rejected", "sketchql_auth"))]
    return out, metrics


def test_fast_path_answers_like_the_full_stack():
    fast, slow = _run(True), _run(False)
    for a, b in zip(fast[0], slow[0]):
        assert a == b, (a, b)
    assert fast[1] == slow[1] and any("POST" in m for m in fast[1])
    statuses = {name: status for name, status, _, _ in fast[0]}
    assert statuses["ok json"] == 200 and statuses["ok arrow each"] == 200
    assert statuses["late"] == 400 and statuses["bad type arrow"] == 400 and statuses["unknown stream"] == 404
    assert statuses["too big"] == 413 and statuses["no token"] == 401 and statuses["read token"] == 403
    assert fast[0][-1][2]["duplicate"] is True


def test_fast_path_not_taken_for_other_requests():
    c = client()
    calls = []
    chain = c.app.batch_chain

    async def spy(scope, receive, send):
        calls.append(scope["path"])
        return await chain(scope, receive, send)

    c.app.batch_chain = spy
    c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"})
    c.get("/streams/S")
    c.get("/streams/S/batches")
    c.post("/streams/S/heartbeat", json={"ts": 1.0})
    assert calls == []
    assert c.post("/streams/S/batches", json={"rows": [{"k": 1, "ts": 2.0}]}).status_code == 200
    assert calls == ["/streams/S/batches"]
