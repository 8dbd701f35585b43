"""The global operator scheduler (STREAM section 4.2; demo paper section 3).

Operators of every registered plan run under one scheduler that gives each a
bounded amount of work per *turn* (``quantum``: input tuples, or time units for
the paper's model operators) and then takes control back.  A task is anything
with the small protocol below -- a plan node of a query
(:class:`sketchql.engine.runner.NodeTask`) or the paper's abstract operator
(:class:`ModelOperator`):

``ready()``, ``queued()`` (tuples waiting in its input queues), ``head_stamp()``
(arrival stamp of its oldest waiting tuple), ``run(quantum) -> (consumed,
produced, cost)``, ``selectivity`` and ``cost_per_tuple`` (measured), and
``parent`` (the task its output goes to, None at the root).

Strategies (engine knob ``scheduler``):

* ``round_robin`` -- the initial STREAM scheduler: the ready tasks in turn;
* ``fifo`` -- tuples processed to completion in arrival order (the paper's
  strategy 1): the ready task holding the oldest tuple, the one nearest the
  output first at equal stamps;
* ``greedy`` -- the paper's strategy 2 generalised per operator: the ready task
  that removes the most tuples per unit of time, ``(1 − s) / t``;
* ``chain`` -- Chain scheduling (Babcock, Babu, Datar, Motwani 2003): every
  leaf-to-root path of a plan is drawn as its *progress chart* -- points
  ``(T_k, S_k)`` with ``T_k = Σ_{i<=k} t_i Π_{j<i} s_j`` (time spent on one
  input tuple by the first k operators) and ``S_k = Π_{i<=k} s_i`` (what is
  left of it); its *lower envelope* splits the path into chains, each of
  slope ``−ΔS/ΔT``, the chain's priority.  The scheduler picks the
  highest-priority chain that has a ready operator and runs, among its ready
  operators, the one holding the oldest tuples (equal priority: earliest
  arrival first, as in Babcock et al.), the one nearest the output at equal
  stamps.

Errors: a plan node whose operator raises in its turn fails its query, not the scheduler
(:meth:`sketchql.engine.runner.PlanRunner.fail`): the query's steps older than the failing one are
completed first, then it goes to state 'failed' with the inline engine's results, error and clock,
its queues are dropped, and :meth:`Scheduler.run` goes on with the other tasks.  A query sharing
the failing operator fails when its own task reaches the failed step.  Only an error outside every
task (a bug of the scheduler itself) propagates.

The paper's two-operator example (O1 on a batch of n tuples: 1 time unit,
selectivity 0.2; O2 on n/5 tuples: 1 unit; n tuples arrive at times 1..7)
gives queue totals (× n) 1, 1.2, 2, 2.2, 3, 3.2, 4 under ``fifo`` and
1, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2 under ``greedy`` and ``chain``; every
strategy ends at time 15:

>>> ops = paper_example()
>>> simulate(ops, {t: 1.0 for t in range(1, 8)}, "fifo")["totals"][:7]
[1.0, 1.2, 2.0, 2.2, 3.0, 3.2, 4.0]
>>> r = simulate(paper_example(), {t: 1.0 for t in range(1, 8)}, "chain")
>>> r["totals"][:7], r["end"]
([1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2], 15)
"""
from __future__ import annotations

import math
from typing import Optional

from ..errors import SketchQLError

__all__ = ["STRATEGIES", "Scheduler", "ModelOperator", "chains", "simulate", "paper_example"]

#: the selectable strategies (``inline`` = no scheduler: a plan runs to completion when fed)
STRATEGIES = ("inline", "round_robin", "fifo", "greedy", "chain")


