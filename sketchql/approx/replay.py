"""Replay driver: feed one arrival sequence to several operators, each getting
the same budget per arrival.

The budget of arrival ``k`` is what the gap until the next arrival buys
(``budget.allowance(ts[k+1] - ts[k])``; the last arrival gets the mean gap):
"the interarrival time between two consecutive tuples is our processing
budget".  Arrivals are handed over in consecutive batches of ``batch_size``
(all operators see the same batches and the same per-arrival allowances), so
operators can ingest a batch with numpy and then spend the batch's budget.

Operator protocol (duck-typed)::

    op.tick(batch: Arrivals, allowance: np.ndarray)  # allowance[k]: units of arrival k
    op.finish()                                       # optional, after the last batch
    op.stats() -> dict                                # optional
    op.set_wall_clock(True)                           # required for a wall-clock budget
                                                      # (TimeBudget(wall_clock=True)):
                                                      # allowances are then seconds and the
                                                      # operator charges the time it spends

>>> import numpy as np
>>> from sketchql.data import generate_stores, interleave
>>> from sketchql.approx import WorkBudget, replay
>>> class Count:
...     def __init__(self): self.units = 0.0
...     def tick(self, batch, allowance): self.units += float(allowance.sum())
>>> arr = interleave(generate_stores(2, duration=5.0, seed=0))
>>> ops = replay(arr, {"a": Count(), "b": Count()}, WorkBudget(units_per_arrival=2))
>>> ops["a"].units == ops["b"].units == 2 * len(arr)
True
"""
from __future__ import annotations

import numpy as np

from ..errors import SketchQLError


def arrival_gaps(ts: np.ndarray) -> np.ndarray:
    """Gap after each arrival (seconds); the last one gets the mean gap."""
    ts = np.asarray(ts, dtype=np.float64)
    if ts.shape[0] == 0:
        return ts.copy()
    gaps = np.empty_like(ts)
    gaps[:-1] = np.diff(ts)
    gaps[-1] = float(np.mean(gaps[:-1])) if ts.shape[0] > 1 else 0.0
    if (gaps < 0).any():
        raise SketchQLError("replay: arrivals must be in timestamp order")
    return gaps


def batch_bounds(ts: np.ndarray, batch_size: int = 16, tick_seconds: float | None = None) -> np.ndarray:
    """Start offsets of the batches (plus the end): fixed ``batch_size``
    arrivals, or all arrivals of each ``tick_seconds`` slice of event time."""
    n = ts.shape[0]
    if tick_seconds is None:
        if batch_size < 1:
            raise SketchQLError(f"replay: batch_size must be >= 1, got {batch_size!r}")
        return np.r_[np.arange(0, n, batch_size), n]
    if not (tick_seconds > 0):
        raise SketchQLError(f"replay: tick_seconds must be > 0, got {tick_seconds!r}")
    if n == 0:
        return np.zeros(1, np.int64)
    slot = np.floor((ts - ts[0]) / tick_seconds).astype(np.int64)
    starts = np.flatnonzero(np.r_[True, slot[1:] != slot[:-1]])
    return np.r_[starts, n]


def replay(arrivals, operators: dict, budget, batch_size: int = 16, tick_seconds: float | None = None,
           callback=None) -> dict:
    """Replay ``arrivals`` (:class:`sketchql.data.Arrivals`) through every
    operator of ``operators`` (name -> operator) with the same ``budget``
    (:class:`WorkBudget` / :class:`TimeBudget`), in batches of ``batch_size``
    arrivals or of ``tick_seconds`` of event time; ``callback(now)`` (if
    given) runs after every batch, ``now`` = the batch's last timestamp.
    Returns ``operators``."""
    allowance = budget.allowance(arrival_gaps(arrivals.ts))
    if getattr(budget, "wall_clock", False):
        for name, op in operators.items():
            if not hasattr(op, "set_wall_clock"):
                raise SketchQLError(f"replay: operator {name!r} cannot run on a wall-clock budget "
                                    "(no set_wall_clock)")
            op.set_wall_clock(True)
    bounds = batch_bounds(arrivals.ts, batch_size, tick_seconds)
    for start, stop in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        sl = slice(start, stop)
        batch = arrivals.take(np.arange(start, stop))
        a = allowance[sl]
        for op in operators.values():
            op.tick(batch, a)
        if callback is not None:
            callback(float(arrivals.ts[stop - 1]))
    for op in operators.values():
        fin = getattr(op, "finish", None)
        if fin is not None:
            fin()
    return operators
