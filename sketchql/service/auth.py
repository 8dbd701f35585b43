"""Bearer-token authentication with two roles: ``read`` and ``admin``.

Tokens come from a file (``--tokens-file``) and/or the environment variable
``SKETCHQL_TOKENS`` (``--token`` on the command line adds an admin token).

* file: one token per line, ``<role> <token>`` (``#`` starts a comment), e.g.::

      admin  s3cr3t-admin-token
      read   dashboard-viewer-token

* ``SKETCHQL_TOKENS="admin:s3cr3t,read:viewer"`` (comma separated ``role:token``).

When at least one token is configured, every request needs
``Authorization: Bearer <token>``: reads (GET, HEAD) need the ``read`` or
``admin`` role, every mutating request (POST, PUT, PATCH, DELETE) ``admin``
(``POST /explain`` changes nothing: ``read``).
``GET /health``, ``/docs``, ``/openapi.json``, the ``/dashboard`` page and
their static assets stay open (they reveal nothing of the data; the page's
own data requests carry the token).  A GET may carry the token as
``?access_token=`` instead (browsers' ``EventSource`` cannot send headers).
With ``public_read`` reads need no token.  Missing or unknown token: 401
(with ``WWW-Authenticate: Bearer``); a read token on a mutation: 403.
Tokens are compared in constant time.  Without tokens, nothing is checked
(the CLI then refuses to listen on a non-loopback address unless
``--insecure``).

>>> a = Auth({"t-admin": "admin", "t-read": "read"})
>>> a.role_of("t-read"), a.role_of("nope"), a.allows("read", "admin"), a.allows("admin", "read")
('read', None, False, True)
>>> parse_tokens_text("admin abcdefgh  # ops\\nread stuvwxyz")
{'abcdefgh': 'admin', 'stuvwxyz': 'read'}
"""
from __future__ import annotations

import hmac
import os
from typing import Optional

from .errors import ApiError

ROLES = ("read", "admin")
ENV_VAR = "SKETCHQL_TOKENS"
OPEN_PATHS = ("/health", "/docs", "/docs/oauth2-redirect", "/openapi.json", "/redoc", "/dashboard")
OPEN_PREFIXES = ("/docs-assets/", "/dashboard/static/", "/dashboard/vendor/")   # pages and assets, no data
READ_METHODS = ("GET", "HEAD", "OPTIONS")
READ_POSTS = ("/explain",)          # POSTs that change nothing


class TokenConfigError(ValueError):
    """A tokens file or variable that cannot be read (says which line / entry)."""


def _check(role: str, token: str, where: str) -> None:
    if role not in ROLES:
        raise TokenConfigError(f"{where}: role must be one of {', '.join(ROLES)}, got {role!r}")
    if len(token) < 8:
        raise TokenConfigError(f"{where}: a token must be at least 8 characters")


def parse_tokens_text(text: str, where: str = "tokens file") -> dict:
    """``token -> role`` from the file format (``<role> <token>`` per line)."""
    out = {}
    for i, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2:
            raise TokenConfigError(f"{where} line {i}: expected '<role> <token>', got {len(parts)} fields")
        role, token = parts
        _check(role, token, f"{where} line {i}")
        out[token] = role
    return out


def parse_tokens_env(value: str) -> dict:
    out = {}
    for j, item in enumerate(x.strip() for x in value.split(",")):
        if not item:
            continue
        if ":" not in item:
            raise TokenConfigError(f"{ENV_VAR} entry {j + 1}: expected 'role:token'")
        role, token = item.split(":", 1)
        _check(role.strip(), token.strip(), f"{ENV_VAR} entry {j + 1}")
        out[token.strip()] = role.strip()
    return out


def load_tokens(tokens_file: Optional[str] = None, env: Optional[dict] = None, admin_tokens=()) -> dict:
    """All configured tokens: the file, the environment variable and extra admin tokens."""
    tokens = {}
    if tokens_file:
        try:
            with open(tokens_file, encoding="utf-8") as fh:
                tokens.update(parse_tokens_text(fh.read(), where=tokens_file))
        except OSError as exc:
            raise TokenConfigError(f"cannot read tokens file {tokens_file!r}: {exc.strerror or exc}") from None
    value = (os.environ if env is None else env).get(ENV_VAR)
    if value:
        tokens.update(parse_tokens_env(value))
    for t in admin_tokens:
        _check("admin", t, "--token")
        tokens[t] = "admin"
    return tokens


class Auth:
    """The configured tokens and the check every request goes through (see module docstring)."""

    def __init__(self, tokens: dict, public_read: bool = False):
        self.tokens = dict(tokens)
        self.public_read = bool(public_read)

    @property
    def enabled(self) -> bool:
        return bool(self.tokens)

    def role_of(self, token: Optional[str]) -> Optional[str]:
        if not token:
            return None
        found = None
        for t, role in self.tokens.items():           # constant time per candidate; no early exit
            if hmac.compare_digest(t.encode(), token.encode()):
                found = role
        return found

    @staticmethod
    def allows(have: str, need: str) -> bool:
        return have == "admin" or (have == "read" and need == "read")

    @staticmethod
    def token_of(request) -> Optional[str]:
        h = request.headers.get("authorization")
        if h:
            scheme, _, value = h.partition(" ")
            if scheme.lower() == "bearer" and value.strip():
                return value.strip()
            return None
        if request.method in READ_METHODS:
            return request.query_params.get("access_token")
        return None

    def needed(self, request) -> Optional[str]:
        """The role a request needs (None: open)."""
        path = request.url.path
        if path in OPEN_PATHS or path.startswith(OPEN_PREFIXES):
            return None
        if request.method in READ_METHODS or (request.method == "POST" and path in READ_POSTS):
            return None if self.public_read else "read"
        return "admin"

    def check(self, request, role: Optional[str] = None) -> Optional[str]:
        """Raise 401/403 unless the request may do what needs ``role`` (default: by method/path)."""
        if not self.enabled:
            return None
        need = self.needed(request) if role is None else role
        if need is None or (need == "read" and self.public_read):
            return None
        have = self.role_of(self.token_of(request))
        if have is None:
            raw = request.headers.get("authorization")
            msg = ("this server needs a token: send 'Authorization: Bearer <token>'" if not raw and not
                   request.query_params.get("access_token") else "the token is not valid (unknown, or not "
                   "'Authorization: Bearer <token>')")
            raise ApiError(401, "unauthorized", msg, needs_role=need)
        if not self.allows(have, need):
            raise ApiError(403, "forbidden", f"{request.method} {request.url.path} needs the {need!r} role; "
                           f"this token has {have!r}", needs_role=need, role=have)
        return have
