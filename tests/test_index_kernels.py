"""The compiled (numba) probe path of the index against the numpy reference and brute force.

``StreamIndex.probe_many`` runs compiled by default (``sketchql.index.kernels``
over the incrementally maintained ``sketchql.index.kview.KernelView``); the
reference is the same index with ``use_kernels = False`` (numpy query view),
and, for the maintenance helpers, ``kernels.ENABLED = False`` (numpy
everywhere).  Results must be identical: same matches in the same order
(T1: the reference groups matches by zone, compared per region), same
``work`` / ``visited`` counters, same regions.
"""
import numpy as np
import pytest

from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration, kernels
from sketchql.index.hasher import CellHasher
from sketchql.index.stream_index import _BUCKET_SALT
from sketchql.summaries import CountSketch

from test_index import zipf_drift
from test_index_fast import brute_matches

REGION_FIELDS = ("probe", "cell", "zone", "bucket", "granularity", "estimate", "priority", "partial", "n_tuples")


def reference(ix, keys, lo, hi, fade=0.8, with_regions=True):
    ix.use_kernels = False
    try:
        return ix.probe_many(keys, lo, hi, fade=fade, with_regions=with_regions)
    finally:
        ix.use_kernels = True


def assert_same(m, ref, structure):
    """Compiled result ``m`` == numpy reference ``ref`` (order included)."""
    if structure == "T1":               # reference: grouped by zone id; compiled: region by region
        o = np.argsort(ref.region, kind="stable")
    else:
        o = np.arange(len(ref))
    assert len(m) == len(ref)
    for f in ("probe", "region", "values", "timestamps", "row_ids"):
        a, b = getattr(m, f), getattr(ref, f)[o]
        assert np.array_equal(a, b), f
        assert a.dtype == b.dtype, f
    assert (m.work, m.visited) == (ref.work, ref.visited)
    if ref.regions is not None:
        for f in REGION_FIELDS:
            assert np.array_equal(getattr(m.regions, f), getattr(ref.regions, f)), f
        assert (m.regions.visited, m.regions.flat) == (ref.regions.visited, ref.regions.flat)


def probe_batch(rng, v, t, clock, n):
    keys = np.concatenate([rng.choice(v, n - n // 4), rng.integers(10_000, 10_100, n // 4)])   # some absent
    hi = rng.uniform(clock - 60, clock + 1, n)
    lo = hi - rng.uniform(0, 90, n)
    if n > 4:                           # window edges exactly on stored timestamps: (ts, ...] excludes ts
        j = rng.integers(0, len(t), 2)
        lo[:2], hi[2:4] = t[j], t[rng.integers(0, len(t), 2)]
    return keys, lo, hi


# ---------------------------------------------------------------- probe_many: compiled == numpy
@pytest.mark.parametrize("structure,batch,lateness", [("T1", 50, 0.0), ("T2", 97, 0.0), ("T3", 40, 2.0),
                                                      ("T4", 23, 0.0), ("T4", 64, 3.0), ("T4", 900, 0.0)])
def test_probe_many_compiled_equals_numpy_after_every_ingest(structure, batch, lateness):
    """Probing after every ingest exercises every maintenance path of the kernel view: the hot
    zone's arena (incremental appends, re-sync on a new zone / late tuples), cold zones entering
    the CSR, COLLAPSE, dropped zones and the CSR's garbage compaction."""
    v, t = zipf_drift(6000, rate=20.0, n_items=150, s=1.2, drift_every=25, seed=batch)
    rng = np.random.default_rng(batch)
    if lateness:                        # jitter within the allowed lateness: accepted out-of-order tuples
        t = t + rng.uniform(-lateness * 0.9, 0, len(t)) * (rng.random(len(t)) < 0.1)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=8, w=16, check_every=32,
                                       allowed_lateness=lateness))
    checks = 0
    for i in range(0, len(v), batch):
        ix.ingest(v[i:i + batch], t[i:i + batch])
        keys, lo, hi = probe_batch(rng, v[:i + batch], t[:i + batch], ix.clock, int(rng.integers(1, 40)))
        with_regions = bool(rng.random() < 0.5)
        m = ix.probe_many(keys, lo, hi, fade=0.8, with_regions=with_regions)
        assert_same(m, reference(ix, keys, lo, hi, with_regions=with_regions), structure)
        checks += 1
    assert checks >= 6
    assert ix._kview is not None                          # the compiled path was used
    kv = ix._kview
    # garbage of dropped zones is compacted away
    assert kv.nc <= 2 * kv.live_cold + 4096 and kv.live_cold <= kv.nc <= len(kv.Rc)
    # every match of the last batch is a true match (brute force over what the index still holds)
    stored = set(ix.window_tuples(-np.inf, np.inf).row_ids.tolist())
    want = {(p, r) for p, r in brute_matches(v, t, keys, lo, hi) if r in stored}
    assert set(zip(m.probe.tolist(), m.row_ids.tolist())) <= want


@pytest.mark.parametrize("structure", ["T1", "T2", "T3", "T4"])
def test_compiled_maintenance_helpers_equal_numpy(structure, monkeypatch):
    """kernels.ENABLED=False (numpy chunk merging, row norms, F2 medians, thresholds) builds the
    same index and answers the same probes."""
    v, t = zipf_drift(3000, rate=10.0, n_items=200, drift_every=60, seed=6)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    built = []
    for enabled in (True, False):
        monkeypatch.setattr(kernels, "ENABLED", enabled)
        ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=16, w=32))
        for i in range(0, len(v), 111):
            ix.ingest(v[i:i + 111], t[i:i + 111])
            ix.probe_many(v[i:i + 5], t[i] - 30.0, t[i] + 1.0)
        keys, lo, hi = probe_batch(np.random.default_rng(1), v, t, ix.clock, 50)
        built.append((ix, ix.probe_many(keys, lo, hi, with_regions=True)))
        for g in ix.grans:
            if g.shape is not None:
                g.f2_nodes()
    (a, ma), (b, mb) = built
    assert a.to_bytes() == b.to_bytes()
    for g, h in zip(a.grans, b.grans):
        if g.shape is not None:
            assert np.array_equal(g.rownorm, h.rownorm) and np.array_equal(g._f2, h._f2)
    assert_same(ma, mb, structure)


