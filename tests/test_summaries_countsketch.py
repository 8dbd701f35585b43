"""Count sketch: linearity, merge/subtract, serialization, compression, error bounds, bad input.

Oracles: a brute-force count sketch built with np.add.at from the documented
hash layout, exact counts (np.unique / collections.Counter), np.median.
"""
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sketchql.errors import SummaryError
from sketchql.summaries import CountSketch, Summary
from sketchql.summaries.countsketch import _median_rows
from sketchql.summaries.hashing import hash_codes, key_codes

SMALL = dict(d=5, w=64, seed=3)
keys_st = st.lists(st.integers(-1000, 1000), max_size=200)
weights_st = st.integers(-50, 50)


def brute_table(keys, d, w, seed, weights=None):
    """Independent oracle: documented layout, scalar Python ints, one counter at a time."""
    cs = CountSketch(d, w, seed)
    keys = np.asarray(keys)
    wts = [1] * len(keys) if weights is None else [int(x) for x in weights]
    table = np.zeros((d, w), np.int64)
    hs = [int(x) for x in hash_codes(key_codes(keys), seed)]
    for r in range(d):
        a = cs._seeds[r] | 1
        for h, wt in zip(hs, wts):
            z = (a * h) & (2**64 - 1)
            sign = -1 if z >> 63 else 1
            bucket = (((z >> 31) & 0xFFFFFFFF) * w) >> 32
            table[r, bucket] += sign * wt
    return table


def build(keys, weights=None, **kw):
    return CountSketch(**{**SMALL, **kw}).update(np.asarray(keys, dtype=np.int64), weights)


# -- structure ------------------------------------------------------------------
def test_is_a_summary():
    assert isinstance(CountSketch(), Summary)


@pytest.mark.parametrize("d,w", [(5, 4096), (5, 100), (3, 64), (4, 33), (1, 7), (7, 128)])
def test_table_matches_brute_force(d, w):
    rng = np.random.default_rng(d * w)
    keys = rng.zipf(1.3, 3_000)
    wts = rng.integers(-5, 10, len(keys))
    assert np.array_equal(CountSketch(d, w, 9).update(keys).table, brute_table(keys, d, w, 9))
    assert np.array_equal(CountSketch(d, w, 9).update(keys, wts).table, brute_table(keys, d, w, 9, wts))


@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 6, 7])
def test_estimate_is_median_of_signed_rows(d):
    rng = np.random.default_rng(d)
    keys = rng.zipf(1.2, 30_000)
    cs = CountSketch(d, 50, 1).update(keys)
    q = np.arange(1, 300)
    idx, sgn = cs.locate(q)
    want = np.median(cs.table.reshape(-1)[idx] * sgn, axis=0)
    got = cs.estimate(q)
    assert np.array_equal(got, want)
    assert got.dtype == (np.int64 if d % 2 else np.float64)
    assert np.array_equal(cs.estimate_located(idx, sgn), want)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(-(2**40), 2**40), min_size=1, max_size=5).map(
    lambda r: r + [0] * (5 - len(r))), min_size=1, max_size=30))
def test_median5_network(rows):
    v = np.array(rows, dtype=np.int64).T
    assert np.array_equal(_median_rows(v.copy()), np.median(v, axis=0).astype(np.int64))
    assert np.array_equal(_median_rows(v[:3].copy()), np.median(v[:3], axis=0).astype(np.int64))


def test_small_counts_exact_without_collisions():
    cs = CountSketch(5, 4096, 1).update(np.array([7, 7, 7, 3]))
    assert cs.estimate(np.array([7, 3, 99])).tolist() == [3, 1, 0]
    assert cs.total == 4


def test_chunk_boundaries_do_not_matter():
    keys = np.arange(70_001) % 997          # > 4 chunks of 16k, ragged last chunk
    cs = CountSketch(5, 128, 2).update(keys)
    u, c = np.unique(keys, return_counts=True)
    assert np.array_equal(cs.table, brute_table(u, 5, 128, 2, c))
    assert np.array_equal(cs.estimate(keys), CountSketch(5, 128, 2).update(keys).estimate(keys))


