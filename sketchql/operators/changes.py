"""Columnar batches and change streams shared by every physical operator.

Two types travel between operators:

* :class:`Batch` -- a columnar set of rows: ``columns`` (name -> 1-D numpy
  array, all the same length) plus ``ts``, the float64 event time of each row
  (seconds, from the data).  Raw stream input is a Batch.
* :class:`Changes` -- a *change stream*: rows (a Batch) with, per row,
  ``sign`` (+1 the row enters the result, -1 it leaves), ``at`` (the event
  time at which the change happens) and ``rid`` (an int64 row identity: a -1
  row carries the rid of the +1 row it retracts).  Changes are kept sorted by
  ``(at, sign)`` -- at equal times retractions come before insertions,
  because a tuple that expires at τ is not in the window at τ.

CQL's three relation-to-stream operators are views of a change stream:
ISTREAM = the +1 rows (:func:`istream`), DSTREAM = the -1 rows
(:func:`dstream`), RSTREAM = the *whole* relation R(τ) at every instant τ of
a given sequence (:func:`rstream`: for R(1) = {a}, R(2) = {a, b}, R(3) = {b}
it is ⟨1,a⟩ ⟨2,a⟩ ⟨2,b⟩ ⟨3,b⟩); the change stream itself (+a, +b, −a) is a
fourth view, the one the operators exchange.

Time convention (DESIGN.md): a tuple with timestamp ts is inside a window of
range w at τ iff τ − w < ts ≤ τ, so it enters at ts and leaves at ts + w;
``snapshot(changes, τ)`` therefore applies every change with ``at <= τ``.

>>> import numpy as np
>>> b = Batch({"v": np.array([5.0, 3.0])}, ts=np.array([1.0, 2.0]))
>>> ch = Changes.inserts(b, at=b.ts, rid=np.array([0, 1]))
>>> ch = Changes.concat([ch, Changes.deletes(b.take([0]), at=np.array([11.0]), rid=np.array([0]))])
>>> snapshot(ch, 10.0)["v"].tolist(), snapshot(ch, 11.0)["v"].tolist()
([3.0, 5.0], [3.0])

Promising-tuple operators (``sketchql.operators.promising``) reuse these
types unchanged.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

from ..errors import SketchQLError

__all__ = [
    "Batch", "Changes", "as_batch", "snapshot", "rstream", "istream", "dstream",
    "mix_rids",
]

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix_rids(*rids: np.ndarray) -> np.ndarray:
    """Deterministic int64 identity of a composite row from its members' rids.

    SplitMix64 chaining: ``z = mix(z * φ + rid_i)`` over the members; the
    chance that two live composites collide is ~n²/2^64.
    """
    with np.errstate(over="ignore"):
        z = np.zeros(len(rids[0]), dtype=np.uint64)
        for r in rids:
            z = z * _GOLDEN + np.asarray(r).astype(np.int64).view(np.uint64)
            z = z ^ (z >> np.uint64(30))
            z = z * _M1
            z = z ^ (z >> np.uint64(27))
            z = z * _M2
            z = z ^ (z >> np.uint64(31))
    return z.view(np.int64)


class Batch:
    """Columnar rows with an event-time column.

    ``columns``: name -> 1-D numpy array (equal lengths); ``ts``: float64 event
    times, one per row.  A batch is immutable by convention (operators build
    new ones with :meth:`take`, :meth:`with_columns`, :meth:`concat`).

    >>> import numpy as np
    >>> b = Batch({"k": np.array([1, 2, 1])}, ts=np.array([0.5, 0.7, 0.9]))
    >>> len(b), b.take(np.array([0, 2])).columns["k"].tolist()
    (3, [1, 1])
    """

    __slots__ = ("columns", "ts")

    def __init__(self, columns: Mapping[str, np.ndarray], ts=None, ts_col: str = "ts"):
        cols = {str(k): np.asarray(v) for k, v in columns.items()}
        if ts is None:
            if ts_col not in cols:
                raise SketchQLError(
                    f"batch has no timestamp: no ts given and no column {ts_col!r} "
                    f"among {sorted(cols)}")
            ts = cols[ts_col]
        ts = np.asarray(ts, dtype=np.float64)
        if ts.ndim != 1:
            raise SketchQLError(f"batch timestamps must be 1-D, got shape {ts.shape}")
        n = len(ts)
        for k, v in cols.items():
            if v.ndim != 1 or len(v) != n:
                raise SketchQLError(
                    f"batch column {k!r} has shape {v.shape}, expected ({n},) like the timestamps")
        if n and np.isnan(ts).any():
            raise SketchQLError(f"batch timestamps contain NaN at row {int(np.flatnonzero(np.isnan(ts))[0])}")
        self.columns = cols
        self.ts = ts

    # -- construction ---------------------------------------------------
    @classmethod
    def empty(cls, names: Iterable[str] = (), dtypes: Mapping[str, np.dtype] | None = None) -> "Batch":
        dtypes = dtypes or {}
        return cls({n: np.empty(0, dtype=dtypes.get(n, np.float64)) for n in names},
                   ts=np.empty(0, dtype=np.float64))

    def __len__(self) -> int:
        return len(self.ts)

    @property
    def names(self) -> list[str]:
        return list(self.columns)

    def take(self, idx) -> "Batch":
        """Rows at integer positions (or a boolean mask) ``idx``."""
        return Batch({k: v[idx] for k, v in self.columns.items()}, ts=self.ts[idx])

    def with_columns(self, columns: Mapping[str, np.ndarray] | None = None, ts=None) -> "Batch":
        cols = dict(self.columns)
        cols.update(columns or {})
        return Batch(cols, ts=self.ts if ts is None else ts)

    def select(self, names: Sequence[str]) -> "Batch":
        missing = [n for n in names if n not in self.columns]
        if missing:
            raise SketchQLError(f"unknown column(s) {missing}; batch has {self.names}")
        return Batch({n: self.columns[n] for n in names}, ts=self.ts)

    @staticmethod
    def concat(batches: Sequence["Batch"]) -> "Batch":
        batches = [b for b in batches if b is not None]
        if not batches:
            return Batch({}, ts=np.empty(0))
        nonempty = [b for b in batches if len(b)] or batches[:1]
        names = nonempty[0].names
        for b in nonempty[1:]:
            if b.names != names:
                raise SketchQLError(f"cannot concatenate batches with columns {names} and {b.names}")
        return Batch({n: np.concatenate([b.columns[n] for b in nonempty]) for n in names},
                     ts=np.concatenate([b.ts for b in nonempty]))

    def to_pandas(self, ts_name: str = "__ts"):
        import pandas as pd
        d = dict(self.columns)
        if ts_name and ts_name not in d:
            d[ts_name] = self.ts
        return pd.DataFrame(d)

    def __repr__(self) -> str:
        return f"Batch(n={len(self)}, columns={self.names})"


def as_batch(data, ts_col: str = "ts") -> Batch:
    """Coerce a pandas DataFrame, pyarrow Table/RecordBatch, dict of arrays or a
    :class:`Batch` into a Batch whose ``ts`` is column ``ts_col``.

    >>> as_batch({"ts": [1, 2], "x": [3, 4]}).ts.tolist()
    [1.0, 2.0]
    """
    if isinstance(data, Batch):
        return data
    cols: dict[str, np.ndarray]
    mod = type(data).__module__
    if mod.startswith("pandas"):
        cols = {str(c): data[c].to_numpy() for c in data.columns}
    elif mod.startswith("pyarrow"):
        cols = {str(n): data.column(i).to_numpy(zero_copy_only=False)
                for i, n in enumerate(data.schema.names)}
    elif isinstance(data, Mapping):
        cols = {str(k): np.asarray(v) for k, v in data.items()}
    else:
        raise SketchQLError(
            f"cannot read a batch from {type(data).__name__}; give a pandas DataFrame, "
            f"a pyarrow Table or a dict of arrays")
    if ts_col not in cols:
        raise SketchQLError(f"batch has no timestamp column {ts_col!r}; columns are {sorted(cols)}")
    return Batch(cols, ts=cols[ts_col])


class Changes:
    """A change stream: rows with sign (+1/−1), change time ``at`` and ``rid``.

    Invariants: sorted by ``(at, sign)`` (retractions first at equal times);
    every −1 row repeats the columns and rid of a +1 row emitted earlier (or
    at the same ``at``).  ``rows.ts`` is the row's own timestamp column
    (for a join result: the time it was produced, max of the members' ts).

    >>> import numpy as np
    >>> b = Batch({"x": np.array([1, 2])}, ts=np.array([1.0, 2.0]))
    >>> ch = Changes.inserts(b, at=b.ts, rid=np.arange(2))
    >>> ch.sign.tolist(), len(istream(ch)), len(dstream(ch))
    ([1, 1], 2, 0)
    """

    __slots__ = ("rows", "sign", "at", "rid")

    def __init__(self, rows: Batch, sign, at, rid, *, sort: bool = True):
        self.rows = rows
        self.sign = np.asarray(sign, dtype=np.int8)
        self.at = np.asarray(at, dtype=np.float64)
        self.rid = np.asarray(rid, dtype=np.int64)
        n = len(rows)
        if not (len(self.sign) == len(self.at) == len(self.rid) == n):
            raise SketchQLError("Changes: rows, sign, at and rid must have equal lengths")
        if sort and n > 1:
            if np.any(np.diff(self.at) < 0) or np.any((np.diff(self.at) == 0) & (np.diff(self.sign) < 0)):
                o = np.lexsort((self.sign, self.at))
                self.rows = rows.take(o)
                self.sign, self.at, self.rid = self.sign[o], self.at[o], self.rid[o]

    # -- construction ---------------------------------------------------
    @classmethod
    def inserts(cls, rows: Batch, at, rid) -> "Changes":
        n = len(rows)
        return cls(rows, np.ones(n, np.int8), np.broadcast_to(np.asarray(at, np.float64), (n,)), rid)

    @classmethod
    def deletes(cls, rows: Batch, at, rid) -> "Changes":
        n = len(rows)
        return cls(rows, -np.ones(n, np.int8), np.broadcast_to(np.asarray(at, np.float64), (n,)), rid)

    @classmethod
    def empty(cls, names: Iterable[str] = (), dtypes=None) -> "Changes":
        return cls(Batch.empty(names, dtypes), np.empty(0, np.int8), np.empty(0), np.empty(0, np.int64))

    @staticmethod
    def concat(parts: Sequence["Changes"]) -> "Changes":
        parts = [p for p in parts if p is not None]
        if not parts:
            return Changes.empty()
        nonempty = [p for p in parts if len(p)]
        if not nonempty:
            return parts[0]
        if len(nonempty) == 1:
            return nonempty[0]
        return Changes(Batch.concat([p.rows for p in nonempty]),
                       np.concatenate([p.sign for p in nonempty]),
                       np.concatenate([p.at for p in nonempty]),
                       np.concatenate([p.rid for p in nonempty]))

    def __len__(self) -> int:
        return len(self.at)

    @property
    def columns(self) -> dict:
        return self.rows.columns

    @property
    def ts(self) -> np.ndarray:
        return self.rows.ts

    @property
    def names(self) -> list[str]:
        return self.rows.names

    def take(self, idx) -> "Changes":
        return Changes(self.rows.take(idx), self.sign[idx], self.at[idx], self.rid[idx], sort=False)

    def with_rows(self, rows: Batch) -> "Changes":
        return Changes(rows, self.sign, self.at, self.rid, sort=False)

    def to_pandas(self):
        df = self.rows.to_pandas()
        df["__sign"] = self.sign
        df["__at"] = self.at
        df["__rid"] = self.rid
        return df

    def __repr__(self) -> str:
        return f"Changes(n={len(self)}, +{int((self.sign > 0).sum())}/-{int((self.sign < 0).sum())}, columns={self.names})"


def istream(changes: Changes) -> Changes:
    """CQL ISTREAM: the insertions (+1 rows) of a change stream."""
    return changes.take(changes.sign > 0)


def dstream(changes: Changes) -> Changes:
    """CQL DSTREAM: the retractions (−1 rows) of a change stream."""
    return changes.take(changes.sign < 0)


def snapshot(changes: Changes, t: float, *, columns: Sequence[str] | None = None,
             include_ts: bool = False):
    """The relation at time ``t``: replay every change with ``at <= t``.

    Rows are matched as a multiset of their values (``columns``, default all
    data columns, plus the row timestamp when ``include_ts``).  Returns a
    pandas DataFrame with one line per surviving copy, sorted by the columns.
    Raises :class:`SketchQLError` if some value would get a negative count
    (an inconsistent change stream).
    """
    import pandas as pd
    ch = changes.take(changes.at <= t)
    names = list(columns) if columns is not None else changes.names
    d = {n: ch.rows.columns[n] for n in names}
    if include_ts:
        d["__ts"] = ch.rows.ts
    df = pd.DataFrame(d)
    if not len(names) and not include_ts:
        n = int(ch.sign.astype(np.int64).sum())
        return pd.DataFrame(index=range(max(n, 0)))
    df["__cnt"] = ch.sign.astype(np.int64)
    keys = list(df.columns[:-1])
    g = df.groupby(keys, dropna=False, sort=True)["__cnt"].sum().reset_index()
    if (g["__cnt"] < 0).any():
        bad = g[g["__cnt"] < 0].iloc[0].to_dict()
        raise SketchQLError(f"inconsistent change stream: negative multiplicity at t={t}: {bad}")
    g = g[g["__cnt"] > 0]
    out = g.loc[g.index.repeat(g["__cnt"])].drop(columns="__cnt").reset_index(drop=True)
    return out


def rstream(changes: Changes, times: Iterable[float]) -> Changes:
    """CQL RSTREAM: the whole relation R(τ) at every instant τ of ``times``.

    Returns a Changes of +1 rows only: one row per copy alive at τ, with
    ``at`` = τ (sorted by τ; the row keeps its ts and rid).  The lifetime of
    each copy comes from pairing every −1 with a +1 of the same row (rid and
    values; the k-th retraction of an identity closes its k-th insertion,
    retractions first at one instant), so the cost is one sort of the changes
    plus the output size -- no replay per instant.

    >>> import numpy as np
    >>> b = Batch({"v": np.array(["a", "b"])}, ts=np.array([1.0, 2.0]))
    >>> ch = Changes.concat([Changes.inserts(b, at=b.ts, rid=[0, 1]),
    ...                      Changes.deletes(b.take([0]), at=[3.0], rid=[0])])
    >>> r = rstream(ch, [1, 2, 3])
    >>> list(zip(r.at.tolist(), r.columns["v"].tolist()))
    [(1.0, 'a'), (2.0, 'a'), (2.0, 'b'), (3.0, 'b')]
    """
    times = np.unique(np.asarray(list(times), dtype=np.float64))
    if not len(changes) or not len(times):
        return Changes.empty(changes.names)
    from .exact._keys import fingerprints        # local import: exact imports this module
    names = changes.names
    fp = mix_rids(changes.rid, fingerprints([changes.columns[c] for c in names])[0]) if names else \
        changes.rid.copy()
    sign = changes.sign
    o = np.lexsort((sign, changes.at, fp))
    fpo, so = fp[o], sign[o]
    grp = np.r_[True, fpo[1:] != fpo[:-1]]
    gid = np.cumsum(grp) - 1
    plus, minus = so > 0, so < 0

    def rank_within(mask):
        c = np.cumsum(mask)
        start = c[np.flatnonzero(grp)] - mask[np.flatnonzero(grp)]
        return c - 1 - start[gid]

    pr, mr = rank_within(plus), rank_within(minus)
    pi, mi = np.flatnonzero(plus), np.flatnonzero(minus)
    # match (gid, rank) of minus rows to plus rows
    kp = gid[pi].astype(np.int64) * (len(so) + 1) + pr[pi]
    km = gid[mi].astype(np.int64) * (len(so) + 1) + mr[mi]
    end = np.full(len(pi), np.inf)
    if len(mi):
        pos = np.searchsorted(kp, km)
        ok = (pos < len(kp)) & (kp[np.minimum(pos, len(kp) - 1)] == km)
        if not ok.all():
            raise SketchQLError("rstream: a retraction without a matching insertion (inconsistent changes)")
        end[pos] = changes.at[o][mi]
    rows_idx = o[pi]
    start = changes.at[rows_idx]
    lo = np.searchsorted(times, start, side="left")
    hi = np.searchsorted(times, end, side="left")
    cnt = np.maximum(hi - lo, 0)
    rep = np.repeat(np.arange(len(pi)), cnt)
    offs = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    at = times[np.repeat(lo, cnt) + offs]
    src = rows_idx[rep]
    ordr = np.lexsort((src, at))              # by instant, then in change-stream order
    src, at = src[ordr], at[ordr]
    return Changes(changes.rows.take(src), np.ones(len(src), np.int8), at, changes.rid[src], sort=False)
