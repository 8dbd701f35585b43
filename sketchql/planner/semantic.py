"""Semantic analysis: resolve names and types of a parsed query against the catalog.

The result, :class:`BoundQuery`, is what the logical planner consumes:

* every :class:`~sketchql.planner.ast.Column` gets ``.src`` (index of its FROM
  item) and ``.cname`` (canonical column name);
* the WHERE clause is split into conjuncts: single-source predicates (pushed
  below the join; below the window too when the window is time-based, since
  filtering commutes with a RANGE/NOW/UNBOUNDED window but not with ROWS),
  equi-join conditions between two sources, and residual predicates;
* aggregates, group keys, the output list and HAVING are checked (a column
  that is neither grouped nor aggregated is an error);
* the paper's clauses are validated: preference expressions must be numeric
  (``SUMMARY.Estimate.Count(col)`` needs a summary on that column), FADE
  FACTOR in (0, 1], WINDOW > 0; the contract's error in (0, 1), confidence in
  (0, 1), budget > 0.

Errors are :class:`~sketchql.errors.SketchQLSemanticError` with the position
of the offending text.

>>> from sketchql.planner.catalog import Catalog, Schema
>>> from sketchql.planner.parser import parse_query
>>> cat = Catalog(); _ = cat.add_stream(Schema("s", {"a": "int", "ts": "float"}, "ts"))
>>> bq = analyze(parse_query("SELECT a FROM s [RANGE 10] WHERE a > 1"), cat)
>>> [str(e) for e in bq.sources[0].pushed], bq.outputs[0][0]
(['a > 1'], 'a')
>>> try:
...     analyze(parse_query("SELECT b FROM s"), cat)
... except Exception as e:
...     print(e)
unknown column 'b' (s has a, ts) at line 1, column 8
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..errors import SketchQLSemanticError
from . import ast as A
from .catalog import NUMERIC, Catalog, Schema

__all__ = ["analyze", "BoundQuery", "Source", "SCALAR_FUNCS", "expr_type"]

SCALAR_FUNCS = {
    # name: (arg kinds ('num' | 'str' | 'any'), result kind)
    "abs": (("num",), "float"), "sqrt": (("num",), "float"), "ln": (("num",), "float"),
    "log": (("num",), "float"), "exp": (("num",), "float"), "floor": (("num",), "float"),
    "ceil": (("num",), "float"), "round": (("num",), "float"),
    "lower": (("str",), "str"), "upper": (("str",), "str"), "length": (("str",), "int"),
}


def _err(msg, pos, token=None):
    line, col = pos if pos else (None, None)
    return SketchQLSemanticError(msg, line, col, token=token)


@dataclass
class Source:
    """One FROM item bound to a catalog relation."""
    index: int
    alias: str
    schema: Schema
    window: Optional[A.Window]           # None for tables
    sample: Optional[float] = None       # fraction in (0, 1]
    prefilter: Optional[A.Expr] = None   # CQL ``[... WHERE p]``: before the window
    pushed: list = field(default_factory=list)   # conjuncts applied before the window
    post: list = field(default_factory=list)     # single-source conjuncts after the window
    derived: Optional["BoundQuery"] = None       # a subquery in FROM (a derived windowed relation)

    @property
    def is_table(self) -> bool:
        return self.schema.is_table

    @property
    def time_based(self) -> bool:
        return self.window is not None and self.window.kind in ("range", "now", "unbounded")


class SourceList(list):
    """The FROM items of one SELECT; ``[i]`` finds the source whose *index* is i.

    Indices are unique over the whole statement (set operations and subqueries
    number their sources after the outer ones), so a plan node's ``source``
    names one leaf everywhere; ``extra`` holds the nested leaves that the
    lookup also finds (iteration yields only this SELECT's own items).
    """

    def __init__(self, items=(), extra=()):
        super().__init__(items)
        self.extra = list(extra)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return list.__getitem__(self, i)
        i = int(i)
        for s in self:
            if s.index == i:
                return s
        for s in self.extra:
            if s.index == i:
                return s
        raise IndexError(f"no source with index {i}")


@dataclass
class SubLink:
    """A WHERE conjunct ``[NOT] IN (subquery)`` / ``[NOT] EXISTS (subquery)``.

    ``outer`` are the outer query's key columns, ``inner`` the subquery (its
    outputs are the matching key columns, in the same order); an uncorrelated
    EXISTS has no keys (it tests whether the subquery is empty).
    """
    kind: str                 # in | exists
    negated: bool
    outer: list               # [A.Column] of the outer query
    inner: "BoundQuery"
    pos: tuple = (None, None)

    @property
    def null_aware(self) -> bool:
        return self.kind == "in" and self.negated


@dataclass
class BoundQuery:
    query: A.Query
    sources: list
    join_conds: list          # [(i, col_i, j, col_j, pos)]
    residual: list            # multi-source predicates evaluated after the joins
    aggregates: list          # unique A.Aggregate nodes (by text)
    group_by: list            # [A.Expr]
    outputs: list             # [(name, A.Expr)]
    having: Optional[A.Expr]
    distinct: bool
    stream_op: Optional[str]
    preference: Optional[A.Preference]
    fade: Optional[float]
    contract: A.Contract
    types: dict = field(default_factory=dict)   # output name -> kind
    nested: list = field(default_factory=list)  # BoundQuery of set-op sides, FROM and WHERE subqueries
    setop: Optional[tuple] = None               # (op, all) when this is left <op> right (nested[0..1])
    sublinks: list = field(default_factory=list)  # [SubLink] of the WHERE clause

    @property
    def is_aggregate(self) -> bool:
        return bool(self.aggregates) or bool(self.group_by)

    def leaves(self) -> list:
        """Every stream/table source of the statement (FROM items of all nested SELECTs)."""
        out = [s for s in self.sources if s.derived is None]
        for n in self.nested:
            out.extend(n.leaves())
        return out

    @property
    def streams(self) -> list:
        """The stream leaves the engine feeds (nested ones included)."""
        return [s for s in self.leaves() if not s.is_table]

    @property
    def tables(self) -> list:
        return [s for s in self.leaves() if s.is_table]

    @property
    def local_streams(self) -> list:
        """This SELECT's own stream FROM items (derived relations included)."""
        return [s for s in self.sources if not s.is_table]

    @property
    def local_tables(self) -> list:
        return [s for s in self.sources if s.is_table]

    @property
    def is_compound(self) -> bool:
        return bool(self.nested)


