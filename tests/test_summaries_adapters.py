"""DataSketches adapters against exact numpy answers, within their documented error."""
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketchql.errors import SummaryError, UnsupportedOperation
from sketchql.summaries import (CountSketch, FrequentItems, HLLDistinct, KLLQuantiles, Summary,
                                VarOptSample)

ALL = [lambda: KLLQuantiles(64), lambda: HLLDistinct(10), lambda: FrequentItems(6), lambda: VarOptSample(32)]


def filled(make):
    s = make()
    rng = np.random.default_rng(0)
    return s.update(rng.integers(0, 500, 3000))


@pytest.mark.parametrize("make", ALL)
def test_protocol_and_subtract_unsupported(make):
    s = filled(make)
    assert isinstance(s, Summary)
    with pytest.raises(UnsupportedOperation, match="cannot subtract.*dropping whole cells"):
        s.subtract(s.copy())
    with pytest.raises(UnsupportedOperation, match="cannot subtract"):
        s - s
    with pytest.raises(UnsupportedOperation, match="cannot compress"):
        s.compress(2)
    assert 0.0 <= s.confidence() <= 1.0
    assert s.error_bound(0.95) >= 0
    assert s.nbytes > 0


@pytest.mark.parametrize("make", ALL)
def test_roundtrip_every_summary(make):
    for s in (make(), filled(make)):
        data = s.to_bytes()
        back = type(s).from_bytes(data)
        if isinstance(s, FrequentItems):
            # DataSketches re-inserts items on deserialize: same content, bytes may be re-ordered
            assert sorted(back.heavy_hitters()) == sorted(s.heavy_hitters())
            assert back.total_weight == s.total_weight and len(back.to_bytes()) == len(data)
            q = np.arange(0, 500)
            np.testing.assert_array_equal(back.bounds(q)[0], s.bounds(q)[0])
            np.testing.assert_array_equal(back.bounds(q)[1], s.bounds(q)[1])
        else:
            assert back.to_bytes() == data
        q = np.arange(0, 50)
        np.testing.assert_array_equal(back.estimate(q), s.estimate(q))
        assert back.error_bound(0.95) == s.error_bound(0.95)


@pytest.mark.parametrize("make", ALL)
def test_from_bytes_garbage(make):
    cls = type(make())
    good = filled(make).to_bytes()
    for bad, msg in [(b"", "too short"), (b"NOPE" + bytes(20), "magic"), ("text", "expected bytes"),
                     (good[:12] + b"\xff" * 7, "corrupt"), (good[:4] + b"\x07" + good[5:], "version")]:
        with pytest.raises(SummaryError, match=msg):
            cls.from_bytes(bad)
    with pytest.raises(SummaryError, match="summary, not"):
        cls.from_bytes(CountSketchlike_other_kind(cls))
    rng = np.random.default_rng(1)
    for _ in range(100):       # random corruption: a SummaryError or a valid summary, nothing else
        blob = bytearray(good)
        for i in rng.integers(12, len(blob), 2):
            blob[i] = rng.integers(0, 256)
        try:
            cls.from_bytes(bytes(blob))
        except SummaryError:
            pass


def CountSketchlike_other_kind(cls):
    other = KLLQuantiles if cls is not KLLQuantiles else HLLDistinct
    return other().to_bytes()


@pytest.mark.parametrize("make", ALL)
def test_merge_type_and_size_mismatch(make):
    s = make()
    with pytest.raises(SummaryError, match="not a"):
        s.merge(CountSketch())
    bigger = {KLLQuantiles: KLLQuantiles(128), HLLDistinct: HLLDistinct(11),
              FrequentItems: FrequentItems(7), VarOptSample: VarOptSample(64)}[type(s)]
    with pytest.raises(SummaryError, match="differ in"):
        s.merge(bigger)


