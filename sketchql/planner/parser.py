"""Parser: sketchql text -> AST (``sketchql.planner.ast``), built on Lark.

The grammar (:data:`sketchql.planner.grammar.GRAMMAR`) is LALR(1) with Lark's
contextual lexer.  Every Lark error is translated into
:class:`~sketchql.errors.SketchQLSyntaxError` carrying the line, the column,
the offending token and the readable list of what was expected; nothing else
escapes :func:`parse` (numbers out of range become syntax errors too).

Durations: ``<number> [unit]`` with unit in ms / millisecond(s), s / sec(s) /
second(s), min(s) / minute(s), h / hour(s), d / day(s); a bare number is
seconds.  All converted to float seconds.

>>> stmts = parse("CREATE STREAM s (a INT) TIMESTAMP ts; SELECT SUM(a) FROM s [RANGE 1 MINUTE]")
>>> [type(s).__name__ for s in stmts]
['CreateStream', 'Query']
>>> stmts[1].select.from_items[0].window.size
60.0
>>> try:
...     parse("SELECT FROM s")
... except Exception as e:
...     print(type(e).__name__, e.line, e.column, e.token)
SketchQLSyntaxError 1 8 FROM
"""
from __future__ import annotations

import functools

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import (LarkError, UnexpectedCharacters, UnexpectedEOF,
                             UnexpectedInput, UnexpectedToken, VisitError)

from ..errors import SketchQLError, SketchQLSyntaxError
from . import ast as A
from .grammar import GRAMMAR

__all__ = ["parse", "parse_one", "parse_query", "UNIT_SECONDS"]

UNIT_SECONDS = {
    "ms": 1e-3, "msec": 1e-3, "msecs": 1e-3, "millisecond": 1e-3, "milliseconds": 1e-3,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hrs": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}

_LARK_OPTIONS = dict(parser="lalr", lexer="contextual", propagate_positions=True, maybe_placeholders=False)


def _lark_cache_path():
    """Where the built LALR tables are cached: ``$SKETCHQL_CACHE_DIR``, else ``$XDG_CACHE_HOME/sketchql``
    or ``~/.cache/sketchql``; the name holds a SHA-256 of the grammar, the options and the lark and
    Python versions, so a changed grammar never loads stale tables.  ``SKETCHQL_CACHE_DIR=off``: no cache."""
    import hashlib
    import os
    import sys

    import lark

    root = os.environ.get("SKETCHQL_CACHE_DIR")
    if root is not None and root.strip().lower() in ("", "0", "off", "none"):
        return None
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "sketchql")
    key = hashlib.sha256(repr((GRAMMAR, sorted(_LARK_OPTIONS.items()), lark.__version__,
                                sys.version_info[:2])).encode()).hexdigest()[:32]
    return os.path.join(root, f"lark-{key}.pickle")


@functools.lru_cache(maxsize=1)
def _lark() -> Lark:
    """The parser, built once per process; its tables come from the on-disk cache when it holds this
    grammar (building them takes 0.5-4 s, loading ~0.1 s).  An unreadable or corrupt cache file is
    rebuilt; an unwritable cache directory only means the next process builds again."""
    import os
    import tempfile

    path = _lark_cache_path()
    if path is not None:
        try:
            with open(path, "rb") as fh:
                return Lark.load(fh)
        except FileNotFoundError:
            pass
        except Exception:                       # truncated / foreign / other lark version: rebuild
            pass
    parser = Lark(GRAMMAR, **_LARK_OPTIONS)
    if path is not None:
        tmp = None
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".lark-", dir=os.path.dirname(path))
            with os.fdopen(fd, "wb") as fh:
                parser.save(fh)
            os.replace(tmp, path)               # atomic: a concurrent reader sees the old or the new file
            tmp = None
        except OSError:
            pass
        finally:
            if tmp is not None:
                try:
                    os.remove(tmp)
                except OSError:
                    pass
    return parser


class _Invalid(Exception):
    """Raised inside the transformer for lexically valid but meaningless literals."""

    def __init__(self, msg, tok):
        super().__init__(msg)
        self.msg, self.tok = msg, tok


