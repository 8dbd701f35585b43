"""Parse a ``CREATE SUMMARY`` declaration for the Spark pipeline.

    CREATE SUMMARY name ON stream (attr) WITH GRANULARITY <n> <unit> AND COLLAPSE(rate, depth)

The planner room owns the real grammar: this module uses
``sketchql.planner.parser.parse_one``.  Only if the planner cannot be imported
does a small private regex parser (``_fallback_parse``, a stop-gap) accept
exactly the form above.  Either way the result is a :class:`SummarySpec`: the declaration's
fields with the granularity converted to seconds (float64, the event-time unit
of the whole project).

>>> spec = parse_summary_declaration(
...     "CREATE SUMMARY s1 ON Store1 (ItemNo) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)")
>>> (spec.name, spec.stream, spec.attr, spec.granularity, spec.rate, spec.depth)
('s1', 'Store1', 'ItemNo', 10.0, 2, 4)
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from ..errors import SketchQLSyntaxError

_UNITS = {
    "MILLISECOND": 1e-3, "MILLISECONDS": 1e-3, "MS": 1e-3,
    "SECOND": 1.0, "SECONDS": 1.0, "SEC": 1.0, "SECS": 1.0, "S": 1.0,
    "MINUTE": 60.0, "MINUTES": 60.0, "MIN": 60.0, "MINS": 60.0,
    "HOUR": 3600.0, "HOURS": 3600.0,
    "DAY": 86400.0, "DAYS": 86400.0,
}


@dataclass(frozen=True)
class SummarySpec:
    """A parsed ``CREATE SUMMARY``: granularity in seconds, COLLAPSE(rate, depth)."""

    name: str
    stream: str
    attr: str
    granularity: float
    rate: int
    depth: int
    text: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "SummarySpec":
        return cls(**{k: d[k] for k in ("name", "stream", "attr", "granularity", "rate", "depth")},
                   text=d.get("text", ""))


# ---------------------------------------------------------------------------
# FALLBACK PARSER -- private stop-gap until sketchql.planner exposes its parser.
# ---------------------------------------------------------------------------
_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_NUM = r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+"
_FALLBACK_RE = re.compile(
    rf"""^\s*CREATE\s+SUMMARY\s+(?P<name>{_IDENT})
         \s+ON\s+(?P<stream>{_IDENT})\s*\(\s*(?P<attr>{_IDENT})\s*\)
         \s+WITH\s+GRANULARITY\s+(?P<n>{_NUM})\s*(?P<unit>[A-Za-z]+)
         \s+AND\s+COLLAPSE\s*\(\s*(?P<rate>[0-9]+)\s*,\s*(?P<depth>[0-9]+)\s*\)\s*;?\s*$""",
    re.IGNORECASE | re.VERBOSE,
)
_STEPS = [  # (regex of the prefix that must match, what is expected next)
    (r"^\s*CREATE\b", "CREATE"),
    (r"^\s*CREATE\s+SUMMARY\b", "SUMMARY"),
    (rf"^\s*CREATE\s+SUMMARY\s+{_IDENT}", "a summary name"),
    (rf"^\s*CREATE\s+SUMMARY\s+{_IDENT}\s+ON\b", "ON"),
    (rf"^\s*CREATE\s+SUMMARY\s+{_IDENT}\s+ON\s+{_IDENT}", "a stream name"),
    (rf"^\s*CREATE\s+SUMMARY\s+{_IDENT}\s+ON\s+{_IDENT}\s*\(\s*{_IDENT}\s*\)", "'(' attribute ')'"),
    (rf"^\s*CREATE\s+SUMMARY\s+{_IDENT}\s+ON\s+{_IDENT}\s*\(\s*{_IDENT}\s*\)\s+WITH\s+GRANULARITY\b",
     "WITH GRANULARITY"),
    (rf"^\s*CREATE\s+SUMMARY\s+{_IDENT}\s+ON\s+{_IDENT}\s*\(\s*{_IDENT}\s*\)\s+WITH\s+GRANULARITY\s+"
     rf"(?:{_NUM})\s*[A-Za-z]+", "a number and a time unit"),
    (rf"^\s*CREATE\s+SUMMARY\s+{_IDENT}\s+ON\s+{_IDENT}\s*\(\s*{_IDENT}\s*\)\s+WITH\s+GRANULARITY\s+"
     rf"(?:{_NUM})\s*[A-Za-z]+\s+AND\s+COLLAPSE\s*\(", "AND COLLAPSE("),
    (rf"^\s*CREATE\s+SUMMARY\s+{_IDENT}\s+ON\s+{_IDENT}\s*\(\s*{_IDENT}\s*\)\s+WITH\s+GRANULARITY\s+"
     rf"(?:{_NUM})\s*[A-Za-z]+\s+AND\s+COLLAPSE\s*\(\s*[0-9]+\s*,\s*[0-9]+\s*\)", "rate, depth)"),
]


def _syntax_error(text: str, message: str, pos: int, expected: list[str]) -> SketchQLSyntaxError:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    token = text[pos:].split()[0] if text[pos:].split() else "<end>"
    return SketchQLSyntaxError(message, line=line, column=column, token=token, expected=expected)


def _fallback_parse(text: str) -> SummarySpec:
    """Regex parser of the one declaration form (stop-gap; see module docstring)."""
    m = _FALLBACK_RE.match(text)
    if m is None:
        pos, expected = 0, "CREATE"
        for rx, what in _STEPS:
            mm = re.match(rx, text, re.IGNORECASE)
            if mm is None:
                expected = what
                break
            pos = mm.end()
        else:
            expected = "end of statement"
        while pos < len(text) and text[pos].isspace():
            pos += 1
        raise _syntax_error(text, f"CREATE SUMMARY: expected {expected}", pos, [expected])
    unit = m["unit"].upper()
    if unit not in _UNITS:
        raise _syntax_error(text, f"CREATE SUMMARY: unknown time unit {m['unit']!r}", m.start("unit"),
                            sorted(u for u in _UNITS if len(u) > 3))
    gran = float(m["n"]) * _UNITS[unit]
    rate, depth = int(m["rate"]), int(m["depth"])
    if gran <= 0:
        raise _syntax_error(text, "CREATE SUMMARY: GRANULARITY must be positive", m.start("n"), ["a number > 0"])
    if rate < 2:
        raise _syntax_error(text, "CREATE SUMMARY: COLLAPSE rate must be >= 2", m.start("rate"), ["an integer >= 2"])
    if depth < 1:
        raise _syntax_error(text, "CREATE SUMMARY: COLLAPSE depth must be >= 1", m.start("depth"), ["an integer >= 1"])
    return SummarySpec(m["name"], m["stream"], m["attr"], gran, rate, depth, text.strip())


# ---------------------------------------------------------------------------
def _planner_parse(text: str):
    """Parse with the planner's grammar (``sketchql.planner.parser.parse_one``).

    Returns None when the planner room is not importable (then the fallback
    parser is used); raises the planner's :class:`SketchQLSyntaxError` on bad
    input, or one of ours when the statement is not a one-attribute CREATE SUMMARY.
    """
    try:
        from ..planner.parser import parse_one
    except ImportError:
        return None
    node = parse_one(text)
    if type(node).__name__ != "CreateSummary":
        raise SketchQLSyntaxError(f"expected a CREATE SUMMARY statement, got {type(node).__name__}",
                                  line=1, column=1, token=text.split()[0] if text.split() else "<end>",
                                  expected=["CREATE SUMMARY"])
    attrs = list(getattr(node, "attrs", None) or [getattr(node, "attr", None)])
    pos = getattr(node, "pos", (1, 1)) or (1, 1)
    if len(attrs) != 1 or attrs[0] is None:
        raise SketchQLSyntaxError(f"CREATE SUMMARY {node.name}: Spark builds one attribute per summary, "
                                  f"got {attrs}", line=pos[0], column=pos[1], token=str(attrs),
                                  expected=["one attribute"])
    rate, depth = float(node.rate), float(node.depth)
    if not rate.is_integer() or not depth.is_integer():
        raise SketchQLSyntaxError(f"CREATE SUMMARY {node.name}: COLLAPSE(rate, depth) must be integers, "
                                  f"got ({node.rate}, {node.depth})", line=pos[0], column=pos[1],
                                  token="COLLAPSE", expected=["integers"])
    return SummarySpec(str(node.name), str(node.stream), str(attrs[0]), float(node.granularity),
                       int(rate), int(depth), text.strip())


def parse_summary_declaration(text: str) -> SummarySpec:
    """Parse ``CREATE SUMMARY ...``; raises :class:`SketchQLSyntaxError` on bad input."""
    if not isinstance(text, str) or not text.strip():
        raise SketchQLSyntaxError("CREATE SUMMARY: empty declaration", line=1, column=1, token="<end>",
                                  expected=["CREATE SUMMARY"])
    spec = _planner_parse(text)
    return spec if spec is not None else _fallback_parse(text)