# ---------------------------------------------------------------------- typing
def expr_type(e: A.Expr, ctx: str, sources: list, catalog: Catalog) -> str:
    """Kind of ``e`` (int/float/str/bool/null); binds columns; checks ``ctx`` rules.

    ``ctx``: ``where`` (no aggregates), ``select``/``having`` (aggregates
    allowed, not nested), ``preference`` (SUMMARY estimates allowed),
    ``agg`` (inside an aggregate).
    """
    t = lambda x, c=ctx: expr_type(x, c, sources, catalog)  # noqa: E731
    if isinstance(e, A.Column):
        return _bind_column(e, sources)["kind"]
    if isinstance(e, A.Literal):
        v = e.value
        if v is None:
            return "null"
        if isinstance(v, bool):
            return "bool"
        if isinstance(v, int):
            return "int"
        if isinstance(v, float):
            return "float"
        return "str"
    if isinstance(e, A.Neg):
        k = t(e.operand)
        if k not in NUMERIC:
            raise _err(f"cannot negate a {k} value ({e.operand})", e.pos)
        return k
    if isinstance(e, A.BinOp):
        l, r = t(e.left), t(e.right)
        for side, k in ((e.left, l), (e.right, r)):
            if k not in NUMERIC:
                raise _err(f"arithmetic '{e.op}' needs numbers, but {side} is {k}", side.pos or e.pos)
        return "float" if ("float" in (l, r) or e.op == "/") else "int"
    if isinstance(e, A.Compare):
        l, r = t(e.left), t(e.right)
        if not _comparable(l, r):
            raise _err(f"cannot compare {l} with {r} in '{e}'", e.pos)
        return "bool"
    if isinstance(e, A.BoolOp):
        for x in e.items:
            k = t(x)
            if k not in ("bool", "null"):
                raise _err(f"{e.op.upper()} needs conditions, but {x} is {k}", x.pos or e.pos)
        return "bool"
    if isinstance(e, A.Not):
        k = t(e.operand)
        if k not in ("bool", "null"):
            raise _err(f"NOT needs a condition, but {e.operand} is {k}", e.pos)
        return "bool"
    if isinstance(e, A.Between):
        k, lo, hi = t(e.operand), t(e.low), t(e.high)
        if not (_comparable(k, lo) and _comparable(k, hi)):
            raise _err(f"BETWEEN bounds do not match the type of {e.operand} ({k})", e.pos)
        return "bool"
    if isinstance(e, A.Like):
        k = t(e.operand)
        if k != "str":
            raise _err(f"LIKE needs a string, but {e.operand} is {k}", e.pos)
        return "bool"
    if isinstance(e, A.InList):
        k = t(e.operand)
        for x in e.items:
            if not isinstance(x, A.Literal):
                raise _err("IN lists may contain only constants", x.pos or e.pos)
            if not _comparable(k, t(x)):
                raise _err(f"IN list value {x} does not match the type of {e.operand} ({k})", x.pos or e.pos)
        return "bool"
    if isinstance(e, A.IsNull):
        t(e.operand)
        return "bool"
    if isinstance(e, A.FuncCall) and e.name == "coalesce":
        if len(e.args) < 2:
            raise _err("COALESCE takes at least two arguments", e.pos)
        ks = [t(a) for a in e.args]
        real = [k for k in ks if k != "null"]
        if any(not _comparable(real[0], k) for k in real[1:]):
            raise _err(f"COALESCE arguments must have one type, got {', '.join(ks)}", e.pos)
        if not real:
            return "null"
        return "float" if "float" in real else real[0]
    if isinstance(e, A.FuncCall):
        spec = SCALAR_FUNCS.get(e.name)
        if spec is None:
            raise _err(f"unknown function {e.name.upper()} (known: {', '.join(sorted(SCALAR_FUNCS) + ['coalesce'])})",
                       e.pos, e.name)
        kinds, res = spec
        if len(e.args) != len(kinds):
            raise _err(f"{e.name.upper()} takes {len(kinds)} argument(s), got {len(e.args)}", e.pos)
        for a, want in zip(e.args, kinds):
            k = t(a)
            if want == "num" and k not in NUMERIC or want == "str" and k != "str":
                raise _err(f"{e.name.upper()} needs a {'number' if want == 'num' else 'string'}, got {k}",
                           a.pos or e.pos)
        return res
    if isinstance(e, A.Aggregate):
        if ctx in ("where", "agg", "preference", "window", "group"):
            where = {"where": "WHERE", "agg": "another aggregate", "preference": "PREFERENCE",
                     "window": "a window clause", "group": "GROUP BY"}[ctx]
            raise _err(f"aggregate {e.func.upper()} is not allowed in {where}", e.pos, e.func)
        return _agg_type(e, sources, catalog)
    if isinstance(e, (A.InSubquery, A.Exists)):
        raise _err("subqueries are supported as WHERE conditions joined by AND: "
                   "x [NOT] IN (SELECT ...) or [NOT] EXISTS (SELECT ...)", e.pos)
    if isinstance(e, A.SummaryEstimate):
        if ctx != "preference":
            raise _err("SUMMARY.Estimate.Count(...) may only appear in WITH PREFERENCE", e.pos)
        b = _bind_column(e.column, sources)
        src = sources[e.column.src]
        if src.is_table:
            raise _err(f"SUMMARY.Estimate.Count needs a stream column; {src.alias} is a table", e.pos)
        # no CREATE SUMMARY on the column: the engine declares one (``_auto_<stream>_<col>``, sized for
        # the query's window) the first time a query needs it, as for WITH PREFERENCE desc S.col.  The
        # promising-tuple operators index INT and BOOLEAN keys only, with or without a declared summary
        # (this used to advise CREATE SUMMARY on a DOUBLE column, whose query then failed anyway)
        kind = src.schema.columns.get(e.column.cname)
        if kind not in ("int", "bool"):
            shown = {"float": "DOUBLE", "str": "VARCHAR"}.get(kind, str(kind).upper())
            raise _err(f"SUMMARY.Estimate.Count in a PREFERENCE needs an INT or BOOLEAN column (the "
                       f"promising-tuple operators index those); {src.schema.name}.{e.column.cname} is {shown}: "
                       f"drop the PREFERENCE clause to evaluate the query exactly", e.column.pos)
        del b
        return "float"
    raise _err(f"unsupported expression {e}", getattr(e, "pos", None))  # pragma: no cover


