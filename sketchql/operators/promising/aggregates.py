"""PT-Aggregates (paper section 4.3): windowed aggregates over many standing
range selections, answered from the summaries plus the regions that the
aggregate's preference marks as promising.

Setting: query ``q`` asks ``AGG(value_attr)`` over the tuples of the window
``(now - w, now]`` with ``lo <= attr <= hi``.  The index (value-range buckets
x time zones) keeps, per cell, the exact tuple count ``n`` (a summary);
prices are only known for cells that were scanned.  A region ``c`` (zone,
bucket) holds an estimated ``N_c = n_c * f_b * t_c`` qualifying tuples
(``f_b`` share of the cell's tuples inside the predicate: 1 for a bucket
inside the range, else estimated from the zone's count sketch summed over the
bucket's in-range values; ``t_c`` share of the zone's time span inside the
window).

Traversal (the same resume-where-stopped loop as :class:`PTSelection`):

* ``avg`` / ``median``: ``weighted`` -- regions are drawn at random with
  probability proportional to their estimated count (exponential keys,
  seeded), so the scanned tuples are a near-random sample of the answer;
* ``sum``: ``desc`` on estimated count x value, the value being the mean
  price seen so far in the bucket (or overall);
* ``count``: answered from the summaries directly; the budget only refines
  the partial buckets (desc on their uncertainty ``n min(f, 1 - f)``).

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
  (``sum n_c min(f, 1-f)`` -- uniform values inside a bucket);
  ``SE(AVG) = SE(SUM without the count term) / N``;
  ``SE(COUNT) = s_N``; ``SE(MEDIAN)`` from the order statistics at
  ``0.5 +- 1/sqrt(n)``.  With nothing scanned the error is infinite.

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
from .selection import PTSelection

FUNCS = ("avg", "sum", "count", "median")
PREFERENCE_OF = {"avg": "weighted", "median": "weighted", "sum": "desc", "count": "desc"}


class PTAggregate(PTSelection):
    """Promising-tuple windowed aggregate over range selections (module doc).

    Parameters: ``queries`` ((lo, hi) or RangeQuery list over ``attr``),
    ``func`` (avg | sum | count | median), ``value_attr`` (aggregated column,
    default ``price``), ``window`` (seconds), ``domain`` (value range of
    ``attr``), ``n_buckets``, ``zone_seconds``, ``seed``.
    """

    def __init__(self, queries, func: str = "avg", attr: str = "item", value_attr: str = "price",
                 stream: int = 0, window: float = 60.0, domain=None, n_buckets: int = 128,
                 zone_seconds: float = 2.0, seed: int = 0, bank: float = 0.0, name: str | None = None,
                 probe_batch="auto"):
        func = str(func).lower()
        if func not in FUNCS:
            raise SketchQLError(f"PTAggregate: func must be one of {FUNCS}, got {func!r}")
        if not math.isfinite(window) or window <= 0:
            raise SketchQLError(f"PTAggregate: window must be a finite number of seconds > 0, got {window!r}")
        super().__init__(queries, attr=attr, stream=stream, window=window, domain=domain, n_buckets=n_buckets,
                         zone_seconds=zone_seconds, value_attr=value_attr, seed=seed, bank=bank,
                         name=name or f"pt_{func}", probe_batch=probe_batch)
        self.func = func
        self.preference = PREFERENCE_OF[func]
        nq = len(self.queries)
        self._scanned = [dict() for _ in range(nq)]  # (zone, bucket) -> positions of qualifying tuples
        self._bsum = [dict() for _ in range(nq)]     # bucket -> [sum, count] of scanned qualifying prices
        self._gsum = [0.0, 0]
        nb = self.index.n_buckets
        self._gb = np.zeros((nb, 3))    # per bucket: count, sum, sum of squares of every scanned tuple
        self._glast: dict = {}          # (zone, bucket) -> last storage position accounted in _gb
        self._fcache: dict = {}         # (query, closed zone) -> (in-range share, count error) per bucket
        self._pvals = []                # per query: (values, position in its bucket list) of partial buckets
        for qi, q in enumerate(self.queries):
            b, frac = self._q_buckets[qi]
            part = np.flatnonzero(frac < 1.0)
            vs, js = [], []
            if part.shape[0] and float(q.lo).is_integer() and float(q.hi).is_integer() and q.hi - q.lo < 1e6:
                v = np.arange(int(q.lo), int(q.hi) + 1)
                vb = self.index.bucket_of(v)
                pos = {int(bb): j for j, bb in enumerate(b.tolist())}
                keep = np.isin(vb, b[part])
                vs = v[keep]
                js = np.array([pos[int(x)] for x in vb[keep]], np.int64)
            self._pvals.append((np.asarray(vs, np.int64), np.asarray(js, np.int64)))
        # the partial values of every query, estimated once per zone state for all queries
        allv = [v for v, _ in self._pvals if v.shape[0]]
        self._allv = np.unique(np.concatenate(allv)) if allv else np.zeros(0, np.int64)
        self._pv_at = [np.searchsorted(self._allv, v) for v, _ in self._pvals]
        self._zest: dict = {}           # zone -> (tuples in the zone, estimates of _allv, error bound)

    # ------------------------------------------------------------ summaries
    def _zone_frac(self, qi, z):
        """Per bucket of query qi in zone z: (estimated share of the cell's
        tuples inside the predicate, absolute count error).  Full buckets: 1
        and 0.  Partial buckets: the zone's count sketch summed over the
        bucket's in-range values (Zipf values are far from uniform inside a
        bucket), error = the sketch's 90 % bound x sqrt(#values)."""
        key = (qi, z)
        hit = self._fcache.get(key)
        if hit is not None:
            return hit
        b, frac = self._q_buckets[qi]
        share = np.ones(b.shape[0])
        unc = np.zeros(b.shape[0])
        vs, js = self._pvals[qi]
        zone = self.index.zones.get(z)
        if zone is not None and vs.shape[0]:
            n_z = zone["hi"] - zone["lo"]
            ze = self._zest.get(z)
            if ze is None or ze[0] != n_z:
                sk = zone["sketch"]
                ze = (n_z, np.maximum(sk.estimate(self._allv).astype(np.float64), 0.0), float(sk.error_bound(0.9)))
                self._zest[z] = ze
                if len(self._zest) > 4 * (len(self.index.zones) + 1):
                    self._zest = {k: v for k, v in self._zest.items() if k in self.index.zones}
            est = ze[1][self._pv_at[qi]]
            in_b = np.bincount(js, weights=est, minlength=b.shape[0])
            n_v = np.bincount(js, minlength=b.shape[0])
            cnt = zone["counts"][b].astype(np.float64)
            part = n_v > 0
            share[part] = np.clip(in_b[part] / np.maximum(cnt[part], 1.0), 0.0, 1.0)
            unc[part] = np.minimum(ze[2] * np.sqrt(n_v[part]), cnt[part])
        elif vs.shape[0]:
            share = frac.copy()
        if z < math.floor(self.now / self.index.zone_seconds):
            self._fcache[key] = (share, unc)
        return share, unc

    # ------------------------------------------------------------ preference
    def _mean_guess(self, qi, buckets):
        bs = self._bsum[qi]
        g = self._gsum[1] and self._gsum[0] / self._gsum[1] or 1.0
        return np.array([bs[b][0] / bs[b][1] if b in bs and bs[b][1] else g for b in buckets.tolist()])

    def _keys(self, qi, z, buckets, counts, frac) -> np.ndarray:
        b_all = self._q_buckets[qi][0]
        share, _ = self._zone_frac(qi, z)
        frac = share[np.searchsorted(b_all, buckets)]
        est = counts * frac
        if self.func in ("avg", "median"):
            return self.rng.exponential(size=est.shape[0]) / np.maximum(est, 1e-9)
        if self.func == "sum":
            return -(est * self._mean_guess(qi, buckets))
        unc = counts * np.minimum(frac, 1.0 - frac)
        return np.where(unc > 0, -unc, np.inf)  # full buckets need no scan (sorted last)

    def _on_scan(self, qi, z, bucket, positions, scanned=None) -> None:
        self._scanned[qi].setdefault((z, bucket), []).append(positions)
        if scanned is not None and scanned.shape[0]:
            last = self._glast.get((z, bucket), -1)
            new = scanned[scanned > last]
            if new.shape[0]:
                p = self.index.aux[new]
                self._gb[bucket] += (p.shape[0], float(p.sum()), float((p * p).sum()))
                self._glast[(z, bucket)] = int(new.max())
        if positions.shape[0]:
            p = self.index.aux[positions]
            e = self._bsum[qi].setdefault(bucket, [0.0, 0])
            e[0] += float(p.sum()); e[1] += int(p.shape[0])
            self._gsum[0] += float(p.sum()); self._gsum[1] += int(p.shape[0])

    def _dispatch(self, qi: int) -> None:
        if self.func == "count":
            # never pay for full buckets: they are exact in the summaries
            heap = self._pending[qi]
            if heap and heap[0][0] == np.inf:
                heap.clear()
        super()._dispatch(qi)

    # ------------------------------------------------------------ answers
    def answer(self, qi: int, now: float | None = None):
        """(estimate, error) of query ``qi`` over the window ending at ``now``."""
        now = self.now if now is None else float(now)
        idx = self.index
        lo_t = now - self.window
        q = self.queries[qi]
        b, frac = self._q_buckets[qi]
        zl = idx.zone_seconds
        scanned = self._scanned[qi]
        s_sum = 0.0
        s_vals = []
        s_bkt = []
        unscanned_n = np.zeros(b.shape[0])
        count_unc = 0.0
        upto = self._upto[qi]
        for z in idx.zones_between(lo_t, now):
            zs, ze = z * zl, (z + 1) * zl
            tfrac = 1.0 if zs >= lo_t else max(0.0, (ze - lo_t) / zl)
            cnt = idx.zones[z]["counts"][b]
            done = np.array([upto.get((z, bb), 0) for bb in b.tolist()], np.int64) if upto else np.zeros(b.shape[0], np.int64)
            for j in np.flatnonzero(done > 0).tolist():
                for pos in scanned.get((z, int(b[j])), ()):
                    if pos.shape[0]:
                        pos = pos[idx.ts[pos] > lo_t]
                        v = idx.aux[pos]
                        s_sum += float(v.sum())
                        s_vals.append(v)
                        s_bkt.append(np.full(v.shape[0], j))
            rem = (cnt - done).astype(np.float64)
            share, unc = self._zone_frac(qi, z)
            tf = np.full(b.shape[0], tfrac)
            if tfrac < 1.0:
                # a cell's unscanned remainder arrived after its last scan (cells grow
                # in arrival order): it lies in (the operator's clock at that scan, zone
                # end), not spread over the whole zone
                upto_t = self._upto_t[qi]
                t_zone = self._zone_t[qi].get(z, -math.inf)
                for j in np.flatnonzero(rem > 0).tolist():
                    t_last = max(float(upto_t.get((z, int(b[j])), -math.inf)), t_zone)
                    if t_last > zs:
                        tf[j] = min(1.0, max(0.0, (ze - max(lo_t, t_last)) / max(ze - t_last, 1e-12)))
            unscanned_n += rem * share * tf
            count_unc += float((unc * rem / np.maximum(cnt, 1) * tf).sum())
            if tfrac < 1.0:
                count_unc += float((rem * share * np.minimum(tf, 1 - tf)).sum())
        vals = np.concatenate(s_vals) if s_vals else np.zeros(0)
        vb = np.concatenate(s_bkt) if s_bkt else np.zeros(0, np.int64)
        n = vals.shape[0]
        U = float(unscanned_n.sum())
        N = n + U
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
        se2_unscanned = U * s2 + float((unscanned_n ** 2 * np.where(np.isfinite(var_m), var_m, s2)).sum())
        if self.func == "count":
            return float(N), 1.96 * count_unc
        if self.func == "sum":
            if U == 0 and count_unc == 0:
                return est_sum, 0.0
            if n == 0:
                return est_sum, math.inf
            se2 = se2_unscanned + (count_unc * gmean) ** 2
            return est_sum, 1.96 * math.sqrt(se2)
        if self.func == "avg":
            if N <= 0:
                return float("nan"), math.inf
            if n == 0:
                return gmean, math.inf
            avg = est_sum / N
            if U == 0:
                return avg, 0.0
            return avg, 1.96 * math.sqrt(se2_unscanned) / N
        # median
        if n == 0:
            return float("nan"), math.inf
        tot_b = np.bincount(vb, minlength=b.shape[0]).astype(float)
        wts = (tot_b[vb] + unscanned_n[vb]) / np.maximum(tot_b[vb], 1.0)
        o = np.argsort(vals, kind="stable")
        cw = np.cumsum(wts[o]) / wts.sum()
        med = float(vals[o][min(int(np.searchsorted(cw, 0.5)), n - 1)])
        if U == 0:
            return med, 0.0
        d = 1.0 / math.sqrt(n)
        lo_v = float(vals[o][min(int(np.searchsorted(cw, max(0.0, 0.5 - d))), n - 1)])
        hi_v = float(vals[o][min(int(np.searchsorted(cw, min(1.0, 0.5 + d))), n - 1)])
        return med, max(med - lo_v, hi_v - med)

    def answers(self, now: float | None = None):
        """(estimates, errors) arrays over all queries."""
        res = [self.answer(qi, now) for qi in range(len(self.queries))]
        return np.array([r[0] for r in res]), np.array([r[1] for r in res])
