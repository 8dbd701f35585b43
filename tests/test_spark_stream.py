"""Continuous maintenance: a file-source stream of micro-batches publishes the
same summary as the batch build of the same files, also across restarts from
the checkpoint, a replayed (uncommitted) batch id and a re-delivered batch id.
"""
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sketchql.spark import (CountSketchJob, StorePublisher, StoreError, SummaryMaintainer, build,
                            maintain, read_summary)
from sketchql.summaries import CountSketch

from test_spark_build import _write_files

pytestmark = pytest.mark.spark

D, W, SEED = 3, 256, 4


def _oracle(files):
    t = pa.concat_tables([pq.read_table(f) for f in files])
    k = t.column("k")
    mask = k.is_valid().to_numpy(zero_copy_only=False)
    return CountSketch(D, W, SEED).update(k.to_numpy(zero_copy_only=False)[mask].astype(np.int64)), int((~mask).sum())


class CrashingPublisher(StorePublisher):
    """Dies inside the sink while publishing ``crash_at``: after writing the new
    summary file, before the manifest commit (the worst moment)."""

    def __init__(self, store, crash_at):
        super().__init__(store)
        self.crash_at = crash_at

    def publish(self, name, file_bytes, meta, batch_id=None):
        if batch_id == self.crash_at:
            self.store.write_atomic(f"{name}.99999999.sqs", file_bytes)  # orphan, never committed
            raise RuntimeError(f"simulated crash in batch {batch_id}")
        super().publish(name, file_bytes, meta, batch_id)


def _run(spark, src, store, ckpt, schema, expect_failure=False):
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(src)
    q = maintain(stream, [CountSketchJob("k", D, W, SEED, name="items")], store, ckpt,
                 trigger={"availableNow": True})
    try:
        q.awaitTermination(120)
    except Exception:
        assert expect_failure
    assert (q.exception() is not None) == expect_failure
    return q.sketchql_handler


def _files(src, upto):
    return [os.path.join(src, f"part-{i:04d}.parquet") for i in range(upto)]


def test_stream_equals_batch_and_survives_restarts(spark, tmp_path):
    src, store, ckpt = str(tmp_path / "src"), str(tmp_path / "store"), str(tmp_path / "ckpt")
    _write_files(src, n_files=3, rows=800, seed=1)
    schema = spark.read.parquet(src).schema

    # run 1: three files -> three micro-batches
    h1 = _run(spark, src, store, ckpt, schema)
    assert [b for _, b in h1.applied] == [0, 1, 2]
    got = read_summary(store)
    want, nulls = _oracle(_files(src, 3))
    batch = build(spark.read.parquet(src), CountSketchJob("k", D, W, SEED)).summary
    assert got.summary.to_bytes() == want.to_bytes() == batch.to_bytes()
    assert got.meta["null_keys"] == nulls and got.meta["applied_batches"] == [[0, 2]]

    # run 2: two new files; the job is killed inside the sink during batch 4
    _write_files(src, n_files=2, rows=800, seed=2, start=3)
    h2 = _run(spark, src, CrashingPublisher(store, 4),
              ckpt, schema, expect_failure=True)
    assert [b for _, b in h2.applied] == [3]
    assert read_summary(store).summary.to_bytes() == _oracle(_files(src, 4))[0].to_bytes()

    # run 3: restart from the checkpoint: Spark replays batch 4, applied once
    h3 = _run(spark, src, store, ckpt, schema)
    assert h3.applied == [("items", 4)] and h3.skipped == []
    want, nulls = _oracle(_files(src, 5))
    got = read_summary(store)
    assert got.summary.to_bytes() == want.to_bytes()
    assert got.meta["null_keys"] == nulls and got.meta["applied_batches"] == [[0, 4]]
    # the crashed attempt's orphan file was garbage-collected by the next commit
    assert sorted(n for n in os.listdir(store) if n.endswith(".sqs")) == [got.meta["file"]]

    # run 4: a crash after our commit but before Spark's (drop its commit marker):
    # Spark replays batch 4 with the same files -> recognised and skipped
    for marker in ("4", ".4.crc"):
        if os.path.exists(os.path.join(ckpt, "commits", marker)):
            os.remove(os.path.join(ckpt, "commits", marker))
    h4 = _run(spark, src, store, ckpt, schema)
    assert h4.skipped == [("items", 4)] and h4.applied == []
    assert read_summary(store).summary.to_bytes() == want.to_bytes()

    # the same batch id delivered again directly to the sink: a no-op
    again = SummaryMaintainer([CountSketchJob("k", D, W, SEED, name="items")], store)
    again(spark.read.parquet(src), 2)
    assert again.skipped == [("items", 2)] and again.applied == []
    assert read_summary(store).summary.to_bytes() == want.to_bytes()


def test_fresh_checkpoint_on_used_store_is_refused(spark, tmp_path):
    src, store = str(tmp_path / "src"), str(tmp_path / "store")
    _write_files(src, n_files=1, rows=200, seed=3)
    schema = spark.read.parquet(src).schema
    _run(spark, src, store, str(tmp_path / "ckpt1"), schema)
    stream = spark.readStream.schema(schema).parquet(src)
    with pytest.raises(StoreError, match="checkpoint .* is new"):
        maintain(stream, [CountSketchJob("k", D, W, SEED, name="items")], store, str(tmp_path / "ckpt2"))
