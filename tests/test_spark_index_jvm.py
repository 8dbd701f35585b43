"""JVM index engine (IndexRowsJvm): same bytes and stats as the mapInArrow engine.

Oracles: one StreamIndex fed *all* valid rows in (ts, row id) order in this
process (row ids: the column, or Spark's own ``monotonically_increasing_id()``
of the same partitions), and ``engine="arrow"`` over the same DataFrame.
"""
import datetime as dt
import math

import numpy as np
import pytest

from sketchql.index import StreamIndex
from sketchql.spark import SparkInputError, build_index, parse_summary_declaration
from sketchql.spark import index_jvm
from sketchql.spark import jvm as jvm_mod
from sketchql.spark.index_job import IndexJob, default_config, make_declaration

pytestmark = pytest.mark.spark

DECL = "CREATE SUMMARY ij ON ev (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)"


@pytest.fixture(scope="module")
def jvm_spark(spark):
    if jvm_mod.java_class(spark, jvm_mod.INDEX_CLASS_NAME) is None:
        pytest.skip(f"JVM engine not on the test session's classpath: {jvm_mod.last_error()}")
    return spark


def _oracle(k, ts, rid, structure="T3"):
    ix = StreamIndex(make_declaration(parse_summary_declaration(DECL)), default_config(structure=structure))
    order = np.lexsort((rid, ts))
    ix.ingest(k[order], ts[order], rid[order])
    return ix.to_bytes()


def _both(df, ts_col, rid_col=None, structure="T3", prune=True):
    cfg = default_config(structure=structure)
    j = build_index(df, DECL, ts_col, rid_col, config=cfg, prune=prune, engine="jvm")
    a = build_index(df, DECL, ts_col, rid_col, config=cfg, prune=prune, engine="arrow")
    assert (j.engine, a.engine) == ("jvm", "arrow")
    assert j.summary.to_bytes() == a.summary.to_bytes()
    assert j.stats() == a.stats() and j.partitions == a.partitions
    return j


@pytest.mark.parametrize("structure", ["T3", "T4"])
@pytest.mark.parametrize("prune", [True, False])
def test_generated_ids_time_ranges_equal_oracle(jvm_spark, structure, prune):
    """Time-ordered partitions: each has its own local cutoff; ids generated in the JVM."""
    from pyspark.sql import functions as F

    rng = np.random.default_rng(21)
    n = 5000
    k = (rng.zipf(1.4, n) % 150).astype(np.int64)
    ts = np.round(np.sort(rng.uniform(0, 3000.0, n)), 1)
    ts[rng.random(n) < 0.02] = np.nan
    rows = [(None if i % 37 == 0 else int(x), None if i % 53 == 0 else float(t))
            for i, (x, t) in enumerate(zip(k, ts))]
    df = jvm_spark.createDataFrame(rows, "k long, ts double").repartitionByRange(4, "ts").cache()
    got = df.withColumn("rid", F.monotonically_increasing_id()).collect()
    kk = np.array([r["k"] if r["k"] is not None else -1 for r in got])
    tt = np.array([r["ts"] if r["ts"] is not None else np.nan for r in got], dtype=float)
    rr = np.array([r["rid"] for r in got])
    ok = (kk != -1) & ~np.isnan(tt)
    res = _both(df, "ts", structure=structure, prune=prune)
    assert res.summary.to_bytes() == _oracle(kk[ok], tt[ok], rr[ok], structure)
    if prune:  # the newest time from the cache's batch statistics (an upper bound) vs a scan
        cls = jvm_mod.java_class(jvm_spark, jvm_mod.INDEX_CLASS_NAME)
        t_kind = cls.timeKind(df.select("ts")._jdf.schema().fields()[0].dataType())
        assert cls.cachedNewest(df.select("k", "ts")._jdf, t_kind) >= tt[ok].max()
        assert math.isnan(cls.cachedNewest(df.select("k", (F.col("ts") + 1).alias("ts"))._jdf, t_kind))
        for cached_stats in (True, False):
            sel = index_jvm.select_rows(df.select("k", "ts"), 480.0, True, 0, cached_stats)
            assert sel.valid == ok.sum() and 0 < len(sel.keys) < ok.sum()
            assert sel.max_ts == tt[ok].max() and sel.ts.min() > tt[ok].max() - 480.0
    assert (res.rows, res.null_keys, res.null_ts) == (int(ok.sum()), int((kk == -1).sum()),
                                                      int(((kk != -1) & np.isnan(tt)).sum()))
    assert (res.min_ts, res.max_ts) == (tt[ok].min(), tt[ok].max())
    df.unpersist()


