"""The engine's adapter to the stream index: build, feed and advance the declared summaries."""
from __future__ import annotations

import numpy as np

from ..operators.changes import Batch
from ..planner.catalog import SummaryDecl


def _build_indexes(decl: SummaryDecl):
    """One ``sketchql.index.StreamIndex`` per attribute, if that package provides it.

    Thin adapter: returns ``{attr: index}`` or None when the index package has
    no ``StreamIndex`` yet (then the summary is only declared).
    """
    try:
        from .. import index as I
    except ImportError:  # pragma: no cover
        return None
    SI = getattr(I, "StreamIndex", None)
    if SI is None:
        return None
    from ..index.declaration import SummaryDeclaration
    out = {}
    for a in decl.attrs:
        d = SummaryDeclaration(decl.name, decl.stream, a, decl.granularity, decl.rate, decl.depth)
        out[a] = SI(d)
    return out


def _feed_indexes(decl: SummaryDecl, b: Batch, first_row: int):
    """Ingest a validated batch into the summary's indexes (row ids = stream row numbers)."""
    if not decl.index or not len(b):
        return
    rids = np.arange(first_row, first_row + len(b), dtype=np.int64)
    for a, idx in decl.index.items():
        idx.ingest(b.columns[a], b.ts, rids)


def _advance_indexes(decl: SummaryDecl, now: float):
    if not decl.index:
        return
    for idx in decl.index.values():
        f = getattr(idx, "advance", None)
        if f is not None:
            f(now)
