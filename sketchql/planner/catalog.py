"""The catalog: declared streams, static tables and summaries.

Names are matched case-insensitively (SQL style) but keep the spelling they
were declared with.  Column types are normalised to four kinds the planner
reasons about: ``int``, ``float``, ``str``, ``bool`` (``TIMESTAMP`` columns are
``float`` seconds).

>>> cat = Catalog()
>>> s = cat.add_stream(Schema("Sales", {"price": "float", "ts": "float"}, timestamp="ts"))
>>> cat.get("sales").name, cat.get("SALES").column("PRICE")
('Sales', 'price')
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ..errors import SketchQLSemanticError

__all__ = ["Schema", "SummaryDecl", "Catalog", "TYPE_KINDS", "type_kind", "NUMERIC", "numpy_dtype"]

TYPE_KINDS = {
    "INT": "int", "INTEGER": "int", "BIGINT": "int", "SMALLINT": "int", "TINYINT": "int", "LONG": "int",
    "DOUBLE": "float", "FLOAT": "float", "REAL": "float", "DECIMAL": "float", "NUMERIC": "float",
    "TIMESTAMP": "float",
    "STRING": "str", "VARCHAR": "str", "TEXT": "str", "CHAR": "str",
    "BOOL": "bool", "BOOLEAN": "bool",
}
NUMERIC = ("int", "float")


def type_kind(name: str, pos=(None, None)) -> str:
    k = TYPE_KINDS.get(name.upper())
    if k is None:
        raise SketchQLSemanticError(
            f"unknown column type {name!r} (known: {', '.join(sorted(TYPE_KINDS))})", *pos, token=name)
    return k


def numpy_dtype(kind: str):
    return {"int": np.int64, "float": np.float64, "str": object, "bool": np.bool_}[kind]


@dataclass
class Schema:
    """A stream (``is_table=False``) or a static relation and its typed columns."""
    name: str
    columns: dict                      # canonical column name -> kind
    timestamp: Optional[str] = None    # the event-time column (streams)
    is_table: bool = False

    def column(self, name: str) -> Optional[str]:
        """Canonical spelling of a column (case-insensitive), or None."""
        if name in self.columns:
            return name
        low = name.lower()
        for c in self.columns:
            if c.lower() == low:
                return c
        return None


@dataclass
class SummaryDecl:
    """``CREATE SUMMARY name ON stream (attrs) WITH GRANULARITY g AND COLLAPSE(rate, depth)``."""
    name: str
    stream: str
    attrs: list
    granularity: float
    rate: float
    depth: int
    index: object = field(default=None, repr=False)   # the StreamIndex built by the engine


class Catalog:
    """Streams, tables and summaries by (case-insensitive) name."""

    def __init__(self):
        self._rel: dict[str, Schema] = {}
        self._sum: dict[str, SummaryDecl] = {}

    # -- relations ---------------------------------------------------------
    def add_stream(self, schema: Schema, pos=(None, None)) -> Schema:
        key = schema.name.lower()
        if key in self._rel or key in self._sum:
            raise SketchQLSemanticError(f"{schema.name!r} already exists", *pos, token=schema.name)
        self._rel[key] = schema
        return schema

    add_table = add_stream

    def get(self, name: str) -> Optional[Schema]:
        return self._rel.get(name.lower())

    def drop(self, kind: str, name: str, if_exists: bool = False, pos=(None, None)):
        key = name.lower()
        if kind == "summary":
            if key not in self._sum:
                if if_exists:
                    return None
                raise SketchQLSemanticError(f"unknown summary {name!r}", *pos, token=name)
            return self._sum.pop(key)
        rel = self._rel.get(key)
        if rel is None or rel.is_table != (kind == "table"):
            if if_exists:
                return None
            raise SketchQLSemanticError(f"unknown {kind} {name!r}", *pos, token=name)
        deps = [s.name for s in self._sum.values() if s.stream.lower() == key]
        if deps:
            raise SketchQLSemanticError(
                f"cannot drop {kind} {rel.name!r}: summaries {deps} are built on it (drop them first)",
                *pos, token=name)
        return self._rel.pop(key)

    @property
    def streams(self) -> list:
        return [s for s in self._rel.values() if not s.is_table]

    @property
    def tables(self) -> list:
        return [s for s in self._rel.values() if s.is_table]

    # -- summaries ---------------------------------------------------------
    def add_summary(self, decl: SummaryDecl, pos=(None, None)) -> SummaryDecl:
        key = decl.name.lower()
        if key in self._sum or key in self._rel:
            raise SketchQLSemanticError(f"{decl.name!r} already exists", *pos, token=decl.name)
        self._sum[key] = decl
        return decl

    def summary(self, name: str) -> Optional[SummaryDecl]:
        return self._sum.get(name.lower())

    def summaries_on(self, stream: str, attr: Optional[str] = None) -> list:
        out = [s for s in self._sum.values() if s.stream.lower() == stream.lower()]
        if attr is not None:
            out = [s for s in out if any(a.lower() == attr.lower() for a in s.attrs)]
        return out

    @property
    def summaries(self) -> list:
        return list(self._sum.values())
