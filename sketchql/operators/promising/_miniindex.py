"""PRIVATE minimal region index (fallback adapter) -- not ``sketchql.index``.

Written while ``sketchql.index.StreamIndex`` did not exist yet, and kept as a
small, fast, fully deterministic region source for PT-Join
(``source="mini"``, :class:`.sources.MiniSource`).  PT-Selection and
PT-Aggregates no longer use it: they read a value-ordered layer
(:mod:`sketchql.index.value_layer`), private or the declared index's shared one.
It implements only what the operators need:

* fixed-length time zones (``zone_seconds``) x ``n_buckets`` value buckets
  (``bucket = hash64(value) mod n_buckets``, or equi-width value *ranges*
  when ``range_domain=(lo, hi)`` is given -- range predicates need ordered
  buckets; then two more buckets hold the values outside the domain:
  ``n_range`` (= the ``n_buckets`` asked for) for ``value < lo`` and
  ``n_range + 1`` for ``value > hi``, so an edge bucket only ever holds
  values of its own range -- clamping them into the edge buckets made a range
  covering the whole domain count out-of-domain values);
* per zone a :class:`~sketchql.summaries.CountSketch` of the values
  (Estimate(x) per zone) and exact per-bucket tuple counts (the cell sizes);
* granularity of a zone at time ``now``: ``i = 1`` while the zone ended less
  than ``T1`` ago, then each older granularity ``rate`` times longer
  (paper section 3.5); priority = estimate * fade^(i-1);
* tuples columnar in arrival order; a cell scan compares every tuple of the
  (zone, bucket) cell and reports that many comparisons as work.

No self-adjusting zones, no pyramid, no collapse -- that is the real index's
job.  Expiry: zones entirely older than ``now - keep`` are dropped.
"""
from __future__ import annotations

import math

import numpy as np

from ...summaries.countsketch import CountSketch
from ...summaries.hashing import hash64

_GROW = 4096


