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

Summaries: the value-ordered layer of the stream attribute
(:class:`sketchql.index.value_layer.ValueLayer`: per time zone the tuples
sorted by value).  The operator's value buckets are ``n_buckets`` equi-width
ranges over ``domain`` plus one below and one above it (values outside the
domain never fall in an edge bucket); a region (zone, bucket) is a cell of
the layer, its size an exact count (two binary searches per run).  The layer
is either the operator's own (``source=None``: fed by ``tick``) or the one
*shared* by every selection / aggregate over the attribute (``source`` = the
engine's declared :class:`~sketchql.index.StreamIndex`, or a ValueLayer):
then the operator does not ingest; it binds its arrivals to the stream rows
under which the layer holds them (:meth:`PTSelection.bind`, a
:class:`~sketchql.index.value_layer.RowMap`) and a scan keeps only those rows
(its filters / sample / registration applied at probe time).  The insert is
charged in both modes; the same arrivals, seeds and budgets give the same
regions, costs and results.

A region (zone, bucket) is scanned at most once per query, so no tuple is
reported twice: the query remembers the last tuple processed per region (a
row watermark; rows increase with arrival) and a later scan of a region
that grew (the open zone, a late tuple) reads only the rows after it.  With a window ``w`` a selected tuple is valid while
``ts > now - w``; regions whose zone left the window are dropped unscanned
and ``current(q, now)`` drops the expired results.

The CPU is shared by the queries round robin in proportion to their weights:
each tick's budget (after the shared ingest cost) is split by weight.

Budget (issue 16, the same on a private and a shared layer): a tick's income
pays the inserts of the arrivals it admits (:meth:`PTSelection._admit`: at
most half of it once it covers less than two inserts per arrival), then the
summary lookups of step (b) (a query registers closed zones only while its
account is positive; the others wait, :meth:`_register`), then the scans
(a batch is cut where its exact cost reaches the account; a first region
that alone costs more is scanned anyway).  Work charged <= allowance granted
+ the carried debt (the accounts below 0): at most one region's scan or one
zone's lookups, plus the realized excess of a tick's sampled inserts.

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
from ...index.value_layer import RowMap, ValueLayer, layer_of
from .costs import COSTS
from .sources import find_sorted


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


def _empty_tuples():
    return np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64)


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
    same regions and costs as one at a time; ``1``: the one-at-a-time loop),
    ``source`` (None: a private value layer; a StreamIndex or a ValueLayer:
    the shared one, see :meth:`bind`).
    """

    def __init__(self, queries, attr: str = "item", stream: int = 0, window: float = math.inf,
                 domain=None, n_buckets: int = 128, zone_seconds: float = 2.0, value_attr: str | None = None,
                 seed: int = 0, bank: float = 0.0, name: str = "pt_selection", probe_batch="auto", source=None):
        self.queries = as_queries(queries, attr)
        if not (probe_batch == "auto" or probe_batch == 1):
            raise SketchQLError(f"selection: probe_batch must be 'auto' or 1, got {probe_batch!r}")
        if int(n_buckets) < 1:
            raise SketchQLError(f"selection: n_buckets must be >= 1, got {n_buckets!r}")
        self.probe_batch = probe_batch
        self._mean_cost = 4.0
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
        self.seed = int(seed)
        zs = float(zone_seconds)
        keep = self.window + 2 * zs if math.isfinite(self.window) else math.inf
        cols = (value_attr,) if value_attr else ()
        if source is None:
            self.layer, self.view = ValueLayer(zs, keep=keep, columns=cols), None
        elif isinstance(source, ValueLayer):
            self.layer, self.view = source.require(keep, cols), RowMap()
        elif hasattr(source, "promising_regions"):          # a StreamIndex: its value layer
            self.layer, self.view = layer_of(source, zs).require(keep, cols), RowMap()
        else:
            raise SketchQLError(f"selection: source must be None, a StreamIndex or a ValueLayer, got {source!r}")
        self.shared = self.view is not None
        self.zone_seconds = self.layer.zone_seconds
        nb = int(n_buckets)
        self.n_range, self.n_buckets = nb, nb + 2      # + below / above the domain
        edges = self.domain[0] + (self.domain[1] - self.domain[0] + 1e-12) * np.arange(nb + 1) / nb
        self._b_lo, self._b_hi = edges[:-1], edges[1:]
        # bucket b's value range [cell_a[b], cell_b[b]): range buckets, then below and above the domain
        self._cell_a = np.r_[edges[:-1], -np.inf, edges[-1]]
        self._cell_b = np.r_[edges[1:], edges[0], np.inf]
        self._edges = np.r_[-np.inf, edges, np.inf]     # value order: below, b0 .. b(nb-1), above
        self._perm = np.r_[np.arange(1, nb + 1), 0, nb + 1]   # value order -> bucket numbering
        self._hi_row = -1                        # newest row the operator has (rows increase with arrival)
        self._z_before = -math.inf               # shared: the zone before the first arrival's
        self._bound = None                       # shared: (seqs, rows, ts) bound, not yet ticked
        self._shed_view = None                   # shared: RowMap of the arrivals shed (_admit)
        nq = len(self.queries)
        self._t_start = [-math.inf] * nq        # last zone number consumed (as float)
        self._pending = [[] for _ in range(nq)]  # heaps of (key, -zone, bucket)
        # per query, per zone an array over the buckets: cell tuples already scanned, last row
        # scanned (the watermark), ``now`` of the cell's last scan
        self._upto = [dict() for _ in range(nq)]
        self._wm = [dict() for _ in range(nq)]
        self._upto_t = [dict() for _ in range(nq)]
        self._zone_t = [dict() for _ in range(nq)]  # zone -> ``now`` of its last complete idle pass
        self._account = [0.0] * nq
        self._out = [[] for _ in range(nq)]
        self._out_ts = [[] for _ in range(nq)]
        w = np.array([q.weight for q in self.queries], np.float64)
        self._share = w / w.sum()
        self._q_buckets = [self._buckets_of(q) for q in self.queries]
        self._cc: dict = {}                      # zone -> (layer zone version, counts): this step only
        self.now = -math.inf
        self._stats = {"work": 0.0, "insert_work": 0.0, "outputs": 0, "probes": 0, "compares": 0,
                       "tuples_in": 0, "regions_dropped": 0, "shed": 0}

    # ------------------------------------------------------------ queries
    def add_query(self, lo, hi, weight: float = 1.0):
        """Add the range query ``[lo, hi]`` before any data arrived (its per-query state is
        then empty); returns its index, or None once data has arrived."""
        if self._stats["tuples_in"] or math.isfinite(self.now):
            return None
        q = RangeQuery(float(lo), float(hi), self.attr, float(weight))
        self.queries.append(q)
        self._t_start.append(self._t_start[0] if self._t_start else -math.inf)
        for a in ("_pending", "_out", "_out_ts"):
            getattr(self, a).append([])
        for a in ("_upto", "_wm", "_upto_t", "_zone_t"):
            getattr(self, a).append({})
        self._account.append(0.0)
        self._q_buckets.append(self._buckets_of(q))
        w = np.array([x.weight for x in self.queries], np.float64)
        self._share = w / w.sum()
        self._on_add_query(len(self.queries) - 1)
        return len(self.queries) - 1

    def _on_add_query(self, qi) -> None:
        """Hook: per-query state of a subclass for a query added by :meth:`add_query`."""

    def _buckets_of(self, q: RangeQuery):
        """(buckets overlapping ``q``, share of each bucket's value range inside
        ``q``).  The out-of-domain buckets are added, as partial (share 0.5:
        unknown, refined by the layer's counts and by scans), when ``q``
        reaches beyond the domain."""
        ov = np.minimum(self._b_hi, q.hi + 1) - np.maximum(self._b_lo, q.lo)
        width = self._b_hi - self._b_lo
        frac = np.clip(ov / width, 0.0, 1.0)
        b = np.flatnonzero(frac > 0)
        frac = frac[b]
        nr = self.n_range
        extra = [nr] if q.lo < self.domain[0] else []
        extra += [nr + 1] if q.hi > self.domain[1] else []
        if extra:
            b = np.r_[b, np.array(extra, np.int64)]
            frac = np.r_[frac, np.full(len(extra), 0.5)]
        return b, frac

    # ------------------------------------------------------------ the layer
    def counts(self, z) -> np.ndarray:
        """Exact tuple counts of zone ``z`` per bucket (bucket numbering; cached for the step)."""
        zone = self.layer.zones.get(z)
        if zone is None:
            return np.zeros(self.n_buckets, np.int64)
        hit = self._cc.get(z)
        if hit is not None and hit[0] == zone.version:
            return hit[1]
        c = self.layer.cell_counts(z, self._edges)[self._perm]
        self._cc[z] = (zone.version, c)
        return c

    def bind(self, seqs, rows, ts=None) -> None:
        """Shared layer: the stream rows (the layer's row ids) of the arrivals ``seqs`` the
        operator is ticked with next (same order); the rows it is never given are never found."""
        if not self.shared:
            raise SketchQLError("selection: bind() is for an operator on a shared layer (source=...)")
        seqs = np.asarray(seqs, np.int64)
        rows = np.asarray(rows, np.int64)
        if rows.shape != seqs.shape:
            raise SketchQLError(f"selection.bind: {seqs.shape[0]} arrivals but {rows.shape[0]} rows")
        ts = np.zeros(seqs.shape[0]) if ts is None else np.asarray(ts, np.float64)
        if self._bound is None:
            self._bound = (seqs, rows, ts)
        else:
            self._bound = tuple(np.concatenate([a, b]) for a, b in zip(self._bound, (seqs, rows, ts)))

    def _ingest(self, batch, m) -> int:
        vals = getattr(batch, self.attr)[m]
        seq = batch.seq[m]
        n = int(seq.shape[0])
        if not self.shared:
            cols = {self.value_attr: getattr(batch, self.value_attr)[m]} if self.value_attr else None
            self.layer.ingest(vals, batch.ts[m], seq, cols)
            self._hi_row = self.layer.max_rid
            return n
        bs, br, bt = self._bound if self._bound is not None else (np.zeros(0, np.int64),) * 3
        if not (np.diff(bs) > 0).all():
            o = np.argsort(bs, kind="stable")
            bs, br, bt = bs[o], br[o], bt[o]
        i, ok = find_sorted(bs, seq)
        if not ok.all():
            raise SketchQLError(f"selection on a shared layer: {int((~ok).sum())} arrivals have no stream row "
                                f"(call bind(seqs, rows) before tick)")
        rows = br[i]
        bt = batch.ts[m]
        self.view.bind(seq, rows, bt)
        self._bound = None
        if self._t_start and self._t_start[0] == -math.inf and self.view.first_row is not None:
            # the query starts with its first arrival: older zones hold none of its rows
            t0 = math.floor(self.view.first_ts / self.zone_seconds) - 1
            self._t_start = [max(t, t0) for t in self._t_start]
            self._z_before = t0
        self._hi_row = self.view.last_row
        return n

    def _admit(self, batch, m, income: float):
        """The arrivals ``m`` to ingest: all while the tick's income covers two inserts per
        arrival, else a seeded uniform sample (hash of the arrival number) of
        :func:`.admission.ingest_fraction` ``= I / (2 n c_insert)`` of them -- the PT-Join's rule:
        at most half the income goes on inserts, the rest buys lookups and scans, so a small
        budget buys output in proportion to it.  A shed arrival is neither in the operator's
        layer nor (shared layer) in its row map: never found.  (Ingesting every arrival, at 1
        unit per tuple the inserts took the whole income and the lookups went into a debt that
        only grew: 0 rows, AVG NaN, 3.1 % over the allowance.)  What stands for a shed arrival in
        an aggregate's answer (shared or private layer): :mod:`.aggregates`, "Budget"."""
        from .admission import ingest_fraction, keep_mask
        n = int(m.sum())
        keep = keep_mask(None, batch.seq[m], ingest_fraction(income, n, COSTS["insert"]),
                         getattr(self, "seed", 0), False)
        if keep is None:
            return m
        self._stats["shed"] = self._stats.get("shed", 0) + int((~keep).sum())
        if self.shared and self._bound is not None and (~keep).any():
            # the stream rows of the shed arrivals: PTAggregate counts them as not scanned, and
            # window_tuples (the exact fallback of ON MISS EXACT) still reads them
            bs, br, bt = self._bound
            o = np.argsort(bs, kind="stable")
            sq = batch.seq[m][~keep]
            i, ok = find_sorted(bs[o], sq)
            if getattr(self, "_shed_view", None) is None:
                self._shed_view = RowMap()
            self._shed_view.bind(sq[ok], br[o][i[ok]], batch.ts[m][~keep][ok])
        mm = np.zeros(m.shape[0], bool)
        mm[np.flatnonzero(m)[keep]] = True
        return mm

    def tick(self, batch, allowance) -> None:
        units = float(np.sum(allowance))
        self._cc = {}
        m = batch.stream == self.stream
        if m.any() and self._sheds:
            m = self._admit(batch, m, units)
            if self.shared and not m.any() and getattr(self, "_shed_view", None) is not None:
                self._hi_row = max(self._hi_row, self._shed_view.last_row)
        if m.any():
            n = self._ingest(batch, m)
            if self.shared and getattr(self, "_shed_view", None) is not None:
                # the layer's newest row of this operator may be a shed one (window_tuples reads it)
                self._hi_row = max(self._hi_row, self._shed_view.last_row)
            units -= COSTS["insert"] * n
            self._stats["work"] += COSTS["insert"] * n
            self._stats["insert_work"] += COSTS["insert"] * n
            self._stats["tuples_in"] += n
        if len(batch):
            self.now = max(self.now, float(batch.ts[-1]))
        if self.shared and math.isfinite(self.window) and math.isfinite(self.now):
            self.view.prune(self.now - self.window - 2 * self.zone_seconds)
            if getattr(self, "_shed_view", None) is not None:
                self._shed_view.prune(self.now - self.window - 2 * self.zone_seconds)
        for qi in range(len(self.queries)):
            self._account[qi] += units * self._share[qi]
        self._register(closed_only=True)
        for qi in range(len(self.queries)):
            if self._account[qi] > 0:
                self._dispatch(qi)
        self._forget()

    #: whether :meth:`tick` sheds arrivals the income cannot pay twice (:meth:`_admit`)
    _sheds = True

    def shed_mask(self, rows) -> np.ndarray:
        """Which layer ``rows`` are arrivals this operator shed (shared layer; :meth:`_admit`)."""
        rows = np.asarray(rows, np.int64)
        sv = getattr(self, "_shed_view", None)
        if sv is None:
            return np.zeros(rows.shape[0], bool)
        return sv.translate(rows)[1]

    def _forget(self) -> None:
        """Drop the per-region bookkeeping of zones the layer no longer holds."""
        zones = self.layer.zones
        for qi in range(len(self.queries)):
            for d in (self._upto[qi], self._wm[qi], self._upto_t[qi], self._zone_t[qi]):
                if len(d) > 2 * (len(zones) + 1):
                    for k in [k for k in d if k not in zones]:
                        del d[k]

    def finish(self) -> None:
        """Nothing more arrives (no extra budget is granted)."""

    def _register(self, closed_only: bool = True) -> None:
        """Steps (a)-(c) for every query: the regions of the zones that closed
        in (t_start, t_end] enter the query's pending heap by promise (only
        their part not yet scanned by an idle pass, see ``_dispatch``); a
        summary lookup costs ``node`` per (query, bucket, zone), charged to
        the query.  Zones are registered oldest first while the query's
        account (this tick's income included) is positive; the others wait
        for a later tick (the query is then not idle, ``_dispatch``), so the
        lookups never run a debt beyond one zone's (issue 16: at a budget
        below the lookups' cost they were charged anyway, a debt that only
        grew); a zone that left the window unregistered is skipped free."""
        if not math.isfinite(self.now):   # nothing has arrived yet (e.g. registered before data)
            return
        cur_zone = math.floor(self.now / self.zone_seconds)
        t_end = cur_zone - 1 if closed_only else cur_zone
        t0 = min(self._t_start)
        new = [z for z in self.layer.zones_between(-math.inf, self.now) if t0 < z <= t_end]
        wait = self.__dict__.setdefault("_reg_wait", [False] * len(self.queries))
        wait[:] = [False] * len(self.queries)
        if not new:
            return
        horizon = self.now - self.window
        zs = self.zone_seconds
        for qi, q in enumerate(self.queries):
            b, frac = self._q_buckets[qi]
            heap = self._pending[qi]
            upto = self._upto[qi]
            mine = [z for z in new if z > self._t_start[qi]]
            cost = COSTS["node"] * b.shape[0]
            units = 0.0
            last = self._t_start[qi]
            for z in mine:
                if (z + 1) * zs <= horizon:
                    last = z
                    continue
                if self._account[qi] - units <= 0:
                    wait[qi] = True
                    break
                units += cost
                last = z
                cnt = self.counts(z)[b]
                done = upto[z][b] if z in upto else 0
                rem = cnt - done
                ok = rem > 0
                key = self._keys(qi, z, b[ok], rem[ok], frac[ok])
                for p, bb in zip(key.tolist(), b[ok].tolist()):
                    heapq.heappush(heap, (p, -z, bb))
            self._account[qi] -= units
            self._stats["work"] += units
            self._t_start[qi] = max(self._t_start[qi], last)

    def _zone_arrays(self, qi, z):
        """(scanned counts, row watermarks, last scan times) of query qi's cells in zone z."""
        u = self._upto[qi].get(z)
        if u is None:
            nb = self.n_buckets
            u = self._upto[qi][z] = np.zeros(nb, np.int64)
            self._wm[qi][z] = np.full(nb, -1, np.int64)
            self._upto_t[qi][z] = np.full(nb, -math.inf)
        return u, self._wm[qi][z], self._upto_t[qi][z]

    def _keys(self, qi, z, buckets, counts, frac) -> np.ndarray:
        """Heap keys (smallest first) of query ``qi``'s new regions: desc on
        promise = estimated hits / (1 + cell size)."""
        return -(counts * frac) / (1.0 + counts)

    def _on_scan(self, qi, z, bucket, rid, ts, val, aux, hit) -> None:
        """Hook: a region was scanned; its compared tuples (rows ``rid``, ``ts``, values
        ``val``, the ``value_attr`` column ``aux``) and which of them qualify for query ``qi``
        (``hit``: in the range, in the window and, shared, the query's)."""

    def _cols(self):
        return (self.value_attr,) if self._hooked and self.value_attr else ()

    @property
    def _hooked(self) -> bool:
        return type(self)._on_scan is not PTSelection._on_scan

    def _emit(self, qi, rid, ts, hit) -> None:
        """Report the qualifying tuples (in the query's numbering: its arrival seqs)."""
        if not hit.any():
            return
        r, t = rid[hit], ts[hit]
        if self.shared:
            seq, ok = self.view.translate(r)
            r, t = seq[ok], t[ok]
            if not r.shape[0]:
                return
        self._out[qi].append(r)
        self._out_ts[qi].append(t)
        self._stats["outputs"] += int(r.shape[0])

    def _hits(self, qi, rid, ts, val):
        q = self.queries[qi]
        hit = (val >= q.lo) & (val <= q.hi)
        if math.isfinite(self.window):
            hit &= ts > self.now - self.window
        if self.shared:
            hit &= self.view.translate(rid)[1]
        return hit

    def _scan(self, qi, z, bb, acct) -> float:
        """Scan the not yet scanned tuples of cell (z, bb) for query qi."""
        cols = self._cols()
        upto, wm, upto_t = self._zone_arrays(qi, z)
        _, rid, ts, val, aux = self.layer.gather(np.array([z]), self._cell_a[bb], self._cell_b[bb],
                                                 wm[bb], self._hi_row, cols)
        upto[bb] += rid.shape[0]
        wm[bb] = self._hi_row
        upto_t[bb] = self.now
        hit = self._hits(qi, rid, ts, val)
        cost = COSTS["probe"] + COSTS["compare"] * rid.shape[0]
        self._stats["work"] += cost
        self._stats["probes"] += 1
        self._stats["compares"] += int(rid.shape[0])
        if self._hooked:   # the per-region hook is only called when a subclass uses it
            self._on_scan(qi, z, bb, rid, ts, val, aux.get(self.value_attr) if cols else None, hit)
        self._emit(qi, rid, ts, hit)
        return acct - cost

    def _scan_batch(self, qi, heap, horizon, acct) -> float:
        """Batched step (d): pop the next k regions (heap order), drop the
        expired ones, keep the prefix whose cost (exact: ``probe + compare *
        unscanned tuples`` of the cell) reaches the account -- the regions
        the one-at-a-time loop would have scanned -- and put the rest back;
        scan the kept regions with one gather over the cells.  k ~ 1.5 x the
        regions the account covers at the recent mean cost (at most 4096)."""
        layer = self.layer
        k = int(min(4096, len(heap), max(4, 1.5 * acct / max(self._mean_cost, 1.0) + 4)))
        pop = heapq.heappop
        items = [pop(heap) for _ in range(k)]
        z = -np.fromiter((it[1] for it in items), np.int64, k)
        bb = np.fromiter((it[2] for it in items), np.int64, k)
        zs = self.zone_seconds
        zset = layer.zones
        live = ((z + 1) * zs > horizon) & np.fromiter((zz in zset for zz in z.tolist()), bool, k)
        upto, wm = self._upto[qi], self._wm[qi]
        keys = list(zip(z.tolist(), bb.tolist()))
        k0 = np.zeros(k, np.int64)
        w0 = np.full(k, -1, np.int64)
        for zz in set(z.tolist()) & upto.keys():
            m = z == zz
            k0[m] = upto[zz][bb[m]]
            w0[m] = wm[zz][bb[m]]
        n_cell = np.zeros(k, np.int64)
        if live.any():
            n_cell[live] = layer.range_counts(z[live], self._cell_a[bb[live]], self._cell_b[bb[live]])
        ln = np.where(live, np.maximum(n_cell - k0, 0), 0)
        cost = np.where(live, COSTS["probe"] + COSTS["compare"] * ln, 0.0)
        cum_before = np.cumsum(cost) - cost
        took = max(1, int(np.searchsorted(cum_before, acct, "left")))
        if len(set(keys[:took])) < took:   # a region twice: keep the loop's order
            took = 1
        for it in items[took:]:
            heapq.heappush(heap, it)
        z, bb, live, k0, w0 = z[:took], bb[:took], live[:took], k0[:took], w0[:took]
        self._stats["regions_dropped"] += int((~live).sum())
        r = np.flatnonzero(live)
        if not r.shape[0]:
            return acct
        zr, br = z[r], bb[r]
        cols = self._cols()
        reg, rid, ts, val, aux = layer.gather(zr, self._cell_a[br], self._cell_b[br], w0[r], self._hi_row, cols)
        lr = np.bincount(reg, minlength=r.shape[0])
        cost = COSTS["probe"] + COSTS["compare"] * lr
        spent = float(cost.sum())
        self._mean_cost = 0.8 * self._mean_cost + 0.2 * spent / max(1, r.shape[0])
        hit = self._hits(qi, rid, ts, val)
        for zz in np.unique(zr).tolist():
            m = zr == zz
            u, w_, t_ = self._zone_arrays(qi, zz)
            u[br[m]] = k0[r][m] + lr[m]            # a region is kept at most once (see above)
            w_[br[m]] = self._hi_row
            t_[br[m]] = self.now
        tot = int(lr.sum())
        self._stats["work"] += spent
        self._stats["probes"] += int(r.shape[0])
        self._stats["compares"] += tot
        if self._hooked:
            ends = np.cumsum(lr)
            px = aux.get(self.value_attr) if cols else None
            for j, (zz, b_) in enumerate(zip(zr.tolist(), br.tolist())):
                a, e = int(ends[j] - lr[j]), int(ends[j])
                self._on_scan(qi, zz, b_, rid[a:e], ts[a:e], val[a:e], None if px is None else px[a:e], hit[a:e])
        self._emit(qi, rid, ts, hit)
        return acct - spent

    def _dispatch(self, qi: int) -> None:
        """Step (d): scan pending regions by promise until the query's budget
        runs out; when they are exhausted (idle), scan the new tuples of the
        still open zone (by promise); those are not scanned again later."""
        heap = self._pending[qi]
        horizon = self.now - self.window
        acct = self._account[qi]
        batch = self.probe_batch != 1
        zs = self.zone_seconds
        while acct > 0 and heap:
            if batch and acct >= 16.0 * self._mean_cost:   # a batch pays off from ~16 regions on
                acct = self._scan_batch(qi, heap, horizon, acct)
                continue
            _, negz, bb = heapq.heappop(heap)
            z = -negz
            if (z + 1) * zs <= horizon or z not in self.layer.zones:
                self._stats["regions_dropped"] += 1
                continue
            a0 = acct
            acct = self._scan(qi, z, bb, acct)
            if math.isfinite(a0):
                self._mean_cost = 0.9 * self._mean_cost + 0.1 * (a0 - acct)
        if acct > 0 and not heap and math.isfinite(self.now):
            cur = math.floor(self.now / zs)
            if cur in self.layer.zones and cur > self._t_start[qi]:
                b, frac = self._q_buckets[qi]
                cnt = self.counts(cur)[b]
                upto = self._upto[qi]
                done = upto[cur][b] if cur in upto else 0
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
            if acct > 0 and not self.__dict__.get("_reg_wait", [False] * (qi + 1))[qi]:
                # idle: at most ``bank`` units (split by weight) are kept for later; a query
                # whose zones wait for registration (_register) keeps its account
                acct = min(acct, self.bank * self._share[qi])
        self._account[qi] = acct

    def drain(self, units_per_query: float = math.inf) -> None:
        """Spend extra budget (e.g. unlimited) on every query, open zone included."""
        for qi in range(len(self.queries)):
            self._account[qi] = units_per_query
            self._dispatch(qi)

    def results(self) -> list:
        """Per query: ids of every tuple reported so far (production order): the arrival
        numbers (``batch.seq``) the operator was ticked with."""
        return [np.concatenate(o) if o else np.zeros(0, np.int64) for o in self._out]

    def current(self, qi: int, now: float | None = None) -> np.ndarray:
        """Ids of query ``qi``'s results still inside the window at ``now``."""
        r = self.results()[qi]
        now = self.now if now is None else now
        if not math.isfinite(self.window):
            return r
        o = self._out_ts[qi]
        ts = np.concatenate(o) if o else np.zeros(0)
        return r[ts > now - self.window]

    def window_tuples(self, t_from: float, t_to: float, lo=-math.inf, hi=math.inf, columns=()):
        """``(ids, ts, values, cols)`` of the operator's tuples with ``t_from < ts <= t_to`` and
        ``lo <= value <= hi`` read from the layer (exact; shared: only the rows it was given,
        including those it shed)."""
        zs = self.layer.zones_between(t_from, t_to)
        if not zs:
            e = np.zeros(0, np.int64)
            return e, np.zeros(0), e, {c: np.zeros(0) for c in columns}
        b = np.nextafter(float(hi), np.inf) if math.isfinite(hi) else np.inf
        _, rid, ts, val, cols = self.layer.gather(np.array(zs, np.int64), float(lo), b, -1, self._hi_row, columns)
        m = (ts > t_from) & (ts <= t_to) & (val >= lo) & (val <= hi)
        if self.shared:
            seq, ok = self.view.translate(rid)
            sv = getattr(self, "_shed_view", None)
            if sv is not None:      # shed arrivals are still the query's tuples (_admit)
                s2, ok2 = sv.translate(rid)
                seq, ok = np.where(ok, seq, s2), ok | ok2
            m &= ok
            rid = seq
        return rid[m], ts[m], val[m], {c: v[m] for c, v in cols.items()}

    def index_nbytes(self) -> int:
        """Memory of the summaries this operator reads: its own layer, or (shared) its row map
        only -- the shared layer is counted once by its index (``stats()['value_layer_bytes']``)."""
        return self.view.nbytes if self.shared else self.layer.nbytes

    def stats(self) -> dict:
        d = dict(self._stats)
        d.update({"layer_shared": self.shared, "layer_bytes": int(self.layer.nbytes),
                  "view_bytes": int(self.view.nbytes) if self.shared else 0})
        return d