def test_row_id_column_shuffled_ties_and_pruned_counter(jvm_spark):
    rng = np.random.default_rng(4)
    n = 4000
    k = rng.integers(-50, 50, n)
    ts = np.round(rng.uniform(0, 4000.0, n), 0)              # ties: (ts, row id) order matters
    rid = rng.permutation(n).astype(np.int64) * 5 + 3
    rows = [(int(x), float(t), int(r)) for x, t, r in zip(k, ts, rid)]
    df = jvm_spark.createDataFrame(rows, "k int, ts double, rid long").repartition(3)
    job = IndexJob(DECL, "ts", row_id_col="rid", engine="jvm")
    from sketchql.spark import build

    res = build(df, job)
    assert res.engine == "jvm" and job.last_pruned > n // 2
    assert res.summary.to_bytes() == _oracle(k.astype(np.int32), ts, rid)
    assert res.summary._next_row == int(rid.max()) + 1     # a pruned row's id still counts
    _both(df, "ts", "rid")


def test_key_and_time_types(jvm_spark):
    from pyspark.sql import functions as F

    rng = np.random.default_rng(9)
    n = 1500
    ints = rng.integers(-100, 100, n)
    f = rng.normal(size=n).round(2) * 10
    f[:5] = [math.nan, -0.0, 0.0, 2.0**60, 0.5]
    secs = np.sort(rng.integers(0, 2000, n))
    rows = [(int(i), int(i) % 100, int(i) % 100, bool(i % 2), float(v), float(v), int(s), None if j % 97 == 0 else int(s))
            for j, (i, v, s) in enumerate(zip(ints, f, secs))]
    df = jvm_spark.createDataFrame(rows, "i int, sh short, b byte, bo boolean, dbl double, fl float, "
                                         "s long, sn int").repartition(3).cache()
    df = (df.withColumn("t", F.timestamp_seconds("s")).withColumn("d", F.date_from_unix_date((F.col("s") / 50).cast("int")))
          .withColumn("tntz", F.to_timestamp_ntz(F.from_unixtime("s"))).withColumn("sf", F.col("s").cast("float")))
    for key in ("i", "sh", "b", "bo", "dbl", "fl"):
        _both(df.withColumnRenamed(key, "k"), "s", "sn")
    for ts_col in ("t", "d", "sn", "sf"):
        _both(df.withColumnRenamed("i", "k"), ts_col, "s")
    _both(df.withColumnRenamed("i", "k"), "tntz", "s")
    df.unpersist()


def test_empty_all_null_and_row_id_base(jvm_spark):
    empty = jvm_spark.createDataFrame([], "k long, ts double")
    res = _both(empty, "ts")
    assert res.rows == 0 and math.isnan(res.min_ts)
    nul = jvm_spark.createDataFrame([(None, 5.0, 0), (1, None, 1), (2, float("nan"), 2)], "k long, ts double, rid long")
    res = _both(nul, "ts", "rid")
    assert (res.rows, res.null_keys, res.null_ts) == (0, 1, 2)
    # streaming: generated ids continue after a base (IndexJob.row_id_base)
    df = jvm_spark.createDataFrame([(i % 7, float(i)) for i in range(300)], "k long, ts double").repartition(2)
    out = {}
    for engine in ("jvm", "arrow"):
        job = IndexJob(DECL, "ts", engine=engine)
        job.row_id_base = 1000
        from sketchql.spark import build

        out[engine] = build(df, job).summary.to_bytes()
    assert out["jvm"] == out["arrow"]


