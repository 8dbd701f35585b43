"""PT-Aggregates (paper section 4.3): windowed aggregates over many standing
range selections, answered from the summaries plus the regions that the
aggregate's preference marks as promising.

Setting: query ``q`` asks ``AGG(value_attr)`` over the tuples of the window
``(now - w, now]`` with ``lo <= attr <= hi``.  The summaries are the
attribute's value-ordered layer (:class:`sketchql.index.value_layer.ValueLayer`,
private or shared with every selection / aggregate on the attribute, see
:class:`PTSelection`): per cell (zone, value-range bucket) the exact tuple
count ``n``; prices are only known for cells that were scanned.  A region
``c`` (zone, bucket) holds an estimated ``N_c = n_c * f_b * t_c`` qualifying
tuples (``f_b`` share of the cell's tuples inside the predicate: 1 for a
bucket inside the range, else the layer's exact count of the bucket's
in-range part over ``n_c`` -- value-ordered zones answer any sub-range;
``t_c`` share of the zone's time span inside the window).

Traversal (the same resume-where-stopped loop as :class:`PTSelection`):

* ``avg`` / ``median``: ``weighted`` -- regions are drawn at random with
  probability proportional to their estimated count (exponential keys,
  seeded), so the scanned tuples are a near-random sample of the answer;
* ``sum``: ``desc`` on estimated count x value, the value being the mean
  price seen so far in the bucket (or overall);
* ``count``: answered from the summaries directly (the in-range counts are
  exact; only the zone straddling the window start is pro-rated), no scans.

Answer at ``now`` (``answer(qi, now) -> (estimate, error)``):

* scanned regions contribute exactly (their qualifying tuples still inside
  the window); every other region contributes ``N_c`` tuples of mean
  ``m_b`` (the bucket's scanned mean, else the query's, else the global one);
* ``SUM = sum_scanned + sum_unscanned N_c m_b``; ``COUNT = n_scanned +
  sum_unscanned N_c``; ``AVG = SUM / COUNT``; ``MEDIAN`` = weighted median of
  the scanned prices, each bucket's tuples weighted by (estimated qualifying
  tuples of the bucket) / (scanned ones);
* the zone straddling the window start contributes its unscanned tuples
  pro-rated by the share of their possible time span inside the window; that
  span is the zone's, or -- when the cell was scanned (or the whole zone was
  swept while open) at clock ``t_s`` -- ``(t_s, zone end)``, since a cell's
  unscanned remainder arrived after its last scan;
* ``m_b`` falls back to the mean of every tuple of bucket b scanned by any
  query (prices depend on the item, so a bucket's mean is shared by the
  queries covering it), then to the query's mean;
* error (a ~95 % bound, ``1.96 * SE``): with ``s`` the standard deviation
  of the scanned prices, ``U = sum_unscanned N_c``, ``U_b`` its share in
  bucket b and ``v_b`` the variance of ``m_b`` as the unscanned tuples' mean
  (``s_b^2 / n_b``; a whole ``s_b^2`` when a partial bucket borrows the
  bucket-wide mean), ``SE(SUM)^2 = U s^2 + sum_b U_b^2 v_b + (s_N m)^2``
  where ``s_N`` is the count uncertainty of the partial buckets
  (0 for exact in-range counts; the window-start zone's time split of its ``n``
  pro-rated tuples adds ``max(n min(t, 1 - t), sqrt(n t (1 - t)))`` -- at least the
  binomial SE of uniform arrivals: a whole count a few expected tuples away is not
  inside ``n min(t, 1 - t)``);
  ``SE(AVG) = SE(SUM without the count term) / N``;
  ``SE(COUNT) = s_N`` (0: exact counts, but for the window-start zone); ``SE(MEDIAN)`` from the order statistics at
  ``0.5 +- 1/sqrt(n)``.  With nothing scanned the error is infinite.  With every
  tuple of the window scanned (and none shed, below) the answer is exact, error 0
  (MEDIAN: ``np.median``, the mean of the middle two of an even count).

Budget (issue 16; one rule on a private and on a shared layer): a tick's
income pays the inserts of the arrivals it admits, the summary lookups and the
scans, all charged in :data:`.costs.COSTS`.  Arrivals are admitted by
:meth:`PTSelection._admit`, the PT-Join's rule: all of them while the income
covers two inserts per arrival, else a seeded uniform sample (hash of the
arrival number) of ``f = I / (2 n c_insert)`` -- at most half the income on
inserts, the rest buys lookups and scans.  A shed arrival is never scanned;
what stands for it in the answer depends on what holds it:

* shared layer: the layer (fed and paid by the engine) still counts it; it is
  one of the unscanned tuples above (its bucket's mean, inside the error).  A
  shed tuple that a scan compared has a known arrival time: in the window-start
  zone it is counted in or out of the window exactly, not pro-rated with the
  remainder that arrived after the scan (which it is not: pro-rated so, COUNT at
  1 unit per tuple and 5 s pushes was 2.2 % high, 47 % of its answers inside the bound);
* private layer (``source=None``): the layer holds only the admitted
  arrivals; the operator counts the shed ones per zone (one ``node`` per zone
  the tick sheds into) and every held tuple of zone ``z`` stands for ``r_z =
  n_z / a_z`` arrivals (``a_z`` held, ``n_z`` arrived): scanned sums, scanned
  and unscanned counts are weighted by ``r_z`` (a post-stratified
  Horvitz-Thompson estimate; AVG and MEDIAN the weighted ratio / quantile),
  ``U s^2`` becomes ``sum_z r_z^2 U_z s^2``, and the sampling variance
  ``sum_z r_z (r_z - 1) a_z s_y^2``, ``s_y^2 = (sum y^2 - (sum y)^2 / a_z) /
  (a_z - 1)``, joins ``SE^2`` (``y``: a held tuple's contribution -- 1 for
  COUNT, its value for SUM, ``value - AVG`` for AVG; unscanned ones at their
  bucket's mean, with ``s^2``; ``s_y^2`` at least what a share ``(k + 1) /
  (a_z + 2)`` of held tuples in the query implies, ``k`` of them being in it:
  a handful of held tuples all inside the query do not claim 0).  Shed arrivals of a zone of which nothing is held count with the
  query's share of the held tuples (binomial count variance).  So COUNT on a
  private layer is exact only while nothing is shed.

Total charged ``<=`` allowance granted ``+`` the carried debt (the accounts
below 0: a first region that alone costs more than the account, and the
summary lookups charged after the fact -- :mod:`.admission`).  At 1 unit per
tuple half the arrivals are shed; from 2 units all are admitted; a budget
that covers every scan gives the exact aggregate with error 0.  Exact
fallbacks (ON MISS EXACT) read :meth:`window_tuples`: a private layer that
shed cannot answer them (it raises) unless built with ``keep_all=True`` (no
shedding on a private layer: the inserts then take the whole income at
1 unit per tuple, and the lookups run into debt, as before issue 16).

>>> import numpy as np
>>> from sketchql.data import generate_stores, interleave
>>> from sketchql.approx import WorkBudget, replay
>>> arr = interleave(generate_stores(1, duration=40.0, seed=2))
>>> op = PTAggregate([(1, 300)], func="sum", window=20.0, domain=(1, 2000))
>>> _ = replay(arr, {"a": op}, WorkBudget.unlimited())
>>> est, err = op.answer(0)
>>> m = (arr.item >= 1) & (arr.item <= 300) & (arr.ts > arr.ts[-1] - 20.0)
>>> bool(abs(est - arr.price[m].sum()) < 1e-6 * max(1.0, arr.price[m].sum())), err
(True, 0.0)
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import SketchQLError
from .costs import COSTS
from .selection import PTSelection

FUNCS = ("avg", "sum", "count", "median")
PREFERENCE_OF = {"avg": "weighted", "median": "weighted", "sum": "desc", "count": "desc"}


class PTAggregate(PTSelection):
    """Promising-tuple windowed aggregate over range selections (module doc).

    Parameters: ``queries`` ((lo, hi) or RangeQuery list over ``attr``),
    ``func`` (avg | sum | count | median), ``value_attr`` (aggregated column,
    default ``price``), ``window`` (seconds), ``domain`` (value range of
    ``attr``), ``n_buckets``, ``zone_seconds``, ``seed``, ``source`` (None:
    a private value layer; a StreamIndex / ValueLayer: the shared one, see
    :class:`PTSelection`), ``keep_all`` (private layer: admit every arrival, for exact
    fallbacks; module doc "Budget").
    """

    def __init__(self, queries, func: str = "avg", attr: str = "item", value_attr: str = "price",
                 stream: int = 0, window: float = 60.0, domain=None, n_buckets: int = 128,
                 zone_seconds: float = 2.0, seed: int = 0, bank: float = 0.0, name: str | None = None,
                 probe_batch="auto", source=None, keep_all: bool = False):
        func = str(func).lower()
        if func not in FUNCS:
            raise SketchQLError(f"PTAggregate: func must be one of {FUNCS}, got {func!r}")
        if not math.isfinite(window) or window <= 0:
            raise SketchQLError(f"PTAggregate: window must be a finite number of seconds > 0, got {window!r}")
        # COUNT reads no other column: its layer (shared or not) keeps none for it
        super().__init__(queries, attr=attr, stream=stream, window=window, domain=domain, n_buckets=n_buckets,
                         zone_seconds=zone_seconds, value_attr=None if func == "count" else value_attr,
                         seed=seed, bank=bank, name=name or f"pt_{func}", probe_batch=probe_batch, source=source)
        self.func = func
        self.preference = PREFERENCE_OF[func]
        nq = len(self.queries)
        self._scanned = [dict() for _ in range(nq)]  # zone -> [(buckets, ts, price) of qualifying tuples]
        self._bsum = [dict() for _ in range(nq)]     # bucket -> [sum, count] of scanned qualifying prices
        self._gsum = [0.0, 0]
        self._gb = np.zeros((self.n_buckets, 3))    # per bucket: count, sum, sum of squares of every scanned tuple
        self._glast: dict = {}          # (zone, bucket) -> last row accounted in _gb
        self._inr = [dict() for _ in range(nq)]      # partial (zone, bucket) -> in-range tuples scanned
        self._q_partial = [{int(x): True for x in b[f < 1.0].tolist()} for b, f in self._q_buckets]
        self._shedc = [dict() for _ in range(nq)]    # zone -> per bucket: shed tuples compared
        self._shedt = [dict() for _ in range(nq)]    # zone -> [(buckets, ts)]: in-range shed ones compared
        self.keep_all = bool(keep_all)

    @property
    def _sheds(self) -> bool:
        """An aggregate sheds like every PT operator (:meth:`PTSelection._admit`, module doc
        "Budget"), but for ``keep_all`` on a private layer (a shared layer holds the shed
        arrivals anyway)."""
        # (an operator restored from a checkpoint written before keep_all existed never shed: keep it so)
        return self.shared or not getattr(self, "keep_all", True)

    def window_tuples(self, t_from: float, t_to: float, lo=-math.inf, hi=math.inf, columns=()):
        """:meth:`PTSelection.window_tuples` (the exact window: ON MISS EXACT's fallback).  A
        private layer does not hold the arrivals it shed: asked for a span in which it shed
        some, this raises instead of answering from the held part (an "exact" answer short by the
        shed tuples); ``keep_all`` keeps every arrival for such a caller."""
        if not self.shared:
            zl = self.zone_seconds
            shed = sum(c for z, c in self._shed_zones().items() if (z + 1) * zl > t_from and z * zl <= t_to)
            if shed:
                raise SketchQLError(
                    f"{self.name}: the exact window ({t_from:g}, {t_to:g}] is not held: the private value layer "
                    f"shed {shed} of its arrivals to stay within the budget (PTAggregate(keep_all=True) keeps "
                    f"them: an exact fallback such as ON MISS EXACT needs it on a private layer)")
        return super().window_tuples(t_from, t_to, lo, hi, columns)

    def _shed_zones(self) -> dict:
        """Private layer: zone -> arrivals shed in it (an operator restored from an older
        checkpoint has none yet)."""
        return self.__dict__.setdefault("_shed_z", {})

    def _admit(self, batch, m, income: float):
        """:meth:`PTSelection._admit` (the one admission rule); on a private layer the shed
        arrivals are also counted per zone -- one summary update (``node``) per zone the tick
        sheds into, charged to the queries -- so that :meth:`answer` can weigh the zone's held
        tuples by ``n_z / a_z``."""
        mm = super()._admit(batch, m, income)
        if not self.shared and mm is not m:
            gone = m & ~mm
            if gone.any():
                z, c = np.unique(np.floor(batch.ts[gone] / self.zone_seconds).astype(np.int64),
                                 return_counts=True)
                sz = self._shed_zones()
                for zz, cc in zip(z.tolist(), c.tolist()):
                    sz[zz] = sz.get(zz, 0) + cc
                cost = COSTS["node"] * z.shape[0]
                self._stats["work"] += cost
                for qi in range(len(self.queries)):
                    self._account[qi] -= cost * self._share[qi]
        return mm

    def _zone_weight(self, z) -> float:
        """Arrivals of zone ``z`` per tuple the layer holds of it: ``(a_z + shed_z) / a_z`` on a
        private layer that shed in the zone, else 1."""
        if self.shared:
            return 1.0
        shed = self._shed_zones().get(z, 0)
        if not shed:
            return 1.0
        zone = self.layer.zones.get(z)
        return (zone.n + shed) / zone.n if zone is not None and zone.n else 1.0

    def _on_add_query(self, qi) -> None:
        self._scanned.append({})
        self._bsum.append({})
        self._inr.append({})
        b, f = self._q_buckets[qi]
        self._q_partial.append({int(x): True for x in b[f < 1.0].tolist()})
        self._shed_counts().append({})
        self._shed_times().append({})

    def _shed_times(self) -> list:
        """Per query, zone -> [(buckets, ts)] of the in-range shed tuples compared (shared layer;
        an operator restored from an older checkpoint has none yet)."""
        return self.__dict__.setdefault("_shedt", [dict() for _ in self.queries])

    def _shed_counts(self) -> list:
        """Per query, zone -> per bucket the shed tuples compared (an operator restored from an
        older checkpoint has none yet)."""
        return self.__dict__.setdefault("_shedc", [dict() for _ in self.queries])

    # ------------------------------------------------------------ summaries
    def _zone_frac(self, qi, z):
        """Per bucket of query qi in zone z: (share of the cell's tuples inside the
        predicate, absolute count error).  Full buckets: 1 and 0.  Partial buckets:
        the layer's exact count of the bucket's in-range part over the cell's count
        (value-ordered zones answer any sub-range), error 0."""
        b, frac = self._q_buckets[qi]
        share = np.ones(b.shape[0])
        unc = np.zeros(b.shape[0])
        part = np.flatnonzero(frac < 1.0)
        if part.shape[0] and z in self.layer.zones:
            q = self.queries[qi]
            bp = b[part]
            a = np.maximum(self._cell_a[bp], q.lo)
            e = np.minimum(self._cell_b[bp], np.nextafter(float(q.hi), np.inf))
            zz = np.full(bp.shape[0], z, np.int64)
            inr = np.where(e > a, self.layer.range_counts(zz, a, e), 0)
            cnt = self.counts(z)[bp]
            share[part] = np.where(cnt > 0, inr / np.maximum(cnt, 1), frac[part])
        return share, unc

    # ------------------------------------------------------------ preference
    def _mean_guess(self, qi, buckets):
        bs = self._bsum[qi]
        g = self._gsum[1] and self._gsum[0] / self._gsum[1] or 1.0
        return np.array([bs[b][0] / bs[b][1] if b in bs and bs[b][1] else g for b in buckets.tolist()])

    def _keys(self, qi, z, buckets, counts, frac) -> np.ndarray:
        b_all = self._q_buckets[qi][0]
        share, unc = self._zone_frac(qi, z)
        j = np.searchsorted(b_all, buckets) if (np.diff(b_all) > 0).all() else \
            np.array([int(np.flatnonzero(b_all == x)[0]) for x in buckets.tolist()], np.int64)
        frac = share[j]
        est = counts * frac
        if self.func in ("avg", "median"):
            return self.rng.exponential(size=est.shape[0]) / np.maximum(est, 1e-9)
        if self.func == "sum":
            return -(est * self._mean_guess(qi, buckets))
        u = unc[j]
        return np.where(u > 0, -u, np.inf)  # exact counts need no scan (sorted last)

    def _on_scan(self, qi, z, bucket, rid, ts, val, aux, hit) -> None:
        if aux is None:                         # COUNT: no prices (only how many qualify)
            aux = np.zeros(rid.shape[0])
        shed = self.shed_mask(rid) if getattr(self, "_shed_view", None) is not None else None
        if shed is not None and shed.any():     # compared, but not the query's: still unscanned
            c = self._shed_counts()[qi].setdefault(z, np.zeros(self.n_buckets, np.int64))
            c[bucket] += int(shed.sum())
            q = self.queries[qi]
            st = shed & (val >= q.lo) & (val <= q.hi)
            if st.any():                        # their arrival times: the window start splits them exactly
                self._shed_times()[qi].setdefault(z, []).append((np.full(int(st.sum()), bucket, np.int64), ts[st]))
        if bucket >= self.n_range or self._q_partial[qi].get(bucket, False):
            q = self.queries[qi]
            k = (z, bucket)
            inr = (val >= q.lo) & (val <= q.hi)
            if shed is not None:
                inr &= ~shed
            self._inr[qi][k] = self._inr[qi].get(k, 0) + int(inr.sum())
        if hit.any():
            k = int(hit.sum())
            self._scanned[qi].setdefault(z, []).append((np.full(k, bucket, np.int64), ts[hit], aux[hit]))
        if rid.shape[0]:
            last = self._glast.get((z, bucket), -1)
            new = rid > last
            if new.any():
                p = aux[new]
                self._gb[bucket] += (p.shape[0], float(p.sum()), float((p * p).sum()))
                self._glast[(z, bucket)] = int(rid.max())
        if hit.any():
            p = aux[hit]
            e = self._bsum[qi].setdefault(bucket, [0.0, 0])
            e[0] += float(p.sum()); e[1] += int(p.shape[0])
            self._gsum[0] += float(p.sum()); self._gsum[1] += int(p.shape[0])

    def _forget(self) -> None:
        super()._forget()
        zones = self.layer.zones
        if len(self._glast) > 4 * self.n_buckets * (len(zones) + 1):
            self._glast = {k: v for k, v in self._glast.items() if k[0] in zones}
        for sc in self._scanned:
            if len(sc) > 2 * (len(zones) + 1):
                for k in [k for k in sc if k not in zones]:
                    del sc[k]
        sz = self._shed_zones()
        if len(sz) > 2 * (len(zones) + 1) and math.isfinite(self.layer.keep):
            lim = self.layer.now - self.layer.keep
            for k in [k for k in sz if (k + 1) * self.zone_seconds <= lim]:
                del sz[k]
        for sc in self._shed_counts() + self._shed_times():
            if len(sc) > 2 * (len(zones) + 1):
                for k in [k for k in sc if k not in zones]:
                    del sc[k]
        for sc in self._inr:
            if len(sc) > 4 * (len(zones) + 1):
                for k in [k for k in sc if k[0] not in zones]:
                    del sc[k]

    def _dispatch(self, qi: int) -> None:
        if self.func == "count":
            # never pay for exact buckets: they are exact in the summaries
            heap = self._pending[qi]
            if heap and heap[0][0] == np.inf:
                heap.clear()
        super()._dispatch(qi)

    # ------------------------------------------------------------ answers
    def answer(self, qi: int, now: float | None = None):
        """(estimate, error) of query ``qi`` over the window ending at ``now``."""
        now = self.now if now is None else float(now)
        lo_t = now - self.window
        b, frac = self._q_buckets[qi]
        zl = self.zone_seconds
        scanned = self._scanned[qi]
        s_sum = 0.0
        s_vals = []
        s_bkt = []
        s_wt = []
        unscanned_n = np.zeros(b.shape[0])
        U2 = 0.0                # sum over zones of r_z^2 (unscanned tuples held of zone z)
        U_held = 0.0            # unscanned tuples held, unweighted
        strata = []             # private layer, zones that shed: (r_z, a_z, scanned values, unscanned per bucket)
        count_unc = 0.0
        upto = self._upto[qi]
        inr = self._inr[qi]
        part = np.flatnonzero(frac < 1.0) if inr else np.zeros(0, np.int64)
        jpos = np.zeros(self.n_buckets, np.int64)       # bucket -> its position in b
        jpos[b] = np.arange(b.shape[0])
        for z in self.layer.zones_between(lo_t, now):
            if z <= self._z_before:        # shared layer: zones before the query's first arrival
                continue
            r = self._zone_weight(z)
            zs, ze = z * zl, (z + 1) * zl
            tfrac = 1.0 if zs >= lo_t else max(0.0, (ze - lo_t) / zl)
            cnt = self.counts(z)[b]
            done = upto[z][b] if z in upto else np.zeros(b.shape[0], np.int64)
            parts = scanned.get(z)
            v = np.zeros(0)
            if parts:
                if len(parts) > 1:      # compact: one (buckets, ts, price) triple per zone
                    parts[:] = [tuple(np.concatenate([p[i] for p in parts]) for i in range(3))]
                bk, t_, v = parts[0]
                m = t_ > lo_t
                v = v[m]
                s_sum += r * float(v.sum())
                s_vals.append(v)
                s_bkt.append(jpos[bk[m]])
                s_wt.append(np.full(v.shape[0], r))
            rem = (cnt - done).astype(np.float64)
            share, unc = self._zone_frac(qi, z)
            # in-range tuples not scanned: the exact in-range count minus those scanned
            # (a partial bucket's scanned part need not have the cell's share); shed tuples
            # were compared but are not scanned ones
            sc = self._shed_counts()[qi].get(z)
            got = np.where(frac < 1.0, 0.0, done - (sc[b] if sc is not None else 0))
            for j in part.tolist():
                got[j] = inr.get((z, int(b[j])), 0)
            rem_in = np.maximum(share * cnt - got, 0.0)
            tf = np.full(b.shape[0], tfrac)
            seen_win = None
            if tfrac < 1.0:
                # shed tuples compared (shared layer) are unscanned, but their arrival times are
                # known: the window start splits them exactly; only the never compared remainder
                # is pro-rated below
                st = self._shed_times()[qi].get(z)
                if st:
                    if len(st) > 1:
                        st[:] = [tuple(np.concatenate([p[i] for p in st]) for i in range(2))]
                    sb, stt = st[0]
                    seen = np.minimum(np.bincount(jpos[sb], minlength=b.shape[0]).astype(np.float64), rem_in)
                    seen_win = np.minimum(np.bincount(jpos[sb[stt > lo_t]], minlength=b.shape[0]), seen)
                    rem_in = rem_in - seen
                # a cell's unscanned remainder arrived after its last scan (cells grow
                # in arrival order): it lies in (the operator's clock at that scan, zone
                # end), not spread over the whole zone
                upto_t = self._upto_t[qi].get(z)
                t_zone = self._zone_t[qi].get(z, -math.inf)
                for j in np.flatnonzero(rem > 0).tolist():
                    t_last = max(float(upto_t[b[j]]) if upto_t is not None else -math.inf, t_zone)
                    if t_last > zs:
                        tf[j] = min(1.0, max(0.0, (ze - max(lo_t, t_last)) / max(ze - t_last, 1e-12)))
            un_z = rem_in * tf
            if seen_win is not None:
                un_z = un_z + seen_win
            U_held += float(un_z.sum())
            if r == 1.0:
                unscanned_n += un_z
            else:
                unscanned_n += r * un_z
                U2 += r * r * float(un_z.sum())
                strata.append((r, self.layer.zones[z].n, v, un_z))
            cu = float((unc * rem / np.maximum(cnt, 1) * tf).sum())
            if tfrac < 1.0:
                # the time split of the pro-rated remainder: at least its binomial SE (uniform
                # arrivals; a count is whole: a few expected tuples need more than n min(t, 1 - t))
                cu += max(float((rem_in * np.minimum(tf, 1 - tf)).sum()),
                          math.sqrt(float((rem_in * tf * (1 - tf)).sum())))
            count_unc += r * cu
        vals = np.concatenate(s_vals) if s_vals else np.zeros(0)
        vb = np.concatenate(s_bkt) if s_bkt else np.zeros(0, np.int64)
        n = vals.shape[0]
        U = float(unscanned_n.sum())
        if strata:
            wv = np.concatenate(s_wt) if s_wt else np.zeros(0)
            N = float(wv.sum()) + U
            U2 += U - sum(s[0] * float(s[3].sum()) for s in strata)    # the zones that shed nothing
        else:
            wv = None
            N = n + U
            U2 = U
        blind = self._blind_zones(lo_t, now)
        if n:
            gmean = float(vals.mean())
            sd = float(vals.std(ddof=1)) if n > 1 else abs(gmean)
        else:
            gmean = self._gsum[0] / self._gsum[1] if self._gsum[1] else float("nan")
            sd = float("nan")
        # mean price per bucket: this query's scanned tuples in the window, else
        # every tuple of the bucket scanned by any query, else the query's mean;
        # var_m: variance of that mean as an estimate of the unscanned tuples' mean
        s2 = sd * sd if np.isfinite(sd) else 0.0
        bm = np.full(b.shape[0], gmean)
        var_m = np.full(b.shape[0], s2)
        gb = self._gb[b]
        g_has = gb[:, 0] > 1
        g_mean = np.where(g_has, gb[:, 1] / np.maximum(gb[:, 0], 1), np.nan)
        g_var = np.where(g_has, np.maximum(gb[:, 2] / np.maximum(gb[:, 0], 1) - g_mean ** 2, 0.0), np.nan)
        bm[g_has] = g_mean[g_has]
        # a partial bucket's in-range tuples may differ from the bucket: one sd
        var_m[g_has] = np.where(frac[g_has] < 1.0, g_var[g_has], g_var[g_has] / gb[g_has, 0])
        if n:
            cnt_b = np.bincount(vb, minlength=b.shape[0])
            sum_b = np.bincount(vb, weights=vals, minlength=b.shape[0])
            sq_b = np.bincount(vb, weights=vals * vals, minlength=b.shape[0])
            has = cnt_b > 0
            bm[has] = sum_b[has] / cnt_b[has]
            var_b = np.maximum(sq_b[has] / cnt_b[has] - bm[has] ** 2, 0.0)
            var_m[has] = np.where(cnt_b[has] > 1, var_b / cnt_b[has], s2)
        bm = np.where(np.isfinite(bm), bm, 0.0)
        est_sum = s_sum + float((unscanned_n * bm).sum())
        # SE of the unscanned part: tuple noise + uncertainty of the means
        se2_unscanned = U2 * s2 + float((unscanned_n ** 2 * np.where(np.isfinite(var_m), var_m, s2)).sum())
        sampled = bool(strata) or blind[0] > 0
        if blind[0] > 0:
            # shed arrivals of zones the layer holds nothing of: the query's share of the held
            # tuples in the window (p), their mean the query's; their count is binomial
            bn, bunc = blind
            held = float(sum(z.n for zz, z in self.layer.zones.items() if (zz + 1) * zl > lo_t and zz * zl <= now))
            if held > 0:
                p = min(1.0, (n + U_held) / held)
                count_unc += bunc * p
                bvar_n = bn * p * (1.0 - p) + bn * bn * p * (1.0 - p) / held
            else:                   # nothing held in the window: anywhere in [0, bn]
                p = 0.5
                count_unc += 0.5 * bn
                bvar_n = 0.0
            N += bn * p
            est_sum += bn * p * (gmean if math.isfinite(gmean) else 0.0)
            bnoise = bn * p * s2
        else:
            bvar_n = bnoise = 0.0
        if self.func == "count":
            if not sampled:
                return float(N), 1.96 * count_unc
            return float(N), 1.96 * math.sqrt(count_unc ** 2 + self._strata_var(strata, "count", bm, s2, 0.0, 1.0) + bvar_n)
        if self.func == "sum":
            if U == 0 and count_unc == 0 and not sampled:
                return est_sum, 0.0
            if n == 0:
                return est_sum, math.inf
            se2 = se2_unscanned + (count_unc * gmean) ** 2
            if sampled:
                se2 += self._strata_var(strata, "sum", bm, s2, 0.0, gmean) + bvar_n * gmean * gmean + bnoise
            return est_sum, 1.96 * math.sqrt(se2)
        if self.func == "avg":
            if N <= 0:
                return float("nan"), math.inf
            if n == 0:
                return gmean, math.inf
            avg = est_sum / N
            if U == 0 and not sampled:
                return avg, 0.0
            se2 = se2_unscanned
            if sampled:
                se2 += self._strata_var(strata, "avg", bm, s2, avg, gmean) + bnoise
            return avg, 1.96 * math.sqrt(se2) / N
        # median
        if n == 0:
            return float("nan"), math.inf
        if wv is None:
            tot_b = np.bincount(vb, minlength=b.shape[0]).astype(float)
            wts = (tot_b[vb] + unscanned_n[vb]) / np.maximum(tot_b[vb], 1.0)
        else:
            tot_b = np.bincount(vb, weights=wv, minlength=b.shape[0])
            wts = wv * (tot_b[vb] + unscanned_n[vb]) / np.maximum(tot_b[vb], 1.0)
        if U == 0 and not sampled:      # every tuple of the window scanned: the exact median
            return float(np.median(vals)), 0.0
        o = np.argsort(vals, kind="stable")
        cw = np.cumsum(wts[o]) / wts.sum()
        med = float(vals[o][min(int(np.searchsorted(cw, 0.5)), n - 1)])
        d = 1.0 / math.sqrt(n)
        lo_v = float(vals[o][min(int(np.searchsorted(cw, max(0.0, 0.5 - d))), n - 1)])
        hi_v = float(vals[o][min(int(np.searchsorted(cw, min(1.0, 0.5 + d))), n - 1)])
        return med, max(med - lo_v, hi_v - med)

    @staticmethod
    def _strata_var(strata, func, bm, s2, c, mu) -> float:
        """Sampling variance of the zones' weighting (private layer, module doc "Budget"): zone z
        held a uniform sample of ``a_z`` of its arrivals, each weighed ``r_z``; with ``y`` a
        tuple's contribution (1 for COUNT, its value for SUM, ``value - c`` for AVG's
        linearized ratio; 0 outside the query), ``Var = sum_z r_z (r_z - 1) a_z s_y^2`` with
        ``s_y^2 = (sum y^2 - (sum y)^2 / a_z) / (a_z - 1)``, the unscanned held tuples' sums taken
        at their buckets' means ``bm`` with the price variance ``s2``.  A few held tuples can
        all fall inside (or outside) the query, which makes that ``s_y^2`` 0: it is at least the
        one of a share ``p = (k + 1) / (a_z + 2)`` of the tuples in the query (``k`` of the held
        ones are), values of mean ``mu`` and variance ``s2``: ``p s2 + p (1 - p) m^2`` (``m`` =
        1 for COUNT, ``mu`` for SUM, ``mu - c`` for AVG)."""
        tot = 0.0
        for r, a, v, un in strata:
            if a < 1:
                continue
            u = float(un.sum())
            k = v.shape[0] + u
            if func == "count":
                sy = sy2 = k
                m, var = 1.0, 0.0
            elif func == "sum":
                sy = float(v.sum()) + float((un * bm).sum())
                sy2 = float((v * v).sum()) + float((un * (bm * bm + s2)).sum())
                m, var = mu, s2
            else:
                d = v - c
                sy = float(d.sum()) + float((un * (bm - c)).sum())
                sy2 = float((d * d).sum()) + float((un * ((bm - c) ** 2 + s2)).sum())
                m, var = mu - c, s2
            p = (k + 1.0) / (a + 2.0)
            sv = max(sy2 - sy * sy / a, 0.0) / (a - 1.0) if a > 1 else 0.0
            tot += r * (r - 1.0) * a * max(sv, p * var + p * (1.0 - p) * m * m)
        return tot

    def _blind_zones(self, lo_t: float, now: float):
        """Private layer: (arrivals shed in the window's zones of which the layer holds no tuple,
        pro-rated by the zone's share in the window; the part of them that pro-rating makes
        uncertain) -- nothing held stands for them."""
        if self.shared:
            return 0.0, 0.0
        zl = self.zone_seconds
        bn = bu = 0.0
        for z, c in self._shed_zones().items():
            zs, ze = z * zl, (z + 1) * zl
            if ze <= lo_t or zs > now or z in self.layer.zones:
                continue
            t = 1.0 if zs >= lo_t else (ze - lo_t) / zl
            bn += c * t
            bu += c * min(t, 1.0 - t)
        return bn, bu

    def answers(self, now: float | None = None):
        """(estimates, errors) arrays over all queries."""
        res = [self.answer(qi, now) for qi in range(len(self.queries))]
        return np.array([r[0] for r in res]), np.array([r[1] for r in res])
