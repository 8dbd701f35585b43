"""Audits of set-valued answers: recall, false positives, Hist-MSE and outlier precision vs brute force."""
from collections import Counter

import numpy as np
import pandas as pd

from sketchql.approx.audit import compare_sets


def test_compare_sets_against_brute_force():
    rng = np.random.default_rng(7)
    ex = pd.DataFrame({"k": rng.zipf(1.5, 3000) % 50, "t": rng.integers(0, 30, 3000)})
    keep = rng.random(len(ex)) < 0.7
    ap = pd.concat([ex[keep], pd.DataFrame({"k": [999, 999], "t": [1, 2]})], ignore_index=True)
    r = compare_sets(ap, ex, ["k", "t"], value_col="k", k=100, q=0.05)
    ce, ca = Counter(map(tuple, ex.to_numpy())), Counter(map(tuple, ap.to_numpy()))
    hit = sum(min(c, ca[key]) for key, c in ce.items())
    assert r["recall"] == hit / len(ex)
    assert r["fp_rate"] == (len(ap) - hit) / len(ap)
    # Hist-MSE (paper eq. 2): k equal buckets over the exact answer's value range
    lo, hi = ex["k"].min(), ex["k"].max()
    h1 = np.histogram(ex["k"], bins=100, range=(lo, hi))[0]
    h2 = np.histogram(ap["k"][(ap["k"] >= lo) & (ap["k"] <= hi)], bins=100, range=(lo, hi))[0]
    want = float((((h1 / h1.sum()) - (h2 / h2.sum())) ** 2).sum())
    assert abs(r["hist_mse"] - want) < 1e-12 * max(1.0, want) + 1e-15
    # outliers: values whose exact count is at most the 5 % quantile of the counts
    cnt = ex["k"].value_counts()
    outl = set(cnt[cnt <= np.quantile(cnt.to_numpy(), 0.05, method="lower")].index)
    assert r["outlier_precision"] == np.mean([v in outl for v in ap["k"]])


def test_compare_sets_identical_and_empty():
    ex = pd.DataFrame({"k": [1, 2, 2, 3], "t": [0.5, 1.0, 1.0, 2.0]})
    r = compare_sets(ex.copy(), ex, ["k", "t"], value_col="k")
    assert r["recall"] == 1.0 and r["fp_rate"] == 0.0 and r["hist_mse"] == 0.0
    r = compare_sets(ex.iloc[:0], ex, ["k", "t"], value_col="k")
    assert r["recall"] == 0.0 and r["hist_mse"] is None
    r = compare_sets(ex, ex.iloc[:0], ["k", "t"])
    assert r["recall"] == 1.0 and r["fp_rate"] == 1.0


def test_compare_sets_mixed_columns_and_nulls_against_brute_force():
    """Float, string and NULL-bearing columns: rows match iff equal in every column (NULL = NULL)."""
    rng = np.random.default_rng(11)
    n = 4000
    ex = pd.DataFrame({"k": rng.integers(0, 40, n),
                       "t": np.round(rng.random(n) * 5, 1),
                       "s": rng.choice(np.array(["a", "b", None], dtype=object), n),
                       "x": np.where(rng.random(n) < 0.1, np.nan, rng.integers(0, 3, n).astype(float))})
    keep = rng.random(n) < 0.6
    extra = ex.sample(300, random_state=3, replace=True)                  # duplicates beyond the exact count
    ap = pd.concat([ex[keep], extra], ignore_index=True)
    cols = ["k", "t", "s", "x"]
    r = compare_sets(ap, ex, cols)

    def canon(df):
        return Counter(tuple(None if (isinstance(v, float) and np.isnan(v)) else v for v in row)
                       for row in df[cols].itertuples(index=False, name=None))
    ce, ca = canon(ex), canon(ap)
    hit = sum(min(c, ca[key]) for key, c in ce.items())
    assert 0 < hit < len(ap)
    assert r["recall"] == hit / len(ex)
    assert r["fp_rate"] == (len(ap) - hit) / len(ap)


def test_compare_sets_with_an_empty_side_warns_nothing():
    """An empty answer next to a float/int exact one made pandas warn (FutureWarning: empty entries
    deciding a concat's dtype) on about half the pushes of a PT join (audit hQ, item 11)."""
    import warnings

    exact = pd.DataFrame({"k": np.array([1, 2, 2], np.int64), "v": [0.5, 1.5, 1.5]})
    empty = pd.DataFrame({"k": pd.Series([], dtype=float), "v": pd.Series([], dtype=float)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = compare_sets(empty, exact, ["k", "v"])
    assert r["recall"] == 0.0 and r["n_approx"] == 0 and r["n_exact"] == 3
