"""A query plan as scheduler tasks: one task per plan node, queues between them.

Inline execution (no scheduler) steps a whole plan at once: every operator is
called with the time ``now`` of the step and its children's outputs.  Under a
scheduler (:mod:`sketchql.engine.scheduler`) each plan node is a
:class:`NodeTask` with one input queue per child; a queue entry is one step
``(now, changes)`` of the child (a scan's entry: the step's input batch).  A
task is *ready* when every input queue holds an entry; a turn processes whole
steps until the quantum of input tuples is used up, and puts each output step
into its parent's queue (the root's into the query's sink).  Every operator
therefore sees exactly the calls it sees inline, in the same order: results
are identical, only *when* they appear depends on the scheduler.

Errors too: an exception raised by an operator's step (or by the delivery of the
root's output) in a turn fails that query as it fails inline (:meth:`PlanRunner.fail`:
its older queued steps completed first, then state 'failed', the same results, clock
and message as inline, its queues dropped); the turn returns, the scheduler goes on.

>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.execute("CREATE STREAM S (v DOUBLE) TIMESTAMP ts")
>>> q = eng.register("SELECT v FROM S [RANGE 5] WHERE v > 1")
>>> eng.set_control("scheduler", "chain"); eng.set_control("work_per_push", 0)
>>> eng.push("S", {"ts": [1.0, 2.0], "v": [1.0, 3.0]})
>>> len(q.changes()), q.stats()["pending_tuples"]    # the scan has not run: v = 3 waits
(0, 1)
>>> _ = eng.run(); q.snapshot()["v"].tolist(), q.stats()["pending_tuples"], eng.scheduler.queued()
([3.0], 0, 0.0)
"""
from __future__ import annotations

import math
import traceback
from collections import deque

import numpy as np

from ..errors import SketchQLError
from ..operators.exact.base import StepRowLimit, row_cap

__all__ = ["NodeTask", "PlanRunner", "fail_query"]


class _PlanError(SketchQLError):
    """An unexpected error inside a query's plan step, in the form :meth:`Query._fail` records."""
    rows = cap = None


def fail_query(q, exc: Exception, before: float, now: float = None) -> None:
    """Fail query ``q`` for ``exc``, raised by its step at ``now`` (default: its clock, the inline
    case); ``before`` = the last instant whose results it recorded (inline: its clock before the step).

    State 'failed' (:attr:`Query.failed` names the error; ``fail_traceback`` holds the traceback), the
    results up to ``before`` stay readable, its clock goes back to ``before`` (its RSTREAM instants after
    it are dropped), it is no longer fed and its queues are dropped (:meth:`Query._fail`)."""
    now = q.clock if now is None else now
    what = f"{type(exc).__name__} in its plan: {exc}"
    instants = list(q._instants)
    q._fail(now, _PlanError(what), before)
    q._instants = [t for t in instants if t <= q.clock]    # (an instant `before` == `now` stays: it was recorded)
    kept = f"results up to t={before:g} stay readable" if before > -math.inf else "it had no results yet"
    q.failed = (f"query {q.id} failed at t={now:g}: {what}; {kept}; "
                f"the other queries went on (register it again to continue)")
    q.fail_traceback = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def _rows(x) -> int:
    return 0 if x is None else len(x)


def _nbytes(x) -> int:
    if x is None:
        return 0
    cols = getattr(x, "columns", None)
    if cols is None:
        return 0
    n = sum(int(np.asarray(v).nbytes) for v in cols.values())
    for a in ("ts", "at", "rid", "sign"):
        v = getattr(x, a, None)
        if v is None and hasattr(x, "rows"):
            v = getattr(x.rows, a, None)
        if v is not None:
            n += int(np.asarray(v).nbytes)
    return n


