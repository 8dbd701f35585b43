"""ValueHash.round (desc's compiled hash round, issue 16 wall clock): the
store, each candidate's exact partner range, the heaviest-first order and the
carried candidates, against a brute-force model of the store (every row ever
added, expired by the rounds' horizons)."""
import numpy as np
import pytest

from sketchql.operators.promising.valuehash import ValueHash, _round_kernel_py


def _brute(rows, x, w):
    """Partners of candidate ``x = (rid, ts, val, side)`` among the stored ``rows``."""
    xr, xt, xv, xs = x
    return sorted(r for r, t, v, s in rows if s != xs and v == xv and r < xr and t > xt - w)


@pytest.mark.parametrize("wide,mono", [(False, True), (True, True), (False, False)])
def test_round_finds_exact_partner_ranges_and_carries_the_heaviest(wide, mono):
    rng = np.random.default_rng(11 + wide + 2 * mono)
    w = 3.0
    h = ValueHash(window=w)
    big = np.int64(1) << np.int64(62)
    stored = []           # (rid, ts, val, side) of the rows the store should hold
    carried = {}          # rid -> (rid, ts, val, side) carried to the next round
    probed = set()
    rid = 0
    t = 0.0
    for rnd in range(25):
        k = int(rng.integers(0, 30))
        ts = t + np.sort(rng.random(k)) * 1.5
        if not mono and k > 2 and rnd % 3 == 0:
            ts[k // 2] -= 2.0             # out of order: the round must not trust ts order in a block
        t = float(ts.max()) if k else t
        v = rng.integers(0, 5, k).astype(np.int64)
        if wide and rnd >= 5:
            v = v + big
        stream = rng.integers(0, 3, k)   # stream 2 is neither side: ignored
        rids = np.arange(rid, rid + k, dtype=np.int64)
        rid += k
        horizon = (float(ts.min()) if k else t) - w
        out = h.round(v, stream, 0, 1, rids, ts, horizon, 1.0, 1.0)
        side, x_rid, x_ts, val, lo, hi, cum, ccum = out
        stored = [r for r in stored if r[1] > horizon]
        stored += [(int(r), float(tt), int(vv), int(s)) for r, tt, vv, s in zip(rids, ts, v, stream) if s < 2]
        assert len(h) == len(stored)
        assert sorted(h.rid.tolist()) == sorted(r[0] for r in stored)
        # candidates: every new arrival of the two streams and the carried ones that still have partners
        exp = {r[0]: _brute(stored, r, w) for r in carried.values()}
        exp = {r: p for r, p in exp.items() if p}
        exp.update({int(r): _brute(stored, (int(r), float(tt), int(vv), int(s)), w)
                    for r, tt, vv, s in zip(rids, ts, v, stream) if s < 2})
        assert sorted(x_rid.tolist()) == sorted(exp)
        cnt = hi - lo
        if mono:
            assert [len(exp[r]) for r in x_rid.tolist()] == cnt.tolist()   # exact counts
        # heaviest first, rid order among equals
        key = list(zip((-cnt).tolist(), x_rid.tolist()))
        assert key == sorted(key)
        assert np.allclose(cum, np.cumsum(1.0 + cnt)) and np.array_equal(ccum, np.cumsum(cnt))
        # probe a prefix; its pairs are exactly the brute-force partners
        b = int(rng.integers(0, len(x_rid) + 1))
        pa, pb, pta, ptb, pv = h.pairs(val[:b], x_rid[:b], x_ts[:b], side[:b], lo[:b], hi[:b])
        want = sorted((r, y) for r in x_rid[:b].tolist() for y in exp[r])
        later = np.maximum(pa, pb)
        assert sorted(set(later.tolist())) == sorted(r for r in x_rid[:b].tolist() if exp[r])
        assert len(pa) == len(want) and set(zip(pa.tolist(), pb.tolist())) == {
            (y, r) if s else (r, y) for r, s in zip(x_rid[:b].tolist(), side[:b].tolist()) for y in exp[r]}
        for r in x_rid[:b].tolist():
            assert r not in probed
            probed.add(r)
        cap = int(rng.integers(0, 10))
        h.carry(b, cap)
        by = {int(r): (int(r), float(tt), int(vv), int(s)) for r, tt, vv, s in zip(x_rid, x_ts, val, side)}
        carried = {r: by[r] for r, c in zip(x_rid[b:b + cap].tolist(), cnt[b:b + cap].tolist()) if c > 0}
        assert h.carried == len(carried)
    assert h.wide == wide


def test_round_kernel_python_body_matches_the_compiled_one():
    """The kernel's plain-Python body (the path without numba) gives the same round."""
    rng = np.random.default_rng(4)
    h = ValueHash(window=2.0)
    for rnd in range(4):
        k = 20
        v = rng.integers(0, 4, k).astype(np.int64)
        st = rng.integers(0, 2, k).astype(np.int64)
        rid = np.arange(rnd * k, (rnd + 1) * k, dtype=np.int64)
        ts = rnd + np.sort(rng.random(k))
        e = np.zeros(0, np.int64)
        args = (h.code, h.val, h.rid, h.ts, h._t_max, h._mono, v, st, 0, 1, rid, ts, e, False, rnd - 2.0, 2.0,
                1.0, 1.0) + h._carry
        ref = _round_kernel_py(*args)
        got = h.round(v, st, 0, 1, rid, ts, rnd - 2.0)
        for g, r in zip(got, ref[5:13]):
            assert np.array_equal(g, r)
        h.carry(5, 5)


def test_a_debt_the_share_repays_delays_probes_instead_of_shedding():
    """A spike of real time (here a debt of 0.3 s put on the account mid-stream,
    three latency spans of income) with a share that pays its rounds: the rounds
    during the debt store and carry their arrivals (nothing is shed) and probe
    them once the debt is repaid -- the answer is still the exact join."""
    from sketchql.approx import evaluate_join
    from sketchql.data import exact_join_pairs, generate_stores, interleave
    from sketchql.operators.promising import PTJoin

    arr = interleave(generate_stores(2, duration=12.0, mean_interarrival=0.02, seed=8))
    q = PTJoin(window=20.0, preference="desc", seed=1)
    q.set_wall_clock(True)
    bounds = np.unique(np.r_[np.searchsorted(arr.ts, np.arange(arr.ts[0], arr.ts[-1] + 0.25, 0.25)), len(arr)])
    per = 0.05 / 100   # 50 ms per 100 arrivals (~2 s): the debt is repaid in ~6 s of arrivals
    in_debt = 0
    last = len(bounds) - 2
    for i, (a, b) in enumerate(zip(bounds[:-1].tolist(), bounds[1:].tolist())):
        if i == 10:
            q.account -= 0.3
        before = q.stats()["direct_rounds"]
        q.tick(arr.take(np.arange(a, b)), np.full(b - a, 10.0 if i == last else per))   # last: probe the rest
        if q.account < 0 and q.stats()["direct_rounds"] > before:
            in_debt += 1
    q.finish()
    st = q.stats()
    assert in_debt > 0                       # rounds ran while the account was in debt
    assert st["shed"] == 0 and st["direct_unprobed"] == 0
    r = evaluate_join(arr, 20.0, *q.pairs())
    ea, eb = exact_join_pairs(arr, 20.0)
    assert r["invalid"] == 0 and r["duplicates"] == 0 and r["n_produced"] == len(ea)
