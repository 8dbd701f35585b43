"""Unit checks of the exact operators' edges (errors, stats, knobs)."""
import numpy as np
import pytest

from sketchql.errors import LateTupleError, SketchQLError
from sketchql.operators.exact import (AggSpec, Aggregate, Batch, Chain, Distinct, MJoin, Select,
                                      SymmetricHashJoin, WindowScan, WindowSpec, as_batch, snapshot)


def test_late_tuple_and_bad_input_raise():
    ws = WindowScan(WindowSpec.range(5))
    ws.push(Batch({"x": np.array([1])}, ts=np.array([10.0])))
    with pytest.raises(LateTupleError):
        ws.push(Batch({"x": np.array([1])}, ts=np.array([9.0])))
    with pytest.raises(SketchQLError):
        WindowSpec.range(0)
    with pytest.raises(SketchQLError):
        as_batch({"x": [1, 2]})                       # no ts column
    with pytest.raises(SketchQLError):
        Select(("x", "~", 1))
    with pytest.raises(SketchQLError):
        AggSpec("mode", "x")
    with pytest.raises(SketchQLError):
        MJoin(2, [((0, "a"), (0, "a"))])


def test_minmax_rescans_only_when_extreme_leaves():
    agg = Aggregate([], [AggSpec("max", "v", "m")])
    q = Chain(WindowScan(WindowSpec.range(10)), agg)
    q.push(Batch({"v": np.array([9., 1., 2., 3.])}, ts=np.array([1., 2., 3., 4.])))
    ch = q.advance(12.5)          # 9 leaves at 11 (rescan), 1 at 12 (no rescan)
    assert agg.stats()["rescans"] == 1
    plus = ch.take(ch.sign > 0)
    assert plus.columns["m"].tolist() == [3.0]


def test_stats_and_probe_order_knob():
    j = SymmetricHashJoin("k")
    assert j.stats()["state_rows"] == 0
    m = MJoin(3, [((0, "k"), (1, "k")), ((1, "k"), (2, "k"))], prefixes=["a", "b", "c"])
    m.set_probe_order(0, [2, 1])
    with pytest.raises(SketchQLError):
        m.set_probe_order(0, [1])


def test_distinct_replace_rejects_non_fifo_input():
    d = Distinct(["k"], mode="replace")
    q = Chain(WindowScan(WindowSpec.partitioned(["p"], 1)), d)
    q.push(Batch({"k": np.array([1, 1]), "p": np.array([0, 1])}, ts=np.array([1., 2.])))
    with pytest.raises(SketchQLError):     # partition 1's newer copy is pushed out first
        q.push(Batch({"k": np.array([2]), "p": np.array([1])}, ts=np.array([3.])))


def test_tuple_based_window_ties():
    q = WindowScan(WindowSpec.rows(2))
    ch = q.push(Batch({"x": np.array([1, 2, 3])}, ts=np.array([5., 5., 5.])))
    assert sorted(snapshot(ch, 5)["x"].tolist()) == [2, 3]
    assert len(ch) == 2                      # x=1 never visible: not emitted


def test_compiled_mix_is_bit_identical_to_mix_rids():
    from sketchql.operators.changes import mix_rids
    from sketchql.operators.exact._kernels import mix_rows
    rng = np.random.default_rng(3)
    for k in (1, 2, 3):
        r = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, (k, 500), dtype=np.int64)
        r[:, :3] = [-1, 0, np.iinfo(np.int64).max]
        assert np.array_equal(mix_rows(r.view(np.uint64)).view(np.int64), mix_rids(*r))