def test_locate_then_update_located_equals_update():
    rng = np.random.default_rng(0)
    keys = rng.integers(0, 500, 5000)
    wts = rng.integers(-3, 4, 5000)
    a = CountSketch(5, 256, 4).update(keys, wts)
    b = CountSketch(5, 256, 4)
    idx, sgn = b.locate(keys)
    assert idx.shape == sgn.shape == (5, 5000) and set(np.unique(sgn)) <= {-1, 1}
    b.update_located(idx, sgn, wts)
    assert a.to_bytes() == b.to_bytes()
    c = CountSketch(5, 256, 4)
    c.update_located(idx, sgn)
    assert c.to_bytes() == CountSketch(5, 256, 4).update(keys).to_bytes()


def test_string_and_float_keys():
    words = np.array(["apple", "pear", "", "äpfel", "apple"])
    cs = CountSketch(5, 1024, 0).update(words)
    assert cs.estimate(np.array(["apple", "pear", "", "äpfel", "kiwi"])).tolist() == [2, 1, 1, 1, 0]
    f = CountSketch(5, 1024, 0).update(np.array([3.0, 3, 2.5]))
    assert f.estimate(np.array([3, 2.5])).tolist() == [2, 1]


# -- linearity, merge, subtract ------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(keys_st, keys_st)
def test_linearity(a, b):
    sa, sb = build(a), build(b)
    both = build(a + b)
    assert np.array_equal(sa.table + sb.table, both.table)
    assert (sa + sb).to_bytes() == both.to_bytes()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-300, 300), weights_st), max_size=200), st.lists(st.integers(0, 200), max_size=6))
def test_merge_of_any_split_is_byte_identical(items, cuts):
    keys = np.array([k for k, _ in items], dtype=np.int64)
    wts = np.array([w for _, w in items], dtype=np.int64)
    single = CountSketch(**SMALL).update(keys, wts)
    bounds = sorted({0, len(keys), *[min(c, len(keys)) for c in cuts]})
    parts = [CountSketch(**SMALL).update(keys[i:j], wts[i:j]) for i, j in zip(bounds, bounds[1:])]
    merged = CountSketch(**SMALL)
    for p in reversed(parts):               # any order
        merged.merge(p)
    assert merged.to_bytes() == single.to_bytes()


@settings(max_examples=40, deadline=None)
@given(keys_st, keys_st)
def test_subtract_inverts_merge(a, b):
    sa, sb = build(a), build(b)
    assert (sa + sb).subtract(sb).to_bytes() == sa.to_bytes()
    assert ((sa + sb) - sa).to_bytes() == sb.to_bytes()
    assert (sa - sa).to_bytes() == CountSketch(**SMALL).to_bytes()


def test_merge_and_subtract_are_in_place_and_return_self():
    a, b = build([1, 2]), build([2])
    assert a.merge(b) is a and a.estimate([2])[0] == 2
    assert a.subtract(b) is a and a.estimate([2])[0] == 1
    c = a + b
    assert c is not a and a.estimate([2])[0] == 1


def test_negative_weights_delete():
    cs = build([5, 5, 5]).update(np.array([5]), np.array([-2]))
    assert cs.estimate([5])[0] == 1 and cs.total == 1


def test_large_weights_stay_exact():
    keys = np.arange(40) % 7
    wts = np.full(40, 2**58, dtype=np.int64) * np.where(np.arange(40) % 2, 1, -1)
    cs = CountSketch(5, 64, 1).update(keys, wts)
    assert np.array_equal(cs.table, brute_table(keys, 5, 64, 1, wts))
    b = CountSketch(5, 64, 1)
    b.update_located(*b.locate(keys), wts)
    assert b == cs


# -- serialization / memory -------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(-10**6, 10**6), weights_st), max_size=100),
       st.integers(1, 7), st.integers(1, 300), st.integers(0, 2**64 - 1))
def test_roundtrip(items, d, w, seed):
    cs = CountSketch(d, w, seed)
    if items:
        cs.update(np.array([k for k, _ in items]), np.array([x for _, x in items]))
    data = cs.to_bytes()
    back = CountSketch.from_bytes(data)
    assert back == cs and back.to_bytes() == data and back.total_abs == cs.total_abs
    assert np.array_equal(back.estimate(np.arange(-5, 5)), cs.estimate(np.arange(-5, 5)))


def test_bytes_layout_is_pinned():
    import hashlib
    cs = CountSketch(5, 64, 11).update(np.array([1, 2, 2, 3, 3, 3]))
    assert hashlib.sha256(cs.to_bytes()).hexdigest() == \
        "7267f7795044e654c3960b35fcded50c0d70eaa8fee789073818e33a8c4c1a88"