def test_compiled_path_follows_mutations_and_knobs():
    """advance / compress / merge / late data / knob changes: compiled == numpy each time."""
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    cfg = dict(structure="T4", n_buckets=8, w=32, allowed_lateness=5.0)
    v, t = zipf_drift(4000, rate=20.0, n_items=200, drift_every=30, seed=11)
    ix = StreamIndex(decl, IndexConfig(**cfg))
    rng = np.random.default_rng(0)

    def check():
        keys, lo, hi = probe_batch(rng, v, t, ix.clock, 30)
        assert_same(ix.probe_many(keys, lo, hi, fade=0.8, with_regions=True), reference(ix, keys, lo, hi), "T4")

    for i in range(0, 2000, 250):
        ix.ingest(v[i:i + 250], t[i:i + 250])
        check()
    ix.ingest(v[1990:2000], np.maximum(np.sort(t[1990:2000] - 3.0), ix.clock - 4.0))    # late, accepted
    check()
    ix.config.min_estimate, ix.config.prune_sigma = 2.0, 0.5          # knobs apply immediately
    check()
    ix.config.min_estimate, ix.config.prune_sigma = 0.5, 1.0
    ix.advance(ix.clock + 25.0)
    check()
    ix.compress(2)
    check()
    keep = np.arange(2000, 4000)
    other = StreamIndex(decl, IndexConfig(**{**cfg, "w": ix.config.w}))
    other.ingest(v[keep], t[keep] + 0.0, row_ids=keep)
    ix.merge(other)
    check()
    ix.ingest(v[4000 - 1:], t[4000 - 1:] + 1.0)
    check()


