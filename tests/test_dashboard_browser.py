"""The dashboard in a real browser: Debian's chromium driven by Playwright against a real
``sketchql serve`` (uvicorn) on 127.0.0.1.

What is checked: the page loads (``/`` sends a browser there) with no console error and no request
leaving the machine; the charts render with data; the numbers on the page equal what the HTTP API
returns at the same moment (once the demo data is replayed nothing moves any more); a contract
changed from the page is changed in the API; the page reconnects its feed after the server
restarts.  A screenshot of each view is saved under ``tests/artifacts/dashboard/`` (or
``$SKETCHQL_ARTIFACTS/dashboard``); the paths are printed.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = Path(os.environ.get("SKETCHQL_ARTIFACTS", ROOT / "tests" / "artifacts")) / "dashboard"
DEMO = ["--demo-tuples", "8000", "--demo-speed", "10"]
WAIT = 120_000          # ms: generous bounds for a loaded 2-core machine (never a timing assertion)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _until(pred, timeout=120.0, step=0.2):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


class Server:
    """``sketchql serve`` in a subprocess on a fixed port (so it can be restarted in place)."""

    def __init__(self, port: int, log: Path):
        self.port, self.log, self.proc = port, log, None
        self.base = f"http://127.0.0.1:{port}"

    def start(self):
        cmd = [sys.executable, "-m", "sketchql.cli", "serve", "--host", "127.0.0.1", "--port", str(self.port),
               "--log-level", "warning", "--in-memory", *DEMO]
        self._out = open(self.log, "a")
        self.proc = subprocess.Popen(cmd, stdout=self._out, stderr=subprocess.STDOUT, cwd=ROOT,
                                     env=dict(os.environ, PYTHONUNBUFFERED="1"))
        ok = _until(lambda: self.proc.poll() is not None or self._health(), timeout=120)
        assert ok and self.proc.poll() is None, f"server did not start:\n{self.log.read_text()[-3000:]}"

    def _health(self):
        try:
            return self.get("/health")["status"] == "ok"
        except OSError:
            return False

    def stop(self):
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None
        self._out.close()

    def get(self, path):
        with urllib.request.urlopen(self.base + path, timeout=60) as r:
            return json.loads(r.read())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(_free_port(), tmp_path_factory.mktemp("serve") / "serve.log")
    s.start()
    yield s
    s.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium")
    assert exe, "Debian's chromium is not installed: run scripts/setup.sh (apt-get install chromium)"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=["--headless", "--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


class Watch:
    """Console errors, page errors and every request that would leave the machine (aborted)."""

    def __init__(self, page):
        self.errors, self.external = [], []
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        page.route("**/*", self._route)

    def _route(self, route):
        u = urllib.parse.urlparse(route.request.url)
        if u.scheme in ("http", "https", "ws", "wss") and u.hostname not in ("127.0.0.1", "localhost", "::1"):
            self.external.append(route.request.url)
            return route.abort()
        return route.continue_()


@pytest.fixture()
def page(browser, server):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = ctx.new_page()
    pg.watch = Watch(pg)
    pg.goto(server.base + "/", wait_until="domcontentloaded")
    pg.wait_for_selector('#conn[data-state="live"]', timeout=WAIT)
    yield pg
    ctx.close()


def _shot(page, name) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    p = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(p))
    print(f"screenshot: {p}")
    return p


def _points(page, chart_id) -> int:
    return int(page.get_attribute(f"#{chart_id}", "data-points") or 0)


def _wait_points(page, chart_id, n=2):
    page.wait_for_function(
        "([id, n]) => { const d = document.getElementById(id); return d && +(d.dataset.points || 0) >= n "
        "&& d.querySelector('.main-svg') }", arg=[chart_id, n], timeout=WAIT)


def _show(page, view):
    page.click(f'.tab[data-view="{view}"]')
    page.wait_for_selector(f"#view-{view}.active", timeout=WAIT)


def test_page_loads_offline_without_errors_and_charts_render(page, server):
    assert page.url.endswith("/dashboard"), page.url              # "/" sent the browser here
    assert page.evaluate("typeof window.Plotly") == "object"
    queries = server.get("/queries")["queries"]
    assert {"PT-Join desc", "PT-Join asc"} <= {page.inner_text(f"#card-q{q['id']} .kind") for q in queries}
    assert len(page.query_selector_all("article.card.query")) == len(queries)
    # every demo query's rates chart gets data; the contract of the AVG query is drawn
    for q in queries:
        _wait_points(page, f"ch-q{q['id']}-rate")
    _wait_points(page, "ch-q6-err")
    assert page.inner_text("#card-q6 [data-metric='q6.contract'] .v").startswith("5 % @ 95 %")
    # a PT join reports the share of its probe budget it used
    page.wait_for_function("() => document.querySelector(\"[data-metric='q4.budget_used']\").dataset.value !== ''",
                           timeout=WAIT)
    used = float(page.get_attribute("[data-metric='q4.budget_used']", "data-value"))
    assert 0.0 <= used <= 1.5
    # a figure the engine does not provide says so instead of showing a number
    shown = {q["id"]: page.get_attribute(f"[data-metric='q{q['id']}.est_error']", "data-value") for q in queries}
    for q in queries:
        if shown[q["id"]] == "":
            assert page.inner_text(f"[data-metric='q{q['id']}.est_error'] .v") == "not available"
    assert shown[4] == "", "the desc PT-Join has no error contract: no estimated error to show"
    _shot(page, "queries")
    page.screenshot(path=str(ARTIFACTS / "queries-full.png"), full_page=True)
    print(f"screenshot: {ARTIFACTS / 'queries-full.png'}")

    _show(page, "streams")
    for s in ("Store1", "Store2"):
        _wait_points(page, f"ch-s-{s}-rate")
    page.wait_for_function("() => document.querySelectorAll('#ch-z-s1_ItemID .bars path').length > 0", timeout=WAIT)
    _shot(page, "streams-index")

    _show(page, "plans")
    page.wait_for_selector(".plan .op", timeout=WAIT)
    for q in queries:
        n_ops = len(server.get(f"/queries/{q['id']}")["operators"])
        assert len(page.query_selector_all(f"[data-plan='q{q['id']}'] .op")) == n_ops
    assert page.query_selector("[data-plan='q4'] .chip.q") is not None        # the PT join's queue
    for chip in page.query_selector_all(".plan .chip.q"):                     # every queue says its length
        assert "? entries" not in chip.inner_text(), chip.inner_text()
    assert "Allocator" in page.inner_text("#allocator")
    _shot(page, "plans-allocator")

    assert page.watch.external == [], page.watch.external
    assert page.watch.errors == [], page.watch.errors


def _dv(page, sel):
    return page.get_attribute(sel, "data-value")


def test_numbers_equal_the_api(page, server):
    """Once the demo data is replayed nothing moves: the page and the API are read at one moment."""
    assert _until(lambda: server.get("/demo")["finished"], timeout=600), "the demo did not finish"
    seq0 = int(page.get_attribute("body", "data-seq"))
    page.wait_for_function("s => +document.body.dataset.seq >= s + 2", arg=seq0, timeout=WAIT)
    for q in server.get("/queries")["queries"]:
        d = server.get(f"/queries/{q['id']}")
        n = f"q{q['id']}"
        assert int(_dv(page, f"[data-metric='{n}.changes_out']")) == d["stats"]["changes_out"]
        assert int(_dv(page, f"[data-metric='{n}.state_rows']")) == d["stats"]["state_rows"]
        assert json.loads(_dv(page, f"[data-metric='{n}.contract']")) == [d["knobs"]["error"], d["knobs"]["confidence"]]
        assert float(_dv(page, f"#card-{n} input[name=weight]")) == d["knobs"]["weight"]
        p = server.get(f"/queries/{q['id']}/precision?limit=1")["precision"] or {}
        est = (p.get("estimated") or {}).get("rel_error")
        shown = _dv(page, f"[data-metric='{n}.est_error']")
        assert (shown == "" and est is None) or float(shown) == est, (n, shown, est)
    _show(page, "streams")
    page.wait_for_selector("#stream-Store1", timeout=WAIT)
    for s in server.get("/streams")["streams"]:
        n = s["name"]
        assert int(_dv(page, f"[data-metric='{n}.tuples_in']")) == s["stats"]["tuples_in"]
        assert int(_dv(page, f"[data-metric='{n}.rejected_rows']")) == s["stats"]["rejected_rows"]
        assert float(_dv(page, f"[data-metric='{n}.clock']")) == s["stats"]["clock"]
    for name in ("s1", "s2"):
        idx = server.get(f"/summaries/{name}")["index"]["ItemID"]
        assert int(_dv(page, f"[data-metric='{name}.ItemID.zones']")) == idx["zones"]
    assert page.watch.errors == [], page.watch.errors


def test_contract_changed_from_the_page_changes_it_in_the_api(page, server):
    form = "#card-q6 form.qcontrols"
    page.fill(f"{form} input[name=error]", "0.02")
    page.fill(f"{form} input[name=confidence]", "0.9")
    page.click(f"{form} button[type=submit]")
    assert _until(lambda: server.get("/queries/6")["knobs"]["error"] == 0.02, timeout=60)
    assert server.get("/queries/6")["knobs"]["confidence"] == 0.9
    page.wait_for_function("() => document.querySelector(\"[data-metric='q6.contract']\").dataset.value === '[0.02,0.9]'",
                           timeout=WAIT)
    # a value outside the knob's domain is refused with the API's message; nothing changes
    page.fill(f"{form} input[name=error]", "2")
    page.click(f"{form} button[type=submit]")
    page.wait_for_selector("#toast.err", timeout=WAIT)
    assert "must be in (0, 1)" in page.inner_text("#toast")
    assert server.get("/queries/6")["knobs"]["error"] == 0.02
    # weight and active flag of another query
    form5 = "#card-q5 form.qcontrols"
    page.fill(f"{form5} input[name=weight]", "3")
    page.uncheck(f"{form5} input[name=active]")
    page.click(f"{form5} button[type=submit]")
    assert _until(lambda: server.get("/queries/5")["knobs"]["active"] is False, timeout=60)
    assert server.get("/queries/5")["knobs"]["weight"] == 3.0
    page.wait_for_function("() => document.querySelector('#card-q5 .badge.status').textContent === 'inactive'",
                           timeout=WAIT)
    # the engine's memory budget
    page.fill("#budgets input[name=memory_bytes]", "50000000")
    page.click("#budgets button[type=submit]")
    assert _until(lambda: server.get("/control/engine/engine")["knobs"]["memory_bytes"]["value"] == 50_000_000,
                  timeout=60)
    page.wait_for_function("() => document.querySelector('#budgets input[name=memory_bytes]').dataset.value "
                           "=== '50000000'", timeout=WAIT)
    _shot(page, "controls-after-change")
    errors = [e for e in page.watch.errors if "422" not in e]     # the refused PATCH is logged by chromium
    assert errors == [], errors


def test_page_reconnects_after_the_server_restarts(page, server):
    _wait_points(page, "ch-q4-rate")
    boot = page.get_attribute("body", "data-boot")
    server.stop()
    page.wait_for_function("() => document.getElementById('conn').dataset.state !== 'live'", timeout=WAIT)
    server.start()
    page.wait_for_function("b => document.body.dataset.boot !== b && "
                           "document.getElementById('conn').dataset.state === 'live'", arg=boot, timeout=WAIT)
    seq = int(page.get_attribute("body", "data-seq"))
    page.wait_for_function("s => +document.body.dataset.seq >= s + 2", arg=seq, timeout=WAIT)
    _wait_points(page, "ch-q4-rate")
    # the new server's numbers are shown, not the old ones
    assert page.get_attribute("body", "data-boot") == server.get("/dashboard/api/state")["frame"]["boot"]
    _shot(page, "after-restart")
    assert page.watch.external == []
