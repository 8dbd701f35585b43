"""Control tables: the statistics and settable knobs of every runtime entity, one interface.

STREAM (section 6.1) exposes every stream, synopsis, operator and queue as a
table of attributes that the system, the allocator and the user read and write
alike.  sketchql does the same: each entity of the runtime -- the engine, a
stream, a summary (index), a query, an operator, a queue -- is described by a
:class:`ControlTable`:

* ``kind``  one of :data:`KINDS`;
* ``name``  its identity inside its kind (``"Store1"``, ``"s1.ItemID"``, ``"q3"``, ``"q3.n2"``);
* ``stats`` read-only measurements (rates, sizes, memory, probes, drops ...), a flat
  JSON-able dict;
* ``knobs`` the settable parameters, each a :class:`Knob` with its current value,
  its domain and its documented *effect*: for each resource in
  (``memory``, ``cpu``, ``precision``) the sign of the change when the knob's
  value grows (``+1`` grows it, ``-1`` shrinks it, ``0`` no effect).  The
  allocator uses the signs to know which way to turn; the dashboard prints them.

This module is a leaf: it imports nothing from sketchql but the errors, so
``index``, ``operators``, ``approx``, ``engine`` and ``service`` can all
speak it.  An object becomes controllable by implementing
:class:`Controllable` (``control_table()`` and ``set_control()``); the
engine's ``sketchql.engine.control_tables`` collects every table of a
running engine and routes writes.

Writes are validated before anything changes: :meth:`Knob.coerce` returns the
value in the knob's type or raises :class:`ControlError` naming the entity,
the knob and the allowed domain.

>>> k = Knob("sample_rate", 1.0, "float", lo=0.0, hi=1.0, lo_open=True,
...          doc="Bernoulli sampling rate of the input", effect={"memory": 1, "cpu": 1, "precision": 1})
>>> k.coerce("0.5")
0.5
>>> t = ControlTable("stream", "S", {"tuples_in": 10}, {"sample_rate": k})
>>> t.as_dict()["knobs"]["sample_rate"]["value"], t.as_dict()["knobs"]["sample_rate"]["effect"]["cpu"]
(1.0, 1)
>>> try:
...     t.knob("sample_rate").coerce(0, where="stream S")
... except ControlError as e:
...     print(e)
stream S: knob 'sample_rate' must be in (0, 1], got 0
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional, Protocol, runtime_checkable

from .errors import SketchQLError

__all__ = ["KINDS", "RESOURCES", "Knob", "ControlTable", "Controllable", "ControlError", "jsonable"]

#: the kinds of entity that have a control table, from the top of the runtime down
KINDS = ("engine", "stream", "summary", "query", "operator", "queue")
#: the resources a knob's documented effect talks about
RESOURCES = ("memory", "cpu", "precision")


class ControlError(SketchQLError, ValueError):
    """A control-table read or write named an unknown entity or knob, or a value outside its domain."""


def jsonable(x):
    """Numbers, strings, lists and dicts that ``json.dumps`` accepts (numpy scalars unwrapped,
    non-finite floats as None)."""
    if x is None or isinstance(x, (bool, str)):
        return x
    if hasattr(x, "item") and not hasattr(x, "__len__"):      # numpy scalar
        x = x.item()
    if isinstance(x, bool):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in x]
    if hasattr(x, "tolist"):
        return jsonable(x.tolist())
    return str(x)


@dataclass
class Knob:
    """One settable parameter: value, domain, documentation and effect.

    ``kind`` is ``"float"``, ``"int"``, ``"bool"``, ``"choice"`` (one of
    ``choices``) or ``"str"``.  ``lo``/``hi`` bound numbers (``lo_open`` /
    ``hi_open`` exclude the bound); ``nullable`` admits ``None`` (meaning
    "no limit" or "unset", as ``doc`` says).  ``effect`` maps each of
    :data:`RESOURCES` to the sign of its change when the value grows.
    ``settable=False`` marks a value that is shown with the knobs but only
    the system changes (e.g. one the allocator owns while it is enabled).
    """

    name: str
    value: Any
    kind: str = "float"
    lo: Optional[float] = None
    hi: Optional[float] = None
    lo_open: bool = False
    hi_open: bool = False
    choices: Optional[tuple] = None
    nullable: bool = False
    doc: str = ""
    effect: dict = field(default_factory=dict)
    settable: bool = True

    def _domain(self) -> str:
        if self.kind == "choice":
            d = "one of " + ", ".join(repr(c) for c in (self.choices or ()))
        elif self.kind == "bool":
            d = "true or false"
        elif self.kind in ("float", "int"):
            lo = "-inf" if self.lo is None else f"{self.lo:g}"
            hi = "inf" if self.hi is None else f"{self.hi:g}"
            br = ("(" if self.lo_open or self.lo is None else "[") + f"{lo}, {hi}" + \
                 (")" if self.hi_open or self.hi is None else "]")
            d = ("an integer" if self.kind == "int" else "") + (" in " if self.kind == "int" else "in ") + br
        else:
            d = "a string"
        return d + (" or null" if self.nullable else "")

    def coerce(self, value, where: str = ""):
        """``value`` converted to this knob's type, or :class:`ControlError` saying the domain."""
        pre = f"{where}: " if where else ""

        def bad():
            return ControlError(f"{pre}knob {self.name!r} must be {self._domain()}, got {value!r}")

        if not self.settable:
            raise ControlError(f"{pre}knob {self.name!r} is read-only here ({self.doc or 'set by the system'})")
        if value is None:
            if self.nullable:
                return None
            raise bad()
        if self.kind == "bool":
            if isinstance(value, bool):
                return value
            if isinstance(value, (int, float)) and value in (0, 1):
                return bool(value)
            if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
                return value.lower() in ("true", "1")
            raise bad()
        if self.kind == "choice":
            for c in self.choices or ():
                if value == c or (isinstance(value, str) and isinstance(c, str) and value.lower() == c.lower()):
                    return c
            raise bad()
        if self.kind == "str":
            if not isinstance(value, str):
                raise bad()
            return value
        if isinstance(value, bool):
            raise bad()
        try:
            v = float(value)
        except (TypeError, ValueError):
            raise bad() from None
        if math.isnan(v):
            raise bad()
        if self.kind == "int":
            if math.isinf(v) and self.nullable:
                return None
            if not math.isfinite(v) or not v.is_integer():
                raise bad()
        if self.lo is not None and (v < self.lo or (self.lo_open and v == self.lo)):
            raise bad()
        if self.hi is not None and (v > self.hi or (self.hi_open and v == self.hi)):
            raise bad()
        return int(v) if self.kind == "int" else v

    def with_value(self, value) -> "Knob":
        """A copy of this knob (a spec) holding the current ``value``."""
        return replace(self, value=value)

    def as_dict(self) -> dict:
        return jsonable({"value": self.value, "kind": self.kind, "lo": self.lo, "hi": self.hi,
                         "lo_open": self.lo_open, "hi_open": self.hi_open,
                         "choices": list(self.choices) if self.choices else None,
                         "nullable": self.nullable, "doc": self.doc,
                         "effect": {r: int(self.effect.get(r, 0)) for r in RESOURCES},
                         "settable": self.settable})


