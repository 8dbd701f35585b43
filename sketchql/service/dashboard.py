"""The dashboard of error metrics: ``/dashboard`` (HTML), its assets, a state JSON and an SSE feed.

Routes (an :class:`fastapi.APIRouter`, mounted by ``app.include_router(router)``):

=======  ====================================  ============================================================
GET      /dashboard                            the page (static HTML + JS + CSS, works offline)
GET      /dashboard/static/{file}              the page's own assets (``sketchql/service/static``)
GET      /dashboard/vendor/plotly.min.js       the chart library, read from the installed ``plotly`` package
GET      /dashboard/api/state                  the newest frame, the bounded history, where controls go
GET      /dashboard/api/events                 ``text/event-stream``: one ``frame`` event per tick
PATCH    /dashboard/api/control/{kind}/{name}  ``{"knob": value, ...}`` -- only while the service has no
                                               ``PATCH /control/{kind}/{name}`` of its own (then: 409)
=======  ====================================  ============================================================

A frame (see :mod:`sketchql.service.dashboard_data`) carries, per query, the
contract, the knobs, the measured output rate / budget used / sampling and
shedding rates, the precision API's figures when it exists (else ``None``:
"not available"), the plan; per stream the ingest rate, late and rejected
rows and memory; per summary the zones of every granularity; the
allocator's decision when there is an allocator.

SSE: each response lasts at most :data:`STREAM_SECONDS` (so a server
shutdown never waits on an open stream); the page reconnects at once,
sending ``Last-Event-ID``, and on a new server (``boot`` changed) starts
its series afresh.  Bounded: the page keeps :data:`~sketchql.service.dashboard_data.HISTORY`
points per series.

Authentication is the service's (:mod:`sketchql.service.auth`, a middleware
in front of every route): with tokens configured every route here needs the
``read`` role and the control route ``admin``.  Open the page as
``/dashboard?access_token=<token>``: the page's asset URLs carry it, the page
keeps it (session storage, the "token" field) and sends
``Authorization: Bearer <token>`` with every API call and with the SSE feed
(read with ``fetch``, which can send headers, not ``EventSource``).

>>> from fastapi import FastAPI
>>> from fastapi.testclient import TestClient
>>> from sketchql.service.state import ServiceState
>>> app = FastAPI(); app.state.sketchql = ServiceState(); app.include_router(router)
>>> with TestClient(app) as c:
...     c.get("/dashboard").headers["content-type"].startswith("text/html")
True
"""
from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from contextlib import asynccontextmanager
from html import escape
from pathlib import Path
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from ..control import ControlError, jsonable
from ..errors import SketchQLError
from .dashboard_data import HISTORY, DashboardFeed
from .errors import ApiError
from .jsonbody import parse_json

STATIC = Path(__file__).with_name("static")
#: seconds one SSE response stays open before the page reconnects
STREAM_SECONDS = 10.0
#: wall seconds between frames
INTERVAL = 1.0

_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
          ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml", ".png": "image/png"}


def wants_html(request: Request) -> bool:
    """True when the client prefers HTML to JSON (a browser): ``text/html`` is listed in
    Accept with a q-value at least that of ``application/json`` (absent = 0)."""
    q = {}
    for part in request.headers.get("accept", "").split(","):
        bits = [b.strip() for b in part.split(";")]
        if not bits[0]:
            continue
        w = 1.0
        for b in bits[1:]:
            if b.startswith("q="):
                try:
                    w = float(b[2:])
                except ValueError:
                    w = 0.0
        q[bits[0].lower()] = max(w, q.get(bits[0].lower(), 0.0))
    html = q.get("text/html", 0.0)
    return html > 0 and html >= q.get("application/json", 0.0)


def plotly_js() -> Path | None:
    """``plotly.min.js`` shipped inside the installed ``plotly`` wheel (None if not installed)."""
    spec = importlib.util.find_spec("plotly")
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        p = Path(root) / "package_data" / "plotly.min.js"
        if p.is_file():
            return p
    return None


def _feed(app) -> DashboardFeed:
    feed = getattr(app.state, "dashboard_feed", None)
    if feed is None:
        feed = app.state.dashboard_feed = DashboardFeed(app.state.sketchql, interval=INTERVAL, history=HISTORY)
    return feed


def _service_control_route(app) -> bool:
    """True when the service itself serves ``PATCH /control/{kind}/{name}``."""
    for r in getattr(app, "routes", []):
        if getattr(r, "path", None) == "/control/{kind}/{name}" and "PATCH" in (getattr(r, "methods", None) or ()):
            return True
    return False


@asynccontextmanager
async def _lifespan(app):
    feed = _feed(app) if hasattr(app.state, "sketchql") else None
    if feed is not None:
        feed.start()
    try:
        yield
    finally:
        if feed is not None:
            feed.stop()


router = APIRouter(lifespan=_lifespan)


