"""Columnar results returned by :class:`sketchql.index.StreamIndex`.

Every query-side result reports the *work units* it spent, so operators
can charge deterministic budgets:

- pyramid nodes visited (one sketch estimate of one value in one node);
- tuples compared (one stored tuple tested against one probe).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CELL_SHIFT = 16  # cell handle = zone_id << CELL_SHIFT | bucket
PROBE_DTYPE = np.dtype(np.int32)   # Matches.probe
MAX_PROBE_ROWS = 2 ** 31 - 1       # rows a probe batch may have (Matches.probe is int32)
SAME_AS_PROBE = "same as probe"    # Matches(region=SAME_AS_PROBE): the region column is the probe's


def cell_handle(zone_id, bucket):
    """Pack (zone id, value bucket) into one int64 cell handle."""
    return (np.asarray(zone_id, dtype=np.int64) << CELL_SHIFT) | np.asarray(bucket, dtype=np.int64)


def split_cell(cell):
    """Inverse of :func:`cell_handle`: (zone id, bucket)."""
    c = np.asarray(cell, dtype=np.int64)
    return c >> CELL_SHIFT, c & ((1 << CELL_SHIFT) - 1)


@dataclass
class IngestReport:
    """What one ``ingest`` call did.

    accepted / rejected: tuple counts; ``rejected_positions``: positions in
    the batch of the rejected tuples; ``reasons``: reason -> count (e.g.
    ``"late"``: ts < clock - allowed_lateness; ``"before_history"``: accepted
    by lateness but older than anything the index still covers).
    """

    received: int
    accepted: int
    rejected: int
    reasons: dict
    rejected_positions: np.ndarray
    clock: float
    first_row_id: int
    zones_started: int = 0
    collapses: int = 0
    seconds: float = 0.0


@dataclass
class Regions:
    """Promising regions for a batch of probe values (columnar, one row per region).

    probe : index of the probe value in the query batch
    cell : int64 cell handle (for ``scan`` / ``scan_matching``)
    zone, bucket : the cell's zone id and value bucket
    granularity : 1-based granularity index i
    estimate : estimated count of the probe value in the cell within the window
               (pro-rated by time overlap for partially covered cells)
    priority : estimate * fade ** (i - 1)
    partial : True when the cell only partly overlaps the window
    n_tuples : tuples stored in the cell (an upper bound on the probe cost)
    visited : pyramid nodes evaluated (work units) for the whole batch
    flat : (probe, leaf cell) pairs a flat scan of every overlapping cell would evaluate
    """

    probe: np.ndarray
    cell: np.ndarray
    zone: np.ndarray
    bucket: np.ndarray
    granularity: np.ndarray
    estimate: np.ndarray
    priority: np.ndarray
    partial: np.ndarray
    n_tuples: np.ndarray
    visited: int = 0
    flat: int = 0

    def __len__(self):
        return len(self.cell)

    def take(self, idx) -> "Regions":
        """Subset of the rows (e.g. sorted by priority); work counters kept."""
        return Regions(*(getattr(self, f)[idx] for f in
                         ("probe", "cell", "zone", "bucket", "granularity", "estimate", "priority",
                          "partial", "n_tuples")), visited=self.visited, flat=self.flat)


@dataclass
class ScanResult:
    """Tuples of a cell / window (columnar) and the tuples compared to get them."""

    values: np.ndarray
    timestamps: np.ndarray
    row_ids: np.ndarray
    work: int = 0

    def __len__(self):
        return len(self.row_ids)


class Matches:
    """Matching tuples of a vectorized probe: ``probe[k]`` matched stored tuple k.

    ``probe`` is int32 on every path (compiled and numpy, ``probe_many``, ``probe_regions``,
    ``scan_matching_many``, ``scan_window_many``): the row of the probe in its batch, and a batch
    has fewer than 2**31 rows (the index raises :class:`~sketchql.errors.SummaryError` otherwise).
    Four bytes instead of eight per match: the compiled probe writes ~28 bytes per match instead of
    32 (in-situ kernel at ~6,000 tuples per window ~3% faster).  Index arrays with it as they are;
    widen it (``astype(np.int64)``) before arithmetic that could exceed 2**31.
    ``values`` / ``timestamps`` / ``row_ids`` are the stored dtype / float64 / int64.

    ``region[k]`` (int64): the input row (``scan_matching_many``) or region row
    (``probe_regions``, ``probe_many``) of match k, or the probe row again
    (``scan_window_many``: given as ``region=SAME_AS_PROBE`` and widened from ``probe`` on first
    access).  ``probe_many`` also fills
    ``regions`` (the :class:`Regions` it probed) and ``visited`` (pyramid
    nodes evaluated).  The compiled ``probe_many`` gives the region column as
    ``region_ends`` (region r's matches are ``region_ends[r-1]:region_ends[r]``,
    matches come region by region) and ``region`` is expanded from it on first
    access: it is index metadata, not part of the join's output (probe, value,
    ts, row id), and writing it per match was a fifth of the kernel's output
    traffic.
    """

    __slots__ = ("probe", "values", "timestamps", "row_ids", "work", "_region", "_rend", "regions", "visited")

    def __init__(self, probe, values, timestamps, row_ids, work: int = 0, region=None,
                 regions: "Regions | None" = None, visited: int = 0, region_ends=None):
        self.probe, self.values, self.timestamps, self.row_ids = probe, values, timestamps, row_ids
        self.work, self.regions, self.visited = work, regions, visited
        if region is SAME_AS_PROBE:
            self._region = self._rend = None
        else:
            self._rend = region_ends if region is None else None
            self._region = region if region is not None or region_ends is not None else \
                np.zeros(0, dtype=np.int64)

    @property
    def region(self) -> np.ndarray:
        r = self._region
        if r is None:
            e = self._rend
            if e is None:                        # region = probe (SAME_AS_PROBE)
                r = self._region = self.probe.astype(np.int64)
            else:
                r = self._region = np.repeat(np.arange(len(e), dtype=np.int64), np.diff(e, prepend=0))
                self._rend = None
        return r

    @region.setter
    def region(self, value) -> None:
        self._region, self._rend = value, None

    def __repr__(self) -> str:
        return f"Matches(n={len(self)}, work={self.work}, visited={self.visited})"

    def __len__(self):
        return len(self.row_ids)
