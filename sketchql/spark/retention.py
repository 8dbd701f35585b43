"""Which rows of an index build can still be in the index at the end: the exact cut.

A :class:`~sketchql.index.StreamIndex` fed rows in ``(ts, row id)`` order
drops old tuples only by whole zones of its coarsest granularity G_m.  With
``T1`` the granularity, ``R`` the rate, ``m`` the depth and ``n`` the zones
per granularity (``zones_per_granularity``, default R; n divides R), a tuple
of time ``ts`` lies in G1 period ``k = floor(ts / T1)`` (float64, the
ingest's own expression) and, once COLLAPSEd into G_m, in the G_m zone
``q = k // zp`` with ``zp = R^(m-1) / n`` G1 periods per zone.  When the
first tuple of period ``k_now`` arrives, every G_m zone with
``q < k_now // zp - n`` is dropped (``IngestSide._collapse_due``; for m = 1
the whole of G1 is dropped at every new period).  After an in-order ingest
whose newest time is ``hi`` (``k_now = floor(hi / T1)``), a tuple is left
in the index only if

    k >= K_cut = (k_now // zp - n) * zp        (m >= 2),   K_cut = k_now   (m = 1).

**Skipping the rows with k < K_cut gives the same index, byte for byte.**
K_cut is a multiple of zp, hence of the G_(m-1) period ``R^(m-2)`` (n divides
R) and of every finer period.  In the full ingest, the first tuple of a
period >= K_cut therefore COLLAPSEs every G_1..G_(m-1) that holds older
tuples and clears it (``period_start`` reset): those granularities are then
exactly as in a fresh index, and every G_m zone created from tuples before
K_cut has ``q < K_cut / zp = k_now // zp - n`` and is dropped by the end
(ring slots and tables are exact integers: a dropped zone leaves nothing).
From K_cut on, both ingests see the same tuples in the same state.  The row-
id counter is restored separately (the largest row id, see the callers).
The tests compare ``to_bytes`` with a full ingest over random geometries.
One field is outside this argument: with T4 the G1 slot capacity (the most
G1 zones any period has needed; it never shrinks) is written by
``to_bytes``, so a cut ingest -- like any pruned or partitioned build --
may write a smaller one when an older, cut period opened more zones; every
zone, tuple and table is the same.

A *margin* for filters that only know an upper bound ``U >= hi`` of the
newest time (the JVM job, per-partition pruning): ``k_now // zp > hi / T1 -
zp``, so ``K_cut T1 > hi - (n + 1) zp T1``; every row with
``ts <= U - margin``, ``margin = ((n + 1) zp + 1) T1``, has ``k < K_cut``
(the extra ``T1`` absorbs float rounding of ``ts / T1``); as K_cut only grows
with the clock, the same margin behind a partition's own newest time is safe
for the merged clock too.  The previous
rule kept ``2 (history + span(G_m)) + 2 T1``: 480 s instead of 130 s for
``GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)``.

>>> from sketchql.index import IndexConfig, SummaryDeclaration
>>> decl = SummaryDeclaration("s", "ev", "k", granularity=10.0, rate=2, depth=4)
>>> cfg = IndexConfig(structure="T3")
>>> prune_margin(decl, cfg)          # zp = 4 periods, n = 2: (3 * 4 + 1) * 10 s
130.0
>>> first_kept_period(decl, cfg, 1234.5)   # k_now = 123, 123 // 4 = 30, (30 - 2) * 4
112
"""
from __future__ import annotations

import math

import numpy as np


def _geometry(decl, config) -> tuple[float, int, int, int]:
    """(T1, m, zp, n): granularity, depth, G1 periods per G_m zone, zones per granularity."""
    R, m = int(decl.rate), int(decl.depth)
    n = int(getattr(config, "zones_per_granularity", None) or R)
    zp = R ** (m - 1) // n if m > 1 else 1
    return float(decl.granularity), m, zp, n


def first_kept_period(decl, config, hi: float) -> int:
    """K_cut: rows with ``floor(ts / T1) < K_cut`` are gone after an ingest ending at ``hi``."""
    T1, m, zp, n = _geometry(decl, config)
    k_now = int(math.floor(hi / T1))
    return k_now if m == 1 else (k_now // zp - n) * zp


def prune_margin(decl, config) -> float:
    """Seconds behind (an upper bound of) the newest time beyond which rows are cut."""
    T1, m, zp, n = _geometry(decl, config)
    return 2.0 * T1 if m == 1 else float(((n + 1) * zp + 1) * T1)


def kept_mask(decl, config, t: np.ndarray) -> np.ndarray | None:
    """Boolean mask of the rows (times ``t``, all finite) still in the index at the end,
    or None when every row is kept."""
    if not len(t):
        return None
    T1 = float(decl.granularity)
    k = np.floor(t / T1)                      # the ingest's period expression (float64)
    cut = first_kept_period(decl, config, float(t.max()))
    if k.min() >= cut:
        return None
    return k >= cut
