"""CPU budgets for the promising-tuple operators and their baselines.

Two ways to say how much work an operator may do per input tuple:

* :class:`WorkBudget` -- deterministic *work units*.  One unit is one index
  probe (scanning one cell / hash bucket, one node of a summary pyramid) or
  one tuple comparison; every operator (PT and baselines) is charged with the
  same unit prices (:data:`UNIT_COSTS`).  Either a fixed number of units per
  arrival (``WorkBudget(units_per_arrival=50)``, what tests use) or units per
  second of inter-arrival time (``WorkBudget(units_per_second=2000)``: an
  arrival that follows a gap of ``g`` seconds brings ``2000 * g`` units, what
  the benchmarks use -- the budget then follows the stream rate exactly as in
  the paper, where "the interarrival time between two consecutive tuples is
  our processing budget").
* :class:`TimeBudget` -- wall-clock seconds per inter-arrival, linked to work
  units through the paper's measure (equation 1)::

      N_o/p = (lambda - t_ins) / t_hit

  the number of output tuples one inter-arrival ``lambda`` can buy when
  inserting a tuple costs ``t_ins`` and reaching one output tuple ``t_hit``.
  With a measured time per work unit ``t_unit`` it converts a gap to units as
  ``units = g / t_unit`` (``calibrate`` measures ``t_unit``); it is *not*
  deterministic and only the service uses it.  With ``wall_clock=True`` the
  budget is real time: each arrival brings ``fraction * gap`` *seconds*, and
  :func:`~sketchql.approx.replay` switches every operator to charging the
  time it actually spends (``time.perf_counter``) instead of work units --
  the benchmarks use it to show what happens when the cost is real time.

>>> b = WorkBudget(units_per_second=2000)
>>> b.allowance(np.array([0.01, 0.1])).tolist()
[20.0, 200.0]
>>> WorkBudget(units_per_arrival=5).allowance(np.array([0.3, 7.0])).tolist()
[5.0, 5.0]
>>> round(TimeBudget(t_ins=7e-6, t_hit=10e-6).outputs_per_input(0.1), 1)
9999.3
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..errors import SketchQLError
from ..operators.promising.costs import COSTS

#: Prices of the elementary operations, in work units, shared by every operator
#: (defined next to the operators: ``sketchql.operators.promising.costs``).
UNIT_COSTS = dict(COSTS)

#: Work units per second of inter-arrival time used by every benchmark: one
#: unit ~ 0.5 ms, i.e. a slow, heavily shared processor (the paper's engine runs
#: many standing queries on a 2003 PC).  Fixed once for all operators and rates
#: so that 10-100 ms inter-arrivals span from heavy overload to an almost
#: sufficient budget for a one-minute window join of two 6.7 %-selectivity
#: streams; never tuned per operator.
BENCH_UNITS_PER_SECOND = 2000.0


@dataclass(frozen=True)
class WorkBudget:
    """Deterministic work-unit budget (see module doc).  Exactly one of
    ``units_per_arrival`` / ``units_per_second`` must be given; ``math.inf``
    units per arrival means unlimited."""

    units_per_arrival: float | None = None
    units_per_second: float | None = None

    def __post_init__(self):
        given = [x is not None for x in (self.units_per_arrival, self.units_per_second)]
        if sum(given) != 1:
            raise SketchQLError("WorkBudget: give exactly one of units_per_arrival / units_per_second")
        v = self.units_per_arrival if self.units_per_arrival is not None else self.units_per_second
        if not (v >= 0):
            raise SketchQLError(f"WorkBudget: budget must be >= 0, got {v!r}")

    @classmethod
    def unlimited(cls) -> "WorkBudget":
        return cls(units_per_arrival=math.inf)

    @property
    def is_unlimited(self) -> bool:
        return self.units_per_arrival is not None and math.isinf(self.units_per_arrival)

    def allowance(self, gaps: np.ndarray) -> np.ndarray:
        """Units brought by each arrival, given the gap (seconds) before it."""
        gaps = np.asarray(gaps, dtype=np.float64)
        if self.units_per_arrival is not None:
            return np.full(gaps.shape, float(self.units_per_arrival))
        return np.maximum(gaps, 0.0) * float(self.units_per_second)

    def share(self, fraction: float) -> "WorkBudget":
        """The same budget scaled by ``fraction`` (e.g. budget / num_queries)."""
        if self.units_per_arrival is not None:
            return WorkBudget(units_per_arrival=self.units_per_arrival * fraction)
        return WorkBudget(units_per_second=self.units_per_second * fraction)


@dataclass
class TimeBudget:
    """Wall-clock budget: ``fraction`` of every inter-arrival gap may be spent.

    ``t_ins``/``t_hit`` (seconds) are the measured insertion and hit times of
    equation 1; ``t_unit`` the measured seconds per work unit.
    """

    t_ins: float = 7e-6
    t_hit: float = 10e-6
    t_unit: float = 5e-4
    fraction: float = 1.0
    wall_clock: bool = False

    def __post_init__(self):
        if not (self.fraction > 0 and math.isfinite(self.fraction)):
            raise SketchQLError(f"TimeBudget: fraction must be a finite number > 0, got {self.fraction!r}")

    def outputs_per_input(self, mean_interarrival: float) -> float:
        """N_o/p = (lambda - t_ins) / t_hit (paper equation 1), floored at 0."""
        return max(0.0, (mean_interarrival * self.fraction - self.t_ins) / self.t_hit)

    def to_work_budget(self) -> WorkBudget:
        return WorkBudget(units_per_second=self.fraction / self.t_unit)

    def allowance(self, gaps: np.ndarray) -> np.ndarray:
        """Work units per arrival, or (``wall_clock``) seconds of real time."""
        if self.wall_clock:
            return np.maximum(np.asarray(gaps, dtype=np.float64), 0.0) * float(self.fraction)
        return self.to_work_budget().allowance(gaps)

    @classmethod
    def calibrate(cls, operator_factory, arrivals, repeats: int = 1) -> "TimeBudget":
        """Measure t_unit (seconds per work unit), t_ins and t_hit by replaying
        ``arrivals`` through ``operator_factory()`` with an unlimited budget.
        The operator must expose ``stats()`` with ``work``, ``insert_work`` and
        ``outputs``.  Timing depends on the machine load."""
        from .replay import replay

        best = None
        for _ in range(max(1, repeats)):
            op = operator_factory()
            t0 = time.perf_counter()
            replay(arrivals, {"op": op}, WorkBudget.unlimited())
            dt = time.perf_counter() - t0
            best = dt if best is None else min(best, dt)
        st = op.stats()
        work = max(1.0, float(st["work"]))
        t_unit = best / work
        n = max(1, len(arrivals))
        t_ins = t_unit * float(st.get("insert_work", n)) / n
        t_hit = t_unit * (work - float(st.get("insert_work", n))) / max(1.0, float(st["outputs"]))
        return cls(t_ins=t_ins, t_hit=t_hit, t_unit=t_unit)