def _agg_type(e: A.Aggregate, sources, catalog) -> str:
    f = e.func
    if f == "count":
        if len(e.args) > 1:
            raise _err("COUNT takes one argument or *", e.pos)
        for a in e.args:
            expr_type(a, "agg", sources, catalog)
        return "int"
    if e.distinct:
        raise _err(f"DISTINCT is only supported inside COUNT, not {f.upper()}", e.pos)
    if f == "quantile":
        if len(e.args) != 2 or not isinstance(e.args[1], A.Literal) or \
                not isinstance(e.args[1].value, (int, float)) or not 0 <= e.args[1].value <= 1:
            raise _err("QUANTILE(expr, q) needs a constant q in [0, 1]", e.pos)
    elif len(e.args) != 1:
        raise _err(f"{f.upper()} takes exactly one argument", e.pos)
    k = expr_type(e.args[0], "agg", sources, catalog)
    if k not in NUMERIC:
        raise _err(f"{f.upper()} needs a numeric argument, but {e.args[0]} is {k}", e.args[0].pos or e.pos)
    if f in ("sum", "min", "max") and k == "int":
        return "int" if f != "sum" else "int"
    return "float"


def _comparable(a, b) -> bool:
    if "null" in (a, b):
        return True
    if a in NUMERIC and b in NUMERIC:
        return True
    return a == b