def _pos(meta):
    return (getattr(meta, "line", None), getattr(meta, "column", None))


def _tokpos(tok):
    return (tok.line, tok.column)


def _is(tok, typ):
    return isinstance(tok, Token) and tok.type == typ


def _nontok(children):
    return [c for c in children if not isinstance(c, Token)]


@v_args(meta=True)
class _ToAST(Transformer):
    # ------------------------------------------------------------ leaves
    def name(self, meta, ch):
        t = ch[0]
        s = str(t)
        if t.type == "QUOTED_NAME":
            s = s[1:-1].replace('""', '"')
        return _Name(s, _tokpos(t))

    def number(self, meta, ch):
        t = ch[0]
        txt = str(t)
        v = float(txt)
        if v != v or v in (float("inf"),):
            raise _Invalid(f"number {txt!r} is out of range", t)
        exact = int(txt) if all(c.isdigit() for c in txt) else None
        if exact is not None and exact < 2**63:     # (compared as an int: float(txt) rounds 2**63 - 1 up)
            v = exact
        return _Num(v, _tokpos(t), exact)

    def duration(self, meta, ch):
        num = self.number(meta, [ch[0]])
        unit = ch[1] if len(ch) > 1 else None
        scale = UNIT_SECONDS[str(unit).lower()] if unit is not None else 1.0
        return _Dur(float(num.v) * scale, num.pos)

    def string(self, meta, ch):
        s = str(ch[0])
        if s.startswith("'"):
            s = s[1:-1].replace("''", "'")
        else:
            s = s[1:-1]
        return A.Literal(s, pos=_tokpos(ch[0]))

    def true(self, meta, ch):
        return A.Literal(True, pos=_pos(meta))

    def false(self, meta, ch):
        return A.Literal(False, pos=_pos(meta))

    def null(self, meta, ch):
        return A.Literal(None, pos=_pos(meta))

    # ------------------------------------------------------------ expressions
    def column(self, meta, ch):
        if len(ch) == 2:
            return A.Column(ch[0].s, ch[1].s, pos=ch[0].pos)
        return A.Column(None, ch[0].s, pos=ch[0].pos)

    def _lit(self, x):
        if isinstance(x, _Num):
            return A.Literal(x.v, pos=x.pos)
        return x

    def __default__(self, data, children, meta):  # pragma: no cover - grammar covers all
        raise _Invalid(f"unsupported construct {data}", None)

    def or_(self, meta, ch):
        items = []
        for c in _nontok(ch):
            c = self._lit(c)
            items.extend(c.items if isinstance(c, A.BoolOp) and c.op == "or" else [c])
        return A.BoolOp("or", items, pos=_pos(meta))

    def and_(self, meta, ch):
        items = []
        for c in _nontok(ch):
            c = self._lit(c)
            items.extend(c.items if isinstance(c, A.BoolOp) and c.op == "and" else [c])
        return A.BoolOp("and", items, pos=_pos(meta))

    def not_(self, meta, ch):
        e = self._lit(_nontok(ch)[0])
        if isinstance(e, (A.Exists, A.InSubquery)):     # NOT EXISTS / NOT (x IN (subquery))
            e.negated = not e.negated
            return e
        return A.Not(e, pos=_pos(meta))

    def in_subquery(self, meta, ch):
        neg = any(_is(c, "NOT") for c in ch)
        e, sub = _nontok(ch)
        return A.InSubquery(self._lit(e), sub, neg, pos=_pos(meta))

    def exists(self, meta, ch):
        return A.Exists(_nontok(ch)[0], False, pos=_pos(meta))

    # ------------------------------------------------------------ set operations
    def _setop(self, op, meta, ch):
        left, right = _nontok(ch)
        all_ = any(_is(c, "ALL_KW") for c in ch)
        for side in (right,):
            core = side.leftmost() if isinstance(side, A.SetOp) else side
            if core.stream_op is not None:
                raise _Invalid(f"{core.stream_op.upper()} applies to the whole query: write it in the "
                               f"first SELECT only", core.pos)
        return A.SetOp(op, all_, left, right, pos=_pos(meta))

    def set_union(self, meta, ch):
        return self._setop("union", meta, ch)

    def set_except(self, meta, ch):
        return self._setop("except", meta, ch)

    def set_intersect(self, meta, ch):
        return self._setop("intersect", meta, ch)

    def compare(self, meta, ch):
        l, op, r = ch
        op = {"==": "=", "<>": "!="}.get(str(op), str(op))
        return A.Compare(op, self._lit(l), self._lit(r), pos=_pos(meta))

    def between(self, meta, ch):
        neg = any(_is(c, "NOT") for c in ch)
        e, lo, hi = [self._lit(c) for c in _nontok(ch)]
        return A.Between(e, lo, hi, neg, pos=_pos(meta))

    def like(self, meta, ch):
        neg = any(_is(c, "NOT") for c in ch)
        e = self._lit(_nontok(ch)[0])
        pat = [c for c in ch if _is(c, "STRING")]
        s = str(pat[0])
        s = s[1:-1].replace("''", "'") if s.startswith("'") else s[1:-1]
        return A.Like(e, s, neg, pos=_pos(meta))

    def in_list(self, meta, ch):
        neg = any(_is(c, "NOT") for c in ch)
        items = [self._lit(c) for c in _nontok(ch)]
        return A.InList(items[0], items[1:], neg, pos=_pos(meta))

    def is_null(self, meta, ch):
        neg = any(_is(c, "NOT") for c in ch)
        return A.IsNull(self._lit(_nontok(ch)[0]), neg, pos=_pos(meta))

    def binop(self, meta, ch):
        l, op, r = ch
        return A.BinOp(str(op), self._lit(l), self._lit(r), pos=_pos(meta))

    def neg(self, meta, ch):
        raw = _nontok(ch)[0]
        if isinstance(raw, _Num) and raw.exact == 2**63:    # INT's least value: its magnitude alone is a DOUBLE
            return A.Literal(-2**63, pos=_pos(meta))
        e = self._lit(raw)
        if isinstance(e, A.Literal) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool):
            return A.Literal(-e.value, pos=_pos(meta))
        return A.Neg(e, pos=_pos(meta))

    def unary(self, meta, ch):  # "+" unary
        return self._lit(_nontok(ch)[0])

    def func_call(self, meta, ch):
        nm = ch[0]
        return A.FuncCall(nm.s.lower(), [self._lit(c) for c in _nontok(ch[1:])], pos=nm.pos)

    def agg_star(self, meta, ch):
        return ("star", False, [])

    def agg_exprs(self, meta, ch):
        distinct = any(_is(c, "DISTINCT") for c in ch)
        return ("exprs", distinct, [self._lit(c) for c in _nontok(ch)])

    def aggregate(self, meta, ch):
        func = str(ch[0]).lower()
        kind, distinct, args = ch[1]
        return A.Aggregate(func, args, distinct, pos=_tokpos(ch[0]))

    def summary_estimate(self, meta, ch):
        fn = [c for c in ch if _is(c, "AGG_FUNC")][0]
        if str(fn).lower() != "count":
            raise _Invalid(f"the summary estimates counts: SUMMARY.Estimate.Count(col), not {fn}", fn)
        col = [c for c in ch if isinstance(c, A.Column)][0]
        return A.SummaryEstimate(col, pos=_pos(meta))

    def star(self, meta, ch):
        return _Star()

    # ------------------------------------------------------------ select
    def item_expr(self, meta, ch):
        e = self._lit(ch[0])
        alias = ch[1] if len(ch) > 1 else None
        return A.SelectItem(e, alias.s if alias else None, pos=_pos(meta))

    def item_star(self, meta, ch):
        return A.SelectItem(None, None, star_of=ch[0].s, pos=_pos(meta))

    def alias(self, meta, ch):
        return [c for c in ch if isinstance(c, _Name)][0]

    def select_list(self, meta, ch):
        if len(ch) == 1 and isinstance(ch[0], _Star):
            return None
        return list(ch)

    def sample(self, meta, ch):
        return _Sample(float(_nontok(ch)[0].v), _pos(meta))

    def slide(self, meta, ch):
        return ("slide", _nontok(ch)[0])

    def window_where(self, meta, ch):
        return ("where", self._lit(_nontok(ch)[0]))

    def _opts(self, ch):
        d = {}
        for c in ch:
            if isinstance(c, tuple):
                d[c[0]] = c[1]
        return d

    def range_window(self, meta, ch):
        dur = _nontok(ch)[0]
        o = self._opts(ch)
        slide = o.get("slide")
        return A.Window("range", dur.v, slide.v if slide else None, where=o.get("where"), pos=_pos(meta))

    def range_unbounded(self, meta, ch):
        return A.Window("unbounded", where=self._opts(ch).get("where"), pos=_pos(meta))

    def rows_window(self, meta, ch):
        n = _nontok(ch)[0]
        return A.Window("rows", n.v, where=self._opts(ch).get("where"), pos=_pos(meta))

    def partition_window(self, meta, ch):
        cols = [c for c in ch if isinstance(c, A.Column)]
        n = [c for c in ch if isinstance(c, _Num)][0]
        return A.Window("partition", n.v, partition_by=cols, where=self._opts(ch).get("where"), pos=_pos(meta))

    def now_window(self, meta, ch):
        return A.Window("now", pos=_pos(meta))

    def _landmark_time(self, tok):
        if _is(tok, "NUMBER"):
            return float(self.number(None, [tok]).v)
        txt = str(tok)[1:-1].strip()
        try:
            return float(txt)
        except ValueError:
            pass
        import re
        m = re.fullmatch(r"(\d{1,2}):(\d{2})(?::(\d{2}(?:\.\d*)?))?", txt)
        if m:       # a time of day: seconds after the data clock's origin (deterministic)
            return int(m.group(1)) * 3600.0 + int(m.group(2)) * 60.0 + float(m.group(3) or 0.0)
        import pandas as pd
        try:
            t = pd.Timestamp(txt)
        except (ValueError, TypeError):
            raise _Invalid(f"landmark time {txt!r} is neither a number of seconds nor an ISO date-time",
                           tok) from None
        if t.tzinfo is None:
            t = t.tz_localize("UTC")
        return float(t.timestamp())

    def landmark_start(self, meta, ch):
        return ("start", self._landmark_time([c for c in ch if isinstance(c, Token)][-1]))

    def landmark_end(self, meta, ch):
        return ("end", self._landmark_time([c for c in ch if isinstance(c, Token)][-1]))

    def unbounded_window(self, meta, ch):
        o = self._opts(ch)
        return A.Window("unbounded", start_at=o.get("start"), end_at=o.get("end"), pos=_pos(meta))

    def window_spec(self, meta, ch):
        w = ch[0]
        w.pos = _pos(meta)
        return w

    def source_name(self, meta, ch):
        return ch[0]

    def source_subquery(self, meta, ch):
        return ch[0]

    def from_item(self, meta, ch):
        src = ch[0]
        item = A.FromItem(src.s if isinstance(src, _Name) else src, pos=_pos(meta))
        for m in ch[1:]:
            if isinstance(m, A.Window):
                if item.window is not None:
                    raise _Invalid("a FROM item may have only one window", m.pos)
                item.window = m
            elif isinstance(m, _Sample):
                if item.sample is not None:
                    raise _Invalid("a FROM item may have only one SAMPLE clause", m.pos)
                item.sample = m.p
            elif isinstance(m, _Name):
                if item.alias is not None:
                    raise _Invalid(f"a FROM item may have only one alias (got {item.alias!r} and {m.s!r})", m.pos)
                item.alias = m.s
        return item

    def where(self, meta, ch):
        return ("where", self._lit(_nontok(ch)[0]))

    def group_by(self, meta, ch):
        return ("group_by", [self._lit(c) for c in _nontok(ch)])

    def having(self, meta, ch):
        return ("having", self._lit(_nontok(ch)[0]))

    def select_core(self, meta, ch):
        stream_op = None
        distinct = False
        items = None
        froms = []
        extra = {}
        seen_list = False
        for c in ch:
            if _is(c, "STREAM_OP"):
                stream_op = str(c).lower()
            elif _is(c, "DISTINCT"):
                distinct = True
            elif isinstance(c, list) or (c is None and not seen_list):
                items, seen_list = c, True
            elif isinstance(c, A.FromItem):
                froms.append(c)
            elif isinstance(c, tuple):
                extra[c[0]] = c[1]
        return A.Select(items, froms, stream_op, distinct, extra.get("where"),
                        extra.get("group_by", []), extra.get("having"), pos=_pos(meta))

    # ------------------------------------------------------------ query clauses
    def preference(self, meta, ch):
        kind = "desc"
        exprs = []
        for c in ch:
            if _is(c, "PREF_KIND"):
                kind = str(c).lower()
            elif not isinstance(c, Token):
                exprs.append(self._lit(c))
        return A.Preference(kind, exprs, pos=_pos(meta))

    def fade(self, meta, ch):
        n = _nontok(ch)[0]
        return ("fade", n.v, n.pos)

    def window_clause(self, meta, ch):
        d = _nontok(ch)[0]
        return ("window", d.v, d.pos)

    def error_clause(self, meta, ch):
        nums = _nontok(ch)
        return ("error", (float(nums[0].v), float(nums[1].v) if len(nums) > 1 else None), nums[0].pos)

    def budget_clause(self, meta, ch):
        n = self.number(meta, [[c for c in ch if _is(c, "NUMBER")][0]])
        unit = [c for c in ch if _is(c, "UNIT") or _is(c, "PROBES_KW")][0]
        if unit.type == "PROBES_KW":
            return ("budget", (float(n.v), "probes"), n.pos)
        # a time budget: any time unit, stored in milliseconds
        return ("budget", (float(n.v) * UNIT_SECONDS[str(unit).lower()] * 1e3, "ms"), n.pos)

    def miss_clause(self, meta, ch):
        a = [c for c in ch if _is(c, "MISS_ACTION")][0]
        return ("on_miss", str(a).lower(), _tokpos(a))

    def exact_clause(self, meta, ch):
        return ("exact", True, _pos(meta))

    def query(self, meta, ch):
        q = A.Query(ch[0], pos=_pos(meta))
        q.span = (getattr(meta, "start_pos", None), getattr(meta, "end_pos", None))
        for c in ch[1:]:
            if isinstance(c, A.Preference):
                key, pos = "preference", c.pos
            else:
                key, pos = c[0], c[2]
            if key in q.clause_pos:
                raise _Invalid(f"clause {key.upper().replace('_', ' ')} given twice", pos)
            q.clause_pos[key] = pos
            if key == "preference":
                q.preference = c
            elif key == "fade":
                q.fade = float(c[1])
            elif key == "window":
                q.window = float(c[1])
            elif key == "error":
                q.contract.error, q.contract.confidence = c[1]
            elif key == "budget":
                q.contract.budget, q.contract.budget_unit = c[1]
            elif key == "on_miss":
                q.contract.on_miss = c[1]
            elif key == "exact":
                q.contract.exact = True
        q.contract.pos = dict(q.clause_pos)
        return q

    def explain_stmt(self, meta, ch):
        return A.Explain(ch[0], pos=_pos(meta))

    # ------------------------------------------------------------ DDL
    def coldef(self, meta, ch):
        return A.ColumnDef(ch[0].s, ch[1], pos=ch[0].pos)

    def type_name(self, meta, ch):
        c = ch[0]
        return (c.s if isinstance(c, _Name) else str(c)).upper()

    def ts_clause(self, meta, ch):
        return ("ts", [c for c in ch if isinstance(c, _Name)][0].s)

    def slack_clause(self, meta, ch):
        return ("slack", ch[0].v)

    def create_stream(self, meta, ch):
        nm = ch[0]
        cols = [c for c in ch if isinstance(c, A.ColumnDef)]
        ts = [c[1] for c in ch if isinstance(c, tuple) and c[0] == "ts"]
        slack = [c[1] for c in ch if isinstance(c, tuple) and c[0] == "slack"]
        cons = [c for c in ch if isinstance(c, A.StreamConstraintDef)]
        return A.CreateStream(nm.s, cols, ts[0] if ts else None, slack[0] if slack else None, cons, pos=_pos(meta))

    def stream_constraint(self, meta, ch):
        kind = str([c for c in ch if _is(c, "CONSTRAINT_KIND")][0]).lower()
        attr = [c for c in ch if isinstance(c, _Name)][0]
        ref = [c for c in ch if isinstance(c, tuple) and c[0] == "ref"]
        k = [c for c in ch if isinstance(c, _Num)]
        return A.StreamConstraintDef(kind, attr.s, k[0].v if k else 0, ref[0][1] if ref else None,
                                     ref[0][2] if ref else None, pos=_pos(meta))

    def references(self, meta, ch):
        names = [c for c in ch if isinstance(c, _Name)]
        return ("ref", names[0].s, names[1].s)

    def adherence(self, meta, ch):
        return [c for c in ch if isinstance(c, _Num)][0]

    def alter_stream(self, meta, ch):
        nm = [c for c in ch if isinstance(c, _Name)][0]
        con = [c for c in ch if isinstance(c, A.StreamConstraintDef)][0]
        return A.AlterStream(nm.s, con, pos=_pos(meta))

    def create_table(self, meta, ch):
        nm = [c for c in ch if isinstance(c, _Name)][0]
        return A.CreateTable(nm.s, [c for c in ch if isinstance(c, A.ColumnDef)], pos=_pos(meta))

    def if_exists(self, meta, ch):
        return _IfExists()

    def drop_stmt(self, meta, ch):
        kind = str([c for c in ch if _is(c, "DROP_KIND")][0]).lower()
        kind = "table" if kind == "relation" else kind
        nm = [c for c in ch if isinstance(c, _Name)][0]
        return A.Drop(kind, nm.s, any(isinstance(c, _IfExists) for c in ch), pos=_pos(meta))

    def create_summary(self, meta, ch):
        names = [c for c in ch if isinstance(c, _Name)]
        dur = [c for c in ch if isinstance(c, _Dur)][0]
        nums = [c for c in ch if isinstance(c, _Num)]
        return A.CreateSummary(names[0].s, names[1].s, [n.s for n in names[2:]], dur.v,
                               float(nums[0].v), float(nums[1].v), pos=_pos(meta))

    def start(self, meta, ch):
        return list(ch)


