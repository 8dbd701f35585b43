"""``Matches.probe`` is int32 on every path (compiled and numpy), and a probe batch of 2**31 rows or
more is refused with a clear error (the lead's API decision, issue 16)."""
import numpy as np
import pytest

from sketchql.errors import SummaryError
from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
from sketchql.index import query_side
from sketchql.index.results import PROBE_DTYPE


def _index(structure, use_kernels):
    rng = np.random.default_rng(5)
    ix = StreamIndex(SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=3),
                     IndexConfig(structure=structure, n_buckets=8, w=32))
    ix.use_kernels = use_kernels
    v = rng.integers(0, 20, 3000)
    t = np.sort(rng.uniform(0, 60, 3000))
    ix.ingest(v, t)
    return ix, v, t


def _brute(v, t, keys, tf, tt):
    return sorted((p, r) for p in range(len(keys)) for r in np.flatnonzero((v == keys[p]) & (t > tf[p]) & (t <= tt[p])))


@pytest.mark.parametrize("structure", ["T1", "T4"])
@pytest.mark.parametrize("use_kernels", [True, False])
def test_probe_column_is_int32_on_every_path(structure, use_kernels):
    ix, v, t = _index(structure, use_kernels)
    keys = np.arange(0, 20, dtype=np.int64).repeat(5)           # >= 64 probes: the shared-scan path too
    tt = np.linspace(30, 60, len(keys))
    tf = tt - 25.0
    want = _brute(v, t, keys, tf, tt)
    ms = {"probe_many": ix.probe_many(keys, tf, tt), "scan_window_many": ix.scan_window_many(keys, tf, tt)}
    r = ix.promising_regions(keys, tf, tt)
    ms["probe_regions"] = ix.probe_regions(r, keys, tf, tt)
    for name, m in ms.items():
        assert m.probe.dtype == PROBE_DTYPE == np.int32, name
        assert m.region.dtype == np.int64, name
        got = sorted(zip(m.probe.tolist(), m.row_ids.tolist()))
        if structure == "T1" or name == "scan_window_many":          # exact paths
            assert got == want, name
        else:
            assert set(got) <= set(want), name
        # the probe column indexes the batch like an int64 one
        assert np.array_equal(m.values, keys[m.probe]) and np.array_equal(m.values, keys[m.probe.astype(np.int64)])
        assert np.all(m.timestamps > tf[m.probe]) and np.all(m.timestamps <= tt[m.probe])
    s = ms["scan_window_many"]
    assert np.array_equal(s.region, s.probe)                       # region = probe row there
    m = ix.scan_matching_many(r.cell, keys[r.probe], tf[r.probe], tt[r.probe])
    assert m.probe.dtype == np.int32 and np.array_equal(m.probe, m.region)
    mb = ix.scan_matching_many(r.cell, keys[r.probe], tf[r.probe], tt[r.probe], bounded=True)
    assert mb.probe.dtype == np.int32 and np.array_equal(mb.probe, mb.region)
    e = ix.probe_many(np.array([999]), 0.0, 60.0)                  # no match: empty, still int32
    assert len(e) == 0 and e.probe.dtype == np.int32
    e = ix.scan_window_many(np.array([999]), 100.0, 200.0)
    assert len(e) == 0 and e.probe.dtype == np.int32


def test_compiled_and_numpy_probe_columns_identical():
    ix, v, t = _index("T4", True)
    keys = np.arange(0, 20, dtype=np.int64).repeat(4)
    a = ix.probe_many(keys, 10.0, 60.0)
    ix.use_kernels = False
    b = ix.probe_many(keys, 10.0, 60.0)
    ka = sorted(zip(a.probe.tolist(), a.row_ids.tolist()))
    assert ka == sorted(zip(b.probe.tolist(), b.row_ids.tolist()))
    assert a.probe.dtype == b.probe.dtype == np.int32


def test_batches_of_2_31_rows_are_refused(monkeypatch):
    ix, v, t = _index("T4", True)
    monkeypatch.setattr(query_side, "MAX_PROBE_ROWS", 3)     # (2**31 keys would not fit in memory here)
    for call in (lambda: ix.probe_many(np.arange(4), 0.0, 60.0),
                 lambda: ix.scan_window_many(np.arange(4), 0.0, 60.0),
                 lambda: ix.scan_matching_many(np.zeros(4, np.int64), np.arange(4), 0.0, 60.0)):
        with pytest.raises(SummaryError, match="int32"):
            call()
    assert ix.probe_many(np.arange(3), 0.0, 60.0).probe.dtype == np.int32          # 3 rows: fine