def test_compiled_edge_cases():
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2)
    for structure in ("T1", "T4"):
        ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=4, w=32))
        m = ix.probe_many(np.array([1, 2]), 0.0, 5.0, with_regions=True)          # empty index
        assert len(m) == 0 and m.work == 0 and len(m.regions) == 0
        ix.ingest(np.array([1, 1, 2, 3]), np.array([1.0, 2.0, 2.0, 3.0]))
        m = ix.probe_many(np.zeros(0, dtype=np.int64), 0.0, 5.0)                  # no probes
        assert len(m) == 0 and m.work == 0
        # window (tau - w, tau]: ts = 1 is out of (1, 3], ts = 3 is in
        m = ix.probe_many(np.array([1, 3, 9]), 1.0, 3.0)
        assert sorted(zip(m.probe.tolist(), m.row_ids.tolist())) == [(0, 1), (1, 3)]
        assert m.values.dtype == np.int64 and m.timestamps.dtype == np.float64
        m = ix.probe_many(np.array([1, 2]), np.array([3.0, 2.0]), np.array([3.0, 1.0]))   # empty windows
        assert len(m) == 0
        m = ix.probe_many(np.array([1]), -np.inf, np.inf)
        assert m.row_ids.tolist() == [0, 1]
        m = ix.probe_many(np.array([1.0, 2.5]), 0.0, 5.0)                          # float keys: numpy path
        assert m.row_ids.tolist() == [0, 1]
        # float stored values are compiled too
        f = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=4, w=32))
        f.ingest(np.array([0.5, 1.5, 0.5]), np.array([1.0, 2.0, 3.0]))
        m = f.probe_many(np.array([0.5, 7.0]), 0.0, 3.0)
        assert m.row_ids.tolist() == [0, 2] and f._kview is not None and m.values.dtype == np.float64
        s = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=4, w=32))   # strings: numpy path
        s.ingest(np.array(["a", "b", "a"]), np.array([1.0, 2.0, 3.0]))
        m = s.probe_many(["a", "zz"], 0.0, 3.0)
        assert m.row_ids.tolist() == [0, 2] and m.values.tolist() == ["a", "a"] and s._kview is None


def test_mixed_value_dtypes_fall_back_to_numpy():
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2)
    for structure in ("T1", "T4"):
        ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=4, w=32))
        ix.ingest(np.array([1, 2, 1]), np.array([1.0, 2.0, 3.0]))
        assert ix.probe_many(np.array([1]), 0.0, 3.0).row_ids.tolist() == [0, 2] and ix._kview is not None
        ix.ingest(np.array([1.5, 1.0]), np.array([4.0, 5.0]))                    # float values now
        m = ix.probe_many(np.array([1]), 0.0, 5.0)
        assert sorted(m.row_ids.tolist()) == [0, 2, 4] and ix._kview is None
        assert_same(ix.probe_many(np.array([1, 2]), 0.0, 5.0, fade=0.8, with_regions=True),
                    reference(ix, np.array([1, 2]), 0.0, 5.0), "same order")      # both numpy now


def test_output_buffers_grow():
    """More matches / regions than the reusable buffers hold: the kernel is re-run with larger ones."""
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2)
    ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=4, w=32))
    v = np.arange(5000) % 3
    t = np.linspace(0.0, 9.0, 5000)
    ix.ingest(v, t)
    keys = np.repeat([0, 1, 2], 100)
    m = ix.probe_many(keys, -1.0, 10.0, with_regions=True)
    assert len(m) == 100 * 5000 and all(len(b.mp) >= len(m) for b in ix._kbuf.sets)
    assert_same(m, reference(ix, keys, -1.0, 10.0), "T4")


@pytest.mark.parametrize("call", ["probe_many", "scan_window_many"])
def test_recycled_output_buffers(call):
    """Large results borrow the pool's arrays: a result that is still held is never overwritten by
    later calls, a dropped one's arrays are reused (no allocation), small results are copies."""
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2)
    ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=4, w=32))
    v = np.arange(6000) % 3
    t = np.linspace(0.0, 9.0, 6000)
    ix.ingest(v, t)
    f = getattr(ix, call)
    brute = lambda keys, lo, hi: sorted(brute_matches(v, t, keys, np.full(len(keys), lo), np.full(len(keys), hi)))
    want = {k: brute(np.repeat([k], 20), -1.0, 10.0) for k in range(3)}
    pairs = lambda m: sorted(zip(m.probe.tolist(), m.row_ids.tolist()))
    held = [f(np.repeat([k], 20), -1.0, 10.0) for k in range(3)]        # 40,000 matches each, all kept
    assert all(m.probe.base is not None for m in held)                 # borrowed, not copied
    for k in range(3):
        m = f(np.repeat([(k + 1) % 3], 20), -1.0, 10.0)                # more calls while results are held
        del m
    for k, m in enumerate(held):
        assert pairs(m) == want[k] and (m.values == k).all()           # untouched by the later calls
    pool = ix._kbuf
    del held, m
    sets = list(pool.sets)
    for k in (0, 1, 2, 0):
        m = f(np.repeat([k], 20), -1.0, 10.0)                          # the ``m = f(..)`` loop: ping-pong
        assert pairs(m) == want[k] and any(s.holds(m.probe) for s in sets)
    assert pool.sets == sets
    small = f(np.array([1]), 8.0, 9.0)
    assert small.probe.base is None and pairs(small) == brute(np.array([1]), 8.0, 9.0)


