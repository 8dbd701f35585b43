"""Stream k-constraints (STREAM §4.1): declared, measured, and handed to constraint-aware joins.

``engine.declare_constraint(kind, stream, attr, k, parent=None)`` records that
``stream.attr`` arrives ``clustered`` or ``ordered`` with adherence ``k``, or
that ``stream.attr`` references ``parent`` = ``(stream, attr)`` (``referential``:
every tuple's parent arrives before it or at most k parent tuples after it).
The engine *measures* every declared attribute as batches arrive (the smallest
k the data so far satisfies, per batch and overall), so a declaration can be
checked against the data (``engine.constraints.report()``), and
``engine.constraint_join(a, attr_a, b, attr_b)`` builds a
:class:`sketchql.operators.kconstraint.KConstraintJoin` with the declared
constraints mapped onto its two sides.

**SQL** (the paper's "constraint specifications at stream-registration time")::

    CREATE STREAM F (oid INT, q INT) TIMESTAMP ts
        CONSTRAINT CLUSTERED (oid) K 1
        CONSTRAINT REFERENTIAL (oid) REFERENCES O (id) K 0;
    ALTER STREAM F ADD CONSTRAINT ORDERED (q) K 3;

(``K`` defaults to 0.)  An ordinary join of two streams over UNBOUNDED windows
on one equality ``A.x = B.y`` whose sides carry declared constraints is then
planned with the constraint-aware join (:meth:`ConstraintRegistry.plan`: a
``kc_join`` node running :class:`~sketchql.operators.kconstraint.KConstraintJoinOp`,
EXPLAIN names the constraints): the same output as the exact join, smaller
synopses while the constraints hold, and on a violation the set-aside tuples
come back (reported in the node's and the registry's stats).  RANGE / ROWS
windows, several equalities or non-integer keys keep the exact join.

>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.execute("CREATE STREAM O (id INT) TIMESTAMP ts; CREATE STREAM F (oid INT) TIMESTAMP ts")
>>> _ = eng.declare_constraint("referential", "F", "oid", 0, parent=("O", "id"))
>>> _ = eng.declare_constraint("clustered", "F", "oid", 1)
>>> eng.push("F", {"ts": [1.0, 2.0, 3.0, 4.0], "oid": [1, 1, 2, 1]})
>>> r = eng.constraints.report()[1]
>>> r["kind"], r["declared_k"], r["measured_k"], r["holds"]
('clustered', 1, 1, True)
>>> j = eng.constraint_join("O", "id", "F", "oid")
>>> [(c.kind, c.stream, c.child, c.parent) for c in j.constraints]
[('referential', None, 1, 0), ('clustered', 1, None, None)]
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import SketchQLError, SketchQLSemanticError
from ..operators.kconstraint import (KINDS, Constraint, KConstraintJoin, KConstraintJoinOp, measure_clustered,
                                    measure_ordered)

__all__ = ["StreamConstraint", "ConstraintRegistry"]


@dataclass
class StreamConstraint:
    kind: str
    stream: str
    attr: str
    k: int
    parent: tuple | None = None
    measured_k: int = 0                   # smallest k the data seen so far satisfies
    tuples: int = 0
    _tail: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64), repr=False)

    def as_dict(self) -> dict:
        d = {"kind": self.kind, "stream": self.stream, "attr": self.attr, "declared_k": self.k,
             "measured_k": self.measured_k if self.kind != "referential" else None, "tuples": self.tuples,
             "holds": (self.measured_k <= self.k) if self.kind != "referential" else None}
        if self.parent is not None:
            d["parent"] = f"{self.parent[0]}.{self.parent[1]}"
        return d


class ConstraintRegistry:
    """Declared constraints of an engine's streams, measured on the data as it arrives."""

    #: keys of the most recent tuples of a measured attribute kept across batches
    WINDOW = 4096

    def __init__(self, engine):
        self.engine = engine
        self.items: list = []

    def declare(self, kind: str, stream: str, attr: str, k: int, parent=None) -> StreamConstraint:
        if kind not in KINDS:
            raise SketchQLError(f"constraint kind must be one of {', '.join(KINDS)}, got {kind!r}")
        h = self.engine.stream(stream)
        col = h.schema.column(attr)
        if col is None:
            raise SketchQLError(f"constraint: stream {h.name} has no column {attr!r}")
        if int(k) != k or k < 0:
            raise SketchQLError(f"constraint {kind} on {h.name}.{col}: k must be an integer >= 0, got {k!r}")
        if (kind == "referential") != (parent is not None):
            raise SketchQLError("constraint: referential needs parent=(stream, attr); the others take none")
        if parent is not None:
            ph = self.engine.stream(parent[0])
            pc = ph.schema.column(parent[1])
            if pc is None:
                raise SketchQLError(f"constraint: stream {ph.name} has no column {parent[1]!r}")
            parent = (ph.name, pc)
        c = StreamConstraint(kind, h.name, col, int(k), parent)
        self.items.append(c)
        return c

    def observe(self, stream: str, columns: dict) -> None:
        """Measure the adherence of the declared attributes of ``stream`` on a new batch."""
        for c in self.items:
            if c.stream.lower() != stream.lower() or c.kind == "referential":
                continue
            v = np.asarray(columns[c.attr]).astype(np.int64)
            seq = np.concatenate([c._tail, v])
            k = measure_clustered(seq) if c.kind == "clustered" else measure_ordered(seq)
            c.measured_k = max(c.measured_k, k)
            c.tuples += v.shape[0]
            c._tail = seq[-self.WINDOW:]

    def report(self) -> list:
        return [c.as_dict() for c in self.items]

    def for_join(self, a: str, attr_a: str, b: str, attr_b: str) -> list:
        """The declared constraints that apply to the join ``a.attr_a = b.attr_b`` (sides 0, 1)."""
        sides = {(a.lower(), attr_a.lower()): 0, (b.lower(), attr_b.lower()): 1}
        out = []
        for c in self.items:
            s = sides.get((c.stream.lower(), c.attr.lower()))
            if s is None:
                continue
            if c.kind == "referential":
                p = sides.get((c.parent[0].lower(), c.parent[1].lower()))
                if p is not None and p != s:
                    out.append(Constraint("referential", child=s, parent=p, k=c.k))
            else:
                out.append(Constraint(c.kind, stream=s, k=c.k))
        return out

    def join(self, a, attr_a, b, attr_b, spill: bool = True) -> KConstraintJoin:
        return KConstraintJoin(self.for_join(a, attr_a, b, attr_b), spill=spill)

    # -- SQL ---------------------------------------------------------------------------
    def declare_sql(self, stream: str, d, pos=(None, None)) -> StreamConstraint:
        """``CONSTRAINT ...`` of ``CREATE STREAM`` / ``ALTER STREAM ... ADD`` (an AST
        :class:`~sketchql.planner.ast.StreamConstraintDef`); errors say what and where."""
        where = getattr(d, "pos", None) or pos
        h = self.engine._streams.get(stream.lower())
        if h is None:
            raise SketchQLSemanticError(f"unknown stream {stream!r} in a CONSTRAINT clause", *where, token=stream)
        if not (isinstance(d.k, int) and d.k >= 0):
            raise SketchQLSemanticError(f"CONSTRAINT {d.kind.upper()} ({d.attr}): K must be an integer >= 0, "
                                        f"got {d.k!r}", *where)
        if (d.kind == "referential") != (d.parent_stream is not None):
            raise SketchQLSemanticError("CONSTRAINT REFERENTIAL (a) needs REFERENCES stream (b); CLUSTERED and "
                                        "ORDERED take no REFERENCES", *where)
        for sname, attr in ((stream, d.attr),) + (((d.parent_stream, d.parent_attr),) if d.parent_stream else ()):
            ph = self.engine._streams.get(sname.lower())
            if ph is None:
                raise SketchQLSemanticError(f"CONSTRAINT: unknown stream {sname!r}", *where, token=sname)
            col = ph.schema.column(attr)
            if col is None:
                raise SketchQLSemanticError(f"CONSTRAINT: stream {ph.schema.name} has no column {attr!r}", *where,
                                            token=attr)
            if ph.schema.columns[col] not in ("int", "bool"):
                raise SketchQLSemanticError(f"CONSTRAINT: {ph.schema.name}.{col} is {ph.schema.columns[col]}; "
                                            "k-constraints are on INT columns", *where, token=attr)
        parent = (d.parent_stream, d.parent_attr) if d.parent_stream else None
        return self.declare(d.kind, stream, d.attr, int(d.k), parent)

    def plan(self, plan):
        """Plan the joins of ``plan`` that declared constraints apply to with the constraint-aware
        join (module doc); returns ``plan`` (changed in place when one applies)."""
        if not self.items or plan.engine != "exact":
            return plan
        bq = plan.bound
        for node in plan.root.walk():
            if node.kind != "join" or len(node.children) != 2:
                continue
            conds = node.params["conditions"]
            scans = node.children
            if len(conds) != 1 or any(c.kind != "scan" for c in scans):
                continue
            srcs = [bq.sources[c.source] for c in scans]
            if any(s.schema.is_table for s in srcs) or any(not _unbounded(c) for c in scans):
                continue
            (i, ci), (j, cj) = conds[0]
            keys = (ci, cj) if i == 0 else (cj, ci)
            if any(srcs[s].schema.columns.get(keys[s]) not in ("int", "bool") for s in (0, 1)):
                continue
            names = [s.schema.name for s in srcs]
            cons = self.for_join(names[0], keys[0], names[1], keys[1])
            if not cons:
                continue
            aliases = node.params.get("aliases", names)
            desc = "; ".join(_describe(c, aliases, keys) for c in cons)
            node.kind = "kc_join"
            node.label = (f"KConstraintJoin ON {aliases[0]}.{keys[0]} = {aliases[1]}.{keys[1]} "
                          f"[{desc}]")
            node.structure = ("k-constraint synopses: tuples that can no longer join are set aside "
                              "(kept for a violation, which brings them back)")
            node.params["constraints"] = [(c.kind, c.stream, c.child, c.parent, c.k) for c in cons]
            node.op = KConstraintJoinOp(cons, keys, tuple(node.params["prefixes"]))
            plan.engine_reason += f"; k-constraint-aware join ({desc})"
        return plan


def _unbounded(scan) -> bool:
    w = scan.params.get("window")
    return (w is not None and w.kind not in ("range", "rows", "partition", "now")
            and w.start_at is None and w.end_at is None
            and scan.params.get("sample") in (None, 1.0) and scan.params.get("sampler") is None)


def _describe(c: Constraint, aliases, keys) -> str:
    if c.kind == "referential":
        return f"referential {aliases[c.child]}.{keys[c.child]} -> {aliases[c.parent]}.{keys[c.parent]} k={c.k}"
    return f"{c.kind} {aliases[c.stream]}.{keys[c.stream]} k={c.k}"
