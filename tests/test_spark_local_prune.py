"""Per-partition work of the index build: local pruning, generated row ids, chunked ingest.

Oracles: one StreamIndex fed *all* valid rows in (ts, row id) order in this
process, with the row ids Spark's own ``monotonically_increasing_id()`` gives
the same rows (materialized in the JVM and collected).
"""
import numpy as np
import pyarrow as pa
import pytest

import sketchql.spark.driver_ingest as driver_ingest_mod
from sketchql.index import StreamIndex
from sketchql.spark import IndexJob, build, build_index, parse_summary_declaration
from sketchql.spark.index_job import IndexBuilder, default_config, make_declaration

pytestmark = pytest.mark.spark

DECL = "CREATE SUMMARY lp ON ev (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)"


def _oracle(k, ts, rid, structure="T3"):
    ix = StreamIndex(make_declaration(parse_summary_declaration(DECL)), default_config(structure=structure))
    order = np.lexsort((rid, ts))
    ix.ingest(k[order], ts[order], rid[order])
    return ix


def test_builder_generates_ids_prunes_locally_and_chunks(monkeypatch):
    monkeypatch.setattr(driver_ingest_mod, "INGEST_CHUNK", 37)  # many ingest calls, hashed ahead
    rng = np.random.default_rng(3)
    n = 2000
    k = rng.integers(0, 60, n)
    ts = np.round(np.sort(rng.uniform(0, 2000.0, n)), 0)   # ties
    knull = rng.random(n) < 0.05
    job = IndexJob(DECL, "ts")
    margin = job.prune_margin()
    assert margin < 1000  # most rows are expired within this one partition
    b = IndexBuilder(job.decl.to_dict(), job.config.to_dict(), "k", "ts", None, margin, partition=3, rid_base=5)
    for a in range(0, n, 300):
        b.add_batch(pa.RecordBatch.from_pydict({"k": pa.array(k[a:a + 300], mask=knull[a:a + 300]),
                                                "ts": ts[a:a + 300]}))
    ix, rows, lo, hi = b.index()
    rid = (3 << 33) + 5 + np.arange(n)        # monotonically_increasing_id() + base, null rows counted
    ok = ~knull
    assert b.pruned > n // 2 and rows == ok.sum() and b.null_keys == knull.sum()
    assert (lo, hi) == (ts[ok].min(), ts[ok].max())
    assert ix.to_bytes() == _oracle(k[ok], ts[ok], rid[ok]).to_bytes()


@pytest.mark.parametrize("structure", ["T3", "T4"])
def test_time_ordered_partitions_generated_ids(spark, structure):
    """Range-partitioned by time: every partition has its own (smaller) local cutoff."""
    from pyspark.sql import functions as F

    rng = np.random.default_rng(11)
    n = 6000
    k = (rng.zipf(1.5, n) % 200).astype(np.int64)
    ts = np.round(np.sort(rng.uniform(0, 3000.0, n)), 1)
    rows = [(None if i % 41 == 0 else int(x), float(t)) for i, (x, t) in enumerate(zip(k, ts))]
    df = spark.createDataFrame(rows, "k long, ts double").repartitionByRange(4, "ts").cache()
    # the ids the build must reproduce: Spark's own, on the same partitions
    got = df.withColumn("rid", F.monotonically_increasing_id()).collect()
    ok = np.array([r["k"] is not None for r in got])
    kk = np.array([r["k"] or 0 for r in got])[ok]
    tt = np.array([r["ts"] for r in got])[ok]
    rr = np.array([r["rid"] for r in got])[ok]
    assert len(set(rr >> 33)) == 4
    want = _oracle(kk, tt, rr, structure).to_bytes()
    cfg = default_config(structure=structure)
    full = build_index(df, DECL, "ts", config=cfg, prune=False)
    assert full.summary.to_bytes() == want
    assert (full.rows, full.null_keys) == (int(ok.sum()), int((~ok).sum()))
    assert (full.min_ts, full.max_ts) == (tt.min(), tt.max())
    pruned = build_index(df, DECL, "ts", config=cfg)   # JVM prefilter (ids shipped) + local pruning
    assert pruned.summary.to_bytes() == want and pruned.stats() == full.stats()
    # explicit ids equal to the generated ones give the same index
    job = IndexJob(DECL, "ts", row_id_col="rid", config=cfg, prune=False)
    res = build(df.withColumn("rid", F.monotonically_increasing_id()), job)
    assert res.summary.to_bytes() == want
    df.unpersist()


def test_generated_ids_with_base_and_treereduce(spark):
    """Streaming-style id base and the executor-side treeReduce path (> driver_merge_max partitions)."""
    from pyspark.sql import functions as F

    rng = np.random.default_rng(5)
    n = 3000
    rows = [(int(x), float(t)) for x, t in zip(rng.integers(0, 90, n), np.round(rng.uniform(0, 1500.0, n), 1))]
    df = spark.createDataFrame(rows, "k long, ts double").repartition(5).cache()
    got = df.withColumn("rid", F.monotonically_increasing_id() + F.lit(1000)).collect()
    kk = np.array([r["k"] for r in got])
    tt = np.array([r["ts"] for r in got])
    rr = np.array([r["rid"] for r in got])
    want = _oracle(kk, tt, rr).to_bytes()
    job = IndexJob(DECL, "ts", prune=False)
    job.row_id_base = 1000
    from sketchql.spark.build import BuildResult, build_partials

    payload, nrows, *_ = build_partials(df, job, driver_merge_max=2)   # treeReduce on executors
    assert isinstance(payload, bytes) and job.decode(payload).to_bytes() == want and nrows == n
    res = build(df, job)                                               # driver merge
    assert isinstance(res, BuildResult) and res.summary.to_bytes() == want
    df.unpersist()
