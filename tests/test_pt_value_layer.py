"""The value layer of a stream attribute's index (sketchql.index.value_layer) and the
PT-Selection / PT-Aggregates that share it: brute-force oracles for the layer, shared
= private answers with the same seeds and budgets, one layer per attribute in the
engine (declared once as _auto_<stream>_<col> when needed), its memory in the
summaries' control tables, and the estimate endpoint unchanged."""
import copy
import math

import numpy as np
import pytest

from sketchql.approx import WorkBudget, replay
from sketchql.data import generate_stores, interleave
from sketchql.engine import Engine
from sketchql.errors import SummaryError
from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
from sketchql.index.value_layer import RowMap, ValueLayer, layer_of, layers_nbytes
from sketchql.operators.promising import PTAggregate, PTSelection, make_batch


# ----------------------------------------------------------------------------- the layer
def _stream(seed=1, n=3000, dur=30.0, shuffle_within=0.0):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.uniform(0, dur, n))
    if shuffle_within:
        ts = ts + rng.uniform(-shuffle_within, 0, n)     # out of order within a bound
    k = rng.integers(-50, 400, n)
    p = rng.gamma(2.0, 3.0, n)
    return ts, k, p, np.arange(n, dtype=np.int64)


@pytest.mark.parametrize("shuffle", [0.0, 3.0])
def test_layer_counts_and_gather_equal_brute_force(shuffle):
    ts, k, p, rid = _stream(shuffle_within=shuffle)
    L = ValueLayer(2.0, columns=("p",))
    for part in np.array_split(np.arange(len(ts)), 37):        # batches (late ones go to older zones)
        L.ingest(k[part], ts[part], rid[part], {"p": p[part]})
    zone = np.floor(ts / 2.0).astype(np.int64)
    rng = np.random.default_rng(3)
    edges = np.r_[-np.inf, np.sort(rng.uniform(-60, 420, 9)), np.inf]
    for z in np.unique(zone).tolist():
        want = np.histogram(k[zone == z], bins=np.r_[-1e9, np.ceil(edges[1:-1]), 1e9])[0]
        assert L.cell_counts(z, edges).tolist() == want.tolist()
    # gather: random cells and row windows, each cell in arrival order
    K = 40
    zs = rng.choice(np.unique(zone), K)
    a = rng.uniform(-60, 400, K)
    b = a + rng.uniform(0, 200, K)
    ra = rng.integers(-1, len(ts), K)
    ru = ra + rng.integers(0, len(ts), K)
    reg, got_rid, got_ts, got_v, cols = L.gather(zs, a, b, ra, ru, columns=("p",))
    for j in range(K):
        m = (zone == zs[j]) & (k >= a[j]) & (k < b[j]) & (rid > ra[j]) & (rid <= ru[j])
        assert got_rid[reg == j].tolist() == rid[m].tolist()
        assert np.array_equal(got_v[reg == j], k[m]) and np.array_equal(cols["p"][reg == j], p[m])
        assert np.array_equal(got_ts[reg == j], ts[m])
    assert L.range_counts(zs, a, b).tolist() == [int(((zone == zs[j]) & (k >= a[j]) & (k < b[j])).sum())
                                                 for j in range(K)]


def test_layer_keeps_its_history_and_rejects_bad_input():
    L = ValueLayer(1.0, keep=5.0)
    L.ingest(np.arange(20), np.arange(20, dtype=float), np.arange(20))
    assert min(L.zones) == 14 and L.n == 6            # zones ending <= 19 - 5 are gone
    with pytest.raises(SummaryError, match="ts"):
        L.ingest(np.arange(3), np.arange(2, dtype=float), np.arange(3))
    with pytest.raises(SummaryError, match="zone_seconds"):
        ValueLayer(0.0)


def test_rowmap_translates_like_a_dictionary():
    rng = np.random.default_rng(4)
    rows = np.sort(rng.choice(10_000, 3000, replace=False))
    seqs = np.arange(3000)
    m = RowMap()
    for part in np.array_split(np.arange(3000), 7):
        m.bind(seqs[part], rows[part], rows[part] / 10.0)
    probe = rng.integers(0, 10_000, 5000)
    d = dict(zip(rows.tolist(), seqs.tolist()))
    s, ok = m.translate(probe)
    assert ok.tolist() == [x in d for x in probe.tolist()]
    assert s[ok].tolist() == [d[x] for x in probe[ok].tolist()]
    one = RowMap()                                    # consecutive rows: one run whatever the length
    for a in range(0, 1000, 100):
        one.bind(np.arange(a, a + 100), np.arange(a, a + 100) + 50, np.arange(a, a + 100, dtype=float))
    assert one.runs == 1
    with pytest.raises(SummaryError, match="increase"):
        one.bind(np.array([1000]), np.array([3]), np.array([0.0]))


