"""The FastAPI application: streams, batches, continuous queries, summaries, metrics.

Endpoints (JSON unless said otherwise; every error is ``{"error": {...}}``,
see :mod:`sketchql.service.errors`):

=======  ==========================================  =============================================
GET      /                                           overview, endpoint list, demo status
GET      /health                                     liveness + counts
GET      /limits                                     the active :class:`Limits`
GET      /demo                                       demo feeder status
GET      /streams                                    streams and tables with schema and stats
POST     /streams                                    ``{"sql": "CREATE STREAM|TABLE|SUMMARY ..."}`` (or DROP)
GET      /streams/{name}                             one stream: schema, stats, knobs
POST     /streams/{name}/batches                     a batch: JSON rows / columns, NDJSON, Arrow IPC
POST     /streams/{name}/heartbeat                   ``{"ts": t}``: no older tuple will come
POST     /queries                                    ``{"sql": "SELECT ..."}`` -> id
GET      /queries                                    registered queries
GET      /queries/{id}                               sql, EXPLAIN text, stats, operators
GET      /queries/{id}/results?since=&limit=         the change stream from a cursor
GET      /queries/{id}/snapshot?at=&limit=           the result relation at event time ``at``
DELETE   /queries/{id}                               deregister
POST     /summaries/load                             ``{"path", "name"?, "as"?}`` a Spark-built summary
GET      /summaries                                  loaded + live (CREATE SUMMARY) summaries
GET      /summaries/{name}                           one summary's description
GET      /summaries/{name}/estimate?value=&t_from=&t_to=&confidence=&attr=&type=
DELETE   /summaries/{name}                           unload a loaded summary
GET      /metrics                                    Prometheus text format
=======  ==========================================  =============================================

>>> from fastapi.testclient import TestClient
>>> c = TestClient(create_app(demo=False))
>>> c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).status_code
201
>>> c.post("/streams/S/batches", json={"rows": [{"k": 1, "ts": 0.5}]}).json()["accepted"]
1
"""
from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import List, Optional

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__ as _VERSION
from .dashboard import dashboard_redirect, router as dashboard_router
from .demo import DemoFeeder
from .errors import ApiError, limit_exceeded
from .ingest import parse_batch
from .limits import Limits
from .metrics import CONTENT_TYPE, collect
from .state import ServiceState
from .summaries import parse_value

