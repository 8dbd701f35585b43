"""The JVM engine of an index build: the rows to ingest are selected in the executors.

The ``mapInArrow`` path (:mod:`sketchql.spark.index_job`) runs two Spark jobs
(the ``t_max`` aggregate for pruning, then the Python stage) and pays the
JVM -> Arrow -> Python pipeline of every task -- together more than twice
Spark's own ``count_min_sketch`` over the same cached data, however little
each partition ingests.  Here :class:`IndexRowsJvm`
(``sketchql/spark/java/IndexRowsJvm.java``) reads Spark's internal rows
directly, with no Python worker:

* null keys (and NaN float keys) and null/NaN times are counted as the Arrow
  path counts them;
* float64 seconds use the same IEEE operations as
  :func:`~sketchql.spark.partition.seconds_array` (numbers ``(double) x``,
  ``TIMESTAMP[_NTZ]`` ``micros / 1e6``, ``DATE`` ``days * 86400.0``);
* generated row ids are ``(partition << 33) + base + position`` (Spark's
  ``monotonically_increasing_id()``); a row-id column is read (null -> -1);
* ``prune=True``: job 1 finds the newest valid time ``hi``; job 2 ships only
  the valid rows with ``ts > hi - margin`` to the driver.  On a cached input
  job 1 reads no row: the upper bound ``U >= hi`` of the time column that
  Spark keeps per cached batch gives the cutoff ``U - margin <= hi - margin``
  (a superset is kept; Python's ingest prunes again with the exact ``hi``);
  ``prune=False``: one job; partition ``p`` drops ``ts <= hi_p - margin``
  (``hi_p`` its own newest time, and the merged clock is ``>= hi_p``).

The driver hands the kept rows to Python through a local file; Python orders
them by ``(ts, row id)`` and ingests them into one
:class:`~sketchql.index.StreamIndex` (:func:`~sketchql.spark.index_job.ingest_rows`).

Why the bytes equal a one-process ingest of *all* valid rows: every row with
``ts <= hi - margin`` (``margin`` from :func:`sketchql.spark.retention.prune_margin`)
lies before the G1 period from which the index, at its final clock ``hi``, can
still hold tuples, and skipping such rows leaves the same index
(:mod:`sketchql.spark.retention`; Python then cuts exactly); the only trace such a row
leaves is the row-id counter, restored from the largest valid row id.  The
kept rows are ingested in the same ``(ts, row id)`` order as in one process,
so no merge is involved at all (the T3/T4 merge contract is not needed).

Cost model (``prune=True``): one JVM pass over the input (about the scan
Spark's own aggregate does; two when the input is not cached) + a collect of the rows within ``margin`` of
the newest time + a single-process ingest of those rows.  The merged
index holds those rows anyway, so the driver receives the same order of data
as with the Arrow path; what is lost is the executors' parallelism for that
ingest (at most the number of partitions holding recent rows -- one for a
time-ordered input).  ``engine="arrow"`` keeps the per-partition Python ingest.
The kept rows are collected (12-24 bytes each), so they count against
``spark.driver.maxResultSize``.

Supported: keys of byte/short/int/long/boolean/float/double type (same numpy
dtypes as :func:`~sketchql.spark.partition.key_array`), times of those numeric
types or TIMESTAMP/TIMESTAMP_NTZ/DATE, integer row ids; anything else (string
or decimal keys, decimal times, Spark Connect, no jar) falls back to the Arrow
path in ``engine="auto"``.
"""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass

import numpy as np

from .partition import SparkInputError

# Spark type name -> numpy dtype the Arrow path gives these keys (key_array)
KEY_DTYPES = {"LongType": np.int64, "IntegerType": np.int32, "ShortType": np.int16, "ByteType": np.int8,
              "BooleanType": np.bool_, "FloatType": np.float64, "DoubleType": np.float64}
TS_TYPES = {"LongType", "IntegerType", "ShortType", "ByteType", "FloatType", "DoubleType",
            "TimestampType", "TimestampNTZType", "DateType"}
_HEADER = 10 * 8
_KEYS_INT32, _RIDS_INT32 = 1, 2   # header flags: narrowed columns


@dataclass
class SelectedRows:
    """What :class:`IndexRowsJvm` returns: input statistics plus the rows to ingest."""

    partitions: int
    valid: int          # rows with a key and a time (ingested or pruned)
    null_keys: int
    null_ts: int
    max_rid: int        # largest row id of a valid row (-1: none)
    non_finite: int     # valid rows with an infinite time (then nothing was pruned)
    min_ts: float
    max_ts: float
    keys: np.ndarray
    ts: np.ndarray
    rids: np.ndarray


def _types(df) -> dict:
    return {f.name: type(f.dataType).__name__ for f in df.schema.fields}


