"""CompiledSHJ (sketchql/operators/promising/shj_compiled.py): the same join,
drops and pairs as SimpleSHJ, compiled."""
import numpy as np
import pytest

from sketchql.approx import TimeBudget, WorkBudget, evaluate_join, replay
from sketchql.data import exact_join_pairs, generate_stores, interleave
from sketchql.operators.promising import SimpleSHJ
from sketchql.operators.promising.shj_compiled import CompiledSHJ


def _sorted(a, b):
    o = np.lexsort((b, a))
    return a[o], b[o]


@pytest.fixture(scope="module")
def arr():
    return interleave(generate_stores(2, duration=60.0, n_items=50, seed=4))


@pytest.mark.parametrize("n_buckets", [None, 8])
@pytest.mark.parametrize("small_buffer", [False, True])
def test_unlimited_is_exact_join(arr, n_buckets, small_buffer):
    op = CompiledSHJ(window=5.0, n_buckets=n_buckets)
    if small_buffer:   # exercise the kernel's stop / flush / grow / resume path
        op._obuf(4)
    replay(arr, {"c": op}, WorkBudget.unlimited(), tick_seconds=0.25)
    ea, eb = exact_join_pairs(arr, 5.0)
    a, b = _sorted(*op.pairs())
    assert np.array_equal(a, ea) and np.array_equal(b, eb)
    st = op.stats()
    assert st["dropped"] == 0 and st["outputs"] == ea.shape[0] and st["processed"] == st["tuples_in"] == len(arr)
    assert st["rebuilds"] >= 1   # expired entries were dropped on a rebuild (window 5 s of a 60 s stream)
    res = op.result()
    assert np.array_equal(np.sort(res["rid_a"]), np.sort(ea))
    assert np.all(np.abs(res["ts_a"] - res["ts_b"]) < 5.0)
    assert np.array_equal(res["found_at"], np.maximum(res["ts_a"], res["ts_b"]))


def test_other_streams_ignored():
    arr3 = interleave(generate_stores(3, duration=30.0, n_items=40, seed=2))
    op = CompiledSHJ(window=4.0, streams=(0, 2))
    replay(arr3, {"c": op}, WorkBudget.unlimited(), batch_size=16)
    ea, eb = exact_join_pairs(arr3, 4.0, a=0, b=2)
    a, b = _sorted(*op.pairs())
    assert np.array_equal(a, ea) and np.array_equal(b, eb)


@pytest.mark.parametrize("ups,max_backlog,n_buckets", [(5, 0.0, None), (20, 10.0, None), (60, 0.0, 8),
                                                       (60, 10.0, None), (200, 3.0, 8)])
def test_unit_budget_same_as_simple_shj(arr, ups, max_backlog, n_buckets):
    c = CompiledSHJ(window=5.0, max_backlog=max_backlog, n_buckets=n_buckets)
    s = SimpleSHJ(window=5.0, max_backlog=max_backlog, n_buckets=n_buckets)
    replay(arr, {"c": c, "s": s}, WorkBudget(units_per_second=ups), tick_seconds=0.25)
    ca, cb = _sorted(*c.pairs())
    sa, sb = _sorted(*s.pairs())
    assert np.array_equal(ca, sa) and np.array_equal(cb, sb)
    cs, ss = c.stats(), s.stats()
    for k in ("dropped", "processed", "compares", "tuples_in", "outputs"):
        assert cs[k] == ss[k], k
    assert cs["work"] == pytest.approx(ss["work"])
    assert cs["dropped"] > 0


def test_wall_clock_exact_subset_no_duplicates():
    arr = interleave(generate_stores(2, duration=30.0, mean_interarrival=0.01, seed=1))
    op = CompiledSHJ(window=60.0, max_backlog=1e-5)
    replay(arr, {"c": op}, TimeBudget(fraction=2e-4, wall_clock=True), tick_seconds=0.25)
    ev = evaluate_join(arr, 60.0, *op.pairs())
    assert ev["invalid"] == 0 and ev["duplicates"] == 0
    st = op.stats()
    assert st["dropped"] > 0 and 0 < ev["pct_output"] < 100.0
    assert st["charged_seconds"] >= st["kernel_seconds"] > 0
    assert st["cost_a"] > 0 and st["cost_b"] > 0


def test_rejects_bad_arguments():
    from sketchql.errors import SketchQLError

    with pytest.raises(SketchQLError):
        CompiledSHJ(window=0.0)
    with pytest.raises(SketchQLError):
        CompiledSHJ(n_buckets=0)
