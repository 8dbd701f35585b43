"""Shadow exact plans (the ON MISS EXACT standby, audits) are charged to the allocator's memory budget."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from sketchql.engine import Engine
from sketchql.operators.exact.window import WindowScan

W = 20.0
BUDGET = 70_000


def _run(on_miss: str, audit_share: float = 0.0, budget: int = BUDGET):
    eng = Engine(seed=3)
    eng.execute("CREATE STREAM S (g INT, v DOUBLE) TIMESTAMP ts")
    q = eng.register(f"SELECT g, AVG(v) AS a FROM S [RANGE {W:g}] GROUP BY g WITH ERROR 0.2 CONFIDENCE 0.95 "
                     f"ON MISS {on_miss}")
    o = eng.register(f"SELECT g, SUM(v) AS s FROM S [RANGE {W:g}] GROUP BY g WITH ERROR 0.01 CONFIDENCE 0.95")
    for x in (q, o):
        x.set_knob("audit_share", audit_share)
    eng.budgets["memory_bytes"] = budget
    rng = np.random.default_rng(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(12):
            n = 250
            ts = k * 5.0 + (np.arange(n) + 0.5) * 5.0 / n
            eng.push("S", {"ts": ts, "g": rng.integers(0, 4, n), "v": rng.lognormal(1.0, 0.6, n)})
    return eng, q, o


def _held_bytes(query, row_bytes: float) -> float:
    """Rows the plan's window scans hold now (measured), times the bytes per row."""
    rows = 0
    for n in query.plan.nodes:
        op = n.op
        if isinstance(op, WindowScan) and op._cols is not None:
            rows += int(((op._start <= query.clock) & (op._end > query.clock)).sum())
    return rows * row_bytes


def test_the_exact_standby_is_charged_and_the_total_fits_the_budget():
    eng, q, o = _run("EXACT")
    d = eng.allocator.replan("test")
    used = sum(pq["memory"] for pq in d["per_query"].values())
    assert d["memory_shadow_plans"] > 0
    assert used + d["memory_shadow_plans"] + d["memory_exact_queries"] <= BUDGET * 1.001
    # the charge is what the standby really holds: its window rows (measured) x bytes per row
    qp = q._precision
    assert qp.shadow is not None
    held = _held_bytes(qp.shadow, eng._precision.row_bytes["s"])
    assert d["memory_shadow_plans"] == pytest.approx(held, rel=0.1)
    # the other query pays for it: less memory than when nothing stands by
    eng2, q2, o2 = _run("RETURN")
    d2 = eng2.allocator.replan("test")
    assert d2["memory_shadow_plans"] == 0.0
    assert o.precision()["knobs"]["sample_rate"] < o2.precision()["knobs"]["sample_rate"]
    assert sum(pq["memory"] for pq in d2["per_query"].values()) > used + 0.5 * d["memory_shadow_plans"]


@pytest.mark.parametrize("share", [0.1, 0.3])
def test_audit_shadows_are_charged_by_their_share(share):
    eng, q, o = _run("RETURN", audit_share=share)
    d = eng.allocator.replan("test")
    full = sum(eng.allocator._resources_full(x._precision)[0] for x in (q, o))
    assert d["memory_shadow_plans"] == pytest.approx(min(1.0, 2 * share) * full)
    used = sum(pq["memory"] for pq in d["per_query"].values())
    assert used + d["memory_shadow_plans"] <= BUDGET * 1.001
