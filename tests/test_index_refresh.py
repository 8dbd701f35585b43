"""The compiled view's incremental refresh against a view built from scratch.

``KernelView.refresh_fast`` (one compiled call when only G1's hot zone grew) and the
structural refresh (cold zones appended to the CSR by ``kernels.csr_append``, dropped
zones) must leave the view exactly as a ``KernelView`` built from scratch on the same
index: the same node ranges, F2 of every non-empty node, and the same tuples, in the
same order, in every cell.  Probe results against the numpy reference are checked by
``test_index_kernels``; this checks the view itself, and that the fast path is taken.
"""
import numpy as np
import pytest

from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration, kernels
from sketchql.index.kview import KernelView

from test_index import zipf_drift


def cells(kv):
    """{(node, bucket): (values, ts, row ids)} of every non-empty cell of the view."""
    out = {}
    B = kv.B
    for c in np.flatnonzero(kv.clen):
        node, b = divmod(int(c), B)
        n = int(kv.clen[c])
        if node == kv.hot_k:
            s = int(kv.hot.start[b])
            arr = (kv.hot.V, kv.hot.T, kv.hot.R)
        else:
            s = int(kv.cstart[c])
            arr = (kv.Vc, kv.Tc, kv.Rc)
        out[(node, b)] = tuple(a[s:s + n].tolist() for a in arr)
    return out


def assert_view_equals_fresh(ix):
    kv = ix._kernel_view()
    fresh = KernelView(ix)
    fresh.refresh(ix)
    assert np.array_equal(kv.lo, fresh.lo) and np.array_equal(kv.hi, fresh.hi)
    live = kv.lo <= kv.hi                       # empty nodes are never visited: their F2 is not read
    assert np.array_equal(kv.F2[live], fresh.F2[live])
    assert kv.hot_k == fresh.hot_k
    assert cells(kv) == cells(fresh)
    assert kv.live_cold == fresh.live_cold == int(sum(h[2] for h in kv.held.values()))
    # the kernel's arguments are the view's current arrays (the hot arena may have been re-laid out)
    a = kv.args
    assert a[2] is kv.F2 and a[6] is kv.lo and a[7] is kv.hi and a[12] is kv.cstart and a[13] is kv.clen
    assert a[14] is kv.Vc and a[17] == kv.hot_k
    if kv.hot_k >= 0:
        assert a[18] is kv.hot.V and a[19] is kv.hot.T and a[20] is kv.hot.R and a[21] is kv.hot.start


@pytest.mark.parametrize("structure,lateness", [("T4", 0.0), ("T4", 3.0), ("T1", 0.0), ("T3", 2.0)])
def test_incremental_view_equals_a_fresh_one_after_every_ingest(structure, lateness, monkeypatch):
    v, t = zipf_drift(5000, rate=20.0, n_items=120, s=1.2, drift_every=25, seed=7)
    rng = np.random.default_rng(3)
    if lateness:                       # accepted out-of-order tuples: appends to zones other than the hot one
        t = t + rng.uniform(-lateness * 0.9, 0, len(t)) * (rng.random(len(t)) < 0.1)
    fast = []
    orig = kernels.refresh_hot_packed
    monkeypatch.setattr(kernels, "refresh_hot_packed", lambda *a: (fast.append(1), orig(*a))[1])
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    ix = StreamIndex(decl, IndexConfig(structure=structure, n_buckets=8, w=16, check_every=32,
                                       allowed_lateness=lateness))
    for i in range(0, len(v), 37):
        ix.ingest(v[i:i + 37], t[i:i + 37])
        if i >= 200:
            assert_view_equals_fresh(ix)
    n_refresh = len(range(200, len(v), 37))
    # in order, many refreshes only saw the hot zone grow (zones are short here: 10 s granularity, adaptive
    # T4 zones); late tuples switch zones (then the full refresh runs)
    assert len(fast) > n_refresh // 5 if not lateness else len(fast) >= 1, (len(fast), n_refresh)


