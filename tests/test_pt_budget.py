"""Budget accounting of the PT-Join (issue 16, defect 1): everything the
operator does is charged, the work charged never exceeds the allowance
granted plus the debt it carries at the end (one step's overrun, see
:mod:`sketchql.operators.promising.admission`), and small budgets still buy
output -- at 1, 2, 5 and 50 units per tuple."""
import numpy as np
import pytest

from sketchql.approx import WorkBudget, evaluate_join, replay
from sketchql.data import generate_stores, interleave
from sketchql.errors import SketchQLError
from sketchql.operators.promising import COSTS, PTJoin, PTJoinGroup

BUDGETS = (1.0, 2.0, 5.0, 50.0)


@pytest.fixture(scope="module")
def stream():
    return interleave(generate_stores(2, duration=24.0, mean_interarrival=0.02, seed=12))


@pytest.fixture(scope="module")
def runs(stream):
    out = {}
    for units in BUDGETS:
        qs = [PTJoin(window=20.0, preference=p, name=p) for p in ("desc", "weighted", "asc")]
        shared = [PTJoin(window=20.0, preference=p, name=p) for p in ("desc", "asc")]
        replay(stream, {"sep": PTJoinGroup(qs, cpu="separate"), "shr": PTJoinGroup(shared, cpu="shared")},
               WorkBudget(units_per_arrival=units), tick_seconds=0.25)
        for q in qs:
            out[(units, q.name)] = q
        for q in shared:
            out[(units, "shared_" + q.name)] = q
    return out


def _charged(st, share):
    """Work recomputed from the operator's counters (each unit of work counted
    where it is done; a shared ingest is split by the queries' CPU shares)."""
    return (COSTS["insert"] * st["tuples_in"] * share + st["node_work"] + st["lookup_work"]
            + COSTS["probe"] * st["probes"] + COSTS["compare"] * st["compares"])


@pytest.mark.parametrize("units", BUDGETS)
@pytest.mark.parametrize("name", ["desc", "weighted", "asc", "shared_desc", "shared_asc"])
def test_work_never_exceeds_allowance_plus_carried_debt(runs, stream, units, name):
    op = runs[(units, name)]
    st = op.stats()
    share = 0.5 if name.startswith("shared") else 1.0
    assert st["work"] == pytest.approx(_charged(st, share), rel=1e-9)
    assert st["allowance"] == pytest.approx(units * len(stream) * share, rel=1e-9)
    debt = max(0.0, -st["account"])
    assert debt <= st["debt_max"] + 1e-9
    assert st["work"] <= st["allowance"] + debt + 1e-6
    # the carried debt is one step's overrun: a first entry costing more than the
    # account, or a planning call beyond its measured mean -- nothing else
    assert st["debt_max"] <= max(st["max_forced"], st["max_plan_overrun"]) + 1e-9
    assert st["debt_max"] <= 0.25 * st["allowance"]


@pytest.mark.parametrize("name", ["desc", "weighted", "asc"])
def test_small_budgets_buy_output(runs, stream, name):
    pct = [evaluate_join(stream, 20.0, *runs[(u, name)].pairs())["pct_output"] for u in BUDGETS]
    assert pct[0] > 0                                  # 1 unit per tuple: no dead end
    assert all(b >= a for a, b in zip(pct, pct[1:]))   # more budget, more output
    assert pct[-1] > 10 * pct[0]
    st = runs[(1.0, name)].stats()
    assert st["probes"] > 0 and st["shed"] > 0        # the insert alone would have eaten it all


def test_output_is_exact_at_every_budget(runs, stream):
    for (units, name), op in runs.items():
        r = evaluate_join(stream, 20.0, *op.pairs())
        assert r["invalid"] == 0 and r["duplicates"] == 0, (units, name)


def test_wall_clock_rounds_wait_for_their_cost(stream):
    """Wall clock: arrivals wait (allowance credited) while the account does not
    cover two rounds' measured cost, and are processed together once it does or
    once they span ``wall_defer`` seconds; ``finish`` flushes the rest.  The
    round cost is pinned (no timing in the assertions).  Planned rounds
    (``wall_direct`` off: desc would otherwise run direct rounds, whose cost is
    measured apart; see test_pt_direct.py)."""
    op = PTJoin(window=20.0, preference="desc")
    op.wall_direct = False
    op.set_wall_clock(True)
    op.wall_defer = 2.0
    op._sec_round = 1e9                         # a round "costs" more than any account: only the span flushes
    bounds = np.searchsorted(stream.ts, np.arange(stream.ts[0], stream.ts[-1] + 0.25, 0.25))
    bounds = np.unique(np.r_[bounds, len(stream)])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        before = op.stats()["tuples_in"]
        op.tick(stream.take(np.arange(a, b)), np.full(b - a, 1e-3))
        op._sec_round = 1e9                     # keep it pinned after the measured rounds
        if op._pend:                            # waiting: nothing ingested by this tick
            assert op.stats()["tuples_in"] == before
            assert stream.ts[b - 1] - op._pend[0][0].ts[0] < 2.0
    assert op.stats()["deferred_ticks"] > 0
    op.finish()
    assert not op._pend and op.stats()["tuples_in"] == len(stream)
    assert op.stats()["allowance"] == pytest.approx(1e-3 * len(stream))
    r = evaluate_join(stream, 20.0, *op.pairs())
    assert r["invalid"] == 0 and r["duplicates"] == 0


