"""Build the :class:`~sketchql.index.StreamIndex` of a ``CREATE SUMMARY`` per partition.

Two engines, same bytes (``build_index(..., engine=)``; ``"auto"`` takes the
JVM one when the session has the jar and the column types are read there):

* ``"jvm"`` (:mod:`sketchql.spark.index_jvm`): the executors select the rows
  the index keeps (nulls counted, expired rows dropped, row ids generated) in
  one Spark job with no Python worker, and the driver ingests them into one
  index -- the one-process build itself, no merge involved;
* ``"arrow"`` (this module): the per-partition ``mapInArrow`` build below.

With the Arrow engine, each partition buffers its rows ``(value, ts, row_id)`` (nulls skipped and
counted), puts them in ``(ts, row_id)`` order (a no-op check when the input is
already time-ordered) and ingests them into a fresh index; partial indexes are
merged with ``StreamIndex.merge`` in a tree.  With the default structure T3
(fixed zones aligned to epoch multiples of T1 / g1_zones) the merged index is
the index of all rows ingested in ``(ts, row_id)`` order in one process -- its
count sketches byte-identical and its ``to_bytes()`` equal (the index's merge
contract; it also holds for T4, by replaying G1).

Row ids: a ``row_id_col`` of the input (integers, unique), or else generated
by Spark's ``monotonically_increasing_id()`` (partition index << 33 + position:
unique, deterministic for a given input partitioning).  When no JVM filter
runs, the generated ids are not shipped: each worker recomputes them from its
partition index and the rows' positions (:class:`IndexBuilder`, ``rid=None``),
one column less across the JVM -> Python boundary.

Per partition (always, also with ``prune=False``): rows with ``ts <= (newest
ts of the partition) - margin`` are not ingested (the merged clock is at least
the partition's, so they are expired there too; same argument and margin as
below), and the rest is ingested in time-ordered chunks, the next one hashed
ahead on a helper thread (:mod:`sketchql.spark.driver_ingest`: same index as
one call).  On time-ordered input
(each partition a time range) this skips most of the ingest of the older
partitions even without the JVM aggregate.

Pruning expired history (``prune=True``, default): the index drops old
tuples by whole zones of its coarsest granularity, so after an ingest ending
at ``t_max`` only G1 periods from ``first_kept_period(t_max)`` on are left
(:mod:`sketchql.spark.retention`: the exact cut, and why skipping the rows
before it gives the same bytes).  So one cheap JVM aggregate first finds the
newest timestamp ``t_max`` (plus ``min_ts``, the largest row id and the row
count), and rows with a valid key and ``ts <= t_max - margin``
(``retention.prune_margin``, e.g. 130 s for 10 s x COLLAPSE(2, 4); every such row is
before the cut) are filtered out in the JVM before ``mapInArrow``; the
ingest then applies the exact cut.  The merged index is unchanged (the tests check
``to_bytes`` against a one-process ingest of *all* rows); the only state such
rows leave behind is the row-id counter, restored from the aggregate's
largest row id.  ``rows`` still counts them.  This skips both the JVM ->
Python transfer and the ingest of rows the declaration does not keep -- the
bulk of a long input whose declaration covers minutes.

Memory: a partition's rows are buffered (24 bytes per row plus the key) before
ingest; repartition huge inputs so partitions stay within executor memory.
The merged index holds only the history the declaration covers (older tuples
are dropped by COLLAPSE/expiry), so the driver receives bounded results.

>>> # doctest: +SKIP
>>> spec = parse_summary_declaration("CREATE SUMMARY s ON ev (item) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)")
>>> res = build_index(spark.read.parquet("events/"), spec, "ts")
>>> res.summary.estimate(np.array([42]), 0.0, 100.0)
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import SummaryError
from .build import _KEY_TYPES, _TS_TYPES, BuildResult, build, resolve_column
from .declaration import SummarySpec, parse_summary_declaration
from .driver_ingest import INGEST_CHUNK, ingest_rows  # noqa: F401  (re-exported)
from .retention import prune_margin as retention_margin
from .partition import SparkInputError, _partial_row, key_array, seconds_array

_RID_TYPES = {"ByteType", "ShortType", "IntegerType", "LongType"}
# timestamp types whose seconds Spark SQL computes exactly as seconds_array() does
_PRUNE_TS_TYPES = {"ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType",
                   "TimestampType", "DateType"}
ROW_ID = "__sketchql_row_id"


def _index_api():
    from ..index import IndexConfig, StreamIndex, SummaryDeclaration  # the index room (below spark)

    return IndexConfig, StreamIndex, SummaryDeclaration


def make_declaration(spec: SummarySpec):
    _, _, SummaryDeclaration = _index_api()
    return SummaryDeclaration(spec.name, spec.stream, spec.attr, granularity=spec.granularity,
                              rate=spec.rate, depth=spec.depth)


def default_config(**overrides):
    IndexConfig, _, _ = _index_api()
    return IndexConfig(**{"structure": "T3", **overrides})


class IndexBuilder:
    """Per-partition builder: buffer, drop expired rows, order by (ts, row id), ingest in chunks.

    Usable without Spark.  ``rid=None``: the row ids are generated here, equal
    to Spark's ``monotonically_increasing_id() + rid_base`` of the same rows
    (``partition << 33`` plus the row's position in the partition, null rows
    included), so that column need not cross the JVM -> Python boundary.
    ``prune_margin`` (not None): rows the index cannot hold once its clock
    reaches this partition's newest time (:mod:`~sketchql.spark.retention`; the
    merged clock is later, the cut only moves forward) are not ingested; the
    partial keeps their row-id counter (see "Pruning").
    """

    def __init__(self, decl_dict: dict, config_dict: dict, key: str, ts: str, rid: str | None,
                 prune_margin: float | None = None, partition: int = 0, rid_base: int = 0):
        self.decl_dict, self.config_dict = decl_dict, config_dict
        self.key, self.ts, self.rid = key, ts, rid
        self.prune_margin = None if prune_margin is None else float(prune_margin)
        self.rid_next = (int(partition) << 33) + int(rid_base)  # generated ids: next row's id
        self.vals: list[np.ndarray] = []
        self.tss: list[np.ndarray] = []
        self.rids: list[np.ndarray] = []
        self.null_keys = 0
        self.null_ts = 0
        self.max_rid = -1          # largest row id of a valid row (kept or pruned)
        self.pruned = 0            # valid rows not ingested (expired, see prune_margin)

    def add_batch(self, batch) -> None:
        names = batch.schema.names
        for c in (self.key, self.ts) + ((self.rid,) if self.rid is not None else ()):
            if c not in names:
                raise SparkInputError(f"column {c!r} not in batch (has {names})")
        v, vok = key_array(batch.column(self.key))
        t, tok = seconds_array(batch.column(self.ts))
        if self.rid is None:
            r = np.arange(self.rid_next, self.rid_next + len(v), dtype=np.int64)
            self.rid_next += len(v)
        else:
            r = np.asarray(batch.column(self.rid).fill_null(-1)).astype(np.int64, copy=False)
        ok = None
        if vok is not None:
            self.null_keys += int(len(v) - vok.sum())
            ok = vok
        if tok is not None:
            # a row with a null key is counted once, as a null key
            self.null_ts += int((~tok if ok is None else (ok & ~tok)).sum())
            ok = tok if ok is None else ok & tok
        if ok is not None:
            v, t, r = v[ok], t[ok], r[ok]
        if len(v):
            self.vals.append(v)
            self.tss.append(t)
            self.rids.append(r)

    def index(self):
        """``(index, rows, min_ts, max_ts)`` of the buffered rows (``rows`` counts pruned ones)."""
        IndexConfig, StreamIndex, SummaryDeclaration = _index_api()
        ix = StreamIndex(SummaryDeclaration(**self.decl_dict), IndexConfig.from_dict(self.config_dict))
        if not self.vals:
            return ix, 0, math.nan, math.nan
        cat = lambda xs: xs[0] if len(xs) == 1 else np.concatenate(xs)
        v, t, r = cat(self.vals), cat(self.tss), cat(self.rids)
        self.vals, self.tss, self.rids = [], [], []
        n = len(v)
        lo, hi = float(t.min()), float(t.max())
        self.max_rid = int(r.max())
        self.pruned = ingest_rows(ix, v, t, r, self.decl_dict["name"], self.prune_margin is not None,
                                  self.max_rid)
        return ix, n, lo, hi

    def partial(self):
        ix, rows, lo, hi = self.index()
        return _partial_row(ix.to_bytes(), rows, self.null_keys, self.null_ts, lo, hi)


def index_mapper(decl_dict, config_dict, key, ts, rid, prune_margin=None, rid_base=0):
    """The ``mapInArrow`` function; ``rid=None`` generates Spark's monotonically_increasing_id."""

    def build_partition(batches):
        part = 0
        if rid is None:
            from pyspark import TaskContext

            part = TaskContext.get().partitionId()
        b = IndexBuilder(decl_dict, config_dict, key, ts, rid, prune_margin, part, rid_base)
        for batch in batches:
            b.add_batch(batch)
        yield b.partial()

    return build_partition