# ---------------------------------------------------------------- scan_window_many (raw-window join)
@pytest.mark.parametrize("structure", ["T1", "T2", "T3", "T4"])
def test_scan_window_many_equals_brute_force(structure, monkeypatch):
    v, t = zipf_drift(3000, rate=10.0, n_items=100, drift_every=60, seed=9)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=4)
    ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=8, w=16))
    rng = np.random.default_rng(2)
    for i in range(0, len(v), 400):
        ix.ingest(v[i:i + 400], t[i:i + 400])
        keys, lo, hi = probe_batch(rng, v[:i + 400], t[:i + 400], ix.clock, 25)
        m = ix.scan_window_many(keys, lo, hi)
        stored = ix.window_tuples(-np.inf, np.inf)
        sv, st_, sr = stored.values, stored.timestamps, stored.row_ids
        want = [(p, int(r)) for p in range(len(keys))
                for r in sr[(sv == keys[p]) & (st_ > lo[p]) & (st_ <= hi[p])]]
        assert list(zip(m.probe.tolist(), m.row_ids.tolist())) == want      # (probe, ts, row id) order
        assert m.work == sum(int(((st_ > lo[p]) & (st_ <= hi[p])).sum()) for p in range(len(keys)))
        monkeypatch.setattr(kernels, "ENABLED", False)
        ref = ix.scan_window_many(keys, lo, hi)
        monkeypatch.setattr(kernels, "ENABLED", True)
        for f in ("probe", "values", "timestamps", "row_ids"):
            assert np.array_equal(getattr(m, f), getattr(ref, f)), f
        assert m.work == ref.work
    empty = StreamIndex(decl, IndexConfig(structure=structure))
    assert len(empty.scan_window_many(np.array([1]), 0.0, 1.0)) == 0


# ---------------------------------------------------------------- kernels
@pytest.mark.parametrize("B,w", [(64, 64), (16, 4096), (1, 64), (10, 128), (7, 1)])
def test_hash_kernel_equals_cell_hasher(B, w):
    cs = CountSketch(5, w, 3)
    h = CellHasher(cs, B, 3 ^ _BUCKET_SALT)
    assert h.fused
    rng = np.random.default_rng(0)
    keys = np.concatenate([rng.integers(-2**63, 2**63 - 1, 500), np.arange(-5, 5), [0]])
    got = kernels.hash_cells(keys.view(np.uint64), h._offs[0], h._offs[1], np.ascontiguousarray(h._mult[:, 0]),
                             h._shift, h._logw, B)
    for a, b in zip(got, h(keys)):
        assert np.array_equal(a, b)


def test_window_and_ranges_kernels():
    rng = np.random.default_rng(5)
    T = np.sort(rng.integers(0, 50, 300).astype(float))           # many ties
    V = rng.integers(0, 10, 300)
    keys = rng.integers(0, 12, 40)
    lo = rng.integers(-5, 55, 40).astype(float)
    hi = lo + rng.integers(-3, 30, 40)
    n, mp, mj, work = kernels.scan_window(V, T, keys, lo, hi, cap=1)          # also exercises the regrowth
    want = [(p, j) for p in range(40) for j in range(300) if V[j] == keys[p] and lo[p] < T[j] <= hi[p]]
    assert list(zip(mp[:n].tolist(), mj[:n].tolist())) == want
    assert work == sum(max(0, int(np.searchsorted(T, hi[p], "right") - np.searchsorted(T, lo[p], "right")))
                       for p in range(40))
    leaf_lo = np.array([3.0, np.inf, 1.0, 7.0])
    leaf_hi = np.array([4.0, -np.inf, 2.0, 9.0])
    lo_, hi_ = np.empty(7), np.empty(7)
    kernels.pyramid_ranges(leaf_lo, leaf_hi, lo_, hi_)
    assert lo_.tolist() == [3.0, np.inf, 1.0, 7.0, 3.0, 1.0, 1.0]
    assert hi_.tolist() == [4.0, -np.inf, 2.0, 9.0, 4.0, 9.0, 9.0]
    offs = np.array([[0, 2, 2, 5], [0, 0, 3, 3], [0, 1, 1, 1]])
    assert kernels.concat_perm(offs).tolist() == [0, 1, 8, 5, 6, 7, 2, 3, 4]


