"""The ingest side of :class:`~sketchql.index.StreamIndex` (a mixin): appending
tuples to zones, opening fixed and self-adjusting G1 zones, COLLAPSE of
the older granularities, late tuples and the clock (``advance``).

Split out of ``stream_index.py`` along its seams; the geometry and the
invariants are documented there.
"""
from __future__ import annotations
import math
import time
import numpy as np
from ..errors import SummaryError
from ..summaries.hashing import as_key_array
from . import kernels
from .results import IngestReport
from .value_layer import advance_layers, feed_layers
from .zone import Zone


class IngestSide:
    """Mixin of :class:`~sketchql.index.StreamIndex` (module doc)."""

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
            small = 4 * (b - a) * d < B * d * w
            if small and kernels.ENABLED and SPARSE_KERNEL:
                # small batch, compiled: in place, per tuple, row norms kept exact (no temporaries)
                c = np.ascontiguousarray
                g.add_tuples(z.slot, c(bucket, dtype=np.int64), c(idx, dtype=np.int64), c(sgn, dtype=np.int64),
                             a, b)
            elif small:
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
            # each merged zone's time range: its handles keep scanning only its own tuples
            # (query_side.scan_matching_many(bounded=True)); dropped with the alias
            span = self.__dict__.setdefault("_alias_span", {})
            for o in olds:
                span[o.id] = (o.min_ts, o.max_ts)
            if len(span) > 2 * len(self._alias) + 64:
                for a in [a for a in span if a not in self._alias and a not in self._zones]:
                    del span[a]
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
    def ingest(self, values, timestamps, row_ids=None, columns=None, hashed=None) -> IngestReport:
        """Add a batch of tuples (numpy arrays, timestamps non-decreasing).

        Tuples with ``ts < clock - allowed_lateness`` (clock = the largest
        timestamp seen so far, including earlier tuples of this batch) are
        rejected and counted (reason ``"late"``); the rest are accepted.
        ``row_ids`` default to a running counter (they point back to the full
        tuple held by the stream's owner).  Raises :class:`SummaryError` on
        bad input (length mismatch, NaN/inf timestamp, bad key type).
        ``columns`` (name -> array): the batch's other columns, kept by the
        attached value layers that asked for them (:mod:`~sketchql.index.value_layer`).
        ``hashed``: ``self._hash(values)`` computed ahead by the caller (e.g. in another
        thread while the previous batch ingests); used when every tuple is in order.
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
                self._ingest_inorder(keys, ts, rids, hashed)
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
        if n and getattr(self, "_value_layers", None):       # the range side (value_layer)
            feed_layers(self, keys, ts, rids, rejected_pos, columns)
        if n:
            self._keep_view()
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

    def _ingest_inorder(self, keys, ts, rids, hashed=None) -> None:
        bucket, idx, sgn = self._hash(keys) if hashed is None else hashed
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
            if _compiled_checks(self):
                cut, found, has_conf, conf_cut, z.total, z.pending, n_tot, n_pend = kernels.adaptive_checks(
                    idx, bucket, sgn, pos, lim, lens, self._shape[2], W, z.total, z.pending, z.n_total,
                    z.n_pending, C, float(cfg.theta))
                if has_conf:
                    z.last_confidence = float(conf_cut)
                z.n_total, z.n_pending = int(n_tot), int(n_pend)
                if found:
                    self._g1_next_reason = "change"
                pos = int(ends[cut])
                continue
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
        advance_layers(self, now)
        c0 = self.counters["collapses"]
        self._collapse_due(int(math.floor(now / self.decl.granularity)))
        self._keep_view()
        return self.counters["collapses"] - c0

    def _keep_view(self) -> None:
        """Refresh the compiled probe's view now, while the batch just written is in cache, if a
        probe read it since the last ingest (an index that is probed between batches keeps its
        view current at ingest; one no longer probed stops paying after one batch).  The same
        work the next probe would otherwise do first; measured on bench_index's 6k join, the
        probe's t_hit drops ~10% and the ingest's per-tuple time does not move (the refresh is
        once per batch, and cheaper on data the ingest just touched)."""
        if self._kread and self._kview is not None and EAGER_VIEW:
            self._kernel_view()
            self._kread = False            # (the refresh is no read: _kernel_view set it)


#: small batches' sketch updates through :func:`kernels.sketch_add` (in place, per tuple); False: numpy
#: sparse deltas (large batches use a dense numpy delta either way: faster per tuple at 10k tuples)
SPARSE_KERNEL = True

#: refresh the compiled probe's view at the end of an ingest / advance when a probe read it since the
#: previous one (``StreamIndex._keep_view``); False: only the next reader refreshes it (lazily)
EAGER_VIEW = True

#: the compiled confidence checks of T4's adaptive insert (:func:`kernels.adaptive_checks`); False: the numpy block
COMPILED_CHECKS = True


def _compiled_checks(ix) -> bool:
    return COMPILED_CHECKS and kernels.ENABLED and getattr(ix, "use_kernels", True)