class _Name:
    __slots__ = ("s", "pos")

    def __init__(self, s, pos):
        self.s, self.pos = s, pos


class _Num:
    __slots__ = ("v", "pos", "exact")

    def __init__(self, v, pos, exact=None):
        self.v, self.pos, self.exact = v, pos, exact      # exact: the integer a digits-only literal spells


class _Dur:
    __slots__ = ("v", "pos")

    def __init__(self, v, pos):
        self.v, self.pos = v, pos


class _Sample:
    __slots__ = ("p", "pos")

    def __init__(self, p, pos):
        self.p, self.pos = p, pos


class _Star:
    pass


class _IfExists:
    pass


_READABLE = {"$END": "end of input"}
_NAMED = {"STREAM_OP": "ISTREAM/DSTREAM/RSTREAM", "PREF_KIND": "DESC/ASC/WEIGHTED",
          "MISS_ACTION": "RETURN/EXACT/FAIL", "DROP_KIND": "STREAM/TABLE/SUMMARY/QUERY",
          "PROBES_KW": "PROBES", "EXACT_KW": "EXACT", "TIMESTAMP_KW": "TIMESTAMP",
          "CONSTRAINT_KIND": "CLUSTERED/ORDERED/REFERENTIAL"}


def _readable(expected, parser) -> list[str]:
    names = {t.name: t for t in parser.terminals}
    out = []
    for e in sorted(set(expected or ())):
        if e in _READABLE:
            out.append(_READABLE[e])
            continue
        t = names.get(e)
        if t is not None and t.pattern.type == "str":
            out.append(repr(t.pattern.value).replace("'", '"') if not t.pattern.value.isalpha()
                       else t.pattern.value.upper())
        elif e == "NAME" or e == "QUOTED_NAME":
            out.append("a name")
        elif e == "NUMBER":
            out.append("a number")
        elif e == "STRING":
            out.append("a string")
        elif e == "UNIT":
            out.append("a time unit")
        elif e == "AGG_FUNC":
            out.append("an aggregate (COUNT, SUM, AVG, MIN, MAX, MEDIAN, QUANTILE)")
        elif e == "COMP_OP":
            out.append("a comparison (=, <>, <, <=, >, >=)")
        elif e in _NAMED:
            out.append(_NAMED[e])
        elif e in ("ADD_OP", "MUL_OP"):
            out.append("an operator (+, -, *, /, %)")
        else:
            out.append(e.replace("_KW", ""))
    # de-duplicate while keeping order
    seen, res = set(), []
    for x in out:
        if x not in seen:
            seen.add(x)
            res.append(x)
    return res


