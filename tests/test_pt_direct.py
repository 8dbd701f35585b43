"""Direct rounds of a wall-clock desc PT-Join (issue 16): when a round cannot
pay for its planning, desc keeps the heaviest values and probes each kept
arrival over its whole window, heaviest first -- on its private index
(``wall_hash=False``) or on a value hash (``wall_hash=True``, the default
with a private index: :mod:`sketchql.operators.promising.valuehash`).
Checked against the exact join (brute force); no timed assertions (round
costs are pinned where the outcome depends on them)."""
import numpy as np
import pytest

from sketchql.approx import TimeBudget, evaluate_join, replay
from sketchql.data import exact_join_pairs, generate_stores, interleave
from sketchql.data.generator import Arrivals
from sketchql.operators.promising import PTJoin
from sketchql.operators.promising.join import _FIRST_WALL_BATCH


def _key(a, b, n):
    return np.sort(np.asarray(a, np.int64) * n + np.asarray(b, np.int64))


@pytest.mark.parametrize("wall_hash", [True, False])
def test_direct_rounds_with_an_ample_account_return_exactly_the_exact_join(wall_hash):
    arr = interleave(generate_stores(2, duration=40.0, mean_interarrival=0.02, seed=5))
    q = PTJoin(window=15.0, preference="desc", seed=2, demand_shed=True)
    q.wall_hash = wall_hash
    q.wall_rounds = 1e12          # planning never affordable: every round is direct
    replay(arr, {"q": q}, TimeBudget(fraction=50.0, wall_clock=True), tick_seconds=0.25)
    st = q.stats()
    assert st["rounds"] == st["direct_rounds"] > 5
    assert st["shed"] == 0 and st["direct_unprobed"] == 0 and st["entries"] == 0
    assert st["direct_probed"] == st["tuples_in"] == len(arr)
    a, b = q.pairs()
    ea, eb = exact_join_pairs(arr, 15.0)
    assert np.array_equal(_key(a, b, len(arr)), _key(ea, eb, len(arr)))   # window edges included


@pytest.mark.parametrize("wall_hash", [True, False])
@pytest.mark.parametrize("fraction", [0.0005, 0.001, 0.002])
def test_direct_rounds_under_overload_give_an_exact_subset(fraction, wall_hash):
    """How much is found depends on the machine (real time is charged); what
    is found is exact, without duplicates, and every arrival went through a
    round (ingested or shed)."""
    arr = interleave(generate_stores(2, duration=30.0, mean_interarrival=0.01, seed=3))
    q = PTJoin(window=20.0, preference="desc", seed=1, demand_shed=True)
    q.wall_hash = wall_hash
    replay(arr, {"q": q}, TimeBudget(fraction=fraction, wall_clock=True), tick_seconds=0.25)
    st = q.stats()
    assert st["direct_rounds"] > 0
    assert st["tuples_in"] + st["shed"] == len(arr)
    r = evaluate_join(arr, 20.0, *q.pairs())
    assert r["invalid"] == 0 and r["duplicates"] == 0


@pytest.mark.parametrize("wall_hash", [True, False])
def test_a_round_the_account_cannot_pay_sheds_its_batch(wall_hash):
    """Once a direct round's fixed part costs more than the account holds, the
    round sheds its arrivals (neither ingested nor probed) instead of running
    into debt; the direct round's cost is pinned."""
    arr = interleave(generate_stores(2, duration=12.0, mean_interarrival=0.02, seed=4))
    q = PTJoin(window=10.0, preference="desc", seed=1)
    q.wall_hash = wall_hash
    q.set_wall_clock(True)
    q.wall_defer = 1.0
    bounds = np.unique(np.r_[np.searchsorted(arr.ts, np.arange(arr.ts[0], arr.ts[-1] + 0.25, 0.25)), len(arr)])
    shed_rounds = 0
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        if q._sec_direct is not None:
            q._sec_direct = 1e9          # pinned: no account covers a round any more
        before = q.stats()
        q.tick(arr.take(np.arange(a, b)), np.full(b - a, 1e-4))
        after = q.stats()
        if after["shed"] > before["shed"]:
            shed_rounds += 1
            assert after["tuples_in"] == before["tuples_in"] and after["outputs"] == before["outputs"]
    q.finish()
    st = q.stats()
    assert shed_rounds > 0 and st["direct_rounds"] >= 1
    assert st["tuples_in"] + st["shed"] == len(arr)
    r = evaluate_join(arr, 10.0, *q.pairs())
    assert r["invalid"] == 0 and r["duplicates"] == 0


