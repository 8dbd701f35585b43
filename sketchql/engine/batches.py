"""Batch validation: any accepted input form -> a typed, time-sorted Batch, or a clear error.

A batch is checked whole before anything of it is accepted: unknown/missing columns, types
(first bad row named), NaN/infinite timestamps, tuples older than the stream clock.
"""
from __future__ import annotations

import numpy as np

from ..errors import LateTupleError
from ..operators.changes import Batch
from ..planner.catalog import Schema
from .errors import BatchError


def _to_columns(data, where: str) -> dict:
    """pandas / pyarrow / dict of arrays / Batch -> dict of 1-D numpy arrays."""
    if isinstance(data, Batch):
        return dict(data.columns)
    mod = type(data).__module__
    if mod.startswith("pandas"):
        if not hasattr(data, "columns"):
            raise BatchError(f"{where}: a pandas Series is not a batch; give a DataFrame")
        return {str(c): data[c].to_numpy() for c in data.columns}
    if mod.startswith("pyarrow"):
        if not hasattr(data, "schema"):
            raise BatchError(f"{where}: give a pyarrow Table or RecordBatch, got {type(data).__name__}")
        return {str(n): _arrow_numpy(data.column(i)) for i, n in enumerate(data.schema.names)}
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            a = np.asarray(v) if not isinstance(v, np.ndarray) else v
            if not isinstance(v, np.ndarray) and a.dtype.kind == "U":
                a = np.array(list(v), dtype=object)    # keep the given values (["a", 7] is not all text)
            if a.ndim != 1:
                raise BatchError(f"{where}: column {k!r} must be one-dimensional, got shape {a.shape}")
            out[str(k)] = a
        return out
    raise BatchError(f"{where}: cannot read a batch from {type(data).__name__}; give a pandas DataFrame, "
                     f"a pyarrow Table or a dict of arrays")


def _arrow_numpy(col) -> np.ndarray:
    """An Arrow column as numpy; with nulls, an object array holding None there (Arrow turns a null
    of a numeric column into NaN, which an INT column would report as the number nan)."""
    a = col.to_numpy(zero_copy_only=False)
    if col.null_count and a.dtype.kind != "O":
        import pyarrow.compute as pc
        a = a.astype(object)
        a[pc.is_null(col).to_numpy(zero_copy_only=False)] = None
    return a


def _show(x) -> str:
    return repr(x.item() if isinstance(x, np.generic) else x)


#: INT columns hold int64: ``INT_MIN <= v <= INT_MAX``, i.e. [-2^63, 2^63) -- the one statement of
#: the rule; everything below derives from it
INT_MIN, INT_MAX = -2 ** 63, 2 ** 63 - 1


def int_fits(v: int) -> bool:
    """Whether the (exact, Python) integer ``v`` is in an INT column's range [-2^63, 2^63)."""
    return INT_MIN <= v <= INT_MAX


#: the same range as float64 bounds ``[_I64_LO, _I64_HI)`` (both exact in float64)
_I64_LO, _I64_HI = float(INT_MIN), float(INT_MAX + 1)
#: the least uint64 an INT column cannot hold
_U64_TOO_BIG = np.uint64(INT_MAX + 1)
#: below this magnitude a float64 holds every integer exactly
_EXACT_F64 = 2.0 ** 53


def _too_big(where: str, col: str, r: int, v) -> BatchError:
    return BatchError(f"{where}: column {col!r} is INT but row {r} holds {_show(v)}, which does not fit "
                      f"in 64 bits (signed)")


def _float_to_int(col: str, a: np.ndarray, where: str) -> np.ndarray:
    """A float column into INT: every value integral and in [-2^63, 2^63), else the first bad row
    is named.  One min / max over the column decides the range (NaN and ±inf fail it too); the
    row is looked for only on the error path."""
    if not len(a):
        return a.astype(np.int64)
    lo, hi = a.min(), a.max()
    in_range = bool(lo >= _I64_LO and hi < _I64_HI)       # False with a NaN (comparisons are False)
    if in_range:
        frac = a != np.round(a)
        if not frac.any():
            return a.astype(np.int64)
    outside = ~((a >= _I64_LO) & (a < _I64_HI))
    r = int(np.flatnonzero(outside | (a != np.round(a)))[0])
    if outside[r] and np.isfinite(a[r]):
        raise _too_big(where, col, r, a[r])
    if np.isnan(a[r]):       # pandas' missing value in a float column, or NaN itself
        raise BatchError(f"{where}: column {col!r} is INT but row {r} holds nan (NULL / missing): an INT "
                         f"column takes no nulls")
    raise BatchError(f"{where}: column {col!r} is INT but row {r} holds {_show(a[r])}")


def _exact_int(v):
    """The integer an object-column value is, or None if it is not integral.  Strings are read
    as Python reads them: ``int(s)``, else ``float(s)`` (correctly rounded)."""
    if isinstance(v, (bool, np.bool_, int, np.integer)):
        return int(v)
    if not isinstance(v, (float, np.floating)):
        s = str(v).strip()
        try:
            return int(s)
        except ValueError:
            pass
        try:
            v = float(s)
        except ValueError:
            return None
    f = float(v)
    return int(f) if f.is_integer() else None


