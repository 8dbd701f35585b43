"""Oracle tests of the index's fast paths (query view, probe_many, fused hashing,
sparse sketch updates, chunk merging) against brute force / reference code."""
import numpy as np
import pytest

from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
from sketchql.index.hasher import CellHasher
from sketchql.index.stream_index import _BUCKET_SALT
from sketchql.index.zone import Chunk
from sketchql.summaries import CountSketch
from sketchql.summaries.hashing import hash64

from test_index import build, zipf_drift


# ---------------------------------------------------------------- brute-force oracles
def brute_regions(ix, keys, tf, tt):
    """Pyramid descent probe by probe, node by node, in pure Python (see promising_regions)."""
    cfg = ix.config
    B, d, w = ix._shape
    cs = CountSketch(d, w, cfg.seed)
    idx, sgn = cs.locate(keys)
    bucket = (hash64(keys, cfg.seed ^ _BUCKET_SALT) % np.uint64(B)).astype(np.int64) if B > 1 \
        else np.zeros(len(keys), np.int64)
    rows, visited, flat = [], 0, 0
    for gi, g in enumerate(ix.grans):
        h = len(g.levels) - 1

        def leaves(l, j):
            return [g.slots[s] for s in range(j << l, (j + 1) << l) if g.slots[s] is not None]

        for p in range(len(keys)):
            b = int(bucket[p])
            for z in leaves(h, 0):
                if z.n and z.max_ts > tf[p] and z.min_ts <= tt[p]:
                    flat += 1

            def visit(l, j):
                nonlocal visited
                zs = [z for z in leaves(l, j) if z.n]
                if not zs:
                    return
                lo, hi = min(z.min_ts for z in zs), max(z.max_ts for z in zs)
                if not (hi > tf[p] and lo <= tt[p]):
                    return
                visited += 1
                tab = g.levels[l][j][b].reshape(-1)
                vals = sorted(int(sgn[r, p]) * int(tab[idx[r, p]]) for r in range(d))
                est = float(vals[d // 2]) if d % 2 else 0.5 * (vals[d // 2 - 1] + vals[d // 2])
                norms = sorted(float((g.levels[l][j][b][r].astype(float) ** 2).sum()) for r in range(d))
                f2 = norms[d // 2] if d % 2 else 0.5 * (norms[d // 2 - 1] + norms[d // 2])
                if est < max(cfg.min_estimate, cfg.prune_sigma * np.sqrt(max(f2, 0.0) / w)):
                    return
                if l == 0:
                    z = g.slots[j]
                    full = tf[p] < z.min_ts and z.max_ts <= tt[p]
                    span = z.max_ts - z.min_ts
                    frac = 1.0 if (full or span <= 0) else \
                        min(1.0, max(0.0, (min(z.max_ts, tt[p]) - max(z.min_ts, tf[p])) / span))
                    rows.append((p, z.id, b, gi + 1, est * frac, not full, len(z.cell(b)[2])))
                    return
                visit(l - 1, 2 * j)
                visit(l - 1, 2 * j + 1)

            visit(h, 0)
    return rows, visited, flat


def brute_matches(v, t, keys, tf, tt):
    return {(p, int(r)) for p in range(len(keys)) for r in np.flatnonzero((v == keys[p]) & (t > tf[p]) & (t <= tt[p]))}


def regions_rows(r):
    return list(zip(r.probe.tolist(), r.zone.tolist(), r.bucket.tolist(), r.granularity.tolist(),
                    r.estimate.tolist(), r.partial.tolist(), r.n_tuples.tolist()))


def probes(rng, v, t, clock, n):
    keys = np.concatenate([rng.choice(v, n - n // 4), rng.integers(10_000, 10_100, n // 4)])
    hi = rng.uniform(clock - 150, clock + 1, n)
    lo = hi - rng.uniform(0, 120, n)
    return keys, lo, hi


# ---------------------------------------------------------------- query view == descent
@pytest.mark.parametrize("structure,batch", [("T2", 997), ("T3", 61), ("T4", 13), ("T4", 700)])
def test_promising_regions_equal_brute_force_descent(structure, batch):
    v, t = zipf_drift(5000, rate=20.0, n_items=300, s=1.2, drift_every=40, seed=5)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=8, w=16, check_every=32))
    rng = np.random.default_rng(batch)
    checks = 0
    for i in range(0, len(v), batch):
        ix.ingest(v[i:i + batch], t[i:i + batch])
        if rng.random() < min(1.0, 6 * batch / len(v)):
            keys, lo, hi = probes(rng, v[:i + batch], t, ix.clock, 24)
            r = ix.promising_regions(keys, lo, hi, fade=0.7)
            rows, visited, flat = brute_regions(ix, keys, lo, hi)
            got = regions_rows(r)
            assert [g[:4] + g[5:] for g in got] == [w_[:4] + w_[5:] for w_ in rows]
            assert np.allclose([g[4] for g in got], [w_[4] for w_ in rows], rtol=1e-12, atol=0)
            assert (r.visited, r.flat) == (visited, flat)
            assert np.allclose(r.priority, r.estimate * 0.7 ** (r.granularity - 1))
            ref = ix._promising_regions_levelwise(keys, lo, hi, fade=0.7)
            for f in ("probe", "cell", "granularity", "estimate", "priority", "partial", "n_tuples"):
                assert np.array_equal(getattr(r, f), getattr(ref, f)), f
            checks += 1
    assert checks >= 2


# ---------------------------------------------------------------- probe_many
@pytest.mark.parametrize("structure", ["T1", "T2", "T3", "T4"])
def test_probe_many_equals_two_calls_and_brute_force(structure):
    v, t = zipf_drift(6000, rate=10.0, n_items=300, drift_every=120, seed=3)
    ix = build(structure, v, t, batch=333, n_buckets=16)
    rng = np.random.default_rng(4)
    for _ in range(5):
        keys, lo, hi = probes(rng, v, t, ix.clock, 60)
        m = ix.probe_many(keys, lo, hi, fade=0.8, with_regions=True)
        r = ix.promising_regions(keys, lo, hi, fade=0.8)
        m2 = ix.probe_regions(r, keys, lo, hi)
        got = sorted(zip(m.probe.tolist(), m.row_ids.tolist(), m.region.tolist()))
        assert got == sorted(zip(m2.probe.tolist(), m2.row_ids.tolist(), m2.region.tolist()))
        assert (m.work, m.visited) == (m2.work, r.visited)
        assert np.array_equal(m.regions.cell, r.cell) and np.array_equal(m.regions.estimate, r.estimate)
        # every match is a true match, of the region it names
        stored = set(ix.window_tuples(-np.inf, np.inf).row_ids.tolist())     # history still covered
        want = {(p, r_) for p, r_ in brute_matches(v, t, keys, lo, hi) if r_ in stored}
        pairs = set(zip(m.probe.tolist(), m.row_ids.tolist()))
        assert pairs <= want and len(pairs) == len(m)
        assert np.array_equal(m.values, keys[m.probe])
        assert np.array_equal(m.timestamps, t[m.row_ids])
        assert np.array_equal(r.probe[m.region], m.probe)
        if structure == "T1":
            assert pairs == want
        else:
            assert len(pairs) >= 0.85 * len(want)
        # without regions: same matches
        m3 = ix.probe_many(keys, lo, hi)
        assert m3.regions is None and np.array_equal(m3.row_ids, m.row_ids) and np.array_equal(m3.probe, m.probe)


def test_probe_many_edge_cases():
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2)
    ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=4, w=32))
    m = ix.probe_many(np.array([1, 2]), 0.0, 5.0)              # empty index
    assert len(m) == 0 and m.work == 0
    ix.ingest(np.array([1, 1, 2, 3]), np.array([1.0, 2.0, 2.0, 3.0]))
    m = ix.probe_many(np.zeros(0, dtype=np.int64), 0.0, 5.0)    # no probes
    assert len(m) == 0
    m = ix.probe_many(np.array([1, 3]), 1.0, 3.0)              # scalar window; (1, 3] excludes ts=1
    assert sorted(zip(m.probe.tolist(), m.row_ids.tolist())) == [(0, 1), (1, 3)]
    s = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=4, w=32))
    s.ingest(np.array(["a", "b", "a"]), np.array([1.0, 2.0, 3.0]))
    m = s.probe_many(["a", "zz"], 0.0, 3.0)
    assert m.row_ids.tolist() == [0, 2] and m.values.tolist() == ["a", "a"]


