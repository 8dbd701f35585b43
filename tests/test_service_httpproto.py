"""The whole-body HTTP protocol (sketchql.service.httpproto) against uvicorn's own, over real sockets.

Oracle: the bytes sent.  Each case checks what the ASGI app receives (messages and body) with
:class:`WholeBodyProtocol`; the first also runs uvicorn's protocol on the same request.
"""
from __future__ import annotations

import json
import socket
import threading
import time

import numpy as np
import pytest

pytest.importorskip("httptools")

from sketchql.service.app import create_app                # noqa: E402
from sketchql.service.httpproto import whole_body_protocol  # noqa: E402
from sketchql.service.limits import Limits                  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Recorder:
    """ASGI app: answers every request with the sizes of the body messages it received."""

    def __init__(self):
        self.requests = []

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return
        sizes, body = [], b""
        while True:
            msg = await receive()
            if msg["type"] != "http.request":
                return
            sizes.append(len(msg.get("body", b"")))
            body += msg.get("body", b"")
            if not msg.get("more_body", False):
                break
        self.requests.append((sizes, body))
        out = json.dumps({"sizes": sizes, "n": len(body)}).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})


def _serve(app, http="auto"):
    import uvicorn

    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", http=http))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and th.is_alive()
        time.sleep(0.02)
    return server, th, port


def _stop(server, th):
    server.should_exit = True
    th.join(10)


def _answers(sock, n, timeout=10.0):
    """Read ``n`` HTTP responses (with Content-Length) from ``sock``: [(status line, body bytes)]."""
    sock.settimeout(timeout)
    data, out = b"", []
    while len(out) < n:
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"connection closed after {len(out)} answers: {data[:200]!r}"
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        if lines[0].startswith(b"HTTP/1.1 100"):
            data = rest
            out.append((lines[0], b""))
            continue
        length = int(next(v for k, v in (ln.split(b":", 1) for ln in lines[1:]) if k.strip().lower() == b"content-length"))
        while len(rest) < length:
            chunk = sock.recv(65536)
            assert chunk
            rest += chunk
        out.append((lines[0], rest[:length]))
        data = rest[length:]
    return out


def _post(path: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\n"
            b"Content-Length: %d\r\n" % len(body) + extra + b"\r\n" + body)


BODY = np.random.default_rng(3).integers(0, 256, 1_300_000, dtype=np.uint8).tobytes()


def test_declared_body_arrives_in_one_message_and_equals_what_uvicorn_delivers():
    got = {}
    for name, http in (("uvicorn", "httptools"), ("whole", whole_body_protocol(8 << 20))):
        app = Recorder()
        server, th, port = _serve(app, http)
        try:
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(_post(b"/x", BODY))
                (status, _), = _answers(s, 1)
            assert status.startswith(b"HTTP/1.1 200")
            got[name] = app.requests[0]
        finally:
            _stop(server, th)
    assert got["whole"][1] == BODY and got["uvicorn"][1] == BODY
    assert got["whole"][0] == [len(BODY)]                       # one message
    assert len(got["uvicorn"][0]) > 1                            # uvicorn's: one per ~64 KiB read


def test_larger_chunked_pipelined_and_expect_continue_bodies_are_intact():
    app = Recorder()
    server, th, port = _serve(app, whole_body_protocol(100_000))
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            # larger than max_body: uvicorn's flow control, several messages
            s.sendall(_post(b"/big", BODY))
            (status, _), = _answers(s, 1)
            assert status.startswith(b"HTTP/1.1 200")
            # chunked (no Content-Length)
            part = BODY[:150_000]
            s.sendall(b"POST /c HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" +
                      b"%x\r\n" % 100_000 + part[:100_000] + b"\r\n" + b"%x\r\n" % 50_000 + part[100_000:] +
                      b"\r\n0\r\n\r\n")
            (status, _), = _answers(s, 1)
            assert status.startswith(b"HTTP/1.1 200")
            # two requests sent back to back on one connection (HTTP pipelining)
            a, b = BODY[:70_000], BODY[70_000:90_000]
            s.sendall(_post(b"/p1", a) + _post(b"/p2", b))
            assert all(st.startswith(b"HTTP/1.1 200") for st, _ in _answers(s, 2))
            # Expect: 100-continue: the body is sent after the interim answer
            c = BODY[:80_000]
            s.sendall(_post(b"/e", b"", b"Expect: 100-continue\r\n").replace(b"Content-Length: 0", b"Content-Length: %d" % len(c)))
            (interim, _), = _answers(s, 1)
            assert interim.startswith(b"HTTP/1.1 100")
            s.sendall(c)
            (status, _), = _answers(s, 1)
            assert status.startswith(b"HTTP/1.1 200")
    finally:
        _stop(server, th)
    bodies = [body for _, body in app.requests]
    assert bodies == [BODY, part, a, b, c]
    sizes = [sz for sz, _ in app.requests]
    assert len(sizes[0]) > 1 and sizes[2] == [len(a)] and sizes[3] == [len(b)] and sizes[4] == [len(c)]


def test_a_slow_body_is_handed_over_in_parts_as_it_arrives():
    app = Recorder()
    server, th, port = _serve(app, whole_body_protocol(8 << 20, read_timeout=0.4))     # wake_every 0.1 s
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            msg = _post(b"/slow", BODY[:30_000])
            cut = len(msg) - 20_000
            s.sendall(msg[:cut])
            time.sleep(0.5)
            s.sendall(msg[cut:])
            (status, _), = _answers(s, 1)
        assert status.startswith(b"HTTP/1.1 200")
    finally:
        _stop(server, th)
    sizes, body = app.requests[0]
    assert body == BODY[:30_000]
    assert len(sizes) >= 2 and sizes[-1] == 20_000      # the first part was handed over during the pause


def test_stalled_body_is_408_with_the_bytes_received_counted():
    """The service over the protocol: a body that stops arriving is answered 408 after the read timeout,
    counting the bytes that did arrive (handed over by the protocol's timer), and the connection closed."""
    limits = Limits(body_read_timeout_s=0.5)
    app = create_app(demo=False, limits=limits)
    server, th, port = _serve(app, whole_body_protocol(limits.max_body_bytes, limits.body_read_timeout_s))
    try:
        with socket.create_connection(("127.0.0.1", port)) as s:
            t0 = time.monotonic()
            s.sendall(b"POST /queries HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: 1000\r\n\r\n0123456789")
            s.settimeout(10)
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            took = time.monotonic() - t0
    finally:
        _stop(server, th)
    assert data.startswith(b"HTTP/1.1 408"), data
    assert 0.5 <= took < 5, took
    err = json.loads(data.partition(b"\r\n\r\n")[2])["error"]
    assert err["type"] == "body_timeout" and err["received"] == 10


def test_serve_uses_the_protocol():
    from sketchql.service.commands import _http_protocol

    opt = _http_protocol(1234, 2.0)
    assert opt["http"].max_body == 1234 and opt["http"].wake_every == 0.25
    assert _http_protocol(1234, 0.2)["http"].wake_every == pytest.approx(0.05)
    assert _http_protocol(1234, None)["http"].wake_every == 0.25