@pytest.fixture(scope="module")
def overloaded():
    """desc with and without demand shedding, and a desc + weighted group, on
    an overloaded budget (~10 units per arrival, ~100 partners per arrival)."""
    arr = interleave(generate_stores(2, duration=24.0, mean_interarrival=0.01, seed=3))
    runs = {}
    for ds in (True, False):
        q = PTJoin(window=16.0, preference="desc", demand_shed=ds, name=f"desc_{ds}")
        replay(arr, {"q": q}, WorkBudget(units_per_second=2000), tick_seconds=0.25)
        runs[ds] = q
    g = [PTJoin(window=16.0, preference=p, name=p, demand_shed=(p == "desc")) for p in ("desc", "weighted")]
    replay(arr, {"g": PTJoinGroup(g, cpu="separate")}, WorkBudget(units_per_second=2000), tick_seconds=0.25)
    return arr, runs, g


def test_demand_shedding_skips_inserts_the_budget_cannot_use(overloaded):
    """desc sheds the arrivals whose entries the budget can never probe
    (admission.demand_fraction): fewer inserts and plans, at least as much
    output (within noise), every pair exact, the budget kept."""
    arr, runs, _ = overloaded
    on, off = runs[True].stats(), runs[False].stats()
    assert on["shed"] > 0 and off["shed"] == 0
    assert on["insert_work"] < 0.8 * off["insert_work"]
    assert on["node_work"] < off["node_work"]
    assert on["outputs"] >= 0.97 * off["outputs"]
    for st in (on, off):
        assert st["work"] <= st["allowance"] + max(0.0, -st["account"]) + 1e-6
    r = evaluate_join(arr, 16.0, *runs[True].pairs())
    assert r["invalid"] == 0 and r["duplicates"] == 0
    assert runs[True].demand_shed and not PTJoin(preference="desc").demand_shed   # opt-in
    with pytest.raises(SketchQLError):
        PTJoin(preference="weighted", demand_shed=True)


def test_demand_shedding_is_off_when_a_query_needs_every_value(overloaded):
    """In a group the index is shared: with weighted (a uniform sample of the
    pairs) in it, nothing is shed for desc's demand (10 units per arrival
    also pay every insert)."""
    _, _, g = overloaded
    assert all(q.stats()["shed"] == 0 for q in g)


def test_demand_shedding_keeps_everything_at_full_budget():
    arr = interleave(generate_stores(2, duration=12.0, mean_interarrival=0.01, seed=3))
    q = PTJoin(window=8.0, preference="desc", demand_shed=True)
    replay(arr, {"q": q}, WorkBudget.unlimited(), tick_seconds=0.25)
    assert q.stats()["shed"] == 0
    assert evaluate_join(arr, 8.0, *q.pairs())["pct_output"] == pytest.approx(100.0)


def test_group_wall_clock_rounds_wait_for_their_cost(stream):
    """A PTJoinGroup on a wall clock holds its arrivals like a single query:
    while a query's measured round is pinned above any account, only the
    span (wall_defer) flushes; nothing is lost and ``finish`` flushes the rest."""
    qs = [PTJoin(window=20.0, preference=p, name=p) for p in ("desc", "weighted")]
    g = PTJoinGroup(qs, cpu="separate")
    g.set_wall_clock(True)
    for q in qs:
        q.wall_defer = 2.0
    bounds = np.searchsorted(stream.ts, np.arange(stream.ts[0], stream.ts[-1] + 0.25, 0.25))
    bounds = np.unique(np.r_[bounds, len(stream)])
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        before = qs[0].stats()["tuples_in"]
        g.tick(stream.take(np.arange(a, b)), np.full(b - a, 1e-3))
        qs[1]._sec_round = 1e9                  # one query's round "costs" more than any account
        if g._pend:
            assert qs[0].stats()["tuples_in"] == before
            assert stream.ts[b - 1] - g._pend[0][0].ts[0] < 2.0
    assert qs[0].stats()["deferred_ticks"] > 0
    g.finish()
    assert not g._pend
    for q in qs:
        st = q.stats()
        assert st["tuples_in"] == len(stream) and st["rounds"] > 0
        assert st["allowance"] == pytest.approx(1e-3 * len(stream))
        r = evaluate_join(stream, 20.0, *q.pairs())
        assert r["invalid"] == 0 and r["duplicates"] == 0
