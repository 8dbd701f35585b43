"""Compile bound expressions into vectorized numpy functions of a column dict.

``compile_expr(e, colname)`` returns ``f(columns) -> np.ndarray`` where
``columns`` maps physical column names to equal-length arrays and
``colname(column_node) -> str`` says which physical column a bound
:class:`~sketchql.planner.ast.Column` reads (it depends on where in the plan
the expression runs: raw stream columns below a join, ``alias.col`` above).
SQL three-valued logic is approximated the numpy way: NaN / None compare
false, so a row with NULL never passes a filter.

>>> from sketchql.planner import ast as A
>>> import numpy as np
>>> e = A.BoolOp("and", [A.Compare(">", A.Column(None, "p"), A.Literal(4)),
...                      A.Like(A.Column(None, "s"), "a%")])
>>> f = compile_expr(e, lambda c: c.name)
>>> f({"p": np.array([5, 3, 9]), "s": np.array(["ab", "ab", "b"], dtype=object)}).tolist()
[True, False, False]
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np
import pandas as pd

from ..errors import SketchQLSemanticError
from . import ast as A

__all__ = ["compile_expr", "like_regex"]

_CMP = {"=": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
        ">": np.greater, ">=": np.greater_equal}
_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply}
_FUNCS = {"abs": np.abs, "sqrt": np.sqrt, "ln": np.log, "log": np.log10, "exp": np.exp,
          "floor": np.floor, "ceil": np.ceil, "round": np.round}


def like_regex(pattern: str) -> str:
    """SQL LIKE pattern -> anchored regular expression (% = any run, _ = one char)."""
    out = []
    for ch in pattern:
        out.append(".*" if ch == "%" else "." if ch == "_" else re.escape(ch))
    return "^" + "".join(out) + "$"


def _n(cols) -> int:
    for v in cols.values():
        return len(v)
    return 0


def _num(a):
    a = np.asarray(a)
    if a.dtype == object:
        return pd.to_numeric(pd.Series(a), errors="coerce").to_numpy(dtype=np.float64)
    return a


def _cmp(op, a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype == object or b.dtype == object:
        sa, sb = pd.Series(a) if a.ndim else a.item(), pd.Series(b) if b.ndim else b.item()
        if isinstance(sa, pd.Series) and isinstance(sb, pd.Series):
            res = {"=": sa == sb, "!=": sa != sb, "<": sa < sb, "<=": sa <= sb, ">": sa > sb, ">=": sa >= sb}[op]
        else:
            s, o, flip = (sa, sb, False) if isinstance(sa, pd.Series) else (sb, sa, True)
            if flip:
                op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}.get(op, op)
            res = {"=": s == o, "!=": s != o, "<": s < o, "<=": s <= o, ">": s > o, ">=": s >= o}[op]
            mask = s.isna().to_numpy()
            res = res.to_numpy(dtype=bool) & ~mask
            return res
        return res.to_numpy(dtype=bool)
    with np.errstate(invalid="ignore"):
        return _CMP[op](a, b)


def compile_expr(e: A.Expr, colname: Callable[[A.Column], str]) -> Callable[[dict], np.ndarray]:
    """Vectorized evaluator of ``e`` (see module docstring)."""
    if isinstance(e, A.Column):
        name = colname(e)

        def col(cols, name=name):
            try:
                return cols[name]
            except KeyError:
                raise SketchQLSemanticError(f"column {name!r} is not available here "
                                            f"(have {sorted(cols)})") from None
        return col
    if isinstance(e, A.Literal):
        v = e.value

        def lit(cols, v=v):
            n = _n(cols)
            if v is None:
                return np.full(n, np.nan)
            if isinstance(v, str):
                return np.full(n, v, dtype=object)
            return np.full(n, v)
        return lit
    if isinstance(e, A.Neg):
        f = compile_expr(e.operand, colname)
        return lambda cols: -_num(f(cols))
    if isinstance(e, A.BinOp):
        fl, fr = compile_expr(e.left, colname), compile_expr(e.right, colname)
        op = e.op
        if op in _ARITH:
            return lambda cols: _ARITH[op](_num(fl(cols)), _num(fr(cols)))

        def div(cols):
            a, b = _num(fl(cols)).astype(np.float64), _num(fr(cols)).astype(np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                r = np.true_divide(a, b) if op == "/" else np.fmod(a, b)
            return np.where(b == 0, np.nan, r)
        return div
    if isinstance(e, A.Compare):
        fl, fr = compile_expr(e.left, colname), compile_expr(e.right, colname)
        op = e.op
        if isinstance(e.right, A.Literal):
            v = e.right.value
            return lambda cols: _cmp(op, fl(cols), np.asarray(v, dtype=object if isinstance(v, str) else None))
        return lambda cols: _cmp(op, fl(cols), fr(cols))
    if isinstance(e, A.BoolOp):
        fs = [compile_expr(x, colname) for x in e.items]
        if e.op == "and":
            def f_and(cols):
                r = np.asarray(fs[0](cols), dtype=bool)
                for f in fs[1:]:
                    r = r & np.asarray(f(cols), dtype=bool)
                return r
            return f_and

        def f_or(cols):
            r = np.asarray(fs[0](cols), dtype=bool)
            for f in fs[1:]:
                r = r | np.asarray(f(cols), dtype=bool)
            return r
        return f_or
    if isinstance(e, A.Not):
        f = compile_expr(e.operand, colname)
        return lambda cols: ~np.asarray(f(cols), dtype=bool)
    if isinstance(e, A.Between):
        f, lo, hi = (compile_expr(x, colname) for x in (e.operand, e.low, e.high))
        neg = e.negated

        def between(cols):
            v = f(cols)
            r = _cmp(">=", v, lo(cols)) & _cmp("<=", v, hi(cols))
            return ~r if neg else r
        return between
    if isinstance(e, A.Like):
        f = compile_expr(e.operand, colname)
        rx = like_regex(e.pattern)
        neg = e.negated

        def like(cols):
            s = pd.Series(f(cols), dtype=object)
            r = s.str.match(rx, flags=re.DOTALL).fillna(False).to_numpy(dtype=bool)
            return ~r if neg else r
        return like
    if isinstance(e, A.InList):
        f = compile_expr(e.operand, colname)
        vals = [x.value for x in e.items]
        neg = e.negated

        def in_list(cols):
            r = pd.Series(f(cols)).isin(vals).to_numpy(dtype=bool)
            return ~r if neg else r
        return in_list
    if isinstance(e, A.IsNull):
        f = compile_expr(e.operand, colname)
        neg = e.negated

        def is_null(cols):
            r = pd.isna(pd.Series(f(cols))).to_numpy(dtype=bool)
            return ~r if neg else r
        return is_null
    if isinstance(e, A.FuncCall):
        fs = [compile_expr(x, colname) for x in e.args]
        name = e.name
        if name == "coalesce":
            def coalesce(cols):
                out = np.asarray(fs[0](cols))
                for f in fs[1:]:
                    miss = pd.isna(pd.Series(out)).to_numpy(dtype=bool)
                    if not miss.any():
                        break
                    nxt = np.asarray(f(cols))
                    if out.dtype.kind != "O" and nxt.dtype.kind == "O":
                        out = out.astype(object)
                    out = np.where(miss, nxt, out)
                return out
            return coalesce
        if name in _FUNCS:
            fn = _FUNCS[name]

            def num_fn(cols):
                with np.errstate(invalid="ignore", divide="ignore"):
                    return fn(_num(fs[0](cols)).astype(np.float64))
            return num_fn
        if name == "lower":
            return lambda cols: pd.Series(fs[0](cols), dtype=object).str.lower().to_numpy(dtype=object)
        if name == "upper":
            return lambda cols: pd.Series(fs[0](cols), dtype=object).str.upper().to_numpy(dtype=object)
        if name == "length":
            return lambda cols: pd.Series(fs[0](cols), dtype=object).str.len().to_numpy(dtype=np.float64)
    raise SketchQLSemanticError(f"cannot evaluate {e} here", *(getattr(e, "pos", None) or (None, None)))
