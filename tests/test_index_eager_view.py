"""The compiled probe's view kept current at ingest (``StreamIndex._keep_view``).

An index whose view a probe read since the last ingest refreshes it at the end of the next
``ingest`` / ``advance``, so the probe that follows finds it current.  Checked against
independent references: the view equals one built from scratch, and the probes' matches
equal the numpy reference path (``_probe_many_numpy``) and a twin index refreshed lazily.
"""
import numpy as np
import pytest

from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration, ingest_side, kernels
from sketchql.index.kview import KernelView

from test_index import zipf_drift
from test_index_refresh import assert_view_equals_fresh

pytestmark = pytest.mark.skipif(not kernels.ENABLED, reason="numba kernels disabled")

DECL = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3)


def current(ix) -> bool:
    return ix._kview is not None and ix._kstate == tuple(g.version for g in ix.grans) and ix._kview.pending is None


def pairs(m):
    return sorted(zip(m.probe.tolist(), m.row_ids.tolist(), m.timestamps.tolist()))


@pytest.fixture
def refreshes(monkeypatch):
    """Counts KernelView.refresh / refresh_fast calls."""
    calls = []
    for name in ("refresh", "refresh_fast"):
        orig = getattr(KernelView, name)

        def wrapped(self, *a, _orig=orig, _name=name, **k):
            calls.append(_name)
            return _orig(self, *a, **k)
        monkeypatch.setattr(KernelView, name, wrapped)
    return calls


@pytest.mark.parametrize("structure", ["T4", "T1", "T3"])
def test_probe_after_ingest_finds_the_view_current_and_matches_the_references(structure, refreshes, monkeypatch):
    v, t = zipf_drift(6000, rate=40.0, n_items=150, s=1.2, drift_every=20, seed=7)
    cfg = IndexConfig(structure=structure, n_buckets=8, w=16, check_every=32)
    ix, lazy = StreamIndex(DECL, cfg), StreamIndex(DECL, cfg)
    rng = np.random.default_rng(3)
    structural = 0
    for i in range(0, len(v), 37):
        sv = [g.sversion for g in ix.grans]
        ix.ingest(v[i:i + 37], t[i:i + 37])
        monkeypatch.setattr(ingest_side, "EAGER_VIEW", False)
        lazy.ingest(v[i:i + 37], t[i:i + 37])
        monkeypatch.setattr(ingest_side, "EAGER_VIEW", True)
        if i < 400:
            continue
        if ix._kview is not None:
            assert current(ix)                 # refreshed by the ingest itself
            structural += sv != [g.sversion for g in ix.grans]
        j = min(i + 37, len(t))
        P = int(rng.integers(1, 120))
        keys = np.ascontiguousarray(rng.choice(v[:j], P))
        tt = np.sort(rng.uniform(t[j - 1] - 15.0, t[j - 1], P))
        tf = tt - rng.uniform(1.0, 25.0, P)
        n0 = len(refreshes)
        m = ix.probe_many(keys, tf, tt, fade=0.8)
        if i >= 437:
            assert len(refreshes) == n0        # the probe refreshed nothing
        assert pairs(m) == pairs(ix._probe_many_numpy(keys, tf, tt, fade=0.8))
        assert pairs(m) == pairs(lazy.probe_many(keys, tf, tt, fade=0.8))
    assert structural > 3                      # zones closed / collapsed between probes, not only hot growth
    assert_view_equals_fresh(ix)


def test_only_an_index_read_since_the_last_ingest_pays_the_refresh(refreshes):
    v, t = zipf_drift(3000, rate=30.0, n_items=80, s=1.2, seed=2)
    ix = StreamIndex(DECL, IndexConfig(structure="T4", n_buckets=8, w=16, check_every=64))
    ix.ingest(v[:1000], t[:1000])
    ix.ingest(v[1000:1100], t[1000:1100])
    assert ix._kview is None and refreshes == []           # never probed: no view, nothing refreshed
    keys = np.ascontiguousarray(v[900:950])
    ix.probe_many(keys, t[900:950] - 20, t[900:950])
    n0 = len(refreshes)
    ix.ingest(v[1100:1200], t[1100:1200])                  # read since: refreshed here
    assert len(refreshes) > n0 and current(ix)
    n1 = len(refreshes)
    ix.ingest(v[1200:1300], t[1200:1300])                  # not read since: left to the next reader
    ix.advance(float(t[1299]) + 100.0)                     # (collapses and expiry, still unread)
    assert len(refreshes) == n1 and not current(ix)
    m = ix.probe_many(keys, t[1250:1300] - 20, t[1250:1300])
    assert pairs(m) == pairs(ix._probe_many_numpy(keys, t[1250:1300] - 20, t[1250:1300]))
    ix.advance(float(t[1299]) + 200.0)                     # read since: advance refreshes it
    assert current(ix)
    assert_view_equals_fresh(ix)


def test_a_checkpoint_restores_without_the_view_and_still_probes_right():
    import pickle
    v, t = zipf_drift(2000, rate=30.0, n_items=80, s=1.2, seed=4)
    ix = StreamIndex(DECL, IndexConfig(structure="T4", n_buckets=8, w=16, check_every=64))
    ix.ingest(v[:1500], t[:1500])
    keys = np.ascontiguousarray(v[1400:1450])
    ix.probe_many(keys, t[1400:1450] - 20, t[1400:1450])
    state = ix.__getstate__()
    state.pop("_kread")                                   # a checkpoint written before this attribute
    back = StreamIndex.__new__(StreamIndex)
    back.__setstate__(pickle.loads(pickle.dumps(state)))
    for x in (ix, back):
        x.ingest(v[1500:], t[1500:])
    got = back.probe_many(keys, t[1950:2000] - 20, t[1950:2000])
    assert pairs(got) == pairs(ix.probe_many(keys, t[1950:2000] - 20, t[1950:2000]))
