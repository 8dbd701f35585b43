"""The exact retention cut of an index build (sketchql.spark.retention) and the driver ingest.

Oracle: one StreamIndex fed *all* rows in (ts, row id) order in one call.
No Spark session needed (the modules are pure numpy).
"""
import math

import numpy as np
import pytest

from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
from sketchql.spark.driver_ingest import ingest_rows
from sketchql.spark.retention import first_kept_period, prune_margin


def _geometries():
    out = []
    for depth in (1, 2, 3, 4):
        for rate in (2, 3, 4):
            for n in sorted({d for d in (1, 2, rate) if rate % d == 0}):
                out.append((depth, rate, n))
    return out


def _rows(seed, T1, horizon):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(300, 1500))
    # bursts and gaps, ties on whole seconds, skewed keys
    ts = np.sort(np.round(rng.uniform(0, horizon, n) ** 1.0 + rng.choice([0, 0, 0, 3 * T1], n), 0))
    ts[rng.random(n) < 0.1] = ts[0]
    ts.sort()
    k = np.floor(rng.random(n) ** 3 * 40).astype(np.int64)
    rid = rng.permutation(n).astype(np.int64) + 1000
    return k, ts, rid


def _canon(ix) -> bytes:
    """to_bytes (canonical: the slot capacity it writes is the smallest holding the zones, not the
    live one, which only grows)."""
    return ix.to_bytes()


def _full(decl, cfg, k, ts, rid):
    ix = StreamIndex(decl, cfg)
    o = np.lexsort((rid, ts))
    ix.ingest(k[o], ts[o], rid[o])
    return ix


@pytest.mark.parametrize("depth,rate,n", _geometries())
@pytest.mark.parametrize("structure", ["T3", "T4"])
def test_cut_gives_the_bytes_of_a_full_ingest(depth, rate, n, structure):
    T1 = 10.0
    decl = SummaryDeclaration("r", "ev", "k", granularity=T1, rate=rate, depth=depth)
    cfg = IndexConfig(structure=structure, zones_per_granularity=n, n_buckets=4, d=3, w=16)
    span = T1 * rate ** (depth - 1) * 6
    for seed in range(2):
        k, ts, rid = _rows(seed * 31 + depth * 7 + rate, T1, span)
        full = _full(decl, cfg, k, ts, rid)
        ix = StreamIndex(decl, cfg)
        pruned = ingest_rows(ix, k, ts, rid, "r", prune=True, max_rid=int(rid.max()), chunk=257)
        assert _canon(ix) == _canon(full)
        cut = first_kept_period(decl, cfg, float(ts.max()))
        per = np.floor(ts / T1)
        assert pruned == int((per < cut).sum())
        # with the default ring (n = rate) the cut is exact: also dropping the first kept
        # period changes the index (when it has rows); smaller rings may evict earlier
        if n == rate and (per == cut).any():
            keep = per > cut
            late = StreamIndex(decl, cfg)
            o = np.lexsort((rid[keep], ts[keep]))
            late.ingest(k[keep][o], ts[keep][o], rid[keep][o])
            late._next_row = max(late._next_row, int(rid.max()) + 1)
            assert _canon(late) != _canon(full)
        # the margin a filter without the exact newest time uses keeps a superset of the cut
        m = prune_margin(decl, cfg)
        assert (per[ts <= ts.max() - m] < cut).all()


@pytest.mark.parametrize("hi", [0.0, 9.999, 10.0, 1234.5, 1e7 + 0.3, -55.0])
def test_margin_bounds_the_cut_for_any_clock(hi):
    decl = SummaryDeclaration("r", "ev", "k", granularity=10.0, rate=2, depth=4)
    cfg = IndexConfig(structure="T3")
    cut = first_kept_period(decl, cfg, hi)
    m = prune_margin(decl, cfg)
    assert m == 130.0
    # the newest row before the margin is in a period before the cut
    assert math.floor(np.nextafter(hi - m, -np.inf) / 10.0) < cut and math.floor((hi - m) / 10.0) < cut
    assert cut <= math.floor(hi / 10.0)


def test_prefetch_chunks_give_the_same_bytes():
    decl = SummaryDeclaration("r", "ev", "k", granularity=10.0, rate=2, depth=3)
    cfg = IndexConfig(structure="T3")
    k, ts, rid = _rows(5, 10.0, 400.0)
    a, b = StreamIndex(decl, cfg), StreamIndex(decl, cfg)
    ingest_rows(a, k, ts, rid, "r", chunk=13, prefetch=True)
    ingest_rows(b, k, ts, rid, "r", chunk=len(k), prefetch=False)
    assert a.to_bytes() == b.to_bytes() == _full(decl, cfg, k, ts, rid).to_bytes()
