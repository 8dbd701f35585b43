"""Approximate grouped aggregates over sampled / shed input, with an interval on every value.

:class:`ApproxAggregate` has the exact :class:`~sketchql.operators.exact.Aggregate`'s
protocol and change semantics (it runs one inside, over derived columns) but
its input rows carry the Horvitz–Thompson weight ``__w = 1 / π`` of the
sampling that kept them (:mod:`sketchql.approx.sampling`; for a join of
sampled inputs the product of the members' weights).  For every aggregate
``a`` it outputs the scaled estimate under the exact aggregate's name plus
``a_lo`` / ``a_hi``, the interval at ``conf`` (:mod:`sketchql.approx.estimators`):

======================  =====================================================
COUNT(*) / COUNT(x)     ``Σ w``; score interval from ``n`` and ``Σ w``
SUM(x)                  ``Σ w x`` ± z √(Σ w (w − 1) x²)
AVG(x)                  ``Σ w x / Σ w`` ± t √(linearized variance)
MEDIAN / QUANTILE(x,q)  sample quantile; order-statistic interval (fpc 1 − π)
COUNT(DISTINCT x)       ``d / p`` (universe sampling on x at rate ``p``); score
======================  =====================================================

All sums are subtractable, so windows expire exactly as in the exact plan.
The interval columns of a quantile row are remembered by row id, so a
retraction repeats the values of its insertion.

>>> import numpy as np
>>> from sketchql.operators.changes import Batch, Changes
>>> from sketchql.operators.exact import AggSpec
>>> op = ApproxAggregate([], [AggSpec("count", None, "c")], conf=0.95)
>>> b = Batch({"__w": np.full(50, 10.0)}, ts=np.arange(50.0))
>>> out = op.step(49.0, Changes.inserts(b, b.ts, np.arange(50)))
>>> row = out.take(out.sign > 0)
>>> float(row.columns["c"][-1]), bool(row.columns["c_lo"][-1] < 500 < row.columns["c_hi"][-1])
(500.0, True)
"""
from __future__ import annotations

from typing import Callable, Optional, Sequence

import numpy as np

from ..operators.changes import Batch, Changes
from ..operators.exact import AggSpec, Aggregate
from ..operators.exact.base import Operator, STR
from . import estimators as E
from ..summaries.hashing import hash64
from .distinct_hashes import HashedDistinct
from .sampling import W_COLUMN

__all__ = ["ApproxAggregate", "APPROXIMABLE"]

#: aggregates that have a sampled estimator (MIN / MAX do not: their plans stay exact)
APPROXIMABLE = {"count", "sum", "avg", "median", "quantile", "count_distinct"}


def _tags(func: str, has_col: bool) -> list:
    if func == "count":
        return ["n", "s0", "v0"]
    if func == "sum":
        return ["n", "s0", "s1", "s2", "v2"]
    if func == "avg":
        return ["n", "s0", "s1", "s2", "v0", "v1", "v2"]
    if func in ("median", "quantile"):
        return ["n", "s0", "q"]
    if func == "count_distinct":
        return ["d"]
    raise ValueError(func)