def _hot_arrivals():
    rng = np.random.default_rng(0)
    n = 800
    item = np.where(rng.random(n) < 0.5, 7, rng.integers(100, 150, n))
    ts = np.sort(rng.random(n)) * 2.0
    stream = (np.arange(n) % 2).astype(np.int32)
    arr = Arrivals(stream=stream, pos=np.arange(n, dtype=np.int64) // 2, seq=np.arange(n, dtype=np.int64),
                   store=stream.astype(np.int64), txn=np.arange(n, dtype=np.int64), ts=ts,
                   item=item.astype(np.int64), price=np.ones(n))
    return arr, n


def test_direct_probes_go_heaviest_value_first():
    """The first (uncalibrated) probe batch of a direct round on the index
    holds the arrivals of the value whose heat is highest."""
    arr, n = _hot_arrivals()
    q = PTJoin(window=10.0, preference="desc", seed=1)
    q.set_wall_clock(True)
    q.wall_hash = False
    probed = []
    for src in q.sources:
        orig = src.scan_many

        def rec(cells, values, t_from, t_to, _o=orig, **kw):
            probed.append(np.asarray(values).copy())
            return _o(cells, values, t_from, t_to, **kw)
        src.scan_many = rec
    q.tick(arr, np.full(n, 1.0))
    assert q.stats()["direct_rounds"] == 1
    first = np.concatenate(probed[:2])           # the first batch (one scan per side)
    assert first.shape[0] > 0 and np.all(first == 7)
    r = evaluate_join(arr, 10.0, *q.pairs())
    assert r["invalid"] == 0 and r["duplicates"] == 0 and r["n_produced"] == r["n_exact"]



def test_hash_rounds_probe_the_most_stored_partners_first():
    """A hash round orders its probes by their exact number of stored partners:
    the first (uncalibrated) batch holds arrivals of the hot value; with an
    ample account the round returns the exact join, probing every arrival once."""
    from sketchql.operators.promising.valuehash import ValueHash

    arr, n = _hot_arrivals()
    q = PTJoin(window=10.0, preference="desc", seed=1)
    q.set_wall_clock(True)
    assert q._hash_rounds()
    probed = []
    orig = ValueHash.pairs

    def rec(self, val, x_rid, x_ts, x_side, lo, hi):
        probed.append(np.asarray(x_rid).copy())
        return orig(self, val, x_rid, x_ts, x_side, lo, hi)
    ValueHash.pairs = rec
    try:
        q.tick(arr, np.full(n, 1.0))
    finally:
        ValueHash.pairs = orig
    st = q.stats()
    assert st["direct_rounds"] == 1 and st["direct_probed"] == n and st["direct_unprobed"] == 0
    allp = np.concatenate(probed)                                 # in probe order, batch by batch
    first = allp[:_FIRST_WALL_BATCH]                              # the first, uncalibrated batch
    assert np.all(arr.item[first] == 7)
    assert np.array_equal(np.sort(allp), np.arange(n))          # every arrival probed once
    r = evaluate_join(arr, 10.0, *q.pairs())
    assert r["invalid"] == 0 and r["duplicates"] == 0 and r["n_produced"] == r["n_exact"]


@pytest.mark.parametrize("wide", [False, True])
def test_value_hash_matches_brute_force(wide):
    """ValueHash.round's partner ranges, then match and pairs over them, against a brute-force
    scan of random stores (``wide``: values beyond +-2^61, coded by a hash)."""
    from sketchql.operators.promising.valuehash import ValueHash

    rng = np.random.default_rng(3)
    h = ValueHash(window=5.0)
    big = np.int64(1) << np.int64(62) if wide else np.int64(0)
    rows = []
    rid = 0
    t = 0.0
    for rnd in range(6):   # rounds: store both sides (expiring the old rows), probe the newest
        k = int(rng.integers(1, 40))
        ts = t + np.sort(rng.random(k)) * 2.0
        t = float(ts[-1])
        v = rng.integers(0, 6, k).astype(np.int64)
        if wide and rnd >= 2:   # the store widens in the middle of the run
            v = v + big
        sd = rng.integers(0, 2, k)
        rids = np.arange(rid, rid + k)
        rid += k
        side, c_rid, c_ts, c_val, lo, hi, _, _ = h.round(v, sd, 0, 1, rids, ts, float(ts[0]) - 5.0)
        assert sorted(c_rid.tolist()) == rids.tolist()      # every arrival is a candidate
        rows.extend(zip(rids.tolist(), ts.tolist(), v.tolist(), sd.tolist()))
        i, y_rid, y_ts = h.match(c_val, c_rid, c_ts, lo, hi)
        got = sorted(zip(c_rid[i].tolist(), y_rid.tolist()))
        # the output columns (compiled kernel, and its plain-Python body) in match's order
        ref = (np.where(side[i] == 0, c_rid[i], y_rid), np.where(side[i] == 0, y_rid, c_rid[i]),
               np.where(side[i] == 0, c_ts[i], y_ts), np.where(side[i] == 0, y_ts, c_ts[i]), c_val[i])
        for got_cols in (h.pairs(c_val, c_rid, c_ts, side, lo, hi), _pairs_py(h, c_val, c_rid, c_ts, side, lo, hi)):
            for g, r in zip(got_cols, ref):
                assert np.array_equal(g, r)
        want = sorted((x, y) for x, xt, xv, xs in zip(rids.tolist(), ts.tolist(), v.tolist(), sd.tolist())
                      for y, yt, yv, ys in rows if ys != xs and yv == xv and y < x and xt - yt < 5.0)
        assert got == want
    assert h.wide == wide