def _line_col_at_end(text: str):
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def parse(text: str) -> list:
    """Parse one or more ``;``-separated statements into AST nodes.

    Raises :class:`SketchQLSyntaxError` (line, column, token, expected) on any
    error; never another exception type for string input.
    """
    if not isinstance(text, str):
        raise SketchQLSyntaxError(f"expected the statement as a string, got {type(text).__name__}")
    parser = _lark()
    try:
        tree = parser.parse(text)
        stmts = _ToAST().transform(tree)
    except UnexpectedEOF as e:
        line, col = _line_col_at_end(text)
        exp = _readable(e.expected, parser)
        raise SketchQLSyntaxError(f"unexpected end of input; expected one of: {', '.join(exp)}",
                                  line, col, None, exp) from None
    except UnexpectedToken as e:
        tok = e.token
        exp = _readable(e.expected, parser)
        if tok.type == "$END":
            line, col = _line_col_at_end(text)
            raise SketchQLSyntaxError(f"unexpected end of input; expected one of: {', '.join(exp)}",
                                      line, col, None, exp) from None
        raise SketchQLSyntaxError(f"unexpected {str(tok)!r}; expected one of: {', '.join(exp)}",
                                  tok.line, tok.column, str(tok), exp) from None
    except UnexpectedCharacters as e:
        ch = text[e.pos_in_stream] if e.pos_in_stream is not None and e.pos_in_stream < len(text) else None
        exp = _readable(e.allowed, parser)
        raise SketchQLSyntaxError(f"unexpected character {ch!r}; expected one of: {', '.join(exp)}",
                                  e.line, e.column, ch, exp) from None
    except UnexpectedInput as e:  # pragma: no cover - other lark input errors
        raise SketchQLSyntaxError(f"syntax error: {e}", getattr(e, "line", None),
                                  getattr(e, "column", None)) from None
    except VisitError as e:
        orig = e.orig_exc
        if isinstance(orig, _Invalid):
            pos = orig.tok
            if isinstance(pos, Token):
                raise SketchQLSyntaxError(orig.msg, pos.line, pos.column, str(pos)) from None
            line, col = pos if isinstance(pos, tuple) else (None, None)
            raise SketchQLSyntaxError(orig.msg, line, col) from None
        if isinstance(orig, SketchQLError):
            raise orig from None
        raise SketchQLSyntaxError(f"could not read statement: {orig}") from None
    except LarkError as e:  # pragma: no cover
        raise SketchQLSyntaxError(f"syntax error: {e}") from None
    except RecursionError:
        raise SketchQLSyntaxError("statement nested too deeply") from None
    for s in stmts:
        q = s.query if isinstance(s, A.Explain) else s
        if isinstance(q, A.Query):
            a, b = getattr(q, "span", (None, None))
            q.text = text[a:b] if a is not None and b is not None else text
    if not stmts:
        raise SketchQLSyntaxError("empty statement", 1, 1)
    return stmts


def parse_one(text: str):
    """Parse exactly one statement."""
    stmts = parse(text)
    if len(stmts) != 1:
        raise SketchQLSyntaxError(f"expected one statement, got {len(stmts)}", 1, 1)
    return stmts[0]


def parse_query(text: str) -> A.Query:
    """Parse one SELECT statement (``EXPLAIN`` is unwrapped)."""
    s = parse_one(text)
    if isinstance(s, A.Explain):
        s = s.query
    if not isinstance(s, A.Query):
        raise SketchQLSyntaxError(f"expected a SELECT query, got {type(s).__name__}", *s.pos)
    return s