def _emit_reference(idx, s_, e_, nw, ts_all, rid_all, off):
    """join_emit by numpy: − of shown composites that end, + of new live ones, stable on time."""
    from sketchql.operators.changes import mix_rids
    live, fin = s_ < e_, ~np.isinf(e_)
    im, ip = np.flatnonzero(fin & (live | ~nw)), np.flatnonzero(nw & live)
    comp = np.concatenate([im, ip])
    at = np.concatenate([e_[im], s_[ip]])
    sign = np.concatenate([-np.ones(len(im), np.int8), np.ones(len(ip), np.int8)])
    o = np.argsort(at, kind="stable")
    comp, at, sign = comp[o], at[o], sign[o]
    g = [off[k] + idx[k][comp] for k in range(len(idx))]
    ts = np.max([ts_all[x] for x in g], axis=0)
    return comp, sign, at, ts, mix_rids(*[rid_all[x] for x in g])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_join_emit_counting_sort_and_its_fallback_match_a_stable_sort(seed):
    from sketchql.operators.exact._kernels import join_emit
    from sketchql.operators.exact.join import _ranks
    rng = np.random.default_rng(seed)
    K, n = 2 + seed % 2, 3000
    lens = rng.integers(20, 60, K)
    off = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    N = int(lens.sum())
    grid = np.arange(40) * 0.5                                 # few distinct times: many ties
    start_all = rng.choice(grid, N)
    end_all = np.where(rng.random(N) < 0.5, np.inf, start_all + rng.choice(grid, N))
    ts_all, rid_all = rng.random(N), rng.integers(-2 ** 40, 2 ** 40, N)
    idx = np.stack([rng.integers(0, lens[k], n) for k in range(K)])
    g = [off[k] + idx[k] for k in range(K)]
    s_ = np.max([start_all[x] for x in g], axis=0)
    e_ = np.min([end_all[x] for x in g], axis=0)
    nw = rng.random(n) < 0.6
    ev = np.unique(np.concatenate([start_all, end_all[~np.isinf(end_all)]]))
    ref = _emit_reference(idx, s_, e_, nw, ts_all, rid_all, off)
    ranked = join_emit(idx, s_, e_, nw, ev, off, start_all, end_all, _ranks(ev, start_all),
                       _ranks(ev, end_all), ts_all, rid_all.view(np.uint64))
    none = -np.ones(N, np.int64)                               # no time found: the merge-sort path
    merged = join_emit(idx, s_, e_, nw, ev, off, start_all, end_all, none, none, ts_all,
                       rid_all.view(np.uint64))
    assert len(ref[0]) > 1000
    for got in (ranked, merged):
        comp, sign, at, ts, rid = got
        assert np.array_equal(comp, ref[0]) and np.array_equal(sign, ref[1])
        assert np.array_equal(at, ref[2]) and np.array_equal(ts, ref[3])
        assert np.array_equal(rid.view(np.int64), ref[4])


def test_join_changes_match_brute_force_lifetimes():
    """Every composite of live rows with equal keys: + at max start, − at min end (ties, NULLs)."""
    from sketchql.operators.changes import Changes, mix_rids
    rng = np.random.default_rng(5)
    n, w = 900, 2.0
    ts = np.round(np.cumsum(rng.exponential(0.05, n)), 1)
    side = rng.integers(0, 3, n)
    key = rng.integers(0, 6, n).astype(float)
    key[rng.random(n) < 0.05] = np.nan
    scans = [WindowScan(WindowSpec.range(w)) for _ in range(3)]
    j = MJoin(3, [((0, "k"), (1, "k")), ((1, "k"), (2, "k"))], prefixes=["a.", "b.", "c."])
    outs, ins = [], [[] for _ in range(3)]
    for i in range(0, n, 40):
        sl = slice(i, i + 40)
        now = float(ts[sl][-1])
        chs = []
        for s in range(3):
            m = side[sl] == s
            ch = scans[s].step(now, Batch({"k": key[sl][m]}, ts=ts[sl][m]) if m.any() else None)
            ins[s].append(ch)
            chs.append(ch)
        out = j.step(now, *chs)
        assert np.all(np.diff(out.at) >= 0) and np.all((np.diff(out.at) > 0) | (np.diff(out.sign) >= 0))
        outs.append(out)
    got = Changes.concat(outs)
    # brute force from the scans' own lifetimes
    life = []
    for s in range(3):
        c = Changes.concat(ins[s])
        plus = c.sign > 0
        end = {int(r): float(a) for r, a in zip(c.rid[~plus], c.at[~plus])}
        life.append([(int(r), float(a), end.get(int(r), np.inf), float(k))
                     for r, a, k in zip(c.rid[plus], c.at[plus], c.columns["k"][plus])])
    exp = []
    for ra, sa, ea, ka in life[0]:
        for rb, sb, eb, kb in life[1]:
            if not ka == kb:
                continue
            for rc, sc, ec, kc in life[2]:
                if kb == kc and max(sa, sb, sc) < min(ea, eb, ec):
                    rid = int(mix_rids(np.array([ra]), np.array([rb]), np.array([rc]))[0])
                    exp.append((max(sa, sb, sc), 1, rid))
                    if min(ea, eb, ec) <= float(ts[-1]):
                        exp.append((min(ea, eb, ec), -1, rid))
    assert len(exp) > 200
    assert sorted(exp) == sorted(zip(got.at.tolist(), got.sign.tolist(), got.rid.tolist()))


