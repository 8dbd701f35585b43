"""Error metrics of approximate answers (paper section 5).

* ``output_ratio``      share of the exact output that was produced (recall);
* ``freshness``         mean ``|ts1 - ts2|`` of produced join pairs;
* ``hist_mse``          paper equation 2 -- with ``k`` equi-width intervals
  over ``[lo, hi]`` of the join attribute (default: the min and max value of
  the exact answer), ``h1i``/``h2i`` the number of exact/produced output
  tuples whose value falls in interval ``i`` and ``N1``/``N2`` the answer
  sizes::

      Hist-MSE = sum_{i=1..k} (h1i/N1 - h2i/N2)^2

  (an empty produced answer counts as ``h2i/N2 = 0``); 0 for a perfectly
  faithful sample, at most 2;
* outliers, two definitions (paper: "a tuple is an outlier if its frequency
  is in the least 5 % percentile of tuple frequencies"):

  - *windowed, tuple-weighted* (``evaluate_join(...)["outlier_precision"]``,
    the primary one): the frequency of an output pair is the number of
    tuples of both streams carrying its value inside the window when its
    later member arrives (``sketchql.data.window_value_counts``); the pair is
    an outlier iff that frequency is <= the ``q`` (5 %) quantile of the same
    frequency over all exact output pairs -- so a uniform sample of the
    output has about 5 % outliers (the base rate);
  - *global, per value* (``outlier_values``, reported as
    ``outlier_precision_global``): among the distinct values of the exact
    answer, with ``f(v)`` their occurrences in the whole input, ``v`` is an
    outlier iff ``f(v) <= quantile_q({f(v)})``;
* ``outlier_precision`` share of produced tuples whose value is an outlier;
* ``mse`` / ``relative_error`` for aggregates.

>>> import numpy as np
>>> hist_mse(np.array([1, 2, 3, 4]), np.array([1, 2, 3, 4]), k=4)
0.0
>>> hist_mse(np.array([1, 1, 4, 4]), np.array([1, 1]), k=2)
0.5
"""
from __future__ import annotations

import numpy as np

from ..errors import SketchQLError


def output_ratio(n_produced: float, n_exact: float) -> float:
    return float(n_produced) / float(n_exact) if n_exact else 1.0


def freshness(ts1: np.ndarray, ts2: np.ndarray) -> float:
    ts1 = np.asarray(ts1, np.float64)
    ts2 = np.asarray(ts2, np.float64)
    return float(np.mean(np.abs(ts1 - ts2))) if ts1.shape[0] else float("nan")


def _hist(values, weights, k, lo, hi):
    return np.histogram(np.asarray(values, np.float64), bins=k, range=(lo, hi), weights=weights)[0].astype(np.float64)


def hist_mse(exact_values, produced_values, k: int = 100, exact_weights=None, produced_weights=None,
             lo: float | None = None, hi: float | None = None) -> float:
    """Paper equation 2 (see module doc).  ``exact_weights`` lets the exact
    answer be given as distinct values with their output counts."""
    if k < 1:
        raise SketchQLError(f"hist_mse: k must be >= 1, got {k!r}")
    ev = np.asarray(exact_values, np.float64)
    if ev.shape[0] == 0:
        raise SketchQLError("hist_mse: the exact answer is empty")
    if exact_weights is not None:
        keep = np.asarray(exact_weights) > 0
        ev_range = ev[keep] if keep.any() else ev
    else:
        ev_range = ev
    lo = float(ev_range.min()) if lo is None else float(lo)
    hi = float(ev_range.max()) if hi is None else float(hi)
    if hi <= lo:
        hi = lo + 1.0
    h1 = _hist(ev, exact_weights, k, lo, hi)
    h2 = _hist(produced_values, produced_weights, k, lo, hi)
    n1 = h1.sum()
    n2 = h2.sum()
    p1 = h1 / n1 if n1 else h1
    p2 = h2 / n2 if n2 else h2
    return float(((p1 - p2) ** 2).sum())


def outlier_values(values_in_answer, input_values, q: float = 0.05) -> np.ndarray:
    """Sorted array of outlier values (module doc): distinct values of the
    exact answer whose input frequency is <= the ``q`` quantile of those
    frequencies."""
    cand = np.unique(np.asarray(values_in_answer))
    if cand.shape[0] == 0:
        return cand
    iv = np.sort(np.asarray(input_values))
    f = np.searchsorted(iv, cand, side="right") - np.searchsorted(iv, cand, side="left")
    thr = np.quantile(f, q, method="lower")
    return cand[f <= thr]


def outlier_precision(produced_values, outliers: np.ndarray) -> float:
    pv = np.asarray(produced_values)
    if pv.shape[0] == 0:
        return float("nan")
    return float(np.isin(pv, outliers).mean())


def mse(estimates, exact) -> float:
    e = np.asarray(estimates, np.float64)
    x = np.asarray(exact, np.float64)
    ok = np.isfinite(x)
    e = np.where(np.isfinite(e), e, 0.0)
    return float(np.mean((e[ok] - x[ok]) ** 2)) if ok.any() else float("nan")


def relative_error(estimates, exact) -> float:
    """Mean of |est - exact| / |exact| over entries with exact != 0."""
    e = np.asarray(estimates, np.float64)
    x = np.asarray(exact, np.float64)
    ok = np.isfinite(x) & (x != 0)
    e = np.where(np.isfinite(e), e, 0.0)
    return float(np.mean(np.abs(e[ok] - x[ok]) / np.abs(x[ok]))) if ok.any() else float("nan")