def _object_to_int(col: str, a: np.ndarray, num: np.ndarray, where: str) -> np.ndarray:
    """An object column (numbers, numeric strings) into INT, exactly.  ``num`` is pandas' float64
    reading (no NaN left); it is used as is only when it is exact: no strings (pandas' string
    parser is not correctly rounded) and every value integral below 2^53.  Otherwise each value
    is read exactly (Python ints beyond 2^53 lose digits in a float64: 2^63 - 1 rounds to 2^63)
    and range-checked, the first bad row named."""
    import pandas as pd
    numbers_only = pd.api.types.infer_dtype(a, skipna=True) in ("integer", "floating", "mixed-integer-float",
                                                                "boolean", "empty")
    if numbers_only and bool((np.abs(num) < _EXACT_F64).all()) and not (num != np.round(num)).any():
        return num.astype(np.int64)
    out = np.empty(len(a), np.int64)
    for r, x in enumerate(a):
        v = _exact_int(x)
        if v is None:
            raise BatchError(f"{where}: column {col!r} is INT but row {r} holds {_show(x)}")
        if not int_fits(v):
            raise _too_big(where, col, r, x)
        out[r] = v
    return out


def _coerce(col: str, kind: str, a: np.ndarray, where: str) -> np.ndarray:
    """Convert one column to the declared kind or raise naming the first bad row."""
    if kind in ("int", "float"):
        if a.dtype == bool:
            return a.astype(np.int64 if kind == "int" else np.float64)
        if a.dtype.kind in "iu":
            if kind == "int" and a.dtype.kind == "u" and a.dtype.itemsize == 8 and len(a) \
                    and a.max() >= _U64_TOO_BIG:
                r = int(np.flatnonzero(a >= _U64_TOO_BIG)[0])
                raise _too_big(where, col, r, a[r])
            return a.astype(np.int64 if kind == "int" else np.float64, copy=False)
        if a.dtype.kind == "f":
            if kind == "int":
                return _float_to_int(col, a, where)
            return a.astype(np.float64, copy=False)
        # object / strings: try a numeric reading, report the first failure
        import pandas as pd
        num = pd.to_numeric(pd.Series(a, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
        isnull = pd.isna(pd.Series(a, dtype=object)).to_numpy()
        bad = np.isnan(num) & ~isnull
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise BatchError(f"{where}: column {col!r} is {'INT' if kind == 'int' else 'DOUBLE'} "
                             f"but row {r} holds {_show(a[r])}")
        if kind == "int":
            if isnull.any():
                r = int(np.flatnonzero(isnull)[0])
                raise BatchError(f"{where}: column {col!r} is INT but row {r} is NULL: an INT column takes no nulls")
            return _object_to_int(col, a, num, where)
        return num
    if kind == "str":
        if a.dtype.kind in "USO":
            out = a.astype(object)
            if a.dtype.kind == "O":
                ok = np.array([x is None or isinstance(x, str) or (isinstance(x, float) and x != x)
                               for x in out], dtype=bool) if len(out) else np.ones(0, bool)
                if not ok.all():
                    r = int(np.flatnonzero(~ok)[0])
                    raise BatchError(f"{where}: column {col!r} is STRING but row {r} holds {_show(out[r])}")
            return out
        raise BatchError(f"{where}: column {col!r} is STRING but the batch gives {a.dtype} values "
                         f"(row 0: {_show(a[0])})" if len(a) else f"{where}: column {col!r} is STRING, got {a.dtype}")
    if kind == "bool":
        if a.dtype == bool:
            return a
        if a.dtype.kind in "iu" and np.isin(a, (0, 1)).all():
            return a.astype(bool)
        bad = np.flatnonzero(~np.isin(a, (True, False, 0, 1))) if a.dtype.kind != "O" else \
            np.flatnonzero([not isinstance(x, (bool, np.bool_)) for x in a])
        r = int(bad[0]) if len(bad) else 0
        raise BatchError(f"{where}: column {col!r} is BOOL but row {r} holds {_show(a[r])}")
    raise BatchError(f"{where}: unknown column kind {kind}")  # pragma: no cover


def _validate(schema: Schema, data, clock: float) -> Batch:
    """Typed, time-sorted Batch for ``schema`` or :class:`BatchError` / :class:`LateTupleError`."""
    what = "table" if schema.is_table else "stream"
    where = f"{what} {schema.name}"
    cols = _to_columns(data, where)
    lower = {k.lower(): k for k in cols}
    unknown = [k for k in cols if schema.column(k) is None]
    if unknown:
        raise BatchError(f"{where}: unknown column(s) {unknown}; declared: {list(schema.columns)}")
    missing = [c for c in schema.columns if c.lower() not in lower]
    if missing:
        raise BatchError(f"{where}: batch lacks column(s) {missing}; declared: {list(schema.columns)}")
    n = None
    out = {}
    for c, kind in schema.columns.items():
        a = np.asarray(cols[lower[c.lower()]])
        if a.ndim != 1:
            raise BatchError(f"{where}: column {c!r} must be one-dimensional, got shape {a.shape}")
        if n is None:
            n = len(a)
        elif len(a) != n:
            raise BatchError(f"{where}: column {c!r} has {len(a)} rows, expected {n} like the other columns")
        out[c] = _coerce(c, kind, a, where)
    n = n or 0
    if schema.is_table:
        return Batch(out, ts=np.zeros(n))
    ts = out[schema.timestamp].astype(np.float64)
    if n and np.isnan(ts).any():
        r = int(np.flatnonzero(np.isnan(ts))[0])
        raise BatchError(f"{where}: timestamp column {schema.timestamp!r} is NULL/NaN at row {r}")
    if n and not np.isfinite(ts).all():
        r = int(np.flatnonzero(~np.isfinite(ts))[0])
        raise BatchError(f"{where}: timestamp column {schema.timestamp!r} is infinite at row {r}")
    if n and (ts < clock).any():
        r = int(np.flatnonzero(ts < clock)[0])
        raise LateTupleError(f"{where}: row {r} has timestamp {ts[r]:g}, older than the stream clock {clock:g}")
    if n > 1 and np.any(np.diff(ts) < 0):
        o = np.argsort(ts, kind="stable")
        out = {k: v[o] for k, v in out.items()}
        ts = ts[o]
    return Batch(out, ts=ts)