# ----------------------------------------------------------------------------- operators
@pytest.fixture(scope="module")
def arr():
    return interleave(generate_stores(1, duration=20.0, mean_interarrival=0.01, seed=11))


def _budget(ups):
    return WorkBudget.unlimited() if math.isinf(ups) else WorkBudget(units_per_second=ups)


def _shared_replay(arr, make, ups, tick=0.25):
    """:func:`replay` (same batches, same allowances) with the operator on a StreamIndex's
    shared layer: the index is fed first (stream rows = arr.seq + 1000), then the operator
    is ticked with the same arrivals bound to those rows -- the engine's arrangement."""
    from sketchql.approx.replay import arrival_gaps, batch_bounds
    ix = StreamIndex(SummaryDeclaration("s", "S", "item", granularity=10.0, rate=2, depth=4),
                     IndexConfig(structure="T4", n_buckets=64, w=256, seed=0))
    op = make(ix)
    allowance = _budget(ups).allowance(arrival_gaps(arr.ts))
    bounds = batch_bounds(arr.ts, 16, tick)
    for a, e in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        s = slice(a, e)
        rows = arr.seq[s] + 1000
        ix.ingest(arr.item[s], arr.ts[s], rows, columns={"price": arr.price[s]})
        op.bind(arr.seq[s], rows, arr.ts[s])
        op.tick(arr.take(np.arange(a, e)), allowance[s])
    return op, ix


@pytest.mark.parametrize("ups", [400.0, 3000.0, math.inf])
def test_selection_on_the_shared_layer_equals_private(arr, ups):
    qs = [(1, 200), (150, 900), (700, 2000)]
    priv = PTSelection(qs, window=8.0, domain=(1, 2000), bank=50.0)
    replay(arr, {"p": priv}, _budget(ups), tick_seconds=0.25)
    shared, ix = _shared_replay(arr, lambda ix: PTSelection(qs, window=8.0, domain=(1, 2000), bank=50.0,
                                                             source=ix), ups)
    assert shared.shared and not priv.shared
    for r1, r2 in zip(priv.results(), shared.results()):
        assert np.array_equal(r1, r2)                     # same tuples, same order
    s1, s2 = priv.stats(), shared.stats()
    for key in ("work", "probes", "compares", "outputs"):
        assert s1[key] == s2[key]
    if math.isinf(ups):                                 # full budget: the brute-force window
        shared.drain()
        now = float(arr.ts[-1])
        for qi, (lo, hi) in enumerate(qs):
            m = (arr.item >= lo) & (arr.item <= hi) & (arr.ts > now - 8.0)
            assert np.array_equal(np.sort(shared.current(qi, now)), arr.seq[m])
    # the shared operator holds no tuples: one row-map run, the layer is the index's
    assert shared.view.runs == 1 and shared.index_nbytes() < 100
    assert layers_nbytes(ix) == shared.layer.nbytes > 0 and ix.stats()["value_layer_bytes"] == shared.layer.nbytes


@pytest.mark.parametrize("func", ["sum", "avg", "count", "median"])
def test_aggregate_on_the_shared_layer_equals_private(arr, func):
    qs = [(1, 300), (100, 1500)]
    priv = PTAggregate(qs, func=func, window=10.0, domain=(1, 2000))
    replay(arr, {"p": priv}, WorkBudget(units_per_second=1500.0), tick_seconds=0.25)
    shared, _ = _shared_replay(arr, lambda ix: PTAggregate(qs, func=func, window=10.0, domain=(1, 2000),
                                                            source=ix), 1500.0)
    e1, u1 = priv.answers()
    e2, u2 = shared.answers()
    assert np.array_equal(e1, e2, equal_nan=True) and np.array_equal(u1, u2, equal_nan=True)
    # full budget: SUM / AVG equal the brute force (COUNT: its window-start zone is pro-rated)
    full, _ = _shared_replay(arr, lambda ix: PTAggregate(qs, func=func, window=10.0, domain=(1, 2000),
                                                          source=ix), math.inf)
    now = float(arr.ts[-1])
    for qi, (lo, hi) in enumerate(qs):
        m = (arr.item >= lo) & (arr.item <= hi) & (arr.ts > now - 10.0)
        est, err = full.answer(qi, now)
        want = {"sum": arr.price[m].sum(), "avg": arr.price[m].mean(), "count": m.sum(),
                "median": np.median(arr.price[m])}[func]
        if func in ("sum", "avg"):
            assert est == pytest.approx(want, rel=1e-9) and err == 0.0
        else:
            assert abs(est - want) <= 3 * err + 1e-9 + (0.02 * want if func == "median" else 0.0)