def merge_index_payloads(a: bytes, b: bytes) -> bytes:
    _, StreamIndex, _ = _index_api()
    return StreamIndex.from_bytes(a).merge(StreamIndex.from_bytes(b)).to_bytes()


class IndexJob:
    """Build the StreamIndex of a CREATE SUMMARY (see module docstring)."""

    kind = "index"

    def __init__(self, spec, timestamp_col: str, row_id_col: str | None = None, config=None,
                 name: str | None = None, prune: bool = True, engine: str = "auto", **config_overrides):
        from .jvm import ENGINES

        if engine not in ENGINES:
            raise SparkInputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
        self.engine = engine
        if isinstance(spec, str):
            spec = parse_summary_declaration(spec)
        self.spec = spec
        self.decl = make_declaration(spec)
        if config is None:
            config = default_config(**{k: v for k, v in config_overrides.items() if v is not None})
        self.config = config.validate(self.decl)
        self.key, self.ts_col, self.row_id_col = spec.attr, timestamp_col, row_id_col
        self.name = name or spec.name
        self.row_id_base = 0  # added to generated row ids (streaming: ids continue across micro-batches)
        self.prune = bool(prune)
        self._pruned = None   # (rows_in_input, min_ts, max_rid) of the last restrict() that pruned
        self.last_pruned = 0  # rows the last build skipped as expired
        self._gen_rids = False  # restrict() found no filter: the workers generate the row ids

    def before_batch(self, current) -> None:
        """Streaming hook: generated row ids of the next micro-batch start after the
        published index's (deterministic, since the published state is exactly once)."""
        if current is not None and not self.row_id_col:
            self.row_id_base = int(getattr(current, "next_row", None) or getattr(current, "_next_row", 0))

    def resolve(self, df) -> None:
        """Check and spell the key, time (and row-id) columns as ``df`` does (clear errors)."""
        self.key = resolve_column(df, self.key, "key", _KEY_TYPES)
        self.ts_col = resolve_column(df, self.ts_col, "timestamp", _TS_TYPES)
        if self.row_id_col:
            self.row_id_col = resolve_column(df, self.row_id_col, "row id", _RID_TYPES)

    def prepare(self, df):
        self.resolve(df)
        if self.row_id_col:
            return df.select(self.key, self.ts_col, self.row_id_col)
        from pyspark.sql import functions as F

        rid = F.monotonically_increasing_id()
        if self.row_id_base:
            rid = rid + F.lit(self.row_id_base)
        return df.select(self.key, self.ts_col, rid.alias(ROW_ID))

    def prune_margin(self) -> float:
        """Seconds behind (a bound of) the newest time beyond which rows cannot survive
        (:func:`sketchql.spark.retention.prune_margin`)."""
        return retention_margin(self.decl, self.config)

    def restrict(self, projected):
        """The projected rows worth sending to Python (see "Pruning" in the module docstring)."""
        self._pruned = None
        self.last_pruned = 0
        self._gen_rids = False
        out = self._restrict(projected)
        if out is projected and not self.row_id_col:
            # nothing filtered: generated ids are recomputed in the workers (IndexBuilder), so
            # the id column is not shipped (monotonically_increasing_id of the same partitions)
            self._gen_rids = True
            out = projected.select(self.key, self.ts_col)
        return out

    def _restrict(self, projected):
        if not self.prune:
            return projected
        from pyspark.sql import functions as F

        types = {f.name: type(f.dataType).__name__ for f in projected.schema.fields}
        ktype, ttype = types[self.key], types[self.ts_col]
        if ttype not in _PRUNE_TS_TYPES:
            return projected
        k, t = F.col(self.key), F.col(self.ts_col)
        rid = F.col(self.row_id_col or ROW_ID)
        if ttype == "TimestampType":
            secs = F.unix_micros(t) / F.lit(1e6)
        elif ttype == "DateType":
            secs = F.unix_date(t).cast("double") * F.lit(86400.0)
        else:
            secs = t.cast("double")
        valid = k.isNotNull() & t.isNotNull() & ~F.isnan(secs)
        if ktype in ("FloatType", "DoubleType"):
            valid = valid & ~F.isnan(k)
        agg = projected.agg(F.count(F.lit(1)).alias("n"), F.min(F.when(valid, secs)).alias("lo"),
                            F.max(F.when(valid, secs)).alias("hi"), F.max(F.when(valid, rid)).alias("rid")
                            ).collect()[0]
        if agg["hi"] is None or not (math.isfinite(agg["hi"]) and math.isfinite(agg["lo"])):
            return projected  # no valid row, or an infinite time (the ingest reports it)
        cutoff = float(agg["hi"]) - self.prune_margin()
        if not float(agg["lo"]) <= cutoff:
            return projected  # nothing old enough to prune
        self._pruned = (int(agg["n"]), float(agg["lo"]), -1 if agg["rid"] is None else int(agg["rid"]))
        return projected.where(~valid | (secs > F.lit(cutoff)))

    def finish(self, res: BuildResult) -> BuildResult:
        """Account for the pruned rows (count, first timestamp, row-id counter)."""
        if self._pruned is None:
            return res
        n_all, lo, max_rid = self._pruned
        self._pruned = None
        self.last_pruned = n_all - res.null_keys - res.null_ts - res.rows
        res.rows += self.last_pruned
        res.min_ts = lo
        ix = res.summary
        # pruned rows leave one trace in the index: the row-id counter (next_row) of a full ingest
        if hasattr(ix, "_next_row"):
            ix._next_row = max(int(ix._next_row), max_rid + 1)
        return res

    def mapper(self):
        rid = None if getattr(self, "_gen_rids", False) else (self.row_id_col or ROW_ID)
        return index_mapper(self.decl.to_dict(), self.config.to_dict(), self.key, self.ts_col,
                            rid, self.prune_margin(), self.row_id_base)

    merge_payload = staticmethod(merge_index_payloads)

    def empty(self):
        _, StreamIndex, _ = _index_api()
        return StreamIndex(self.decl, self.config)

    def decode(self, payload: bytes):
        _, StreamIndex, _ = _index_api()
        return StreamIndex.from_bytes(bytes(payload))

    def merge(self, a, b):
        return a.merge(b)

    def meta(self) -> dict:
        return {"name": self.name, "column": self.key, "timestamp_col": self.ts_col,
                "row_id_col": self.row_id_col, "declaration": self.spec.to_dict(),
                "index_config": self.config.to_dict()}


