"""Errors the engine raises about batches and history."""
from __future__ import annotations

from ..errors import SketchQLError


class BatchError(SketchQLError, ValueError):
    """A pushed batch does not match its stream's declaration (nothing of it was accepted)."""


class HistoryUnavailable(SketchQLError, LookupError):
    """A snapshot was asked for a time older than the query's retained change history."""