def chains(path) -> list:
    """Split a leaf-to-root ``path`` of tasks into Chain's lower-envelope segments.

    Returns ``[(priority, [task, ...]), ...]`` in path order; the priority of a
    segment is ``(S_start − S_end) / (T_end − T_start)`` on the progress chart
    (tuples removed per unit of time).

    >>> a, b = ModelOperator("a", 1.0, 0.2), ModelOperator("b", 0.2, 0.0)
    >>> [(round(p, 3), [t.name for t in ts]) for p, ts in chains([a, b])]
    [(0.8, ['a']), (0.2, ['b'])]
    """
    pts = [(0.0, 1.0)]
    T, S = 0.0, 1.0
    for t in path:
        T += max(float(t.cost_per_tuple), 1e-12) * S
        S *= max(float(t.selectivity), 0.0)
        pts.append((T, S))
    out, i = [], 0
    while i < len(path):
        best, bj = -math.inf, i + 1
        for j in range(i + 1, len(pts)):
            dt = pts[j][0] - pts[i][0]
            slope = (pts[i][1] - pts[j][1]) / dt if dt > 0 else math.inf
            if slope >= best - 1e-12:     # steepest descent; the longest segment at ties
                if slope > best + 1e-12 or j > bj:
                    best, bj = slope, j
        out.append((best, list(path[i:bj])))
        i = bj
    return out


class Scheduler:
    """Runs tasks in turns of bounded work under one strategy (module doc).

    ``tasks()`` returns the current tasks (a callable, so plans registered or dropped
    later are seen); ``paths()`` the leaf-to-root paths (for ``chain``).
    """

    def __init__(self, strategy: str = "round_robin", quantum: float = 1024, tasks=None, paths=None):
        self.set_strategy(strategy)
        if not quantum > 0:
            raise SketchQLError(f"scheduler quantum must be > 0, got {quantum!r}")
        self.quantum = float(quantum)
        self._tasks = tasks or (lambda: [])
        self._paths = paths or (lambda: [[t] for t in self._tasks()])
        self._rr = 0
        self.turns = 0
        self.work = 0.0
        self.peak_queued = 0.0
        self.last: Optional[str] = None

    def set_strategy(self, strategy: str) -> None:
        if strategy not in STRATEGIES or strategy == "inline":
            raise SketchQLError(f"scheduler strategy must be one of {', '.join(STRATEGIES[1:])}, got {strategy!r}")
        self.strategy = strategy

    # -- choosing -------------------------------------------------------------
    def pick(self):
        tasks = [t for t in self._tasks() if t.ready()]
        if not tasks:
            return None
        s = self.strategy
        if s == "round_robin":
            allt = self._tasks()
            n = len(allt)
            for k in range(n):
                t = allt[(self._rr + k) % n]
                if t.ready():
                    self._rr = (self._rr + k + 1) % n
                    return t
            return None
        if s == "fifo":
            return min(tasks, key=lambda t: (t.head_stamp(), -_depth(t)))
        if s == "greedy":
            return max(tasks, key=lambda t: (1.0 - t.selectivity) / max(t.cost_per_tuple, 1e-12))
        # chain: the highest-priority chain with a ready operator; within it the operator holding
        # the oldest tuples (Babcock et al.'s tie-break: the earliest arrival first), the one
        # nearest the output at equal stamps -- in a one-operator-per-chain plan, its first one
        best, cands = -math.inf, []
        for path in self._paths():
            for prio, seg in chains(path):
                ready = [t for t in seg if t.ready()]
                if not ready or prio < best - 1e-12:
                    continue
                if prio > best + 1e-12:
                    best, cands = prio, []
                cands.extend(ready)
        if not cands:
            return None
        return min(cands, key=lambda t: (t.head_stamp(), -_depth(t)))

    def priorities(self) -> dict:
        """Chain priority of every task (max over the paths it is on)."""
        out = {}
        for path in self._paths():
            for prio, seg in chains(path):
                for t in seg:
                    out[t.name] = max(out.get(t.name, -math.inf), prio)
        return out

    # -- running --------------------------------------------------------------
    def turn(self) -> float:
        """Run one task for at most one quantum; returns the cost spent (0: nothing ready).  A plan
        task charges an error of its operator to its query (module doc): the turn still returns."""
        t = self.pick()
        if t is None:
            return 0.0
        consumed, produced, cost = t.run(self.quantum)
        self.turns += 1
        self.work += cost
        self.last = t.name
        return float(cost) if cost > 0 else 1e-9

    def run(self, budget: Optional[float] = None, on_turn=None) -> float:
        """Turns until nothing is ready or ``budget`` (cost units) is spent; returns the cost spent."""
        spent = 0.0
        while budget is None or spent < budget:
            c = self.turn()
            if c == 0.0:
                break
            spent += c
            q = self.queued()
            self.peak_queued = max(self.peak_queued, q)
            if on_turn is not None:
                on_turn(self)
        return spent

    def queued(self) -> float:
        return float(sum(t.queued() for t in self._tasks()))

    def stats(self) -> dict:
        return {"strategy": self.strategy, "quantum": self.quantum, "turns": self.turns, "work": self.work,
                "queued": self.queued(), "peak_queued": self.peak_queued, "last": self.last,
                "tasks": len(self._tasks())}