def test_roundtrip_with_heavy_hitters():
    cs = CountSketch(5, 512, 1, track_heavy=3).update(np.array(["a"] * 5 + ["b"] * 3 + ["c", "d"]))
    back = CountSketch.from_bytes(cs.to_bytes())
    assert back.heavy_hitters() == cs.heavy_hitters() == [("a", 5), ("b", 3), ("c", 1)]


@pytest.mark.parametrize("d,w", [(5, 4096), (1, 1), (3, 1000)])
def test_nbytes_is_counters_plus_constant(d, w):
    cs = CountSketch(d, w, 0)
    assert cs.nbytes == d * w * 8 + CountSketch.OVERHEAD
    assert CountSketch.OVERHEAD < 64
    cs.update(np.arange(10_000))
    assert cs.nbytes == d * w * 8 + CountSketch.OVERHEAD == len(cs.to_bytes())
    assert cs.table.dtype == np.int64 and cs.table.nbytes == d * w * 8


@pytest.mark.parametrize("data, msg", [
    (b"", "too short"),
    (b"XXXX" + bytes(60), "not a count sketch"),
    (None, "expected bytes"),
])
def test_from_bytes_garbage(data, msg):
    with pytest.raises(SummaryError, match=msg):
        CountSketch.from_bytes(data)


def test_from_bytes_truncated_trailing_and_version():
    good = build([1, 2, 3]).to_bytes()
    with pytest.raises(SummaryError, match="truncated"):
        CountSketch.from_bytes(good[:-1])
    with pytest.raises(SummaryError, match="trailing"):
        CountSketch.from_bytes(good + b"\x00")
    with pytest.raises(SummaryError, match="version"):
        CountSketch.from_bytes(good[:4] + b"\x09\x00" + good[6:])
    with pytest.raises(SummaryError, match="corrupt header"):
        CountSketch.from_bytes(good[:6] + b"\x00\x00" + good[8:])   # d = 0


def test_from_bytes_random_garbage_never_crashes_otherwise():
    rng = np.random.default_rng(0)
    good = CountSketch(3, 8, 1, track_heavy=2).update(np.array([1, 1, 2])).to_bytes()
    for _ in range(200):
        blob = bytearray(good)
        for i in rng.integers(0, len(blob), 3):
            blob[i] = rng.integers(0, 256)
        try:
            CountSketch.from_bytes(bytes(blob))
        except SummaryError:
            pass


