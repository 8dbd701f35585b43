"""Spark build of the full index of a CREATE SUMMARY, the CLI and bad inputs.

Oracle: one StreamIndex (T3) fed all rows in (ts, row id) order in this
process; exact counts by numpy for the loaded estimates.
"""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sketchql.cli import main
from sketchql.index import StreamIndex
from sketchql.spark import (IndexJob, SparkInputError, build_index, load_summary, maintain,
                            parse_summary_declaration, read_summary)
from sketchql.spark.index_job import default_config, make_declaration

from test_spark_build import _write_files

pytestmark = pytest.mark.spark

DECL = "CREATE SUMMARY s1 ON ev (k) WITH GRANULARITY 50 SECONDS AND COLLAPSE(2, 3)"


def _oracle_index(files, spec=None):
    t = pa.concat_tables([pq.read_table(f) for f in files])
    k, ts, rid = t.column("k"), t.column("ts").to_numpy(), t.column("rid").to_numpy()
    ok = k.is_valid().to_numpy(zero_copy_only=False)
    k = k.to_numpy(zero_copy_only=False)[ok].astype(np.int64)
    ts, rid = ts[ok], rid[ok]
    order = np.lexsort((rid, ts))
    ix = StreamIndex(make_declaration(spec or parse_summary_declaration(DECL)), default_config())
    ix.ingest(k[order], ts[order], rid[order])
    return ix, int((~ok).sum()), k, ts


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("ix_in"))
    _write_files(root, n_files=4, rows=1500, seed=5)
    return root, sorted(os.path.join(root, f) for f in os.listdir(root))


def test_index_partitions_equal_single_process(spark, files):
    root, paths = files
    want, nulls, _, _ = _oracle_index(paths)
    # shuffled rows: every partition is out of time order and must be sorted by the builder
    df = spark.read.parquet(root)
    for n in (4,):  # (3 partitions: the CLI test below)
        res = build_index(df.repartition(n), DECL, "ts", row_id_col="rid")
        assert res.summary.to_bytes() == want.to_bytes(), f"{n} partitions differ"
        assert res.null_keys == nulls and res.rows == want.counters["ingested"]