# -- KLL -----------------------------------------------------------------------------
@pytest.mark.parametrize("dist", ["normal", "zipf"])
def test_kll_quantiles_within_rank_error(dist):
    rng = np.random.default_rng(3)
    x = rng.normal(size=200_000) if dist == "normal" else rng.zipf(1.5, 200_000).astype(float)
    s = KLLQuantiles(200)
    for chunk in np.array_split(x, 7):
        s.update(chunk)
    assert s.n == len(x)
    eps = s.error_bound(0.99)
    assert 0 < eps < 0.02
    xs = np.sort(x)
    qs = np.linspace(0.01, 0.99, 25)
    got = s.quantile(qs)
    # the true inclusive rank of each returned value is within eps of the asked rank
    lo = np.searchsorted(xs, got, side="left") / len(x)
    hi = np.searchsorted(xs, got, side="right") / len(x)
    assert np.all((hi >= qs - eps) & (lo <= qs + eps))
    probe = np.quantile(x, qs)
    true_rank = np.searchsorted(xs, probe, side="right") / len(x)
    assert np.max(np.abs(s.estimate(probe) - true_rank)) <= eps
    assert isinstance(s.median(), float)


def test_kll_exact_when_small_and_weights():
    s = KLLQuantiles(200).update(np.arange(1, 101.0))
    assert s.median() == 50.0 and s.error_bound() == 0.0 and s.confidence() == 1.0
    assert s.estimate([50.0, 0.0, 100.0]).tolist() == [0.5, 0.0, 1.0]
    w = KLLQuantiles(200).update(np.array([1.0, 2.0]), weights=np.array([3, 1]))
    assert w.n == 4 and w.median() == 1.0


def test_kll_merge_equals_union():
    rng = np.random.default_rng(8)
    a, b = rng.normal(size=50_000), rng.normal(2, 1, size=50_000)
    m = KLLQuantiles(200).update(a).merge(KLLQuantiles(200).update(b))
    assert m.n == 100_000
    both = np.sort(np.concatenate([a, b]))
    true = np.searchsorted(both, m.quantile(0.5), side="right") / len(both)
    assert abs(true - 0.5) <= m.error_bound()


def test_kll_bad_input():
    s = KLLQuantiles()
    with pytest.raises(SummaryError, match="NaN value at position 2"):
        s.update(np.array([1.0, 2.0, np.nan]))
    with pytest.raises(SummaryError, match="numbers"):
        s.update(np.array(["a"]))
    with pytest.raises(SummaryError, match="1-D"):
        s.update(np.zeros((2, 2)))
    with pytest.raises(SummaryError, match="weights shape"):
        s.update(np.ones(3), np.ones(2))
    with pytest.raises(SummaryError, match="integers"):
        s.update(np.ones(2), np.array([1.0, 0.5]))
    with pytest.raises(UnsupportedOperation, match="negative weight"):
        s.update(np.ones(2), np.array([1, -1]))
    with pytest.raises(SummaryError, match="empty"):
        s.quantile(0.5)
    s.update(np.ones(3))
    with pytest.raises(SummaryError, match=r"ranks must be in \[0, 1\]"):
        s.quantile(1.5)
    with pytest.raises(SummaryError, match="k must be"):
        KLLQuantiles(2)


# -- HLL ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["int", "str", "float"])
def test_hll_distinct_within_bound(kind):
    rng = np.random.default_rng(4)
    keys = rng.zipf(1.05, 300_000)
    if kind == "str":
        keys = np.char.add("k", keys.astype(str))
    elif kind == "float":
        keys = keys + 0.5
    exact = len(np.unique(keys))
    s = HLLDistinct(12)
    for part in np.array_split(keys, 5):
        s.update(part)
    assert abs(s.distinct() - exact) <= s.error_bound(0.997)
    assert s.error_bound(0.997) < 0.1 * exact


def test_hll_canonical_keys_and_merge():
    s = HLLDistinct(12).update(np.array([1, 2, 2, 3.0])).update(np.array([3, 1]))
    assert round(s.distinct()) == 3
    a = HLLDistinct(12).update(np.arange(0, 30_000))
    b = HLLDistinct(12).update(np.arange(20_000, 50_000))
    m = a + b
    assert abs(m.distinct() - 50_000) <= m.error_bound(0.997)
    assert m.estimate([1, 2]).shape == (2,)
    with pytest.raises(SummaryError, match="3 standard deviations"):
        m.error_bound(0.9999)
    with pytest.raises(SummaryError, match="lg_k"):
        HLLDistinct(30)