@dataclass
class ControlTable:
    """The statistics and knobs of one entity (see the module docstring)."""

    kind: str
    name: str
    stats: dict = field(default_factory=dict)
    knobs: dict = field(default_factory=dict)      # name -> Knob
    parent: Optional[str] = None                   # e.g. the query of an operator: "query:q3"

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ControlError(f"unknown control-table kind {self.kind!r} (kinds: {', '.join(KINDS)})")

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.name}"

    def knob(self, name: str) -> Knob:
        k = self.knobs.get(name)
        if k is None:
            raise ControlError(f"{self.kind} {self.name} has no knob {name!r} "
                               f"(knobs: {', '.join(sorted(self.knobs)) or 'none'})")
        return k

    def as_dict(self) -> dict:
        return {"kind": self.kind, "name": self.name, "parent": self.parent,
                "stats": jsonable(self.stats),
                "knobs": {n: k.as_dict() for n, k in self.knobs.items()}}


@runtime_checkable
class Controllable(Protocol):
    """What an entity implements to have a control table.

    ``control_table()`` builds the current table (cheap: counters, not scans);
    ``set_control(name, value)`` receives a value already checked by
    :meth:`Knob.coerce` and applies it (it may still raise :class:`ControlError`
    for cross-knob constraints, leaving the entity unchanged).
    """

    def control_table(self) -> ControlTable: ...

    def set_control(self, name: str, value) -> None: ...


def set_knob(entity: Controllable, name: str, value) -> Any:
    """Validate ``value`` against the entity's knob ``name`` and apply it; returns the coerced value."""
    t = entity.control_table()
    v = t.knob(name).coerce(value, where=f"{t.kind} {t.name}")
    entity.set_control(name, v)
    return v


Setter = Callable[[Any], None]