def _bind_column(c: A.Column, sources: list) -> dict:
    outer = getattr(sources, "outer", None)
    if outer is not None:
        try:
            return _bind_column(c, SourceList(list(sources)))
        except SketchQLSemanticError:
            try:
                r = _bind_column(c, outer)
            except SketchQLSemanticError:
                raise _bind_error(c, sources) from None
            c.outer = True
            return r
    if c.table is not None:
        cands = [s for s in sources if s.alias.lower() == c.table.lower()]
        if not cands:
            cands = [s for s in sources if s.schema.name.lower() == c.table.lower()]
        if not cands:
            raise _err(f"unknown stream or alias {c.table!r} (FROM has {', '.join(s.alias for s in sources)})",
                       c.pos, c.table)
        if len(cands) > 1:
            raise _err(f"{c.table!r} is ambiguous: give each FROM item its own alias", c.pos, c.table)
        s = cands[0]
        canon = s.schema.column(c.name)
        if canon is None:
            raise _err(f"unknown column {c.table}.{c.name} ({s.schema.name} has "
                       f"{', '.join(s.schema.columns)})", c.pos, c.name)
    else:
        hits = [(s, s.schema.column(c.name)) for s in sources if s.schema.column(c.name) is not None]
        if not hits:
            names = "; ".join(f"{s.schema.name} has {', '.join(s.schema.columns)}" for s in sources)
            raise _err(f"unknown column {c.name!r} ({names})", c.pos, c.name)
        if len(hits) > 1:
            raise _err(f"column {c.name!r} is ambiguous (in {', '.join(s.alias for s, _ in hits)}); "
                       f"qualify it", c.pos, c.name)
        s, canon = hits[0]
    c.src, c.cname = s.index, canon
    return {"kind": s.schema.columns[canon], "src": s.index}


def _bind_error(c, sources):
    try:
        _bind_column(c, SourceList(list(sources)))
    except SketchQLSemanticError as e:
        return e
    return _err(f"cannot bind {c}", c.pos)  # pragma: no cover


def _conjuncts(e):
    if e is None:
        return []
    if isinstance(e, A.BoolOp) and e.op == "and":
        out = []
        for x in e.items:
            out.extend(_conjuncts(x))
        return out
    return [e]


def _srcs(e) -> set:
    return {x.src for x in A.walk(e) if isinstance(x, A.Column)}


def _has_agg(e) -> bool:
    return any(isinstance(x, A.Aggregate) for x in A.walk(e))


# ---------------------------------------------------------------------- analyze
class _Ctx:
    """Statement-wide state of one analysis: the source numbering."""

    def __init__(self):
        self.next_index = 0

    def new_index(self) -> int:
        self.next_index += 1
        return self.next_index - 1


