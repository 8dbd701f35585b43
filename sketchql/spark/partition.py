"""What runs inside one Spark partition: Arrow batches -> numpy -> sketch code.

No pyspark import here: these functions are shipped to the executors by
``mapInArrow`` and are also usable (and tested) without Spark.  Each partition
emits exactly one Arrow row::

    payload: binary   the partial summary (CountSketch / StreamIndex bytes)
    rows: int64       keys summarized
    null_keys: int64  rows skipped because the key was null (or NaN)
    null_ts: int64    rows skipped because the timestamp was null (index only)
    min_ts, max_ts    event-time range seen (index only; NaN when none)

and :func:`merge_partials` combines two such rows (associative and
commutative, so Spark may tree-reduce them in any shape).

>>> import numpy as np, pyarrow as pa
>>> from sketchql.summaries import CountSketch
>>> batch = pa.RecordBatch.from_pydict({"k": [1, None, 3, 3]})
>>> [out] = countsketch_mapper("k", 3, 64, 7)(iter([batch]))
>>> part = out.to_pylist()[0]
>>> part["rows"], part["null_keys"]
(3, 1)
>>> CountSketch.from_bytes(part["payload"]) == CountSketch(3, 64, 7).update(np.array([1, 3, 3]))
True
"""
from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import SketchQLError, SummaryError
from ..summaries import CountSketch

PARTIAL_SCHEMA = pa.schema([
    ("payload", pa.binary()),
    ("rows", pa.int64()),
    ("null_keys", pa.int64()),
    ("null_ts", pa.int64()),
    ("min_ts", pa.float64()),
    ("max_ts", pa.float64()),
])
PARTIAL_DDL = "payload binary, rows long, null_keys long, null_ts long, min_ts double, max_ts double"

# Hash this many keys at once: big enough to amortize numpy call overhead,
# small enough to keep the (d, n) index/sign temporaries in cache-friendly RAM.
CHUNK_ROWS = 1 << 19


class SparkInputError(SketchQLError, ValueError):
    """The input DataFrame does not fit the summary (missing column, wrong type)."""


# ---------------------------------------------------------------------------
# Arrow -> numpy
# ---------------------------------------------------------------------------
def _combine(col):
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    if pa.types.is_dictionary(col.type):
        col = col.dictionary_decode()
    return col


def key_array(col) -> tuple[np.ndarray, np.ndarray | None]:
    """numpy keys of an Arrow column and the validity mask (None if all valid).

    Integers and booleans stay exact; floats keep their value (NaN counts as
    null); strings become a numpy unicode array (the engine hashes the same);
    decimals become float64; dates/timestamps their integer storage.
    """
    col = _combine(col)
    t = col.type
    valid = None
    if col.null_count:
        valid = np.asarray(col.is_valid())
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        fill = False if pa.types.is_boolean(t) else 0
        vals = np.asarray(col.fill_null(fill) if col.null_count else col)
    elif pa.types.is_floating(t):
        vals = np.asarray(col.fill_null(0.0) if col.null_count else col).astype(np.float64, copy=False)
        nan = np.isnan(vals)
        if nan.any():
            valid = ~nan if valid is None else valid & ~nan
    elif pa.types.is_decimal(t):
        vals = np.asarray(pc.cast(col, pa.float64()).fill_null(0.0))
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        vals = col.fill_null("").to_numpy(zero_copy_only=False).astype(str)
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        vals = col.fill_null(b"").to_numpy(zero_copy_only=False).astype(bytes)
    elif pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        vals = np.asarray(pc.cast(col, pa.int64()).fill_null(0))
    else:
        raise SparkInputError(f"key column of Arrow type {t} cannot be summarized "
                              "(use an integer, float, decimal, boolean or string column)")
    return vals, valid


_TS_DIV = {"s": 1.0, "ms": 1e3, "us": 1e6, "ns": 1e9}


def seconds_array(col) -> tuple[np.ndarray, np.ndarray | None]:
    """Event time in float64 seconds of an Arrow column, and its validity mask.

    Numeric columns are taken as seconds; Spark timestamps become seconds since
    the epoch (UTC); dates their midnight.  Anything else raises.
    """
    col = _combine(col)
    t = col.type
    valid = np.asarray(col.is_valid()) if col.null_count else None
    if pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t):
        secs = np.asarray(pc.cast(col, pa.float64()).fill_null(0.0))
    elif pa.types.is_timestamp(t):
        secs = np.asarray(pc.cast(col, pa.int64()).fill_null(0)).astype(np.float64) / _TS_DIV[t.unit]
    elif pa.types.is_date32(t):
        secs = np.asarray(pc.cast(col, pa.int32()).fill_null(0)).astype(np.float64) * 86400.0
    else:
        raise SparkInputError(f"timestamp column of Arrow type {t} is not numeric "
                              "(need seconds as a number, or a TIMESTAMP/DATE column)")
    nan = np.isnan(secs)
    if nan.any():
        valid = ~nan if valid is None else valid & ~nan
    return secs, valid


