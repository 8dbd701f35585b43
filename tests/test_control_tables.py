"""Control tables: one interface over engine, streams, summaries, queries, operators and queues."""
import json

import numpy as np
import pytest

from sketchql.control import ControlError, ControlTable, Knob, jsonable
from sketchql.engine import Engine


def test_knob_coerce_domains():
    f = Knob("r", 1.0, "float", lo=0.0, hi=1.0, lo_open=True)
    assert f.coerce("0.25") == 0.25 and f.coerce(1) == 1.0
    for bad in (0, -1, 1.5, "x", float("nan"), True, None):
        with pytest.raises(ControlError, match="'r' must be in \\(0, 1\\]"):
            f.coerce(bad)
    i = Knob("n", 5, "int", lo=0, nullable=True)
    assert i.coerce(3.0) == 3 and isinstance(i.coerce(3.0), int)
    assert i.coerce(None) is None and i.coerce(float("inf")) is None
    with pytest.raises(ControlError, match="an integer"):
        i.coerce(2.5)
    c = Knob("m", "a", "choice", choices=("return", "exact"))
    assert c.coerce("EXACT") == "exact"
    with pytest.raises(ControlError, match="one of 'return', 'exact'"):
        c.coerce("drop")
    b = Knob("on", True, "bool")
    assert b.coerce("false") is False and b.coerce(1) is True
    with pytest.raises(ControlError):
        b.coerce("maybe")
    ro = Knob("x", 1, "int", settable=False, doc="owned by the allocator")
    with pytest.raises(ControlError, match="read-only"):
        ro.coerce(2)


def test_control_table_kind_checked_and_json():
    with pytest.raises(ControlError, match="unknown control-table kind"):
        ControlTable("widget", "w")
    t = ControlTable("stream", "S", {"a": np.int64(3), "b": np.float64("inf"), "c": np.arange(2)},
                     {"k": Knob("k", 0.5, effect={"memory": 1})})
    d = t.as_dict()
    json.dumps(d)                                  # JSON-able, non-finite as null
    assert d["stats"] == {"a": 3, "b": None, "c": [0, 1]}
    assert d["knobs"]["k"]["effect"] == {"memory": 1, "cpu": 0, "precision": 0}
    assert jsonable({1: (np.float32(0.5),)}) == {"1": [0.5]}


def _engine():
    eng = Engine(seed=3)
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts; "
                "CREATE SUMMARY s1 ON S (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)")
    q = eng.register("SELECT k, SUM(v) AS s FROM S [RANGE 20] GROUP BY k")
    rng = np.random.default_rng(0)
    eng.push("S", {"ts": np.arange(100) * 0.5, "k": rng.integers(0, 5, 100), "v": rng.random(100)})
    return eng, q


def test_every_entity_has_a_table():
    eng, q = _engine()
    tabs = eng.controls.tables()
    keys = [t.key for t in tabs]
    assert keys[0] == "engine:engine"
    assert "stream:S" in keys and "summary:s1.k" in keys and f"query:q{q.id}" in keys
    ops = [t for t in tabs if t.kind == "operator"]
    assert len(ops) == len(q.plan.nodes) and all(t.parent == f"query:q{q.id}" for t in ops)
    json.dumps(eng.controls.as_json())
    s = eng.controls.get("stream", "s")                  # names are case-insensitive
    assert s.stats["tuples_in"] == 100 and s.knobs["sample_rate"].value == 1.0
    assert s.knobs["sample_rate"].effect["memory"] == 1
    summ = eng.controls.get("summary", "s1.k")
    assert summ.stats["tuples"] > 0 and summ.parent == "stream:S"
    assert eng.controls.get("engine", "engine").stats["queries"] == 1


def test_writes_are_validated_and_applied():
    eng, q = _engine()
    ct = eng.controls
    assert ct.set("stream", "S", "sample_rate", "0.5") == 0.5
    assert eng.stream("S").knobs()["sample_rate"] == 0.5
    with pytest.raises(ControlError, match="stream S: knob 'sample_rate' must be in"):
        ct.set("stream", "S", "sample_rate", 2)
    assert eng.stream("S").knobs()["sample_rate"] == 0.5          # unchanged by the failed write
    ct.set("query", f"q{q.id}", "weight", 3)
    assert q.weight == 3.0 and q.knobs()["weight"] == 3.0
    with pytest.raises(ControlError):
        ct.set("query", f"q{q.id}", "weight", -1)
    ct.set("engine", "engine", "memory_bytes", 1_000_000)
    assert eng.budgets["memory_bytes"] == 1_000_000
    with pytest.raises(ControlError, match="no knob 'nope'"):
        ct.set("engine", "engine", "nope", 1)
    with pytest.raises(ControlError, match="no query named 'q99'"):
        ct.get("query", "q99")
    with pytest.raises(ControlError, match="read-only"):
        ct.set("query", f"q{q.id}", "budget_unit", "ms")
    scan = next(i for i, n in enumerate(q.plan.nodes) if n.kind == "scan")
    ct.set("operator", f"q{q.id}.n{scan}", "sample", 0.25)
    assert q.plan.nodes[scan].params["sample"] == 0.25


def test_promising_operator_queue_has_a_table():
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts; "
                "CREATE SUMMARY sa ON A (k) WITH GRANULARITY 5 SECONDS AND COLLAPSE(2, 3); "
                "CREATE SUMMARY sb ON B (k) WITH GRANULARITY 5 SECONDS AND COLLAPSE(2, 3)")
    q = eng.register("SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k "
                     "WITH PREFERENCE desc SUMMARY.Estimate.Count(A.k), SUMMARY.Estimate.Count(B.k) "
                     "FADE FACTOR 0.8 WINDOW 10 SECONDS WITHIN 5 PROBES PER TUPLE")
    rng = np.random.default_rng(2)
    for t0 in range(0, 20, 5):
        ts = np.sort(rng.uniform(t0, t0 + 5, 50))
        eng.push("A", {"ts": ts, "k": rng.integers(0, 10, 50)})
        eng.push("B", {"ts": ts, "k": rng.integers(0, 10, 50)})
    queues = eng.controls.tables("queue")
    assert queues, "a PT-Join exposes its priority queue"
    assert all(t.parent.startswith(f"operator:q{q.id}.n") for t in queues)
    assert all("entries" in t.stats for t in queues)
