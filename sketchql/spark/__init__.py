"""sketchql.spark: build and maintain summaries per Spark partition.

* batch build -- :func:`build_countsketch` (one column, d, w, seed) and
  :func:`build_index` (the index of a ``CREATE SUMMARY``): ``mapInArrow`` runs
  the engine's numpy sketch code on each partition's Arrow batches, partial
  summaries are tree-reduced to one on the driver (byte-identical count
  sketches to a single-process build); a plain count sketch is by default
  hashed inside the JVM instead (:mod:`sketchql.spark.jvm`, same bytes, no
  Python transfer), and an index build by default selects the rows the
  declaration keeps inside the executors and ingests them on the driver
  (:mod:`sketchql.spark.index_jvm`, same bytes, no Python worker);
* continuous maintenance -- :func:`maintain` (Structured Streaming
  ``foreachBatch``, exactly once across restarts via checkpoint + idempotent
  batch ids) publishing into a summary store (:mod:`sketchql.spark.store`);
* loading -- :func:`load_summary` / :func:`read_summary`;
* CLI -- ``sketchql spark-build`` and ``sketchql load-summary``
  (:mod:`sketchql.spark.commands`); configuration and cluster settings in
  :mod:`sketchql.spark.config`.

Importing this package does not import pyspark (only building does), so
loading summaries works without Java.
"""
from .build import BuildResult, CountSketchJob, build, build_countsketch
from .index_job import IndexJob, build_index
from .declaration import SummarySpec, parse_summary_declaration
from .load import LoadedSummary, load_summary, read_summary
from .partition import SparkInputError
from .store import (ByteStore, FsspecStore, LocalStore, StoreError, StorePublisher, SummaryPublisher,
                    open_store)
from .streaming import SummaryMaintainer, maintain

__all__ = [
    "BuildResult", "CountSketchJob", "build", "build_countsketch", "IndexJob", "build_index",
    "SummarySpec", "parse_summary_declaration",
    "LoadedSummary", "load_summary", "read_summary",
    "SparkInputError",
    "ByteStore", "FsspecStore", "LocalStore", "StoreError", "StorePublisher", "SummaryPublisher", "open_store",
    "SummaryMaintainer", "maintain",
]
