"""The engine's adapter to the stream index: build, feed and advance the declared summaries."""
from __future__ import annotations

import numpy as np

from ..operators.changes import Batch
from ..planner.catalog import SummaryDecl


def _build_indexes(decl: SummaryDecl, seed=None):
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
    cfg = None
    if seed is not None:
        # engine-declared: the configuration of a private PT index (IndexSource's default: 256 value
        # buckets of 64-counter sketches, the sketch memory of the 64 x 256 used before, a quarter of
        # the other values per cell).  With 64 buckets x 256 a shared-index SQL join at 50 units
        # per tuple spent 43k of its 263k compares without output, a private index 7.5k of 249k
        # (6,000 tuples, 300 items, 10 s window, desc: 219,604 pairs of 246,841 against 241,009
        # private; 256 x 64: 239,137)
        from ..index import IndexConfig
        cfg = IndexConfig(structure="T4", n_buckets=256, w=64, seed=int(seed))
    for a in decl.attrs:
        d = SummaryDeclaration(decl.name, decl.stream, a, decl.granularity, decl.rate, decl.depth)
        out[a] = SI(d, cfg) if cfg is not None else SI(d)
    return out


def private_copy(ix):
    """A fresh, empty index with the declaration and configuration of ``ix`` (unshared mode)."""
    import copy
    return type(ix)(ix.decl, copy.deepcopy(ix.config))


def _feed_indexes(decl: SummaryDecl, b: Batch, first_row: int):
    """Ingest a validated batch into the summary's indexes (row ids = stream row numbers)."""
    if not decl.index or not len(b):
        return
    rids = np.arange(first_row, first_row + len(b), dtype=np.int64)
    for a, idx in decl.index.items():
        if getattr(idx, "_value_layers", None):     # its value layers keep other columns too
            idx.ingest(b.columns[a], b.ts, rids, columns=b.columns)
        else:
            idx.ingest(b.columns[a], b.ts, rids)


def _advance_indexes(decl: SummaryDecl, now: float):
    if not decl.index:
        return
    for idx in decl.index.values():
        f = getattr(idx, "advance", None)
        if f is not None:
            f(now)


def covered_history(decl) -> float:
    """Seconds of history a declaration's index keeps: T1 (1 + rate + ... + rate^(m-1)), minus the
    last granularity's period (the covered history dips by it right after a COLLAPSE)."""
    g, r, m = float(decl.granularity), int(decl.rate), int(decl.depth)
    full = g * sum(r ** i for i in range(m))
    return full - g * r ** (m - 1) / max(r, 1) if m > 1 else g


def _auto_depth(window: float, granularity: float, rate: int) -> int:
    span = window if np.isfinite(window) else 600.0
    depth, hist = 1, granularity
    while hist < span + granularity and depth < 16:
        depth += 1
        hist += granularity * rate ** (depth - 1)
    return min(depth + 1, 16)


def auto_history(window: float, like_decl=None) -> float:
    """Seconds of history the index :func:`declare_auto` would declare for ``window`` keeps."""
    from types import SimpleNamespace
    g = float(like_decl.granularity) if like_decl is not None else 10.0
    r = int(like_decl.rate) if like_decl is not None else 2
    return covered_history(SimpleNamespace(granularity=g, rate=r, depth=_auto_depth(window, g, r)))


def declare_auto(catalog, schema, col: str, window: float, seed: int, like=None):
    """Declare (and register in ``catalog``) the index a query needs on ``schema.col``.

    Named ``_auto_<stream>_<col>[_<k>]``; granularity and rate of ``like`` (a declared index
    whose history was too short) or 10 s / 2; depth sized for ``window`` (whole stream: 600 s).
    The engine feeds it like any declared summary from then on, and the next query that needs
    ``schema.col`` reuses it.
    """
    from ..planner.catalog import SummaryDecl
    g = float(like.decl.granularity) if like is not None else 10.0
    r = int(like.decl.rate) if like is not None else 2
    depth = _auto_depth(window, g, r)
    base = f"_auto_{schema.name}_{col}"
    name, k = base, 1
    while catalog.summary(name) is not None:
        k += 1
        name = f"{base}_{k}"
    decl = SummaryDecl(name, schema.name, [col], g, r, depth)
    decl.index = _build_indexes(decl, seed=seed)
    catalog.add_summary(decl)
    return decl