def test_infinite_time_raises_like_arrow(jvm_spark):
    """An infinite time disables pruning (it would hide every row) and the ingest reports it."""
    df = jvm_spark.createDataFrame([(1, 5.0), (2, float("inf")), (3, 1e4)], "k long, ts double")
    for engine in ("jvm", "arrow"):
        for prune in (True, False):
            with pytest.raises(SparkInputError, match="not finite"):
                build_index(df, DECL, "ts", engine=engine, prune=prune)


def test_unsupported_types_fall_back(jvm_spark, monkeypatch):
    from decimal import Decimal

    df = jvm_spark.createDataFrame([("a", 1.0), ("b", 2.0), (None, 3.0)], "k string, ts double")
    res = build_index(df, DECL, "ts")
    assert res.engine == "arrow" and (res.rows, res.null_keys) == (2, 1)
    with pytest.raises(SparkInputError, match="engine='jvm' unavailable.*key column"):
        build_index(df, DECL, "ts", engine="jvm")
    dec = jvm_spark.createDataFrame([(1, Decimal("1.5"))], "k long, ts decimal(10,2)")
    assert build_index(dec, DECL, "ts").engine == "arrow"
    with pytest.raises(SparkInputError, match="engine must be one of"):
        build_index(df, DECL, "ts", engine="gpu")
    ints = jvm_spark.createDataFrame([(1, 1.0), (2, 2.0)], "k long, ts double")
    monkeypatch.setattr(jvm_mod, "java_class", lambda spark, name: None)
    assert build_index(ints, DECL, "ts").engine == "arrow"
    with pytest.raises(SparkInputError, match="not on this session's classpath"):
        build_index(ints, DECL, "ts", engine="jvm")


def test_read_selected_rejects_truncated_file(tmp_path):
    p = tmp_path / "rows.bin"
    head = np.array([1, 2, 0, 0, 2, 1, 0, 0], "<i8").tobytes() + np.array([0.0, 1.0], "<f8").tobytes()
    p.write_bytes(head + b"\0" * 24)  # 2 rows announced, 1 written
    with pytest.raises(SparkInputError, match="bytes for 2 rows"):
        index_jvm.read_selected(str(p), np.int64)
    p.write_bytes(head + np.array([7, 8], "<i8").tobytes() + np.array([0.0, 1.0], "<f8").tobytes()
                  + np.array([0, 1], "<i8").tobytes())
    sel = index_jvm.read_selected(str(p), np.int32)
    assert sel.keys.dtype == np.int32 and sel.keys.tolist() == [7, 8] and sel.max_rid == 1


def test_narrow_and_wide_columns_mixed_across_partitions(jvm_spark):
    """Partitions whose keys / row ids fit int32 ship narrow columns; others are widened."""
    n = 900
    part = np.arange(n) % 3
    k = np.where(part == 0, np.arange(n) * (2**40), np.arange(n) % 11)      # partition 0: wide keys
    rid = np.where(part == 1, np.arange(n) * (2**40) - 2**60, np.arange(n))  # partition 1: wide id range
    ts = np.arange(n) * 0.5
    rows = [(int(p), int(x), float(t), int(r)) for p, x, t, r in zip(part, k, ts, rid)]
    df = jvm_spark.createDataFrame(rows, "p int, k long, ts double, rid long").repartitionByRange(3, "p")
    res = _both(df, "ts", "rid")
    assert res.summary.to_bytes() == _oracle(k, ts, rid)
    narrow = df.where("p = 2")
    assert _both(narrow, "ts", "rid").summary.to_bytes() == _oracle(k[part == 2], ts[part == 2], rid[part == 2])