def analyze(q: A.Query, catalog: Catalog) -> BoundQuery:
    """Bind and check ``q``; see the module docstring.

    Set operations bind each side on its own (columns are matched by
    position, the names are the left side's); a subquery in FROM becomes a
    derived relation whose columns are the subquery's outputs; ``[NOT] IN`` /
    ``[NOT] EXISTS`` subqueries in WHERE become :class:`SubLink` s (a
    correlated subquery may refer to the outer FROM items in equalities of its
    WHERE; those become the semi-join keys).
    """
    ctx = _Ctx()
    body = q.select
    if isinstance(body, A.SetOp) or _has_nested(body):
        if q.preference is not None:
            raise _err("WITH PREFERENCE applies to a single SELECT over streams; set operations and "
                       "subqueries are evaluated exactly", q.clause_pos.get("preference") or q.pos)
    bq = _analyze_body(body, q, catalog, ctx, top=True)
    _check_clauses(q, bq, catalog)
    return bq


def _has_nested(sel) -> bool:
    if any(not isinstance(fi.source, str) for fi in sel.from_items):
        return True
    return any(isinstance(x, (A.InSubquery, A.Exists)) for c in _conjuncts(sel.where) for x in A.walk(c)) or \
        any(isinstance(c, (A.InSubquery, A.Exists)) for c in _conjuncts(sel.where))


def _analyze_body(body, q, catalog, ctx, top=False, outer=None) -> BoundQuery:
    if isinstance(body, A.SetOp):
        left = _analyze_body(body.left, q, catalog, ctx, top=top)    # the leftmost SELECT holds the view
        right = _analyze_body(body.right, q, catalog, ctx)
        if len(left.outputs) != len(right.outputs):
            raise _err(f"each side of {body.op.upper()} must have the same number of columns "
                       f"({len(left.outputs)} vs {len(right.outputs)})", body.pos)
        for (ln, _), (rn, _) in zip(left.outputs, right.outputs):
            lk, rk = left.types[ln], right.types[rn]
            if not _comparable(lk, rk):
                raise _err(f"{body.op.upper()} column {ln!r} is {lk} on the left but {rn!r} is {rk} "
                           f"on the right", body.pos)
        bq = BoundQuery(q, SourceList([], left.leaves() + right.leaves()), [], [], [], [], list(left.outputs),
                        None, False, body.stream_op, None, None, q.contract, dict(left.types),
                        nested=[left, right], setop=(body.op, body.all))
        return bq
    if not top and body.stream_op is not None:
        raise _err(f"{body.stream_op.upper()} applies to the whole query: write it in the outer SELECT only",
                   body.pos)
    return _analyze_core(body, q, catalog, ctx, outer)


