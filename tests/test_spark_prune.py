"""Index build with pruning of expired history: same bytes as ingesting every row.

Oracle: one StreamIndex fed *all* valid rows (none pruned) in (ts, row id)
order in this process, and the Spark build with ``prune=False``.
"""
import math

import numpy as np
import pytest

from sketchql.index import StreamIndex
from sketchql.spark import IndexJob, build, build_index, parse_summary_declaration
from sketchql.spark.index_job import default_config, make_declaration

pytestmark = pytest.mark.spark

DECL = "CREATE SUMMARY p1 ON ev (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)"


def _rows(n=5000, span=4000.0, seed=1):
    rng = np.random.default_rng(seed)
    k = (rng.zipf(1.5, n) % 300).astype(np.int64)
    ts = np.round(rng.uniform(0, span, n), 1)           # ties on purpose: (ts, row id) order matters
    rid = rng.permutation(n).astype(np.int64) * 3 + 7
    kn = rng.random(n) < 0.03
    tn = rng.random(n) < 0.02
    rows = [(None if a else int(x), None if b else float(t), int(r)) for x, t, r, a, b in zip(k, ts, rid, kn, tn)]
    return rows, k, ts, rid, kn, tn


@pytest.mark.parametrize("engine", ["arrow", "auto"])
@pytest.mark.parametrize("structure", ["T3", "T4"])
def test_pruned_build_equals_full_single_process(spark, structure, engine):
    rows, k, ts, rid, kn, tn = _rows()
    ok = ~kn & ~tn
    spec = parse_summary_declaration(DECL)
    cfg = default_config(structure=structure)
    want = StreamIndex(make_declaration(spec), cfg)
    order = np.lexsort((rid[ok], ts[ok]))
    want.ingest(k[ok][order], ts[ok][order], rid[ok][order])
    df = spark.createDataFrame(rows, "k long, ts double, rid long")
    job = IndexJob(spec, "ts", row_id_col="rid", config=cfg, engine=engine)
    assert job.prune_margin() < 1000  # most of the 4000 s are pruned
    for parts in ((1, 5) if structure == "T3" else (2,)):
        res = build(df.repartition(parts), job)
        assert job.last_pruned > 0.7 * ok.sum()  # the test must exercise pruning
        assert res.summary.to_bytes() == want.to_bytes(), f"{structure}, {parts} partitions"
        assert (res.rows, res.null_keys, res.null_ts) == (int(ok.sum()), int(kn.sum()), int((tn & ~kn).sum()))
        assert (res.min_ts, res.max_ts) == (float(ts[ok].min()), float(ts[ok].max()))


def test_pruning_with_generated_row_ids_and_timestamps(spark):
    from pyspark.sql import functions as F

    rows, *_ = _rows(n=3000, span=3000.0, seed=2)
    df = spark.createDataFrame(rows, "k long, ts double, rid long").repartition(4).cache()
    full = build_index(df, DECL, "ts", prune=False)
    pruned = build_index(df, DECL, "ts")
    assert pruned.summary.to_bytes() == full.summary.to_bytes()
    assert pruned.stats() == full.stats()
    # TIMESTAMP event time: seconds computed in Spark SQL for the cutoff
    tdf = df.withColumn("t", F.timestamp_seconds("ts"))
    a = build_index(tdf, DECL, "t", "rid", prune=False)
    b = build_index(tdf, DECL, "t", "rid")
    assert a.summary.to_bytes() == b.summary.to_bytes() and a.stats() == b.stats()
    df.unpersist()


def test_nothing_to_prune_and_all_null(spark):
    df = spark.createDataFrame([(1, 5.0, 0), (2, 6.0, 1)], "k long, ts double, rid long")
    job = IndexJob(DECL, "ts", "rid")
    assert job.restrict(job.prepare(df)) is not None and job._pruned is None
    nul = spark.createDataFrame([(None, 5.0, 0), (1, None, 1)], "k long, ts double, rid long")
    res = build_index(nul, DECL, "ts", "rid")
    assert (res.rows, res.null_keys, res.null_ts) == (0, 1, 1) and math.isnan(res.min_ts)
