"""Structured JSON errors of the service.

Every error response has the body ``{"error": {"type", "message", "status",
...where}}`` where the optional fields say where the problem is: ``line`` /
``column`` / ``token`` / ``expected`` for SQL, ``stream`` / ``column_name`` /
``row`` for batches, ``limit`` / ``value`` for limits, ``path`` for summary
files.  :func:`from_exception` maps sketchql's own errors:

============================  ======  ==========================================
exception                     status  fields
============================  ======  ==========================================
SketchQLSyntaxError           400     line, column, token, expected
SketchQLSemanticError         400     line, column, token
BatchError / LateTupleError   400     stream, column_name, row (parsed from text)
SummaryError / StoreError     400     path (when known)
any other SketchQLError       400
============================  ======  ==========================================

>>> e = ApiError(413, "limit_exceeded", "too big", limit="max_body_bytes")
>>> e.body()["error"]["limit"], e.status
('max_body_bytes', 413)
"""
from __future__ import annotations

import re

from ..engine.errors import SnapshotPastClock
from ..errors import LateTupleError, SketchQLError, SketchQLSemanticError, SketchQLSyntaxError


class ApiError(Exception):
    """An HTTP error with a JSON body (``status``, machine ``type``, ``message``, location fields)."""

    def __init__(self, status: int, type_: str, message: str, **fields):
        super().__init__(message)
        self.status = int(status)
        self.type = type_
        self.message = message
        self.fields = {k: v for k, v in fields.items() if v is not None}

    def body(self) -> dict:
        return {"error": dict({"type": self.type, "message": self.message, "status": self.status}, **self.fields)}


def not_found(what: str, name, known=None) -> ApiError:
    extra = f" (known: {', '.join(map(str, known))})" if known is not None else ""
    return ApiError(404, "not_found", f"unknown {what} {name!r}{extra}", resource=what, name=str(name))


def limit_exceeded(status: int, limit: str, value, maximum, what: str) -> ApiError:
    return ApiError(status, "limit_exceeded", f"{what}: {value} exceeds the limit {limit}={maximum}",
                    limit=limit, value=value, maximum=maximum)


_COL = re.compile(r"column '([^']*)'|column\(s\) \['([^']*)'")
_ROW = re.compile(r"\brow (\d+)\b")
_WHERE = re.compile(r"^(stream|table) (\S+?):")


def _batch_fields(msg: str) -> dict:
    out = {}
    m = _WHERE.match(msg)
    if m:
        out["stream"] = m.group(2)
    m = _COL.search(msg)
    if m:
        out["column_name"] = m.group(1) or m.group(2)
    m = _ROW.search(msg)
    if m:
        out["row"] = int(m.group(1))
    return out


def from_exception(exc: Exception, **where) -> ApiError:
    """The :class:`ApiError` for a sketchql exception (``where`` adds context fields)."""
    if isinstance(exc, ApiError):
        return exc
    name = type(exc).__name__
    msg = str(exc)
    if isinstance(exc, SketchQLSyntaxError):
        return ApiError(400, name, msg, line=exc.line, column=exc.column, token=exc.token,
                        expected=list(exc.expected) or None, **where)
    if isinstance(exc, SketchQLSemanticError):
        return ApiError(400, name, msg, line=exc.line, column=exc.column, token=exc.token, **where)
    if name == "BatchError" or isinstance(exc, LateTupleError):
        fields = _batch_fields(msg)
        fields.update({k: v for k, v in where.items() if v is not None})
        return ApiError(400, name, msg, **fields)
    if isinstance(exc, SnapshotPastClock):       # a well-formed time the query has not reached: 422
        return ApiError(422, name, msg, **where)
    if isinstance(exc, SketchQLError):
        return ApiError(400, name, msg, **where)
    return ApiError(500, "internal_error", f"{name}: {msg}", **where)
