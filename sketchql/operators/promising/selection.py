"""PT-Selection: many standing range selections over one stream, steered by
the summaries to their promising regions (paper Figure 8).

Every query ``q`` keeps ``t_start`` (initially -inf).  When dispatched at time
``now``:

(a) ``t_end = now``;
(b) the zones of ``(t_start, t_end]`` (closed zones only; the open zone waits
    until it closes, so a region is never revisited) are looked up in the
    summaries: for each value-range bucket overlapping ``[lo, hi]`` the cell
    size ``n`` and the estimated number of qualifying tuples ``n * overlap``
    (overlap = share of the bucket's value range inside the predicate);
(c) the regions are prioritized by *promise* = estimated hits / (1 + n)
    (hits per unit of work: desc, most output);
(d) the predicate is evaluated on the regions in that order; the regions
    left over stay pending (they are resumed at the next dispatch, in
    promise order together with the new ones) until they leave the window;
(e) ``t_start = t_end``.

A region (zone, bucket) is scanned at most once per query, so no tuple is
reported twice.  With a window ``w`` a selected tuple is valid while
``ts > now - w``; regions whose zone left the window are dropped unscanned
and ``current(q, now)`` drops the expired results.

The CPU is shared by the queries round robin in proportion to their weights:
each tick's budget (after the shared ingest cost) is split by weight.

>>> import numpy as np
>>> from sketchql.data import generate_stores, interleave
>>> from sketchql.approx import WorkBudget, replay
>>> arr = interleave(generate_stores(1, duration=30.0, seed=2))
>>> op = PTSelection([(1, 200), (300, 900)], window=math.inf, zone_seconds=2.0)
>>> _ = replay(arr, {"pt": op}, WorkBudget.unlimited())
>>> op.drain()
>>> r = op.results()[0]
>>> bool(np.array_equal(np.sort(r), np.flatnonzero((arr.item >= 1) & (arr.item <= 200))))
True
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import numpy as np

from ...errors import SketchQLError
from ._miniindex import MiniIndex
from .costs import COSTS


@dataclass(frozen=True)
class RangeQuery:
    """``lo <= attr <= hi`` (inclusive), with a CPU weight."""

    lo: float
    hi: float
    attr: str = "item"
    weight: float = 1.0

    def __post_init__(self):
        if not (self.lo <= self.hi):
            raise SketchQLError(f"RangeQuery: lo must be <= hi, got [{self.lo}, {self.hi}]")
        if not (self.weight > 0):
            raise SketchQLError(f"RangeQuery: weight must be > 0, got {self.weight!r}")


def as_queries(queries, attr: str = "item") -> list:
    out = []
    for q in queries:
        if isinstance(q, RangeQuery):
            out.append(q)
        else:
            lo, hi = q
            out.append(RangeQuery(float(lo), float(hi), attr))
    if not out:
        raise SketchQLError("selection: need at least one query")
    return out


class PTSelection:
    """Promising-tuple multi-query selection (module doc).

    Parameters: ``queries`` (RangeQuery or (lo, hi) list), ``attr``,
    ``stream`` (which ``Arrivals.stream``), ``window`` (seconds, inf = filter
    only), ``domain`` (value range of ``attr`` for the range buckets; default
    taken from the queries), ``n_buckets``, ``zone_seconds``, ``value_attr``
    (a column kept beside the tuples, for aggregates), ``seed``, ``bank``
    (work units of idle time that may be kept for later, split among the
    queries -- the counterpart of the baselines' ``max_backlog``),
    ``probe_batch`` (``"auto"``: pending regions are scanned in batches,
    same regions and costs as one at a time; ``1``: the one-at-a-time loop).
    """

    def __init__(self, queries, attr: str = "item", stream: int = 0, window: float = math.inf,
                 domain=None, n_buckets: int = 128, zone_seconds: float = 2.0, value_attr: str | None = None,
                 seed: int = 0, bank: float = 0.0, name: str = "pt_selection", probe_batch="auto"):
        self.queries = as_queries(queries, attr)
        if not (probe_batch == "auto" or probe_batch == 1):
            raise SketchQLError(f"selection: probe_batch must be 'auto' or 1, got {probe_batch!r}")
        self.probe_batch = probe_batch
        self._mean_cost = 4.0
        # the per-region hook is only called when a subclass uses it
        self._hooked = type(self)._on_scan is not PTSelection._on_scan
        self.attr = attr
        self.stream = int(stream)
        self.window = float(window)
        self.name = name
        if domain is None:
            domain = (min(q.lo for q in self.queries), max(q.hi for q in self.queries))
        self.domain = (float(domain[0]), float(domain[1]))
        self.value_attr = value_attr
        self.bank = float(bank)
        self.rng = np.random.default_rng([int(seed), 0x5E1])
        keep = self.window + 2 * zone_seconds if math.isfinite(self.window) else math.inf
        self.index = MiniIndex(n_buckets=n_buckets, zone_seconds=zone_seconds, keep=keep,
                               range_domain=self.domain)
        nb = int(n_buckets)
        edges = self.domain[0] + (self.domain[1] - self.domain[0] + 1e-12) * np.arange(nb + 1) / nb
        self._b_lo, self._b_hi = edges[:-1], edges[1:]
        nq = len(self.queries)
        self._t_start = [-math.inf] * nq        # last zone number consumed (as float)
        self._pending = [[] for _ in range(nq)]  # heaps of (key, -zone, bucket)
        self._upto = [dict() for _ in range(nq)]  # (zone, bucket) -> cell tuples already scanned
        self._upto_t = [dict() for _ in range(nq)]  # (zone, bucket) -> ``now`` of its last scan
        self._zone_t = [dict() for _ in range(nq)]  # zone -> ``now`` of its last complete idle pass
        self._account = [0.0] * nq
        self._out = [[] for _ in range(nq)]
        w = np.array([q.weight for q in self.queries], np.float64)
        self._share = w / w.sum()
        self._q_buckets = [self._buckets_of(q) for q in self.queries]
        self.now = -math.inf
        self._stats = {"work": 0.0, "insert_work": 0.0, "outputs": 0, "probes": 0, "compares": 0,
                       "tuples_in": 0, "regions_dropped": 0}

    def _buckets_of(self, q: RangeQuery):
        """(buckets overlapping ``q``, share of each bucket's value range inside
        ``q``).  The out-of-domain buckets (see :mod:`._miniindex`) are added,
        as partial (share 0.5: unknown, refined by the sketches and by scans),
        when ``q`` reaches beyond the domain."""
        ov = np.minimum(self._b_hi, q.hi + 1) - np.maximum(self._b_lo, q.lo)
        width = self._b_hi - self._b_lo
        frac = np.clip(ov / width, 0.0, 1.0)
        b = np.flatnonzero(frac > 0)
        frac = frac[b]
        nr = self.index.n_range
        extra = [nr] if q.lo < self.domain[0] else []
        extra += [nr + 1] if q.hi > self.domain[1] else []
        if extra:
            b = np.r_[b, np.array(extra, np.int64)]
            frac = np.r_[frac, np.full(len(extra), 0.5)]
        return b, frac

    def tick(self, batch, allowance) -> None:
        units = float(np.sum(allowance))
        m = batch.stream == self.stream
        if m.any():
            vals = getattr(batch, self.attr)[m]
            aux = getattr(batch, self.value_attr)[m] if self.value_attr else None
            n = self.index.ingest(vals, batch.ts[m], batch.seq[m], aux)
            units -= COSTS["insert"] * n
            self._stats["work"] += COSTS["insert"] * n
            self._stats["insert_work"] += COSTS["insert"] * n
            self._stats["tuples_in"] += n
        if len(batch):
            self.now = max(self.now, float(batch.ts[-1]))
        self._register(closed_only=True)
        for qi in range(len(self.queries)):
            self._account[qi] += units * self._share[qi]
            if self._account[qi] > 0:
                self._dispatch(qi)

    def finish(self) -> None:
        """Nothing more arrives (no extra budget is granted)."""

    def _register(self, closed_only: bool = True) -> None:
        """Steps (a)-(c) for every query: the regions of the zones that closed
        in (t_start, t_end] enter the query's pending heap by promise (only
        their part not yet scanned by an idle pass, see ``_dispatch``); a
        summary lookup costs ``node`` per (query, bucket, zone), charged to
        the query."""
        idx = self.index
        if not math.isfinite(self.now):   # nothing has arrived yet (e.g. registered before data)
            return
        cur_zone = math.floor(self.now / idx.zone_seconds)
        t_end = cur_zone - 1 if closed_only else cur_zone
        new = [z for z in idx.zones_between(-math.inf, self.now) if self._t_start[0] < z <= t_end]
        if not new:
            return
        for qi, q in enumerate(self.queries):
            b, frac = self._q_buckets[qi]
            heap = self._pending[qi]
            upto = self._upto[qi]
            for z in new:
                cnt = idx.zones[z]["counts"][b]
                done = np.array([upto.get((z, bb), 0) for bb in b.tolist()], np.int64) if upto else 0
                rem = cnt - done
                ok = rem > 0
                key = self._keys(qi, z, b[ok], rem[ok], frac[ok])
                for p, bb in zip(key.tolist(), b[ok].tolist()):
                    heapq.heappush(heap, (p, -z, bb))
            units = COSTS["node"] * b.shape[0] * len(new)
            self._account[qi] -= units
            self._stats["work"] += units
        self._t_start = [t_end] * len(self.queries)

    def _keys(self, qi, z, buckets, counts, frac) -> np.ndarray:
        """Heap keys (smallest first) of query ``qi``'s new regions: desc on
        promise = estimated hits / (1 + cell size)."""
        return -(counts * frac) / (1.0 + counts)

    def _on_scan(self, qi, z, bucket, positions, scanned=None) -> None:
        """Hook: a region was scanned; ``positions`` of its qualifying tuples,
        ``scanned`` of every tuple compared."""

    def _scan(self, qi, z, bb, acct) -> float:
        """Scan the not yet scanned tuples of cell (z, bb) for query qi."""
        q = self.queries[qi]
        idx = self.index
        upto = self._upto[qi]
        pos = idx.cell_positions(z, bb)
        k0 = upto.get((z, bb), 0)
        pos = pos[k0:]
        upto[(z, bb)] = k0 + pos.shape[0]
        self._upto_t[qi][(z, bb)] = self.now
        v = idx.vals[pos]
        hit = (v >= q.lo) & (v <= q.hi)
        if math.isfinite(self.window):
            hit &= idx.ts[pos] > self.now - self.window
        cost = COSTS["probe"] + COSTS["compare"] * pos.shape[0]
        self._stats["work"] += cost
        self._stats["probes"] += 1
        self._stats["compares"] += int(pos.shape[0])
        self._on_scan(qi, z, bb, pos[hit], pos)
        if hit.any():
            self._out[qi].append(idx.rid[pos[hit]])
            self._stats["outputs"] += int(hit.sum())
        return acct - cost

    def _scan_batch(self, qi, heap, horizon, acct) -> float:
        """Batched step (d): pop the next k regions (heap order), drop the
        expired ones, keep the prefix whose cost (exact: ``probe + compare *
        unscanned tuples`` of the cell) reaches the account -- the regions
        the one-at-a-time loop would have scanned -- and put the rest back;
        scan the kept regions with one gather over the cells.  k ~ 1.5 x the
        regions the account covers at the recent mean cost (at most 4096)."""
        idx = self.index
        k = int(min(4096, len(heap), max(4, 1.5 * acct / max(self._mean_cost, 1.0) + 4)))
        pop = heapq.heappop
        items = [pop(heap) for _ in range(k)]
        z = -np.fromiter((it[1] for it in items), np.int64, k)
        bb = np.fromiter((it[2] for it in items), np.int64, k)
        zs = idx.zone_seconds
        zset = idx.zones
        live = ((z + 1) * zs > horizon) & np.fromiter((zz in zset for zz in z.tolist()), bool, k)
        upto = self._upto[qi]
        k0 = np.array([upto.get(c, 0) for c in zip(z.tolist(), bb.tolist())], np.int64) if upto else \
            np.zeros(k, np.int64)
        n_cell = np.zeros(k, np.int64)
        st = np.zeros(k, np.int64)
        csr = {}
        for zz in np.unique(z[live]).tolist():
            m = np.flatnonzero(live & (z == zz))
            order, off = csr[zz] = idx._csr(zz)
            st[m] = off[bb[m]]
            n_cell[m] = off[bb[m] + 1] - off[bb[m]]
        ln = np.where(live, np.maximum(n_cell - k0, 0), 0)
        cost = np.where(live, COSTS["probe"] + COSTS["compare"] * ln, 0.0)
        cum_before = np.cumsum(cost) - cost
        took = max(1, int(np.searchsorted(cum_before, acct, "left")))
        if len(set(zip(z[:took].tolist(), bb[:took].tolist()))) < took:   # a region twice: keep the loop's order
            took = 1
        for it in items[took:]:
            heapq.heappush(heap, it)
        z, bb, live, ln, k0, st, cost = z[:took], bb[:took], live[:took], ln[:took], k0[:took], st[:took], cost[:took]
        self._stats["regions_dropped"] += int((~live).sum())
        r = np.flatnonzero(live)
        if not r.shape[0]:
            return acct
        self._mean_cost = 0.8 * self._mean_cost + 0.2 * float(cost.sum()) / max(1, r.shape[0])
        q = self.queries[qi]
        # gather the unscanned tuples of every kept cell (in region order)
        lr = ln[r]
        tot = int(lr.sum())
        rep = np.repeat(np.arange(r.shape[0]), lr)
        within = np.arange(tot) - np.repeat(np.cumsum(lr) - lr, lr)
        local = st[r][rep] + k0[r][rep] + within     # offsets into each zone's CSR order
        pos = np.empty(tot, np.int64)
        zr = z[r][rep]
        for zz, (order, _) in csr.items():
            m = zr == zz
            if m.any():
                pos[m] = order[local[m]]
        v = idx.vals[pos]
        hit = (v >= q.lo) & (v <= q.hi)
        if math.isfinite(self.window):
            hit &= idx.ts[pos] > self.now - self.window
        now = self.now
        upto_t = self._upto_t[qi]
        for zz, b_, a0, n in zip(z[r].tolist(), bb[r].tolist(), k0[r].tolist(), lr.tolist()):
            upto[(zz, b_)] = a0 + n
            upto_t[(zz, b_)] = now
        spent = float(cost.sum())
        self._stats["work"] += spent
        self._stats["probes"] += int(r.shape[0])
        self._stats["compares"] += tot
        if self._hooked:
            ends = np.cumsum(lr)
            for j, (zz, b_) in enumerate(zip(z[r].tolist(), bb[r].tolist())):
                a, e = int(ends[j] - lr[j]), int(ends[j])
                self._on_scan(qi, zz, b_, pos[a:e][hit[a:e]], pos[a:e])
        if hit.any():
            self._out[qi].append(idx.rid[pos[hit]])
            self._stats["outputs"] += int(hit.sum())
        return acct - spent

    def _dispatch(self, qi: int) -> None:
        """Step (d): scan pending regions by promise until the query's budget
        runs out; when they are exhausted (idle), scan the new tuples of the
        still open zone (by promise); those are not scanned again later."""
        idx = self.index
        heap = self._pending[qi]
        horizon = self.now - self.window
        acct = self._account[qi]
        batch = self.probe_batch != 1
        while acct > 0 and heap:
            if batch and acct >= 16.0 * self._mean_cost:   # a batch pays off from ~16 regions on
                acct = self._scan_batch(qi, heap, horizon, acct)
                continue
            _, negz, bb = heapq.heappop(heap)
            z = -negz
            if (z + 1) * idx.zone_seconds <= horizon or z not in idx.zones:
                self._stats["regions_dropped"] += 1
                continue
            a0 = acct
            acct = self._scan(qi, z, bb, acct)
            if math.isfinite(a0):
                self._mean_cost = 0.9 * self._mean_cost + 0.1 * (a0 - acct)
        if acct > 0 and not heap and math.isfinite(self.now):
            cur = math.floor(self.now / idx.zone_seconds)
            if cur in idx.zones and cur > self._t_start[qi]:
                b, frac = self._q_buckets[qi]
                cnt = idx.zones[cur]["counts"][b]
                upto = self._upto[qi]
                done = np.array([upto.get((cur, bb), 0) for bb in b.tolist()], np.int64)
                rem = cnt - done
                ok = np.flatnonzero(rem > 0)
                complete = True
                if ok.shape[0]:
                    order = ok[np.argsort(self._keys(qi, cur, b[ok], rem[ok], frac[ok]), kind="stable")]
                    for j in order.tolist():
                        if acct <= 0:
                            complete = False
                            break
                        acct = self._scan(qi, cur, int(b[j]), acct)
                if complete:   # every tuple of the zone so far is scanned: the rest arrives later
                    self._zone_t[qi][cur] = self.now
            if acct > 0:  # idle: at most ``bank`` units (split by weight) are kept for later
                acct = min(acct, self.bank * self._share[qi])
        self._account[qi] = acct

    def drain(self, units_per_query: float = math.inf) -> None:
        """Spend extra budget (e.g. unlimited) on every query, open zone included."""
        for qi in range(len(self.queries)):
            self._account[qi] = units_per_query
            self._dispatch(qi)

    def results(self) -> list:
        """Per query: rids of every tuple reported so far (production order)."""
        return [np.concatenate(o) if o else np.zeros(0, np.int64) for o in self._out]

    def current(self, qi: int, now: float | None = None) -> np.ndarray:
        """Rids of query ``qi``'s results still inside the window at ``now``."""
        r = self.results()[qi]
        now = self.now if now is None else now
        if not math.isfinite(self.window):
            return r
        # rids index the stored tuples; look their timestamps up
        ts = self._ts_of(r)
        return r[ts > now - self.window]

    def _ts_of(self, rids):
        idx = self.index
        pos = np.searchsorted(idx.rid[: idx.n], rids)
        return idx.ts[pos]

    def stats(self) -> dict:
        return dict(self._stats)