def _analyze_core(sel, q, catalog, ctx, outer=None) -> BoundQuery:
    sources = SourceList()
    if outer is not None:
        sources.outer = outer
    aliases = set()
    nested = []
    for fi in sel.from_items:
        i = ctx.new_index()
        if not isinstance(fi.source, str):
            inner = _analyze_body(fi.source, q, catalog, ctx)
            nested.append(inner)
            alias = fi.alias or f"subquery{len(nested)}"
            if alias.lower() in aliases:
                raise _err(f"{alias!r} appears twice in FROM; give each item a distinct alias", fi.pos, alias)
            aliases.add(alias.lower())
            if fi.window is not None:
                raise _err("a subquery in FROM is a relation (put the windows on the streams inside it); "
                           "it cannot take a window itself", fi.window.pos)
            if fi.sample is not None:
                raise _err("SAMPLE applies to streams, not to a subquery", fi.pos)
            cols = {}
            for n, _ in inner.outputs:
                if "." in n or n.startswith("("):
                    raise _err(f"name the subquery's output column {n!r} with AS to use it outside", fi.pos)
                cols[n] = inner.types[n]
            src = Source(i, alias, Schema(alias, cols), None, derived=inner)
            sources.append(src)
            continue
        schema = catalog.get(fi.source)
        if schema is None:
            known = ", ".join(s.name for s in catalog.streams + catalog.tables) or "none declared"
            raise _err(f"unknown stream or table {fi.source!r} (known: {known})", fi.pos, fi.source)
        alias = fi.alias or schema.name
        if alias.lower() in aliases:
            raise _err(f"{alias!r} appears twice in FROM; give each item a distinct alias", fi.pos, alias)
        aliases.add(alias.lower())
        win = fi.window
        if schema.is_table:
            if win is not None:
                raise _err(f"{schema.name} is a table (a relation), it cannot have a window", win.pos)
            if fi.sample is not None:
                raise _err(f"{schema.name} is a table; SAMPLE applies to streams", fi.pos)
            if q.preference is not None:
                pass
        else:
            if win is None:
                if q.window is not None and not q.window > 0:     # (named as written, not as the RANGE it becomes)
                    raise _err(f"WINDOW must be positive, got {q.window:g}", q.clause_pos.get("window"))
                win = A.Window("range", q.window, pos=fi.pos) if q.window is not None else \
                    A.Window("unbounded", pos=fi.pos)
        src = Source(i, alias, schema, win)
        if fi.sample is not None:
            if not 0 < fi.sample <= 100:
                raise _err(f"SAMPLE({fi.sample:g}) must be a percentage in (0, 100]", fi.pos)
            src.sample = fi.sample / 100.0
        sources.append(src)

    # windows
    for s in sources:
        w = s.window
        if w is None:
            continue
        if w.kind == "range":
            if not w.size > 0:
                raise _err(f"RANGE must be positive, got {w.size:g}", w.pos)
            if w.slide is not None and not w.slide > 0:
                raise _err(f"SLIDE must be positive, got {w.slide:g}", w.pos)
        if w.kind in ("rows", "partition"):
            if not (isinstance(w.size, int) or float(w.size).is_integer()) or w.size < 1:
                raise _err(f"ROWS needs a positive whole number, got {w.size:g}", w.pos)
            w.size = int(w.size)
        if w.kind == "unbounded" and w.start_at is not None and w.end_at is not None and w.end_at < w.start_at:
            raise _err(f"landmark window ends (END AT {w.end_at:g}) before it starts "
                       f"(START AT {w.start_at:g})", w.pos)
        for c in w.partition_by:
            expr_type(c, "window", [s], catalog)
            c.src = s.index
        if w.where is not None:
            k = expr_type(w.where, "window", [s], catalog)
            if k != "bool":
                raise _err(f"window WHERE needs a condition, got {k}", w.where.pos)
            for c in A.walk(w.where):
                if isinstance(c, A.Column):
                    c.src = s.index
            s.prefilter = w.where

    # WHERE: subquery conditions become SubLinks, the rest is typed and split
    join_conds, residual = [], []
    sublinks, plain = [], []
    for c in _conjuncts(sel.where):
        if isinstance(c, (A.InSubquery, A.Exists)):
            sublinks.append(c)
        else:
            plain.append(c)
    where = (A.BoolOp("and", plain, pos=sel.where.pos) if len(plain) > 1 else plain[0]) if plain else None
    if where is not None:
        k = expr_type(where, "where", sources, catalog)
        if k not in ("bool", "null"):
            raise _err(f"WHERE needs a condition, but it is {k}", where.pos)
    correlations = []
    for c in _conjuncts(where):
        if any(getattr(x, "outer", False) for x in A.walk(c) if isinstance(x, A.Column)):
            if (isinstance(c, A.Compare) and c.op == "=" and isinstance(c.left, A.Column)
                    and isinstance(c.right, A.Column)
                    and getattr(c.left, "outer", False) != getattr(c.right, "outer", False)):
                inner_c, outer_c = (c.right, c.left) if getattr(c.left, "outer", False) else (c.left, c.right)
                correlations.append((inner_c, outer_c))
                continue
            raise _err(f"a correlated subquery may refer to the outer query only in equalities "
                       f"(inner.col = outer.col), not in '{c}'", c.pos)
        ss = _srcs(c)
        if (isinstance(c, A.Compare) and c.op == "=" and isinstance(c.left, A.Column)
                and isinstance(c.right, A.Column) and c.left.src != c.right.src):
            join_conds.append((c.left.src, c.left.cname, c.right.src, c.right.cname, c.pos))
        elif len(ss) == 1:
            s = sources[next(iter(ss))]
            (s.pushed if (s.is_table or s.time_based) else s.post).append(c)
        elif not ss:
            residual.append(c)
        else:
            residual.append(c)

    links = [_bind_sublink(c, q, catalog, ctx, sources) for c in sublinks]
    nested.extend(lk.inner for lk in links)

    # joins must be connected by equalities (the exact joins are hash joins)
    if len(sources) > 1:
        parent = {s.index: s.index for s in sources}

        def find(x):
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x
        for i, _, j, _, _ in join_conds:
            parent[find(i)] = find(j)
        roots = {find(s.index) for s in sources}
        if len(roots) > 1:
            groups = {}
            for s in sources:
                groups.setdefault(find(s.index), []).append(s.alias)
            g = list(groups.values())
            raise _err(f"no equality condition joins {', '.join(g[0])} with {', '.join(g[1])} "
                       f"(cross products are not supported; add WHERE a.col = b.col)", sel.pos)
        for i, ci, j, cj, pos in join_conds:
            ki, kj = sources[i].schema.columns[ci], sources[j].schema.columns[cj]
            if not _comparable(ki, kj):
                raise _err(f"join condition compares {ki} with {kj}", pos)
    tables = [s for s in sources if s.is_table]
    if tables and not [s for s in sources if not s.is_table]:
        raise _err("a query needs at least one stream in FROM (only tables given)", sel.pos)

    # SELECT list
    outputs = []
    aggs: dict[str, A.Aggregate] = {}
    if sel.items is None or any(it.star_of for it in sel.items or []):
        items = []
        for it in (sel.items or [None]):
            if it is not None and it.star_of is None:
                items.append(it)
                continue
            targets = sources if it is None else [s for s in sources if s.alias.lower() == it.star_of.lower()
                                                  or s.schema.name.lower() == it.star_of.lower()]
            if not targets:
                raise _err(f"unknown stream or alias {it.star_of!r} in {it.star_of}.*", it.pos, it.star_of)
            for s in targets:
                for cname in s.schema.columns:
                    items.append(A.SelectItem(A.Column(s.alias, cname, pos=sel.pos), None))
    else:
        items = sel.items
    for it in items:
        k = expr_type(it.expr, "select", sources, catalog)
        for x in A.walk(it.expr):
            if isinstance(x, A.Aggregate):
                aggs.setdefault(str(x), x)
        outputs.append((it.alias, it.expr, k))
    group_by = list(sel.group_by)
    for g in group_by:
        expr_type(g, "group", sources, catalog)
    having = sel.having
    if having is not None:
        k = expr_type(having, "having", sources, catalog)
        if k != "bool":
            raise _err(f"HAVING needs a condition, got {k}", having.pos)
        for x in A.walk(having):
            if isinstance(x, A.Aggregate):
                aggs.setdefault(str(x), x)
        if not aggs and not group_by:
            raise _err("HAVING needs GROUP BY or an aggregate", having.pos)
    is_agg = bool(aggs) or bool(group_by)
    if is_agg:
        gtexts = {str(g) for g in group_by}
        for name, e, _ in outputs:
            _check_grouped(e, gtexts)
        if having is not None:
            _check_grouped(having, gtexts)
        if sel.distinct:
            raise _err("SELECT DISTINCT with aggregates is not supported", sel.pos)
    # output names
    named = []
    used = {}
    for alias, e, k in outputs:
        if alias:
            nm = alias
        elif isinstance(e, A.Column):
            nm = e.cname
            if sum(1 for al, x, _ in outputs
                   if al is None and isinstance(x, A.Column) and x.cname.lower() == nm.lower()) > 1:
                nm = f"{sources[e.src].alias}.{e.cname}"
        else:
            nm = str(e)
        if nm.lower() in used:
            raise _err(f"two output columns are named {nm!r}; use AS to rename one", sel.pos)
        used[nm.lower()] = k
        named.append((nm, e, k))

    sources.extra = [lf for n in nested for lf in n.leaves()]
    bq = BoundQuery(q, sources, join_conds, residual, list(aggs.values()), group_by,
                    [(n, e) for n, e, _ in named], having, sel.distinct, sel.stream_op,
                    q.preference, q.fade, q.contract, {n: k for n, _, k in named},
                    nested=nested, sublinks=links)
    bq.correlations = correlations
    return bq