def test_csr_append_equals_numpy():
    rng = np.random.default_rng(0)
    for vd in (np.int64, np.float64):
        n, B, base = 300, 8, 17
        v = rng.integers(0, 50, n).astype(vd)
        ts, r = rng.random(n), rng.permutation(n).astype(np.int64)
        off = np.concatenate([[0], np.sort(rng.integers(0, n, B - 1)), [n]]).astype(np.int64)
        Vc, Tc, Rc = np.zeros(400, dtype=vd), np.zeros(400), np.zeros(400, dtype=np.int64)
        cstart, clen = np.full(3 * B, -1, dtype=np.int64), np.full(3 * B, -1, dtype=np.int64)
        kernels.csr_append(Vc, Tc, Rc, base, v, ts, r, off, cstart[B:2 * B], clen[B:2 * B])
        assert np.array_equal(Vc[base:base + n], v) and np.array_equal(Tc[base:base + n], ts)
        assert np.array_equal(Rc[base:base + n], r)
        assert not Vc[:base].any() and not Rc[base + n:].any()
        assert np.array_equal(cstart[B:2 * B], base + off[:-1]) and np.array_equal(clen[B:2 * B], np.diff(off))
        assert (cstart[:B] == -1).all() and (clen[2 * B:] == -1).all()


@pytest.mark.parametrize("batch", [37, 900])
def test_row_norms_of_clean_nodes_are_exact_through_collapses_and_expiry(batch):
    """``Granularity.add``/``remove`` (large batches, COLLAPSE, ring expiry) update the row norms in the
    same compiled pass: every node not marked dirty has the norms of its table, recomputed here."""
    v, t = zipf_drift(9000, rate=40.0, n_items=120, s=1.2, drift_every=25, seed=5)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=8, w=16, check_every=32))
    clean = 0
    for i in range(0, len(v), batch):
        ix.ingest(v[i:i + batch], t[i:i + batch])
        for g in ix.grans:
            ok = ~g._norm_dirty
            st = g.store[ok]
            assert np.array_equal(g.rownorm[ok], np.einsum("nbdw,nbdw->nbd", st, st))
            clean += int(ok.sum())
        if i % (5 * batch) == 0:
            ix._kernel_view()                  # the probe side clears the flags (recomputes what is dirty)
    assert ix.counters["collapses"] > 0 and clean > 0
    # nothing is left for the probe side after the compiled dense updates of a large batch
    if batch == 900:
        assert not any(g._norm_dirty.any() for g in ix.grans)


def test_granularity_add_remove_keep_exact_norms_and_equal_numpy(monkeypatch):
    from sketchql.index.pyramid import Granularity
    rng = np.random.default_rng(1)
    shape = (4, 3, 8)
    gk, gn = Granularity(1, 4, shape), Granularity(1, 4, shape)
    for step in range(60):
        slot = int(rng.integers(0, 4))
        if rng.random() < 0.3:
            monkeypatch.setattr(kernels, "ENABLED", True)
            gk.remove(slot)
            monkeypatch.setattr(kernels, "ENABLED", False)
            gn.remove(slot)
        else:
            delta = rng.integers(-5, 6, shape).astype(np.int64)
            monkeypatch.setattr(kernels, "ENABLED", True)
            gk.add(slot, delta)
            monkeypatch.setattr(kernels, "ENABLED", False)
            gn.add(slot, delta)
        assert np.array_equal(gk.store, gn.store)
        assert not gk._norm_dirty[gk.path(slot)].any()        # compiled: the updated nodes' norms are exact
        ok = ~gk._norm_dirty
        assert np.array_equal(gk.rownorm[ok], np.einsum("nbdw,nbdw->nbd", gk.store[ok], gk.store[ok]))
        assert np.array_equal(gk.f2_nodes(), gn.f2_nodes())
