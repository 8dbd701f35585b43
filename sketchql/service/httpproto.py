"""uvicorn's httptools protocol with bounded request heads: header bytes and header read time.

uvicorn with httptools reads a request's URL and headers whole, however large
(the parser buffers a header value until it ends) and however slowly they
arrive (its timeouts cover idle keep-alive connections only).  This subclass
of :class:`~uvicorn.protocols.http.httptools_impl.HttpToolsProtocol` adds, per
connection:

* ``max_header_bytes``: the bytes received while a request's head (request
  line and headers) is incomplete are counted in ``data_received`` -- so the
  parser's own buffering is bounded too, not only what reaches ``on_header``;
  past the limit the request is answered 431 (JSON, like every API error) and
  the connection closed.  The count may include the tail of the previous
  request's body that arrived in the same read as the new head (one read,
  at most 256 KiB), never the new request's body;
* ``header_timeout``: seconds from a connection's start, or from the first
  byte received after a request's response is complete (a request's first
  byte, or blank lines before it), until the next head is complete; past it
  the request is answered 408 and the connection closed (a response still
  being sent on the connection: just closed).  Idle keep-alive connections
  that send nothing keep uvicorn's own timeout.  The blank lines count: RFC
  9112 lets a server ignore CRLFs before a request line, and httptools does
  (no ``on_message_begin``), while uvicorn cancels its keep-alive timer on
  every read -- so a client sending ``\r\n`` every few seconds would otherwise
  hold its connection (one of ``--max-connections``) forever.

The body is untouched (its size and stalls are bounded by the app's
``BodyLimit``), and h11 is not used: httptools' C parser stays on the ingest
path.  The connection limit is uvicorn's ``limit_concurrency``, answered 503 JSON
(``too_many_connections``) instead of uvicorn's plain text.
"""
from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol


def _response(status: int, type_: str, message: str, **fields) -> bytes:
    body = json.dumps({"error": dict({"type": type_, "message": message, "status": status}, **fields)}).encode()
    return b"".join([STATUS_LINE[status], b"content-type: application/json\r\n",
                     b"content-length: ", str(len(body)).encode(), b"\r\n", b"connection: close\r\n\r\n", body])


def _too_many_connections(limit: int):
    """The ASGI app answering a request past ``limit_concurrency``: 503 JSON, connection closed."""
    body = json.dumps({"error": {"type": "too_many_connections", "status": 503, "limit": "max_connections",
                                 "value": int(limit), "message": f"the server serves at most {limit} "
                                 "connections/requests at once (--max-connections); retry later"}}).encode()

    async def app(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()), (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body, "more_body": False})
    return app


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """See the module docstring; :func:`protocol_class` sets the two bounds."""

    max_header_bytes: int = 65_536
    header_timeout: float | None = 10.0

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._in_head = True              # a request head is being received (also before the first byte)
        self._head_bytes = 0
        self._head_timer = None
        self._refused = False
        self._message_done = False        # the parser has completed a request and not begun the next

    # -- the head's timer ------------------------------------------------------------------------
    def _arm(self) -> None:
        if self.header_timeout is not None and self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout, self._head_timed_out)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self._in_head:
            self._refuse(408, "header_timeout", f"the request's URL and headers took longer than "
                         f"header_read_timeout_s={self.header_timeout:g} s to arrive", limit="header_read_timeout_s")

    def _refuse(self, status: int, type_: str, message: str, **fields) -> None:
        self._refused = True
        self._disarm()
        if self.transport is None or self.transport.is_closing():
            return
        if self.cycle is None or self.cycle.response_complete:     # no response of ours is being sent
            self.transport.write(_response(status, type_, message, **fields))
        self.transport.close()

    # -- protocol and parser callbacks ---------------------------------------------------------------
    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._in_head and self._message_done and (self.cycle is None or self.cycle.response_complete):
            # bytes after a finished exchange open the next head (blank lines too: see the module doc)
            self._in_head = True
            self._head_bytes = 0
            self._arm()
        super().data_received(data)
        if self._in_head and not self._refused:
            self._head_bytes += len(data)
            if self._head_bytes > self.max_header_bytes:
                self._refuse(431, "limit_exceeded", f"request URL and headers: more than {self.max_header_bytes} "
                             f"bytes exceeds the limit max_header_bytes={self.max_header_bytes}",
                             limit="max_header_bytes", maximum=self.max_header_bytes)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._message_done = False
        self._in_head = True
        self._head_bytes = 0
        self._arm()

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        lc = self.limit_concurrency
        if lc is not None and (len(self.connections) >= lc or len(self.tasks) >= lc):
            # past --max-connections: uvicorn would answer a plain-text 503; answer it as JSON, like
            # every API error (the request's cycle captures the app, so swapping it here is local)
            self.logger.warning("Exceeded concurrency limit (--max-connections %s).", lc)
            app, self.app, self.limit_concurrency = self.app, _too_many_connections(lc), None
            try:
                super().on_headers_complete()
            finally:
                self.app, self.limit_concurrency = app, lc
            return
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._message_done = True
        super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        if not self._refused:                 # (already answered 431 / 408)
            super().send_400_response(msg)


def protocol_class(max_header_bytes: int, header_timeout: float | None) -> type:
    """A :class:`BoundedHttpToolsProtocol` subclass with these bounds (uvicorn's ``http=`` argument)."""
    return type("BoundedHttpToolsProtocol", (BoundedHttpToolsProtocol,),
                {"max_header_bytes": int(max_header_bytes), "header_timeout": header_timeout})