def test_index_save_load_estimate(spark, files, tmp_path, capsys):
    root, paths = files
    want, _, k, ts = _oracle_index(paths)
    out = str(tmp_path / "store")
    rc = main(["spark-build", "--input", root, "--format", "parquet", "--summary", DECL, "--out", out,
               "--timestamp-col", "ts", "--row-id-col", "rid", "--keep-session", "--partitions", "3"])
    assert rc == 0
    assert "built index 's1'" in capsys.readouterr().out
    ix = load_summary(out)
    assert ix.to_bytes() == want.to_bytes()
    # answers from the loaded index: a window fully inside the retained history
    lo, hi = float(ts.max()) - 120.0, float(ts.max())
    top = np.bincount(k[(ts > lo) & (ts <= hi)]).argsort()[-3:]
    exact = np.array([np.sum((k == v) & (ts > lo) & (ts <= hi)) for v in top])
    est = ix.estimate(top, lo, hi)
    bound = ix.error_bound(top, lo, hi, 0.99)
    assert np.all(np.abs(est - exact) <= bound + 1e-9)
    rc = main(["load-summary", out, "--estimate", str(int(top[-1])), "--from", str(lo), "--to", str(hi)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert f"estimate({int(top[-1])}) = {est[-1]}" in printed and "kind: index" in printed


def test_cli_sketch_only_and_errors(spark, files, tmp_path, capsys):
    root, paths = files
    out = str(tmp_path / "cs")
    base = ["spark-build", "--input", root, "--summary", DECL, "--out", out, "--keep-session", "--no-progress"]
    assert main(base + ["--sketch-only", "--w", "256"]) == 0
    loaded = read_summary(out)
    t = pa.concat_tables([pq.read_table(f) for f in paths])
    assert loaded.meta["null_keys"] == t.column("k").null_count  # nulls counted, not crashing
    assert main(["load-summary", out, "--estimate", "1", "--json"]) == 0
    capsys.readouterr()

    # missing column (the declaration's attribute)
    bad = DECL.replace("(k)", "(nope)")
    assert main(["spark-build", "--input", root, "--summary", bad, "--out", out, "--timestamp-col", "ts",
                 "--keep-session"]) == 2
    assert "key column 'nope' not found" in capsys.readouterr().err
    # non-numeric timestamps
    assert main(base + ["--timestamp-col", "ts_str"]) == 2
    assert "timestamp column 'ts_str' has type string" in capsys.readouterr().err
    # unreadable input: missing path, and a file that is not Parquet
    assert main(["spark-build", "--input", str(tmp_path / "nothing"), "--summary", DECL, "--out", out]) == 2
    assert "does not exist" in capsys.readouterr().err
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"this is not parquet")
    assert main(["spark-build", "--input", str(junk), "--summary", DECL, "--out", out, "--timestamp-col", "ts",
                 "--keep-session"]) == 2
    assert "cannot read parquet input" in capsys.readouterr().err
    # a bad declaration names the position
    assert main(["spark-build", "--input", root, "--summary", "CREATE SUMMARY s1 ON ev k", "--out", out]) == 2
    assert "line 1" in capsys.readouterr().err


def test_null_timestamps_counted(spark):
    df = spark.createDataFrame([(1, 1.0, 0), (2, None, 1), (None, 3.0, 2), (1, 4.0, 3)],
                               "k long, ts double, rid long")
    res = build_index(df, DECL, "ts", "rid")
    assert (res.rows, res.null_keys, res.null_ts) == (2, 1, 1)
    assert res.summary.estimate(np.array([1, 2]), 0.0, 10.0).tolist() == [2.0, 0.0]


def test_index_stream_equals_batch(spark, files, tmp_path):
    root, paths = files
    want, _, _, _ = _oracle_index(paths)
    schema = spark.read.parquet(root).schema
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 2).parquet(root)
    store = str(tmp_path / "store")
    q = maintain(stream, [IndexJob(DECL, "ts", row_id_col="rid")], store, str(tmp_path / "ckpt"),
                 trigger={"availableNow": True})
    q.awaitTermination(120)
    assert [b for _, b in q.sketchql_handler.applied] == [0, 1]
    assert load_summary(store).to_bytes() == want.to_bytes()


def test_timestamp_type_is_seconds(spark):
    from pyspark.sql import functions as F

    df = spark.createDataFrame([(1, 10.5, 0), (1, 20.25, 1)], "k long, secs double, rid long")
    df = df.withColumn("t", F.timestamp_seconds("secs"))
    res = build_index(df, DECL, "t", "rid")
    assert (res.min_ts, res.max_ts) == (10.5, 20.25)


def test_index_job_rejects_bad_columns(spark):
    df = spark.createDataFrame([(1, "x", 0)], "k long, ts string, rid long")
    with pytest.raises(SparkInputError, match="timestamp column 'ts' has type string"):
        IndexJob(DECL, "ts").prepare(df)
    with pytest.raises(SparkInputError, match="timestamp column 'when' not found"):
        IndexJob(DECL, "when").prepare(df)


def test_generated_row_ids_continue_across_micro_batches(spark, tmp_path):
    from sketchql.spark import SummaryMaintainer

    df = spark.createDataFrame([(i % 3, float(i)) for i in range(20)], "k long, ts double").repartition(2)
    handler = SummaryMaintainer([IndexJob(DECL, "ts")], str(tmp_path / "store"))
    handler(df.filter("ts < 10"), 0)
    handler(df.filter("ts >= 10"), 1)
    ix = load_summary(str(tmp_path / "store"))
    rids = ix.window_tuples(-1.0, 100.0).row_ids
    assert len(rids) == 20 and len(np.unique(rids)) == 20
