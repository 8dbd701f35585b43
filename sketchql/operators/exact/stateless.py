"""Stateless operators (selection, projection) and a linear pipeline."""
from __future__ import annotations

import operator as _op
from typing import Callable, Mapping, Sequence

import numpy as np

from ...errors import SketchQLError
from ..changes import Batch, Changes
from .base import Operator

__all__ = ["Select", "Project", "Chain"]

_OPS = {"=": _op.eq, "==": _op.eq, "!=": _op.ne, "<>": _op.ne, "<": _op.lt, "<=": _op.le,
        ">": _op.gt, ">=": _op.ge}


def _compile_predicate(pred) -> Callable[[dict], np.ndarray]:
    if callable(pred):
        return pred
    if isinstance(pred, tuple) and len(pred) == 3 and isinstance(pred[0], str):
        col, opname, val = pred
        if opname == "in":
            vals = np.asarray(list(val))
            return lambda c: np.isin(c[col], vals)
        if opname not in _OPS:
            raise SketchQLError(f"unknown comparison {opname!r}; use one of {sorted(_OPS)} or 'in'")
        f = _OPS[opname]
        if isinstance(val, str) and val.startswith("$"):   # column reference
            other = val[1:]
            return lambda c: f(c[col], c[other])
        return lambda c: f(c[col], val)
    if isinstance(pred, (list, tuple)):
        fs = [_compile_predicate(p) for p in pred]
        if not fs:
            return lambda c: np.ones(len(next(iter(c.values()))) if c else 0, bool)

        def conj(c):
            m = np.asarray(fs[0](c), bool)
            for f in fs[1:]:
                m = m & np.asarray(f(c), bool)
            return m
        return conj
    raise SketchQLError(f"cannot use {pred!r} as a predicate: give a callable, (col, op, value) or a list of them")


class Select(Operator):
    """σ: keep the changes whose row satisfies the predicate (vectorized).

    ``predicate``: ``callable(columns) -> bool array`` (columns also holds
    ``"__ts"``, the row timestamps), ``(col, op, value)`` (``value`` "$name"
    means another column), or a list of those (AND).  A −1 row passes iff
    its +1 did, so the output stays consistent.  Weakest non-monotonic.

    >>> import numpy as np
    >>> s = Select(("price", ">", 4))
    >>> s.filter(Batch({"price": np.array([2, 6])}, ts=np.array([1., 2.]))).columns["price"].tolist()
    [6]
    """

    def __init__(self, predicate):
        super().__init__()
        self.predicate = predicate
        self._f = _compile_predicate(predicate)

    def mask(self, rows: Batch) -> np.ndarray:
        cols = dict(rows.columns)
        cols.setdefault("__ts", rows.ts)
        try:
            m = np.asarray(self._f(cols))
        except KeyError as e:
            raise SketchQLError(f"selection refers to unknown column {e}; input has {rows.names}") from None
        if m.dtype != bool:
            m = m.astype(bool)
        if m.ndim == 0:
            m = np.full(len(rows), bool(m))
        if len(m) != len(rows):
            raise SketchQLError(f"predicate returned {len(m)} values for {len(rows)} rows")
        self._work += len(rows)
        return m

    def filter(self, batch: Batch) -> Batch:
        return batch.take(self.mask(batch))

    def _step(self, now, inputs):
        x = inputs[0]
        if x is None or not len(x):
            return Changes.empty() if x is None else x
        if isinstance(x, Batch):
            raise SketchQLError("Select.step expects Changes; use Select.filter for a Batch")
        return x.take(self.mask(x.rows))


class Project(Operator):
    """π: compute output columns from input columns (vectorized).

    ``outputs``: a list of column names, or a mapping new_name -> source column
    name or ``callable(columns) -> array``.  The row ts, sign, at and rid pass
    through.  Weakest non-monotonic.

    >>> import numpy as np
    >>> p = Project({"a": "x", "b": lambda c: c["x"] * 2})
    >>> p.apply(Batch({"x": np.array([1, 2])}, ts=np.array([0., 1.]))).columns["b"].tolist()
    [2, 4]
    """

    def __init__(self, outputs):
        super().__init__()
        if isinstance(outputs, Mapping):
            self.outputs = dict(outputs)
        elif isinstance(outputs, Sequence) and not isinstance(outputs, str):
            self.outputs = {n: n for n in outputs}
        else:
            raise SketchQLError(f"Project needs a list of names or a mapping, got {outputs!r}")

    def apply(self, rows: Batch) -> Batch:
        cols = dict(rows.columns)
        cols.setdefault("__ts", rows.ts)
        out = {}
        for name, src in self.outputs.items():
            if callable(src):
                v = np.asarray(src(cols))
                if v.ndim == 0:
                    v = np.full(len(rows), v)
            else:
                if src not in cols:
                    raise SketchQLError(f"projection refers to unknown column {src!r}; input has {rows.names}")
                v = cols[src]
            out[name] = v
        self._work += len(rows)
        return Batch(out, ts=rows.ts)

    def _step(self, now, inputs):
        x = inputs[0]
        if x is None:
            return Changes.empty(list(self.outputs))
        return x.with_rows(self.apply(x.rows))


class Chain(Operator):
    """Linear pipeline of single-input operators, stepped together.

    ``Chain(a, b, c).step(now, x)`` = ``c.step(now, b.step(now, a.step(now, x)))``,
    so every stage sees the clock move even when nothing passes the stages
    before it (expirations are never delayed).
    """

    def __init__(self, *ops: Operator):
        super().__init__()
        if not ops:
            raise SketchQLError("Chain needs at least one operator")
        for o in ops:
            if o.n_inputs != 1:
                raise SketchQLError(f"Chain stages must have one input; {type(o).__name__} has {o.n_inputs}")
        self.ops = list(ops)
        self.update_pattern = ops[-1].update_pattern

    def _step(self, now, inputs):
        x = inputs[0]
        for o in self.ops:
            x = o.step(now, x)
        return x

    def state_size(self) -> int:
        return sum(o.state_size() for o in self.ops)

    def stats(self) -> dict:
        d = super().stats()
        d["stages"] = [o.stats() for o in self.ops]
        d["work"] = sum(s["work"] for s in d["stages"])
        return d
