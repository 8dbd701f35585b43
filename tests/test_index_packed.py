"""The packed entry points of the compiled probe (``kernels.probe_packed``, ``refresh_hot_packed``).

``probe_packed`` rebuilds the view's and the buffers' arrays from int64 descriptors
(``pack_view``/``pack_arena``/``pack_bufs``) instead of taking them as 41 arguments, and applies
a hot-zone refresh that ``KernelView.refresh_fast(defer=True)`` left pending.  Checked here:

- the descriptors describe exactly the arrays the view and the buffer set hold, after every
  ingest (arena re-layouts, new hot zones, CSR growth, buffer growth) -- so the kernel never reads
  a stale or freed array;
- a probe through the packed, deferred path returns exactly what the unpacked kernel
  (``probe_kview`` with ``KernelView.args``) returns on a view refreshed eagerly, and leaves the
  view equal to one built from scratch (the pending refresh was applied);
- a pending refresh is applied (``flush``) before anything else reads the view: a probe that
  takes another path, ``with_regions``, several ingests between probes.
"""
import numpy as np
import pytest

from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration, ingest_side, kernels
from sketchql.index.kview import KernelView

from test_index import zipf_drift
from test_index_refresh import assert_view_equals_fresh

pytestmark = pytest.mark.skipif(not kernels.ENABLED, reason="numba kernels disabled")


@pytest.fixture
def lazy_view(monkeypatch):
    """The view refreshed only by its readers (no eager refresh at ingest): the deferred path's tests."""
    monkeypatch.setattr(ingest_side, "EAGER_VIEW", False)


def slot(desc, i):
    return int(desc[2 * i]), int(desc[2 * i + 1])


def described(a):
    return a.ctypes.data, a.size


def assert_descriptors_match(ix):
    kv, buf = ix._kview, ix._kbuf.sets[0] if ix._kbuf else None
    a = kv.args
    views = {kernels._V_STORE: a[1], kernels._V_F2: a[2], kernels._V_LO: a[6], kernels._V_HI: a[7],
             kernels._V_PARENT: a[8], kernels._V_LEAF: a[9], kernels._V_GSTART: a[10], kernels._V_CSTART: a[12],
             kernels._V_CLEN: a[13], kernels._V_VC: a[14], kernels._V_TC: a[15], kernels._V_RC: a[16],
             kernels._V_HV: a[18], kernels._V_HT: a[19], kernels._V_HR: a[20], kernels._V_HSTART: a[21]}
    for i, arr in views.items():
        assert slot(kv.vd, i) == described(arr), i
    assert kv.vd[kernels._V_HOTK] == a[17] and kv.vd[kernels._V_B] == a[11] and kv.vd[kernels._V_SKETCH] == a[0]
    assert kv.vd[kernels._V_W] == a[3] and kv.vd[kernels._V_BDW] == a[4] and kv.vd[kernels._V_DW] == a[5]
    if buf is not None:
        arrs = buf.outs + buf._hash[2]
        for i, arr in enumerate(arrs):
            assert slot(buf.bd, i) == described(arr), i
        assert buf.bd[kernels._B_D] == buf._hash[2][1].shape[0]


def eager_probe(ix, keys, tf, tt):
    """The unpacked kernel on an eagerly refreshed view, into fresh buffers: (matches, regions, counters)."""
    kv = ix._kernel_view()                     # (flushes any pending refresh)
    assert kv.pending is None
    buf = kernels.ProbeBuffers(8, 8, kv.vdtype)
    bucket, idx, sgn = buf.hash_arrays(len(keys), ix._d if ix._sketch else 1)
    hp = ix._hash_params() if ix._sketch else np.zeros(0, dtype=np.uint64)
    cfg = ix.config
    nr, nm, visited, flat, work = kernels.probe_k(buf, float(cfg.min_estimate), float(cfg.prune_sigma), keys, hp,
                                                  bucket, idx, sgn, tf, tt, *kv.args)
    return ([x[:nm].tolist() for x in (buf.mp, buf.mv, buf.mt, buf.mr)] + [buf.rend[:nr].tolist()],
            (visited, flat, work))