def _pairs_py(h, val, x_rid, x_ts, x_side, lo, hi):
    """ValueHash.pairs through the kernel's plain-Python body (the path without numba)."""
    from sketchql.operators.promising.valuehash import _pairs_kernel_py

    tot = int((hi - lo).sum())
    a, b, v = (np.empty(tot, np.int64) for _ in range(3))
    ta, tb = np.empty(tot), np.empty(tot)
    n = _pairs_kernel_py(h.rid, h.ts, h.val, h.wide, np.asarray(val, np.int64), np.asarray(x_rid, np.int64),
                         np.asarray(x_ts, np.float64), np.asarray(x_side, np.int64), lo, hi, h.window, a, b, ta, tb, v)
    return a[:n], b[:n], ta[:n], tb[:n], v[:n]


def test_hash_rounds_of_a_whole_stream_join_keep_the_index_history_only():
    """window = inf: the value hash drops what the private index would not keep
    (its retained history, here 1 s x (2^2 - 1) = 3 s), so memory stays bounded;
    the pairs found are exact and complete within that history."""
    import math

    from sketchql.operators.promising.admission import retained_history

    arr = interleave(generate_stores(2, duration=30.0, mean_interarrival=0.02, seed=2))
    q = PTJoin(window=math.inf, preference="desc", seed=1, source_options={"granularity": 1.0, "depth": 3})
    hist = retained_history(q.sources[0])
    assert hist == 3.0
    sizes = []
    orig = q._tick_hash

    def rec(batch, income):
        orig(batch, income)
        sizes.append((len(q._vhash), int(((arr.ts > float(batch.ts[0]) - hist - 1e-9) &
                                          (arr.ts <= float(batch.ts[-1]))).sum())))
    q._tick_hash = rec
    replay(arr, {"q": q}, TimeBudget(fraction=50.0, wall_clock=True), tick_seconds=0.25)
    assert sizes and all(n <= bound for n, bound in sizes)
    r = evaluate_join(arr, math.inf, *q.pairs())
    assert r["invalid"] == 0 and r["duplicates"] == 0
    a, b = q.pairs()
    ea, eb = exact_join_pairs(arr, hist)   # every pair within the history is found
    assert np.isin(_key(ea, eb, len(arr)), _key(a, b, len(arr))).all()


def test_wall_clock_charges_the_whole_tick():
    """On a wall clock each operator is charged all the real time of its ``tick``
    calls (and of ``finish``'s last round): PT-Join's rounds, probe batches and sheds plus the rest (waiting
    bookkeeping, joining the waiting batches: ``overhead_seconds``), SIMPLE-SHJ's
    processed arrivals plus the rest (``overhead_seconds``).  Loose bounds: the
    timer around each call also times its own few statements."""
    import time

    from sketchql.operators.promising import SimpleSHJ

    arr = interleave(generate_stores(2, duration=20.0, mean_interarrival=0.05, seed=6))
    ops = {"pt": PTJoin(window=10.0, preference="desc", seed=1), "shj": SimpleSHJ(window=10.0, max_backlog=1e-4)}
    spent = {k: 0.0 for k in ops}
    for k, op in ops.items():
        orig = op.tick

        def rec(batch, allowance, _o=orig, _k=k):
            t = time.perf_counter()
            _o(batch, allowance)
            spent[_k] += time.perf_counter() - t
        op.tick = rec
        fin = op.finish                     # finish() runs the waiting arrivals' last round

        def rec_fin(_o=fin, _k=k):
            t = time.perf_counter()
            _o()
            spent[_k] += time.perf_counter() - t
        op.finish = rec_fin
    replay(arr, ops, TimeBudget(fraction=0.0005, wall_clock=True), tick_seconds=0.25)
    pt, shj = ops["pt"].stats(), ops["shj"].stats()
    pt_charged = pt["round_seconds"] + pt["probe_seconds"] + pt["shed_seconds"] + pt["overhead_seconds"]
    shj_charged = shj["charged_seconds"] + shj["overhead_seconds"]
    assert pt["overhead_seconds"] > 0 and shj["overhead_seconds"] > 0
    for charged, real in ((pt_charged, spent["pt"]), (shj_charged, spent["shj"])):
        assert 0.5 * real <= charged <= real * 1.0001
