"""Batch build: a DataFrame -> per-partition partial summaries -> one summary.

    df.select(cols).mapInArrow(job.mapper(), PARTIAL_DDL)   # one partial row per partition
      .rdd.treeReduce(merge_partials)                       # pairwise merges, log depth
      -> decode on the driver

(with at most 16 partitions the partial rows are collected and merged in the
same balanced tree on the driver instead -- see :func:`build_partials`).

Every partition runs the same numpy sketch code the engine runs in one
process.  Count sketches are linear (a table of counter sums), so the merged
sketch is *byte-identical* to one ``update`` over all rows in any order or
split.  The index job relies on the index's own exact merge (T3 fixed zones).

A *job* says what to build: :class:`CountSketchJob` (one column, d, w, seed)
or :class:`~sketchql.spark.index_job.IndexJob` (a ``CREATE SUMMARY``).

Engines for a plain count sketch (``engine=``): ``"jvm"`` hashes and counts
inside the executors (:mod:`sketchql.spark.jvm`, same bytes, no JVM -> Python
transfer), ``"arrow"`` is the ``mapInArrow`` path above, ``"auto"`` (default)
takes the JVM one when the session has its jar and the key type is hashed
there (ints, booleans, floats, strings, binary), else Arrow.  An index job
has the same three engines: ``"jvm"`` selects the rows to ingest in the
executors and ingests them on the driver, one Spark job and no Python worker
(:mod:`sketchql.spark.index_jvm`); ``"arrow"`` is the per-partition
``mapInArrow`` build below.

>>> # doctest: +SKIP
>>> res = build_countsketch(spark.read.parquet("events/"), "item", d=5, w=4096, seed=0)
>>> res.summary.estimate([42]), res.rows, res.null_keys
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import SummaryError
from ..summaries import CountSketch
from .partition import (PARTIAL_DDL, SparkInputError, _nanmax, _nanmin, countsketch_mapper,
                        merge_countsketch_payloads, merge_partials)
from .summary_file import encode_summary

WEIGHT = "__sketchql_weight"

# Spark SQL type names accepted for keys and for event time.
_KEY_TYPES = {"ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "DecimalType",
              "StringType", "VarcharType", "CharType", "BooleanType", "BinaryType", "DateType",
              "TimestampType", "TimestampNTZType"}
_TS_TYPES = {"ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType", "DecimalType",
             "DateType", "TimestampType", "TimestampNTZType"}


def resolve_column(df, column: str, role: str = "key", allowed=None) -> str:
    """The DataFrame's spelling of ``column``; clear errors when missing or mistyped."""
    fields = {f.name: f for f in df.schema.fields}
    name = column if column in fields else next((n for n in fields if n.lower() == column.lower()), None)
    if name is None:
        raise SparkInputError(f"{role} column {column!r} not found; the input has columns "
                              f"{', '.join(repr(n) for n in fields) or '(none)'}")
    tname = type(fields[name].dataType).__name__
    if allowed is not None and tname not in allowed:
        hint = (" (timestamps must be numeric seconds, TIMESTAMP or DATE; cast or parse the column first)"
                if role == "timestamp" else "")
        raise SparkInputError(f"{role} column {name!r} has type {fields[name].dataType.simpleString()}, "
                              f"which cannot be used as a {role}{hint}")
    return name


@dataclass
class BuildResult:
    """The merged summary plus what the build saw."""

    summary: object
    rows: int
    null_keys: int
    null_ts: int = 0
    min_ts: float = math.nan
    max_ts: float = math.nan
    partitions: int = 0
    meta: dict = field(default_factory=dict)
    engine: str = "arrow"   # how it was built ("jvm" or "arrow"); not part of the saved stats

    def stats(self) -> dict:
        out = dict(self.meta, rows=self.rows, null_keys=self.null_keys, partitions=self.partitions)
        if self.null_ts or not math.isnan(self.min_ts):
            out.update(null_ts=self.null_ts,
                       min_ts=None if math.isnan(self.min_ts) else self.min_ts,
                       max_ts=None if math.isnan(self.max_ts) else self.max_ts)
        return out

    def to_file_bytes(self) -> bytes:
        return encode_summary(self.summary, self.stats())

    def save(self, out, name: str | None = None) -> str:
        """Publish into a summary store (directory / URI); returns the summary's name."""
        from .store import StorePublisher

        name = name or self.meta.get("name") or "summary"
        StorePublisher(out).publish(name, self.to_file_bytes(), self.stats(), batch_id=None)
        return name


