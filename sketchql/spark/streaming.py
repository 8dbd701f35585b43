"""Continuous maintenance: Structured Streaming micro-batches -> published summaries.

:func:`maintain` starts ``stream_df.writeStream.foreachBatch(SummaryMaintainer(...))``.
For every micro-batch ``(batch_df, batch_id)`` and every summary job:

1. if ``batch_id`` is already among the summary's *applied batch ids* (kept in
   the store's manifest), skip it -- it is a replay;
2. otherwise build the micro-batch's partial summary per partition
   (:func:`sketchql.spark.build.build`), merge it into the published one and
   publish the result together with ``batch_id`` in one atomic manifest
   commit (:class:`~sketchql.spark.store.StorePublisher`).

Exactly once across restarts: Spark's checkpoint (offset log) guarantees that
a restarted query re-runs an unfinished batch id with *the same* input and
never skips input; step 1 makes the sink idempotent for such replays, and the
atomic commit makes "summary updated" and "batch id recorded" one event.  So a
job killed at any moment and restarted from its checkpoint neither drops nor
double-counts a micro-batch.  (Batch ids are per checkpoint: keep one
checkpoint per store; a fresh checkpoint on an old store would see its batch
ids as replays -- :func:`maintain` refuses that combination unless told.)

>>> # doctest: +SKIP
>>> stream = spark.readStream.schema(schema).parquet("incoming/")
>>> q = maintain(stream, [CountSketchJob("item", name="items")], "store/", "ckpt/",
...              trigger={"availableNow": True})
>>> q.awaitTermination()
"""
from __future__ import annotations

import os

from .build import build
from .store import StoreError, StorePublisher, open_store, ranges_contain
from .summary_file import decode_summary, encode_summary


def _add_stats(old: dict, res) -> dict:
    """Accumulate the build counters of a micro-batch into the published ones."""
    out = dict(rows=int(old.get("rows", 0)) + res.rows,
               null_keys=int(old.get("null_keys", 0)) + res.null_keys,
               batches=int(old.get("batches", 0)) + 1)
    if "null_ts" in old or res.null_ts or res.min_ts == res.min_ts:
        out["null_ts"] = int(old.get("null_ts", 0)) + res.null_ts
        los = [v for v in (old.get("min_ts"), res.min_ts) if v is not None and v == v]
        his = [v for v in (old.get("max_ts"), res.max_ts) if v is not None and v == v]
        out["min_ts"] = min(los) if los else None
        out["max_ts"] = max(his) if his else None
    return out


class SummaryMaintainer:
    """The ``foreachBatch`` handler (idempotent per batch id, see module docstring)."""

    def __init__(self, jobs, publisher, tree_depth: int = 2):
        self.jobs = list(jobs) if isinstance(jobs, (list, tuple)) else [jobs]
        names = [j.name for j in self.jobs]
        if len(set(names)) != len(names):
            raise ValueError(f"summary names must be unique, got {names}")
        self.publisher = publisher if hasattr(publisher, "publish") else StorePublisher(publisher)
        self.tree_depth = tree_depth
        self.applied: list[tuple[str, int]] = []   # (summary, batch id) applied by this process
        self.skipped: list[tuple[str, int]] = []   # (summary, batch id) recognised as replays

    def __call__(self, batch_df, batch_id: int) -> None:
        batch_id = int(batch_id)
        todo = [j for j in self.jobs
                if not ranges_contain(self.publisher.applied_batches(j.name), batch_id)]
        self.skipped += [(j.name, batch_id) for j in self.jobs if j not in todo]
        if not todo:
            return
        cached = len(todo) > 1
        if cached:
            batch_df = batch_df.persist()
        try:
            for job in todo:
                self._apply(job, batch_df, batch_id)
        finally:
            if cached:
                batch_df.unpersist()

    def _apply(self, job, batch_df, batch_id: int) -> None:
        cur = self.publisher.load(job.name)
        current, old = (None, {}) if cur is None else decode_summary(cur[0])
        if hasattr(job, "before_batch"):
            job.before_batch(current)
        res = build(batch_df, job, self.tree_depth)
        summary = res.summary if current is None else job.merge(current, res.summary)
        meta = dict(job.meta(), **_add_stats(old, res), last_batch_id=batch_id)
        self.publisher.publish(job.name, encode_summary(summary, meta), meta, batch_id)
        self.applied.append((job.name, batch_id))


def _checkpoint_is_new(checkpoint: str) -> bool:
    if "://" in checkpoint and not checkpoint.startswith("file://"):
        return False  # cannot cheaply tell on a remote FS; trust the caller
    path = checkpoint[len("file://"):] if checkpoint.startswith("file://") else checkpoint
    return not os.path.isdir(os.path.join(path, "offsets")) or not os.listdir(os.path.join(path, "offsets"))


def maintain(stream_df, jobs, store, checkpoint: str, trigger: dict | None = None,
             query_name: str | None = None, allow_fresh_checkpoint: bool = False, tree_depth: int = 2):
    """Start a streaming query that keeps ``jobs``' summaries current in ``store``.

    ``trigger`` is passed to ``DataStreamWriter.trigger`` (e.g. ``{"availableNow": True}``
    or ``{"processingTime": "10 seconds"}``); ``checkpoint`` is Spark's checkpoint
    location (must be on a fault-tolerant shared FS on a cluster).
    """
    jobs = list(jobs) if isinstance(jobs, (list, tuple)) else [jobs]
    for job in jobs:
        job.prepare(stream_df)  # schema errors now, not inside the first micro-batch
    publisher = store if hasattr(store, "publish") else StorePublisher(open_store(store))
    if (not allow_fresh_checkpoint and isinstance(publisher, StorePublisher)
            and _checkpoint_is_new(checkpoint)
            and any(publisher.applied_batches(j.name) for j in jobs)):
        raise StoreError(f"store {publisher.store.root!r} already holds batches of an earlier query but "
                         f"checkpoint {checkpoint!r} is new: its batch ids would be mistaken for replays. "
                         "Reuse the old checkpoint, use a new store, or pass allow_fresh_checkpoint=True.")
    handler = SummaryMaintainer(jobs, publisher, tree_depth)
    writer = stream_df.writeStream.foreachBatch(handler).option("checkpointLocation", checkpoint)
    if query_name:
        writer = writer.queryName(query_name)
    if trigger:
        writer = writer.trigger(**trigger)
    query = writer.start()
    query.sketchql_handler = handler  # for inspection (tests, logs)
    return query
