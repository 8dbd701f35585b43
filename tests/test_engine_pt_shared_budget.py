"""Issue 16 through SQL on the engine's shared index: a small budget buys output in proportion
to it, and the work charged never exceeds the allowance plus the documented carried debt.

Before the fix a query on the shared index paid the whole shared ingest with nothing shed
(``PTJoin.admit_ingest``): at 1 unit per tuple every unit went on inserts -- 0 probes, 0
pairs -- where a private index shed half its arrivals and probed.  Oracle: a brute-force numpy
join (``k_a = k_b``, ``|ts_a - ts_b| < w``); the result must also be a subset of it.
"""
from collections import Counter

import numpy as np
import pytest

from sketchql.data import generate_stores
from sketchql.engine import Engine

W = 10.0
BUDGETS = (1, 2, 5, 50)


def _streams():
    a, b = generate_stores(2, duration=30.0, mean_interarrival=0.02, n_items=300, seed=4)
    return a, b


def run_pt_join(pref, units, a, b, window, dur, share=True, seed=1, heartbeat=None, skip_empty=False):
    """A PT join of ``a`` and ``b`` through SQL, pushed in 0.5 s slices up to ``dur`` (``skip_empty``:
    no push for an empty slice), then heartbeats at ``heartbeat`` times on both streams: (Counter of
    the (k, ts1, ts2) pairs it reported, the operator's stats, ``q.stats()["promising"]``)."""
    eng = Engine(seed=seed)
    eng.set_control("share_indexes", share)
    eng.execute("CREATE STREAM S1 (k INT) TIMESTAMP ts; CREATE STREAM S2 (k INT) TIMESTAMP ts")
    q = eng.register(f"SELECT S1.k, S1.ts, S2.ts FROM S1, S2 WHERE S1.k = S2.k WITH PREFERENCE {pref} "
                     f"SUMMARY.Estimate.Count(S1.k), SUMMARY.Estimate.Count(S2.k) WINDOW {window} SECONDS "
                     f"WITHIN {units} PROBES PER TUPLE")
    q.set_knob("retain_changes", None)
    for t0 in np.arange(0, dur, 0.5):
        for name, s in (("S1", a), ("S2", b)):
            sel = (s.ts >= t0) & (s.ts < t0 + 0.5)
            if sel.any() or not skip_empty:
                eng.push(name, {"ts": s.ts[sel], "k": s.item[sel]})
    for t in heartbeat or ():
        eng.heartbeat("S1", t)
        eng.heartbeat("S2", t)
    r = q.results()
    r = r[r["__sign"] == 1]
    got = Counter(zip(r.iloc[:, 0].astype(int).tolist(), r.iloc[:, 1].tolist(), r.iloc[:, 2].tolist()))
    node = next(n for n in q.plan.nodes if n.kind == "pt_join")
    return got, node.op.op.stats(), q.stats()["promising"]


def _run(pref, units, a, b, share=True):
    return run_pt_join(pref, units, a, b, W, 30.0, share=share)


@pytest.mark.parametrize("pref", ["desc", "weighted", "asc"])
def test_small_budgets_buy_output_in_proportion_on_the_shared_index(pref):
    a, b = _streams()
    m = (a.item[:, None] == b.item[None, :]) & (np.abs(a.ts[:, None] - b.ts[None, :]) < W)
    i, j = np.nonzero(m)
    want = Counter(zip(a.item[i].tolist(), a.ts[i].tolist(), b.ts[j].tolist()))
    outs = []
    for units in BUDGETS:
        got, st, pst = _run(pref, units, a, b)
        assert pst["pt_index"] == "shared"
        assert not (got - want), f"{pref} u={units}: pairs outside the exact join"
        out = sum(got.values())
        assert out > 0 and st["probes"] > 0, f"{pref} u={units}: no output ({st['probes']} probes)"
        # charged <= allowance + the debt carried at the end (PTJoin admission's documented rule)
        debt = max(0.0, -st["account"])
        assert st["work"] <= st["allowance"] + debt + 1e-6, (pref, units, st["work"], st["allowance"], debt)
        assert debt <= max(st["max_forced"], st["max_plan_overrun"]) + 1e-6
        outs.append(out)
    assert all(x < y for x, y in zip(outs, outs[1:])), f"{pref}: output {outs} does not grow with {BUDGETS}"
    # 50 units per tuple: within a few points of the private index's recall (0.89 vs 0.976 before)
    got_p, _, pst_p = _run(pref, 50, a, b, share=False)
    assert pst_p["pt_index"] == "private"
    assert outs[-1] >= 0.97 * sum(got_p.values()), (pref, outs[-1], sum(got_p.values()))
