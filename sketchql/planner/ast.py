"""Abstract syntax tree of sketchql statements (plain dataclasses).

Every node carries ``pos = (line, column)`` (1-based, from the parser) so
that semantic errors can point at the offending text.

>>> from sketchql.planner.parser import parse_one
>>> q = parse_one("SELECT a FROM s [RANGE 10 SECONDS] WHERE a > 1")
>>> q.select.from_items[0].window.kind, q.select.from_items[0].window.size
('range', 10.0)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

Pos = tuple  # (line, column)


# ------------------------------------------------------------------ expressions
@dataclass
class Expr:
    pos: Pos = field(default=(None, None), compare=False, repr=False, kw_only=True)


@dataclass
class Column(Expr):
    table: Optional[str]
    name: str

    def __str__(self):
        return f"{self.table}.{self.name}" if self.table else self.name


@dataclass
class Literal(Expr):
    value: Any

    def __str__(self):
        return repr(self.value) if isinstance(self.value, str) else str(self.value)


@dataclass
class BinOp(Expr):
    op: str          # + - * / %
    left: Expr
    right: Expr

    def __str__(self):
        return f"({self.left} {self.op} {self.right})"


@dataclass
class Neg(Expr):
    operand: Expr

    def __str__(self):
        return f"-{self.operand}"


@dataclass
class Compare(Expr):
    op: str          # = != < <= > >=
    left: Expr
    right: Expr

    def __str__(self):
        return f"{self.left} {self.op} {self.right}"


@dataclass
class BoolOp(Expr):
    op: str          # and | or
    items: list

    def __str__(self):
        return "(" + f" {self.op.upper()} ".join(map(str, self.items)) + ")"


@dataclass
class Not(Expr):
    operand: Expr

    def __str__(self):
        return f"NOT {self.operand}"


@dataclass
class Between(Expr):
    operand: Expr
    low: Expr
    high: Expr
    negated: bool = False

    def __str__(self):
        return f"{self.operand} {'NOT ' if self.negated else ''}BETWEEN {self.low} AND {self.high}"


@dataclass
class Like(Expr):
    operand: Expr
    pattern: str
    negated: bool = False

    def __str__(self):
        return f"{self.operand} {'NOT ' if self.negated else ''}LIKE {self.pattern!r}"


@dataclass
class InList(Expr):
    operand: Expr
    items: list
    negated: bool = False

    def __str__(self):
        return f"{self.operand} {'NOT ' if self.negated else ''}IN ({', '.join(map(str, self.items))})"


@dataclass
class IsNull(Expr):
    operand: Expr
    negated: bool = False

    def __str__(self):
        return f"{self.operand} IS {'NOT ' if self.negated else ''}NULL"


@dataclass
class FuncCall(Expr):
    name: str
    args: list

    def __str__(self):
        return f"{self.name.upper()}({', '.join(map(str, self.args))})"


@dataclass
class Aggregate(Expr):
    func: str                 # count sum avg min max median quantile
    args: list                # [] for COUNT(*)
    distinct: bool = False

    def __str__(self):
        inner = "*" if not self.args else ("DISTINCT " if self.distinct else "") + ", ".join(map(str, self.args))
        return f"{self.func.upper()}({inner})"


@dataclass
class InSubquery(Expr):
    """``operand [NOT] IN (subquery)``: the subquery yields one column."""
    operand: Expr
    query: Any                        # Select | SetOp
    negated: bool = False

    def __str__(self):
        return f"{self.operand} {'NOT ' if self.negated else ''}IN (subquery)"


@dataclass
class Exists(Expr):
    """``[NOT] EXISTS (subquery)``, possibly correlated through equalities in its WHERE."""
    query: Any                        # Select | SetOp
    negated: bool = False

    def __str__(self):
        return f"{'NOT ' if self.negated else ''}EXISTS (subquery)"


@dataclass
class SummaryEstimate(Expr):
    """``SUMMARY.Estimate.Count(col)``: the index's frequency estimate of col's value."""
    column: Column

    def __str__(self):
        return f"SUMMARY.Estimate.Count({self.column})"


# ------------------------------------------------------------------ queries
@dataclass
class Window:
    kind: str                         # range | rows | partition | now | unbounded
    size: Optional[float] = None      # seconds (range) or rows
    slide: Optional[float] = None     # seconds
    partition_by: list = field(default_factory=list)   # [Column]
    where: Optional[Expr] = None      # CQL filter applied before the window
    start_at: Optional[float] = None  # landmark ``UNBOUNDED START AT t`` (seconds): ts >= t
    end_at: Optional[float] = None    # upper-bounded landmark ``... END AT t``: ts <= t
    pos: Pos = field(default=(None, None), compare=False, repr=False)

    def __str__(self):
        if self.kind == "range":
            return f"[RANGE {self.size:g} s" + (f" SLIDE {self.slide:g} s" if self.slide else "") + "]"
        if self.kind == "rows":
            return f"[ROWS {int(self.size)}]"
        if self.kind == "partition":
            return f"[PARTITION BY {', '.join(map(str, self.partition_by))} ROWS {int(self.size)}]"
        if self.kind == "unbounded" and (self.start_at is not None or self.end_at is not None):
            return ("[UNBOUNDED" + (f" START AT {self.start_at:g}" if self.start_at is not None else "") +
                    (f" END AT {self.end_at:g}" if self.end_at is not None else "") + "]")
        return f"[{self.kind.upper()}]"


@dataclass
class FromItem:
    source: Union[str, "Select"]
    alias: Optional[str] = None
    window: Optional[Window] = None
    sample: Optional[float] = None    # percent, CQL SAMPLE(p)
    pos: Pos = field(default=(None, None), compare=False, repr=False)

    @property
    def name(self) -> str:
        return self.alias or (self.source if isinstance(self.source, str) else "subquery")


@dataclass
class SelectItem:
    expr: Optional[Expr]              # None for ``alias.*``
    alias: Optional[str] = None
    star_of: Optional[str] = None
    pos: Pos = field(default=(None, None), compare=False, repr=False)


@dataclass
class Select:
    items: Optional[list]             # None = SELECT *
    from_items: list
    stream_op: Optional[str] = None   # istream | dstream | rstream
    distinct: bool = False
    where: Optional[Expr] = None
    group_by: list = field(default_factory=list)
    having: Optional[Expr] = None
    pos: Pos = field(default=(None, None), compare=False, repr=False)


@dataclass
class SetOp:
    """``left UNION|EXCEPT|INTERSECT [ALL] right`` (EXCEPT also spelled MINUS).

    ``left`` / ``right`` are :class:`Select` or nested :class:`SetOp`; the
    result has the left side's column names (SQL), compared positionally.
    """
    op: str                           # union | except | intersect
    all: bool
    left: Any
    right: Any
    pos: Pos = field(default=(None, None), compare=False, repr=False)

    def leftmost(self) -> "Select":
        x = self.left
        while isinstance(x, SetOp):
            x = x.left
        return x

    @property
    def stream_op(self):
        return self.leftmost().stream_op


@dataclass
class Preference:
    kind: str                         # desc | asc | weighted
    exprs: list
    pos: Pos = field(default=(None, None), compare=False, repr=False)


@dataclass
class Contract:
    """Precision/budget contract: error bound, budget per tuple, miss policy."""
    error: Optional[float] = None
    confidence: Optional[float] = None
    budget: Optional[float] = None
    budget_unit: Optional[str] = None     # ms | probes
    on_miss: Optional[str] = None         # return | exact | fail
    exact: bool = False
    pos: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass
class Query:
    select: Any                       # Select, or SetOp for UNION / EXCEPT / INTERSECT
    preference: Optional[Preference] = None
    fade: Optional[float] = None
    window: Optional[float] = None        # paper's ``WINDOW w`` (seconds)
    contract: Contract = field(default_factory=Contract)
    text: str = field(default="", compare=False, repr=False)
    pos: Pos = field(default=(None, None), compare=False, repr=False)
    clause_pos: dict = field(default_factory=dict, compare=False, repr=False)


# ------------------------------------------------------------------ DDL
@dataclass
class ColumnDef:
    name: str
    type: str
    pos: Pos = field(default=(None, None), compare=False, repr=False)


@dataclass
class CreateStream:
    name: str
    columns: list
    timestamp: Optional[str] = None
    slack: Optional[float] = None       # SLACK d: seconds of out-of-order input accepted (engine.ordering)
    constraints: list = field(default_factory=list)   # StreamConstraintDef (k-constraints, engine.constraints)
    pos: Pos = field(default=(None, None), compare=False, repr=False)


@dataclass
class StreamConstraintDef:
    """``CONSTRAINT CLUSTERED|ORDERED|REFERENTIAL (attr) [REFERENCES stream (attr)] [K k]``."""
    kind: str
    attr: str
    k: object = 0
    parent_stream: Optional[str] = None
    parent_attr: Optional[str] = None
    pos: Pos = field(default=(None, None), compare=False, repr=False)


@dataclass
class AlterStream:
    """``ALTER STREAM name ADD CONSTRAINT ...``."""
    name: str
    constraint: StreamConstraintDef
    pos: Pos = field(default=(None, None), compare=False, repr=False)


@dataclass
class CreateTable:
    name: str
    columns: list
    pos: Pos = field(default=(None, None), compare=False, repr=False)


@dataclass
class CreateSummary:
    name: str
    stream: str
    attrs: list
    granularity: float                # seconds
    rate: float
    depth: float
    pos: Pos = field(default=(None, None), compare=False, repr=False)


@dataclass
class Drop:
    kind: str                         # stream | table | summary | query
    name: str
    if_exists: bool = False
    pos: Pos = field(default=(None, None), compare=False, repr=False)


@dataclass
class Explain:
    query: Query
    pos: Pos = field(default=(None, None), compare=False, repr=False)


Statement = Union[CreateStream, CreateTable, CreateSummary, Drop, Explain, Query]


def walk(expr):
    """Yield ``expr`` and every sub-expression (pre-order)."""
    if expr is None:
        return
    yield expr
    for v in vars(expr).values():
        if isinstance(v, Expr):
            yield from walk(v)
        elif isinstance(v, list):
            for x in v:
                if isinstance(x, Expr):
                    yield from walk(x)
