"""uvicorn's httptools protocol, handing a request body of known, bounded length to the app whole.

uvicorn's protocol buffers a request body 64 KiB at a time: past that it pauses reading and wakes the
app's ``receive()``, which returns the bytes so far and resumes reading.  A 1.2 MB Arrow request (5
batches of 10 000 rows) was so ~8 ASGI messages, each a wake-up of the request's task, a pass through
the body-limit and route wrappers and a pause / resume of the socket (two ``epoll_ctl``) -- event-loop
work that holds the GIL the apply thread needs (``benchmarks/bench_service.py``).

:class:`WholeBodyProtocol` changes one thing: a request that declares a ``Content-Length`` of at most
``max_body`` bytes (the service's ``max_body_bytes``) is read without pausing, and ``receive()`` is
woken once, when the body is complete.  Memory per connection stays bounded by ``max_body`` (a longer
declared body is refused 413 by :class:`~sketchql.service.app.BodyLimit` before it is read, and read
the usual way meanwhile); other requests (chunked bodies, larger ones) keep uvicorn's flow control.  A
slow body still shows progress every ``WAKE_EVERY_S`` seconds (the part received so far is handed
over), so ``--body-read-timeout`` keeps meaning "no bytes for that long", not "the whole body took
longer" (a body that stalls hands over what came within ``wake_every``).
"""
from __future__ import annotations

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

#: a body still arriving hands over what it has at least this often (the read timeout sees progress)
WAKE_EVERY_S = 0.25


class WholeBodyProtocol(HttpToolsProtocol):
    """See the module doc.  ``max_body``: the largest declared body read whole (bytes); ``wake_every``:
    seconds after which the part of a body received so far is handed over (a body that keeps arriving
    slowly, or stalls, is seen by the read timeout as it would be with uvicorn's own protocol)."""

    max_body = 8 * 1024 * 1024
    wake_every = WAKE_EVERY_S

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._whole = False
        self._woke = 0.0
        self._timer = None

    def on_headers_complete(self) -> None:
        self._whole = False
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is None or cycle.scope is not self.scope:      # an upgrade: no new request cycle
            return
        for k, v in self.headers:
            if k == b"content-length":
                try:
                    n = int(v)
                except ValueError:
                    return
                self._whole = 0 < n <= self.max_body
                self._woke = self.loop.time()
                return

    def on_body(self, body: bytes) -> None:
        if not self._whole:
            return super().on_body(body)
        cycle = self.cycle
        if (self.parser.should_upgrade() and self._should_upgrade()) or cycle.response_complete:
            return
        cycle.body += body
        now = self.loop.time()
        if now - self._woke >= self.wake_every:
            self._woke = now
            cycle.message_event.set()
        elif self._timer is None:        # should the body stall now, what came is handed over anyway
            self._timer = self.loop.call_at(self._woke + self.wake_every, self._hand_over)

    def _hand_over(self) -> None:
        self._timer = None
        cycle = self.cycle
        if self._whole and cycle is not None and cycle.body and not cycle.response_complete:
            self._woke = self.loop.time()
            cycle.message_event.set()

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def on_message_complete(self) -> None:
        self._stop_timer()
        super().on_message_complete()

    def connection_lost(self, exc) -> None:
        self._stop_timer()
        super().connection_lost(exc)


def whole_body_protocol(max_body: int, read_timeout: float | None = None) -> type:
    """A :class:`WholeBodyProtocol` class reading declared bodies of up to ``max_body`` bytes whole and
    handing over a partial body at least every ``min(WAKE_EVERY_S, read_timeout / 4)`` seconds."""
    every = WAKE_EVERY_S if read_timeout is None else min(WAKE_EVERY_S, float(read_timeout) / 4.0)
    return type("WholeBodyProtocol", (WholeBodyProtocol,), {"max_body": int(max_body), "wake_every": every})
