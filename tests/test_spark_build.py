"""Spark batch build of count sketches: distributed == one process, byte for byte.

The oracle is the single-process ``CountSketch.update`` over the same rows
read back with pyarrow (nulls / NaN dropped), and exact counts by numpy.
"""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sketchql.spark import CountSketchJob, SparkInputError, build, build_countsketch, load_summary, read_summary
from sketchql.summaries import CountSketch

pytestmark = pytest.mark.spark

D, W, SEED = 5, 512, 11


def _write_files(root, n_files=4, rows=3000, seed=0, start=0):
    rng = np.random.default_rng(seed)
    os.makedirs(root, exist_ok=True)
    for i in range(n_files):
        k = (rng.zipf(1.4, rows) % 700).astype(np.int64)
        null = rng.random(rows) < 0.03
        f = rng.normal(size=rows).round(2)
        f[rng.random(rows) < 0.02] = np.nan
        ts = np.sort(rng.uniform((start + i) * 100.0, (start + i + 1) * 100.0, rows))
        table = pa.table({
            "k": pa.array(k, mask=null),
            "s": pa.array([f"item{x}" for x in k]),
            "f": pa.array(f),
            "ts": pa.array(ts),
            "ts_str": pa.array([str(t) for t in ts]),
            "rid": pa.array(np.arange((start + i) * rows, (start + i + 1) * rows, dtype=np.int64)),
        })
        pq.write_table(table, os.path.join(root, f"part-{start + i:04d}.parquet"))
    return root


def _oracle_keys(root, col):
    t = pq.read_table(root)
    arr = t.column(col).to_numpy(zero_copy_only=False)
    if col == "k":
        mask = t.column(col).is_valid().to_numpy(zero_copy_only=False)
        return arr[mask].astype(np.int64), int((~mask).sum())
    if col == "f":
        arr = arr.astype(np.float64)
        return arr[~np.isnan(arr)], int(np.isnan(arr).sum())
    return arr.astype(str), 0


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return _write_files(str(tmp_path_factory.mktemp("spark_in")))


def test_partition_counts_byte_identical(spark, data_dir):
    keys, nulls = _oracle_keys(data_dir, "k")
    want = CountSketch(D, W, SEED).update(keys)
    df = spark.read.parquet(data_dir)
    # neither the merge path (driver tree / executor treeReduce of any depth)
    # nor Spark-side pre-aggregation may change a byte
    for n, depth, pre, driver_max in ((1, 2, False, 16), (2, 2, True, 16), (7, 1, False, 0), (64, 3, False, 16)):
        res = build_countsketch(df.repartition(n), "k", D, W, SEED, tree_depth=depth, preaggregate=pre,
                                driver_merge_max=driver_max)
        assert pre or res.partitions == n  # (pre-aggregation re-partitions by key)
        assert res.summary.to_bytes() == want.to_bytes(), f"{n} partitions differ"
        assert (res.rows, res.null_keys) == (len(keys), nulls)
    # sanity against exact counts: the heaviest keys are estimated within the bound
    exact = np.bincount(keys)
    top = np.argsort(-exact)[:5]
    assert np.all(np.abs(res.summary.estimate(top) - exact[top]) <= res.summary.error_bound(0.99) + 1)


@pytest.mark.parametrize("col", ["s", "f"])
def test_string_and_float_keys(spark, data_dir, col):
    keys, skipped = _oracle_keys(data_dir, col)
    res = build_countsketch(spark.read.parquet(data_dir).repartition(3), col, 3, 256, 5,
                            preaggregate=(col == "f"))
    assert res.summary.to_bytes() == CountSketch(3, 256, 5).update(keys).to_bytes()
    assert res.null_keys == skipped and res.rows == len(keys)


def test_all_null_and_empty_inputs(spark):
    from pyspark.sql.types import LongType, StructField, StructType

    schema = StructType([StructField("k", LongType())])
    res = build_countsketch(spark.createDataFrame([(None,), (None,), (None,)], schema), "k", 3, 64, 0)
    assert (res.rows, res.null_keys) == (0, 3)
    assert res.summary == CountSketch(3, 64, 0)
    empty = build_countsketch(spark.createDataFrame([], schema), "k", 3, 64, 0)
    assert empty.rows == 0 and empty.summary == CountSketch(3, 64, 0)


def test_missing_column_is_a_clear_error(spark, data_dir):
    with pytest.raises(SparkInputError, match=r"key column 'nope' not found.*'k'"):
        build_countsketch(spark.read.parquet(data_dir), "nope")


def test_unsupported_key_type(spark):
    df = spark.createDataFrame([([1, 2],)], "a array<int>")
    with pytest.raises(SparkInputError, match="cannot be used as a key"):
        build_countsketch(df, "a")


def test_save_and_load_roundtrip(spark, data_dir, tmp_path):
    res = build(spark.read.parquet(data_dir), CountSketchJob("k", D, W, SEED, name="items"))
    res.save(str(tmp_path / "store"))
    loaded = read_summary(str(tmp_path / "store"))
    assert loaded.meta["name"] == "items" and loaded.meta["rows"] == res.rows
    assert load_summary(str(tmp_path / "store"), "items").to_bytes() == res.summary.to_bytes()