def _bind_sublink(c, q, catalog, ctx, sources) -> SubLink:
    """Analyze the subquery of ``x [NOT] IN (...)`` / ``[NOT] EXISTS (...)`` against the outer FROM."""
    inner = _analyze_body(c.query, q, catalog, ctx, outer=sources)
    corr = getattr(inner, "correlations", [])
    if isinstance(c, A.InSubquery):
        if not isinstance(c.operand, A.Column):
            raise _err("the left side of IN (subquery) must be a column", c.operand.pos or c.pos)
        k = expr_type(c.operand, "where", sources, catalog)
        if len(inner.outputs) != 1:
            raise _err(f"the subquery of IN must return one column, it returns {len(inner.outputs)}", c.pos)
        (n0, e0), = inner.outputs
        if not _comparable(k, inner.types[n0]):
            raise _err(f"IN compares {k} with the subquery's {inner.types[n0]}", c.pos)
        outer_cols = [c.operand] + [o for _, o in corr]
        inner_exprs = [e0] + [i for i, _ in corr]
        kind = "in"
    else:
        outer_cols = [o for _, o in corr]
        inner_exprs = [i for i, _ in corr]
        kind = "exists"
    if corr:
        if inner.is_compound or inner.is_aggregate or inner.distinct:
            raise _err("a correlated subquery must be a plain SELECT (no set operation, aggregate or "
                       "DISTINCT)", c.pos)
        inner.outputs = [(f"__k{j}", e) for j, e in enumerate(inner_exprs)]
        inner.types = {f"__k{j}": "any" for j in range(len(inner_exprs))}
    elif kind == "exists":
        inner.outputs, inner.types = [], {}
    own = {s.index for s in sources}
    for oc in outer_cols:
        if oc.src not in own:
            raise _err("a subquery inside a subquery may only refer to its own outer query", oc.pos)
    return SubLink(kind, c.negated, outer_cols, inner, c.pos)


