"""Audit: compare an approximate answer with the exact one, and choose which windows to audit.

* :func:`compare_aggregate` -- an aggregate answer (one row per group) against
  the exact relation: per value of the groups found, the relative error
  ``|est − exact| / |exact|`` (mean and max) and whether ``[lo, hi]`` covers
  the exact value; the recall of the groups (a group not found counts there);
* :func:`compare_sets` -- a set-valued answer (multiset of rows) against the
  exact one: recall (share of the exact rows produced), false-positive rate
  (share of produced rows not in the exact answer);
* :class:`AuditSchedule` -- a seeded choice of audit *epochs*: data time is
  cut into epochs of one window; an epoch is audited with probability
  ``share``; the shadow exact plan is started one window before the audited
  epoch (to fill its window) and dropped after it, so auditing costs on
  average ``2 · share`` of an exact plan (always on when the window is
  unbounded or ``share = 1``).

>>> import pandas as pd
>>> a = pd.DataFrame({"g": [1, 2], "x": [10.5, 20.0], "x_lo": [9.0, 19.0], "x_hi": [12.0, 21.0]})
>>> e = pd.DataFrame({"g": [1, 2, 3], "x": [10.0, 22.0, 5.0]})
>>> r = compare_aggregate(a, e, ["g"], {"x": ("x_lo", "x_hi")})
>>> round(r["rel_error"], 4), r["coverage"], round(r["recall"], 3)
(0.0705, 0.5, 0.667)
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np
import pandas as pd

from .metrics import hist_mse, outlier_precision

__all__ = ["compare_aggregate", "compare_sets", "AuditSchedule"]


def compare_aggregate(approx, exact, group_cols: list, intervals: dict, error: Optional[float] = None) -> dict:
    """Measured error of an aggregate answer (DataFrames; ``intervals``: value col -> (lo col, hi col))."""
    vcols = list(intervals)
    if not len(exact):
        return {"rel_error": 0.0 if not len(approx) else None, "max_rel_error": None, "coverage": None,
                "recall": 1.0, "n": 0, "met_share": None}
    if group_cols:
        m = exact.merge(approx, on=group_cols, how="left", suffixes=("", "__a"))
    else:
        m = exact.copy()
        for c in vcols + [x for v in intervals.values() for x in v]:
            m[c + "__a" if c in vcols else c] = approx[c].iloc[0] if len(approx) else np.nan
    rels, covs, founds = [], [], []
    for c in vcols:
        lo, hi = intervals[c]
        ex = m[c].to_numpy(np.float64)
        est = m[c + "__a"].to_numpy(np.float64)
        found = np.isfinite(est) | ~np.isfinite(ex)
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.abs(est - ex) / np.abs(ex)
        rel = np.where((ex == 0) & (est == 0), 0.0, rel)
        rel = np.where(~np.isfinite(ex) & ~np.isfinite(est), 0.0, rel)
        l, h = m[lo].to_numpy(np.float64), m[hi].to_numpy(np.float64)
        cov = (l <= ex + 1e-9 * np.abs(ex)) & (ex - 1e-9 * np.abs(ex) <= h)
        cov = np.where(~np.isfinite(ex) & ~np.isfinite(est), True, cov)
        rels.append(rel[found])
        covs.append(cov[found])
        founds.append(found)
    rel = np.concatenate(rels) if rels else np.zeros(0)
    rel = np.where(np.isfinite(rel), rel, 1.0)
    cov = np.concatenate(covs) if covs else np.zeros(0, bool)
    found = np.logical_and.reduce(founds) if founds else np.ones(len(m), bool)
    return {"rel_error": float(np.mean(rel)) if len(rel) else None,
            "max_rel_error": float(np.max(rel)) if len(rel) else None,
            "coverage": float(np.mean(cov)) if len(cov) else None, "recall": float(np.mean(found)),
            "n": int(len(rel)),
            "met_share": float(np.mean(rel <= error)) if (error is not None and len(rel)) else None}


def _row_keys(exact, approx, cols: list):
    """One integer key per row of ``exact`` and of ``approx`` (their ``cols``), equal iff the rows
    are equal in every column (NaN equal to NaN), and the number of distinct keys: the columns are
    factorized jointly over both frames, one column at a time, and the running key re-factorized
    after each so it stays below the row count (no per-row Python: a string label per row cost
    ~1 us per value and dominated the service's audits and recovery replay)."""
    ne = len(exact)
    key = np.zeros(ne + len(approx), np.int64)
    for c in cols:
        # an empty side is left out of the concat (pandas deprecates empty entries deciding the dtype)
        parts = [x for x in (exact[c], approx[c]) if len(x)] or [exact[c]]
        codes, uniq = pd.factorize(pd.concat(parts, ignore_index=True), use_na_sentinel=False)
        key = pd.factorize(key * max(len(uniq), 1) + codes)[0]
    k = int(key.max()) + 1 if len(key) else 0
    return key[:ne], key[ne:], k


def compare_sets(approx, exact, cols: list, value_col=None, k: int = 100, q: float = 0.05) -> dict:
    """Recall and false-positive rate of a multiset answer against the exact one.

    With ``value_col`` (a promising-tuple join's key column) also the paper's
    Hist-MSE of that column (equation 2, ``k`` buckets) and the outlier
    precision: the share of produced rows whose value is an outlier of the exact
    answer -- a value whose exact output count is at most the ``q`` quantile of
    those counts (for an equi-join the count of v is f_A(v) * f_B(v), so the
    rarest join values).
    """
    if not len(exact):
        return {"recall": 1.0, "fp_rate": 0.0 if not len(approx) else 1.0, "n_exact": 0,
                "n_approx": int(len(approx)), "hist_mse": None, "outlier_precision": None}
    key_e, key_a, k = _row_keys(exact, approx, cols)
    ce = np.bincount(key_e, minlength=k)
    hit = float(np.minimum(ce, np.bincount(key_a, minlength=k)).sum())   # multiset intersection
    na, ne = float(len(approx)), float(len(exact))
    out = {"recall": hit / ne, "fp_rate": (na - hit) / na if na else 0.0, "n_exact": int(ne), "n_approx": int(na),
           "hist_mse": None, "outlier_precision": None}
    if value_col is not None and value_col in exact.columns and len(approx):
        ev = pd.to_numeric(exact[value_col], errors="coerce").to_numpy(np.float64)
        av = pd.to_numeric(approx[value_col], errors="coerce").to_numpy(np.float64)
        ev, av = ev[np.isfinite(ev)], av[np.isfinite(av)]
        if len(ev) and len(av):
            out["hist_mse"] = hist_mse(ev, av, k)
            vals, cnt = np.unique(ev, return_counts=True)
            outliers = vals[cnt <= np.quantile(cnt, q, method="lower")]
            out["outlier_precision"] = outlier_precision(av, outliers)
    return out


class AuditSchedule:
    """Seeded audit epochs (module doc).  ``phase(t)`` -> "off" | "warmup" | "compare"."""

    def __init__(self, share: float, window: float, seed: int = 0):
        self.share = float(share)
        self.window = float(window)
        self.seed = int(seed)
        self._cache: dict = {}

    def audited(self, epoch: int) -> bool:
        if self.share >= 1.0:
            return True
        if self.share <= 0.0:
            return False
        hit = self._cache.get(epoch)
        if hit is None:
            hit = bool(np.random.default_rng([self.seed, int(epoch) + (1 << 40)]).random() < self.share)
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[epoch] = hit
        return hit

    def phase(self, t: float) -> str:
        if self.share <= 0 or not math.isfinite(t):
            return "off"
        if self.share >= 1.0 or not (math.isfinite(self.window) and self.window > 0):
            return "compare"
        e = int(math.floor(t / self.window))
        if self.audited(e):
            return "compare"
        if self.audited(e + 1):
            return "warmup"
        return "off"