class CountSketchJob:
    """Build one :class:`CountSketch` (d, w, seed) over one column."""

    kind = "countsketch"

    def __init__(self, column: str, d: int = 5, w: int = 4096, seed: int = 0, name: str | None = None,
                 preaggregate: bool = False, engine: str = "auto"):
        from .jvm import ENGINES

        CountSketch(d, w, seed)  # validates d, w, seed early, on the driver
        if engine not in ENGINES:
            raise SparkInputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        self.column, self.d, self.w, self.seed = column, int(d), int(w), int(seed)
        self.name = name or f"cs_{column}"
        self.preaggregate = bool(preaggregate)
        self.engine = engine

    def prepare(self, df):
        """Validate the schema; return the projected DataFrame the mapper reads.

        ``preaggregate``: let Spark count each key first (``groupBy(key).count()``,
        a JVM hash aggregate with map-side combining) and sketch the (key, count)
        pairs with weights -- the same bytes by linearity, and far fewer rows
        cross the JVM -> Python boundary when keys repeat.  It adds a shuffle
        of the distinct keys, so it loses on near-unique keys: off by default.
        """
        self.column = resolve_column(df, self.column, "key", _KEY_TYPES)
        if self.preaggregate:
            return df.groupBy(self.column).count().withColumnRenamed("count", WEIGHT)
        return df.select(self.column)

    def mapper(self):
        return countsketch_mapper(self.column, self.d, self.w, self.seed,
                                  WEIGHT if self.preaggregate else None)

    merge_payload = staticmethod(merge_countsketch_payloads)

    def empty(self):
        return CountSketch(self.d, self.w, self.seed)

    def decode(self, payload: bytes):
        return CountSketch.from_bytes(bytes(payload))

    def merge(self, a, b):
        return a.merge(b)

    def meta(self) -> dict:
        return {"name": self.name, "column": self.column, "d": self.d, "w": self.w, "seed": self.seed}


DRIVER_MERGE_MAX = 16


def _pairwise(items, merge):
    """Balanced binary-tree reduction (log depth) of a non-empty list."""
    while len(items) > 1:
        items = [merge(items[i], items[i + 1]) if i + 1 < len(items) else items[i]
                 for i in range(0, len(items), 2)]
    return items[0]


def build_partials(df, job, tree_depth: int = 2, driver_merge_max: int = DRIVER_MERGE_MAX):
    """Run the job's mapper on every partition and tree-reduce the partial rows.

    With more than ``driver_merge_max`` partitions the partials are merged on
    the executors by ``RDD.treeReduce(depth=tree_depth)``; with few, they are
    collected and merged in a balanced tree on the driver (cheaper: no second
    Python pipeline per task).  Merges are associative and commutative, so
    both give the same bytes.

    Returns ``(summary, rows, null_keys, null_ts, min_ts, max_ts, n_partitions)``; ``summary``
    is the merged payload (bytes) after a treeReduce, the decoded merged summary after a
    driver merge, or None when there was no partition.
    """
    projected = job.prepare(df)
    restrict = getattr(job, "restrict", None)   # index jobs: skip rows the summary cannot keep
    if restrict is not None:
        projected = restrict(projected)
    parts = projected.mapInArrow(job.mapper(), PARTIAL_DDL)
    merge_payload = job.merge_payload

    def merge(a, b):
        # a partial that summarized no row is a fresh summary: the identity of merge
        # (skipping it saves decoding and re-encoding the other side)
        if a[1] == 0 or b[1] == 0:
            keep = b[0] if a[1] == 0 else a[0]
            return merge_partials(a, b, lambda x, y: keep)
        return merge_partials(a, b, merge_payload)

    try:
        n = parts.rdd.getNumPartitions()
        if n == 0:
            return None, 0, 0, 0, math.nan, math.nan, 0
        if n <= driver_merge_max:
            rows = [tuple(r) for r in parts.collect()]
            if not rows:
                return None, 0, 0, 0, math.nan, math.nan, 0
            # decode each partial once and merge the objects in the same balanced tree
            # (not decode -> merge -> encode at every step); empty partials are identities
            summaries = [job.decode(r[0]) for r in rows if r[1]] or [job.decode(rows[0][0])]
            lo = hi = None
            for r in rows:
                lo, hi = _nanmin(lo, r[4]), _nanmax(hi, r[5])
            return (_pairwise(summaries, job.merge), sum(int(r[1]) for r in rows),
                    sum(int(r[2]) for r in rows), sum(int(r[3]) for r in rows), lo, hi, n)
        else:
            out = parts.rdd.map(tuple).treeReduce(merge, depth=max(1, int(tree_depth)))
    except Exception as exc:  # surface our own errors raised on the executors clearly
        raise _unwrap_worker_error(exc) from None
    payload, rows, nk, nt, lo, hi = out
    return bytes(payload), int(rows), int(nk), int(nt), lo, hi, n