class ApproxAggregate(Operator):
    """Scaled aggregates with intervals (module doc).

    ``distinct_rate``: callable(now) -> the universe-sampling threshold τ (the lowest
    rate used over the window): COUNT(DISTINCT) counts the kept values whose hash is
    below τ (:class:`HashedDistinct`, hashed with ``hash_seed``) and divides by
    τ · ``distinct_keep()`` (the stream's keep probability, independent of this hash); ``conf``: confidence of the ``_lo`` / ``_hi``
    columns (settable attribute).
    """

    update_pattern = STR

    def __init__(self, group_by: Sequence[str], aggs: Sequence[AggSpec], conf: float = 0.95,
                 distinct_rate: Optional[Callable[[float], float]] = None, hash_seed: int = 0,
                 distinct_keep: Optional[Callable[[], float]] = None):
        super().__init__()
        self.group_by = [group_by] if isinstance(group_by, str) else list(group_by)
        self.aggs = list(aggs)
        for a in self.aggs:
            if a.func not in APPROXIMABLE:
                raise ValueError(f"{a.func.upper()} has no sampled estimator")
        self.conf = float(conf)
        self.distinct_rate = distinct_rate or (lambda now: 1.0)
        self.hash_seed = int(hash_seed)
        self.distinct_keep = distinct_keep or (lambda: 1.0)
        self._hd = {k: HashedDistinct() for k, a in enumerate(self.aggs) if a.func == "count_distinct"}
        self._now = -np.inf
        specs = []
        self._cols = {}          # derived input column -> (agg index, tag)
        for k, a in enumerate(self.aggs):
            for t in _tags(a.func, a.column is not None):
                nm = f"__i{k}_{t}"
                if t == "n":
                    specs.append(AggSpec("count", f"__d{k}_w", nm))
                elif t == "q":
                    specs.append(AggSpec("quantile", a.column, nm, 0.5 if a.func == "median" else a.q))
                elif t == "d":
                    specs.append(AggSpec("count_distinct", a.column, nm))
                else:
                    specs.append(AggSpec("sum", f"__d{k}_{t}", nm))
        self.inner = Aggregate(self.group_by, specs)
        self._qk = {k: next(i for i, s in enumerate(specs) if s.name == f"__i{k}_q")
                    for k, a in enumerate(self.aggs) if a.func in ("median", "quantile")}
        self._qbounds: dict = {k: {} for k in self._qk}     # rid -> (lo, hi)
        self._emitted: dict = {}                            # rid -> values of a live +1 row
        self.names = self.group_by + [x for a in self.aggs for x in (a.out_name, a.out_name + "_lo",
                                                                     a.out_name + "_hi")]

    def state_size(self) -> int:
        return self.inner.state_size()

    def stats(self) -> dict:
        d = super().stats()
        d["groups"] = self.inner.stats()["groups"]
        d["approximate"] = True
        d["confidence"] = self.conf
        return d

    def group_stats(self):
        """Per live group: (estimated window rows N̂_g, error factor k_g) for the precision model.

        k = 1 for COUNT / COUNT(DISTINCT) (N̂ = distinct estimate), the coefficient of variation
        cv for AVG and quantiles, √(1 + cv²) for SUM; the worst over the query's aggregates."""
        inn = self.inner
        live = np.flatnonzero(inn._exists) if inn._gkeys is not None else np.zeros(0, np.int64)
        if not len(live):
            return np.zeros(0), np.zeros(0)
        names = [a.out_name for a in inn.aggs]
        idx = {nm: i for i, nm in enumerate(names)}

        def s(k, t):
            i = idx.get(f"__i{k}_{t}")
            return None if i is None else inn._s[i][live].astype(np.float64)
        N = None
        kk = np.zeros(len(live))
        for k, a in enumerate(self.aggs):
            if a.func == "count_distinct":
                p = max(float(self.distinct_rate(self._now)), 1e-12)
                d = self._distinct_counts(k, self._gcodes_of(live), p).astype(np.float64)
                N = d / (p * max(float(self.distinct_keep()), 1e-12))
                kk = np.maximum(kk, 1.0)
                continue
            s0 = s(k, "s0")
            if N is None and s0 is not None:
                N = s0
            s1, s2 = s(k, "s1"), s(k, "s2")
            if a.func == "count" or s1 is None or s2 is None:
                kk = np.maximum(kk, 1.0)
                continue
            with np.errstate(divide="ignore", invalid="ignore"):
                m = s1 / s0
                cv = np.sqrt(np.maximum(s2 / s0 - m * m, 0.0)) / np.abs(m)
            cv = np.where(np.isfinite(cv), cv, 1.0)
            kk = np.maximum(kk, np.sqrt(1 + cv * cv) if a.func == "sum" else cv)
        if N is None:
            N = inn._cnt[live].astype(np.float64)
        return np.asarray(N, np.float64), kk

    # -- COUNT(DISTINCT) under universe sampling ----------------------------------
    def _gcodes(self, rows: Batch) -> np.ndarray:
        """int64 identity of each row's group (hash of the group columns; 0 without GROUP BY)."""
        if not self.group_by:
            return np.zeros(len(rows), np.int64)
        import pandas as pd
        from ..operators.changes import mix_rids
        hs = [pd.util.hash_array(np.asarray(rows.columns[c], dtype=object) if rows.columns[c].dtype.kind not in "iufb"
                                 else rows.columns[c]).view(np.int64) for c in self.group_by]
        return mix_rids(*hs)

    def _gcodes_of(self, live: np.ndarray) -> np.ndarray:
        inn = self.inner
        if not self.group_by:
            return np.zeros(len(live), np.int64)
        return self._gcodes(Batch({c: inn._gkeys[c][live] for c in self.group_by}, ts=np.zeros(len(live))))

    def _distinct_counts(self, k: int, gcodes: np.ndarray, p: float) -> np.ndarray:
        return self._hd[k].count_below(gcodes, min(p, 1.0) * 2.0 ** 64)

    # -- derived columns --------------------------------------------------
    def _derive(self, rows: Batch) -> Batch:
        cols = dict(rows.columns)
        n = len(rows)
        w = np.asarray(cols.get(W_COLUMN, np.ones(n)), np.float64)
        ww = w * (w - 1.0)
        for k, a in enumerate(self.aggs):
            if a.func == "count_distinct":
                continue
            if a.column is None:
                m = np.ones(n, bool)
                x = np.zeros(n)
            else:
                x = np.asarray(cols[a.column], np.float64)
                m = ~np.isnan(x)
            nan = np.full(n, np.nan)
            cols[f"__d{k}_w"] = np.where(m, w, nan)
            cols[f"__d{k}_s0"] = np.where(m, w, nan)
            cols[f"__d{k}_v0"] = np.where(m, ww, nan)
            if a.column is not None:
                cols[f"__d{k}_s1"] = np.where(m, w * x, nan)
                cols[f"__d{k}_s2"] = np.where(m, w * x * x, nan)
                cols[f"__d{k}_v1"] = np.where(m, ww * x, nan)
                cols[f"__d{k}_v2"] = np.where(m, ww * x * x, nan)
        return Batch(cols, ts=rows.ts)

    # -- the step -----------------------------------------------------------
    def _step(self, now, inputs):
        ch = inputs[0]
        self._now = float(now)
        if ch is not None and len(ch):
            ch = ch.with_rows(self._derive(ch.rows))
            self._work += len(ch)
            for k, hd in self._hd.items():
                x = ch.columns[self.aggs[k].column]
                ok = ~_isnull(x)
                if ok.any():
                    hd.update(self._gcodes(ch.rows.take(ok)), hash64(np.asarray(x)[ok], self.hash_seed),
                              ch.sign[ok].astype(np.int64))
        out = self.inner.step(now, ch)
        if not len(out):
            return Changes.empty(self.names)
        return out.with_rows(self._transform(out))

    def _transform(self, out: Changes) -> Batch:
        c = out.columns
        res = {g: c[g] for g in self.group_by}
        conf = self.conf
        for k, a in enumerate(self.aggs):
            col = lambda t: np.asarray(c[f"__i{k}_{t}"], np.float64)  # noqa: E731
            if a.func == "count":
                n = col("n")
                est, lo, hi = E.count_interval(n, np.nan_to_num(col("s0")), conf, np.nan_to_num(col("v0")))
            elif a.func == "sum":
                est, lo, hi = E.sum_interval(np.nan_to_num(col("s1")), np.nan_to_num(col("v2")), conf)
                if self.group_by:
                    empty = col("n") == 0
                    est, lo, hi = (np.where(empty, np.nan, x) for x in (est, lo, hi))
            elif a.func == "avg":
                est, lo, hi = E.avg_interval(col("n"), col("s0"), col("s1"), col("v0"), col("v1"), col("v2"), conf)
            elif a.func == "count_distinct":
                p = float(self.distinct_rate(self._now))
                d = self._distinct_counts(k, self._gcodes(out.rows), p).astype(np.float64)
                est, lo, hi = E.distinct_interval(d, p * float(self.distinct_keep()), conf)
            else:
                est = col("q")
                lo, hi = self._quantile_bounds(k, out, est, col("n"), col("s0"))
            nm = a.out_name
            res[nm] = est
            res[nm + "_lo"] = lo
            res[nm + "_hi"] = hi
        self._repeat_retractions(out, res)
        return Batch(res, ts=out.ts)

    def _repeat_retractions(self, out: Changes, res: dict):
        """A −1 row repeats the values its +1 row was emitted with (the scale of COUNT(DISTINCT)
        and the quantile bounds depend on state that may have changed since)."""
        cols = [c for c in res if c not in self.group_by]
        if not len(out):
            return
        sign = out.sign
        rids = out.rid.tolist()
        mat = np.column_stack([np.asarray(res[c], np.float64) for c in cols])
        cache = self._emitted
        for i in np.flatnonzero(sign < 0).tolist():
            v = cache.pop(rids[i], None)
            if v is not None:
                mat[i] = v
        for i in np.flatnonzero(sign > 0).tolist():
            cache[rids[i]] = mat[i].copy()
        for j, c in enumerate(cols):
            res[c] = mat[:, j]

    def _quantile_bounds(self, k, out: Changes, est, n, s0):
        """Order-statistic bounds from the groups' current samples (the inner operator's
        :class:`~sketchql.operators.exact.holistic.SortedPairs`: (group, value, copies) sorted
        by group then value); a retraction repeats the bounds of its insertion (by rid)."""
        lo, hi = est.copy(), est.copy()
        cache = self._qbounds[k]
        inner = self.inner
        sp = inner._hol[self._qk[k]]
        a = self.aggs[k]
        q = 0.5 if a.func == "median" else float(a.q)
        sign, rids = out.sign, out.rid
        minus = np.flatnonzero(sign < 0)
        for i in minus.tolist():
            b = cache.pop(int(rids[i]), None)
            if b is not None:
                lo[i], hi[i] = b
        plus = np.flatnonzero(sign > 0)
        if not len(plus):
            return lo, hi
        # group of each + row: the group whose current rid it is (else: transient row, point interval)
        live = np.flatnonzero(inner._exists)
        order = np.argsort(inner._rid[live], kind="stable")
        rsorted = inner._rid[live][order]
        j = np.searchsorted(rsorted, rids[plus])
        jj = np.minimum(j, max(len(rsorted) - 1, 0))
        known = (len(rsorted) > 0) & (rsorted[jj] == rids[plus]) if len(rsorted) else np.zeros(len(plus), bool)
        g = np.where(known, live[order][jj] if len(live) else 0, -1)
        pg, pf, pc = sp.pg, sp.pf, sp.pc
        C = np.cumsum(pc)
        seg_lo = np.searchsorted(pg, g, side="left")
        seg_hi = np.searchsorted(pg, g, side="right")
        base = np.where(seg_lo > 0, C[np.maximum(seg_lo - 1, 0)] if len(C) else 0, 0)
        tot = np.where(seg_hi > seg_lo, (C[np.maximum(seg_hi - 1, 0)] if len(C) else 0) - base, 0)
        ok = known & (tot > 0) & np.isfinite(est[plus])
        with np.errstate(divide="ignore", invalid="ignore"):
            p = np.where(s0[plus] > 0, n[plus] / s0[plus], 1.0)
        rl, rh = E.quantile_ranks(tot, q, p, self.conf)
        pos_l = np.searchsorted(C, base + rl, side="right")
        pos_h = np.searchsorted(C, base + rh, side="right")
        vl = np.where(ok, pf[np.minimum(pos_l, max(len(pf) - 1, 0))] if len(pf) else np.nan, est[plus])
        vh = np.where(ok, pf[np.minimum(pos_h, max(len(pf) - 1, 0))] if len(pf) else np.nan, est[plus])
        vl = np.where(p >= 1.0, est[plus], np.minimum(vl, est[plus]))
        vh = np.where(p >= 1.0, est[plus], np.maximum(vh, est[plus]))
        lo[plus], hi[plus] = vl, vh
        for r, a_, b_ in zip(rids[plus].tolist(), vl.tolist(), vh.tolist()):
            cache[r] = (a_, b_)
        return lo, hi


def _isnull(x) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind == "f":
        return np.isnan(x)
    if x.dtype.kind == "O":
        import pandas as pd
        return np.asarray(pd.isna(x), bool)
    return np.zeros(len(x), bool)