def test_count_is_exact_on_whole_zone_windows(arr):
    """Exact in-range counts from the layer: COUNT with a window made of whole zones is exact
    without a single scan (the sketches of the old private index only estimated partial buckets)."""
    keep = arr.take(np.flatnonzero(arr.ts < 19.999))
    op = PTAggregate([(37, 611)], func="count", window=10.0, domain=(1, 2000), zone_seconds=2.0)
    # 4 units per arrival (100 per second): every arrival is admitted (issue 16: at 1 unit per
    # second the inserts cannot be paid; a private layer then sheds and COUNT is an estimate)
    replay(keep, {"a": op}, WorkBudget(units_per_second=400.0), tick_seconds=0.5)
    assert op.stats()["shed"] == 0
    est, err = op.answer(0, 20.0)
    m = (keep.item >= 37) & (keep.item <= 611) & (keep.ts > 10.0)
    assert est == m.sum() and err == 0.0


# ----------------------------------------------------------------------------- the engine
W = 10.0


def _data(seed=3, n=1500, dur=30.0):
    rng = np.random.default_rng(seed)
    ts = np.sort(rng.uniform(0, dur, n))
    k = rng.integers(0, 200, n)
    v = rng.gamma(2.0, 5.0, n) + k * 0.1
    return ts, k, v


def _engine(sqls, share=True, declare=False, share_plans=False, data=None, chunks=12):
    ts, k, v = data or _data()
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
    if declare:
        eng.execute("CREATE SUMMARY sk ON S (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)")
    eng.set_control("share_plans", share_plans)
    eng.set_control("share_indexes", share)
    qs = [eng.register(s) for s in sqls]
    snaps = []
    for part in np.array_split(np.arange(len(ts)), chunks):
        eng.push("S", {"ts": ts[part], "k": k[part], "v": v[part]})
        snaps.append([q.snapshot() for q in qs])
    return eng, qs, snaps


def _sel(lo, hi, units):
    return (f"SELECT S.k, S.v FROM S [RANGE {W:g}] WHERE S.k BETWEEN {lo} AND {hi} "
            f"WITH PREFERENCE desc S.k WITHIN {units} PROBES PER TUPLE")


def _agg(f, lo, hi, units):
    arg = "*" if f == "COUNT" else "S.v"
    return (f"SELECT {f}({arg}) AS a FROM S [RANGE {W:g}] WHERE S.k BETWEEN {lo} AND {hi} "
            f"WITH PREFERENCE weighted S.k WITHIN {units} PROBES PER TUPLE")


SQLS = [_sel(10, 60, 2), _sel(40, 150, 2), _agg("SUM", 20, 90, 2), _agg("AVG", 5, 120, 2),
        _agg("COUNT", 30, 70, 2), _agg("MEDIAN", 0, 199, 2)]


def _same(a, b):
    x = a.sort_values(list(a.columns)).reset_index(drop=True)
    y = b.sort_values(list(b.columns)).reset_index(drop=True)
    return list(x.columns) == list(y.columns) and len(x) == len(y) and bool(((x == y) | (x.isna() & y.isna())).all().all())


