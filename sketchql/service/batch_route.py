"""``POST /streams/{name}/batches``: the ingest path of the HTTP service, kept short.

One batch = read the body (bounded) -> one hop to the *ingest thread* (parse the
body with :func:`~sketchql.service.ingest.parse_batch`, then
:meth:`ServiceState.push` with ``wait=False``: under the service lock the
batch is checked, its log record enqueued -- an Arrow body is logged as sent --
and the engine applies it) -> back on the event loop, await the group commit
that covers the record (:meth:`OpLog.when_durable`: no thread blocks on the
fsync) -> 200 with the receipt.  So the 2xx still means "applied and on disk",
and while a request waits for its fsync the ingest thread already runs the
next batch, whose record joins the next commit.

Why its own ASGI handler (:class:`BatchRoute`, mounted inside the auth/count
and body-limit middlewares): at ~10 ms of engine work per 10 000-row batch,
FastAPI's routing, dependency solving and response-model serialisation cost
~1.5 ms of event-loop CPU per request and one more thread hop -- measured with
``benchmarks/bench_service.py`` and per-thread CPU profiles.  The FastAPI
route stays declared (OpenAPI documents it) and calls the same
:meth:`BatchIngest.ingest`, so both give identical answers.

Why one ingest thread: pushes are serialised by the service lock anyway;
a dedicated thread keeps them from occupying (and queueing behind) the
thread pool that serves the other endpoints.

>>> from fastapi.testclient import TestClient
>>> from sketchql.service.app import create_app
>>> c = TestClient(create_app(demo=False))
>>> _ = c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"})
>>> r = c.post("/streams/S/batches", content=b'{"k": 1, "ts": 0.5}', headers={"content-type": "application/x-ndjson"})
>>> r.status_code, r.json()["accepted"], r.json()["clock"]
(200, 1, 0.5)
"""
from __future__ import annotations

import asyncio
import json
import logging
import re
from concurrent.futures import ThreadPoolExecutor

from ..errors import SketchQLError
from .durability import DataDirError
from .errors import ApiError, from_exception, limit_exceeded
from .ingest import ARROW_TYPES, media_type, parse_batch

log = logging.getLogger("sketchql.service")

DURABLE_TIMEOUT_S = 60.0


class BatchIngest:
    """Parse + push on one ingest thread, then await durability on the event loop (see module doc).

    ``state``: the :class:`~sketchql.service.state.ServiceState`; ``limits``: its
    :class:`~sketchql.service.limits.Limits` (``max_body_bytes``, ``max_batch_rows``).
    """

    def __init__(self, state, limits):
        self.state = state
        self.limits = limits
        self._pool = None

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sketchql-ingest")
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    async def ingest(self, name: str, read_body, content_type) -> dict:
        """The receipt of one batch once it is applied and durable; :class:`ApiError` otherwise.
        ``read_body(limit)``: coroutine returning the request body (413 past ``limit`` bytes)."""
        state, loop = self.state, asyncio.get_running_loop()
        schema = state.engine.catalog.get(name)                   # 404 before reading the body
        if schema is None:
            await loop.run_in_executor(self._executor(), state.schema, name)   # raises not_found
            schema = state.engine.catalog.get(name)
        body = await read_body(self.limits.max_body_bytes)
        raw = body if media_type(content_type) in ARROW_TYPES else None

        def work():
            try:
                cols, n = parse_batch(body, content_type, schema, self.limits.max_batch_rows)
            except ApiError as exc:
                state.reject(schema.name, getattr(exc, "rows_seen", 0))
                raise
            return state.push(schema.name, cols, n, False, raw)

        receipt = await loop.run_in_executor(self._executor(), work)
        await self.durable(receipt.get("seq"))
        return receipt

    async def durable(self, seq) -> None:
        """Return once log record ``seq`` is committed (503 if the log cannot be written)."""
        store = self.state.store
        if store is None or seq is None:
            return
        try:
            fut = store.when_durable(seq, asyncio.get_running_loop())
            if fut is not None:
                await asyncio.wait_for(fut, DURABLE_TIMEOUT_S)
        except (DataDirError, asyncio.TimeoutError) as exc:
            msg = str(exc) or f"operation {seq} was not committed within {DURABLE_TIMEOUT_S:g} s"
            raise ApiError(503, "not_durable", f"the change was applied but could not be made durable: {msg}") \
                from None


class BatchRoute:
    """ASGI middleware serving ``POST /streams/{name}/batches`` with :class:`BatchIngest` and passing
    everything else on.  Errors are the service's JSON errors (4xx/503; an unexpected exception is
    logged and answered 500 like the app's handler)."""

    PATH = re.compile(r"^/streams/([^/]+)/batches$")

    def __init__(self, app, ingest: BatchIngest):
        self.app = app
        self.ingest = ingest

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        path = scope["path"]                       # already percent-decoded (ASGI), as FastAPI matches it
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root):]
        m = self.PATH.match(path)
        if m is None:
            return await self.app(scope, receive, send)
        ctype = None
        for k, v in scope.get("headers", ()):
            if k == b"content-type":
                ctype = v.decode("latin-1")
                break

        async def read_body(limit: int) -> bytes:
            chunks, total, more = [], 0, True
            while more:
                msg = await receive()
                if msg["type"] == "http.disconnect":
                    raise _Disconnected()
                chunk = msg.get("body", b"")
                total += len(chunk)
                if total > limit:
                    raise limit_exceeded(413, "max_body_bytes", f">{limit}", limit, "request body (bytes)")
                if chunk:
                    chunks.append(chunk)
                more = msg.get("more_body", False)
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)

        try:
            out, status, headers = await self.ingest.ingest(m.group(1), read_body, ctype), 200, ()
        except _Disconnected:
            return
        except ApiError as exc:
            out, status, headers = exc.body(), exc.status, ()
        except SketchQLError as exc:
            err = from_exception(exc)
            out, status, headers = err.body(), err.status, ()
        except DataDirError as exc:                 # the log refuses writes: nothing was applied
            err = log_unwritable(exc)
            out, status, headers = err.body(), err.status, ()
        except Exception as exc:                     # same answer as the app's catch-all handler
            log.exception("internal error on POST %s", path)
            err = ApiError(500, "internal_error", f"{type(exc).__name__}: {exc}")
            out, status, headers = err.body(), 500, ()
        await send_json(send, status, out, headers)


def log_unwritable(exc) -> ApiError:
    """503 for a change refused because the operation log cannot be written (disk full, I/O error)."""
    return ApiError(503, "not_durable", f"the change was not applied: {exc}")


class _Disconnected(Exception):
    """The client went away before its body was read: nothing is applied, nothing to answer."""


async def send_json(send, status: int, doc, headers=()) -> None:
    body = json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})
