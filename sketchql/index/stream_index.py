"""StreamIndex: multi-granularity count-sketch pyramids with self-adjusting zones.

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
tuples are linked per bucket at ingest time), with identical results;
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

import json
import math
import struct
import time

import numpy as np

from ..errors import LateTupleError, SummaryError
from ..summaries.countsketch import CountSketch
from ..summaries.hashing import as_key_array
from .change import zone_confidence
from .declaration import IndexConfig, SummaryDeclaration
from .hasher import CellHasher
from .pyramid import Granularity
from . import kernels
from .kview import KernelView
from .query import GranPart, QueryView
from .results import IngestReport, Matches, Regions, ScanResult, cell_handle, split_cell
from .zone import Chunk, Zone

_BUCKET_SALT = 0xB0C4E7
_KERNEL_VDTYPES = (np.dtype(np.int64), np.dtype(np.float64))
_NO_HASH = np.zeros(0, dtype=np.uint64)
_MAGIC = b"SQIX"
_VERSION = 1


class StreamIndex:
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

    def _append(self, z: Zone, values, ts, rids, bucket, idx, sgn, a: int, b: int) -> None:
        if b <= a:
            return
        z.append(values[a:b], ts[a:b], rids[a:b], bucket[a:b])
        if self._kview is not None and kernels.ENABLED:      # (skipped appends are re-synced at refresh)
            self._kview.on_append(z, values[a:b], ts[a:b], rids[a:b], bucket[a:b])
        g = self.grans[z.gran]
        g.version += 1
        if g.last_append != z.id:
            g.last_append = z.id
            g.append_switches += 1
        if self._sketch:
            B, d, w = self._shape
            if 4 * (b - a) * d < B * d * w:
                # small batch: touch only the counters it changes (and their row norms)
                flat = (idx[:, a:b] + (bucket[a:b] * (d * w))[None, :]).ravel()
                u, inv = np.unique(flat, return_inverse=True)
                du = np.bincount(inv, weights=sgn[:, a:b].ravel(), minlength=len(u)).astype(np.int64)
                g.add_sparse(z.slot, u, du)
            else:
                g.add(z.slot, self._delta(idx[:, a:b], sgn[:, a:b], bucket[a:b]))

    # ------------------------------------------------------------------ collapse
    def _collapse_due(self, k_now: int) -> int:
        """Run every COLLAPSE / ring expiry due when the current G1 period is k_now."""
        done = 0
        m = len(self.grans)
        for i in range(m):
            g = self.grans[i]
            if i < m - 1:
                if g.period_start is not None and g.period_start < k_now // self._period_periods[i]:
                    self._collapse(i)
                    done += 1
            else:
                if i == 0:
                    if g.period_start is not None and g.period_start < k_now:
                        for z in g.zones():
                            self._drop_zone(z)
                        g.clear()
                        self._g1_next_reason = None
                else:
                    q_now = k_now // self._zone_periods[i]
                    for z in g.zones():
                        if z.kstart // self._zone_periods[i] < q_now - self._n:
                            self._drop_zone(z)
        self.counters["collapses"] += done
        return done

    def _collapse(self, i: int) -> None:
        """COLLAPSE (paper Figure 5): move all of G(i+1) (0-based i) into one zone of the next."""
        g, t = self.grans[i], self.grans[i + 1]
        k0 = g.period_start * self._period_periods[i]          # first G1 period of g's content
        if i + 1 < len(self.grans) - 1:
            tp = k0 // self._period_periods[i + 1]
            if t.period_start is not None and t.period_start != tp:
                self._collapse(i + 1)
                self.counters["collapses"] += 1
            t.period_start = tp
        zp = self._zone_periods[i + 1]
        q = k0 // zp
        slot = q % self._n
        z = t.slots[slot]
        if z is not None and z.kstart // zp != q:       # ring: the slot's old zone falls off
            self._drop_zone(z)
            z = None
        olds = g.zones()
        if olds:
            if z is None:
                z = self._new_zone(i + 1, slot, q * zp * self.decl.granularity, "collapse")
                z.kstart = q * zp
            z.absorb(olds)
            for o in olds:
                z.aliases.append(o.id)
                z.aliases.extend(o.aliases)
                self._zones.pop(o.id, None)
            for a in z.aliases:
                self._alias[a] = z.id
            if self._sketch:
                t.add(slot, g.levels[-1][0].copy())
            t.version += 1
            t.sversion += 1
        g.clear()
        if i == 0:
            self._g1_next_reason = None

    # ------------------------------------------------------------------ ingest
    def ingest(self, values, timestamps, row_ids=None) -> IngestReport:
        """Add a batch of tuples (numpy arrays, timestamps non-decreasing).

        Tuples with ``ts < clock - allowed_lateness`` (clock = the largest
        timestamp seen so far, including earlier tuples of this batch) are
        rejected and counted (reason ``"late"``); the rest are accepted.
        ``row_ids`` default to a running counter (they point back to the full
        tuple held by the stream's owner).  Raises :class:`SummaryError` on
        bad input (length mismatch, NaN/inf timestamp, bad key type).
        """
        t0 = time.perf_counter()
        self._check_config()
        keys = as_key_array(values, f"StreamIndex {self.decl.name}.ingest values")
        ts = np.asarray(timestamps, dtype=np.float64)
        if ts.ndim == 0:
            ts = ts.reshape(1)
        n = len(keys)
        if ts.shape != (n,):
            raise SummaryError(f"StreamIndex {self.decl.name}.ingest: {n} values but timestamps of shape {ts.shape}")
        if n and not np.isfinite(ts).all():
            raise SummaryError(f"StreamIndex {self.decl.name}.ingest: timestamp at position "
                               f"{int(np.flatnonzero(~np.isfinite(ts))[0])} is not finite")
        first = self._next_row
        if row_ids is None:
            rids = np.arange(first, first + n, dtype=np.int64)
        else:
            rids = np.asarray(row_ids)
            if rids.shape != (n,) or (n and rids.dtype.kind not in "iu"):
                raise SummaryError(f"StreamIndex {self.decl.name}.ingest: row_ids must be {n} integers, "
                                   f"got shape {rids.shape} dtype {rids.dtype}")
            rids = rids.astype(np.int64)
        if n:
            self._next_row = max(self._next_row, int(rids.max()) + 1) if row_ids is not None else first + n
        if n and self._vdtype is None:
            self._vdtype = keys.dtype
        reasons: dict[str, int] = {}
        rejected_pos = np.zeros(0, dtype=np.int64)
        zs0, col0 = self.counters["zones_started"], self.counters["collapses"]
        if n:
            run = np.maximum.accumulate(ts)
            prev = np.empty(n)
            prev[0] = self.clock
            np.maximum(run[:-1], self.clock, out=prev[1:])
            late = ts < prev - self.config.allowed_lateness
            ooo = (~late) & (ts < prev)
            if late.any():
                rejected_pos = np.flatnonzero(late)
                reasons["late"] = len(rejected_pos)
            inorder = ~(late | ooo)
            if inorder.all():
                self._ingest_inorder(keys, ts, rids)
            else:
                sel = np.flatnonzero(inorder)
                if len(sel):
                    self._ingest_inorder(keys[sel], ts[sel], rids[sel])
                if ooo.any():
                    sel = np.flatnonzero(ooo)
                    bad = self._ingest_late(keys[sel], ts[sel], rids[sel])
                    if len(bad):
                        reasons["before_history"] = len(bad)
                        rejected_pos = np.sort(np.concatenate([rejected_pos, sel[bad]]))
        nrej = len(rejected_pos)
        self.counters["ingested"] += n - nrej
        self.counters["rejected"] += nrej
        for k, v in reasons.items():
            self.counters[k] += v
        dt = time.perf_counter() - t0
        self.counters["ingest_seconds"] += dt
        return IngestReport(received=n, accepted=n - nrej, rejected=nrej, reasons=reasons,
                            rejected_positions=rejected_pos, clock=self.clock, first_row_id=first,
                            zones_started=self.counters["zones_started"] - zs0,
                            collapses=self.counters["collapses"] - col0, seconds=dt)

    def _ingest_inorder(self, keys, ts, rids) -> None:
        bucket, idx, sgn = self._hash(keys)
        T1 = self.decl.granularity
        k = np.floor(ts / T1).astype(np.int64)
        cuts = np.flatnonzero(k[1:] != k[:-1]) + 1
        bounds = np.concatenate([[0], cuts, [len(ts)]])
        for a, b in zip(bounds[:-1], bounds[1:]):
            kp = int(k[a])
            self._collapse_due(kp)
            g1 = self.grans[0]
            if g1.period_start is None:
                g1.period_start = kp
            if self._adaptive:
                self._insert_adaptive(kp, keys, ts, rids, bucket, idx, sgn, int(a), int(b))
            else:
                self._insert_fixed(kp, keys, ts, rids, bucket, idx, sgn, int(a), int(b))
            self.clock = max(self.clock, float(ts[b - 1]))

    def _insert_fixed(self, kp, keys, ts, rids, bucket, idx, sgn, a, b) -> None:
        T1, nz = self.decl.granularity, self.config.g1_zones
        L = T1 / nz
        j = np.clip(np.floor((ts[a:b] - kp * T1) / L).astype(np.int64), 0, nz - 1)
        cuts = np.flatnonzero(j[1:] != j[:-1]) + 1
        bnd = np.concatenate([[0], cuts, [b - a]]) + a
        g = self.grans[0]
        for s, e in zip(bnd[:-1], bnd[1:]):
            slot = int(j[s - a])
            z = g.slots[slot]
            if z is None:
                z = self._new_zone(0, slot, kp * T1 + slot * L, "fixed")
            self._append(z, keys, ts, rids, bucket, idx, sgn, int(s), int(e))

    def _g1_open(self, start: float, reason: str) -> Zone:
        g = self.grans[0]
        slot = g.free_slot()
        if slot is None:
            g.grow(g.cap + 1)
            slot = g.free_slot()
        z = self._new_zone(0, slot, start, reason)
        if reason in ("change", "max_length"):
            self.counters["zones_" + reason] += 1
        return z

    def _insert_adaptive(self, kp, keys, ts, rids, bucket, idx, sgn, a, b) -> None:
        """T4: append to the current G1 zone, starting new zones on change / MAXLENGTH.

        The confidence is checked every ``check_every`` tuples of a zone.  All
        check segments of a run are sketched with one bincount, and the
        checks of the run are evaluated together (cumulative sums of the
        segment sketches give the zone's history H and recent window R at each
        check point); the run is cut at the first check whose confidence is
        below theta.
        """
        cfg = self.config
        T1, C = self.decl.granularity, cfg.check_every
        maxlen = cfg.max_zone_length if cfg.max_zone_length is not None else T1 / cfg.g1_zones
        g = self.grans[0]
        zones = g.zones()
        z = zones[-1] if zones else None
        n_zones = len(zones)
        d, W = self._d, self._wdet
        run_a = pos = a
        while pos < b:
            can_open = n_zones < cfg.max_g1_zones
            if z is None:
                z = self._g1_open(kp * T1, "period")
                n_zones += 1
                self._g1_next_reason = None
            elif self._g1_next_reason is not None and can_open:
                self._append(z, keys, ts, rids, bucket, idx, sgn, run_a, pos)
                run_a = pos
                z = self._g1_open(float(ts[pos]), self._g1_next_reason)
                n_zones += 1
                self._g1_next_reason = None
                continue
            lim = b
            if can_open:
                lim = pos + int(np.searchsorted(ts[pos:b], z.start + maxlen, side="left"))
                if lim == pos:          # the next tuple is beyond MAXLENGTH of this zone
                    self._g1_next_reason = "max_length"
                    continue
            # check segments of [pos, lim) on the zone's grid of C tuples
            first = C - z.n_pending
            ends = np.arange(pos + first, lim, C, dtype=np.int64)
            if len(ends) == 0 or ends[-1] != lim:
                ends = np.append(ends, lim)
            starts = np.concatenate([[pos], ends[:-1]])
            lens = ends - starts
            nseg = len(ends)
            seg = np.repeat(np.arange(nseg, dtype=np.int64), lens)
            B, _, w = self._shape
            # detector column (bucket * w + col) mod W, row r, segment: one flat bincount index
            det = idx[:, pos:lim] - self._roww                           # column in the row
            det += (bucket[pos:lim] * w)[None, :]
            if W & (W - 1) == 0:
                det &= W - 1
            else:
                det %= W
            det += self._rowW
            det += (seg * (d * W))[None, :]
            S = np.bincount(det.ravel(), weights=sgn[:, pos:lim].ravel(),
                            minlength=nseg * d * W).reshape(nseg, d, W)
            R = S                      # R[s]: the recent window at check s; H[s]: the zone before it
            R[0] += z.pending
            npend = np.concatenate([[z.n_pending + lens[0]], lens[1:]])
            n_after = z.n_total + np.cumsum(lens)
            complete = npend >= C
            valid = complete & (n_after - npend >= C)
            cut = nseg - 1
            found = False
            H = None
            if valid.any():
                # H[s] = (total - pending) + R[0] + ... + R[s-1]  (exact integers in float64)
                H = np.empty_like(R)
                np.subtract(z.total, z.pending, out=H[0])
                for j in range(1, nseg):
                    np.add(H[j - 1], R[j - 1], out=H[j])
                last = H[-1] + R[-1]
                ip = np.einsum("sij,sij->si", H, R)
                f2h = np.einsum("sij,sij->si", H, H)
                f2r = np.einsum("sij,sij->si", R, R)
                f2t = np.empty_like(f2h)         # F2 of the zone after check s = F2 of H[s + 1]
                f2t[:-1] = f2h[1:]
                f2t[-1] = np.einsum("ij,ij->i", last, last)
                med = lambda x: np.sort(x, axis=1)[:, d // 2] if d % 2 else np.median(x, axis=1)
                ipm, f2hm, f2rm, f2tm = med(ip), med(f2h), med(f2r), med(f2t)
                nh = (n_after - npend).astype(np.float64)
                nr = npend.astype(np.float64)
                with np.errstate(divide="ignore", invalid="ignore"):
                    ah = (f2hm - nh) / (nh * (nh - 1))
                    ar = (f2rm - nr) / (nr * (nr - 1))
                    rho = np.where((ah > 0) & (ar > 0) & (nh > 1) & (nr > 1),
                                   (ipm / (nh * nr)) / np.sqrt(np.abs(ah * ar)), 1.0)
                    sconf = 1.0 - np.minimum(1.0, np.sqrt(np.maximum(f2tm, 0) / W) / n_after)
                conf = np.minimum(np.clip(rho, 0.0, 1.0), sconf)
                hit = np.flatnonzero(valid & (conf < cfg.theta))
                if len(hit):
                    cut = int(hit[0])
                    found = True
                z.last_confidence = float(conf[cut] if valid[cut] else conf[valid][-1])
            if H is not None:
                z.total = H[cut] + R[cut]
            else:
                z.total = z.total + R.sum(axis=0) - z.pending
            z.n_total = int(n_after[cut])
            if complete[cut]:
                z.pending = np.zeros((d, W))
                z.n_pending = 0
            else:
                z.pending = R[cut].copy()
                z.n_pending = int(npend[cut])
            if found:
                self._g1_next_reason = "change"
            pos = int(ends[cut])
        self._append(z, keys, ts, rids, bucket, idx, sgn, run_a, b)

    def _ingest_late(self, keys, ts, rids) -> np.ndarray:
        """Route accepted out-of-order tuples to the zones covering them; return rejected positions."""
        bucket, idx, sgn = self._hash(keys)
        T1 = self.decl.granularity
        k = np.floor(ts / T1).astype(np.int64)
        k_now = int(math.floor(self.clock / T1))
        m = len(self.grans)
        gran = np.full(len(ts), -1, dtype=np.int64)
        for i in range(m - 1, -1, -1):
            if i == 0:
                cov = k >= k_now
            elif i < m - 1:
                cov = (k // self._period_periods[i]) == (k_now // self._period_periods[i])
            else:
                q = k // self._zone_periods[i]
                cov = q >= (k_now // self._zone_periods[i]) - self._n
            gran[cov] = i
        bad = np.flatnonzero(gran < 0)
        order = np.lexsort((ts, gran))
        for i in np.unique(gran[gran >= 0]):
            sel = order[gran[order] == i]
            g = self.grans[i]
            if i == 0:
                if g.period_start is None:
                    g.period_start = k_now
                if self._adaptive:
                    zs = g.zones()
                    starts = np.array([z.start for z in zs])
                    if zs:
                        which = np.maximum(np.searchsorted(starts, ts[sel], side="right") - 1, 0)
                        tz = np.array([z.id for z in zs], dtype=np.int64)[which]
                    else:
                        tz = np.zeros(len(sel), dtype=np.int64)
                else:
                    L = T1 / self.config.g1_zones
                    tz = np.clip(np.floor((ts[sel] - k_now * T1) / L).astype(np.int64), 0, self.config.g1_zones - 1)
            else:
                tz = k[sel] // self._zone_periods[i]
                if i < m - 1 and g.period_start is None:
                    g.period_start = k_now // self._period_periods[i]
            for key in np.unique(tz):
                part = sel[tz == key]
                z = self._late_zone(i, int(key), float(ts[part[0]]))
                vals, t_, r_ = keys[part], ts[part], rids[part]
                self._append(z, vals, t_, r_, bucket[part], idx[:, part] if idx is not None else None,
                             sgn[:, part] if sgn is not None else None, 0, len(part))
        return bad

    def _late_zone(self, i: int, key: int, ts0: float) -> Zone:
        g = self.grans[i]
        T1 = self.decl.granularity
        if i == 0:
            if self._adaptive:
                z = self._zones.get(key)
                return z if z is not None else self._g1_open(math.floor(ts0 / T1) * T1, "late")
            z = g.slots[key]
            return z if z is not None else self._new_zone(0, key, math.floor(ts0 / T1) * T1 +
                                                          key * T1 / self.config.g1_zones, "late")
        slot = key % self._n
        z = g.slots[slot]
        zp = self._zone_periods[i]
        if z is not None and z.kstart // zp == key:
            return z
        if z is not None:
            self._drop_zone(z)
        z = self._new_zone(i, slot, key * zp * T1, "late")
        z.kstart = key * zp
        return z

    def advance(self, now: float) -> int:
        """Heartbeat: move the clock to ``now`` (never backwards); run due COLLAPSEs/expiry.

        Returns the number of collapses performed.
        """
        now = float(now)
        if not math.isfinite(now):
            raise SummaryError(f"StreamIndex {self.decl.name}.advance: now must be finite, got {now}")
        if now <= self.clock:
            return 0
        self.clock = now
        c0 = self.counters["collapses"]
        self._collapse_due(int(math.floor(now / self.decl.granularity)))
        return self.counters["collapses"] - c0

    # ------------------------------------------------------------------ query side
    def _live(self):
        """(granularity index 0-based, zone) of every live zone."""
        for gi, g in enumerate(self.grans):
            for z in g.slots:
                if z is not None:
                    yield gi, z

    @staticmethod
    def _window(n, t_from, t_to):
        out = []
        for t in (t_from, t_to):
            a = np.asarray(t, dtype=np.float64)
            if a.shape != (n,):
                a = np.broadcast_to(a, (n,))
            out.append(a)
        return out[0], out[1]

    def _keys(self, values, where):
        return as_key_array(values, f"StreamIndex {self.decl.name}.{where} values")

    def estimate(self, values, t_from: float, t_to: float, edge: str = "exact") -> np.ndarray:
        """Estimated count of each value among tuples with t_from < ts <= t_to (float64 array).

        Cells fully inside the window are answered from the *sum* of their
        sketches (linear, so it is the count sketch of their union: median over
        rows of sign x summed counter); partially covered edge cells are
        answered exactly from their tuples (``edge="exact"``, default) or
        pro-rated by the share of the cell's data time range in the window
        (``edge="prorate"``).  Structure T1 has no sketches and counts exactly.
        """
        keys = self._keys(values, "estimate")
        tf, tt = float(t_from), float(t_to)
        out = np.zeros(len(keys))
        full_tab, partial = self._split_window(tf, tt)
        if full_tab is not None and len(keys):
            bucket, idx, sgn = self._hash(keys)
            B, d, w = self._shape
            rows = full_tab.reshape(B, d * w)[bucket[None, :], idx] * sgn
            out += np.median(rows, axis=0) if d % 2 == 0 else np.sort(rows, axis=0)[d // 2]
        for z in partial:
            if edge == "prorate" and self._sketch:
                frac = _overlap_frac(z.min_ts, z.max_ts, tf, tt)
                bucket, idx, sgn = self._hash(keys)
                B, d, w = self._shape
                tab = self.grans[z.gran].levels[0][z.slot].reshape(B, d * w)
                rows = tab[bucket[None, :], idx] * sgn
                out += frac * np.sort(rows, axis=0)[d // 2]
            elif edge in ("exact", "prorate"):
                out += self._count_exact(z, keys, tf, tt)
            else:
                raise SummaryError(f"estimate: edge must be 'exact' or 'prorate', got {edge!r}")
        return out

    def _split_window(self, tf, tt):
        """(sum of the tables of fully covered zones or None, partially covered zones)."""
        full, partial = None, []
        for gi, z in self._live():
            if z.max_ts <= tf or z.min_ts > tt or z.n == 0:
                continue
            if tf < z.min_ts and z.max_ts <= tt and self._sketch:
                t = self.grans[gi].levels[0][z.slot]
                full = t.copy() if full is None else full + t
            else:
                partial.append(z)
        return full, partial

    def _count_exact(self, z: Zone, keys, tf, tt) -> np.ndarray:
        v, t, _ = z.all_tuples()
        self.counters["tuples_compared"] += len(t)
        v = v[(t > tf) & (t <= tt)]
        if not len(v) or not len(keys):
            return np.zeros(len(keys))
        v = np.sort(v)
        return (np.searchsorted(v, keys, side="right") - np.searchsorted(v, keys, side="left")).astype(np.float64)

    def error_bound(self, values, t_from: float, t_to: float, confidence: float = 0.95) -> np.ndarray:
        """Additive bound on |estimate - true count| per value holding with probability ``confidence``.

        The sketch part is the count sketch of the union of the fully covered
        cells of the value's bucket, so its bound is
        ``CountSketch.error_bound(confidence)`` of that summed table
        (k sqrt(F2_bucket / w)); edge cells are exact (bound 0).
        """
        keys = self._keys(values, "error_bound")
        full, _ = self._split_window(float(t_from), float(t_to))
        out = np.zeros(len(keys))
        if full is None or not len(keys):
            return out
        bucket, _, _ = self._hash(keys)
        cs = self._tmpl.empty_like()
        for b in np.unique(bucket):
            cs.table[...] = full[b]
            out[bucket == b] = cs.error_bound(confidence)
        return out

    def promising_regions(self, values, t_from, t_to, fade: float = 1.0) -> Regions:
        """Promising regions of each probe value in the window (t_from, t_to] (columnar).

        ``t_from``/``t_to`` are scalars or per-probe arrays.  For every
        granularity the pyramid is descended from its root: at each node the
        probe's estimate (median over rows of the node's summed sketch) is
        compared with ``max(min_estimate, prune_sigma * sqrt(F2_node / w))``
        (F2 of the node's bucket sketch); below it the whole subtree is pruned,
        and nodes whose data range misses the window are skipped.  Each
        estimate costs one work unit (``Regions.visited``); ``Regions.flat`` is
        what evaluating every overlapping leaf cell would cost.  Leaf regions
        carry the estimate pro-rated by the share of the cell's time range in
        the window, and ``priority = estimate * fade ** (i - 1)``.  Rows are
        ordered by (granularity, probe, zone slot).  Structure T1 has no
        summaries: every overlapping cell is returned with its tuple count as
        estimate.

        The descent is evaluated on the cached :class:`~sketchql.index.query.QueryView`
        (all levels of all granularities at once, see that module); the
        result is identical to a level-by-level descent
        (:meth:`_promising_regions_levelwise`).
        """
        if not self._sketch:
            return self._promising_regions_levelwise(values, t_from, t_to, fade)
        keys = self._keys(values, "promising_regions")
        P = len(keys)
        tf, tt = self._window(P, t_from, t_to)
        bucket, idx, sgn = self._hash(keys) if P else (np.zeros(0, np.int64), None, None)
        qv, p, k, est, visited, flat = self._leaf_pairs(bucket, idx, sgn, tf, tt)
        reg = self._make_regions(qv, bucket, tf, tt, p, k, est, visited, flat, float(fade))
        self.counters["nodes_visited"] += reg.visited
        return reg

    def _leaf_pairs(self, bucket, idx, sgn, tf, tt):
        """Surviving (probe, view node) leaf pairs of a hashed probe batch, in
        (granularity, probe, slot) order: (qv, p, k, est, visited, flat)."""
        P = len(bucket)
        qv = self._view()
        B, d, w = self._shape
        if P == 0 or qv.N == 0:
            z = np.zeros(0, dtype=np.int64)
            return qv, z, z, np.zeros(0), 0, 0
        idxb = idx + bucket * (d * w)
        sflat = self._gbuf.reshape(-1)
        step = max(1, (1 << 18) // max(qv.N * d, 1))
        if P <= step:
            p, k, est, visited, flat = qv.descend(sflat, bucket, idxb, sgn, tf, tt)
        else:
            ps, ks, ests, visited, flat = [], [], [], 0, 0
            for s in range(0, P, step):
                e = min(P, s + step)
                p, k, est, v, f = qv.descend(sflat, bucket[s:e], idxb[:, s:e], sgn[:, s:e], tf[s:e], tt[s:e])
                ps.append(p + s), ks.append(k), ests.append(est)
                visited += v
                flat += f
            p, k, est = np.concatenate(ps), np.concatenate(ks), np.concatenate(ests)
        if qv.multi and len(p) > 1:
            gran = qv.gran[k]
            if (gran[1:] < gran[:-1]).any():
                o = gran.argsort(kind="stable")             # (granularity, probe, slot) order
                p, k, est = p[o], k[o], est[o]
        return qv, p, k, est, visited, flat

    def _make_regions(self, qv, bucket, tf, tt, p, k, est, visited, flat, fade) -> Regions:
        if len(p) == 0:
            z = np.zeros(0, dtype=np.int64)
            return Regions(probe=z, cell=z.copy(), zone=z.copy(), bucket=z.copy(), granularity=z.copy(),
                           estimate=np.zeros(0), priority=np.zeros(0), partial=np.zeros(0, dtype=bool),
                           n_tuples=z.copy(), visited=int(visited), flat=int(flat))
        b = bucket[p]
        gran = qv.gran[k]
        zlo, zhi, ptf, ptt = qv.lo[k], qv.hi[k], tf[p], tt[p]
        full = (ptf < zlo) & (zhi <= ptt)
        span = zhi - zlo
        ov = np.minimum(zhi, ptt) - np.maximum(zlo, ptf)
        frac = np.where(full | (span <= 0), 1.0, np.clip(ov / np.where(span > 0, span, 1.0), 0.0, 1.0))
        est = est * frac
        zone = qv.zid[k]
        return Regions(probe=p, cell=cell_handle(zone, b), zone=zone, bucket=b, granularity=gran, estimate=est,
                       priority=est * fade ** (gran - 1).astype(np.float64), partial=~full,
                       n_tuples=qv.clen[k * self._B + b], visited=int(visited), flat=int(flat))

    def _bind(self) -> None:
        """Bind every granularity's pyramid tables into one shared buffer (rebuilt after a grow/compress)."""
        if self._gbuf is not None and all(g.store.base is self._gbuf for g in self.grans):
            return
        total = sum(g.n_nodes for g in self.grans)
        buf = np.zeros((total,) + tuple(self._shape), dtype=np.int64)
        at = 0
        for gi, g in enumerate(self.grans):
            g.bind(buf[at:at + g.n_nodes])
            self._goff[gi] = at
            at += g.n_nodes
        self._gbuf = buf

    def _view(self) -> QueryView:
        """The cached query view: unchanged, patched (only G1's open zone got tuples), or rebuilt
        from per-granularity parts (only the granularities that changed are re-flattened)."""
        self._bind()
        knobs = (float(self.config.min_estimate), float(self.config.prune_sigma))
        state = (knobs,) + tuple((g.version, self._goff[gi]) for gi, g in enumerate(self.grans))
        qv = self._qv
        if qv is not None:
            if qv[0] == state:
                return qv[1]
            view = qv[1]
            g1 = self.grans[0]
            if (view.hot is not None and qv[0][0] == knobs and qv[0][2:] == state[2:]
                    and qv[2] == (g1.sversion, g1.append_switches, self._goff[0]) and g1.last_append == view.hot.id):
                view.patch(g1, *knobs)
                self._parts.pop(0, None)          # the cached G1 part is stale now
                self._qv = (state, view, qv[2])
                return view
        for gi, g in enumerate(self.grans):
            key = (g.version, self._goff[gi], knobs)
            c = self._parts.get(gi)
            if c is None or c[0] != key:
                c = (key, GranPart(g, gi, self._goff[gi], knobs[0], knobs[1], self._B, self._vdtype))
                self._parts[gi] = c
        B, d, w = self._shape
        view = QueryView([self._parts[gi][1] for gi in range(len(self.grans))], self._B, B * d * w)
        g1 = self.grans[0]
        self._qv = (state, view, (g1.sversion, g1.append_switches, self._goff[0]))
        return view

    def probe_many(self, values, t_from, t_to, fade: float = 1.0, with_regions: bool = False) -> Matches:
        """``probe_regions(promising_regions(values, t_from, t_to, fade), values, t_from, t_to)`` in one pass.

        The same set of matches (and the same work counters) as the two
        calls, but vectorized end to end: the pyramid descent of every probe
        runs on the cached query view (see :mod:`sketchql.index.query`) and the
        cells of the surviving regions are gathered from the view's CSR of
        tuples with one ``np.repeat``/``cumsum``.  Matches come region by
        region (``Matches.region`` is the row in ``promising_regions``' output,
        ``Matches.probe`` the probe index), each region's tuples in cell order.
        ``Matches.work`` = tuples compared, ``Matches.visited`` = pyramid nodes
        evaluated (``Regions.visited``).  ``with_regions=True`` also fills
        ``Matches.regions`` (the :class:`Regions` probed).  ``fade`` only
        matters for those regions' priorities.

        Compiled path (default, :mod:`sketchql.index.kernels`): hashing, the
        descent and the matching run in numba kernels on the same view, with
        identical results and counters, matches region by region; structure T1
        uses the same kernel over its zones (every overlapping non-empty zone is
        a region).  The numpy path (``use_kernels=False`` on the index or the
        class, ``kernels.ENABLED = False``, or string keys) is the reference;
        for T1 it returns the same matches grouped by zone id instead of region
        by region.

        >>> import numpy as np
        >>> decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2)
        >>> ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=4, w=32))
        >>> _ = ix.ingest(np.array([1, 2, 1, 3]), np.array([1.0, 2.0, 3.0, 4.0]))
        >>> m = ix.probe_many(np.array([1, 3]), 0.0, np.array([3.0, 4.0]))
        >>> sorted(zip(m.probe.tolist(), m.row_ids.tolist()))
        [(0, 0), (0, 2), (1, 3)]
        """
        if type(values) is np.ndarray and values.ndim == 1 and values.dtype.kind in "if":
            keys = values                   # (what as_key_array returns for it, without the checks' calls)
        else:
            keys = self._keys(values, "probe_many")
        if self.use_kernels and kernels.ENABLED:
            m = self._probe_many_compiled(keys, t_from, t_to, float(fade), with_regions)
            if m is not None:
                return m
        return self._probe_many_numpy(keys, t_from, t_to, fade, with_regions)

    def _probe_many_numpy(self, values, t_from, t_to, fade: float = 1.0, with_regions: bool = False) -> Matches:
        """The numpy reference of :meth:`probe_many` (see there)."""
        if not self._sketch:
            r = self.promising_regions(values, t_from, t_to, fade)
            m = self.probe_regions(r, values, t_from, t_to)
            m.visited = r.visited
            m.regions = r if with_regions else None
            return m
        keys = self._keys(values, "probe_many")
        P = len(keys)
        tf, tt = self._window(P, t_from, t_to)
        bucket, idx, sgn = self._hash(keys) if P else (np.zeros(0, np.int64), None, None)
        qv, p, k, est, visited, flat = self._leaf_pairs(bucket, idx, sgn, tf, tt)
        self.counters["nodes_visited"] += visited
        regions = self._make_regions(qv, bucket, tf, tt, p, k, est, visited, flat, float(fade)) \
            if with_regions else None
        L = len(p)
        if L == 0:
            e = self._empty_scan()
            z = np.zeros(0, np.int64)
            return Matches(z, e.values, e.timestamps, e.row_ids, work=0, region=z, regions=regions,
                           visited=visited)
        cell = k * self._B + bucket[p]
        ln = qv.clen[cell]
        ends = ln.cumsum()
        tot = int(ends[-1])
        self.counters["tuples_compared"] += tot
        # candidates: every tuple of every surviving cell; compare values first (full size),
        # then the window only on the value matches
        pos = (qv.cstart[cell] - ends + ln).repeat(ln)
        pos += np.arange(tot)
        sel = (qv.V[pos] == keys[p].repeat(ln)).nonzero()[0]
        at = pos[sel]
        rg = ends.searchsorted(sel, side="right")           # region row of each value match
        pr = p[rg]
        t = qv.T[at]
        keep = ((t > tf[pr]) & (t <= tt[pr])).nonzero()[0]
        at = at[keep]
        return Matches(pr[keep], qv.V[at], t[keep], qv.R[at], work=tot, region=rg[keep], regions=regions,
                       visited=visited)

    def _hash_params(self):
        """uint64 [off_b, off_s, shift, logw, mult...] of the fused hash (None: not fused)."""
        h = self._hasher
        if not h.fused:
            return None
        hp = getattr(h, "_kparams", None)
        if hp is None:
            hp = h._kparams = np.concatenate([[h._offs[0], h._offs[1], h._shift, np.uint64(h._logw)],
                                              h._mult[:, 0]]).astype(np.uint64)
        return hp

    def _kernel_view(self):
        """The compiled path's :class:`~sketchql.index.kview.KernelView`, refreshed (None when the
        stored values are not int64/float64 or the index is empty)."""
        kv = self._kview
        state = tuple([g.version for g in self.grans])
        if kv is not None and state == self._kstate:          # nothing changed since the last refresh
            return kv
        sver = tuple([g.sversion for g in self.grans])
        if kv is None or sver != self._ksver:                 # structural change: rebind / rebuild if needed
            if self._vdtype is None or np.dtype(self._vdtype) not in _KERNEL_VDTYPES or self._kmixed:
                return None
            if self._sketch:
                self._bind()
                state = tuple([g.version for g in self.grans])
                sver = tuple([g.sversion for g in self.grans])
            if kv is None or not kv.fits(self):
                kv = self._kview = KernelView(self)
            self._ksver = sver
        kv.refresh(self)
        if not kv.usable:                   # a zone holds values of another dtype: numpy path from now on
            self._kview, self._kmixed = None, True
            return None
        self._kstate = state
        return kv

    def _probe_many_compiled(self, keys, t_from, t_to, fade, with_regions):
        """:meth:`probe_many` through :func:`kernels.probe_kview`; None when the kernels cannot
        compare these keys with the stored values (the caller then uses the numpy path)."""
        P = len(keys)
        if P == 0 or self._vdtype is None:
            return None
        kv = self._kernel_view()
        if kv is None:
            return None
        ok = kv.key_types.get(keys.dtype)
        if ok is None:
            ok = kv.key_types[keys.dtype] = kernels.comparable(kv.vdtype, keys.dtype) == kv.vdtype
        if not ok:
            return None
        kc = keys if keys.dtype == kv.vdtype and keys.flags.c_contiguous else \
            np.ascontiguousarray(keys, dtype=kv.vdtype)
        tf, tt = _f64_window(P, t_from), _f64_window(P, t_to)
        buf = self._kbuf
        if buf is None or buf.vdtype != kv.vdtype:
            buf = self._kbuf = kernels.ProbeBuffers(vdtype=kv.vdtype)
        hp = _NO_HASH
        if self._sketch:
            hp = self._hash_params()
            if hp is None or kc.dtype.kind != "i":
                hp = _NO_HASH
                bucket, idx, sgn = self._hash(keys)
            else:                                   # hashed inside the kernel, into these buffers
                bucket, idx, sgn = buf.hash_arrays(P, self._d)
        else:
            bucket, idx, sgn = buf.hash_arrays(P, 1)         # unused (no sketches): zeros
        cfg = self.config
        nr, nm, visited, flat, work = kernels.probe_k(buf, float(cfg.min_estimate), float(cfg.prune_sigma),
                                                      kc, hp, bucket, idx, sgn, tf, tt, *kv.args)
        c = self.counters
        c["nodes_visited"] += visited
        c["tuples_compared"] += work
        regions = None
        if with_regions:
            p, k = buf.rp[:nr].copy(), buf.rk[:nr].copy()
            est = buf.rest[:nr].copy() if self._sketch else kv.clen[k].astype(np.float64)
            regions = self._make_regions(kv, bucket[:P].copy(), tf, tt, p, k, est, visited, flat, fade)
        return Matches(buf.mp[:nm].copy(), buf.mv[:nm].copy(), buf.mt[:nm].copy(), buf.mr[:nm].copy(),
                       work=work, region=buf.mreg[:nm].copy(), regions=regions, visited=visited)

    def scan_window_many(self, values, t_from, t_to) -> Matches:
        """The raw-window join (structure T1 of the paper's Figure 9; works on any structure).

        For every probe value x_p: all stored tuples with value x_p and
        ``t_from_p < ts <= t_to_p``, found by scanning the window, i.e. without
        summaries.  The tuples of ``(min t_from, max t_to]`` are gathered once
        (:meth:`window_tuples`, sorted by (ts, row id)); then, compiled
        (:func:`kernels.scan_window`), each probe binary-searches its window
        and compares the values in it; the numpy path (``use_kernels=False``,
        string keys) compares each probe with every gathered tuple.  Matches
        are in (probe, ts, row id) order, ``Matches.region`` = ``Matches.probe``,
        ``work`` = the sum of the probes' window sizes (tuples compared).

        >>> import numpy as np
        >>> ix = StreamIndex(SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2),
        ...                  IndexConfig(structure="T1"))
        >>> _ = ix.ingest(np.array([1, 2, 1, 1]), np.array([1.0, 2.0, 3.0, 4.0]))
        >>> m = ix.scan_window_many(np.array([1, 2]), np.array([1.0, 0.0]), np.array([4.0, 1.5]))
        >>> m.probe.tolist(), m.row_ids.tolist(), m.work
        ([0, 0], [2, 3], 4)
        """
        keys = self._keys(values, "scan_window_many")
        P = len(keys)
        tf, tt = self._window(P, t_from, t_to)
        win = self._window_arrays(float(tf.min()), float(tt.max()), count=False) if P else None
        if win is None or len(win[2]) == 0:
            e = self._empty_scan()
            z = np.zeros(0, np.int64)
            return Matches(z, e.values, e.timestamps, e.row_ids, work=0, region=z)
        v, t, r = win
        ct = kernels.comparable(v.dtype, keys.dtype) if (self.use_kernels and kernels.ENABLED) else None
        if ct is not None:
            nm, mp, mj, work = kernels.scan_window(v.astype(ct, copy=False), t, np.ascontiguousarray(keys, dtype=ct),
                                                   np.ascontiguousarray(tf, dtype=np.float64),
                                                   np.ascontiguousarray(tt, dtype=np.float64))
            p, j = mp[:nm], mj[:nm]
        else:
            a = t.searchsorted(tf, side="right")
            e = t.searchsorted(tt, side="right")
            work = int(np.maximum(e - a, 0).sum())
            eq = (keys[:, None] == v[None, :]) & (t[None, :] > tf[:, None]) & (t[None, :] <= tt[:, None])
            p, j = eq.nonzero()
        self.counters["tuples_compared"] += int(work)
        return Matches(p, v[j], t[j], r[j], work=int(work), region=p)

    def _promising_regions_levelwise(self, values, t_from, t_to, fade: float = 1.0) -> Regions:
        """The same answer as :meth:`promising_regions` (see its docstring for
        the pruning rule and the work units), computed by descending each
        pyramid level by level; used for T1 and as the reference in tests."""
        keys = self._keys(values, "promising_regions")
        P = len(keys)
        tf, tt = self._window(P, t_from, t_to)
        fade = float(fade)
        bucket, idx, sgn = self._hash(keys) if P else (np.zeros(0, np.int64), None, None)
        cols = {k: [] for k in ("probe", "zone", "bucket", "gran", "est", "partial", "n")}
        visited = flat = 0
        for gi, g in enumerate(self.grans):
            if not any(z is not None for z in g.slots) or not P:
                continue
            ranges = g.node_ranges()
            lo, hi, nn = ranges[0]
            zid = np.array([z.id if z is not None else 0 for z in g.slots], dtype=np.int64)
            if not self._sketch:
                ov = (hi[None, :] > tf[:, None]) & (lo[None, :] <= tt[:, None]) & (nn[None, :] > 0)
                p, node = np.nonzero(ov)
                flat += len(p)
                visited += len(p)
                est = nn[node].astype(np.float64)
                self._emit(cols, p, node, est, gi, lo, hi, tf, tt, zid, np.zeros(len(p), np.int64), g)
                continue
            B, d, w = self._shape
            lvl = g.height
            p = np.arange(P)
            node = np.zeros(P, dtype=np.int64)
            flat += int(((hi[None, :] > tf[:, None]) & (lo[None, :] <= tt[:, None]) & (nn[None, :] > 0)).sum())
            while True:
                l_lo, l_hi, l_n = ranges[lvl]
                ok = (l_hi[node] > tf[p]) & (l_lo[node] <= tt[p]) & (l_n[node] > 0)
                p, node = p[ok], node[ok]
                if not len(p):
                    break
                b = bucket[p]
                tab = g.levels[lvl].reshape(len(l_lo), B, d * w)
                rows = tab[node[None, :], b[None, :], idx[:, p]] * sgn[:, p]
                est = np.sort(rows, axis=0)[d // 2].astype(np.float64) if d % 2 else np.median(rows, axis=0)
                visited += len(p)
                f2 = g.f2(lvl)[node, b]
                thr = np.maximum(self.config.min_estimate, self.config.prune_sigma * np.sqrt(np.maximum(f2, 0) / w))
                keep = est >= thr
                p, node, est = p[keep], node[keep], est[keep]
                if lvl == 0:
                    self._emit(cols, p, node, est, gi, lo, hi, tf, tt, zid, bucket[p], g)
                    break
                p = np.repeat(p, 2)
                node = (np.repeat(node, 2) * 2) + np.tile(np.array([0, 1]), len(node))
                lvl -= 1
        cat = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in cols.items()}
        gran = cat["gran"].astype(np.int64)
        est = cat["est"].astype(np.float64)
        zone = cat["zone"].astype(np.int64)
        bk = cat["bucket"].astype(np.int64)
        self.counters["nodes_visited"] += visited
        return Regions(probe=cat["probe"].astype(np.int64), cell=cell_handle(zone, bk), zone=zone, bucket=bk,
                       granularity=gran, estimate=est, priority=est * fade ** (gran - 1).astype(np.float64),
                       partial=cat["partial"].astype(bool), n_tuples=cat["n"].astype(np.int64),
                       visited=int(visited), flat=int(flat))

    def _emit(self, cols, p, node, est, gi, lo, hi, tf, tt, zid, b, g):
        zlo, zhi, ptf, ptt = lo[node], hi[node], tf[p], tt[p]
        full = (ptf < zlo) & (zhi <= ptt)
        span = zhi - zlo
        ov = np.minimum(zhi, ptt) - np.maximum(zlo, ptf)
        frac = np.where(full | (span <= 0), 1.0, np.clip(ov / np.where(span > 0, span, 1.0), 0.0, 1.0))
        sizes = self._cell_sizes(g, node, b)
        cols["probe"].append(p)
        cols["zone"].append(zid[node])
        cols["bucket"].append(b)
        cols["gran"].append(np.full(len(p), gi + 1))
        cols["est"].append(est * frac)
        cols["partial"].append(~full)
        cols["n"].append(sizes)

    @staticmethod
    def _cell_sizes(g, node, b):
        out = np.zeros(len(node), dtype=np.int64)
        for s in np.unique(node):
            m = node == s
            out[m] = g.slots[int(s)].cell_size(b[m])
        return out

    def scan(self, cell: int) -> ScanResult:
        """All tuples of a cell (columnar, arrival order); work = tuples read."""
        zid, b = split_cell(int(cell))
        z = self._resolve(int(zid))
        if z is None or z.n == 0:
            return self._empty_scan()
        v, t, r = z.cell(int(b))
        self.counters["tuples_compared"] += len(r)
        return ScanResult(v, t, r, work=len(r))

    def scan_matching(self, cell: int, value, t_from: float, t_to: float) -> ScanResult:
        """The tuples of ``cell`` equal to ``value`` with t_from < ts <= t_to (the probe of a region).

        work = tuples compared (the whole cell).
        """
        zid, b = split_cell(int(cell))
        z = self._resolve(int(zid))
        if z is None or z.n == 0:
            return self._empty_scan()
        v, t, r = z.cell(int(b))
        key = self._keys(value, "scan_matching")[0]
        m = (v == key) & (t > t_from) & (t <= t_to)
        self.counters["tuples_compared"] += len(r)
        return ScanResult(v[m], t[m], r[m], work=len(r))

    def scan_matching_many(self, cells, values, t_from, t_to) -> Matches:
        """Vectorized ``scan_matching`` over K (cell, value, window) rows.

        ``values``, ``t_from``, ``t_to`` are length-K arrays (or scalars);
        ``Matches.region`` (and ``.probe``) give the input row of each match.
        work = tuples compared, summed over rows.
        """
        cells = np.asarray(cells, dtype=np.int64).reshape(-1)
        K = len(cells)
        keys = self._keys(values, "scan_matching_many")
        if len(keys) == 1 and K != 1:
            keys = np.repeat(keys, K)
        if len(keys) != K:
            raise SummaryError(f"scan_matching_many: {K} cells but {len(keys)} values")
        tf, tt = self._window(K, t_from, t_to)
        zids, bks = split_cell(cells)
        parts, work = [], 0
        for zid in np.unique(zids):
            z = self._resolve(int(zid))
            if z is None or z.n == 0:
                continue
            rows = np.flatnonzero(zids == zid)
            c = z.compact()
            st = c.offsets[bks[rows]]
            ln = c.offsets[bks[rows] + 1] - st
            tot = int(ln.sum())
            if tot == 0:
                continue
            work += tot
            rep = np.repeat(np.arange(len(rows)), ln)
            pos = np.arange(tot) - np.repeat(np.cumsum(ln) - ln, ln) + st[rep]
            r = rows[rep]
            t = c.ts[pos]
            m = (c.values[pos] == keys[r]) & (t > tf[r]) & (t <= tt[r])
            sel = pos[m]
            parts.append((r[m], c.values[sel], t[m], c.rids[sel]))
        self.counters["tuples_compared"] += work
        if not parts:
            e = self._empty_scan()
            return Matches(np.zeros(0, np.int64), e.values, e.timestamps, e.row_ids, work=work,
                           region=np.zeros(0, np.int64))
        reg = np.concatenate([p[0] for p in parts])
        return Matches(reg, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]),
                       np.concatenate([p[3] for p in parts]), work=work, region=reg)

    def probe_regions(self, regions: Regions, values, t_from, t_to) -> Matches:
        """Probe (a subset of) ``promising_regions`` output: the matching tuples.

        ``values``/``t_from``/``t_to`` are the *probe* batch given to
        ``promising_regions`` (indexed by ``regions.probe``).  ``Matches.probe``
        is the probe index and ``Matches.region`` the row in ``regions``.
        """
        keys = self._keys(values, "probe_regions")
        tf, tt = self._window(len(keys), t_from, t_to)
        pr = regions.probe
        m = self.scan_matching_many(regions.cell, keys[pr], tf[pr], tt[pr])
        m.probe = pr[m.region]
        return m

    def window_tuples(self, t_from: float, t_to: float) -> ScanResult:
        """Every stored tuple with t_from < ts <= t_to, exactly, ordered by (ts, row id)."""
        got = self._window_arrays(float(t_from), float(t_to))
        if got is None:
            return self._empty_scan()
        v, t, r, work = got
        return ScanResult(v, t, r, work=work)

    def _window_arrays(self, tf: float, tt: float, count: bool = True):
        """(values, ts, row ids[, tuples read]) of tf < ts <= tt sorted by (ts, row id), or None."""
        vs, ts_, rs, work = [], [], [], 0
        for _, z in self._live():
            if z.n == 0 or z.max_ts <= tf or z.min_ts > tt:
                continue
            v, t, r = z.all_tuples()
            work += len(t)
            if z.min_ts > tf and z.max_ts <= tt:
                vs.append(v), ts_.append(t), rs.append(r)
            else:
                m = (t > tf) & (t <= tt)
                vs.append(v[m]), ts_.append(t[m]), rs.append(r[m])
        if count:
            self.counters["tuples_compared"] += work
        if not vs:
            return None
        v, t, r = np.concatenate(vs), np.concatenate(ts_), np.concatenate(rs)       # copies, always
        # skip the sort when the tuples already are in (ts, row id) order (in-order T1 streams)
        if len(t) > 1:
            dt = np.diff(t)
            if not ((dt >= 0).all() and ((dt > 0) | (np.diff(r) > 0)).all()):
                o = np.lexsort((r, t))
                v, t, r = v[o], t[o], r[o]
        return (v, t, r, work) if count else (v, t, r)

    def _empty_scan(self) -> ScanResult:
        dt = self._vdtype if self._vdtype is not None else np.int64
        return ScanResult(np.zeros(0, dtype=dt), np.zeros(0), np.zeros(0, dtype=np.int64), work=0)

    # ------------------------------------------------------------------ management
    @property
    def nbytes(self) -> int:
        """Memory held: sketch tables of every pyramid level + tuple arrays."""
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
            "sketch_bytes": sum(l.nbytes for g in self.grans for l in g.levels),
            "kernel_view_bytes": self._kview.nbytes if self._kview is not None else 0,
            "mean_t_ins": c["ingest_seconds"] / c["ingested"] if c["ingested"] else 0.0,
            "counters": c,
        }

    def compress(self, factor: int = 2) -> None:
        """Fold every cell sketch from width w to w/factor (exact; updates ``config.w``)."""
        if not self._sketch:
            return
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1 or self.config.w % factor:
            raise SummaryError(f"compress: factor must be a positive divisor of w={self.config.w}, got {factor!r}")
        if factor == 1:
            return
        B, d, w = self._shape
        nw = w // factor
        # fold columns exactly as CountSketch.compress does (probe its rule once)
        probe = CountSketch(1, w, 0)
        probe.table[0] = np.arange(w)
        folded = probe.compress(factor).table[0]
        if np.array_equal(folded, np.arange(w).reshape(nw, factor).sum(axis=1)):
            fold = lambda a: a.reshape(a.shape[:-1] + (nw, factor)).sum(axis=-1)
        elif np.array_equal(folded, np.arange(w).reshape(factor, nw).sum(axis=0)):
            fold = lambda a: a.reshape(a.shape[:-1] + (factor, nw)).sum(axis=-2)
        else:
            raise SummaryError("compress: unknown CountSketch column folding rule")
        for g in self.grans:
            g.set_store(fold(g.store))
        self._gbuf = None
        for z in self._zones.values():      # change detection restarts in the current T4 zone
            if z.total is not None:
                z.total = z.pending = None
                z.n_total = z.n_pending = 0
        self.config.w //= factor
        self._sig = self.config.fixed_signature()
        self._setup_shapes()
        for z in self._zones.values():
            if z.gran == 0 and self._adaptive:
                z.total = np.zeros((self._d, self._wdet))
                z.pending = np.zeros((self._d, self._wdet))

    # ------------------------------------------------------------------ serialization
    def to_bytes(self) -> bytes:
        """Canonical bytes: equal indexes (same data, same geometry) give equal bytes.

        Each cell's tuples are written in (timestamp, row id) order (equal to
        arrival order for an in-order stream); zone ids, cell handles, wall-clock
        and work counters are not part of the bytes.
        """
        arrays: list[np.ndarray] = []
        grans = []
        for g in self.grans:
            zs = []
            for z in g.zones():
                c = Chunk.concat(z.chunks, canonical=True) if z.chunks else None
                ent = {"slot": z.slot, "start": z.start, "reason": z.reason, "min_ts": z.min_ts,
                       "max_ts": z.max_ts, "n": z.n, "kstart": z.kstart,
                       "n_pending": z.n_pending, "n_total": z.n_total,
                       "arrays": len(arrays)}
                if c is None:
                    c = Chunk(np.zeros(0, self._vdtype or np.int64), np.zeros(0), np.zeros(0, np.int64),
                              np.zeros(self._B + 1, np.int64))
                arrays += [c.values, c.ts, c.rids, c.offsets]
                if g.shape is not None:
                    arrays.append(g.levels[0][z.slot])
                if z.total is not None:
                    arrays += [z.total, z.pending]
                zs.append(ent)
            grans.append({"period_start": g.period_start, "cap": g.cap, "zones": zs})
        head = {"decl": self.decl.to_dict(), "config": self.config.to_dict(), "clock": self.clock,
                "next_row": self._next_row, "g1_next_reason": self._g1_next_reason,
                "vdtype": None if self._vdtype is None else self._vdtype.str, "grans": grans,
                "arrays": [[a.dtype.str, list(a.shape)] for a in arrays]}
        hb = json.dumps(head, sort_keys=True).encode("utf-8")
        body = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
        return _MAGIC + struct.pack("<HI", _VERSION, len(hb)) + hb + body

    @classmethod
    def from_bytes(cls, data: bytes) -> "StreamIndex":
        if len(data) < 10 or data[:4] != _MAGIC:
            raise SummaryError("StreamIndex.from_bytes: not a serialized stream index (bad magic)")
        ver, hl = struct.unpack_from("<HI", data, 4)
        if ver != _VERSION:
            raise SummaryError(f"StreamIndex.from_bytes: unsupported version {ver}")
        try:
            head = json.loads(data[10:10 + hl].decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise SummaryError(f"StreamIndex.from_bytes: corrupt header ({exc})") from None
        arrays, off = [], 10 + hl
        for dt, shape in head["arrays"]:
            dtype = np.dtype(dt)
            cnt = int(np.prod(shape)) if shape else 1
            nb = cnt * dtype.itemsize
            if off + nb > len(data):
                raise SummaryError("StreamIndex.from_bytes: truncated data")
            arrays.append(np.frombuffer(data, dtype=dtype, count=cnt, offset=off).reshape(shape).copy())
            off += nb
        ix = cls(SummaryDeclaration(**head["decl"]), IndexConfig.from_dict(head["config"]))
        ix.clock = head["clock"]
        ix._next_row = head["next_row"]
        ix._g1_next_reason = head["g1_next_reason"]
        ix._vdtype = None if head["vdtype"] is None else np.dtype(head["vdtype"])
        for gi, (g, ge) in enumerate(zip(ix.grans, head["grans"])):
            g.grow(ge["cap"])
            g.period_start = ge["period_start"]
            for ent in ge["zones"]:
                z = ix._new_zone(gi, ent["slot"], ent["start"], ent["reason"])
                a = ent["arrays"]
                v, t, r, o = arrays[a:a + 4]
                a += 4
                if len(r):
                    z.chunks = [Chunk(v, t, r, o.astype(np.int64))]
                z.n, z.min_ts, z.max_ts = ent["n"], ent["min_ts"], ent["max_ts"]
                if ent["kstart"] is not None:
                    z.kstart = ent["kstart"]
                if g.shape is not None:
                    g.levels[0][z.slot] = arrays[a]
                    a += 1
                if z.total is not None:
                    z.total, z.pending = arrays[a], arrays[a + 1]
                z.n_pending, z.n_total = ent["n_pending"], ent["n_total"]
            if g.shape is not None:
                g._rebuild()
        ix.counters["zones_started"] = 0
        return ix

    def copy(self) -> "StreamIndex":
        return StreamIndex.from_bytes(self.to_bytes())

    def merge(self, other: "StreamIndex") -> "StreamIndex":
        """Add an index built over *disjoint* data of the same stream (in place; returns self).

        Both are first advanced to the later clock (deterministic COLLAPSEs);
        zones of G2..Gm (and fixed G1 zones, T1-T3) are aligned to epoch 0, so
        corresponding zones are merged: tables add (count sketches are
        linear), tuple lists are merged in (timestamp, row id) order.  For T4
        the self-adjusting G1 zones depend on arrival order, so G1 is
        *realigned*: the union of both G1 tuple lists is replayed in
        (timestamp, row id) order through the change detector.  Hence for
        T1-T4 alike, merging per-partition indexes equals building one index
        from all the data (byte for byte in ``to_bytes``) provided the
        single build saw the tuples in (timestamp, row id) order and nothing was
        rejected as late.  ``other`` is not modified.
        """
        if not isinstance(other, StreamIndex):
            raise SummaryError(f"merge: other is a {type(other).__name__}, not a StreamIndex")
        if self.decl != other.decl:
            raise SummaryError(f"merge: declarations differ ({self.decl} vs {other.decl})")
        if self._sig != other._sig:
            raise SummaryError("merge: fixed config knobs differ "
                               f"({dict(zip(IndexConfig.FIXED, self._sig))} vs {dict(zip(IndexConfig.FIXED, other._sig))})")
        o = other.copy()
        now = max(self.clock, o.clock)
        if math.isfinite(now):
            self.advance(now)
            o.advance(now)
        if self._vdtype is None:
            self._vdtype = o._vdtype
        replay = []
        for gi, (g, og) in enumerate(zip(self.grans, o.grans)):
            if gi == 0 and self._adaptive:
                for ix in (self, o):
                    for z in ix.grans[0].zones():
                        if z.n:
                            replay.append(z.all_tuples())
                for z in g.zones():
                    self._zones.pop(z.id, None)
                g.clear()
                self._g1_next_reason = None
                continue
            if og.period_start is not None:
                g.period_start = og.period_start if g.period_start is None else g.period_start
            for oz in og.zones():
                z = g.slots[oz.slot]
                if z is None:
                    z = self._new_zone(gi, oz.slot, oz.start, oz.reason)
                    z.kstart = oz.kstart
                z.absorb([oz])
                z.compact(canonical=True)
                if self._sketch:
                    g.add(oz.slot, og.levels[0][oz.slot])
        if replay:
            v = np.concatenate([r[0] for r in replay])
            t = np.concatenate([r[1] for r in replay])
            r = np.concatenate([r[2] for r in replay])
            order = np.lexsort((r, t))
            clock = self.clock
            self._ingest_inorder(v[order], t[order], r[order])
            self.clock = clock
        self._next_row = max(self._next_row, o._next_row)
        self._kview = None                   # zones were re-sorted in place: rebuild the compiled view
        for g in self.grans:
            g.version += 1
            g.sversion += 1
        for k in ("ingested", "rejected", "late", "before_history"):
            self.counters[k] += o.counters[k]
        return self

    def __repr__(self) -> str:
        return (f"StreamIndex({self.decl.name} on {self.decl.stream}.{self.decl.attr}, {self._structure}, "
                f"zones={sum(1 for _ in self._live())}, clock={self.clock})")


def _f64_window(n: int, t) -> np.ndarray:
    """``t`` (a scalar or n window bounds) as a C-contiguous float64 array of n bounds (no copy when it
    already is one): what ``StreamIndex._window`` gives, in the form the kernels take."""
    if type(t) is np.ndarray and t.dtype == np.float64 and t.shape == (n,) and t.flags.c_contiguous:
        return t
    a = np.asarray(t, dtype=np.float64)
    if a.shape != (n,):
        a = np.broadcast_to(a, (n,))
    return np.ascontiguousarray(a)


def _overlap_frac(lo, hi, tf, tt) -> float:
    if hi - lo <= 0:
        return 1.0
    return float(min(1.0, max(0.0, (min(hi, tt) - max(lo, tf)) / (hi - lo))))