def test_engine_declares_one_index_and_one_layer_for_every_query():
    eng, qs, snaps = _engine(SQLS)
    autos = [d for d in eng.catalog.summaries if d.name.startswith("_auto_S_k")]
    assert len(autos) == 1                                       # declared once, reused
    ix = autos[0].index["k"]
    assert len(ix._value_layers) == 1
    layer = next(iter(ix._value_layers.values()))
    assert layer.consumers == len(SQLS)
    for q in qs:
        assert "shared value layer of _auto_S_k.k" in q.explain()
        node = [n for n in q.plan.nodes if n.kind in ("pt_select", "pt_aggregate")][0]
        assert node.op.op.layer is layer and node.op.index_nbytes() < 100     # one row-map run
        if node.kind == "pt_aggregate":
            assert node.op.state_size() == 0        # no tuples of its own (a selection keeps its results' rows)
    # the plan view shows the shared layer and who shares it
    view = qs[0].plan_view()
    syn = [x for n in view["nodes"] for x in n["synopses"] if x["kind"] == "value layer"][0]
    assert syn["shared"] and syn["bytes"] == layer.nbytes and syn["shared_with"] == sorted(q.id for q in qs[1:])
    # the summaries' control table reports the layer's memory
    t = [t for t in eng.controls.tables("summary") if t.name.startswith("_auto_S_k")][0]
    assert t.stats["value_layer_bytes"] == layer.nbytes > 0
    assert t.stats["value_layers"][0]["consumers"] == len(SQLS)


def test_engine_shared_equals_private_and_declared_index_is_used():
    _, _, s_shared = _engine(SQLS, share=True, declare=True)
    eng_p, _, s_priv = _engine(SQLS, share=False, declare=True)
    for a, b in zip(s_shared, s_priv):
        for x, y in zip(a, b):
            assert _same(x, y)
    eng, qs, _ = _engine(SQLS[:1], share=True, declare=True)
    assert "shared value layer of sk.k" in qs[0].explain()
    assert not [d for d in eng.catalog.summaries if d.name.startswith("_auto_")]
    assert not getattr(eng_p.catalog.summary("sk").index["k"], "_value_layers", None)


def test_engine_full_budget_equals_brute_force():
    ts, k, v = _data()
    sqls = [_sel(10, 60, 100000), _agg("SUM", 20, 90, 100000), _agg("AVG", 5, 120, 100000)]
    _, _, snaps = _engine(sqls, data=(ts, k, v))
    for part, snap in zip(np.array_split(np.arange(len(ts)), 12), snaps):
        now = ts[part[-1]]
        w = (ts > now - W) & (ts <= now)
        assert sorted(snap[0]["v"].tolist()) == sorted(v[w & (k >= 10) & (k <= 60)].tolist())
        assert snap[1]["a"].iloc[0] == pytest.approx(v[w & (k >= 20) & (k <= 90)].sum(), rel=1e-9)
        assert snap[2]["a"].iloc[0] == pytest.approx(v[w & (k >= 5) & (k <= 120)].mean(), rel=1e-9)


def test_ten_queries_cost_about_one_query_of_index_memory():
    def value_side(eng):
        tot = sum(layers_nbytes(ix) for d in eng.catalog.summaries for ix in d.index.values())
        return tot + sum(n.op.index_nbytes() for q in eng.queries for n in q.plan.nodes
                         if n.kind in ("pt_select", "pt_aggregate"))
    ten = [_sel(10 * i, 10 * i + 60, 2) for i in range(5)] + [_agg("SUM", 10 * i, 10 * i + 60, 2) for i in range(5)]
    one = [_agg("SUM", 0, 60, 2)]
    small = _data(n=600, dur=20.0)
    e10, _, _ = _engine(ten, data=small, chunks=6)
    e1, _, _ = _engine(one, data=small, chunks=6)
    ep, _, _ = _engine(ten, share=False, data=small, chunks=6)
    assert value_side(e10) <= 1.2 * value_side(e1)
    assert value_side(ep) >= 8 * value_side(e1)                 # private layers: one per query


