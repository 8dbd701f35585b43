"""Helpers shared by the service tests (this module holds no tests itself)."""
import re
import warnings

import numpy as np

warnings.filterwarnings("ignore", message=".*httpx.*", category=DeprecationWarning)
from fastapi.testclient import TestClient  # noqa: E402

from sketchql.service import Limits, create_app  # noqa: E402


def client(limits=None, **kw) -> TestClient:
    return TestClient(create_app(demo=False, limits=limits or Limits(), **kw))


def read_all(c, qid, page=7):
    """Every change row of a query, paging through the cursor; checks seq continuity."""
    rows, since = [], 0
    while True:
        r = c.get(f"/queries/{qid}/results", params={"since": since, "limit": page})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["missed"] == 0
        for i, row in enumerate(body["rows"]):
            assert row["seq"] == since + i
        rows += body["rows"]
        if body["next"] == since:
            return rows
        since = body["next"]


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{((?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*)\})? '
                     r'(\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str) -> dict:
    """Strict-enough parser of the text exposition format: {(name, frozenset(labels)): value}."""
    out, typed = {}, {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if not line:
            continue
        if line.startswith("# HELP "):
            assert len(line.split(" ", 3)) == 4
            continue
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ")
            assert typ in ("counter", "gauge", "histogram", "summary", "untyped")
            typed[name] = typ
            continue
        assert not line.startswith("#"), line
        m = _SAMPLE.match(line)
        assert m, f"not a Prometheus sample line: {line!r}"
        name, labels, value = m.group(1), m.group(3) or "", m.group(4)
        assert name in typed, f"sample {name} without # TYPE"
        v = float(value.replace("+Inf", "inf").replace("-Inf", "-inf"))
        if typed[name] == "counter":
            assert v >= 0 and not np.isnan(v)
        out[(name, frozenset(_LABEL.findall(labels)))] = v
    return out
