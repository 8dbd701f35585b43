"""``GET /queries/{id}/results?since=&limit=``: cursor reads answered before FastAPI's routing.

Readers poll this endpoint while batches are ingested; each poll competes for
the GIL with the ingest thread, so its latency grows with the event-loop CPU it
needs.  Through FastAPI a poll that finds nothing new costs ~0.49 ms of loop
CPU (routing over every route, dependency solving, parameter validation);
the read itself (:meth:`ServiceState.results`, under the buffer's lock only)
costs ~0.02 ms.  :class:`ResultsRoute` answers the well-formed request --
integer path id, at most one plain-digit ``since`` and ``limit`` -- directly;
anything else (other parameters, signs, percent-escapes, repeated keys) goes
on to the FastAPI route, which validates and documents the endpoint, so every
error keeps its usual answer.  The bytes are the same either way.

>>> from fastapi.testclient import TestClient
>>> from sketchql.service.app import create_app
>>> c = TestClient(create_app(demo=False))
>>> _ = c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"})
>>> qid = c.post("/queries", json={"sql": "SELECT k FROM S [NOW]"}).json()["id"]
>>> _ = c.post("/streams/S/batches", json={"rows": [{"k": 7, "ts": 1.0}]})
>>> [r["row"]["k"] for r in c.get(f"/queries/{qid}/results?since=0&limit=5").json()["rows"]]
[7]
"""
from __future__ import annotations

import re

from .batch_route import send_json
from .errors import ApiError

_PATH = re.compile(r"^/queries/(\d{1,18})/results$")
_PARAM = re.compile(r"^(since|limit)=(\d{1,18})$")


def plain_params(qs: bytes):
    """``{"since": int, "limit": int}`` (each optional) from a plain query string, else None."""
    out = {}
    if not qs:
        return out
    for part in qs.decode("latin-1").split("&"):
        m = _PARAM.match(part)
        if m is None or m.group(1) in out:
            return None
        out[m.group(1)] = int(m.group(2))
    return out


class ResultsRoute:
    """ASGI middleware answering plain cursor reads from ``state.results`` (see module doc)."""

    def __init__(self, app, state):
        self.app = app
        self.state = state

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "GET":
            path = scope["path"]
            root = scope.get("root_path") or ""
            if root and path.startswith(root):
                path = path[len(root):]
            m = _PATH.match(path)
            params = plain_params(scope.get("query_string", b"")) if m is not None else None
            if params is not None:
                try:
                    out, status = self.state.results(int(m.group(1)), params.get("since", 0), params.get("limit")), 200
                except ApiError as exc:
                    out, status = exc.body(), exc.status
                return await send_json(send, status, out)
        return await self.app(scope, receive, send)
