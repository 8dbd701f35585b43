"""Automatic indexes stay bounded: a query whose window is longer than any index can keep (the
depth is capped) reuses the deepest index on its column instead of declaring one more, so
register/delete cycles of such queries leave one automatic index per (stream, column); windows an
existing index covers declare nothing."""
from __future__ import annotations

import numpy as np

from sketchql.engine import Engine

LONG = ("SELECT A.k, A.ts, B.ts FROM A [RANGE {w}], B [RANGE {w}] WHERE A.k = B.k "
        "WITH PREFERENCE desc A.k WITHIN 3 PROBES PER TUPLE")


def _engine():
    e = Engine(seed=3)
    e.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    return e


def _autos(e):
    return sorted(d.name for d in e.catalog.summaries if d.name.startswith("_auto_"))


def test_register_delete_cycles_of_a_very_long_window_leave_one_auto_index_per_column():
    e = _engine()
    rng = np.random.default_rng(0)
    for i in range(4):
        q = e.register(LONG.format(w=1_000_000))
        t = np.arange(20, dtype=float) + 20 * i
        e.push("A", {"ts": t, "k": rng.integers(0, 5, 20)})
        e.push("B", {"ts": t, "k": rng.integers(0, 5, 20)})
        assert len(q.results()) > 0
        e.deregister(q)
    assert _autos(e) == ["_auto_A_k", "_auto_B_k"]


def test_a_longer_window_an_index_can_still_cover_gets_a_deeper_index():
    e = _engine()
    e.register(LONG.format(w=10))
    assert _autos(e) == ["_auto_A_k", "_auto_B_k"]
    e.register(LONG.format(w=10))                      # covered: reused
    assert _autos(e) == ["_auto_A_k", "_auto_B_k"]
    e.register(LONG.format(w=5000))                    # not covered, coverable: one deeper each
    assert _autos(e) == ["_auto_A_k", "_auto_A_k_2", "_auto_B_k", "_auto_B_k_2"]
