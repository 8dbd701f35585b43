"""Request bodies of the service: JSON parsed with errors that say where, and bodies cut short.

:func:`parse_json` is ``json.loads`` whose every failure is a 400 ``invalid_json``
:class:`BodyError` with the ``line`` / ``column`` (1-based) of the problem --
including the failures ``json.loads`` raises without a position: an integer
literal longer than Python's int-conversion limit (``ValueError: Exceeds the
limit (4300 digits)``, located by finding the first run of more digits than
``sys.get_int_max_str_digits()``) and nesting deeper than the decoder's
recursion limit (``RecursionError``, located where the depth first passes
:data:`DEEP`, scanning outside strings).

:class:`BodyError` is an :class:`~sketchql.service.errors.ApiError` that is also
Starlette's ``HTTPException``: FastAPI re-raises those from its body parsing
(anything else there becomes the generic "There was an error parsing the
body"), so the app's ApiError handler answers with the position.

:class:`JsonRoute` makes FastAPI parse JSON bodies with :func:`parse_json`.

>>> parse_json(b'{"a": [1, 2]}')
{'a': [1, 2]}
>>> e = None
>>> try:
...     parse_json(b'{"k":\\n 1' + b'0' * 5000 + b'}')
... except BodyError as exc:
...     e = exc
>>> e.status, e.fields["line"], e.fields["column"]
(400, 2, 2)
"""
from __future__ import annotations

import json
import re
import sys

from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import Request

from .errors import ApiError

#: depth reported for a body nested beyond the JSON decoder's recursion limit
DEEP = 500


class BodyError(ApiError, StarletteHTTPException):
    """An :class:`ApiError` about the request body, raisable where FastAPI parses the body."""

    def __init__(self, status: int, type_: str, message: str, headers=None, **fields):
        ApiError.__init__(self, status, type_, message, **fields)
        self.status_code = self.status
        self.detail = message
        self.headers = headers

    def __str__(self):
        return self.message

    def __repr__(self):
        return f"BodyError({self.status}, {self.type!r}, {self.message!r})"


def _line_col(text, offset: int) -> tuple[int, int]:
    nl = b"\n" if isinstance(text, (bytes, bytearray)) else "\n"
    line = text.count(nl, 0, offset) + 1
    return line, offset - (text.rfind(nl, 0, offset) + 1) + 1


def _long_int_offset(text):
    limit = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
    pat = (rb"\d{%d,}" if isinstance(text, (bytes, bytearray)) else r"\d{%d,}") % (limit + 1)
    m = re.search(pat, text)
    return (m.start(), limit) if m else (None, limit)


def _deep_offset(text, depth: int = DEEP):
    """Offset where the nesting of arrays / objects (outside strings) first exceeds ``depth``, or None."""
    s = text.decode("utf-8", "replace") if isinstance(text, (bytes, bytearray)) else text
    d, in_str, esc = 0, False, False
    for i, ch in enumerate(s):
        if in_str:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            d += 1
            if d > depth:
                return len(s[:i].encode("utf-8")) if isinstance(text, (bytes, bytearray)) else i
        elif ch in "]}":
            d -= 1
    return None


def parse_json(body, where: str = "", **fields):
    """``json.loads(body)``; :class:`BodyError` 400 ``invalid_json`` with line / column otherwise.
    ``where`` prefixes the message (e.g. ``"stream S: "``); ``fields`` are added to the error."""
    try:
        return json.loads(body)
    except json.JSONDecodeError as exc:
        raise BodyError(400, "invalid_json", f"{where}invalid JSON at line {exc.lineno}, column {exc.colno}: "
                        f"{exc.msg}", line=exc.lineno, column=exc.colno, **fields) from None
    except UnicodeDecodeError as exc:
        line, col = _line_col(body, exc.start)
        raise BodyError(400, "invalid_json", f"{where}body is not UTF-8 ({exc.reason}) at line {line}, column "
                        f"{col}", line=line, column=col, **fields) from None
    except RecursionError:
        off = _deep_offset(body)
        pos = _line_col(body, off) if off is not None else (None, None)
        at = f" (deeper than {DEEP} levels at line {pos[0]}, column {pos[1]})" if off is not None else ""
        raise BodyError(400, "invalid_json", f"{where}invalid JSON: nested too deeply for the parser{at}",
                        line=pos[0], column=pos[1], **fields) from None
    except ValueError as exc:                 # e.g. an integer literal over the int-conversion digit limit
        off, limit = _long_int_offset(body)
        if off is None:
            raise BodyError(400, "invalid_json", f"{where}invalid JSON: {exc}", **fields) from None
        line, col = _line_col(body, off)
        raise BodyError(400, "invalid_json", f"{where}invalid JSON at line {line}, column {col}: a number with more "
                        f"than {limit} digits", line=line, column=col, **fields) from None


class _JsonRequest(Request):
    async def json(self):
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class JsonRoute(APIRoute):
    """An :class:`APIRoute` whose JSON body is parsed by :func:`parse_json` (errors with a position)."""

    def get_route_handler(self):
        handler = super().get_route_handler()

        async def route(request: Request):
            return await handler(_JsonRequest(request.scope, request.receive, request._send))
        return route