def test_queries_with_other_filters_and_late_registration():
    """A selection with another filter reads the shared layer (its own rows only); an aggregate
    with another filter keeps a private layer (its counts are those of its input); a query
    registered after data finds no row from before it."""
    ts, k, v = _data()
    sel = ("SELECT S.k, S.v FROM S [RANGE 10] WHERE S.k BETWEEN 10 AND 120 AND S.v > 12.0 "
           "WITH PREFERENCE desc S.k WITHIN 100000 PROBES PER TUPLE")
    agg = ("SELECT SUM(S.v) AS a FROM S [RANGE 10] WHERE S.k BETWEEN 10 AND 120 AND S.v > 12.0 "
           "WITH PREFERENCE weighted S.k WITHIN 100000 PROBES PER TUPLE")
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
    parts = np.array_split(np.arange(len(ts)), 20)
    for part in parts[:5]:
        eng.push("S", {"ts": ts[part], "k": k[part], "v": v[part]})
    qs, qa = eng.register(sel), eng.register(agg)
    assert "shared value layer" in qs.explain() and "private value layer" in qa.explain()
    reg = ts[parts[4][-1]]
    for part in parts[5:]:
        eng.push("S", {"ts": ts[part], "k": k[part], "v": v[part]})
        now = ts[part[-1]]
        m = (ts > max(now - 10.0, reg)) & (ts <= now) & (k >= 10) & (k <= 120) & (v > 12.0)
        assert sorted(qs.snapshot()["v"].tolist()) == sorted(v[m].tolist())
        assert qa.snapshot()["a"].iloc[0] == pytest.approx(v[m].sum(), rel=1e-9)


def test_estimate_endpoint_unchanged_by_the_layer():
    from sketchql.service.summaries import estimate
    ts, k, v = _data()
    eng, _, _ = _engine(SQLS, declare=True, data=(ts, k, v))
    ix = eng.catalog.summary("sk").index["k"]
    assert layers_nbytes(ix) > 0
    plain = StreamIndex(ix.decl, copy.deepcopy(ix.config))       # the same index without a layer
    for part in np.array_split(np.arange(len(ts)), 12):
        plain.ingest(k[part], ts[part], np.asarray(part, np.int64))
    vals = [3, 50, 77, 150]
    got = estimate(ix, "sk", vals, 20.0, 40.0)
    want = estimate(plain, "sk", vals, 20.0, 40.0)
    assert got["estimates"] == want["estimates"]
    assert ix.to_bytes() == plain.to_bytes()


def test_checkpoint_keeps_the_layer_shared_with_its_operators():
    from sketchql.engine.checkpoint import dumps, loads
    ts, k, v = _data()
    sqls = [_sel(10, 60, 100000), _agg("SUM", 20, 90, 100000)]
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
    qs = [eng.register(s) for s in sqls]
    parts = np.array_split(np.arange(len(ts)), 12)
    for part in parts[:6]:
        eng.push("S", {"ts": ts[part], "k": k[part], "v": v[part]})
    eng2 = loads(dumps(eng))
    ix = [d for d in eng2.catalog.summaries if d.name.startswith("_auto_")][0].index["k"]
    layer = next(iter(ix._value_layers.values()))
    q2 = eng2.queries
    assert all(n.op.op.layer is layer for q in q2 for n in q.plan.nodes if n.kind in ("pt_select", "pt_aggregate"))
    for part in parts[6:]:
        eng2.push("S", {"ts": ts[part], "k": k[part], "v": v[part]})
        now = ts[part[-1]]
        w = (ts > now - W) & (ts <= now)
        assert sorted(q2[0].snapshot()["v"].tolist()) == sorted(v[w & (k >= 10) & (k <= 60)].tolist())
        assert q2[1].snapshot()["a"].iloc[0] == pytest.approx(v[w & (k >= 20) & (k <= 90)].sum(), rel=1e-9)


@pytest.mark.parametrize("strategy", ["round_robin", "chain"])
def test_shared_layer_under_the_scheduler(strategy):
    """Under the global scheduler several steps' arrivals may be queued before the PT operator
    runs: each step binds exactly its own stream rows."""
    ts, k, v = _data()
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
    eng.set_control("scheduler", strategy)
    eng.set_control("work_per_push", 5)            # bounded work: steps queue up between pushes
    q = eng.register(_sel(10, 60, 100000))
    qa = eng.register(_agg("SUM", 20, 90, 100000))
    for part in np.array_split(np.arange(len(ts)), 12):
        eng.push("S", {"ts": ts[part], "k": k[part], "v": v[part]})
    eng.run()
    now = ts[-1]
    w = (ts > now - W) & (ts <= now)
    assert "shared value layer" in q.explain()
    assert sorted(q.snapshot()["v"].tolist()) == sorted(v[w & (k >= 10) & (k <= 60)].tolist())
    assert qa.snapshot()["a"].iloc[0] == pytest.approx(v[w & (k >= 20) & (k <= 90)].sum(), rel=1e-9)
