"""Window reduction (STREAM §5.1.1): shrink a query's RANGE windows to save memory and CPU.

The query knob ``window_scale`` = s ∈ (0, 1] runs every ``RANGE w`` window scan
of the query as ``RANGE s·w`` (UNBOUNDED and NOW windows are left alone; ROWS
and PARTITION windows are refused: their size is a count, not a time).
Memory and CPU of the scans and of everything above them scale like ``s``.

**Where it is refused** (the paper's two "bad" cases, detected statically):
a window under a ``DISTINCT`` (shrinking it *increases* the output rate: rows
leave and re-enter the distinct set) and a window in the right-hand side of a
negation (``EXCEPT``, ``NOT IN``, ``NOT EXISTS``: fewer right rows remove
fewer left rows, so the answer grows).  :func:`reduction_blockers` names them;
setting the knob below 1 on such a query raises :class:`SketchQLError` saying
which node and why.

**Precision.**  With a stationary (Poisson) arrival process, each row of the
full window ``(τ − w, τ]`` lies in the reduced window ``(τ − s·w, τ]``
independently with probability ``s`` (given the count, arrival times are
i.i.d. uniform over the window), so the reduced window is a Bernoulli sample
of the full one with inclusion probability ``π = s``:

* aggregate plans with an error contract scale each row by ``1 / s``
  (the sampler's ``window_scale`` enters ``__w``): COUNT and SUM stay
  unbiased for the full window, AVG and quantiles are unchanged, and the
  intervals of :mod:`sketchql.approx.estimators` use the same Bernoulli
  variance (``Σ w (w − 1) x²``).  ``COUNT(DISTINCT)`` does not scale with the
  window and is refused; exact aggregate plans (no contract) are refused too
  (their COUNT / SUM would silently drop by ``s``);
* set-valued plans (select / project / join / union) return a subset of the
  exact answer; the expected recall is ``∏ s`` over the reduced sources of a
  join (a result row needs each member in its reduced window).

During the ``s·w`` seconds after a change the windows mix rows of both
scales (rows that arrived before the change keep their weight); the audit
measures that transient like any other error.

>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
>>> q = eng.register("SELECT DISTINCT k FROM S [RANGE 60]")
>>> reduction_blockers(q.plan)
{0: 'under DISTINCT (n0): shrinking its window increases the output'}
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..errors import SketchQLError

__all__ = ["reduction_blockers", "range_scans", "apply_window_scale", "expected_recall", "set_scan_window"]


def range_scans(plan) -> dict:
    """source index -> scan node, for the scans of ``plan`` with a RANGE window."""
    return {n.source: n for n in plan.nodes if n.kind == "scan" and n.params["window"].kind == "range"}


def reduction_blockers(plan) -> dict:
    """source index -> why shrinking that source's window could increase the output.

    A scan is blocked when it lies under a ``distinct`` node or in the right
    child (the subtracted side) of an ``EXCEPT`` set operation or an anti
    semijoin (``NOT IN`` / ``NOT EXISTS``).  ROWS / PARTITION windows are
    reported too (count-based: no time scale)."""
    order = {id(n): i for i, n in enumerate(plan.nodes)}
    out: dict = {}

    def walk(node, why: Optional[str]):
        if node.kind == "scan":
            w = node.params["window"]
            if why is not None and w.kind in ("range", "rows", "partition"):
                out.setdefault(node.source, why)
            elif w.kind in ("rows", "partition"):
                out.setdefault(node.source, f"{w.kind.upper()} window (n{order.get(id(node), '?')}): "
                                            "window_scale applies to RANGE windows only")
            return
        tag = f"n{order.get(id(node), '?')}"
        for j, c in enumerate(node.children):
            w = why
            if w is None and node.kind == "distinct":
                w = f"under DISTINCT ({tag}): shrinking its window increases the output"
            elif w is None and node.kind == "setop" and node.params.get("op") == "except" and j == 1:
                w = f"right side of EXCEPT ({tag}): fewer subtracted rows increase the output"
            elif w is None and node.kind == "semijoin" and node.params.get("anti") and j == 1:
                w = f"right side of a negation ({tag}, NOT IN / NOT EXISTS): fewer rows there increase the output"
            walk(c, w)

    walk(plan.root, None)
    return out


def expected_recall(plan, scale: float) -> float:
    """Expected share of the exact set-valued answer kept at ``window_scale`` = ``scale``
    (stationary arrivals): ``scale ** (number of RANGE-windowed sources)``."""
    return float(scale) ** len(range_scans(plan))


def set_scan_window(op, w: float, clock: float) -> None:
    """Give a running window scan (private :class:`~sketchql.operators.exact.WindowScan`
    or shared-store consumer) the RANGE size ``w`` from now on.

    Rows already in the window get the end ``max(ts + w, clock)`` (a row that
    would have left before ``clock`` leaves at the next step, never in the past);
    rows that already left do not come back when the window grows."""
    from ..operators.exact.window import WindowScan, WindowSpec
    w = float(w)
    if isinstance(op, WindowScan):
        old = op.spec
        op.spec = WindowSpec.range(w, old.slide)
        if op._cols is not None and len(op._ts):
            _, end = op._lifetimes(op._ts)
            clk = op.clock if np.isfinite(op.clock) else -np.inf
            op._end = np.maximum(end, clk)
        return
    if hasattr(op, "window") and hasattr(op, "store"):         # shared WindowStore consumer
        op.window = w
        op.clock_floor = float(clock)
        return
    raise SketchQLError(f"window_scale: cannot resize a {type(op).__name__} window scan")


def apply_window_scale(plan, scale: float, base: dict, clock: float) -> dict:
    """Run each RANGE scan of ``plan`` (base sizes ``base``: source -> w) at ``scale · w``;
    returns source -> the new size.  Raises :class:`SketchQLError` when a blocker applies."""
    s = float(scale)
    if not (0.0 < s <= 1.0) or not math.isfinite(s):
        raise SketchQLError(f"window_scale must be in (0, 1], got {scale!r}")
    if s < 1.0:
        bl = reduction_blockers(plan)
        if bl:
            why = "; ".join(f"source {i}: {r}" for i, r in sorted(bl.items()))
            raise SketchQLError(f"window reduction refused: {why}")
        if not base:
            raise SketchQLError("window reduction: the query has no RANGE window to shrink")
    scans = range_scans(plan)
    out = {}
    for i, w in base.items():
        node = scans.get(i)
        if node is None or node.op is None:
            continue
        set_scan_window(node.op, s * w, clock)
        out[i] = s * w
    return out
