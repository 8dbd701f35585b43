"""PTAggregate / PTSelection when the value domain equals (or is narrower
than) the predicate bounds: values outside the domain live in their own
under/overflow buckets, never in the edge buckets (regression: COUNT counted
out-of-range values), checked against brute force."""
import numpy as np
import pytest

from sketchql.approx import WorkBudget, replay
from sketchql.data import generate_stores, interleave
from sketchql.operators.promising import PTAggregate, PTSelection
from sketchql.operators.promising._miniindex import MiniIndex


@pytest.fixture(scope="module")
def stream():
    arr = interleave(generate_stores(1, duration=40.0, seed=7))
    keep = arr.ts < 39.999            # the window (20, 40] is then a union of whole 2 s zones
    return arr.take(np.flatnonzero(keep))


def _brute(arr, lo, hi, now, w):
    m = (arr.item >= lo) & (arr.item <= hi) & (arr.ts > now - w) & (arr.ts <= now)
    return arr.price[m], int(m.sum())


def test_range_buckets_keep_out_of_domain_values_apart():
    ix = MiniIndex(n_buckets=4, range_domain=(10, 20))
    b = ix.bucket_of(np.array([3, 9, 10, 12, 16, 20, 21, 500]))
    assert b.tolist() == [4, 4, 0, 0, 2, 3, 5, 5] and ix.n_buckets == 6 and ix.n_range == 4


@pytest.mark.parametrize("bounds", [(100, 400), (1, 50), (700, 2000), (250, 251)])
def test_count_with_domain_equal_to_the_predicate_is_exact(stream, bounds):
    lo, hi = bounds
    assert ((stream.item < lo) | (stream.item > hi)).sum() > 100   # there is something to leave out
    op = PTAggregate([bounds], func="count", window=20.0, domain=bounds, zone_seconds=2.0)
    replay(stream, {"a": op}, WorkBudget.unlimited(), tick_seconds=0.5)
    est, err = op.answer(0, 40.0)
    _, want = _brute(stream, lo, hi, 40.0, 20.0)
    assert est == pytest.approx(want) and err == 0.0


@pytest.mark.parametrize("func", ["sum", "avg"])
def test_sum_avg_with_domain_equal_to_the_predicate_are_exact(stream, func):
    op = PTAggregate([(100, 400)], func=func, window=20.0, domain=(100, 400), zone_seconds=2.0)
    replay(stream, {"a": op}, WorkBudget.unlimited(), tick_seconds=0.5)
    est, _ = op.answer(0, 40.0)
    v, _ = _brute(stream, 100, 400, 40.0, 20.0)
    assert est == pytest.approx(v.sum() if func == "sum" else v.mean(), rel=1e-9)


def test_query_wider_than_the_domain_still_counts_beyond_it(stream):
    # domain (100, 400) but the predicate is [50, 600]: the under/overflow buckets are partial
    op = PTAggregate([(50, 600)], func="count", window=20.0, domain=(100, 400), zone_seconds=2.0)
    replay(stream, {"a": op}, WorkBudget.unlimited(), tick_seconds=0.5)
    est, err = op.answer(0, 40.0)
    _, want = _brute(stream, 50, 600, 40.0, 20.0)
    assert est == pytest.approx(want)
    sel = PTSelection([(50, 600), (120, 130)], domain=(100, 400), window=np.inf, zone_seconds=2.0)
    replay(stream, {"s": sel}, WorkBudget.unlimited(), tick_seconds=0.5)
    sel.drain()
    for r, (lo, hi) in zip(sel.results(), [(50, 600), (120, 130)]):
        assert np.array_equal(np.sort(r), stream.seq[(stream.item >= lo) & (stream.item <= hi)])