# -- compression -------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(keys_st, st.sampled_from([(64, 2), (64, 4), (96, 2), (96, 3), (30, 5)]))
def test_compress_equals_direct_build(keys, wf):
    w, f = wf
    big = CountSketch(5, w, 8).update(np.array(keys, dtype=np.int64))
    small = CountSketch(5, w // f, 8).update(np.array(keys, dtype=np.int64))
    assert big.compress(f).to_bytes() == small.to_bytes()


def test_compress_bad_factor():
    for bad in (3, 0, -2, 2.5, True):
        with pytest.raises(SummaryError, match="factor"):
            CountSketch(5, 64, 0).compress(bad)


# -- accuracy: error bound, F2, inner product, heavy hitters ------------------------------
def _exact(keys):
    u, c = np.unique(keys, return_counts=True)
    return u, c


@pytest.mark.parametrize("dist", ["zipf", "uniform"])
@pytest.mark.parametrize("conf", [0.9, 0.95])
def test_error_bound_holds_on_enough_items(dist, conf):
    rng = np.random.default_rng(11)
    keys = rng.zipf(1.1, 200_000) if dist == "zipf" else rng.integers(0, 20_000, 200_000)
    u, c = _exact(keys)
    for seed in range(3):
        cs = CountSketch(5, 512, seed).update(keys)
        err = np.abs(cs.estimate(u) - c)
        bound = cs.error_bound(conf)
        assert np.mean(err <= bound) >= conf, (dist, seed, bound)
        # and the bound is not vacuous: well below the stream length
        assert bound < 0.2 * len(keys)


def test_error_bound_against_true_f2_eps_norm():
    rng = np.random.default_rng(5)
    keys = rng.zipf(1.3, 100_000)
    u, c = _exact(keys)
    cs = CountSketch.from_error(eps=0.05, delta=0.05, seed=1).update(keys)
    assert cs.w == 1200 and cs.d == 5
    err = np.abs(cs.estimate(u) - c)
    assert np.mean(err <= 0.05 * np.sqrt((c.astype(float) ** 2).sum())) >= 0.95


def test_f2_and_inner_product_close_to_exact():
    rng = np.random.default_rng(2)
    a, b = rng.zipf(1.5, 50_000), rng.zipf(1.5, 50_000)
    ca, cb = Counter(a.tolist()), Counter(b.tolist())
    f2 = sum(v * v for v in ca.values())
    ip = sum(v * cb.get(k, 0) for k, v in ca.items())
    sa, sb = CountSketch(5, 2048, 7).update(a), CountSketch(5, 2048, 7).update(b)
    assert abs(sa.f2() - f2) <= 0.1 * f2
    assert abs(sa.inner_product(sb) - ip) <= 0.1 * np.sqrt(f2 * sum(v * v for v in cb.values()))


def test_confidence_in_range_and_grows_with_width():
    keys = np.random.default_rng(0).integers(0, 5000, 50_000)
    narrow, wide = CountSketch(5, 64, 1).update(keys), CountSketch(5, 4096, 1).update(keys)
    assert 0 <= narrow.confidence() < wide.confidence() <= 1
    assert CountSketch().confidence() == 1.0
    assert narrow.error_bound(0.99) > narrow.error_bound(0.8) > 0


def test_heavy_hitters_match_exact_top_k():
    rng = np.random.default_rng(4)
    batches = [rng.zipf(1.3, 20_000) for _ in range(5)]
    cs = CountSketch(5, 2048, 1, track_heavy=5)
    for bt in batches:
        cs.update(bt)
    u, c = _exact(np.concatenate(batches))
    top = u[np.argsort(-c)[:5]]
    hh = cs.heavy_hitters()
    assert [k for k, _ in hh] == top.tolist()
    for k, est in hh:
        assert abs(est - c[u == k][0]) <= cs.error_bound(0.99)
    with pytest.raises(SummaryError, match="track_heavy"):
        CountSketch().heavy_hitters()


# -- bad arguments -----------------------------------------------------------------------
@pytest.mark.parametrize("kw, msg", [
    (dict(d=0), "depth d"), (dict(w=0), "width w"), (dict(seed=-1), "seed"),
    (dict(d=2.5), "depth d"), (dict(w="8"), "width w"), (dict(track_heavy=-1), "track_heavy"),
])
def test_bad_constructor_args(kw, msg):
    with pytest.raises(SummaryError, match=msg):
        CountSketch(**kw)


def test_bad_update_args():
    cs = CountSketch(5, 64, 0)
    with pytest.raises(SummaryError, match="1-D"):
        cs.update(np.zeros((3, 2)))
    with pytest.raises(SummaryError, match=r"weights shape \(2,\) does not match 3 values"):
        cs.update(np.arange(3), np.ones(2))
    with pytest.raises(SummaryError, match="NaN key at position 1"):
        cs.update(np.array([1.0, np.nan]))
    with pytest.raises(SummaryError, match="finite integers.*position 1"):
        cs.update(np.arange(2), np.array([1.0, 0.5]))
    with pytest.raises(SummaryError, match="finite integers"):
        cs.update(np.arange(2), np.array([1.0, np.inf]))
    with pytest.raises(SummaryError, match="NaN"):
        cs.estimate(np.array([np.nan]))
    with pytest.raises(SummaryError, match="locate"):
        cs.update_located(np.zeros((4, 2), np.int64), np.ones((4, 2), np.int64))
    assert cs.total == 0 and not cs.table.any(), "failed updates must not change the sketch"


@pytest.mark.parametrize("other, msg", [
    (CountSketch(5, 64, 1), "seed=0 vs 1"),
    (CountSketch(5, 32, 0), "w=64 vs 32"),
    (CountSketch(3, 64, 0), "d=5 vs 3"),
    ("nope", "not a CountSketch"),
])
def test_mismatched_merge(other, msg):
    cs = CountSketch(5, 64, 0)
    for op in (cs.merge, cs.subtract, cs.inner_product):
        with pytest.raises(SummaryError, match=msg):
            op(other)


def test_error_bound_bad_confidence():
    for bad in (0, 1, 1.5, -0.1):
        with pytest.raises(SummaryError, match="confidence"):
            CountSketch().error_bound(bad)


def test_from_error_bad_args():
    with pytest.raises(SummaryError, match="eps"):
        CountSketch.from_error(0, 0.1)