def test_warm_up_is_idempotent():
    kernels.warm_up()
    kernels.warm_up()
    assert kernels.comparable(np.int64, np.int32) == np.int64
    assert kernels.comparable(np.float64, np.int64) == np.float64
    assert kernels.comparable(np.dtype("U3"), np.int64) is None


def test_median5_is_the_median():
    import itertools

    import numba
    med = numba.njit(lambda a, b, c, d, e: kernels._median5(a, b, c, d, e))
    for x in itertools.product(range(3), repeat=5):                 # every order, with ties
        assert med(*x) == sorted(x)[2]
    rng = np.random.default_rng(3)
    for x in rng.integers(-1000, 1000, (500, 5)):
        assert med(*x) == int(np.median(x))


@pytest.mark.parametrize("d", [5, 4])
def test_refresh_gran_equals_f2_nodes_and_pyramid_ranges(d):
    """The fused view refresh = pyramid_ranges + Granularity.f2_nodes (numpy) + a copy."""
    from sketchql.index.pyramid import Granularity
    rng = np.random.default_rng(d)
    g = Granularity(index=1, cap=4, shape=(3, d, 8))
    for slot in range(3):
        g.add(slot, rng.integers(-4, 5, (3, d, 8)))
    g.add_sparse(1, np.array([0, 5, 17]), np.array([2, -1, 3]))
    h = Granularity(index=1, cap=4, shape=(3, d, 8))
    h.store[...] = g.store
    h.rownorm[...] = g.rownorm
    h._norm_dirty[...] = g._norm_dirty
    h._f2_stale[...] = g._f2_stale
    leaf_lo = np.array([3.0, 1.0, 5.0, np.inf])
    leaf_hi = np.array([4.0, 2.0, 9.0, -np.inf])
    lo, hi, F2 = np.empty(7), np.empty(7), np.full((7, 3), -1.0)
    kernels.refresh_gran(leaf_lo, leaf_hi, lo, hi, g.store, g.rownorm, g._norm_dirty, g._f2_stale, g._f2, F2)
    lo_, hi_ = np.empty(7), np.empty(7)
    kernels.pyramid_ranges(leaf_lo, leaf_hi, lo_, hi_)
    assert np.array_equal(lo, lo_) and np.array_equal(hi, hi_)
    enabled = kernels.ENABLED
    kernels.ENABLED = False
    try:
        want = h.f2_nodes().copy()
    finally:
        kernels.ENABLED = enabled
    assert np.array_equal(F2, want) and np.array_equal(g._f2, want)
    assert np.array_equal(g.rownorm, h.rownorm)
    assert not g._norm_dirty.any() and not g._f2_stale.any()


def test_hot_cells_segments_follow_appends_and_relayouts():
    """The hot zone's cells are per-bucket segments of the arena, extended at ingest and laid out again
    when a segment is full: same matches, same order as the reference after every ingest (small and
    large appends, relayouts included), and each segment holds its bucket's tuples in arrival order."""
    decl = SummaryDeclaration("s", "S", "a", granularity=1000.0, rate=2, depth=2)
    ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=4, w=32))
    rng = np.random.default_rng(4)
    relayouts, caps = 0, []
    for step, size in enumerate((300, 3, 1, 40, 700, 2, 300)):
        t0 = 10.0 * step
        ix.ingest(rng.integers(0, 6, size), np.sort(rng.uniform(t0, t0 + 10.0, size)))
        for keys in (np.array([2]), rng.integers(0, 7, 40)):
            lo, hi = np.full(len(keys), t0 - 15.0), np.full(len(keys), t0 + 10.0)
            assert_same(ix.probe_many(keys, lo, hi, with_regions=True), reference(ix, keys, lo, hi), "T4")
        h = ix._kview.hot
        relayouts += bool(caps) and len(h.R) != caps[-1]
        caps.append(len(h.R))
        z = ix._kview.hot_zone
        c = z.compact()
        for b in range(4):                                   # segment b = the zone's cell b, arrival order
            seg = h.R[h.start[b]:h.start[b] + h.count[b]]
            assert seg.tolist() == c.rids[c.offsets[b]:c.offsets[b + 1]].tolist()
        assert (h.count <= h.room).all() and (h.start[1:] >= h.start[:-1] + h.room[:-1]).all()
    assert relayouts >= 1                                    # the large appends outgrew the segments


