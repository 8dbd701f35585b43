"""PT-Join priorities that age (lazy exponential aging of the entry queue) and
the dropping of entries whose partners have all expired, checked against
brute force (``sketchql.data.exact_join_pairs``)."""
import math

import numpy as np
import pytest

from sketchql.approx import WorkBudget, evaluate_join, replay
from sketchql.data import Arrivals, exact_join_pairs, generate_stores, interleave
from sketchql.errors import SketchQLError
from sketchql.operators.promising import PTJoin, PTJoinGroup
from sketchql.operators.promising.queue import EntryQueue


# ----------------------------------------------------------------- the queue
@pytest.mark.parametrize("pref", ["desc", "asc"])
def test_aged_keys_order_like_the_aged_priorities_at_every_now(pref):
    rng = np.random.default_rng(5)
    k, lam = 300, 0.3
    p = rng.uniform(0.5, 500.0, k)
    t = np.sort(rng.uniform(0.0, 50.0, k))
    q = EntryQueue(pref, fields=("i",), aging=lam)
    q.push({"i": np.arange(k)}, p, np.ones(k), np.arange(k), t=t)
    order = [q.pop() for _ in range(k)]
    sign = -1.0 if pref == "desc" else 1.0
    for now in (50.0, 80.0, 1000.0):   # brute force: sort by the aged priority at `now`
        eff = p * np.exp(sign * lam * (now - t))
        ref = np.argsort(eff if pref == "asc" else -eff, kind="stable")
        assert np.allclose(eff[order], eff[ref], rtol=1e-9)


def test_no_aging_keeps_the_static_order():
    p = np.array([1.0, 5.0, 3.0])
    q = EntryQueue("desc", fields=("i",))
    q.push({"i": np.arange(3)}, p, np.ones(3), np.arange(3))
    assert [q.pop() for _ in range(3)] == [1, 2, 0]


def test_aging_arguments():
    with pytest.raises(SketchQLError):
        EntryQueue("desc", aging=-1.0)
    q = EntryQueue("desc", fields=("i",), aging=0.1)
    with pytest.raises(SketchQLError):   # aged entries need their event times
        q.push({"i": np.arange(2)}, np.ones(2), np.ones(2), np.arange(2))
    with pytest.raises(SketchQLError):
        PTJoin(window=10.0, aging=math.inf)
    # desc: alpha per DESC_AGING_SPAN (0.25 s) -- fresh entries are cheaper to probe -- or per T1 if shorter
    assert PTJoin(window=10.0, preference="desc", fade=0.8).aging == pytest.approx(-math.log(0.8) / 0.25)
    assert PTJoin(window=10.0, preference="desc", fade=0.8, source="mini",
                  source_options={"t1": 0.1}).aging == pytest.approx(-math.log(0.8) / 0.1)
    assert PTJoin(window=10.0, preference="asc", fade=0.5, source="mini",
                  source_options={"t1": 4.0}).aging == pytest.approx(math.log(2) / 4.0)
    assert PTJoin(window=10.0, preference="weighted").aging == 0.0
    assert PTJoin(window=10.0, fade=1.0).aging == 0.0
    assert PTJoin(window=10.0, aging=False).aging == 0.0
    assert PTJoin(window=10.0, preference="weighted", aging=0.2).aging == 0.2


# ----------------------------------------------------------------- PT-Join
def _run(source, seed, w=20.0, duration=60.0):
    arr = interleave(generate_stores(2, duration=duration, mean_interarrival=0.01, seed=seed))
    # every arrival ingested (no demand shedding): the queue then piles up old
    # entries under overload, which is what aging is for (demand shedding keeps
    # the queue at ~4x what the budget probes, and with it the age of entries)
    qs = [PTJoin(w, "desc", 0.8, aging=a, seed=1, source=source, name=str(a), demand_shed=False)
          for a in (False, None)]
    replay(arr, {"g": PTJoinGroup(qs, cpu="separate")}, WorkBudget(units_per_second=2000), tick_seconds=0.25)
    return arr, qs


@pytest.fixture(scope="module", params=[("index", 2), ("mini", 1)], ids=["index", "mini"])
def aged_runs(request):
    return request.param, _run(*request.param)