def test_keydict_matches_a_dict_through_growth_and_compaction():
    from sketchql.operators.exact._keys import KeyDict
    rng = np.random.default_rng(0)
    d, ref = KeyDict(), {}
    for step in range(300):
        fp = rng.integers(-50, 50, rng.integers(0, 40)) * 7919 ** (step % 3)   # poorly mixed keys
        if step % 17 == 0:
            fp = rng.integers(np.iinfo(np.int64).min, np.iinfo(np.int64).max, 30, dtype=np.int64)
        exp = []
        for f in fp.tolist():
            exp.append(ref.setdefault(f, len(ref)))            # codes in order of first appearance
        assert d.codes(fp).tolist() == exp
        q = rng.integers(-60, 60, 20)
        assert d.lookup(q).tolist() == [ref.get(f, -1) for f in q.tolist()]
        if step % 23 == 22:
            keep = rng.random(len(d)) < 0.5
            remap = d.compact(keep)
            old = sorted(ref, key=ref.get)
            ref = {f: i for i, f in enumerate(f for f in old if keep[ref[f]])}
            assert [int(remap[c]) for c in range(len(keep)) if keep[c]] == list(range(int(keep.sum())))
            assert len(d) == len(ref)
    assert len(d) > 100


def test_holistic_aggregates_of_one_column_share_a_state_and_match_separate_ones():
    rng = np.random.default_rng(11)
    n = 1500
    ts = np.round(np.cumsum(rng.exponential(0.05, n)), 1)
    g, v = rng.integers(0, 8, n), np.round(rng.normal(0, 3, n), 1)
    v[rng.random(n) < 0.05] = np.nan
    specs = [AggSpec("min", "v", "mn"), AggSpec("max", "v", "mx"), AggSpec("median", "v", "md"),
             AggSpec("count_distinct", "v", "cd"), AggSpec("quantile", "v", "q9", 0.9)]
    both = Aggregate(["g"], specs)
    assert len(both._hol_lead) == 1                       # one state for the five aggregates
    qs = [Chain(WindowScan(WindowSpec.range(2.0)), both)]
    qs += [Chain(WindowScan(WindowSpec.range(2.0)), Aggregate(["g"], [a])) for a in specs]
    outs = [[] for _ in qs]
    for i in range(0, n, 60):
        b = Batch({"g": g[i:i + 60], "v": v[i:i + 60]}, ts=ts[i:i + 60])
        for q, o in zip(qs, outs):
            o.append(q.step(float(ts[i:i + 60][-1]), b))
        from sketchql.operators.changes import Changes
        t = float(ts[i:i + 60][-1])
        snap = snapshot(Changes.concat(outs[0]), t).sort_values("g").reset_index(drop=True)
        for a, o in zip(specs, outs[1:]):
            one = snapshot(Changes.concat(o), t).sort_values("g").reset_index(drop=True)
            assert np.allclose(snap[a.out_name].to_numpy(float), one[a.out_name].to_numpy(float), equal_nan=True)
    assert both.stats()["rescans"] == sum(q.ops[-1].stats()["rescans"] for q in qs[1:])
    assert both.stats()["rescans"] > 0