@router.get("/dashboard", include_in_schema=False)
def dashboard_page(request: Request):
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    token = request.query_params.get("access_token")
    if token:     # with tokens configured the assets need it too (a browser sends no header for them)
        q = "?" + urlencode({"access_token": token})
        for a in ('/dashboard/static/dashboard.css"', '/dashboard/static/dashboard.js"',
                  '/dashboard/vendor/plotly.min.js"'):
            html = html.replace(a, a[:-1] + escape(q) + '"')
    return HTMLResponse(html, headers={"Cache-Control": "no-cache"})


@router.get("/dashboard/static/{name}", include_in_schema=False)
def dashboard_static(name: str):
    p = STATIC / name
    if "/" in name or "\\" in name or name.startswith(".") or not p.is_file() or p.suffix not in _TYPES:
        raise ApiError(404, "not_found", f"no dashboard asset {name!r}")
    return FileResponse(p, media_type=_TYPES[p.suffix], headers={"Cache-Control": "no-cache"})


@router.get("/dashboard/vendor/plotly.min.js", include_in_schema=False)
def dashboard_plotly():
    p = plotly_js()
    if p is None:
        raise ApiError(404, "not_found", "the chart library is not installed: pip install 'sketchql[service]' "
                                         "(it ships plotly.min.js inside the plotly package)")
    return FileResponse(p, media_type=_TYPES[".js"], headers={"Cache-Control": "max-age=86400"})


@router.get("/dashboard/api/state")
async def dashboard_state(request: Request):
    feed = _feed(request.app)
    feed.start()
    frame = await run_in_threadpool(feed.latest)
    base = "/control" if _service_control_route(request.app) else "/dashboard/api/control"
    return JSONResponse(jsonable({"frame": frame, "history": feed.history(), "control_base": base,
                                  "history_limit": feed.points.maxlen}))


def _sse(frame: dict) -> str:
    try:
        data = json.dumps(frame, separators=(",", ":"), allow_nan=False)
    except ValueError:
        data = json.dumps(jsonable(frame), separators=(",", ":"))
    return f"id: {frame['boot']}:{frame['seq']}\nevent: frame\ndata: {data}\n\n"


@router.get("/dashboard/api/events")
async def dashboard_events(request: Request):
    feed = _feed(request.app)
    feed.start()
    last = request.headers.get("last-event-id", "")

    async def gen():
        yield "retry: 1000\n\n"
        sent = None
        if last.startswith(feed.boot + ":"):
            try:
                sent = int(last.split(":", 1)[1])
            except ValueError:
                sent = None
        end = time.monotonic() + STREAM_SECONDS
        quiet = 0
        while time.monotonic() < end:
            if await request.is_disconnected():
                break
            frame = await run_in_threadpool(feed.latest)
            if frame["seq"] != sent:
                sent = frame["seq"]
                quiet = 0
                yield _sse(frame)
            else:
                quiet += 1
                if quiet % 10 == 0:
                    yield ": keep-alive\n\n"
            await asyncio.sleep(max(feed.interval / 4, 0.05))

    return StreamingResponse(gen(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


@router.patch("/dashboard/api/control/{kind}/{name}", openapi_extra={"requestBody": {"required": True, "content": {
    "application/json": {"schema": {"type": "object", "minProperties": 1, "additionalProperties": True,
                                    "description": "{knob: value, ...}; all validated before any is set"}}}}})
async def dashboard_control(kind: str, name: str, request: Request):
    """Set knobs of one control table: ``{"knob": value, ...}``, all validated before any is applied."""
    if _service_control_route(request.app):
        raise ApiError(409, "use_service_route", f"use PATCH /control/{kind}/{name} (the service's own route)")
    doc = parse_json(await request.body() or b"null")
    if not isinstance(doc, dict) or not doc:
        raise ApiError(422, "bad_request", "the body must be a non-empty JSON object {\"knob\": value, ...}")
    st = request.app.state.sketchql

    def apply():
        with st.lock:
            ct = st.engine.controls
            try:
                table = ct.get(kind, name)
            except ControlError as exc:
                raise ApiError(404, "not_found", str(exc), kind=kind, name=name) from None
            try:
                for knob, value in doc.items():        # validate every knob first: all or nothing
                    table.knob(knob).coerce(value, where=f"{kind} {table.name}")
                applied = {knob: ct.set(kind, name, knob, value) for knob, value in doc.items()}
            except (ControlError, SketchQLError) as exc:
                raise ApiError(422, "bad_control", str(exc), kind=kind, name=name) from None
            return {"applied": jsonable(applied), "table": ct.get(kind, name).as_dict()}

    out = await run_in_threadpool(apply)
    feed = _feed(request.app)
    await run_in_threadpool(feed.sample)          # the next frame shows the change
    return out


def dashboard_redirect(request: Request):
    """For ``GET /``: a redirect to ``/dashboard`` when a browser asks (Accept prefers text/html),
    else None (API clients keep getting the JSON overview)."""
    from fastapi.responses import RedirectResponse

    if not wants_html(request):
        return None
    qs = request.url.query
    return RedirectResponse("/dashboard" + (f"?{qs}" if qs else ""), status_code=307)