def test_view_follows_every_mutation():
    """The cached view is rebuilt after ingest / advance / compress / merge / late data."""
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    cfg = dict(structure="T4", n_buckets=8, w=32, allowed_lateness=5.0)
    v, t = zipf_drift(4000, rate=20.0, n_items=200, drift_every=30, seed=11)
    ix = StreamIndex(decl, IndexConfig(**cfg))
    rng = np.random.default_rng(0)

    def check():
        keys, lo, hi = probes(rng, v, t, ix.clock, 20)
        r = ix.promising_regions(keys, lo, hi)
        rows, visited, flat = brute_regions(ix, keys, lo, hi)
        assert [g[:4] for g in regions_rows(r)] == [w_[:4] for w_ in rows] and r.visited == visited
        m = ix.probe_many(keys, lo, hi)
        m2 = ix.probe_regions(r, keys, lo, hi)
        assert sorted(m.row_ids.tolist()) == sorted(m2.row_ids.tolist())

    for i in range(0, 2000, 250):
        ix.ingest(v[i:i + 250], t[i:i + 250])
        check()
    late_t = np.sort(t[1990:2000] - 3.0)                   # accepted late tuples (within lateness)
    ix.ingest(v[1990:2000], np.maximum(late_t, ix.clock - 4.0))
    check()
    ix.advance(ix.clock + 25.0)
    check()
    ix.compress(2)
    check()
    keep = np.arange(2000, 4000)
    other = StreamIndex(decl, IndexConfig(**{**cfg, "w": ix.config.w}))      # same geometry after compress
    other.ingest(v[keep], t[keep] + 0.0, row_ids=keep)
    ix.merge(other)
    check()