def _freshness_stats(arr, q, w):
    """(mean discovery lag, mean |ts1 - ts2| of steady-state pairs, share of the
    exact pairs completed in the last window that were produced)."""
    ea, eb = exact_join_pairs(arr, w)
    later_exact = np.maximum(arr.ts[ea], arr.ts[eb])
    r = q.result()
    later = np.maximum(r["ts_a"], r["ts_b"])
    lag = float(np.mean(r["found_at"] - later))
    steady = later > arr.ts[0] + w
    gap = float(np.mean(np.abs(r["ts_a"] - r["ts_b"])[steady]))
    end = arr.ts[-1] - w
    newest = float((later > end).sum() / (later_exact > end).sum())
    return lag, gap, newest


def test_aging_makes_desc_find_fresh_pairs_under_overload(aged_runs):
    (source, seed), (arr, (fixed, aged)) = aged_runs
    w = 20.0
    lag_f, gap_f, new_f = _freshness_stats(arr, fixed, w)
    lag_a, gap_a, new_a = _freshness_stats(arr, aged, w)
    # pairs are found sooner after they complete, and more of the newest ones are found
    assert lag_a < 0.7 * lag_f, (lag_a, lag_f)
    assert new_a > new_f, (new_a, new_f)
    # |ts1 - ts2| is governed by the granularity fade, not by the entry's age:
    # aging must not make it much worse (measured: within +-8 %)
    assert gap_a < 1.15 * gap_f, (gap_a, gap_f)


def test_aged_output_is_an_exact_subset_of_live_pairs(aged_runs):
    (_, _), (arr, qs) = aged_runs
    w = 20.0
    for q in qs:
        a, b = q.pairs()
        r = evaluate_join(arr, w, a, b)
        assert r["n_produced"] > 0 and r["invalid"] == 0 and r["duplicates"] == 0
        res = q.result()
        # every pair was still a result of the window join in the tick it was found
        assert np.all(np.minimum(res["ts_a"], res["ts_b"]) > res["found_at"] - 0.25 - w)  # 0.25: one tick
        assert np.all(res["found_at"] >= np.maximum(res["ts_a"], res["ts_b"]))


def _arrivals(rows):
    """rows: (stream, ts, item) in arrival order."""
    s, t, i = (np.array(c) for c in zip(*rows))
    n = len(rows)
    return Arrivals(stream=s.astype(np.int32), pos=np.arange(n), seq=np.arange(n), store=s.astype(np.int64),
                    txn=np.arange(n), ts=t.astype(np.float64), item=i.astype(np.int64), price=np.ones(n))


@pytest.mark.parametrize("source", ["mini", "index"])
def test_entries_whose_partners_all_expired_are_dropped_unprobed(source):
    opts = {"zone_seconds": 1.0, "t1": 1.0} if source == "mini" else {"granularity": 1.0}
    op = PTJoin(window=10.0, preference="desc", source=source, source_options=opts)
    arr = _arrivals([(1, 0.2, 7), (1, 0.5, 7), (0, 9.0, 7), (0, 12.0, 99), (0, 12.5, 98)])
    # set-up without a budget: ingest and queue everything (admission off), probe nothing
    op.admit_ingest = lambda batch, income, fraction=None: None
    op.admit_plan = lambda batch, sides: sides
    op.tick(arr.take([0, 1]), np.zeros(2))
    op.tick(arr.take([2]), np.zeros(1))       # x = (a, 9.0, 7) queued, no budget to probe it
    assert len(op.queue) > 0 and op.stats()["probes"] == 0
    op.tick(arr.take([3, 4]), np.full(2, 1e6))  # now 12.5: x alive, but its partners (0.2, 0.5) expired
    st = op.stats()
    assert len(op.pairs()[0]) == 0
    assert st["probes"] == 0 and st["compares"] == 0
    assert st["discarded_partners_expired"] >= 1
    # the exact window join at 12.5 has no live pair either; with the budget in time it is found
    op2 = PTJoin(window=10.0, preference="desc", source=source, source_options=opts)
    op2.tick(arr.take([0, 1]), np.full(2, 2.0))   # two inserts' worth: both ingested
    op2.tick(arr.take([2]), np.full(1, 1e6))
    a, b = op2.pairs()
    ea, eb = exact_join_pairs(arr.take([0, 1, 2]), 10.0)
    assert sorted(zip(a.tolist(), b.tolist())) == sorted(zip(ea.tolist(), eb.tolist())) and len(a) == 2