# ---------------------------------------------------------------------------
# count sketch partials
# ---------------------------------------------------------------------------
def _partial_row(payload: bytes, rows: int, null_keys: int, null_ts: int = 0,
                 min_ts: float = math.nan, max_ts: float = math.nan) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([payload], pa.binary()), pa.array([rows], pa.int64()), pa.array([null_keys], pa.int64()),
         pa.array([null_ts], pa.int64()), pa.array([min_ts], pa.float64()), pa.array([max_ts], pa.float64())],
        schema=PARTIAL_SCHEMA)


class CountSketchBuilder:
    """Feeds Arrow batches of one column into a :class:`CountSketch`, in chunks.

    Linearity makes chunking invisible: the table after any split of the same
    keys is the same, so this equals one ``update`` of all keys.
    """

    def __init__(self, column: str, d: int, w: int, seed: int, weight_column: str | None = None):
        self.column = column
        self.weight_column = weight_column
        self.sketch = CountSketch(d=d, w=w, seed=seed)
        self.rows = 0
        self.null_keys = 0
        self._pending: list[np.ndarray] = []
        self._pending_w: list[np.ndarray] = []
        self._pending_n = 0

    def add_batch(self, batch) -> None:
        try:
            col = batch.column(self.column)
        except KeyError:
            raise SparkInputError(f"column {self.column!r} not in batch (has {batch.schema.names})") from None
        vals, valid = key_array(col)
        wts = None
        if self.weight_column is not None:  # pre-aggregated (key, count) rows
            wts = np.asarray(batch.column(self.weight_column)).astype(np.int64, copy=False)
        if valid is not None:
            self.null_keys += int(len(vals) - valid.sum()) if wts is None else int(wts[~valid].sum())
            vals = vals[valid]
            wts = None if wts is None else wts[valid]
        if not len(vals):
            return
        self._pending.append(vals)
        if wts is not None:
            self._pending_w.append(wts)
        self._pending_n += len(vals)
        if self._pending_n >= CHUNK_ROWS:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        cat = lambda xs: xs[0] if len(xs) == 1 else np.concatenate(xs)
        keys = cat(self._pending)
        wts = cat(self._pending_w) if self._pending_w else None
        self._pending, self._pending_w, self._pending_n = [], [], 0
        try:
            self.sketch.update(keys, wts)
        except SummaryError as exc:
            raise SparkInputError(f"column {self.column!r}: {exc}") from None
        self.rows += len(keys) if wts is None else int(wts.sum())

    def partial(self) -> pa.RecordBatch:
        self.flush()
        return _partial_row(self.sketch.to_bytes(), self.rows, self.null_keys)


def countsketch_mapper(column: str, d: int, w: int, seed: int, weight_column: str | None = None):
    """The ``mapInArrow`` function: all batches of a partition -> one partial row.

    With ``weight_column`` the rows are pre-aggregated ``(key, count)`` pairs:
    by linearity, adding ``count`` once equals adding 1 ``count`` times, so the
    sketch (table, total) is byte-identical.
    """

    def build(batches):
        b = CountSketchBuilder(column, d, w, seed, weight_column)
        for batch in batches:
            b.add_batch(batch)
        yield b.partial()

    return build


# ---------------------------------------------------------------------------
# merging partials (driver-side tree reduce; also usable anywhere)
# ---------------------------------------------------------------------------
def _nanmin(a, b):
    return b if a is None or (isinstance(a, float) and math.isnan(a)) else (
        a if b is None or (isinstance(b, float) and math.isnan(b)) else min(a, b))


def _nanmax(a, b):
    return b if a is None or (isinstance(a, float) and math.isnan(a)) else (
        a if b is None or (isinstance(b, float) and math.isnan(b)) else max(a, b))


def merge_countsketch_payloads(a: bytes, b: bytes) -> bytes:
    return CountSketch.from_bytes(a).merge(CountSketch.from_bytes(b)).to_bytes()


def merge_partials(a: tuple, b: tuple, merge_payload=merge_countsketch_payloads) -> tuple:
    """Combine two partial rows ``(payload, rows, null_keys, null_ts, min_ts, max_ts)``."""
    return (merge_payload(bytes(a[0]), bytes(b[0])), a[1] + b[1], a[2] + b[2], a[3] + b[3],
            _nanmin(a[4], b[4]), _nanmax(a[5], b[5]))