# ---------------------------------------------------------------- building blocks
@pytest.mark.parametrize("B,w", [(64, 64), (16, 4096), (1, 64), (10, 100), (7, 1)])
def test_cell_hasher_matches_hash64_and_locate(B, w):
    cs = CountSketch(5, w, 3)
    h = CellHasher(cs, B, 3 ^ _BUCKET_SALT)
    rng = np.random.default_rng(0)
    for keys in (rng.integers(-2**62, 2**62, 500), np.arange(300) * 1.0, np.array([0.5, -2.25, 1e300]),
                 np.array(["a", "bb", "é", ""]), np.zeros(0, dtype=np.int64)):
        b, idx, sgn = h(keys)
        ref_idx, ref_sgn = cs.locate(keys)
        ref_b = (hash64(keys, 3 ^ _BUCKET_SALT) % np.uint64(B)).astype(np.int64) if B > 1 \
            else np.zeros(len(keys), np.int64)
        assert np.array_equal(b, ref_b) and np.array_equal(idx, ref_idx) and np.array_equal(sgn, ref_sgn)
        assert b.dtype == idx.dtype == sgn.dtype == np.int64


def test_chunk_concat_equals_stable_sort():
    rng = np.random.default_rng(1)
    nb = 7
    chunks = []
    for n in (0, 5, 40, 1, 17):
        b = rng.integers(0, nb, n)
        chunks.append(Chunk.build(rng.integers(0, 50, n), rng.random(n), rng.integers(0, 1000, n), b, nb))
    got = Chunk.concat(chunks)
    b = np.concatenate([c.buckets() for c in chunks])
    order = np.argsort(b, kind="stable")
    for f in ("values", "ts", "rids"):
        assert np.array_equal(getattr(got, f), np.concatenate([getattr(c, f) for c in chunks])[order])
    assert np.array_equal(got.offsets, np.concatenate([[0], np.cumsum(np.bincount(b, minlength=nb))]))


@pytest.mark.parametrize("structure", ["T2", "T3", "T4"])
def test_small_and_large_batches_build_the_same_index(structure):
    """Small batches take the sparse sketch update (with incremental row norms), large ones the dense one."""
    v, t = zipf_drift(3000, rate=10.0, n_items=200, drift_every=60, seed=6)
    small = build(structure, v, t, batch=7, n_buckets=16, w=32)
    large = build(structure, v, t, batch=3000, n_buckets=16, w=32)
    if structure != "T4":           # T4 zone boundaries follow the check grid: same data, same zones too
        assert small.to_bytes() == large.to_bytes()
    for g, h in zip(small.grans, large.grans):
        for a, b in zip(g.levels, h.levels):
            assert np.array_equal(a.sum(axis=0), b.sum(axis=0))
    for ix in (small, large):
        for g in ix.grans:
            g.f2_nodes()
            assert np.array_equal(g.rownorm, np.einsum("nbdw,nbdw->nbd", g.store, g.store))