@pytest.mark.parametrize("structure", ["T1", "T4"])
def test_float_values_many_per_cell_and_late_tuples_equal_numpy(structure):
    """Compiled == numpy (order included) and brute force: float values with 0.0 / -0.0 (equal keys),
    many values per cell, out-of-order arrivals, cold zones (CSR) and the hot zone's segments."""
    rng = np.random.default_rng(21)
    n = 3000
    v = rng.integers(-3, 9, n) * 0.5
    v[v == 0] = np.where(rng.random(int((v == 0).sum())) < 0.5, -0.0, 0.0)
    t = np.sort(rng.uniform(0, 120, n)) + rng.uniform(-1.5, 0, n) * (rng.random(n) < 0.2)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=2, w=16, allowed_lateness=2.0,
                                       min_estimate=0.0))
    for i in range(0, n, 150):
        ix.ingest(v[i:i + 150], t[i:i + 150])
        for P in (3, 60):                                  # few / many probes of the hot segments
            keys = rng.choice(np.array([0.0, -0.0, 0.5, 1.5, 4.0, 7.0]), P)
            hi = rng.uniform(ix.clock - 30, ix.clock + 1, P)
            lo = hi - rng.uniform(5, 60, P)
            m = ix.probe_many(keys, lo, hi, with_regions=True)
            assert_same(m, reference(ix, keys, lo, hi, fade=1.0), structure)
    assert ix._kview is not None
    stored = set(ix.window_tuples(-np.inf, np.inf).row_ids.tolist())
    want = {(p, r) for p, r in brute_matches(v, t, keys, lo, hi) if r in stored}
    got = set(zip(m.probe.tolist(), m.row_ids.tolist()))
    if structure == "T1":
        assert got == want
    assert got <= want and len(got) > 0


# ---------------------------------------------------------------- threads (nogil kernels)
def test_kernels_release_the_gil_and_threaded_indexes_equal_sequential():
    """Every kernel called from Python is compiled with ``nogil=True`` (a service's event loop runs
    beside its apply thread), and two indexes ingested and probed in two threads at once give exactly
    the results of the same work done one after the other (matches, order, counters, stats)."""
    import threading
    from sketchql.index import cellscan
    entry = ("_hash_into", "probe_kview", "_match_regions", "seg_append", "seg_relayout", "pyramid_ranges",
             "scan_window_emit", "row_norms_into", "row_median_into", "thresholds", "concat_perm", "refresh_f2",
             "refresh_gran", "adaptive_checks", "sketch_add", "probe_packed", "refresh_hot_packed", "pack_view",
             "pack_bufs", "pack_hot")
    for name in entry:
        assert getattr(kernels, name).targetoptions.get("nogil") is True, name
    compiled = [f for f in vars(cellscan).values() if hasattr(f, "targetoptions")]
    assert compiled and all(f.targetoptions.get("nogil") is True for f in compiled)

    def work(seed, out):
        v, t = zipf_drift(4000, seed=seed)
        decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
        ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=16, w=32, check_every=32))
        rng = np.random.default_rng(seed)
        res = []
        for i in range(0, len(v), 250):
            ix.ingest(v[i:i + 250], t[i:i + 250])
            keys, lo, hi = probe_batch(rng, v[:i + 250], t[:i + 250], float(t[min(i + 249, len(t) - 1)]), 40)
            m = ix.probe_many(keys, lo, hi, fade=0.8)
            s = ix.scan_window_many(keys, lo, hi)
            res.append((m.probe.tolist(), m.row_ids.tolist(), m.region.tolist(), m.work, m.visited,
                        s.probe.tolist(), s.row_ids.tolist(), s.work))
        out[seed] = (res, ix.to_bytes())

    seq, par = {}, {}
    for seed in (1, 2):
        work(seed, seq)
    th = [threading.Thread(target=work, args=(seed, par)) for seed in (1, 2)]
    for x in th:
        x.start()
    for x in th:
        x.join()
    assert par == seq