@pytest.mark.parametrize("structure,lateness", [("T4", 0.0), ("T4", 3.0), ("T1", 0.0), ("T3", 2.0)])
def test_packed_deferred_probe_equals_the_unpacked_kernel_after_every_ingest(structure, lateness, monkeypatch,
                                                                              lazy_view):
    applied = []
    orig = kernels.probe_packed
    monkeypatch.setattr(kernels, "probe_packed", lambda *a: (applied.append(a[-2] <= a[-1]), orig(*a))[1])
    v, t = zipf_drift(6000, rate=40.0, n_items=150, s=1.2, drift_every=20, seed=11)
    rng = np.random.default_rng(5)
    if lateness:
        t = t + rng.uniform(-lateness * 0.9, 0, len(t)) * (rng.random(len(t)) < 0.1)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    cfg = IndexConfig(structure=structure, n_buckets=8, w=16, check_every=32, allowed_lateness=lateness)
    ix = StreamIndex(decl, cfg)                 # probed through the packed, deferred path
    twin = StreamIndex(decl, cfg)               # the same stream, probed through the unpacked kernel
    for n, i in enumerate(range(0, len(v), 23)):
        ix.ingest(v[i:i + 23], t[i:i + 23])
        twin.ingest(v[i:i + 23], t[i:i + 23])
        if i < 300 or n % 4 == 3:              # (some ingests in a row without a probe)
            continue
        j = min(i + 23, len(t))                # tuples ingested so far
        hi = float(t[j - 1])
        P = int(rng.integers(1, 200))          # batches below and above the shared-scan threshold
        keys = np.ascontiguousarray(rng.choice(v[:j], P))
        tt = np.sort(rng.uniform(hi - 20.0, hi, P))
        tf = tt - rng.uniform(1.0, 30.0, P)
        assert ix._kview is None or ix._kview.pending is None
        m = ix.probe_many(keys, tf, tt, fade=0.8)
        got = [m.probe.tolist(), m.values.tolist(), m.timestamps.tolist(), m.row_ids.tolist()]
        want, counters = eager_probe(twin, keys, tf, tt)
        assert got == want[:4]
        reg = m.region
        assert np.array_equal(np.bincount(reg, minlength=len(want[4])) if len(reg) else np.zeros(len(want[4])),
                              np.diff(want[4], prepend=0))
        assert (m.visited, m.work) == (counters[0], counters[2])
        assert ix._kview.pending is None        # the kernel applied it
        assert_descriptors_match(ix)
        assert_view_equals_fresh(ix)
    # refreshes applied by the probe kernel (late tuples switch zones more often: then the full refresh runs)
    assert sum(applied) > (len(applied) // 5 if not lateness else 5), (sum(applied), len(applied))


def test_a_pending_refresh_is_applied_before_any_other_reader(lazy_view):
    v, t = zipf_drift(3000, rate=30.0, n_items=80, s=1.2, seed=2)
    decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)
    ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=8, w=16, check_every=64))
    ix.ingest(v[:1500], t[:1500])
    keys = np.ascontiguousarray(v[1400:1480])
    ix.probe_many(keys, t[1400:1480] - 20, t[1400:1480])          # builds the view
    kv = ix._kview
    ix.ingest(v[1500:1530], t[1500:1530])      # the hot zone grows: a fast refresh
    got = ix._kernel_view(defer=True)
    assert got is kv and kv.pending is not None
    # another reader: the plain _kernel_view() applies it
    assert ix._kernel_view() is kv and kv.pending is None
    fresh = KernelView(ix)
    fresh.refresh(ix)
    assert np.array_equal(kv.lo, fresh.lo) and np.array_equal(kv.hi, fresh.hi)
    # pending, then a structural change: the full refresh applies it first, the view equals a fresh one
    at = 1530
    while kv.pending is None and at < 1700:           # (an ingest that only grows the hot zone)
        ix.ingest(v[at:at + 5], t[at:at + 5])
        at += 5
        ix._kernel_view(defer=True)
    assert kv.pending is not None
    ix.ingest(v[at:3000], t[at:3000])
    assert_view_equals_fresh(ix)
    # with_regions takes the eager refresh; float keys (hashed outside the kernel) flush before the unpacked call
    ix.ingest(v[:0], t[:0])
    m1 = ix.probe_many(keys, t[2900:2980] - 20, t[2900:2980], with_regions=True)
    m2 = ix.probe_many(keys.astype(np.float64), t[2900:2980] - 20, t[2900:2980])
    ref = ix._probe_many_numpy(keys, t[2900:2980] - 20, t[2900:2980])
    assert sorted(zip(m1.probe.tolist(), m1.row_ids.tolist())) == sorted(zip(ref.probe.tolist(), ref.row_ids.tolist()))
    assert sorted(zip(m2.probe.tolist(), m2.row_ids.tolist())) == sorted(zip(ref.probe.tolist(), ref.row_ids.tolist()))
    assert kv.pending is None


def test_buffer_descriptor_follows_growth():
    buf = kernels.ProbeBuffers(4, 4, np.int64)
    buf.hash_arrays(10, 5)
    assert slot(buf.bd, kernels._B_MP) == described(buf.mp) and slot(buf.bd, kernels._B_IDX) == described(buf._hash[2][1])
    buf.alloc(64, 5000)
    buf.hash_arrays(1000, 5)
    for i, arr in enumerate(buf.outs + buf._hash[2]):
        assert slot(buf.bd, i) == described(arr)
    assert buf.bd[kernels._B_D] == 5 and buf.bd[kernels._B_HCAP] == buf._hash[2][1].shape[1]