class NodeTask:
    """One plan node under the scheduler (module doc)."""

    def __init__(self, runner: "PlanRunner", node, parent: "NodeTask" = None, slot: int = 0, name: str = ""):
        self.runner, self.node, self.parent, self.slot, self.name = runner, node, parent, slot, name
        self.inputs = [deque() for _ in range(max(1, len(node.children)))]
        self.consumed = 0
        self.produced = 0
        self.steps = 0
        # EWMA of rows out / rows in; the root's output leaves the queues (the query's result): 0
        self.selectivity = 0.0 if parent is None else 1.0
        self.cost_per_tuple = 1.0        # one unit per input tuple (steps without input: one unit)

    def ready(self) -> bool:
        return all(self.inputs)

    def queued(self) -> float:
        return float(sum(_rows(x) for q in self.inputs for _, x in q))

    def queued_bytes(self) -> int:
        return int(sum(_nbytes(x) for q in self.inputs for _, x in q))

    def head_stamp(self) -> float:
        return min(q[0][0] for q in self.inputs) if self.ready() else np.inf

    def run(self, quantum: float, before: float = np.inf):
        """Process whole steps (oldest first) until ``quantum`` input tuples are used or no entry
        older than ``before`` is ready; returns ``(consumed, produced, cost)``.

        An error raised by the operator's step (or, at the root, by the delivery of its output)
        is charged to this plan's query (:meth:`PlanRunner.fail`): the turn ends, it does not raise."""
        used = produced = 0
        cost = 0.0
        q = self.runner.query
        while (self.ready() and used < quantum and q.failed is None
               and (before == np.inf or self.head_stamp() < before)):
            entries = [x.popleft() for x in self.inputs]
            now = entries[0][0]
            ins = [x if (x is not None and len(x)) else None for _, x in entries]
            try:
                with row_cap(q.row_cap()):
                    out = self.node.op.step(now, *ins)
            except Exception as e:             # noqa: BLE001 -- this query fails, the others go on
                cost += max(sum(_rows(x) for x in ins), 1) + self.runner.fail(now, e)
                break
            k = sum(_rows(x) for x in ins)
            o = _rows(out)
            used += k
            produced += o
            cost += max(k, 1)
            self.steps += 1
            if k and self.parent is not None:
                self.selectivity = 0.8 * self.selectivity + 0.2 * (o / k) if self.consumed else o / k
            self.consumed += k
            self.produced += o
            if self.parent is not None:
                self.parent.inputs[self.slot].append((now, out))
                continue
            try:
                self.runner.sink(now, out)
            except Exception as e:             # noqa: BLE001
                cost += self.runner.fail(now, e)
                break
        return used, produced, cost

    def stats(self) -> dict:
        return {"queued": self.queued(), "queued_bytes": self.queued_bytes(), "consumed": self.consumed,
                "produced": self.produced, "steps": self.steps, "selectivity": self.selectivity}


class PlanRunner:
    """The tasks of one query's plan: feeds the leaves, collects the root's output steps."""

    def __init__(self, query):
        self.query = query
        self.tasks: list = []
        self.by_node: dict = {}
        self._leaves: list = []

        def build(node, parent, slot):
            t = NodeTask(self, node, parent, slot, name=f"q{query.id}.n{len(self.tasks)}")
            self.tasks.append(t)
            self.by_node[id(node)] = t
            if node.kind == "scan":
                self._leaves.append(t)
            for i, c in enumerate(node.children):
                build(c, t, i)
            return t
        self.root = build(query.plan.root, None, 0)
        # keep the plan-node numbering of the control tables
        order = {id(n): i for i, n in enumerate(query.plan.nodes)}
        for t in self.tasks:
            t.name = f"q{query.id}.n{order.get(id(t.node), 0)}"

    def feed(self, now: float, inputs: dict) -> None:
        for t in self._leaves:
            t.inputs[0].append((now, inputs.get(t.node.source)))

    def fail(self, now: float, exc: Exception, complete_before: float = None) -> float:
        """The step at ``now`` of one of this plan's tasks raised ``exc``: fail the query as the inline
        engine does, so that neither its state nor its results depend on the scheduler.

        First every step older than ``now`` still queued in the plan runs to the sink (inline they were
        complete before the step at ``now`` began; the failing task has emitted all of its own already),
        so the query keeps exactly the results the inline engine keeps: up to its last instant before
        ``now``.  Should one of those steps raise, the query fails there instead (the earliest failure,
        as inline).  Then :func:`fail_query` (or, for :class:`StepRowLimit`, :meth:`Query._fail`) with
        ``before`` = that last delivered instant: state 'failed', every queue of the plan dropped, no
        longer fed.  Returns the work units the completion cost (charged to the failing turn).

        ``complete_before``: complete the steps older than it instead (``inf``: every queued step, for an
        error outside the steps, e.g. of a PT operator's idle probing at the clock ``now``)."""
        q = self.query
        spent = self._complete_before(now if complete_before is None else complete_before)
        if q.failed is not None:               # an older step failed while completing
            return spent
        if isinstance(exc, StepRowLimit):
            q._fail(now, exc, q._done_at)
            # inline the failing instant is the newest one; here later instants may have been fed too
            q._instants = [t for t in q._instants if t <= q.clock]
        else:
            fail_query(q, exc, q._done_at, now)
        return spent

    def _complete_before(self, t: float) -> float:
        """Run every queued step older than ``t`` (children before parents: reversed pre-order)."""
        spent, moved = 0.0, True
        while moved and self.query.failed is None:
            moved = False
            for task in reversed(self.tasks):
                c = task.run(np.inf, before=t)[2]
                spent += c
                moved = moved or c > 0
        return spent

    def sink(self, now: float, out) -> None:
        self.query._deliver(now, out)

    def paths(self) -> list:
        """Leaf-to-root task paths."""
        out = []
        for leaf in self._leaves:
            p, t = [], leaf
            while t is not None:
                p.append(t)
                t = t.parent
            out.append(p)
        return out

    def queued(self) -> float:
        return float(sum(t.queued() for t in self.tasks))
