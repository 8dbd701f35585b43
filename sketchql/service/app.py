"""The FastAPI application: streams, batches, continuous queries, results (cursor and SSE), contracts,
budgets, control tables, summaries, metrics; durable under a data directory; bearer-token auth.

Endpoints (JSON unless said otherwise; every error is ``{"error": {...}}``,
see :mod:`sketchql.service.errors`; ``/docs`` is the OpenAPI UI, served
offline).  "admin" marks what needs an admin token when tokens are configured
(reads then need a read or admin token, see :mod:`sketchql.service.auth`):

=======  ==========================================  =============================================
GET      /                                           overview, endpoint list, demo status
GET      /health                                     liveness, counts, durability, recovery report
GET      /limits                                     the active :class:`Limits` (result buffer size, ...)
GET      /demo                                       demo feeder status
GET      /streams                                    streams and tables with schema and stats
POST     /streams                                    admin ``{"sql": "CREATE STREAM|TABLE|SUMMARY ..."}`` (or ALTER STREAM, DROP)
GET      /streams/{name}                             one stream: schema, stats, knobs
POST     /streams/{name}/batches                     admin; a batch: JSON rows / columns, NDJSON, Arrow IPC
POST     /streams/{name}/heartbeat                   admin ``{"ts": t}``: no older tuple will come
POST     /queries                                    admin ``{"sql": "SELECT ..."}`` -> id (EXPLAIN: the plan)
POST     /explain                                    ``{"sql"}``: EXPLAIN text + plan JSON (registers nothing)
GET      /queries                                    registered queries
GET      /queries/{id}                               sql, EXPLAIN text, stats, operators, contract
PATCH    /queries/{id}                               admin ``{"weight", "active"}``
DELETE   /queries/{id}                               admin; deregister
GET      /queries/{id}/results?since=&limit=         the result buffer from a cursor
GET      /queries/{id}/stream?since=&limit=          SSE of the results (``Last-Event-ID`` resumes)
GET      /queries/{id}/snapshot?at=&limit=           the result relation at event time ``at``
GET      /queries/{id}/contract                      error, confidence, budget, on_miss (+ budget_unit)
PATCH    /queries/{id}/contract                      admin; change them
GET      /queries/{id}/precision?limit=             estimated / audited error now and over time
GET      /queries/{id}/plan                          the plan as JSON (+ EXPLAIN text)
GET      /engine/budgets                             memory / CPU budgets
PATCH    /engine/budgets                             admin; change them
GET      /allocator                                  the allocator's latest decision
GET      /control                                    every control table (``?kind=``)
GET      /control/{kind}/{name}                      one control table
PATCH    /control/{kind}/{name}                      admin ``{"knob": value, ...}`` (all or nothing)
POST     /summaries/load                             admin ``{"path", "name"?, "as"?}`` below a summary root
GET      /summaries                                  loaded + live (CREATE SUMMARY) summaries
GET      /summaries/{name}                           one summary's description
GET      /summaries/{name}/estimate?value=&t_from=&t_to=&confidence=&attr=&type=
DELETE   /summaries/{name}                           admin; unload a loaded summary (or DROP SUMMARY a live one)
GET      /durability                                 the operation log and checkpoint status
POST     /admin/checkpoint                           admin; write a checkpoint now
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

import asyncio
import logging
import os
import threading
import time
import weakref
from contextlib import asynccontextmanager
from typing import List, Optional

from fastapi import FastAPI, Header, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import __version__ as _VERSION
from ..control import ControlError
from ..errors import SketchQLError
from . import models as M
from .batch_route import BatchIngest, BatchRoute, SettleReads, log_unwritable
from .results_route import ResultsRoute
from .durability import DataDirError
from .dashboard import dashboard_redirect, router as dashboard_router
from .errors import ApiError, limit_exceeded
from .ingest import ARROW_TYPES, NDJSON_TYPES
from .jsonbody import BodyError, JsonRoute, parse_json
from .limits import Limits
from .metrics import CONTENT_TYPE, collect
from .producers import parse_headers
from .sse import result_events, subscribe as sse_subscribe
from .state import ServiceState
from .summaries import parse_value

log = logging.getLogger("sketchql.service")

ENDPOINTS = [
    "GET /", "GET /health", "GET /limits", "GET /demo", "GET /docs",
    "GET /streams", "POST /streams", "GET /streams/{name}", "POST /streams/{name}/batches",
    "POST /streams/{name}/heartbeat",
    "POST /queries", "POST /explain", "GET /queries", "GET /queries/{id}", "PATCH /queries/{id}",
    "DELETE /queries/{id}", "GET /queries/{id}/results?since=&limit=", "GET /queries/{id}/stream?since=&limit=",
    "GET /queries/{id}/snapshot?at=&limit=", "GET /queries/{id}/contract", "PATCH /queries/{id}/contract",
    "GET /queries/{id}/precision", "GET /queries/{id}/plan",
    "GET /engine/budgets", "PATCH /engine/budgets", "GET /allocator",
    "GET /control", "GET /control/{kind}/{name}", "PATCH /control/{kind}/{name}",
    "POST /summaries/load", "GET /summaries", "GET /summaries/{name}",
    "GET /summaries/{name}/estimate?value=&t_from=&t_to=&confidence=&attr=&type=", "DELETE /summaries/{name}",
    "GET /durability", "POST /admin/checkpoint", "GET /metrics",
]

_ERR = {c: {"model": M.ErrorBody} for c in (400, 401, 403, 404, 409, 413, 415, 422)}
_BATCH_BODY = {"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"oneOf": [
        {"type": "object", "properties": {"rows": {"type": "array", "items": {"type": "object"}}},
         "required": ["rows"]},
        {"type": "object", "properties": {"columns": {"type": "object",
                                                      "additionalProperties": {"type": "array"}}},
         "required": ["columns"]},
        {"type": "array", "items": {"type": "object"}}]}},
    NDJSON_TYPES[0]: {"schema": {"type": "string", "description": "one JSON row object per line"}},
    ARROW_TYPES[0]: {"schema": {"type": "string", "format": "binary", "description": "an Arrow IPC stream"}},
}}}


class BodyLimit:
    """ASGI middleware: refuse (413) a request whose declared body exceeds ``limit`` bytes, and stop one
    whose streamed (chunked) body grows past it or stalls: reading past ``limit`` bytes raises a 413
    :class:`BodyError`, waiting more than ``read_timeout`` seconds for the next chunk a 408 one (None:
    no bound).  Either way the request is answered with that error (whatever the route made of the
    exception) and ``Connection: close``, since the rest of the body is never read."""

    def __init__(self, app, limit: int, read_timeout: float | None = None, on_refuse=None):
        self.app = app
        self.limit = int(limit)
        self.read_timeout = read_timeout
        self.on_refuse = on_refuse      # called with the scope of a request refused here (before routing)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        has_body = False
        for k, v in scope.get("headers", ()):
            if k == b"transfer-encoding":
                has_body = True
            elif k == b"content-length":
                try:
                    size = int(v)
                except ValueError:
                    size = -1
                has_body = size != 0
                if size < 0 or size > self.limit:
                    err = limit_exceeded(413, "max_body_bytes", size, self.limit, "request body (bytes)") if size >= 0 \
                        else ApiError(400, "bad_request", f"invalid Content-Length {v.decode(errors='replace')[:40]!r}")
                    resp = JSONResponse(err.body(), status_code=err.status, headers={"Connection": "close"})
                    if self.on_refuse is not None:
                        self.on_refuse(scope)
                    return await resp(scope, receive, send)
        if not has_body:                     # (no Content-Length and no Transfer-Encoding, or length 0)
            return await self.app(scope, receive, send)
        seen, done, stopped, started = 0, False, None, False
        limit, timeout = self.limit, (self.read_timeout if has_body else None)   # no body: nothing to wait for
        # the read timeout: one watchdog timer per request (not one per chunk: ~1 us instead of ~6 us per
        # chunk with asyncio.timeout), cancelling the task only while it waits for body bytes
        loop = task = timer = None
        waiting, fired, since = False, False, 0.0

        def watchdog():
            nonlocal timer, fired
            timer = None
            if done or stopped is not None:
                return
            now = loop.time()
            if waiting and now - since >= timeout:
                fired = True
                task.cancel()
            else:
                timer = loop.call_at((since if waiting else now) + timeout, watchdog)

        async def limited():
            nonlocal seen, done, stopped, loop, task, timer, waiting, fired, since
            if done:
                return await receive()
            if stopped is not None:
                raise stopped
            if timeout is None:
                msg = await receive()
            else:
                if loop is None:
                    loop, task = asyncio.get_running_loop(), asyncio.current_task()
                since, waiting = loop.time(), True
                if timer is None:
                    timer = loop.call_at(since + timeout, watchdog)
                try:
                    msg = await receive()
                except asyncio.CancelledError:
                    if not fired:
                        raise
                    task.uncancel()
                    stopped = BodyError(408, "body_timeout", f"request body: no data for {timeout:g} s (received "
                                        f"{seen} bytes); the limit is body_read_timeout_s={timeout:g}",
                                        limit="body_read_timeout_s", maximum=timeout, received=seen)
                    raise stopped from None
                finally:
                    waiting = False
            if msg["type"] == "http.request":
                seen += len(msg.get("body", b""))
                if seen > limit:
                    stopped = BodyError(413, "limit_exceeded", f"request body (bytes): more than {limit} exceeds "
                                        f"the limit max_body_bytes={limit}", limit="max_body_bytes",
                                        value=f">{limit}", maximum=limit)
                    raise stopped
                done = not msg.get("more_body", False)
            else:
                done = True
            if (done or stopped is not None) and timer is not None:
                timer.cancel()
                timer = None
            return msg

        async def guarded(msg):
            nonlocal started
            if stopped is None:
                started = started or msg["type"] == "http.response.start"
                return await send(msg)
            if started:                      # (a response begun before the body was stopped: let it finish)
                return await send(msg)
            # the route's own answer to the stopped body is dropped; this middleware answers below

        try:
            await self.app(scope, limited, guarded)
        except Exception:
            if stopped is None or started:
                raise
        finally:
            if timer is not None:
                timer.cancel()
            # watchdog reschedules itself, so it is in its own closure: a reference cycle per request
            # that only the cyclic GC would free (its full collections, with the engine's objects on
            # the heap, showed as 15-20 ms more result-read p99 in bench_service)
            watchdog = timer = task = None
        if stopped is not None and not started:
            await JSONResponse(stopped.body(), status_code=stopped.status,
                               headers={"Connection": "close"})(scope, receive, send)


class AuthAndCount:
    """ASGI middleware: the token check of every request (:class:`~sketchql.service.auth.Auth`) and the
    per-(method, status) request counters of ``/metrics`` (pure ASGI: no extra task per request)."""

    def __init__(self, app, state, auth=None):
        self.app = app
        self.state = state
        self.auth = auth

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        st = self.state
        if self.auth is not None and self.auth.enabled:
            try:
                self.auth.check(Request(scope))
            except ApiError as exc:
                with st.http_lock:
                    st.auth_failures[exc.status] += 1
                    st.http[(scope["method"], exc.status)] += 1
                headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
                return await JSONResponse(exc.body(), status_code=exc.status, headers=headers)(scope, receive, send)
        status = [500]

        async def counted(msg):
            if msg["type"] == "http.response.start":
                status[0] = msg["status"]
            await send(msg)

        try:
            await self.app(scope, receive, counted)
        finally:
            with st.http_lock:
                st.http[(scope["method"], status[0])] += 1


class ServiceApp(FastAPI):
    """The service's FastAPI app, with ``POST /streams/{name}/batches`` (the ingest hot path) handed
    straight to :attr:`batch_chain` -- ``BodyLimit -> AuthAndCount -> BatchRoute``, the same three
    middlewares it meets inside the full stack, in the same order, so every check and counter is the
    same -- without first passing FastAPI's and Starlette's own layers (the app call, the telemetry
    check, ServerErrorMiddleware, the framework's body-limit wrapper), which add nothing to a route
    that answers every outcome itself (:class:`BatchRoute` turns any exception into a JSON 4xx/5xx).
    Taken only when the app has no ``root_path`` of its own and FastAPI's native telemetry is off
    (otherwise the request goes the usual way, to be traced)."""

    batch_chain = None

    async def __call__(self, scope, receive, send):
        chain = self.batch_chain
        if chain is not None and BatchRoute.match(scope) is not None and not self.root_path \
                and not _telemetry_on(self):
            scope["app"] = self
            return await chain(scope, receive, send)
        return await super().__call__(scope, receive, send)


def _telemetry_on(app) -> bool:
    tel = getattr(app, "_native_telemetry", None)
    return tel is not None and tel.enabled()


async def _unreachable(scope, receive, send):     # pragma: no cover -- the chain is entered only on a match
    raise RuntimeError(f"not an ingest request: {scope.get('method')} {scope.get('path')}")


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) anything over ``limit`` bytes, declared or streamed."""
    chunks, total = [], 0
    async for chunk in request.stream():
        total += len(chunk)
        if total > limit:
            raise limit_exceeded(413, "max_body_bytes", f">{limit}", limit, "request body (bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


class Checkpointer:
    """Background checkpoints: after ``every_tuples`` logged tuples, ``interval_s`` seconds with
    anything logged, or once replaying the log's tail would take about ``max_replay_s`` seconds (the
    engine time spent on the logged operations since the last checkpoint, ``state.replay_cost_s``:
    restart time is then bounded by loading the checkpoint plus about that, whatever the queries
    cost per tuple; 0 turns that trigger off), and once more at a clean shutdown."""

    def __init__(self, state, every_tuples: int = 1_000_000, interval_s: float = 60.0,
                 max_replay_s: float = 2.0):
        self.state = state
        self.every_tuples = int(every_tuples)
        self.interval_s = float(interval_s)
        self.max_replay_s = float(max_replay_s)
        self._stop = threading.Event()
        self._thread = None
        self._last = time.monotonic()
        self.error = None

    def due(self) -> bool:
        st = self.state.store
        if st is None or st.ops_since_checkpoint == 0:
            return False
        if self.max_replay_s > 0 and self.state.replay_cost_s >= self.max_replay_s:
            return True
        return st.tuples_since_checkpoint >= self.every_tuples or time.monotonic() - self._last >= self.interval_s

    def run_once(self):
        try:
            self.state.checkpoint()
            self.error = None
        except Exception as exc:            # keep serving: the log still holds everything
            self.error = f"{type(exc).__name__}: {exc}"
            log.exception("checkpoint failed")
        self._last = time.monotonic()

    def _loop(self):
        while not self._stop.wait(0.5):
            if self.due():
                self.run_once()

    def start(self):
        if self.state.store is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._loop, name="sketchql-checkpoint", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
            self._thread = None


def _docs_routes(app: FastAPI):
    """``/docs`` with Swagger UI's assets served from the installed ``fastapi_offline`` package."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.staticfiles import StaticFiles

    try:
        import fastapi_offline
        assets = os.path.join(os.path.dirname(fastapi_offline.__file__), "static")
    except ImportError:
        assets = None
    if assets and os.path.isdir(assets):
        app.mount("/docs-assets", StaticFiles(directory=assets), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    def docs():
        if not assets:
            return HTMLResponse("<p>Swagger UI's assets are not installed (pip install fastapi-offline); the "
                                "schema is at <a href='/openapi.json'>/openapi.json</a>.</p>")
        return get_swagger_ui_html(openapi_url="/openapi.json", title="sketchql - API",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon.png")


def create_app(engine=None, demo: bool = True, limits: Limits | None = None, seed: int = 7,
               demo_options: dict | None = None, data_dir: str | None = None, fresh: bool = False,
               auth=None, checkpoint_every_tuples: int = 1_000_000, checkpoint_interval_s: float = 60.0,
               sync: bool = True, checkpoint_max_replay_s: float = 2.0, heap_reserve_mb: float = 0.0) -> FastAPI:
    """The service around ``engine`` (a new :class:`~sketchql.engine.Engine` by default).

    ``demo``: declare the demo streams/summaries/queries (or resume them from
    ``data_dir``) and feed them from a background thread while the app runs;
    ``demo_options``: :class:`~sketchql.service.demo.DemoFeeder` keywords.
    ``data_dir``: keep state there (operation log + checkpoints) and recover it
    now; ``fresh``: wipe it first.  ``auth``: an :class:`~sketchql.service.auth.Auth`.
    ``checkpoint_every_tuples`` / ``checkpoint_interval_s`` / ``checkpoint_max_replay_s``: when
    the background checkpointer writes one (:class:`Checkpointer`).  ``sync=False`` skips fsync (tests of logic only).
    ``heap_reserve_mb``: MB of heap the apply thread keeps pre-touched while idle (``sketchql serve
    --heap-reserve-mb``; :class:`~sketchql.service.applier.ApplyQueue`), 0: off.
    """
    from .durability import OpLog, wipe

    limits = limits or Limits()
    store = None
    if data_dir is not None:
        if fresh:
            wipe(data_dir)
        store = OpLog(data_dir, sync=sync)
    state = ServiceState(engine, limits, seed=seed, store=store, auth=auth)
    state.applier.heap_reserve = int(max(heap_reserve_mb, 0.0) * (1 << 20))
    if store is not None:
        info = state.recover()
        if info.get("replayed_ops") or info.get("checkpoint_seq"):
            log.warning("sketchql: recovered %s: checkpoint %s + %s logged operations (%s tuples) in %.2f s%s",
                        store.path, info["checkpoint_seq"], info["replayed_ops"], info["replayed_tuples"],
                        info["seconds"], f"; {len(info['errors'])} could not be replayed" if info["errors"] else "")
    feeder = None
    if demo:
        from .demo_glue import make_feeder
        feeder = make_feeder(state, seed=seed, options=demo_options)
    checkpointer = Checkpointer(state, checkpoint_every_tuples, checkpoint_interval_s, checkpoint_max_replay_s)
    ingest = BatchIngest(state, limits)

    @asynccontextmanager
    async def lifespan(app):
        ingest.start()
        if feeder is not None:
            feeder.start()
        checkpointer.start()
        try:
            yield
        finally:
            if feeder is not None:
                feeder.stop()
            ingest.close()
            checkpointer.stop()
            if store is not None:
                if store.ops_since_checkpoint:
                    checkpointer.run_once()
                store.close()

    app = ServiceApp(title="sketchql", version=_VERSION, lifespan=lifespan, docs_url=None, redoc_url=None,
                  description="Approximate continuous queries over data streams. With tokens configured, send "
                              "`Authorization: Bearer <token>`: reads need the read or admin role, changes admin.")
    app.router.route_class = JsonRoute      # JSON bodies parsed with errors that say where (jsonbody)
    app.state.sketchql = state
    app.state.checkpointer = checkpointer
    app.state.auth = auth
    app.include_router(dashboard_router)   # /dashboard: the error-metrics page (sketchql.service.dashboard)
    _docs_routes(app)

    # -- errors --------------------------------------------------------------------
    @app.exception_handler(ApiError)
    async def _api_error(request, exc: ApiError):
        headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
        return JSONResponse(exc.body(), status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request, exc: RequestValidationError):
        errs = exc.errors()
        first = errs[0] if errs else {}
        loc = [str(x) for x in first.get("loc", [])]
        msg = f"{'.'.join(loc)}: {first.get('msg', 'invalid')}" if loc else "invalid request"
        if first.get("type") == "json_invalid":          # loc = ("body", character offset)
            at = f" at character {loc[-1]}" if len(loc) > 1 else ""
            msg = f"invalid JSON body{at}: {first.get('ctx', {}).get('error', first.get('msg'))}"
            loc = loc[:1]
        body = ApiError(422 if first.get("type") != "json_invalid" else 400,
                        "bad_parameter" if first.get("type") != "json_invalid" else "invalid_json", msg,
                        parameter=loc[-1] if loc else None,
                        details=[{"loc": [str(x) for x in e.get("loc", [])], "msg": e.get("msg")} for e in errs])
        return JSONResponse(body.body(), status_code=body.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request, exc: StarletteHTTPException):
        kind = "not_found" if exc.status_code == 404 else "http_error"
        msg = f"no such endpoint: {request.method} {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        return JSONResponse(ApiError(exc.status_code, kind, msg).body(), status_code=exc.status_code)

    @app.exception_handler(SketchQLError)
    async def _sketchql(request, exc: SketchQLError):
        from .errors import from_exception
        err = from_exception(exc)
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(DataDirError)
    async def _log_unwritable(request, exc: DataDirError):
        err = log_unwritable(exc)
        return JSONResponse(err.body(), status_code=err.status)

    @app.exception_handler(Exception)
    async def _internal(request, exc: Exception):
        log.exception("internal error on %s %s", request.method, request.url.path)
        err = ApiError(500, "internal_error", f"{type(exc).__name__}: {exc}")
        return JSONResponse(err.body(), status_code=500)

    app.add_middleware(ResultsRoute, state=state)           # plain cursor reads (results_route)
    app.add_middleware(SettleReads, state=state)            # reads see every batch admitted before them
    app.add_middleware(BatchRoute, ingest=ingest)           # inside auth/count and the body limit
    app.add_middleware(AuthAndCount, state=state, auth=auth)
    def refused_before_routing(scope):
        """A pipelined batch refused by BodyLimit (declared body too large) before its producer's turn:
        its waiting successors fail fast (``Producers.refuse``), if the request may write at all."""
        if BatchRoute.match(scope) is None:
            return
        h = {k: v.decode("latin-1") for k, v in scope.get("headers", ()) if k in (b"x-producer-id", b"x-producer-seq")}
        try:
            producer = parse_headers(h.get(b"x-producer-id"), h.get(b"x-producer-seq"))
            if producer is not None and auth is not None and auth.enabled:
                auth.check(Request(scope))
        except ApiError:
            return
        if producer is not None:
            state.producers.refuse(*producer)

    app.add_middleware(BodyLimit, limit=limits.max_body_bytes, read_timeout=limits.body_read_timeout_s,
                       on_refuse=refused_before_routing)
    app.batch_chain = BodyLimit(AuthAndCount(BatchRoute(_unreachable, ingest), state, auth), limits.max_body_bytes,
                                limits.body_read_timeout_s, on_refuse=refused_before_routing)

    # -- overview ------------------------------------------------------------------------
    def _demo_status():
        if feeder is None:
            return None
        s = feeder.status()
        with state.lock:
            live = {q.id for q in state.engine.queries}
        s["queries"] = [q for q in s.get("queries", []) if q in live]
        return s

    @app.get("/", tags=["overview"])
    def root(request: Request):
        if (page := dashboard_redirect(request)) is not None:   # a browser lands on /dashboard
            return page
        return {"service": "sketchql", "version": _VERSION, "endpoints": ENDPOINTS, "demo": _demo_status(),
                "auth": "tokens" if (auth is not None and auth.enabled) else "none",
                "data_dir": store.path if store is not None else None,
                "try": ["GET /queries", "GET /queries/1/results?since=0&limit=20", "GET /queries/1/stream",
                        "GET /summaries/s1/estimate?value=1&value=2", "GET /metrics", "GET /docs"] if feeder else []}

    @app.get("/health", tags=["overview"])
    def health():
        # no engine lock: /health answers while batches are applied (it reports the apply queue)
        out = {"status": "ok", "version": _VERSION, "streams": len(state.engine.catalog.streams),
               "queries": len(state.engine.queries), "summaries_loaded": len(state.summaries.entries),
               "durable": store is not None, "recovery": state.recovery,
               "checkpoint_error": checkpointer.error, "apply": state.applier.status(),
               "producers": state.producers.status(),
               "sse": {"clients": state.notifier.count, "max_sse_clients": limits.max_sse_clients,
                       "refused": state.notifier.refused, "wakeups": state.notifier.woken}}
        if state.applier.error_count:          # an acknowledged batch the engine failed to apply
            out["status"] = "degraded"
        if feeder is not None:
            s = feeder.status()
            out["demo"] = {k: s[k] for k in ("running", "finished", "clock", "pushed", "error")}
        return out

    @app.get("/limits", tags=["overview"])
    def get_limits():
        return limits.to_dict()

    @app.get("/demo", tags=["overview"], responses=_ERR)
    def demo_status():
        if feeder is None:
            raise ApiError(404, "not_found", "the demo is disabled (started with --no-demo)")
        return _demo_status()

    @app.get("/durability", tags=["overview"])
    def durability():
        if store is None:
            return {"durable": False, "reason": "started without --data-dir: nothing survives a restart"}
        return dict({"durable": True, "recovery": state.recovery, "checkpoint_every_tuples": checkpointer.every_tuples,
                     "checkpoint_interval_s": checkpointer.interval_s,
                     "checkpoint_max_replay_s": checkpointer.max_replay_s,
                     "replay_estimate_s": round(state.replay_cost_s, 3)}, **store.status())

    @app.post("/admin/checkpoint", tags=["overview"], response_model=M.CheckpointOut, responses=_ERR)
    async def checkpoint_now():
        return await run_in_threadpool(state.checkpoint)

    # -- streams ---------------------------------------------------------------------------
    @app.get("/streams", tags=["streams"])
    def list_streams():
        return state.list_streams()

    @app.post("/streams", status_code=201, tags=["streams"], response_model=M.DdlReceipt, responses=_ERR)
    async def create_stream(body: M.Sql, response: Response):
        out = await run_in_threadpool(state.execute_ddl, body.sql)
        if out["dropped"] and not out["created"]:
            response.status_code = 200        # DROP only: nothing created
        return out

    @app.get("/streams/{name}", tags=["streams"], responses=_ERR)
    def get_stream(name: str):
        return state.describe_stream(name)

    @app.post("/streams/{name}/batches", tags=["streams"], response_model=M.BatchReceipt, responses=_ERR,
              openapi_extra=_BATCH_BODY)
    async def push_batch(name: str, request: Request):
        # served by the BatchRoute middleware (sketchql.service.batch_route) before FastAPI's routing;
        # declared here for OpenAPI, and answering the same way if reached
        # the receipt as is (the model documents it; its optional fields appear only when they apply)
        return JSONResponse(await ingest.ingest(
            name, lambda limit: read_body(request, limit), request.headers.get("content-type"),
            (request.headers.get("x-producer-id"), request.headers.get("x-producer-seq")),
            request.headers.get("x-arrow-batches")))

    @app.post("/streams/{name}/heartbeat", tags=["streams"], response_model=M.HeartbeatReceipt, responses=_ERR)
    async def heartbeat(name: str, body: M.Heartbeat):
        return await run_in_threadpool(state.heartbeat, name, body.ts)

    # -- queries ------------------------------------------------------------------------------
    @app.post("/queries", status_code=201, tags=["queries"], responses=_ERR)
    async def register(body: M.Sql):
        out = await run_in_threadpool(state.register, body.sql)
        if out.get("registered") is False:               # EXPLAIN SELECT: nothing was created
            return JSONResponse(out, status_code=200)
        return out

    @app.post("/explain", tags=["queries"], response_model=M.ExplainOut, responses=_ERR)
    async def explain(body: M.Sql):
        return await run_in_threadpool(state.explain, body.sql)

    @app.get("/queries", tags=["queries"], response_model=M.QueryList)
    def list_queries():
        return state.list_queries()

    @app.get("/queries/{qid}", tags=["queries"], responses=_ERR)
    def get_query(qid: int):
        return state.describe_query(qid)

    @app.patch("/queries/{qid}", tags=["queries"], response_model=M.QueryInfo, responses=_ERR)
    async def patch_query(qid: int, body: M.QueryPatch):
        vals = body.model_dump(exclude_unset=True)
        if "weight" in vals and vals["weight"] is None:
            raise ApiError(422, "bad_parameter", "weight must be a number >= 0", parameter="weight")
        if "active" in vals and vals["active"] is None:
            raise ApiError(422, "bad_parameter", "active must be true or false", parameter="active")
        return await run_in_threadpool(state.patch_query, qid, vals)

    @app.delete("/queries/{qid}", tags=["queries"], response_model=M.Deleted, responses=_ERR)
    async def delete_query(qid: int):
        return await run_in_threadpool(state.drop_query, qid)

    @app.get("/queries/{qid}/results", tags=["results"], response_model=M.ResultsPage, responses=_ERR)
    async def results(qid: int, since: int = 0, limit: Optional[int] = None):
        # on the event loop: a read takes only its buffer's lock, never the engine's, so it does not wait
        # for a push (no thread-pool hop either); serialized directly -- the model documents it, but
        # validating thousands of rows per poll would dominate the latency.  Plain reads are answered
        # before this by the ResultsRoute middleware (sketchql.service.results_route), identically.
        return JSONResponse(state.results(qid, since, limit))

    @app.get("/queries/{qid}/stream", tags=["results"], responses={**_ERR, 200: {
        "content": {"text/event-stream": {}}, "description": "SSE: `rows` events, `id` = the cursor to resume "
                                                             "from (send it back as Last-Event-ID)"}})
    async def stream(qid: int, request: Request, since: Optional[int] = None, limit: int = 1000,
                     max_events: Optional[int] = Query(None, ge=1),
                     last_event_id: Optional[str] = Header(None, alias="Last-Event-ID")):
        limit = state.check_limit(limit)
        if last_event_id is not None and last_event_id.strip():
            try:
                since = int(last_event_id.strip())
            except ValueError:
                raise ApiError(422, "bad_parameter", f"Last-Event-ID must be a result cursor (an integer), got "
                               f"{last_event_id[:40]!r}", parameter="Last-Event-ID") from None
        since = 0 if since is None else since

        def check():
            state._check_since(since, state._buffer(qid)[1])
        await run_in_threadpool(check)
        ev = sse_subscribe(state, qid)                   # 503 past max_sse_clients
        gen = result_events(state, qid, since, limit, request, max_events=max_events, ev=ev)
        # a generator never started (client gone before the body) runs no finally: release it when collected
        weakref.finalize(gen, state.notifier.unsubscribe, ev)
        return StreamingResponse(gen, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/queries/{qid}/snapshot", tags=["results"], responses=_ERR)
    def snapshot(qid: int, at: Optional[float] = None, limit: Optional[int] = None):
        return state.snapshot(qid, at, limit)

    # -- contracts, precision, budgets, control tables ---------------------------------------------
    @app.get("/queries/{qid}/contract", tags=["precision"], response_model=M.Contract, responses=_ERR)
    def get_contract(qid: int):
        return state.contract(qid)

    @app.patch("/queries/{qid}/contract", tags=["precision"], response_model=M.Contract, responses=_ERR)
    async def patch_contract(qid: int, body: M.ContractPatch):
        vals = body.model_dump(exclude_unset=True)
        if not vals:
            raise ApiError(422, "bad_request", "give at least one of error, confidence, budget, on_miss")
        return await run_in_threadpool(state.patch_contract, qid, vals)

    @app.get("/queries/{qid}/precision", tags=["precision"], response_model=M.Precision, responses=_ERR)
    def precision(qid: int, limit: Optional[int] = Query(None, ge=1, le=100_000)):
        return state.precision(qid, limit)

    @app.get("/queries/{qid}/plan", tags=["queries"], response_model=M.PlanOut, responses=_ERR)
    def plan(qid: int):
        return state.plan(qid)

    @app.get("/engine/budgets", tags=["precision"], response_model=M.Budgets)
    def get_budgets():
        return state.budgets()

    @app.patch("/engine/budgets", tags=["precision"], response_model=M.Budgets, responses=_ERR)
    async def patch_budgets(body: M.BudgetsPatch):
        vals = body.model_dump(exclude_unset=True)
        if not vals:
            raise ApiError(422, "bad_request", "give memory_bytes and/or cpu_units_per_s (null = unlimited)")
        return await run_in_threadpool(state.patch_budgets, vals)

    @app.get("/allocator", tags=["precision"], response_model=M.Allocator)
    def allocator():
        return state.allocator()

    @app.get("/control", tags=["control"], response_model=M.ControlTables, responses=_ERR)
    def control(kind: Optional[str] = None):
        return state.control_tables(kind)

    @app.get("/control/{kind}/{name}", tags=["control"], response_model=M.ControlTableOut, responses=_ERR)
    def control_one(kind: str, name: str):
        return state.control_table(kind, name)

    @app.patch("/control/{kind}/{name}", tags=["control"], response_model=M.ControlWrite, responses=_ERR,
               openapi_extra={"requestBody": {"required": True, "content": {"application/json": {"schema": {
                   "type": "object", "description": "{knob: value, ...}; all validated before any is set"}}}}})
    async def control_set(kind: str, name: str, request: Request):
        body = await read_body(request, limits.max_body_bytes)
        doc = parse_json(body) if body else None
        return await run_in_threadpool(state.set_controls, kind, name, doc)

    # -- summaries ------------------------------------------------------------------------------
    @app.post("/summaries/load", status_code=201, tags=["summaries"], responses=_ERR)
    async def load_summary(body: M.SummaryLoad):
        return await run_in_threadpool(state.load_summary, body.path, body.name, body.as_)

    @app.get("/summaries", tags=["summaries"])
    def list_summaries():
        return state.list_summaries()

    @app.get("/summaries/{name}", tags=["summaries"], responses=_ERR)
    def get_summary(name: str):
        return state.describe_summary(name)

    @app.get("/summaries/{name}/estimate", tags=["summaries"], responses=_ERR)
    def estimate(name: str, value: List[str] = Query(default=[]), t_from: Optional[float] = None,
                 t_to: Optional[float] = None, confidence: float = 0.95, attr: Optional[str] = None,
                 type: Optional[str] = None):
        if len(value) > limits.max_estimate_values:
            raise limit_exceeded(422, "max_estimate_values", len(value), limits.max_estimate_values,
                                 "values in one estimate")
        values = [parse_value(v, type) for v in value]
        return state.estimate(name, values, t_from, t_to, confidence, attr)

    @app.delete("/summaries/{name}", tags=["summaries"], response_model=M.Deleted, responses=_ERR)
    async def unload_summary(name: str):
        return await run_in_threadpool(state.unload_summary, name)

    # -- metrics ------------------------------------------------------------------------------------
    @app.get("/metrics", tags=["overview"])
    def metrics():
        return PlainTextResponse(collect(state), media_type=CONTENT_TYPE)

    _ = ControlError  # (re-exported errors are mapped by the SketchQLError handler)
    return app
