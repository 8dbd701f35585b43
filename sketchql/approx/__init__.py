"""sketchql.approx -- budgets, error metrics and the replay driver.

* :class:`WorkBudget` / :class:`TimeBudget` (``budget.py``): how much work an
  operator may do per arrival (deterministic work units, or wall-clock time
  linked by N_o/p = (lambda - t_ins) / t_hit);
* metrics (``metrics.py``): ``output_ratio``, ``freshness``, ``hist_mse``
  (paper eq. 2, k = 100), ``outlier_values`` / ``outlier_precision``,
  ``mse``, ``relative_error``, ``evaluate_join`` (everything for a join
  answer against the brute-force oracle) and ``output_upper_bound`` (the most
  output any operator can reach on a budget under the unit cost model);
* :func:`replay` (``replay.py``): feeds an arrival sequence to several
  operators with the same per-arrival budget.
"""
from .budget import BENCH_UNITS_PER_SECOND, UNIT_COSTS, TimeBudget, WorkBudget
from .metrics import (
    evaluate_join, freshness, hist_mse, mse, outlier_precision, outlier_values,
    output_ratio, output_upper_bound, relative_error,
)
from .replay import arrival_gaps, replay

__all__ = [
    "WorkBudget", "TimeBudget", "UNIT_COSTS", "BENCH_UNITS_PER_SECOND",
    "output_ratio", "freshness", "hist_mse", "outlier_values", "outlier_precision",
    "mse", "relative_error", "evaluate_join", "output_upper_bound", "replay", "arrival_gaps",
]