def test_output_block_huge_page_aligned_and_lending():
    """Large output sets are one block starting on a 2 MiB boundary (huge pages on first touch, where
    the platform has them); a view of any match array counts as lent until it is dropped."""
    b = kernels._block(5 << 20)
    assert b.dtype == np.uint8 and len(b) == 5 << 20 and b.flags.writeable
    if kernels._MADV:
        assert b.ctypes.data % (1 << 21) == 0
    assert len(kernels._block(1000)) == 1000
    pb = kernels.ProbeBuffers(4, 100_000, vdtype=np.float64)
    assert pb.mv.dtype == np.float64 and all(a.flags.c_contiguous and a.flags.aligned and a.flags.writeable
                                             for a in pb.outs)
    assert pb.mp.dtype == np.int32                          # (Matches.probe is int32)
    spans = sorted((a.ctypes.data, a.nbytes) for a in (pb.mp, pb.mv, pb.mt, pb.mr, pb.ct, pb.cr))
    assert all(n >= 100_000 * 4 for _, n in spans)
    assert all(y - x >= n for (x, n), (y, _) in zip(spans, spans[1:]))        # no overlap
    assert not pb.lent()
    for f in ("mp", "mv", "mt", "mr", "ct", "cr"):
        v = getattr(pb, f)[:10]
        assert pb.lent() and pb.holds(v)
        del v
        assert not pb.lent()


# ---------------------------------------------------------------- many probes of few keys
@pytest.mark.parametrize("structure", ["T1", "T4"])
def test_many_probes_of_few_keys_equal_reference(structure):
    """Batches of many probes of few keys (the join's skew): float keys 0.0 / -0.0 (equal, hashed
    apart), windows that differ per probe, after every ingest; equal to the reference (matches,
    order, regions, visited)."""
    rng = np.random.default_rng(7)
    ix = StreamIndex(SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3),
                     IndexConfig(structure=structure, n_buckets=8, w=32, g1_zones=3))
    n = 3000
    t = np.sort(rng.uniform(0, 60, n))
    v = rng.choice(np.array([0.0, -0.0, 1.5, 2.5, 7.0]), n, p=[0.4, 0.2, 0.2, 0.1, 0.1])
    for a in range(0, n, 500):
        ix.ingest(v[a:a + 500], t[a:a + 500])
        P = 300
        keys = rng.choice(np.array([0.0, -0.0, 1.5, 2.5, 9.0]), P)
        hi = rng.uniform(t[a] - 5, t[min(a + 499, n - 1)] + 1, P)
        lo = hi - rng.uniform(5, 45, P)
        assert_same(ix.probe_many(keys, lo, hi, fade=0.8, with_regions=True), reference(ix, keys, lo, hi), structure)


# ---------------------------------------------------------------- ingest: in-place sketch updates
@pytest.mark.parametrize("structure", ["T3", "T4"])
def test_sketch_add_in_place_equals_numpy_deltas_and_recount(structure, monkeypatch):
    """``kernels.sketch_add`` (per tuple, in place, row norms updated exactly) builds the same pyramid
    as the numpy sparse deltas (batches below B w / 4 tuples; larger ones are dense deltas either way): same store, same row norms,
    same bytes; and every leaf equals a count sketch recounted from its zone's tuples, every inner
    node the sum of its leaves, every row norm the squared norm of its row."""
    from sketchql.index import ingest_side
    v, t = zipf_drift(20000, rate=200.0, n_items=300, drift_every=20, seed=9)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    built = []
    for sparse in (True, False):
        monkeypatch.setattr(ingest_side, "SPARSE_KERNEL", sparse)
        ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=16, w=64, d=5, check_every=64))
        rng = np.random.default_rng(4)
        a = 0
        while a < len(v):          # (the kernel takes the batches below B w / 4 = 256 tuples)
            sizes = [1, 7, 100, 250] + ([2500, 6000] if a < len(v) - 8000 else [])   # small ones last
            b = min(len(v), a + int(rng.choice(sizes)))
            ix.ingest(v[a:b], t[a:b])
            a = b
            for g in ix.grans:      # clean norms (a dense add marks them for recomputation)
                g.f2_nodes()
        built.append(ix)
    a, b = built
    assert a.to_bytes() == b.to_bytes()
    for g, h in zip(a.grans, b.grans):
        assert np.array_equal(g.store, h.store)
        assert np.array_equal(g.rownorm, h.rownorm) and np.array_equal(g._f2, h._f2)
    ix = a
    B, d, w = ix._shape
    for g in ix.grans:
        assert np.array_equal(g.rownorm, np.einsum("nbdw,nbdw->nbd", g.store, g.store))
        for slot, z in enumerate(g.slots):
            want = np.zeros((B, d, w), dtype=np.int64)
            if z is not None and z.n:
                vals, _, _ = z.all_tuples()
                bk, idx, sgn = ix._hash(vals)
                np.add.at(want.reshape(-1), (idx + (bk * d * w)[None, :]).ravel(), sgn.ravel())
            assert np.array_equal(g.levels[0][slot], want)
        for l in range(1, len(g.levels)):
            assert np.array_equal(g.levels[l], g.levels[l - 1][0::2] + g.levels[l - 1][1::2])


