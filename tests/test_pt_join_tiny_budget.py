"""Issue 16 through SQL: a PT join's budget below one unit per tuple, a hot join value, and
idle units from a heartbeat stay within the allowance plus the documented carried debt.

Before the fix (hX audit, defects 3, 5, 7): desc / asc sampled their ingest by join value
(``admission.keep_mask(by_value=True)``) with nothing capping the kept values' inserts at the
income's share, so ``WITHIN 0.1 PROBES PER TUPLE`` charged 2.8x the allowance in inserts alone
(debt 352 against a documented bound of 0, no probe); a heartbeat's idle units were added to
the account without being counted in the allowance, its debt not noted, neither ``allowance``
nor ``debt_max`` visible in ``q.stats()["promising"]``, and a heartbeat over a long gap granted
``units x rate x gap`` (80 % of a 20 s run's allowance from one heartbeat to t = 100).

Oracles: a brute-force numpy join (``k_a = k_b``, ``|ts_a - ts_b| < w``): every produced pair
is in it, none twice; the budget rule recomputed from the stats: ``work <= allowance + debt``,
``allowance = units given + idle units``, ``debt <= debt_max <= max(max_forced,
max_plan_overrun)``, and the units given counted from the pushed tuples.
"""
from collections import Counter

import numpy as np
import pytest

from sketchql.data import generate_stores

from test_engine_pt_shared_budget import run_pt_join

W = 5.0
DUR = 20.0
BUDGETS = (0.1, 0.25, 0.5, 1, 2, 5, 50)


class _S:
    pass


def _stores():
    return generate_stores(2, duration=DUR, mean_interarrival=0.02, n_items=200, seed=4)


def _hot(h=0.4, n=1500, seed=3):
    """Two streams where one key carries a share ``h`` of the tuples (the rest uniform on 1..499)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(2):
        s = _S()
        s.ts = np.sort(rng.uniform(0, DUR, n))
        s.item = np.where(rng.random(n) < h, 0, rng.integers(1, 500, n))
        out.append(s)
    return out


def _exact(a, b):
    m = (a.item[:, None] == b.item[None, :]) & (np.abs(a.ts[:, None] - b.ts[None, :]) < W)
    i, j = np.nonzero(m)
    return Counter(zip(a.item[i].tolist(), a.ts[i].tolist(), b.ts[j].tolist()))


def _run(pref, units, a, b, share=True, seed=1, heartbeat=None):
    got, _, st = run_pt_join(pref, units, a, b, W, DUR, share=share, seed=seed, heartbeat=heartbeat,
                             skip_empty=True)
    return got, st


def _check_budget(st, units, n_tuples, what):
    # every pushed tuple reached the join but those beyond the other stream's clock (buffered)
    assert n_tuples - 2 <= st["pt_tuples_in"] <= n_tuples, what
    assert st["pt_units_given"] == pytest.approx(units * st["pt_tuples_in"], rel=1e-9), what
    assert st["pt_allowance"] == pytest.approx(st["pt_units_given"] + st["pt_idle_units"], rel=1e-9), what
    # charged <= allowance + the debt carried at the end, and that debt is the documented one
    assert st["pt_work"] <= st["pt_allowance"] + st["pt_debt"] + 1e-6, what
    assert st["pt_debt"] <= st["pt_debt_max"] + 1e-9, what
    assert st["pt_debt_max"] <= st["pt_debt_bound"] + 1e-9, what


def _check_exact(got, want, what):
    assert not (got - want), f"{what}: pairs outside the exact join"
    assert max(got.values(), default=1) == 1, f"{what}: duplicate pairs"


@pytest.mark.parametrize("pref", ["desc", "asc", "weighted"])
def test_tiny_budgets_stay_within_allowance_plus_debt(pref):
    a, b = _stores()
    want = _exact(a, b)
    n = len(a.ts) + len(b.ts)
    outs = []
    for units in BUDGETS:
        got, st = _run(pref, units, a, b)
        what = f"{pref} u={units}"
        _check_budget(st, units, n, what)
        _check_exact(got, want, what)
        outs.append(sum(got.values()))
        if units < 1:   # the ingest takes at most half the income: the rest is shed
            assert st["pt_shed"] > 0, what
    # a budget that pays a probe buys output: desc / asc keep whole join values, so even
    # 0.1 units per tuple finds pairs; weighted's uniform sample of tuples keeps ~f^2 of the
    # pairs, so from 0.5 on
    first = 0 if pref != "weighted" else BUDGETS.index(0.5)
    assert all(o > 0 for o in outs[first:]), (pref, outs)
    assert outs[-1] > 10 * max(outs[first], 1), (pref, outs)


@pytest.mark.parametrize("pref", ["desc", "asc"])
def test_tiny_budget_on_a_private_index(pref):
    a, b = _stores()
    want = _exact(a, b)
    for units in (0.1, 0.25):
        got, st = _run(pref, units, a, b, share=False)
        assert st["pt_index"] == "private"
        _check_budget(st, units, len(a.ts) + len(b.ts), f"{pref} private u={units}")
        _check_exact(got, want, f"{pref} private u={units}")
        assert sum(got.values()) > 0


@pytest.mark.parametrize("pref", ["desc", "asc", "weighted"])
def test_hot_key_stays_within_allowance_plus_debt(pref):
    """One key holds 40 % of the tuples: a value sample keeping it would ingest 40 % of the
    arrivals on a budget for 25 % (0.5 units per tuple); seeds 1-3."""
    a, b = _hot()
    want = _exact(a, b)
    for seed in (1, 2, 3):
        got, st = _run(pref, 0.5, a, b, seed=seed)
        _check_budget(st, 0.5, len(a.ts) + len(b.ts), f"{pref} hot seed={seed}")
        _check_exact(got, want, f"{pref} hot seed={seed}")


@pytest.mark.parametrize("pref", ["desc", "asc"])
def test_heartbeat_idle_units_are_accounted_and_capped(pref):
    """A heartbeat over a long gap grants at most the units the last window's arrivals brought
    (the gap capped at one window), counted in the allowance; a second heartbeat without
    arrivals in between adds nothing more; the pairs stay exact."""
    a, b = _stores()
    want = _exact(a, b)
    n = len(a.ts) + len(b.ts)
    units = 1
    got, st = _run(pref, units, a, b, heartbeat=(100.0, 200.0))
    _check_budget(st, units, n, f"{pref} heartbeat")
    _check_exact(got, want, f"{pref} heartbeat")
    last = max(a.ts.max(), b.ts.max())
    in_window = int((a.ts > last - W).sum() + (b.ts > last - W).sum())
    assert 0 < st["pt_idle_units"] <= units * in_window + 1e-9
    assert st["pt_idle_units_refused"] > 0          # the engine offered units x rate x 180 s
    base, st0 = _run(pref, units, a, b)
    assert sum(got.values()) >= sum(base.values())   # the idle units bought more probes, not fewer
    assert st0["pt_idle_units"] == 0 and st0["pt_allowance"] == pytest.approx(units * st0["pt_tuples_in"])