@pytest.mark.parametrize("structure", ["T3", "T4"])
def test_view_patched_after_every_small_ingest(structure):
    """Probing after every small batch exercises the patched view (appends to G1's open zone only)."""
    from sketchql.index import query
    v, t = zipf_drift(2500, rate=20.0, n_items=150, drift_every=25, seed=12)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=8, w=16, check_every=32))
    rng = np.random.default_rng(3)
    patched = 0
    orig = query.QueryView.patch

    def counting(self, *a):
        nonlocal patched
        patched += 1
        return orig(self, *a)

    query.QueryView.patch = counting
    try:
        for n, i in enumerate(range(0, len(v), 9)):
            ix.ingest(v[i:i + 9], t[i:i + 9])
            keys, lo, hi = probes(rng, v[:i + 9], t, ix.clock, 12)
            hi = np.minimum(hi + 20, ix.clock + 1)                 # windows reaching the open zone
            r = ix.promising_regions(keys, lo, hi)
            ref = ix._promising_regions_levelwise(keys, lo, hi)
            for f in ("probe", "cell", "estimate", "partial", "n_tuples"):
                assert np.array_equal(getattr(r, f), getattr(ref, f)), f
            assert (r.visited, r.flat) == (ref.visited, ref.flat)
            m = ix.probe_many(keys, lo, hi)
            m2 = ix.probe_regions(ref, keys, lo, hi)
            assert sorted(zip(m.probe.tolist(), m.row_ids.tolist())) == \
                sorted(zip(m2.probe.tolist(), m2.row_ids.tolist())) and m.work == m2.work
            if n % 25 == 0:
                rows, visited, flat = brute_regions(ix, keys, lo, hi)
                assert [g[:4] for g in regions_rows(r)] == [w_[:4] for w_ in rows] and r.visited == visited
    finally:
        query.QueryView.patch = orig
    assert patched > 100


def test_to_bytes_writes_the_smallest_slot_capacity():
    """The live G1 slot capacity only grows (the most zones any period needed); to_bytes writes the
    smallest power of two holding the current zones, so equal contents give equal bytes whatever the
    build's history, and a round trip keeps answering and serializing the same."""
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2)
    cfg = IndexConfig(structure="T4", n_buckets=4, w=16, check_every=8, max_zone_length=1.0)
    a = StreamIndex(decl, cfg)
    a.ingest(np.arange(200) % 7, np.linspace(0.05, 9.95, 200))       # period 0: ten 1 s zones in G1
    a.ingest(np.arange(20) % 7, np.linspace(10.05, 10.5, 20))        # period 1: one zone so far
    g1 = a.grans[0]
    used = max(z.slot for z in g1.zones()) + 1
    assert g1.cap >= 8 > used                                          # the capacity grew, then fewer zones
    b = StreamIndex.from_bytes(a.to_bytes())
    assert b.grans[0].cap == 1 << (used - 1).bit_length() < g1.cap
    assert b.to_bytes() == a.to_bytes()
    for ix in (a, b):                                                  # same future: same bytes, same answers
        ix.ingest(np.arange(300) % 5, np.linspace(10.6, 29.0, 300))
    assert a.to_bytes() == b.to_bytes()
    ma, mb = (ix.probe_many(np.array([1, 3]), 0.0, 30.0) for ix in (a, b))
    assert ma.row_ids.tolist() == mb.row_ids.tolist() and len(ma) > 0


@pytest.mark.parametrize("structure", ["T1", "T4"])
def test_window_tuples_with_late_tuples_and_ties_equal_brute_force(structure):
    """``window_tuples`` slices a zone whose tuples are in time order (T1's in-order zones) and masks
    the others (late tuples, bucket-ordered cells): every window equals the brute-force selection of
    the accepted tuples, ordered by (ts, row id) -- with ties in ts and late tuples mixed in."""
    rng = np.random.default_rng(12)
    n = 4000
    ts = np.round(np.cumsum(rng.exponential(0.05, n)), 1)           # ties
    late = rng.random(n) < 0.05
    ts[late] -= rng.uniform(0, 2.0, late.sum())                      # out of order, within the lateness
    vals = rng.integers(0, 30, n)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=4, w=16, allowed_lateness=3.0))
    acc = []
    for a in range(0, n, 137):
        rep = ix.ingest(vals[a:a + 137], ts[a:a + 137])
        keep = np.ones(min(n, a + 137) - a, dtype=bool)
        keep[rep.rejected_positions] = False
        acc.append(np.arange(a, min(n, a + 137))[keep])
    acc = np.concatenate(acc)                       # row ids = positions (default running counter)
    lo_hist = ix.clock - 25.0
    for _ in range(40):
        lo, hi = np.sort(rng.uniform(lo_hist, ix.clock + 1, 2))
        if rng.random() < 0.3:                      # edges on stored timestamps
            recent = acc[ts[acc] > lo_hist]
            lo = float(ts[recent[rng.integers(len(recent))]])
            hi = max(hi, lo)
        got = ix.window_tuples(lo, hi)
        sel = acc[(ts[acc] > lo) & (ts[acc] <= hi)]
        want = sel[np.lexsort((sel, ts[sel]))]
        assert np.array_equal(got.row_ids, want)
        assert np.array_equal(got.timestamps, ts[want]) and np.array_equal(got.values, vals[want])
