"""Every control table of a running engine, collected and writable in one place.

The entities and their names (see :mod:`sketchql.control`):

============  ===============================  =================================================
kind          name                             source
============  ===============================  =================================================
engine        ``engine``                       budgets (memory bytes, CPU units/s), scheduler
stream        the stream's name                :class:`~sketchql.engine.streams.StreamHandle`
summary       ``<summary>.<attr>``             the declared :class:`~sketchql.index.StreamIndex`
                                               (knobs: :mod:`sketchql.approx.synopsis`)
query         ``q<id>``                        :class:`~sketchql.engine.query.Query`
operator      ``q<id>.n<i>`` (plan order)      a plan node (``PlanNode.stats/knobs/set_knob``)
queue         ``q<id>.n<i>.<queue>``           a promising-tuple operator's priority queue
============  ===============================  =================================================

An entity that implements :class:`~sketchql.control.Controllable` supplies its
own table; the plan nodes, indexes and queues (older classes with
``stats()`` and ``knobs()`` / ``set_knob``) are adapted here, with the knob
metadata of :data:`OPERATOR_KNOBS` where it is known.

>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.execute("CREATE STREAM S (v DOUBLE) TIMESTAMP ts")
>>> q = eng.register("SELECT v FROM S [RANGE 5]")
>>> ct = eng.controls
>>> [t.key for t in ct.tables()][:3]
['engine:engine', 'stream:S', 'query:q1']
>>> ct.set("stream", "S", "sample_rate", 0.5)
0.5
>>> ct.get("stream", "S").knobs["sample_rate"].value
0.5
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Optional

from ..control import ControlError, ControlTable, Controllable, Knob, jsonable

if TYPE_CHECKING:  # pragma: no cover
    from .facade import Engine

__all__ = ["ControlTables", "OPERATOR_KNOBS"]

#: metadata of the plan-node knobs (name -> Knob template; value filled in at read time)
OPERATOR_KNOBS = {
    "sample": Knob("sample", 1.0, "float", lo=0.0, hi=1.0, lo_open=True,
                   doc="Bernoulli sampling rate applied at this scan (per query)",
                   effect={"memory": 1, "cpu": 1, "precision": 1}),
    "budget": Knob("budget", None, "float", lo=0.0, lo_open=True, nullable=True,
                   doc="work units (probes) per input tuple of this operator",
                   effect={"memory": 0, "cpu": 1, "precision": 1}),
}


def _generic_knob(name, value) -> Knob:
    if isinstance(value, bool):
        kind = "bool"
    elif isinstance(value, (int, float)) or value is None:
        kind = "float"
    elif isinstance(value, str):
        kind = "str"
    else:                                           # structured (e.g. probe orders): shown, set as JSON
        return Knob(name, jsonable(value), "str", doc="structured value; set with the operator's own API",
                    settable=False)
    return Knob(name, value, kind, nullable=value is None)


class _Adapted:
    """A control table for an object with ``stats()`` and optional ``knobs()`` / ``set_knob``."""

    def __init__(self, kind: str, name: str, obj, parent: Optional[str] = None, templates=None):
        self.kind, self.name, self.obj, self.parent = kind, name, obj, parent
        self.templates = templates or {}

    def control_table(self) -> ControlTable:
        if isinstance(self.obj, Controllable):
            t = self.obj.control_table()
            t.kind, t.name, t.parent = self.kind, self.name, t.parent or self.parent
            return t
        stats = self.obj.stats() if hasattr(self.obj, "stats") else {}
        knobs = {}
        if hasattr(self.obj, "knobs"):
            for n, v in self.obj.knobs().items():
                tpl = self.templates.get(n)
                if tpl is not None:
                    k = tpl.with_value(v)
                else:
                    k = _generic_knob(n, v)
                knobs[n] = k
        return ControlTable(self.kind, self.name, stats, knobs, self.parent)

    def set_control(self, name, value):
        if isinstance(self.obj, Controllable):
            return self.obj.set_control(name, value)
        if not hasattr(self.obj, "set_knob"):
            raise ControlError(f"{self.kind} {self.name} has no settable knobs")
        self.obj.set_knob(name, value)


def _queues_of(op) -> dict:
    """The priority queues an operator holds (``queues()`` if it says, else its ``queue``; an
    adapter node is looked through to the operator it wraps, its ``op``)."""
    for _ in range(3):
        if op is None:
            return {}
        if hasattr(op, "queues"):
            return dict(op.queues())
        q = getattr(op, "queue", None)
        if q is not None and hasattr(q, "__len__"):
            return {"queue": q}
        op = getattr(op, "op", None)
    return {}


class _QueueStats:
    def __init__(self, q):
        self.q = q

    def stats(self):
        if hasattr(self.q, "stats"):
            return self.q.stats()
        d = {"entries": len(self.q)}
        for a in ("preference", "aging"):
            if hasattr(self.q, a):
                d[a] = getattr(self.q, a)
        if hasattr(self.q, "nbytes"):
            d["nbytes"] = int(self.q.nbytes)
        return d


class ControlTables:
    """All control tables of ``engine``: list, read one, write a knob (validated first)."""

    def __init__(self, engine: "Engine"):
        self.engine = engine

    def _entities(self) -> Iterator[tuple]:
        eng = self.engine
        yield ("engine", "engine", eng, None)
        for h in eng._streams.values():
            yield ("stream", h.name, h, None)
        for d in eng.catalog.summaries:
            for a, idx in (d.index or {}).items():
                yield ("summary", f"{d.name}.{a}", idx, f"stream:{d.stream}")
        for q in eng.queries:
            qn = f"q{q.id}"
            yield ("query", qn, q, None)
            for i, node in enumerate(q.plan.nodes):
                on = f"{qn}.n{i}"
                yield ("operator", on, node, f"query:{qn}")
                for qname, queue in _queues_of(node.op).items():
                    yield ("queue", f"{on}.{qname}", _QueueStats(queue), f"operator:{on}")

    def _wrap(self, kind, name, obj, parent):
        if kind == "summary" and not isinstance(obj, Controllable):
            from ..approx.synopsis import SummaryControl     # synopsis compression knobs
            obj = SummaryControl(obj)
        return _Adapted(kind, name, obj, parent, OPERATOR_KNOBS if kind == "operator" else None)

    def tables(self, kind: Optional[str] = None) -> list:
        """Every control table (of one ``kind`` if given), engine first, then top-down."""
        return [self._wrap(*e).control_table() for e in self._entities() if kind is None or e[0] == kind]

    def _find(self, kind: str, name: str) -> _Adapted:
        for e in self._entities():
            if e[0] == kind and e[1].lower() == str(name).lower():
                return self._wrap(*e)
        names = [e[1] for e in self._entities() if e[0] == kind]
        raise ControlError(f"no {kind} named {name!r} (known: {', '.join(names) or 'none'})")

    def get(self, kind: str, name: str) -> ControlTable:
        return self._find(kind, name).control_table()

    def set(self, kind: str, name: str, knob: str, value):
        """Set one knob after checking it against its domain; returns the value applied."""
        ent = self._find(kind, name)
        t = ent.control_table()
        v = t.knob(knob).coerce(value, where=f"{kind} {t.name}")
        ent.set_control(knob, v)
        return v

    def as_json(self, kind: Optional[str] = None) -> list:
        return [t.as_dict() for t in self.tables(kind)]
