"""Errors the engine raises about batches and history."""
from __future__ import annotations

from ..errors import SketchQLError


class BatchError(SketchQLError, ValueError):
    """A pushed batch does not match its stream's declaration (nothing of it was accepted)."""


class HistoryUnavailable(SketchQLError, LookupError):
    """A snapshot was asked for a time older than the query's retained change history."""


class SnapshotPastClock(SketchQLError, ValueError):
    """A snapshot was asked for a time past the query's clock: the relation there depends on tuples
    (and expirations) the query has not seen yet, so it is not defined."""