def evaluate_join(arrivals, window: float, seq_a, seq_b, k: int = 100, q: float = 0.05, a: int = 0, b: int = 1,
                  t_from: float | None = None) -> dict:
    """All join metrics of a produced answer (global arrival numbers of the
    stream-a and stream-b members) against the exact window join of
    ``arrivals`` (brute-force oracle :func:`sketchql.data.window_match_counts`).

    Returns ``n_exact, n_produced, pct_output, freshness, hist_mse,
    outlier_precision, outlier_base_rate, outlier_threshold (windowed
    definition), outlier_precision_global, outlier_base_rate_global,
    invalid, duplicates``.  ``t_from``: score only the pairs whose later
    member arrives at ``ts >= t_from`` (e.g. the steady state after the
    first window), in the exact and in the produced answer alike."""
    from ..data import window_match_counts

    seq_a = np.asarray(seq_a, np.int64)
    seq_b = np.asarray(seq_b, np.int64)
    counts = window_match_counts(arrivals, window, a, b)
    if t_from is not None:
        counts = np.where(arrivals.ts >= t_from, counts, 0)
        later = np.maximum(seq_a, seq_b)
        keep = arrivals.ts[later] >= t_from
        seq_a, seq_b = seq_a[keep], seq_b[keep]
    n_exact = int(counts.sum())
    items = arrivals.item
    # exact answer as (value, count) per distinct value
    ex_vals, inv = np.unique(items, return_inverse=True)
    ex_w = np.bincount(inv, weights=counts, minlength=ex_vals.shape[0])
    in_answer = ex_vals[ex_w > 0]
    sel = (arrivals.stream == a) | (arrivals.stream == b)
    outl = outlier_values(in_answer, items[sel], q)
    pv = items[seq_a] if seq_a.shape[0] else np.zeros(0, items.dtype)
    valid = ((arrivals.stream[seq_a] == a) & (arrivals.stream[seq_b] == b)
             & (items[seq_a] == items[seq_b]) & (np.abs(arrivals.ts[seq_a] - arrivals.ts[seq_b]) < window))
    pairs = seq_a * (len(arrivals) + 1) + seq_b
    dups = int(pairs.shape[0] - np.unique(pairs).shape[0])
    base_g = float((ex_w[np.isin(ex_vals, outl)]).sum() / n_exact) if n_exact else float("nan")
    # windowed, tuple-weighted outliers
    from ..data import window_value_counts

    freq = window_value_counts(arrivals, window, a, b)
    thr = float("nan")
    prec_w = base_w = float("nan")
    if n_exact:
        o = np.argsort(freq, kind="stable")
        cw = np.cumsum(counts[o])
        thr = float(freq[o][min(int(np.searchsorted(cw, q * cw[-1], side="left")), o.shape[0] - 1)])
        base_w = float(counts[freq <= thr].sum() / n_exact)
        if seq_a.shape[0]:
            later = np.maximum(seq_a, seq_b)
            prec_w = float((freq[later] <= thr).mean())
    return {
        "n_exact": n_exact,
        "n_produced": int(seq_a.shape[0]),
        "pct_output": 100.0 * output_ratio(seq_a.shape[0], n_exact),
        "freshness": freshness(arrivals.ts[seq_a], arrivals.ts[seq_b]),
        "hist_mse": hist_mse(ex_vals, pv, k=k, exact_weights=ex_w) if n_exact else float("nan"),
        "outlier_precision": prec_w,
        "outlier_base_rate": base_w,
        "outlier_threshold": thr,
        "outlier_precision_global": outlier_precision(pv, outl),
        "outlier_base_rate_global": base_g,
        "invalid": int((~valid).sum()),
        "duplicates": dups,
    }


def output_upper_bound(match_counts, budget_units: float, probe_cost: float = 1.0,
                       compare_cost: float = 1.0) -> float:
    """The most join output *any* operator can produce with ``budget_units``
    work units in total, under the unit cost model.

    Argument: every output pair costs at least one comparison, and a pair is
    found by probing with one of its members -- both PT-Join and SIMPLE-SHJ
    find it from its *later* member, whose ``match_counts[i] = m_i`` partners
    (:func:`sketchql.data.window_match_counts`) are all it can yield; a probe
    tuple that yields anything costs at least one ``probe``.  Inserts, summary
    lookups and wasted comparisons only lower what an operator reaches, so the
    maximum of ``sum(outputs)`` subject to ``sum(probe + compare * outputs_i)
    <= budget`` -- a fractional knapsack, solved greedily by ``m_i``
    descending (value ``m``, cost ``probe + compare * m``: the heaviest probes
    are the most efficient) -- bounds every such operator.  The budget is
    pooled over the whole run (an operator cannot use budget before it
    arrives, so the true maximum is lower still).

    >>> output_upper_bound(np.array([10, 0, 3, 1]), 100.0)
    14.0
    >>> output_upper_bound(np.array([10, 0, 3, 1]), 13.0)   # 11 units: 10 outputs; 2 left: 1 probe + 1
    11.0
    """
    m = np.sort(np.asarray(match_counts, np.float64))[::-1]
    m = m[m > 0]
    if not m.shape[0] or budget_units <= 0:
        return 0.0
    cost = probe_cost + compare_cost * m
    cum = np.cumsum(cost)
    k = int(np.searchsorted(cum, budget_units, side="right"))
    out = float(m[:k].sum())
    if k < m.shape[0]:
        left = budget_units - (cum[k - 1] if k else 0.0)
        out += max(0.0, left - probe_cost) / compare_cost if left > probe_cost else 0.0
        out = min(out, float(m[: k + 1].sum()))
    return float(out)
