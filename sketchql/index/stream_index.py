"""StreamIndex: multi-granularity count-sketch pyramids with self-adjusting zones.

Code layout: this module holds the class, its geometry, construction,
hashing and zone bookkeeping; the rest comes from three mixins along the
seams -- :mod:`~sketchql.index.ingest_side` (ingest, COLLAPSE, late tuples,
``advance``), :mod:`~sketchql.index.query_side` (estimates, promising
regions, probes, scans) and :mod:`~sketchql.index.persist` (compress,
``to_bytes``/``from_bytes``, ``copy``, ``merge``).  Import it as
``from sketchql.index import StreamIndex`` (or from this module).

Geometry (all boundaries are aligned to epoch 0, so indexes built on
different partitions line up and merge exactly):

- G1 holds the current *period* ``[k T1, (k+1) T1)`` (k = floor(ts / T1)).
  It is split into zones: fixed zones of length ``T1 / g1_zones`` (T1-T3) or
  self-adjusting zones (T4: a new zone when the zone's confidence drops below
  ``theta`` - see :mod:`sketchql.index.change` - or the zone is longer than
  ``max_zone_length``).
- G(i), i >= 2, holds the current period of length ``|Gi| = T1 rate^(i-1)``
  as a ring of n zones (n = ``zones_per_granularity``, default rate) of
  length ``|Gi| / n``.  When the clock leaves a period of G(i) (i < m), the
  whole granularity is COLLAPSEd (paper Figure 5): its zones' tables are
  added and its tuple lists concatenated into *one* zone of G(i+1), and G(i)
  is emptied.  Gm keeps the last n zones before the current one; older zones
  fall off (their tables are subtracted from Gm's pyramid).
- Cells = value bucket (seeded hash of the value, ``n_buckets``; 1 for T1/T2)
  x zone.  A zone stores one (B, d, w) int64 table, i.e. B count sketches
  sharing hash functions; sketches of every cell of a granularity form a
  pyramid (:mod:`sketchql.index.pyramid`).

Memory is bounded by the declaration: sketch tables are fixed per slot
(``max_g1_zones`` G1 slots, n slots per older granularity, each at most
doubled by the pyramid) and tuple lists hold only the covered history
(< T1 (1 + rate + ... + rate^(m-1)) + |Gm|).

Window convention (DESIGN.md): a tuple with timestamp ts is in the window
(t_from, t_to] iff ``t_from < ts <= t_to``.  A zone's overlap with a window is
decided from its actual data range [min_ts, max_ts].  ``estimate`` answers
fully covered cells from their (summed) sketches and partially covered edge
cells *exactly from their tuples*; ``promising_regions`` pro-rates a
partial cell's estimate by the share of its data time range inside the
window.

Query side: ``promising_regions`` (and ``probe_many`` on its numpy
reference path) run on a cached *query view* (:mod:`sketchql.index.query`):
every non-empty pyramid node of every granularity flattened into arrays
(ranges, thresholds, ancestors, a CSR of the cells' tuples), with all
pyramid tables bound into one shared buffer so a batch's estimates are one
gather.  The view is rebuilt lazily after changes (per granularity), or
patched when only G1's open zone received tuples.  ``probe_many`` runs by
default compiled (numba, :mod:`sketchql.index.kernels`) over an
incrementally maintained view (:mod:`sketchql.index.kview`; the open zone's
tuples are linked per bucket at ingest time, and an index probed since its
last batch brings the view up to date at the end of the next ingest, so the
probe that follows only checks it), with identical results;
``scan_window_many`` is the raw-window join of structure T1.  Ingest hashes a batch once (:mod:`sketchql.index.hasher`)
and updates the sketches of small batches sparsely (only the touched
counters, with exact incremental row norms for the pruning thresholds).

Late data: the clock is the largest timestamp (or heartbeat) seen.  A tuple
with ``ts < clock - allowed_lateness`` (the clock including earlier tuples of
the same batch) is rejected and counted with reason ``"late"``; one within
the lateness is routed to the zone covering ts (reason ``"before_history"``
if that part of history was already dropped).

>>> import numpy as np
>>> decl = SummaryDeclaration("s", "S", "a", granularity=1.0, rate=2, depth=3)
>>> ix = StreamIndex(decl, IndexConfig(structure="T3", n_buckets=4))
>>> _ = ix.ingest(np.array([7, 7, 8]), np.array([0.1, 0.2, 1.5]))
>>> ix.window_tuples(0.1, 2.0).row_ids.tolist()    # (0.1, 2.0]: ts=0.1 excluded
[1, 2]
>>> [len(z) for z in ix.stats()["zones_per_granularity"]]
[1, 1, 0]
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import SummaryError
from ..summaries.countsketch import CountSketch
from .declaration import IndexConfig, SummaryDeclaration
from .hasher import CellHasher
from .pyramid import Granularity
from .zone import Zone
from .ingest_side import IngestSide
from .persist import PersistSide
from .query_side import QuerySide
from .value_layer import layers_nbytes

_BUCKET_SALT = 0xB0C4E7


class StreamIndex(IngestSide, QuerySide, PersistSide):
    """The index of one stream attribute (see the module docstring for the math).

    Parameters: ``decl`` (:class:`SummaryDeclaration`), ``config``
    (:class:`IndexConfig`, default ``IndexConfig()``).

    Ingest side: :meth:`ingest`, :meth:`advance`.  Query side:
    :meth:`estimate`, :meth:`error_bound`, :meth:`promising_regions`,
    :meth:`scan`, :meth:`scan_matching`, :meth:`scan_matching_many`,
    :meth:`probe_regions`, :meth:`probe_many` (regions + matching of a probe
    batch in one vectorized pass), :meth:`window_tuples`.  Management: :meth:`stats`,
    :attr:`nbytes`, :meth:`compress`, :meth:`to_bytes`/:meth:`from_bytes`,
    :meth:`merge`.

    Cell handles (int64) stay valid across COLLAPSE (they resolve to the zone
    the tuples moved into, so a scan may then return more, older tuples of
    the merged cell; ``scan_matching`` filters by window anyway); a handle whose
    tuples were dropped scans as empty.  Handles are not preserved by
    ``to_bytes``/``from_bytes``/``merge``.

    >>> import numpy as np
    >>> decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2)
    >>> ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=4, w=32))
    >>> _ = ix.ingest(np.arange(100) % 5, np.linspace(0, 9.9, 100))
    >>> float(ix.estimate(np.array([3]), -1.0, 10.0)[0])
    20.0
    """

    use_kernels = True      # compiled probe paths (sketchql.index.kernels); False: the numpy reference

    def __init__(self, decl: SummaryDeclaration, config: IndexConfig | None = None):
        if not isinstance(decl, SummaryDeclaration):
            raise SummaryError(f"StreamIndex: decl must be a SummaryDeclaration, got {type(decl).__name__}")
        self.decl = decl
        self.config = (config if config is not None else IndexConfig()).validate(decl)
        cfg = self.config
        self._sig = cfg.fixed_signature()
        self._structure = cfg.structure
        self._sketch = cfg.structure != "T1"
        self._adaptive = cfg.structure == "T4"
        self._B = cfg.n_buckets if cfg.structure in ("T3", "T4") else 1
        self._n = cfg.zones_per_granularity or decl.rate
        self._setup_shapes()
        m, R = decl.depth, decl.rate
        self.grans: list[Granularity] = []
        for i in range(m):
            cap = (1 if self._adaptive else cfg.g1_zones) if i == 0 else self._n
            self.grans.append(Granularity(i + 1, cap, self._shape))
        self._cap0 = tuple(g.cap for g in self.grans)        # initial slot capacities (to_bytes' canonical cap)
        # G1-period units: zone length and period length of each granularity (i >= 1)
        self._zone_periods = [1] + [R ** i // self._n for i in range(1, m)]
        self._period_periods = [1] + [R ** i for i in range(1, m)]
        self.clock = -math.inf
        self._next_row = 0
        self._next_zone = 1
        self._zones: dict[int, Zone] = {}
        self._alias: dict[int, int] = {}
        self._g1_next_reason: str | None = None
        self._vdtype = None
        self.counters = {"ingested": 0, "rejected": 0, "late": 0, "before_history": 0,
                         "collapses": 0, "zones_started": 0, "zones_change": 0, "zones_max_length": 0,
                         "zones_dropped": 0, "tuples_dropped": 0, "nodes_visited": 0,
                         "tuples_compared": 0, "ingest_seconds": 0.0}

    def _setup_shapes(self):
        cfg = self.config
        self._w = cfg.w * (cfg.n_buckets if cfg.structure == "T2" else 1)
        self._d = cfg.d
        self._shape = (self._B, self._d, self._w) if self._sketch else None
        self._tmpl = CountSketch(self._d, self._w, cfg.seed) if self._sketch else None
        self._wdet = min(self._B * self._w, 1024)
        self._hasher = CellHasher(self._tmpl, self._B, cfg.seed ^ _BUCKET_SALT)
        self._roww = (np.arange(self._d, dtype=np.int64) * self._w)[:, None]
        self._rowW = (np.arange(self._d, dtype=np.int64) * self._wdet)[:, None]
        self._gbuf = None           # shared buffer holding every granularity's pyramid tables
        self._goff = {}
        self._parts = {}            # gi -> (key, GranPart)
        self._qv = None             # (key, QueryView)
        self._kbuf = None           # reusable output arrays of the compiled probe
        self._kview = None          # the compiled path's KernelView (created by the first compiled probe)
        self._kstate = None
        self._kmixed = False        # values of several dtypes were ingested: no compiled probe
        self._ksver = None          # granularities' sversion at the last structural check
        self._kread = False         # the kernel view was read since the last ingest (see ``_keep_view``)

    # ------------------------------------------------------------------ pickling (checkpoints)
    def __getstate__(self):
        """Exact state for a checkpoint (zone ids, aliases of merged zones, chunk layout in
        arrival order, versions, counters: everything later pushes and probes depend on --
        ``to_bytes`` is canonical, not exact).  Pickle copies each numpy view on its own, so
        the shared pyramid buffer ``_gbuf`` is not written: each granularity's store is, and
        :meth:`__setstate__` binds them into one buffer again.  Derived probe caches (query
        view, compiled kernel view, output pool) hold views of that buffer and are rebuilt."""
        s = self.__dict__.copy()
        bound = s.get("_gbuf") is not None and all(g.store is not None and g.store.base is self._gbuf
                                                  for g in self.grans)
        s["_gbuf"] = bound
        if not bound:
            s["_goff"] = {}
        s["_parts"], s["_qv"], s["_kview"], s["_kbuf"], s["_kstate"], s["_ksver"] = {}, None, None, None, None, None
        s["_kread"] = False
        return s

    def __setstate__(self, s):
        bound = s.pop("_gbuf")
        s.setdefault("_kread", False)        # (checkpoints from before the eager view refresh)
        self.__dict__.update(s)
        self._gbuf = None
        if bound:                        # one shared buffer again, stores as its views (no version bump)
            buf = np.zeros((sum(g.n_nodes for g in self.grans),) + tuple(self._shape), dtype=np.int64)
            for gi, g in enumerate(self.grans):
                at = self._goff[gi]
                buf[at:at + g.n_nodes] = g.store
                g.store = buf[at:at + g.n_nodes]
                g._slice_levels()
            self._gbuf = buf

    # ------------------------------------------------------------------ helpers
    def _check_config(self):
        if self.config.fixed_signature() != self._sig:
            changed = [k for k, a, b in zip(IndexConfig.FIXED, self.config.fixed_signature(), self._sig) if a != b]
            raise SummaryError(f"StreamIndex {self.decl.name}: config knobs {changed} are fixed once the index "
                               f"exists (use compress() for the sketch width)")
        self.config.validate(self.decl)

    def _hash(self, keys: np.ndarray):
        """(bucket (n,), idx (d, n) flat row*w+col, sgn (d, n)) of a key batch."""
        return self._hasher(keys)

    def _delta(self, idx, sgn, bucket) -> np.ndarray:
        """(B, d, w) table of a batch: one bincount over (bucket, row, column)."""
        B, d, w = self._shape
        flat = idx + (bucket * (d * w))[None, :]
        acc = np.bincount(flat.ravel(), weights=sgn.ravel(), minlength=B * d * w)
        return acc.astype(np.int64).reshape(B, d, w)

    def _detector(self, idx, sgn, bucket) -> np.ndarray:
        """(d, W) float64 sketch of a segment for change detection.

        A zone-wide count sketch whose column is ``(bucket * w + col) mod W``
        (W = ``self._wdet`` = min(B w, 1024)): a valid count sketch of the
        whole zone (bucket and column hashes are independent), narrow enough
        that a confidence check costs a few microseconds.
        """
        B, d, w = self._shape
        W = self._wdet
        det = (idx // w) * W + ((bucket * w)[None, :] + idx % w) % W
        return np.bincount(det.ravel(), weights=sgn.ravel(), minlength=d * W).reshape(d, W)

    def _new_zone(self, gi: int, slot: int, start: float, reason: str) -> Zone:
        z = Zone(self._next_zone, gi, slot, start, reason, self._B)
        self._next_zone += 1
        self._zones[z.id] = z
        self.grans[gi].slots[slot] = z
        self.grans[gi].version += 1
        self.grans[gi].sversion += 1
        self.counters["zones_started"] += 1
        if gi == 0 and self._adaptive:
            z.total = np.zeros((self._d, self._wdet))
            z.pending = np.zeros((self._d, self._wdet))
        return z

    def _drop_zone(self, z: Zone) -> None:
        self.grans[z.gran].remove(z.slot)
        self._zones.pop(z.id, None)
        for a in z.aliases:
            self._alias.pop(a, None)
        self.counters["zones_dropped"] += 1
        self.counters["tuples_dropped"] += z.n

    def _resolve(self, zid: int) -> Zone | None:
        z = self._zones.get(zid)
        if z is None and zid in self._alias:
            z = self._zones.get(self._alias[zid])
        return z

    def cell_origins(self, cells):
        """Where each cell handle's tuples are now: ``(live, lo, hi)`` per handle.

        ``live`` is the handle of the same bucket in the live zone the handle
        resolves to (after COLLAPSE: the zone its zone was merged into; -1: its
        tuples were dropped).  ``[lo, hi]`` is the time range of the handle's
        *own* tuples inside that zone: the merged zone's data range recorded at
        COLLAPSE (what ``scan_matching_many(bounded=True)`` scans for the
        handle), ``(-inf, inf)`` for a live zone's own handle.  A probe that
        scanned the handle has thus met every tuple of ``live`` with
        ``lo <= ts <= hi`` (in its window): a later scan of ``live`` by the same
        probe need only cover the rest (PT-Join's sweep, issue 16).

        >>> import numpy as np
        >>> decl = SummaryDeclaration("s", "S", "a", granularity=1.0, rate=2, depth=3)
        >>> ix = StreamIndex(decl, IndexConfig(structure="T3", n_buckets=4))
        >>> _ = ix.ingest(np.array([7, 7]), np.array([0.1, 0.6]))
        >>> c = ix.promising_regions(np.array([7]), 0.0, 1.0).cell
        >>> _ = ix.ingest(np.array([7]), np.array([1.5]))           # G1's period ends: COLLAPSE
        >>> live, lo, hi = ix.cell_origins(c)
        >>> bool((live != c).all()), lo.tolist(), hi.tolist()     # G1's two zones, merged
        (True, [0.1, 0.6], [0.1, 0.6])
        """
        from .results import cell_handle, split_cell

        cells = np.asarray(cells, np.int64).reshape(-1)
        live = np.full(cells.shape[0], -1, np.int64)
        lo = np.full(cells.shape[0], -math.inf)
        hi = np.full(cells.shape[0], math.inf)
        if not cells.shape[0]:
            return live, lo, hi
        zids, bks = split_cell(cells)
        span = getattr(self, "_alias_span", None) or {}
        u, inv = np.unique(zids, return_inverse=True)
        for i, zid in enumerate(u.tolist()):
            z = self._resolve(zid)
            if z is None:
                continue
            m = inv == i
            live[m] = cell_handle(z.id, bks[m])
            if z.id != zid and zid in span:
                lo[m], hi[m] = span[zid]
        return live, lo, hi








































    # ------------------------------------------------------------------ management
    @property
    def nbytes(self) -> int:
        """Memory held: sketch tables of every pyramid level + tuple arrays.  The probe side's caches
        are in :meth:`stats`: ``kernel_view_bytes`` (compiled view) and ``buffer_pool_bytes`` (recycled
        output arrays); ``memory_bytes`` there is the sum of all three."""
        return sum(g.nbytes for g in self.grans)

    def stats(self) -> dict:
        """Cells, zones per granularity, tuples, memory, mean t_ins and work counters."""
        zpg = [[{"id": z.id, "start": z.start, "min_ts": z.min_ts, "max_ts": z.max_ts, "n": z.n,
                 "reason": z.reason} for z in g.zones()] for g in self.grans]
        n_zones = sum(len(z) for z in zpg)
        tuples = sum(z["n"] for zs in zpg for z in zs)
        c = dict(self.counters)
        return {
            "structure": self._structure,
            "clock": self.clock,
            "cells": n_zones * self._B,
            "zones": n_zones,
            "zones_per_granularity": zpg,
            "tuples": tuples,
            "nbytes": self.nbytes,
            "memory_bytes": self.nbytes + (self._kview.nbytes if self._kview is not None else 0)
            + (self._kbuf.nbytes if self._kbuf is not None else 0),
            "sketch_bytes": sum(l.nbytes for g in self.grans for l in g.levels),
            "kernel_view_bytes": self._kview.nbytes if self._kview is not None else 0,
            # recycled output arrays of the compiled probe / window scan (kernels.BufferPool)
            "buffer_pool_bytes": self._kbuf.nbytes if self._kbuf is not None else 0,
            # the range side shared by PT selections / aggregates (sketchql.index.value_layer)
            "value_layer_bytes": layers_nbytes(self),
            "value_layers": [L.stats() for L in getattr(self, "_value_layers", {}).values()],
            "mean_t_ins": c["ingest_seconds"] / c["ingested"] if c["ingested"] else 0.0,
            "counters": c,
        }






    def __repr__(self) -> str:
        return (f"StreamIndex({self.decl.name} on {self.decl.stream}.{self.decl.attr}, {self._structure}, "
                f"zones={sum(1 for _ in self._live())}, clock={self.clock})")


