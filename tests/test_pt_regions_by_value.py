"""PT-Join plans one summary lookup per distinct join value of a batch
(``join._regions_by_value``): the same region rows, in the same order, as a
lookup per arrival, for fewer estimates charged."""
import numpy as np
import pytest

from sketchql.data import generate_stores, interleave
from sketchql.operators.promising.join import _regions_by_value
from sketchql.operators.promising.sources import IndexSource, MiniSource


@pytest.mark.parametrize("kind", ["index", "mini"])
def test_regions_by_value_equal_one_lookup_per_arrival(kind):
    arr = interleave(generate_stores(1, duration=40.0, mean_interarrival=0.01, seed=2))
    src = IndexSource(20.0, seed=1) if kind == "index" else MiniSource(20.0, seed=1)
    src.ingest(arr.item, arr.ts, arr.seq)
    rng = np.random.default_rng(0)
    vals = np.r_[arr.item[-300:], rng.integers(0, 3000, 40)]    # hot values repeated, some absent
    rng.shuffle(vals)
    now = float(arr.ts[-1])
    ref = src.regions(vals, now - 20.0, now, now, 0.8)
    got = _regions_by_value(src, vals, now - 20.0, now, now, 0.8)
    for a, b in zip(ref[:6], got[:6]):
        assert np.array_equal(a, b)
    assert ref[0].shape[0] > 0
    if kind == "index":
        assert 0 < got[6] < ref[6]                              # estimates only for the distinct values
    distinct = np.unique(vals)
    assert _regions_by_value(src, distinct, now - 20.0, now, now, 0.8)[6] == src.regions(distinct, now - 20.0, now,
                                                                                          now, 0.8)[6]
