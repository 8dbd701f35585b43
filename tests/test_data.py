"""sketchql.data: the retail stream generator and its brute-force join oracle."""
import numpy as np
import pytest

from sketchql.data import (
    exact_join_pairs, expected_selectivity, generate_stores, interleave, join_selectivity,
    make_range_queries, window_match_counts, window_value_counts,
)
from sketchql.errors import SketchQLError


def _brute_pairs(arr, w):
    out = set()
    n = len(arr)
    for i in range(n):
        for j in range(n):
            if (arr.stream[i] == 0 and arr.stream[j] == 1 and arr.item[i] == arr.item[j]
                    and abs(arr.ts[i] - arr.ts[j]) < w):
                out.add((i, j))
    return out


def test_generator_is_seeded_and_columnar():
    a = generate_stores(2, duration=20.0, seed=5)
    b = generate_stores(2, duration=20.0, seed=5)
    c = generate_stores(2, duration=20.0, seed=6)
    for x, y in zip(a, b):
        for col in ("store", "txn", "ts", "item", "price"):
            assert np.array_equal(getattr(x, col), getattr(y, col))
    assert not np.array_equal(a[0].item, c[0].item)
    s = a[0]
    assert s.ts.dtype == np.float64 and s.item.dtype == np.int64
    assert (np.diff(s.ts) > 0).all() and s.ts[-1] <= 20.0
    assert set(np.unique(s.store)) == {1}
    assert (s.price > 0).all() and (np.diff(s.txn) >= 0).all()


def test_exponential_interarrivals_mean():
    (s,) = generate_stores(1, duration=600.0, mean_interarrival=0.05, seed=1)
    gaps = np.diff(s.ts)
    assert abs(gaps.mean() - 0.05) < 0.003
    # exponential: std == mean
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05


def test_popularity_is_zipf_and_drifts():
    (s,) = generate_stores(1, duration=240.0, drift_every=30.0, drift_frac=0.3, seed=2)
    first = s.item[s.ts < 30]
    last = s.item[s.ts >= 210]
    top_first = np.bincount(first).argmax()
    # skewed: the top item holds a large share
    assert np.bincount(first).max() / first.shape[0] > 0.1
    f1 = np.bincount(first, minlength=2001)[:2001] / first.shape[0]
    f2 = np.bincount(last, minlength=2001)[:2001] / last.shape[0]
    assert np.corrcoef(f1, f2)[0, 1] < 0.99 or np.bincount(last).argmax() != top_first


def test_join_selectivity_is_about_6_7_percent():
    """Selectivity = P[x.item == y.item] over (arrival x, tuple y of the other
    stream inside x's window), one-minute window (module doc of generator)."""
    vals = [join_selectivity(interleave(generate_stores(2, duration=300.0, seed=s)), 60.0) for s in (1, 2, 3)]
    assert abs(np.mean(vals) - 0.067) < 0.01, vals
    assert 0.055 < expected_selectivity() < 0.08


def test_oracle_matches_brute_force():
    arr = interleave(generate_stores(2, duration=15.0, n_items=20, seed=3))
    for w in (2.0, np.inf):
        pa, pb = exact_join_pairs(arr, w)
        assert set(zip(pa.tolist(), pb.tolist())) == _brute_pairs(arr, w)
        assert window_match_counts(arr, w).sum() == pa.shape[0]


def test_window_value_counts_brute_force():
    arr = interleave(generate_stores(2, duration=10.0, n_items=15, seed=4))
    w = 3.0
    got = window_value_counts(arr, w)
    for i in range(0, len(arr), 7):
        m = (arr.item == arr.item[i]) & (arr.seq <= i) & (arr.ts > arr.ts[i] - w)
        assert got[i] == m.sum()


def test_range_queries_selectivity():
    (s,) = generate_stores(1, duration=120.0, seed=7)
    qs = make_range_queries(s.item, 50, seed=1)
    sel = [((s.item >= lo) & (s.item <= hi)).mean() for lo, hi in qs]
    assert min(sel) >= 0.05 and max(sel) <= 0.10
    assert qs == make_range_queries(s.item, 50, seed=1)


@pytest.mark.parametrize("kw", [{"n_stores": 0}, {"duration": -1.0}, {"mean_interarrival": 0.0},
                                {"n_items": 1}, {"drift_frac": 2.0}])
def test_bad_arguments_raise(kw):
    with pytest.raises(SketchQLError):
        generate_stores(**kw)
