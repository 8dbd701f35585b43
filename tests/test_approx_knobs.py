"""Each approximation knob moves memory, CPU and precision in its documented direction.

Measured on a generated stream: memory = rows held by the query's operators
(plus its audit shadow), CPU = work units of its operators, precision = minus
the mean relative error against an exact query on the same stream (or the
join's recall).  The directions asserted are the knobs' ``effect`` signs
(:mod:`sketchql.approx.knobs`, the stream's ``KNOB_SPECS``).
"""
from __future__ import annotations

import numpy as np
import pytest

from sketchql.approx.knobs import QUERY_KNOBS
from sketchql.engine import Engine
from sketchql.engine.streams import StreamHandle

W = 40.0
SQL = f"SELECT g, SUM(v) AS s FROM S [RANGE {W}] GROUP BY g"


def _run(setup, sql=SQL, seed=0, skew=False):
    eng = Engine(seed=seed)
    eng.execute("CREATE STREAM S (g INT, v DOUBLE) TIMESTAMP ts")
    q = eng.register(sql + " WITH ERROR 0.2 CONFIDENCE 0.95")
    e = eng.register(sql)
    setup(eng, q)
    rng = np.random.default_rng(seed)
    rel = []
    for k in range(12):
        n = 800
        ts = k * 10 + (np.arange(n) + 0.5) * 10 / n
        v = rng.pareto(1.5, n) + 1 if skew else rng.uniform(1, 3, n)
        eng.push("S", {"ts": ts, "g": rng.integers(0, 4, n), "v": v})
        if k >= 4:
            m = q.snapshot().merge(e.snapshot(), on="g", suffixes=("", "_x"))
            rel.append(float(np.mean(np.abs(m["s"] - m["s_x"]) / m["s_x"])))
    mem = q.stats()["state_rows"]
    cpu = sum(op.get("work", 0) for op in q.stats()["operators"])
    sh = q._precision.shadow
    if sh is not None:
        mem += sh.stats()["state_rows"]
        cpu += sum(op.get("work", 0) for op in sh.stats()["operators"])
    return {"memory": mem, "cpu": cpu, "precision": -float(np.mean(rel))}


def _directions(results):
    """Sign of each resource's change from the lowest to the highest knob value."""
    lo, hi = results[0], results[-1]
    return {r: int(np.sign(round(hi[r] - lo[r], 9))) for r in ("memory", "cpu", "precision")}


def _assert_effect(results, effect, resources=("memory", "cpu", "precision")):
    d = _directions(results)
    for r in resources:
        assert d[r] == effect[r], (r, d, results)
    # monotone over the intermediate values too
    for r in resources:
        if effect[r]:
            vals = [x[r] * effect[r] for x in results]
            assert all(b >= a - 1e-9 for a, b in zip(vals, vals[1:])), (r, vals)


def test_query_sample_rate():
    res = [_run(lambda eng, q, p=p: q.set_knob("sample_rate", p)) for p in (0.05, 0.2, 0.6)]
    _assert_effect(res, QUERY_KNOBS["sample_rate"].effect)


def test_outlier_share_on_skewed_data():
    def setup(share):
        def f(eng, q):
            q.set_knob("sample_rate", 0.05)
            q.set_knob("outlier_share", share)
        return f
    res = [_run(setup(s), skew=True, seed=2) for s in (0.0, 0.05, 0.2)]
    _assert_effect(res, QUERY_KNOBS["outlier_share"].effect)


def test_audit_share_costs_resources_and_leaves_the_answer_alone():
    def setup(share):
        def f(eng, q):
            q.set_knob("sample_rate", 0.2)
            q.set_knob("audit_share", share)
        return f
    res = [_run(setup(s)) for s in (0.0, 1.0)]
    eff = QUERY_KNOBS["audit_share"].effect
    _assert_effect(res, eff, ("memory", "cpu"))
    assert eff["precision"] == 0 and res[0]["precision"] == res[1]["precision"]


def test_stream_shed_rate():
    res = [_run(lambda eng, q, s=s: eng.controls.set("stream", "S", "shed_rate", s)) for s in (0.0, 0.5, 0.9)]
    _assert_effect(res, StreamHandle.KNOB_SPECS["shed_rate"].effect)


def test_stream_sample_rate():
    res = [_run(lambda eng, q, s=s: eng.controls.set("stream", "S", "sample_rate", s)) for s in (0.1, 0.5, 1.0)]
    _assert_effect(res, StreamHandle.KNOB_SPECS["sample_rate"].effect)


def test_pt_join_budget():
    from sketchql.engine.query import Query
    out = []
    for b in (1.0, 5.0, 50.0):
        eng = Engine(seed=1)
        eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
        q = eng.register(f"SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k WITH PREFERENCE desc A.k "
                         f"WINDOW 10 SECONDS WITHIN {b:g} PROBES PER TUPLE")
        rng = np.random.default_rng(0)
        for k in range(5):
            ts = k * 10 + np.arange(200) / 20.0
            eng.push("A", {"ts": ts, "k": rng.integers(0, 20, 200)})
            eng.push("B", {"ts": ts, "k": rng.integers(0, 20, 200)})
        st = q.stats()["promising"]
        out.append({"memory": 0, "cpu": st["pt_work"], "precision": st["pt_pairs"]})
    _assert_effect(out, Query.KNOB_SPECS["budget"].effect, ("cpu", "precision"))


def test_engine_memory_budget_through_the_allocator():
    def setup(budget):
        def f(eng, q):
            eng.controls.set("engine", "engine", "memory_bytes", budget)
        return f
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = [_run(setup(b)) for b in (3000, 20000, 200000)]
    eff = Engine.KNOB_SPECS["memory_bytes"].effect
    _assert_effect(res, eff, ("memory", "precision"))


@pytest.mark.parametrize("name", sorted(QUERY_KNOBS))
def test_every_query_knob_documents_its_effect(name):
    k = QUERY_KNOBS[name]
    assert k.doc and set(k.effect) == {"memory", "cpu", "precision"}