def build_index(df, spec, timestamp_col: str, row_id_col: str | None = None, config=None,
                tree_depth: int = 2, prune: bool = True, engine: str = "auto") -> BuildResult:
    """The StreamIndex of ``spec`` (a SummarySpec or the CREATE SUMMARY text) over ``df``.

    ``prune``: skip rows older than the declaration can keep (module docstring).
    ``engine``: ``"jvm"`` selects the rows in the executors and ingests them on the
    driver in one Spark job (:mod:`sketchql.spark.index_jvm`), ``"arrow"`` ingests per
    partition in Python workers (``mapInArrow``), ``"auto"`` (default) takes the JVM
    one when the session has the jar and the column types are read there.  Same bytes.
    """
    return build(df, IndexJob(spec, timestamp_col, row_id_col, config, prune=prune, engine=engine), tree_depth)


def index_estimate(ix, values, t_from=None, t_to=None) -> list[dict]:
    """Estimates from a loaded index over ``(t_from, t_to]`` (default: all it holds)."""
    tf = -math.inf if t_from is None else float(t_from)
    tt = math.inf if t_to is None else float(t_to)
    out = []
    for v in values:  # one at a time: a mix of numbers and strings must not become all strings
        arr = np.asarray([v])
        out.append({"value": v, "estimate": float(ix.estimate(arr, tf, tt)[0]),
                    "bound": float(ix.error_bound(arr, tf, tt, 0.95)[0])})
    return out