class MiniIndex:
    """One stream, one attribute.  ``ingest`` / ``regions`` / ``scan``."""

    def __init__(self, n_buckets: int = 64, zone_seconds: float = 5.0, t1: float = 10.0, rate: int = 2,
                 depth: int = 4, keep: float = math.inf, seed: int = 0, range_domain=None,
                 sketch_w: int = 256, sketch_d: int = 3):
        self.n_range = int(n_buckets)
        # range mode: + an underflow and an overflow bucket (module doc)
        self.n_buckets = self.n_range + (2 if range_domain is not None else 0)
        self.zone_seconds = float(zone_seconds)
        self.t1, self.rate, self.depth = float(t1), int(rate), int(depth)
        self.keep = float(keep)
        self.seed = int(seed)
        self.range_domain = range_domain
        self.sketch_w, self.sketch_d = int(sketch_w), int(sketch_d)
        self._cap = 0
        self.n = 0
        self.vals = np.zeros(0, np.int64)
        self.ts = np.zeros(0, np.float64)
        self.rid = np.zeros(0, np.int64)
        self.bkt = np.zeros(0, np.int64)
        self.aux = np.zeros(0, np.float64)
        self.zones: dict[int, dict] = {}  # zone number -> {lo, hi (positions), sketch, counts}
        self.now = -math.inf

    # ------------------------------------------------------------------ ingest
    def bucket_of(self, values) -> np.ndarray:
        values = np.asarray(values)
        if self.range_domain is not None:
            lo, hi = self.range_domain
            v = values.astype(np.float64)
            b = np.clip(np.floor((v - lo) / (hi - lo + 1e-12) * self.n_range), 0, self.n_range - 1).astype(np.int64)
            b[v < lo] = self.n_range
            b[v > hi] = self.n_range + 1
            return b
        return (hash64(values, self.seed ^ 0xB0C3) % np.uint64(self.n_buckets)).astype(np.int64)

    def _reserve(self, k):
        if self.n + k <= self._cap:
            return
        cap = max(self._cap * 2, self.n + k, _GROW)
        for name in ("vals", "ts", "rid", "bkt", "aux"):
            old = getattr(self, name)
            new = np.zeros(cap, old.dtype)
            new[: self.n] = old[: self.n]
            setattr(self, name, new)
        self._cap = cap

    def ingest(self, values, ts, rids, aux=None) -> int:
        """Append a batch (timestamps non-decreasing); returns tuples ingested."""
        values = np.asarray(values, np.int64)
        ts = np.asarray(ts, np.float64)
        k = values.shape[0]
        if k == 0:
            return 0
        self._reserve(k)
        s = slice(self.n, self.n + k)
        b = self.bucket_of(values)
        self.vals[s], self.ts[s], self.rid[s], self.bkt[s] = values, ts, rids, b
        self.aux[s] = 0.0 if aux is None else aux
        zn = np.floor(ts / self.zone_seconds).astype(np.int64)
        for z in np.unique(zn).tolist():
            m = zn == z
            pos = np.flatnonzero(m) + self.n
            zone = self.zones.get(z)
            if zone is None:
                zone = {"lo": int(pos[0]), "hi": int(pos[0]), "counts": np.zeros(self.n_buckets, np.int64),
                        "sketch": CountSketch(d=self.sketch_d, w=self.sketch_w, seed=self.seed), "csr": None}
                self.zones[z] = zone
            zone["hi"] = int(pos[-1]) + 1
            zone["counts"] += np.bincount(b[m], minlength=self.n_buckets)
            zone["sketch"].update(values[m])
            zone["csr"] = None
        self.n += k
        self.now = max(self.now, float(ts[-1]))
        if math.isfinite(self.keep):
            dead = [z for z in self.zones if (z + 1) * self.zone_seconds <= self.now - self.keep]
            for z in dead:
                del self.zones[z]
        return k

    # ------------------------------------------------------------------ query
    def granularity(self, zone_numbers, now) -> np.ndarray:
        """1-based granularity of zones (by the age of their end) at time ``now``."""
        age = np.maximum(now - (np.asarray(zone_numbers) + 1) * self.zone_seconds, 0.0)
        # G_i covers ages [T1 (r^(i-1)-1)/(r-1), T1 (r^i-1)/(r-1))
        r = self.rate
        i = np.floor(np.log(age * (r - 1) / self.t1 + 1.0) / math.log(r)).astype(np.int64) + 1
        return np.clip(i, 1, self.depth)

    def zones_between(self, t_from, t_to) -> list[int]:
        lo = math.floor(t_from / self.zone_seconds) if math.isfinite(t_from) else -(1 << 62)
        hi = math.floor(t_to / self.zone_seconds)
        return sorted(z for z in self.zones if lo <= z <= hi)

    def regions(self, values, t_from, t_to, now, fade=1.0, min_estimate=0.5):
        """Promising (probe, zone, estimate, granularity, priority, cell size)
        rows for probe ``values`` over zones intersecting ``[t_from, t_to]``;
        ``nodes`` = (probe, zone) estimates evaluated."""
        values = np.asarray(values, np.int64)
        zs = self.zones_between(t_from, t_to)
        if not zs or values.shape[0] == 0:
            e = np.zeros(0, np.int64)
            return e, e, np.zeros(0), e, np.zeros(0), e, 0
        b = self.bucket_of(values)
        idx, sgn = self.zones[zs[0]]["sketch"].locate(values)
        probes, zones, ests, sizes = [], [], [], []
        for z in zs:
            zone = self.zones[z]
            est = zone["sketch"].estimate_located(idx, sgn).astype(np.float64)
            keep = est >= min_estimate
            if keep.any():
                p = np.flatnonzero(keep)
                probes.append(p)
                zones.append(np.full(p.shape[0], z, np.int64))
                ests.append(est[p])
                sizes.append(zone["counts"][b[p]])
        nodes = len(zs) * values.shape[0]
        if not probes:
            e = np.zeros(0, np.int64)
            return e, e, np.zeros(0), e, np.zeros(0), e, nodes
        probe = np.concatenate(probes)
        zone = np.concatenate(zones)
        est = np.concatenate(ests)
        size = np.concatenate(sizes)
        gran = self.granularity(zone, now)
        prio = est * float(fade) ** (gran - 1)
        return probe, zone, est, gran, prio, size, nodes

    def _csr(self, z):
        zone = self.zones[z]
        if zone["csr"] is None:
            lo, hi = zone["lo"], zone["hi"]
            bk = self.bkt[lo:hi]
            order = np.argsort(bk, kind="stable") + lo
            off = np.zeros(self.n_buckets + 1, np.int64)
            np.cumsum(np.bincount(bk, minlength=self.n_buckets), out=off[1:])
            zone["csr"] = (order, off)
        return zone["csr"]

    def cell_positions(self, z, bucket) -> np.ndarray:
        """Storage positions of the tuples of cell (zone z, bucket) in arrival order."""
        if z not in self.zones:
            return np.zeros(0, np.int64)
        order, off = self._csr(z)
        return order[off[bucket]: off[bucket + 1]]

    def scan_value(self, z, value):
        """(positions of tuples equal to ``value`` in its cell of zone z, comparisons)."""
        pos = self.cell_positions(z, int(self.bucket_of(np.array([value]))[0]))
        return pos[self.vals[pos] == value], int(pos.shape[0])