def _depth(t) -> int:
    d, p = 0, t.parent
    while p is not None:
        d, p = d + 1, p.parent
    return -d


# ---------------------------------------------------------------------- the paper's model
class ModelOperator:
    """STREAM §4.2's abstract unary operator: consumes up to ``rate`` tuples per time
    unit (× n), keeps a ``selectivity`` share of them, queue of (stamp, size) groups.

    ``run(quantum)`` works ``quantum`` time units at most (the scheduler's turn), and stops
    early when its queue empties; the output goes to ``parent``'s queue with the stamps of
    the input (so FIFO follows each batch to completion).
    """

    def __init__(self, name: str, rate: float, selectivity: float, parent: "ModelOperator" = None):
        self.name, self.rate, self.selectivity, self.parent = name, float(rate), float(selectivity), parent
        self.queue: list = []            # [stamp, size] groups, oldest first

    @property
    def cost_per_tuple(self) -> float:
        return 1.0 / self.rate

    def ready(self) -> bool:
        return self.queued() > 1e-12

    def queued(self) -> float:
        return float(sum(s for _, s in self.queue))

    def head_stamp(self) -> float:
        return self.queue[0][0] if self.queue else math.inf

    def push(self, stamp, size):
        if size > 1e-12:
            self.queue.append([stamp, float(size)])

    def run(self, quantum: float):
        cap = self.rate * quantum
        used = 0.0
        while self.queue and used < cap - 1e-12:
            g = self.queue[0]
            take = min(g[1], cap - used)
            g[1] -= take
            used += take
            if self.parent is not None:
                self.parent.push(g[0], take * self.selectivity)
            if g[1] <= 1e-12:
                self.queue.pop(0)
        return used, used * self.selectivity, used / self.rate


def paper_example():
    """[O1, O2] of STREAM §4.2 (n = 1): O1 one time unit per batch, 20 % selectivity; O2 one
    time unit per n/5 tuples, its output leaves the system."""
    o2 = ModelOperator("O2", 0.2, 0.0)
    o1 = ModelOperator("O1", 1.0, 0.2, parent=o2)
    return [o1, o2]


def simulate(ops, arrivals: dict, strategy: str, horizon: int = 100) -> dict:
    """Discrete-time run of model operators: at each time t, ``arrivals[t]`` tuples (× n) enter
    the first operator's queue, the total queued is recorded, then the scheduler works one time
    unit (one turn of quantum 1).  Returns ``{"totals": [...], "end": first t with nothing queued
    after the arrivals stopped}``."""
    sched = Scheduler(strategy, quantum=1.0, tasks=lambda: ops, paths=lambda: [ops])
    totals, end = [], None
    last_arrival = max(arrivals) if arrivals else 0
    for t in range(1, horizon + 1):
        if t in arrivals:
            ops[0].push(t, arrivals[t])
        tot = round(sum(o.queued() for o in ops), 9)
        totals.append(tot)
        if t > last_arrival and tot <= 1e-9:
            end = t
            break
        sched.turn()
    return {"totals": totals, "end": end}