def _unwrap_worker_error(exc: Exception) -> Exception:
    text = str(exc)
    for cls in (SparkInputError, SummaryError):
        marker = f"{cls.__name__}: "
        if marker in text:
            msg = text.split(marker, 1)[1].splitlines()[0].strip()
            return cls(msg)
    return exc


def _build_index_jvm(df, job) -> BuildResult | None:
    """The JVM engine for an index job, or None when the Arrow path must run."""
    from .index_jvm import build_index_jvm, unsupported_reason

    engine = getattr(job, "engine", "auto")
    if engine == "arrow":
        return None
    job.key = resolve_column(df, job.key, "key", _KEY_TYPES)
    job.ts_col = resolve_column(df, job.ts_col, "timestamp", _TS_TYPES)
    why = unsupported_reason(df, job.key, job.ts_col)
    if why is not None:
        if engine == "jvm":
            raise SparkInputError(f"engine='jvm' unavailable: {why}")
        return None
    job.resolve(df)  # validates the row-id column (no DataFrame built: the JVM engine projects itself)
    try:
        return build_index_jvm(df, job)
    except SparkInputError:
        raise
    except Exception as exc:
        raise _unwrap_worker_error(exc) from None


def _build_jvm(df, job, tree_depth: int) -> BuildResult | None:
    """The JVM engine for a count-sketch or index job, or None when the Arrow path must run."""
    from .jvm import build_countsketch_jvm, resolve_engine

    if getattr(job, "kind", None) == "index":
        return _build_index_jvm(df, job)
    if getattr(job, "kind", None) != "countsketch":
        return None
    job.column = resolve_column(df, job.column, "key", _KEY_TYPES)
    if resolve_engine(df, job.column, job.engine, weighted=job.preaggregate) != "jvm":
        return None
    try:
        sk, rows, nk, n = build_countsketch_jvm(df, job.column, job.d, job.w, job.seed, tree_depth)
    except SparkInputError:
        raise
    except Exception as exc:
        raise _unwrap_worker_error(exc) from None
    return BuildResult(sk, rows, nk, 0, math.nan, math.nan, n, job.meta(), engine="jvm")


def build(df, job, tree_depth: int = 2, driver_merge_max: int = DRIVER_MERGE_MAX) -> BuildResult:
    """Build ``job``'s summary from ``df`` (distributed), merged on the driver."""
    res = _build_jvm(df, job, tree_depth)
    if res is not None:
        return res
    payload, rows, nk, nt, lo, hi, n = build_partials(df, job, tree_depth, driver_merge_max)
    summary = (job.empty() if payload is None else
               job.decode(payload) if isinstance(payload, (bytes, bytearray)) else payload)
    lo = math.nan if lo is None else float(lo)
    hi = math.nan if hi is None else float(hi)
    res = BuildResult(summary, rows, nk, nt, lo, hi, n, job.meta())
    finish = getattr(job, "finish", None)
    return res if finish is None else finish(res)


def build_countsketch(df, column: str, d: int = 5, w: int = 4096, seed: int = 0,
                      tree_depth: int = 2, preaggregate: bool = False,
                      driver_merge_max: int = DRIVER_MERGE_MAX, engine: str = "auto") -> BuildResult:
    """Count sketch of ``df[column]`` built per partition; byte-identical to one process.

    ``engine``: ``"auto"`` (JVM when possible, else Arrow), ``"jvm"`` (raise if
    impossible) or ``"arrow"`` (``mapInArrow``); see the module docstring.
    ``res.engine`` says which one ran.
    """
    return build(df, CountSketchJob(column, d, w, seed, preaggregate=preaggregate, engine=engine), tree_depth,
                 driver_merge_max)