# -- frequent items ------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["int", "str"])
def test_frequent_items_bounds_hold(kind):
    rng = np.random.default_rng(6)
    keys = rng.zipf(1.2, 100_000)
    if kind == "str":
        keys = np.char.add("w", keys.astype(str))
    fi = FrequentItems(8)
    for part in np.array_split(keys, 4):
        fi.update(part)
    exact = Counter(keys.tolist())
    top = [k for k, _ in exact.most_common(20)]
    est = fi.estimate(np.array(top))
    truth = np.array([exact[k] for k in top])
    assert np.all(np.abs(est - truth) <= fi.error_bound())
    lo, hi = fi.bounds(np.array(top))
    assert np.all((lo <= truth) & (truth <= hi))
    hh = fi.heavy_hitters(threshold=int(fi.error_bound()))
    assert [h[0] for h in hh[:5]] == top[:5]
    assert fi.total_weight == len(keys)


def test_frequent_items_weights_merge_and_types():
    a = FrequentItems(6).update(np.array([5, 5, 7]), weights=np.array([2, 3, 1]))
    b = FrequentItems(6).update(np.array([5.0, 9.0]))      # integral floats are int keys
    m = a + b
    assert m.estimate([5, 7, 9, 11]).tolist() == [6, 1, 1, 0]
    with pytest.raises(SummaryError, match="int keys, got a batch of float"):
        m.update(np.array([2.5]))
    f = FrequentItems(6, key_type="float").update(np.array([2.5, 3]))
    assert f.estimate([2.5, 3.0]).tolist() == [1, 1]
    with pytest.raises(SummaryError, match="key types differ"):
        FrequentItems(6).update(np.array(["a"])).merge(a)
    with pytest.raises(UnsupportedOperation, match="negative weight"):
        a.update(np.array([1]), np.array([-1]))
    with pytest.raises(SummaryError, match="NaN"):
        a.update(np.array([np.nan]))


# -- VarOpt ----------------------------------------------------------------------------
def test_varopt_exact_below_k():
    v = VarOptSample(100).update(np.array([1, 2, 2, 3]), weights=np.array([1.0, 2.0, 3.0, 0.5]))
    assert v.estimate([1, 2, 3, 4]).tolist() == [1.0, 5.0, 0.5, 0.0]
    assert v.error_bound() == 0.0 and v.confidence() == 1.0 and v.tau() == 0.0
    items, wts = v.sample()
    assert sorted(items.tolist()) == [1, 2, 2, 3] and wts.sum() == 6.5


def test_varopt_estimates_within_bound():
    rng = np.random.default_rng(9)
    keys = rng.integers(0, 10, 20_000)
    wts = rng.exponential(1.0, 20_000)
    v = VarOptSample(500)
    for part in range(4):
        sl = slice(part * 5000, (part + 1) * 5000)
        v.update(keys[sl], weights=wts[sl])
    truth = np.bincount(keys, weights=wts, minlength=10)
    est = v.estimate(np.arange(10))
    assert abs(est.sum() - wts.sum()) <= 1e-6 * wts.sum()     # HT total is exact for VarOpt
    bound = v.error_bound(0.95)
    assert 0 < bound < 0.5 * wts.sum()
    assert np.mean(np.abs(est - truth) <= bound) >= 0.9
    assert len(v.sample()[0]) == 500
    sub = v.subset_sum(lambda x: x < 5)
    assert sub["lower_bound"] <= sub["estimate"] <= sub["upper_bound"]


def test_varopt_merge_and_strings():
    a = VarOptSample(50).update(np.array(["x", "y"]), weights=np.array([1.0, 2.0]))
    b = VarOptSample(50).update(np.array(["y"]), weights=np.array([4.0]))
    m = a + b
    assert m.estimate(np.array(["x", "y", "z"])).tolist() == [1.0, 6.0, 0.0]
    assert m.total_weight == 7.0
    back = VarOptSample.from_bytes(m.to_bytes())
    assert back.estimate(np.array(["y"])).tolist() == [6.0]
    with pytest.raises(SummaryError, match="key types differ"):
        a.merge(VarOptSample(50).update(np.array([1])))
    with pytest.raises(UnsupportedOperation, match="negative weight"):
        a.update(np.array(["z"]), np.array([-1.0]))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 50), max_size=60), st.lists(st.integers(0, 50), max_size=60))
def test_frequent_items_merge_exact_when_small(a, b):
    fa = FrequentItems(8).update(np.array(a, dtype=np.int64))
    fb = FrequentItems(8).update(np.array(b, dtype=np.int64))
    c = Counter(a + b)
    q = np.arange(0, 51)
    assert (fa + fb).estimate(q).tolist() == [c.get(int(k), 0) for k in q]
