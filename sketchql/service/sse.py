"""Server-Sent Events of a query's results: ``GET /queries/{id}/stream``.

Each event carries the rows ``since <= seq < next`` of the query's result
buffer (at most ``limit`` per event)::

    id: <next>
    event: rows
    data: {"query": 1, "since": 0, "next": 3, "missed": 0, "rows": [{"seq", "sign", "at", "row"}, ...]}

The event id is the cursor to continue from, so a client that reconnects with
``Last-Event-ID: <id of the last event it processed>`` receives every row
exactly once (the header wins over ``?since=``).  A client that fell further
behind than the buffer holds gets the oldest rows still held, and the event's
``missed`` says exactly how many rows it lost.  When the query is deleted, or
has failed (state ``failed``, e.g. past ``max_rows_per_step``: no more rows will
come) and its stream has sent every row it made, the stream sends ``event: end``
(``reason``; ``error`` for a failed query) and closes, freeing its slot.  A comment line (``: keepalive``) is
sent after ``keepalive`` seconds without rows.  ``max_events`` (optional)
closes the stream after that many ``rows`` events.

New rows of *this* query wake the stream at once
(:class:`~sketchql.service.results.Notifier`: other queries' results do not), so
delivery latency is the time to serialize the rows, not a polling period.  At
most ``max_sse_clients`` streams are open at once, all queries together: the
route answers 503 ``too_many_sse_clients`` past it (:func:`subscribe`).
"""
from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from typing import Optional

from starlette.concurrency import run_in_threadpool

from .errors import ApiError


def format_event(data: dict, event: str = "rows", id_=None) -> str:
    """One SSE message (``id`` line only when given).

    >>> format_event({"a": 1}, id_=5)
    'id: 5\\nevent: rows\\ndata: {"a":1}\\n\\n'
    """
    head = f"id: {id_}\n" if id_ is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), allow_nan=False)}\n\n"


def subscribe(state, qid: int):
    """The stream's subscription to ``qid``'s results (on the event loop, before the response starts),
    or :class:`ApiError` 503 past ``max_sse_clients``."""
    ev = state.notifier.subscribe(qid)
    if ev is None:
        n = state.limits.max_sse_clients
        raise ApiError(503, "too_many_sse_clients", f"{n} SSE streams are open (max_sse_clients={n}); retry "
                       f"later or poll GET /queries/{qid}/results", limit="max_sse_clients", maximum=n)
    return ev


_GONE = object()


class _Failed:
    """The query failed and every row it made was sent: the stream ends with its error."""

    def __init__(self, error: str):
        self.error = error
_PAGES = 64            # rendered events kept for the other streams at the same cursor


async def _next_event(state, qid: int, cursor: int, limit: int):
    """``(event text, next cursor)`` of the rows from ``cursor``, None when there are none (nothing new,
    nothing missed: no thread hop), or ``_GONE``.  The streams of one query woken by the same rows are
    mostly at the same cursor: the first renders the page (a thread, the JSON), the others take its
    text (``state._sse_pages``, keyed by query, cursor, limit and the buffer's bounds when looked at).
    The page may be read a moment after the bounds were looked at; it is then a later, equally valid
    read of the same cursor."""
    since = max(int(cursor), 0)
    log_ = state.logs.get(qid)
    q = next((x for x in state.engine.queries if x.id == qid), None)
    if log_ is None or q is None:
        return _GONE
    # set by the service once it has drained the failed query's last rows (read before the bounds)
    failed = q.failed if getattr(log_, "_failed_seen", False) else None
    first, total = log_.first, log_.total              # (ints; a stale pair only costs a cache miss)
    if since >= total and since >= first:
        return None if failed is None else _Failed(failed)
    pages = state.__dict__.setdefault("_sse_pages", OrderedDict())
    key = (qid, since, limit, first, total)
    fut = pages.get(key)
    if fut is not None:
        try:
            return await asyncio.shield(fut)
        except Exception:
            pass                                          # the renderer failed: read on our own
    else:
        fut = pages[key] = asyncio.get_running_loop().create_future()
        while len(pages) > _PAGES:
            pages.popitem(last=False)
    try:
        page = await run_in_threadpool(state.read_for_stream, qid, since, limit)
        if page is None:
            out = _GONE
        elif page["rows"] or page["missed"]:
            body = {"query": qid, "since": page["since"], "next": page["next"], "missed": page["missed"],
                    "available": page["available"], "rows": page["rows"]}
            out = (format_event(body, id_=page["next"]), page["next"])
        else:
            out = None
    except BaseException as exc:
        if not fut.done():
            pages.pop(key, None)
            fut.set_exception(exc if isinstance(exc, Exception) else RuntimeError("cancelled"))
            fut.exception()                               # (retrieved: no "never retrieved" warning)
        raise
    if not fut.done():
        fut.set_result(out)
    return out


async def result_events(state, qid: int, cursor: int, limit: int, request, keepalive: float = 15.0,
                        max_events: Optional[int] = None, ev=None):
    """The async generator behind the SSE response (see the module docstring); ``ev``: its
    :func:`subscribe` (taken here when None), released when the generator ends."""
    if ev is None:
        ev = subscribe(state, qid)
    sent = 0
    try:
        yield "retry: 1000\n\n"
        while True:
            ev.clear()
            event = await _next_event(state, qid, cursor, limit)
            if event is _GONE:
                yield format_event({"query": qid, "reason": "the query was deleted"}, event="end")
                return
            if isinstance(event, _Failed):
                yield format_event({"query": qid, "reason": "the query failed", "state": "failed",
                                    "error": event.error}, event="end")
                return
            if event is not None:
                text, cursor = event
                yield text
                sent += 1
                if max_events is not None and sent >= max_events:
                    return
                continue
            try:
                await asyncio.wait_for(ev.wait(), keepalive)
                state.notifier.woken += 1
            except asyncio.TimeoutError:
                if await request.is_disconnected():
                    return
                yield ": keepalive\n\n"
    finally:
        state.notifier.unsubscribe(ev)