ENDPOINTS = [
    "GET /", "GET /health", "GET /limits", "GET /demo",
    "GET /streams", "POST /streams", "GET /streams/{name}", "POST /streams/{name}/batches",
    "POST /streams/{name}/heartbeat",
    "POST /queries", "GET /queries", "GET /queries/{id}", "GET /queries/{id}/results?since=&limit=",
    "GET /queries/{id}/snapshot?at=&limit=", "DELETE /queries/{id}",
    "POST /summaries/load", "GET /summaries", "GET /summaries/{name}",
    "GET /summaries/{name}/estimate?value=&t_from=&t_to=&confidence=&attr=&type=", "DELETE /summaries/{name}",
    "GET /metrics",
]


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) anything over ``limit`` bytes, declared or streamed."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise ApiError(400, "bad_request", f"invalid Content-Length {declared!r}") from None
        if size > limit:
            raise limit_exceeded(413, "max_body_bytes", size, limit, "request body (bytes)")
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise limit_exceeded(413, "max_body_bytes", f">{limit}", limit, "request body (bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_object(request: Request, limit: int, required=(), optional=()) -> dict:
    body = await read_body(request, limit)
    try:
        doc = json.loads(body) if body else None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        col = getattr(exc, "colno", None)
        raise ApiError(400, "invalid_json", f"invalid JSON body: {getattr(exc, 'msg', exc)}", line=line,
                       column=col) from None
    if not isinstance(doc, dict):
        raise ApiError(422, "bad_request", f"the body must be a JSON object with {list(required)}")
    missing = [k for k in required if k not in doc]
    unknown = [k for k in doc if k not in required and k not in optional]
    if missing:
        raise ApiError(422, "bad_request", f"the body lacks field(s) {missing}", field=missing[0])
    if unknown:
        raise ApiError(422, "bad_request", f"unknown field(s) {unknown}; allowed: {list(required) + list(optional)}",
                       field=unknown[0])
    return doc


def create_app(engine=None, demo: bool = True, limits: Limits | None = None, seed: int = 7,
               demo_options: dict | None = None) -> FastAPI:
    """The service around ``engine`` (a new :class:`~sketchql.engine.Engine` by default).

    ``demo``: declare the demo streams/summaries/queries at creation and feed
    them from a background thread while the app runs (lifespan);
    ``demo_options``: :class:`~sketchql.service.demo.DemoFeeder` keywords
    (``speed``, ``tick``, ``max_tuples``).
    """
    limits = limits or Limits()
    state = ServiceState(engine, limits, seed=seed)
    feeder = None
    if demo:
        feeder = DemoFeeder(state, seed=seed, **(demo_options or {}))
        feeder.setup()

    @asynccontextmanager
    async def lifespan(app):
        if feeder is not None:
            feeder.start()
        try:
            yield
        finally:
            if feeder is not None:
                feeder.stop()

    app = FastAPI(title="sketchql", version=_VERSION, lifespan=lifespan,
                  description="Approximate continuous queries over data streams.")
    app.state.sketchql = state
    app.include_router(dashboard_router)   # /dashboard: the error-metrics page (sketchql.service.dashboard)

    # -- errors --------------------------------------------------------------------
    @app.exception_handler(ApiError)
    async def _api_error(request, exc: ApiError):
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(request, exc: RequestValidationError):
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", [])]
        msg = f"{'.'.join(loc)}: {first.get('msg', 'invalid')}" if loc else "invalid request"
        body = ApiError(422, "bad_parameter", msg, parameter=loc[-1] if loc else None,
                        details=[{"loc": [str(x) for x in e.get("loc", [])], "msg": e.get("msg")} for e in errs])
        return JSONResponse(body.body(), status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc: StarletteHTTPException):
        kind = "not_found" if exc.status_code == 404 else "http_error"
        msg = f"no such endpoint: {request.method} {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        return JSONResponse(ApiError(exc.status_code, kind, msg).body(), status_code=exc.status_code)

    @app.middleware("http")
    async def _count(request: Request, call_next):
        response = await call_next(request)
        with state.http_lock:
            state.http[(request.method, response.status_code)] += 1
        return response

    # -- overview ------------------------------------------------------------------------
    @app.get("/")
    def root(request: Request):
        if (page := dashboard_redirect(request)) is not None:   # a browser lands on /dashboard
            return page
        return {"service": "sketchql", "version": _VERSION, "endpoints": ENDPOINTS,
                "demo": feeder.status() if feeder else None,
                "try": ["GET /queries", "GET /queries/1/results?since=0&limit=20",
                        "GET /summaries/s1/estimate?value=1&value=2", "GET /metrics"] if feeder else []}

    @app.get("/health")
    def health():
        with state.lock:
            return {"status": "ok", "version": _VERSION, "streams": len(state.engine.catalog.streams),
                    "queries": len(state.engine.queries), "summaries_loaded": len(state.summaries.entries),
                    "demo": None if feeder is None else {k: feeder.status()[k] for k in
                                                         ("running", "finished", "clock", "pushed", "error")}}

    @app.get("/limits")
    def get_limits():
        return limits.to_dict()

    @app.get("/demo")
    def demo_status():
        if feeder is None:
            raise ApiError(404, "not_found", "the demo is disabled (started with --no-demo)")
        return feeder.status()

    # -- streams ---------------------------------------------------------------------------
    @app.get("/streams")
    def list_streams():
        return state.list_streams()

    @app.post("/streams", status_code=201)
    async def create_stream(request: Request):
        doc = await read_json_object(request, limits.max_body_bytes, required=("sql",))
        return await run_in_threadpool(state.execute_ddl, doc["sql"])

    @app.get("/streams/{name}")
    def get_stream(name: str):
        return state.describe_stream(name)

    @app.post("/streams/{name}/batches")
    async def push_batch(name: str, request: Request):
        schema = await run_in_threadpool(state.schema, name)      # 404 before reading the body
        try:
            body = await read_body(request, limits.max_body_bytes)
            cols, n = await run_in_threadpool(parse_batch, body, request.headers.get("content-type"),
                                              schema, limits.max_batch_rows)
        except ApiError as exc:
            state.reject(schema.name, getattr(exc, "rows_seen", 0))
            raise
        return await run_in_threadpool(state.push, schema.name, cols, n)

    @app.post("/streams/{name}/heartbeat")
    async def heartbeat(name: str, request: Request):
        await run_in_threadpool(state.schema, name)
        doc = await read_json_object(request, limits.max_body_bytes, required=("ts",))
        return await run_in_threadpool(state.heartbeat, name, doc["ts"])

    # -- queries ------------------------------------------------------------------------------
    @app.post("/queries", status_code=201)
    async def register(request: Request):
        doc = await read_json_object(request, limits.max_body_bytes, required=("sql",))
        return await run_in_threadpool(state.register, doc["sql"])

    @app.get("/queries")
    def list_queries():
        return state.list_queries()

    @app.get("/queries/{qid}")
    def get_query(qid: int):
        return state.describe_query(qid)

    @app.get("/queries/{qid}/results")
    def results(qid: int, since: int = 0, limit: Optional[int] = None):
        return state.results(qid, since, limit)

    @app.get("/queries/{qid}/snapshot")
    def snapshot(qid: int, at: Optional[float] = None, limit: Optional[int] = None):
        return state.snapshot(qid, at, limit)

    @app.delete("/queries/{qid}")
    def delete_query(qid: int):
        return state.drop_query(qid)

    # -- summaries ------------------------------------------------------------------------------
    @app.post("/summaries/load", status_code=201)
    async def load_summary(request: Request):
        doc = await read_json_object(request, limits.max_body_bytes, required=("path",), optional=("name", "as"))
        for k in ("name", "as"):
            if doc.get(k) is not None and not isinstance(doc[k], str):
                raise ApiError(422, "bad_request", f"\"{k}\" must be a string", field=k)
        return await run_in_threadpool(state.load_summary, doc["path"], doc.get("name"), doc.get("as"))

    @app.get("/summaries")
    def list_summaries():
        return state.list_summaries()

    @app.get("/summaries/{name}")
    def get_summary(name: str):
        return state.describe_summary(name)

    @app.get("/summaries/{name}/estimate")
    def estimate(name: str, value: List[str] = Query(default=[]), t_from: Optional[float] = None,
                 t_to: Optional[float] = None, confidence: float = 0.95, attr: Optional[str] = None,
                 type: Optional[str] = None):
        if len(value) > limits.max_estimate_values:
            raise limit_exceeded(422, "max_estimate_values", len(value), limits.max_estimate_values,
                                 "values in one estimate")
        values = [parse_value(v, type) for v in value]
        return state.estimate(name, values, t_from, t_to, confidence, attr)

    @app.delete("/summaries/{name}")
    def unload_summary(name: str):
        return state.unload_summary(name)

    # -- metrics ------------------------------------------------------------------------------------
    @app.get("/metrics")
    def metrics():
        return PlainTextResponse(collect(state), media_type=CONTENT_TYPE)

    return app
