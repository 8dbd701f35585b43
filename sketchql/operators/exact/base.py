"""The protocol every exact operator follows (see ``sketchql.operators.exact``)."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Optional, Sequence

import numpy as np

from ...errors import LateTupleError, SketchQLError
from ..changes import Batch, Changes

__all__ = ["Operator", "WKS", "WK", "STR", "StepRowLimit", "row_cap", "check_step_rows", "step_row_cap",
           "new_rows"]

# update patterns (golab-ozsu-update-pattern-aware, section 3)
WKS = "weakest"   # results expire in FIFO (generation) order
WK = "weak"       # results expire at predictable times, not FIFO (e.g. join)
STR = "strict"    # some results expire at unpredictable times (negative tuples)


class StepRowLimit(SketchQLError):
    """One step of a plan would produce more rows than its cap (``max_rows_per_step``).

    ``rows``: the count that was refused (counted before the rows were built where the operator
    can count first); ``cap``; ``what``: the operator that counted."""

    def __init__(self, rows: int, cap: int, what: str):
        self.rows, self.cap, self.what = int(rows), int(cap), what
        super().__init__(f"{what}: one step would produce {self.rows:,} rows, over the cap "
                         f"max_rows_per_step = {self.cap:,}")


#: the row cap of the plan step running in this thread (None: no cap); set by :func:`row_cap`
_ROW_CAP: ContextVar[Optional[int]] = ContextVar("sketchql_row_cap", default=None)


@contextmanager
def row_cap(cap: Optional[int]):
    """Run a plan step under a cap on the rows any one operator may produce in it (None: no cap)."""
    tok = _ROW_CAP.set(None if cap is None else int(cap))
    try:
        yield
    finally:
        _ROW_CAP.reset(tok)


def step_row_cap() -> Optional[int]:
    """The cap of the running step (None: no cap): operators skip counting when there is none."""
    return _ROW_CAP.get()


def check_step_rows(n: int, what: str) -> None:
    """Raise :class:`StepRowLimit` if ``n`` new rows exceed the cap of the running step.

    ``n`` counts the rows a step builds with sign +1 only: expiring / retracting rows is never
    refused (a window of 3M rows must be able to empty itself).  Operators that can count their
    output before building it (hash joins: the matches per probe key) call it first, so the
    refused rows are never materialized."""
    cap = _ROW_CAP.get()
    if cap is not None and n > cap:
        raise StepRowLimit(n, cap, what)


def new_rows(out) -> int:
    """The rows of an operator's output that count toward the cap: those with sign > 0 of a
    :class:`Changes`, every row of a :class:`Batch` (or of anything else with a length).

    >>> import numpy as np
    >>> b = Batch({"x": np.arange(3)}, ts=np.arange(3.0))
    >>> new_rows(Changes(b, [-1, -1, 1], [1.0, 1.0, 2.0], [0, 1, 2])), new_rows(b), new_rows(None)
    (1, 3, 0)
    """
    if out is None:
        return 0
    sign = getattr(out, "sign", None)
    if sign is not None:
        return int(np.count_nonzero(np.asarray(sign) > 0))
    return len(out)


class Operator:
    """Base class: a clocked, push-driven operator producing :class:`Changes`.

    ``step(now, *inputs)`` is the one primitive: ``inputs[i]`` holds what
    arrived on port ``i`` with times in ``[clock, now]`` (a :class:`Batch` for
    a window scan, :class:`Changes` for everything downstream, ``None`` for
    nothing).  The operator processes it together with every expiration due
    in ``[clock, now]`` and returns its output changes with ``at <= now``
    sorted by time; afterwards ``clock == now``.  ``push(data, port)`` is
    ``step(max time of data, ...)`` and ``advance(now)`` is ``step(now)``
    with no input (a heartbeat).  Multi-input operators must receive every
    port's input covering ``[clock, now]`` in the same ``step`` (the owner of
    the plan advances all inputs together).
    """

    n_inputs = 1
    update_pattern = WKS

    def __init__(self):
        self.clock = -np.inf
        self._in = 0
        self._out = 0
        self._work = 0

    # -- public API -----------------------------------------------------
    def step(self, now: float, *inputs) -> Changes:
        now = float(now)
        if now < self.clock:
            raise LateTupleError(
                f"{type(self).__name__}: time went backwards: step({now}) after clock {self.clock}")
        if len(inputs) > self.n_inputs:
            raise SketchQLError(f"{type(self).__name__} has {self.n_inputs} input(s), got {len(inputs)}")
        inputs = list(inputs) + [None] * (self.n_inputs - len(inputs))
        for p, x in enumerate(inputs):
            if x is None or not len(x):
                continue
            times = x.ts if isinstance(x, Batch) else x.at
            lo, hi = float(times.min()), float(times.max())
            if lo < self.clock:
                raise LateTupleError(
                    f"{type(self).__name__} port {p}: input at time {lo} is older than the clock {self.clock}")
            if hi > now:
                raise SketchQLError(
                    f"{type(self).__name__} port {p}: input at time {hi} is after step time {now}")
            self._in += len(x)
        out = self._step(now, inputs)
        self.clock = now
        self._out += len(out)
        return out

    def push(self, data, port: int = 0) -> Changes:
        """Feed one input and advance the clock to its latest time."""
        times = data.ts if isinstance(data, Batch) else data.at
        now = max(self.clock, float(times.max())) if len(times) else self.clock
        inputs = [None] * self.n_inputs
        inputs[port] = data
        return self.step(now, *inputs)

    def advance(self, now: float) -> Changes:
        """Heartbeat: move the clock to ``now`` and emit what expires by then."""
        return self.step(now)

    def stats(self) -> dict:
        """State size (rows held), tuples in / out so far, work units (rows touched)."""
        return {"operator": type(self).__name__, "state_rows": self.state_size(),
                "tuples_in": self._in, "tuples_out": self._out, "work": self._work,
                "clock": self.clock}

    def state_size(self) -> int:
        return 0

    # -- to implement -----------------------------------------------------
    def _step(self, now: float, inputs: Sequence) -> Changes:  # pragma: no cover
        raise NotImplementedError