def unsupported_reason(df, key: str, ts: str) -> str | None:
    """Why the JVM engine cannot build this index (None: it can)."""
    from .jvm import INDEX_CLASS_NAME, java_class, last_error

    types = _types(df)
    if types.get(key) not in KEY_DTYPES:
        return f"key column {key!r} of type {types.get(key)} is not read in the JVM"
    if types.get(ts) not in TS_TYPES:
        return f"timestamp column {ts!r} of type {types.get(ts)} is not read in the JVM"
    if java_class(df.sparkSession, INDEX_CLASS_NAME) is None:
        return (f"{INDEX_CLASS_NAME} is not on this session's classpath (create the session with "
                "sketchql.spark.config.spark_session(), or add jvm.session_conf() settings; "
                + (last_error() or "jar available") + ")")
    return None


def read_selected(path: str, key_dtype) -> SelectedRows:
    """Decode the file :meth:`IndexRowsJvm.select` wrote (little-endian; see the Java comment)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < _HEADER:
        raise SparkInputError(f"JVM index rows: {len(data)} bytes, expected at least {_HEADER}")
    head = np.frombuffer(data, "<i8", 8, 0)
    lo, hi = (float(x) for x in np.frombuffer(data, "<f8", 2, 64))
    parts, valid, nk, nt, kept, max_rid, nonfin, flags = (int(x) for x in head)
    kw = 4 if flags & _KEYS_INT32 else 8
    rw = 4 if flags & _RIDS_INT32 else 8
    table = 16 * parts if flags & _RIDS_INT32 else 0
    if len(data) != _HEADER + (kw + 8 + rw) * kept + table:
        raise SparkInputError(f"JVM index rows: {len(data)} bytes for {kept} rows")
    off = _HEADER
    raw = np.frombuffer(data, f"<i{kw}", kept, off)
    if np.dtype(key_dtype).kind == "f":
        keys = raw.view("<f8").astype(np.float64)
    else:
        keys = raw.astype(key_dtype)
    off += kw * kept
    ts = np.frombuffer(data, "<f8", kept, off).astype(np.float64)
    off += 8 * kept
    rids = np.frombuffer(data, f"<i{rw}", kept, off).astype(np.int64)
    if flags & _RIDS_INT32:  # offsets from each partition's base
        base_count = np.frombuffer(data, "<i8", 2 * parts, off + 4 * kept).reshape(parts, 2)
        if int(base_count[:, 1].sum()) != kept:
            raise SparkInputError(f"JVM index rows: partition table does not add up to {kept} rows")
        rids += np.repeat(base_count[:, 0], base_count[:, 1])
    return SelectedRows(parts, valid, nk, nt, max_rid, nonfin, lo, hi, keys, ts, rids)


def select_rows(projected, margin: float, prune: bool, rid_base: int = 0,
                cached_stats: bool = True) -> SelectedRows:
    """Run :class:`IndexRowsJvm` over ``projected`` (key, ts[, row id]) and read its rows.

    ``prune``: two jobs (the global newest time, then the rows after the global cutoff);
    else one job with per-partition cutoffs (see the Java class comment).
    ``cached_stats``: on a cached input, take the newest time from the cache's batch
    statistics instead of scanning (an upper bound: more rows kept, same index).
    """
    from .jvm import INDEX_CLASS_NAME, java_class

    cls = java_class(projected.sparkSession, INDEX_CLASS_NAME)
    if cls is None:
        raise SparkInputError(f"{INDEX_CLASS_NAME} is not on this session's classpath")
    key_dtype = KEY_DTYPES[_types(projected)[projected.columns[0]]]
    fd, path = tempfile.mkstemp(prefix="sketchql-rows-", suffix=".bin")
    os.close(fd)
    try:
        cols = projected.columns
        key_time = projected if len(cols) == 2 else projected.select(*cols[:2])
        cls.select(key_time._jdf, projected._jdf, float(margin), bool(prune), int(rid_base), path,
                   bool(cached_stats))
        return read_selected(path, key_dtype)
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass


def build_index_jvm(df, job):
    """The :class:`~sketchql.spark.build.BuildResult` of an :class:`IndexJob` built by the JVM engine."""
    from .build import BuildResult
    from .index_job import ingest_rows

    cols = [job.key, job.ts_col] + ([job.row_id_col] if job.row_id_col else [])
    sel = select_rows(df.select(*cols), job.prune_margin(), job.prune, 0 if job.row_id_col else job.row_id_base)
    ix = job.empty()
    pruned = ingest_rows(ix, sel.keys, sel.ts, sel.rids, job.name, True,
                         sel.max_rid if sel.valid else None)
    job.last_pruned = sel.valid - len(sel.keys) + pruned
    lo = sel.min_ts if sel.valid else math.nan
    hi = sel.max_ts if sel.valid else math.nan
    return BuildResult(ix, sel.valid, sel.null_keys, sel.null_ts, lo, hi, sel.partitions, job.meta(),
                       engine="jvm")