def _check_clauses(q, bq, catalog):
    """The query-level clauses: preference, FADE FACTOR, WINDOW and the contract."""
    sources = bq.sources
    pref = q.preference
    ct = q.contract
    if pref is not None:
        for e in pref.exprs:
            k = expr_type(e, "preference", sources, catalog)
            if k not in NUMERIC:
                raise _err(f"preference expression {e} is not numeric (it is {k})", e.pos)
    if q.fade is not None and not 0 < q.fade <= 1:
        raise _err(f"FADE FACTOR must be in (0, 1], got {q.fade:g}", q.clause_pos.get("fade"))
    if q.fade is not None and pref is None:
        raise _err("FADE FACTOR needs a WITH PREFERENCE clause", q.clause_pos.get("fade"))
    if q.window is not None and not q.window > 0:
        raise _err(f"WINDOW must be positive, got {q.window:g}", q.clause_pos.get("window"))
    if ct.error is not None and not 0 < ct.error < 1:
        raise _err(f"WITH ERROR must be a fraction in (0, 1), got {ct.error:g}", ct.pos.get("error"))
    if ct.confidence is not None and not 0 < ct.confidence < 1:
        raise _err(f"CONFIDENCE must be a fraction in (0, 1), got {ct.confidence:g}", ct.pos.get("error"))
    if ct.budget is not None and not ct.budget > 0:
        raise _err(f"WITHIN needs a positive budget, got {ct.budget:g}", ct.pos.get("budget"))
    if ct.exact and (ct.error is not None or ct.budget is not None):
        raise _err("EXACT cannot be combined with WITH ERROR or WITHIN (an exact answer has no budget)",
                   ct.pos.get("exact"))


def _check_grouped(e, gtexts):
    if str(e) in gtexts or isinstance(e, A.Aggregate) or isinstance(e, A.Literal):
        return
    if isinstance(e, A.Column):
        # accept qualified/unqualified spellings of a grouped column
        if any(t.split(".")[-1].lower() == e.cname.lower() for t in gtexts):
            return
        raise _err(f"column {e} must appear in GROUP BY or inside an aggregate", e.pos, str(e))
    for v in vars(e).values():
        if isinstance(v, A.Expr):
            _check_grouped(v, gtexts)
        elif isinstance(v, list):
            for x in v:
                if isinstance(x, A.Expr):
                    _check_grouped(x, gtexts)