# ---------------------------------------------------------------- shared cell scans per key
@pytest.mark.parametrize("lateness", [0.0, 4.0])
def test_probes_of_one_key_share_cell_scans_same_matches(lateness):
    """Integer keys that many probes of a batch carry share their cell scans (``_match_regions``:
    one compare pass per (node, key), windows cut from the run by binary search when its ts are
    sorted, checked one by one when late tuples made a cell's arrival order differ from time
    order; ties on the window edges).  Equal to the per-probe scan of the same kernel (scratch of
    size 0: no sharing), with a scratch too small for every run (some pairs shared, the rest
    scanned), to the numpy reference, and within brute force's matches."""
    rng = np.random.default_rng(11 + int(lateness))
    ix = StreamIndex(SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3),
                     IndexConfig(structure="T4", n_buckets=4, w=32, g1_zones=3, allowed_lateness=lateness))
    n = 4000
    t = np.round(np.sort(rng.uniform(0, 80, n)), 1)            # rounded: tied timestamps
    if lateness:
        t = t - rng.uniform(0, 0.9 * lateness, n) * (rng.random(n) < 0.15)
    v = rng.choice(np.array([3, 5, 8, 13, 21, 34]), n, p=[0.4, 0.2, 0.15, 0.1, 0.1, 0.05]).astype(np.int64)
    unsorted_seen = shared_seen = 0
    for a in range(0, n, 400):
        ix.ingest(v[a:a + 400], t[a:a + 400])
        P = 200
        keys = rng.choice(np.array([3, 5, 8, 13, 99]), P).astype(np.int64)
        keys[-1] = 77                                           # a key only one probe carries
        hi = rng.uniform(ix.clock - 10, ix.clock + 1, P)
        lo = hi - rng.uniform(2, 45, P)
        hi[:3] = rng.choice(t[:a + 400], 3)                     # window edges on stored timestamps
        lo[3:6] = rng.choice(t[:a + 400], 3)
        m = ix.probe_many(keys, lo, hi, fade=0.8, with_regions=True)
        assert_same(m, reference(ix, keys, lo, hi), "T4")
        kv = ix._kernel_view()
        buf = kernels.ProbeBuffers(len(m.regions) + 1, len(m) + 1)
        cfg = ix.config
        args = [float(cfg.min_estimate), float(cfg.prune_sigma), keys, ix._hash_params(),
                *buf.hash_arrays(P, ix._d), np.ascontiguousarray(lo), np.ascontiguousarray(hi), *kv.args]
        got = {}
        for scratch in (0, 7, len(buf.ct)):
            r = kernels.probe_kview(*args, *buf.outs[:8], buf.ct[:scratch], buf.cr[:scratch])
            got[scratch] = (r, [a[:r[1]].copy() for a in (buf.mp, buf.mv, buf.mt, buf.mr)] + [buf.rend[:r[0]].copy()])
        for scratch in (7, len(buf.ct)):
            assert got[scratch][0] == got[0][0]
            for x, y in zip(got[scratch][1], got[0][1]):
                assert np.array_equal(x, y)
        assert np.array_equal(got[0][1][3], m.row_ids)
        gid = np.empty(P, dtype=np.int64)
        assert kernels._key_groups(keys, gid) == 5 and gid[-1] == -1 and (gid[:-1] >= 0).all()
        shared_seen += 1
        stored = set(ix.window_tuples(-np.inf, np.inf).row_ids.tolist())
        want = {(p, r) for p, r in brute_matches(v, t, keys, lo, hi) if r in stored}
        got_pairs = set(zip(m.probe.tolist(), m.row_ids.tolist()))
        assert got_pairs <= want and len(got_pairs) > 0.9 * len(want)       # (T4 prunes: a subset)
        # cells whose arrival order is not time order (late tuples)
        cstart, clen, Tc, hot_k = kv.args[12], kv.args[13], kv.args[15], kv.args[17]
        for c in np.nonzero(clen)[0]:
            s = cstart[c]
            seg = Tc[s:s + clen[c]] if c // ix._B != hot_k else None
            if seg is not None and len(seg) > 1 and (np.diff(seg) < 0).any():
                unsorted_seen += 1
    assert shared_seen >= 10
    if lateness:
        assert unsorted_seen > 0
