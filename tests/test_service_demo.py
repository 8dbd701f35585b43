"""The embedded demo feeds its streams and its queries answer; ``sketchql serve`` starts
as a process, answers /health, and stops."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import numpy as np

from test_service_helpers import TestClient, read_all  # noqa: F401  (TestClient import silences a warning)
from sketchql.service import create_app
from sketchql.service.demo import DEMO_QUERIES, demo_data


def _wait(pred, timeout=120.0, step=0.05):
    """Poll ``pred`` until true or the (generous) bound; returns its last value (no timing assertions)."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def test_demo_feeds_and_queries_return_rows():
    app = create_app(demo=True, seed=3, demo_options={"tick": 0.01, "speed": 1000.0, "max_tuples": 1200})
    with TestClient(app) as c:
        health = c.get("/health").json()
        assert health["streams"] == 2 and health["queries"] >= 2
        assert _wait(lambda: c.get("/demo").json()["finished"])
        st = c.get("/demo").json()
        assert st["error"] is None and st["pushed"] > 1000 and st["skipped"] == 0
        rows = read_all(c, 1, page=500)
        assert rows, "the demo join produced nothing"
        for r in rows:     # the join predicate and the 2 s windows hold on every row
            assert abs(r["row"]["t1"] - r["row"]["t2"]) < 2.0 and r["at"] == max(r["row"]["t1"], r["row"]["t2"])
        snap = c.get("/queries/3/snapshot").json()
        tuples = {s["name"]: s["stats"]["tuples_in"] for s in c.get("/streams").json()["streams"]}
        assert tuples["Store1"] + tuples["Store2"] == st["pushed"]
        # the sliding count over the last minute of Store2 is at most what Store2 received
        assert 0 < snap["rows"][0]["n"] <= tuples["Store2"]
        est = c.get("/summaries/s1/estimate", params={"value": rows[0]["row"]["ItemID"]}).json()
        assert est["estimates"][0]["estimate"] >= 1
    assert not app.state.sketchql.demo.status()["running"]   # stopped with the app


def test_demo_promising_join_pairs_are_exact_matches():
    """Oracle: the demo's PT-Join (query 4) emits only pairs of the brute-force join of the
    demo data (same item, both tuples present, |t1 - t2| < 60 s), each at most once."""
    seed, n = 5, 3000
    app = create_app(demo=True, seed=seed, demo_options={"tick": 0.01, "speed": 1000.0, "max_tuples": n})
    with TestClient(app) as c:
        q = c.get("/queries/4").json()
        assert "PREFERENCE" in q["sql"] and q["engine"] != "exact", q
        assert _wait(lambda: c.get("/demo").json()["finished"])
        rows, since = [], 0   # the result log keeps a bounded tail: read what is retained
        while True:
            body = c.get("/queries/4/results", params={"since": since, "limit": 1000}).json()
            rows += body["rows"]
            if body["next"] == since:
                break
            since = body["next"]
    (t1s, i1s, _), (t2s, i2s, _) = demo_data(n, seed)
    s1 = set(zip(i1s.tolist(), t1s.tolist()))
    s2 = set(zip(i2s.tolist(), t2s.tolist()))
    plus = [(r["row"]["ItemID"], r["row"]["t1"], r["row"]["t2"]) for r in rows if r["sign"] > 0]
    assert len(plus) > 50, "the promising join produced (almost) nothing"
    assert len(set(plus)) == len(plus)
    for item, t1, t2 in plus:
        assert (item, t1) in s1 and (item, t2) in s2 and abs(t1 - t2) < 60.0
    exact = sum(int(((i2s == i) & (np.abs(t2s - t) < 60.0)).sum()) for i, t in zip(i1s.tolist(), t1s.tolist()))
    assert len(plus) <= exact


def test_demo_data_is_seeded():
    from sketchql.service.demo import demo_data

    a, b = demo_data(2000, seed=4), demo_data(2000, seed=4)
    for (t1, i1, p1), (t2, i2, p2) in zip(a, b):
        assert np.array_equal(t1, t2) and np.array_equal(i1, i2) and np.array_equal(p1, p2)
        assert np.all(np.diff(t1) >= 0)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command_starts_and_answers(tmp_path):
    port = _free_port()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "sketchql.cli", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--demo-tuples", "2000", "--log-level", "warning"]
    log = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
    try:
        def health():
            if proc.poll() is not None:
                return "exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    return json.loads(r.read())
            except OSError:
                return None

        h = _wait(health, timeout=60.0, step=0.2)
        log.seek(0)
        assert isinstance(h, dict), f"server did not come up: {h!r}\n{log.read()}"
        assert h["status"] == "ok" and h["streams"] == 2
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/queries", timeout=5) as r:
            assert len(json.loads(r.read())["queries"]) == len(DEMO_QUERIES)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
