"""Plan view: plans as graphs of operators, queues and synopses with live values."""
import json

import numpy as np

from sketchql.engine import Engine


def _eng():
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts; CREATE STREAM B (k INT, v DOUBLE) TIMESTAMP ts;"
                "CREATE SUMMARY sa ON A (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4);"
                "CREATE SUMMARY sb ON B (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)")
    return eng


def test_plan_view_json_live_values_and_sharing():
    eng = _eng()
    q1 = eng.register("SELECT A.k, B.v FROM A [RANGE 5], B [RANGE 5] WHERE A.k = B.k")
    q2 = eng.register("SELECT A.k FROM A [RANGE 5], B [RANGE 5] WHERE A.k = B.k")
    v0 = q2.plan_view()
    json.dumps(v0)
    ids = [n["id"] for n in v0["nodes"]]
    assert all(a in ids and b in ids for a, b in v0["edges"]) and len(v0["edges"]) == len(ids) - 1
    join = next(n for n in v0["nodes"] if n["kind"] == "join")
    assert join["shared_with"] == [1] and join["queues"][0]["kind"] == "shared output queue"
    scan = next(n for n in v0["nodes"] if n["kind"] == "scan")
    assert scan["synopses"][0]["rows"] == 0
    eng.push("A", {"ts": [1.0, 2.0, 3.0], "k": [1, 2, 3], "v": [0.0, 0.0, 0.0]})
    eng.push("B", {"ts": [2.5], "k": [1], "v": [9.0]})
    v1 = q2.plan_view()
    scans = [n for n in v1["nodes"] if n["kind"] == "scan"]
    assert sorted(s["synopses"][0]["rows"] for s in scans) == [1, 3]          # live: the stores' rows
    assert all(s["synopses"][0]["shared_with"] == [1] for s in scans)
    allv = eng.plan_view()
    json.dumps(allv)
    assert [p["query"] for p in allv["queries"]] == [1, 2]
    assert allv["sharing"]["stores"] == 2 and {i["name"] for i in allv["indexes"]} == {"sa.k", "sb.k"}


def test_plan_view_shows_the_shared_index_and_the_scheduler():
    eng = _eng()
    eng.set_control("scheduler", "chain")
    eng.set_control("work_per_push", 0)
    pt = [eng.register("SELECT A.k FROM A, B WHERE A.k = B.k WITH PREFERENCE desc A.k WINDOW 20 SECONDS")
          for _ in range(2)]
    ex = eng.register("SELECT v FROM A [RANGE 5] WHERE v > 0.5")
    rng = np.random.default_rng(0)
    eng.push("A", {"ts": np.arange(1, 51) / 10, "k": rng.integers(0, 9, 50), "v": rng.random(50)})
    eng.push("B", {"ts": np.arange(1, 51) / 10, "k": rng.integers(0, 9, 50), "v": rng.random(50)})
    v = pt[1].plan_view()
    node = next(n for n in v["nodes"] if n["kind"] == "pt_join")
    ix = [s for s in node["synopses"] if s["kind"] == "region index"]
    assert [s["name"] for s in ix] == ["sa.k", "sb.k"] and all(s["shared"] for s in ix)
    assert ix[0]["shared_with"] == [pt[0].id] and ix[0]["bytes"] > 0
    assert v["scheduler"]["strategy"] == "chain"
    assert any(q["kind"] == "input queue" and q["rows"] > 0 for n in v["nodes"] for q in n["queues"])
    assert all("chain_priority" in n["stats"] for n in v["nodes"])
    eng.run()
    v2 = ex.plan_view()
    assert all(q["rows"] == 0 for n in v2["nodes"] for q in n["queues"] if q["kind"] == "input queue")
    json.dumps(eng.plan_view())
    assert "sa.k" in eng.explain("SELECT A.k FROM A, B WHERE A.k = B.k WITH PREFERENCE desc A.k WINDOW 20 SECONDS")
