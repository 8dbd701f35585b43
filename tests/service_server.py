"""A real ``sketchql serve`` process on a loopback port, for the crash, SSE and load tests (no tests here)."""
from __future__ import annotations

import io
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import numpy as np
import pyarrow as pa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """``python -m sketchql.cli serve`` on 127.0.0.1 (``args`` appended), killed or stopped by the test."""

    def __init__(self, data_dir=None, args=(), env=None, port=None):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [sys.executable, "-m", "sketchql.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--log-level", "warning"]
        cmd += ["--data-dir", str(data_dir)] if data_dir is not None else ["--in-memory"]
        cmd += list(args)
        e = dict(os.environ)
        e.pop("SKETCHQL_TOKENS", None)
        e.update(env or {})
        self.log = io.BytesIO()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        self.client = httpx.Client(base_url=self.url, timeout=60.0)

    def wait_ready(self, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.output()}")
            try:
                r = self.client.get("/health", timeout=2.0)
                if r.status_code == 200:
                    return r.json()
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"server not ready after {timeout} s: {self.output()}")

    def output(self) -> str:
        if self.proc.poll() is None:
            return "(running)"
        return self.proc.stdout.read().decode(errors="replace")[-4000:]

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self.client.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.client.close()
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def arrow_body(cols: dict) -> bytes:
    t = pa.table({k: pa.array(v) for k, v in cols.items()})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def make_batches(n_batches: int, rows: int, seed: int = 5, t0: float = 0.0, span: float = 2.0):
    """Deterministic batches of S (k INT, v DOUBLE, ts): Zipf keys, increasing times."""
    rng = np.random.default_rng(seed)
    out, t = [], t0
    for _ in range(n_batches):
        ts = np.sort(rng.uniform(t, t + span, rows))
        k = (rng.zipf(1.3, rows) % 200).astype(np.int64)
        v = np.round(rng.random(rows), 4)
        out.append({"k": k, "v": v, "ts": ts})
        t += span
    return out
