"""Dashboard routes without a browser (marked ``browser`` with the page tests): content
negotiation of ``/``, assets served offline from the installed packages, frames whose derived
rates match the engine's counters (the oracle: the counters read directly)."""
import re
import time

import pytest

from test_service_helpers import TestClient  # noqa: F401
from sketchql.service import create_app
from sketchql.service.dashboard import STATIC, plotly_js

pytestmark = pytest.mark.browser


def test_root_negotiates_and_assets_are_local():
    app = create_app(demo=False)
    with TestClient(app) as c:
        r = c.get("/", headers={"accept": "text/html,application/xhtml+xml,*/*;q=0.8"}, follow_redirects=False)
        assert r.status_code == 307 and r.headers["location"] == "/dashboard"
        assert c.get("/", headers={"accept": "application/json"}).json()["service"] == "sketchql"
        assert c.get("/").json()["service"] == "sketchql"                       # curl's */*
        page = c.get("/dashboard").text
        assert c.get("/dashboard/vendor/plotly.min.js").content == plotly_js().read_bytes()
        for src in re.findall(r'(?:src|href)="([^"]+)"', page):
            assert src.startswith("/dashboard/") or src.startswith("data:"), src   # nothing from outside
            if src.startswith("/dashboard/"):
                assert c.get(src).status_code == 200, src
        assert c.get("/dashboard/static/..%2Fapp.py").status_code == 404
    for f in STATIC.iterdir():                                                   # no CDN anywhere
        assert not re.search(r"https?://", f.read_text()), f


def test_frame_rates_match_the_engine_counters():
    app = create_app(demo=False)
    st = app.state.sketchql
    with TestClient(app) as c:
        assert c.post("/streams", json={"sql": "CREATE STREAM S (k INT) TIMESTAMP ts"}).status_code == 201
        feed = app.state.dashboard_feed
        feed.stop()                       # sample by hand: two frames around the second batch
        c.post("/streams/S/batches", json={"rows": [{"k": i % 3, "ts": 0.1 * i} for i in range(1, 11)]})
        f1 = feed.sample()
        time.sleep(0.01)
        c.post("/streams/S/batches", json={"rows": [{"k": 1, "ts": 1.0 + 0.5 * i} for i in range(1, 21)]})
        f2 = feed.sample()
        s1, s2 = f1["streams"][0], f2["streams"][0]
        h = st.engine.stream("S")
        assert s2["tuples_in"] == h.tuples_in == 30 and s2["clock"] == h.clock == 11.0
        assert s2["ingest_rate"] == pytest.approx((30 - 10) / (11.0 - 1.0))
        assert f2["seq"] > f1["seq"] and feed.history()[-1]["seq"] == f2["seq"]
        assert f2["queries"] == [] and f2["available"]["allocator"] == (getattr(st.engine, "allocator", None) is not None)
        body = c.get("/dashboard/api/state").json()
        assert body["frame"]["boot"] == feed.boot and body["history"][-1]["streams"]["S"]["tuples_in"] == 30
