"""``POST /streams/{name}/batches``: the ingest path of the HTTP service, kept short.

One batch = read the body (bounded) -> *admit* it (:meth:`ServiceState.admit`:
parse with :func:`~sketchql.service.ingest.parse_batch`, every check that can
refuse it -- the engine's own validation and ``max_time_jump`` against the
stream's clock *including batches still queued* -- then its log record is
enqueued, an Arrow body logged as sent, and the batch is queued for the apply
thread) -> await the group commit that covers the record
(:meth:`OpLog.when_durable`: no thread blocks on the fsync) and the apply of
the batch queued before it -> 200 with the receipt.  So a 2xx means
"validated and on disk" (and at most this batch is still to be applied: a
read waits for at most one apply); the engine applies the
batch on the apply thread (:mod:`sketchql.service.applier`), in log order,
while the next request is received, checked and logged.  Reads wait for what
was acknowledged before them (:class:`SettleReads`; ``with state.lock``
applies the queue first).

An Arrow body is admitted on the event loop (parsing and checking 10 000 rows
costs ~0.2 ms, less than a hop to a thread and back, which also waits for the
GIL); other bodies (JSON parsing costs milliseconds), and any admission that
would wait (admission lock taken, apply queue full), go to the ingest thread.
A stream with a slack buffer (out-of-order input) is pushed synchronously
(:meth:`ServiceState.push`): whether its tuples are accepted depends on the
buffer, so it is applied before the answer.

Why its own ASGI handler (:class:`BatchRoute`, mounted inside the auth/count
and body-limit middlewares): at ~10 ms of engine work per 10 000-row batch,
FastAPI's routing, dependency solving and response-model serialisation cost
~1.5 ms of event-loop CPU per request and one more thread hop -- measured with
``benchmarks/bench_service.py`` and per-thread CPU profiles.  The FastAPI
route stays declared (OpenAPI documents it) and calls the same
:meth:`BatchIngest.ingest`, so both give identical answers.  The server's app
(:class:`~sketchql.service.app.ServiceApp`) hands these requests to
``BodyLimit -> AuthAndCount -> BatchRoute`` directly, without FastAPI's and
Starlette's outer layers (same checks and counters; ``tests/test_service_fastpath.py``
compares both ways).  A request that finds the apply queue full waits for room
*before* its admission checks: checking first and again after the wait ran the
engine's validation twice per batch under the pipelined client's steady state.

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
import sys
from concurrent.futures import ThreadPoolExecutor

from ..errors import SketchQLError
from .durability import DataDirError
from .errors import ApiError, from_exception, limit_exceeded
from .ingest import ARROW_TYPES, media_type, parse_arrow_batches, parse_batch
from .producers import ID_HEADER, SEQ_HEADER, parse_headers

log = logging.getLogger("sketchql.service")

DURABLE_TIMEOUT_S = 60.0
# While the apply thread runs the engine (pure Python between numpy calls, GIL held), the event loop
# needs the GIL to receive the next request and to answer the previous one; CPython makes a waiting
# thread wait up to the switch interval (5 ms by default) before the holder yields.  A sequential
# client's next batch starts only after the answer, so each such wait idles the pipeline: 1 ms bounds it.
SWITCH_INTERVAL_S = 0.001


class BatchIngest:
    """Parse + push on one ingest thread, then await durability on the event loop (see module doc).

    ``state``: the :class:`~sketchql.service.state.ServiceState`; ``limits``: its
    :class:`~sketchql.service.limits.Limits` (``max_body_bytes``, ``max_batch_rows``).
    """

    def __init__(self, state, limits):
        self.state = state
        self.limits = limits
        self._pool = None
        self._switch = None

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sketchql-ingest")
        return self._pool

    def start(self) -> None:
        """At server start: a shorter GIL switch interval (see ``SWITCH_INTERVAL_S``), restored by close."""
        if self._switch is None:
            self._switch = sys.getswitchinterval()
            sys.setswitchinterval(min(self._switch, SWITCH_INTERVAL_S))

    def close(self) -> None:
        if self._switch is not None:
            sys.setswitchinterval(self._switch)
            self._switch = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.state.applier.close()             # applies what is still queued

    async def ingest(self, name: str, read_body, content_type, producer_headers=(None, None),
                     split=None) -> dict:
        """The receipt of one batch once it is applied and durable; :class:`ApiError` otherwise.
        ``read_body(limit)``: coroutine returning the request body (413 past ``limit`` bytes);
        ``producer_headers``: the values of ``X-Producer-Id`` and ``X-Producer-Seq`` (pipelined ingest,
        :mod:`sketchql.service.producers`), None when absent; ``split``: the ``X-Arrow-Batches`` header
        (``each``: every record batch of the Arrow stream is a batch of its own; ``one``, the default:
        the whole stream is one batch)."""
        state, loop = self.state, asyncio.get_running_loop()
        producer = parse_headers(*producer_headers)               # 400 before anything else
        each = parse_split(split, content_type)
        schema = state.engine.catalog.get(name)                   # 404 before reading the body
        if schema is None:
            await loop.run_in_executor(self._executor(), state.schema, name)   # raises not_found
            schema = state.engine.catalog.get(name)
        try:
            body = await read_body(self.limits.max_body_bytes)
        except ApiError as exc:             # 408 stalled / 413: refused before its turn; successors fail fast
            if producer is not None and 400 <= exc.status < 500:
                state.producers.refuse(*producer)
            raise
        if producer is None:
            return await self._ingest(schema, body, content_type, None, each=each)
        turn = await state.producers.turn(*producer)              # this producer's batches in sequence order
        if turn.duplicate:
            return await self.duplicate(schema, turn)
        try:
            receipt = await self._ingest(schema, body, content_type, producer, turn, each=each)
        except BaseException:
            state.producers.leave(turn, refused=True)      # not admitted (no-op if it was): number not consumed
            raise
        return receipt

    async def duplicate(self, schema, turn) -> dict:
        """The answer to a retried sequence number: nothing applied again; sent once the producer's
        latest admitted batch (hence the original) is durable, and with the original acknowledged for reads."""
        await self.durable(turn.log_seq)
        if turn.apply_number is not None:
            await self.predecessor_applied(turn.apply_number)
            self.state.applier.acknowledged(turn.apply_number)
        return {"stream": schema.name, "accepted": 0, "clock": None, "seq": None, "producer": turn.producer,
                "sequence": turn.seq, "duplicate": True}

    async def _ingest(self, schema, body, content_type, producer, turn=None, each=False) -> dict:
        """Parse, admit (or push) one batch -- or, ``each``, the record batches of one Arrow stream, all
        or nothing (:meth:`ServiceState.admit_many`) -- then await its durability; ``turn`` (a pipelined
        batch) is left as soon as the batch is admitted, so the producer's next batch is admitted while
        this one's log record is committed."""
        state, loop = self.state, asyncio.get_running_loop()
        raw = body if media_type(content_type) in ARROW_TYPES else None

        def parse():
            try:
                if each:
                    return parse_arrow_batches(body, schema, self.limits.max_batch_rows,
                                               self.limits.max_batches_per_request)
                return parse_batch(body, content_type, schema, self.limits.max_batch_rows)
            except ApiError as exc:
                state.reject(schema.name, getattr(exc, "rows_seen", 0))
                raise

        def admit(parsed, block):
            if each:
                return state.admit_many(schema.name, parsed, raw, block=block, producer=producer)
            return state.admit(schema.name, *parsed, raw, block=block, producer=producer)

        def work(parsed=None):
            parsed = parsed or parse()
            receipt = admit(parsed, True)                              # validated, logged, queued
            return receipt if receipt is not None else state.push(schema.name, *parsed, False, raw, producer)

        if raw is not None:
            # Arrow: reading + checking the batch costs ~0.2 ms per 10 000 rows, less than a hop to the
            # ingest thread and back (which also waits for the GIL held by the apply thread); admitted
            # right here unless that would wait (admission lock taken, apply queue full)
            parsed = parse()
            # queue full (backpressure, the pipelined client's steady state): wait for room before the
            # admission, whose checks would otherwise run twice (a BUSY admission checks the batch, to
            # refuse a bad one at once, and the retry checks it again against the clock it then finds)
            for _ in range(8):
                room = state.applier.when_room(loop)
                if room is None:
                    break
                await asyncio.wait_for(room, DURABLE_TIMEOUT_S)
            receipt = admit(parsed, False)
            for _ in range(8):                  # queue full (backpressure): wait for room here, retry
                if receipt is not state.BUSY or state.applier.pending < state.applier.max_pending:
                    break
                room = state.applier.when_room(loop)
                if room is not None:
                    await asyncio.wait_for(room, DURABLE_TIMEOUT_S)
                receipt = admit(parsed, False)
            if receipt is None or receipt is state.BUSY:            # synchronous push, or would block
                receipt = await self._admitting(loop.run_in_executor(self._executor(), work, parsed), turn)
        else:
            receipt = await self._admitting(loop.run_in_executor(self._executor(), work), turn)
        if turn is not None:
            state.producers.leave(turn)                 # admitted: the producer's next batch may go
        number = receipt.pop("apply_number", None)
        # the apply before this batch first: its commit (~1-5 ms) is usually done by then (an apply takes
        # longer), so the loop is woken once per batch instead of twice (each wake-up takes the GIL from
        # the apply thread)
        if number is not None:
            await self.predecessor_applied(number)
        await self.durable(receipt.get("seq"))
        if number is not None:
            state.applier.acknowledged(number)      # reads from now on wait until it is applied
        return receipt

    async def _admitting(self, fut, turn):
        """Await an admission running on the ingest thread.  Cancelled meanwhile (server shutdown), the
        admission still runs to its end: the producer's turn is then left only once it is over, so a
        retry of the same number cannot be admitted beside it."""
        if turn is None:
            return await fut
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            turn.pending = fut
            fut.add_done_callback(lambda f: self.state.producers.leave(
                turn, refused=f.cancelled() or f.exception() is not None, force=True))
            raise

    async def predecessor_applied(self, number: int) -> None:
        """Return once the batch queued before batch ``number`` is applied, so that at most one
        acknowledged batch is ever waiting to be applied and a read waits for at most one apply.
        (Without it, under a slow apply, a batch queued behind the running one was acknowledged too
        and reads waited for both.)  Costs a sequential client no throughput: its next batch, sent
        after this answer, still arrives before the apply thread is done with this one (which runs
        from the moment the one before it is applied).  A batch is durable
        here already; should the apply thread stall past the timeout, the 2xx is sent anyway."""
        fut = self.state.applier.when_applied(asyncio.get_running_loop(), number - 1)
        if fut is not None:
            try:
                await asyncio.wait_for(fut, DURABLE_TIMEOUT_S)
            except asyncio.TimeoutError:
                log.warning("sketchql: batch %d acknowledged while the batch before it is still not applied "
                            "after %g s; see /health", number, DURABLE_TIMEOUT_S)

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

    @classmethod
    def match(cls, scope):
        """The path match when ``scope`` is a ``POST /streams/{name}/batches`` this route serves, else None."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        path = scope["path"]                       # already percent-decoded (ASGI), as FastAPI matches it
        root = scope.get("root_path") or ""
        if root and path.startswith(root):
            path = path[len(root):]
        return cls.PATH.match(path)

    async def __call__(self, scope, receive, send):
        m = self.match(scope)
        if m is None:
            return await self.app(scope, receive, send)
        path = scope["path"]
        ctype = pid = pseq = split = None
        for k, v in scope.get("headers", ()):
            if k == b"content-type":
                ctype = v.decode("latin-1")
            elif k == _ID_B:
                pid = v.decode("latin-1")
            elif k == _SEQ_B:
                pseq = v.decode("latin-1")
            elif k == _SPLIT_B:
                split = v.decode("latin-1")

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
            out, status, headers = await self.ingest.ingest(m.group(1), read_body, ctype, (pid, pseq), split), 200, ()
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


class SettleReads:
    """ASGI middleware: a GET / HEAD waits until every batch acknowledged before it arrived is applied
    (read-your-writes for the reads that do not take ``state.lock``: result cursors, SSE, describe
    endpoints); ``/health`` (which reports the apply queue), ``/limits`` and the docs answer at once.  503 JSON if the apply thread has not caught up within ``timeout`` seconds."""

    def __init__(self, app, state, timeout: float = DURABLE_TIMEOUT_S):
        self.app = app
        self.state = state
        self.timeout = timeout

    # reads that show no ingested data (and /health, which reports the apply queue) answer at once
    EXEMPT = frozenset({"/health", "/limits", "/openapi.json", "/favicon.ico"})
    EXEMPT_PREFIXES = ("/docs", "/static")

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] in ("GET", "HEAD") and \
                scope["path"] not in self.EXEMPT and not scope["path"].startswith(self.EXEMPT_PREFIXES):
            fut = self.state.when_applied(asyncio.get_running_loop())
            if fut is not None:
                try:
                    await asyncio.wait_for(fut, self.timeout)
                except asyncio.TimeoutError:
                    err = ApiError(503, "apply_stalled", f"acknowledged batches were not applied within "
                                   f"{self.timeout:g} s; see /health")
                    return await send_json(send, err.status, err.body())
        return await self.app(scope, receive, send)


_ID_B, _SEQ_B = ID_HEADER.encode(), SEQ_HEADER.encode()
SPLIT_HEADER = "x-arrow-batches"
_SPLIT_B = SPLIT_HEADER.encode()


def parse_split(value, content_type) -> bool:
    """True for ``X-Arrow-Batches: each`` (one batch per record batch; Arrow bodies only), False for
    ``one`` or no header; :class:`ApiError` 400 otherwise."""
    if value is None:
        return False
    v = value.strip().lower()
    if v == "one":
        return False
    if v != "each":
        raise ApiError(400, "bad_request", f"X-Arrow-Batches must be 'each' (every record batch of the Arrow "
                       f"stream is a batch of its own) or 'one' (the default), got {value[:40]!r}",
                       header="X-Arrow-Batches")
    if media_type(content_type) not in ARROW_TYPES:
        raise ApiError(400, "bad_request", f"X-Arrow-Batches: each needs an Arrow IPC stream body "
                       f"(Content-Type {ARROW_TYPES[0]}), got {media_type(content_type)!r}",
                       header="X-Arrow-Batches")
    return True


class _Disconnected(Exception):
    """The client went away before its body was read: nothing is applied, nothing to answer."""


async def send_json(send, status: int, doc, headers=()) -> None:
    body = json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})
