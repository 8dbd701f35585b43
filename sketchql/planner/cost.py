"""Cost model: multi-way join ordering and per-operator costs per unit time.

Join ordering (golab-ozsu-sliding-window-multijoins, Appendix A).  Stream i
has rate λ_i, window (time size) T_i and v_i distinct join values; with the
containment and uniformity assumptions the size of a join of windows is

    φ_ij = λ_i T_i λ_j T_j / max(v_i, v_j),
    φ_{X∪{k}} = φ_X · λ_k T_k / max(min_{x∈X} v_x, v_k).

Under eager evaluation with a global order, a new S_i tuple is placed first
and probes the other windows in the global order; its cost per unit time is

    C_i = λ_i Σ_{m=1}^{n-1} |partial_{m-1}| · λ_{r_m} T_{r_m},

where r_1..r_{n-1} is the global order without i and |partial_m| the expected
number of composites of the new tuple with r_1..r_m (start 1; multiply by
λ_r T_r / max(min v so far, v_r) at each step).  The plan cost is Σ_i C_i;
the planner takes the cheapest of the n! global orders (reference case W2:
Table 5 gives C1..C4 = 3800, 3800, 2400, 6000, total 16000 for (1,2,3,4),
the optimum; the worst order costs 86850).

Other operators (golab-ozsu update-pattern paper, §5.4.1): selection and
projection cost Σλ; a binary join λ1 N2 + λ2 N1 (each new tuple scans the
other window); δ* costs λ N_o / 2; group-by 2 λ C (C = 1 for subtractable
aggregates, the group size for MIN/MAX/MEDIAN rescans); negative tuples
double the cost of the operators they pass through.

>>> st = [JoinStream(10, 100, 500), JoinStream(1, 100, 50), JoinStream(1, 200, 40), JoinStream(3, 100, 5)]
>>> [round(c) for c in eager_costs(st, (0, 1, 2, 3))]
[3800, 3800, 2400, 6000]
>>> best_order(st)[0], round(best_order(st)[1])
((0, 1, 2, 3), 16000)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

__all__ = ["JoinStream", "phi", "eager_costs", "order_cost", "best_order", "all_orders",
           "probe_orders_from_global", "OperatorCost", "DEFAULT_RATE", "DEFAULT_DISTINCT",
           "DEFAULT_UNBOUNDED_HORIZON", "selectivity"]

DEFAULT_RATE = 1.0                # tuples per second when a stream has no statistics yet
DEFAULT_DISTINCT = 100.0          # distinct values per column when unknown
DEFAULT_UNBOUNDED_HORIZON = 3600.0  # seconds of history assumed for an UNBOUNDED window


@dataclass
class JoinStream:
    """One join input: rate λ (tuples/s), window T (s) and distinct join values v."""
    rate: float
    window: float
    distinct: float

    @property
    def size(self) -> float:
        """N = λ T, the expected number of tuples in the window."""
        return self.rate * self.window


def phi(streams: Sequence[JoinStream], members: Sequence[int]) -> float:
    """Expected size φ of the join of the windows ``members`` (Appendix A)."""
    members = list(members)
    size = streams[members[0]].size
    vmin = streams[members[0]].distinct
    for k in members[1:]:
        s = streams[k]
        size = size * s.size / max(vmin, s.distinct)
        vmin = min(vmin, s.distinct)
    return size


def eager_costs(streams: Sequence[JoinStream], order: Sequence[int],
                allowed: Optional[Callable[[int, list], bool]] = None) -> list:
    """[C_1, ..., C_n]: cost per unit time of new tuples of each input under ``order``.

    ``allowed(i, probe_order)`` may reject a probe sequence (e.g. one that
    reaches an input not yet linked by a join condition); then the cost is inf.
    """
    out = []
    for i in range(len(streams)):
        rest = [r for r in order if r != i]
        if allowed is not None and not allowed(i, rest):
            out.append(float("inf"))
            continue
        partial = 1.0
        vmin = streams[i].distinct
        c = 0.0
        for r in rest:
            s = streams[r]
            c += partial * s.size
            partial = partial * s.size / max(vmin, s.distinct)
            vmin = min(vmin, s.distinct)
        out.append(streams[i].rate * c)
    return out


def order_cost(streams, order, allowed=None) -> float:
    return float(sum(eager_costs(streams, order, allowed)))


COST_RTOL = 1e-9        # two plan costs within this relative distance are a tie


def all_orders(streams, allowed=None, rtol: float = COST_RTOL) -> list:
    """[(order, cost)] for every global order, cheapest first.

    Costs are compared with a relative tolerance ``rtol`` (floating-point
    sums of the same terms in another order differ in the last bits): orders
    whose costs lie within ``rtol`` of a run's cheapest cost tie, and ties are
    broken lexicographically on the order -- so the choice never depends on
    rounding noise.

    >>> st = [JoinStream(1, 10, 5)] * 3
    >>> [o for o, _ in all_orders(st)][:2]
    [(0, 1, 2), (0, 2, 1)]
    """
    res = [(tuple(o), order_cost(streams, o, allowed)) for o in itertools.permutations(range(len(streams)))]
    res.sort(key=lambda t: t[1])
    grouped, gid, ref = [], -1, None
    for o, c in res:
        if ref is None or not (c <= ref + rtol * max(abs(ref), 1e-300) or c == ref):
            gid, ref = gid + 1, c
        grouped.append((gid, o, c))
    grouped.sort(key=lambda t: (t[0], t[1]))
    return [(o, c) for _, o, c in grouped]


def best_order(streams, allowed=None):
    """(order, cost) of the cheapest global order (n! enumeration; n <= 8 in practice)."""
    if len(streams) > 8:
        # greedy fallback: ascending window size, as the paper's simple heuristic
        order = tuple(sorted(range(len(streams)), key=lambda i: streams[i].size))
        return order, order_cost(streams, order, allowed)
    return all_orders(streams, allowed)[0]


def probe_orders_from_global(order: Sequence[int]) -> dict:
    """Probe order of each input: the global order with the input itself removed."""
    return {i: [r for r in order if r != i] for i in order}


def selectivity(kind: str, distinct: float = DEFAULT_DISTINCT) -> float:
    """Textbook (System R) selectivities: equality 1/v, range 1/3, other 1/2."""
    if kind == "=":
        return 1.0 / max(distinct, 1.0)
    if kind in ("<", "<=", ">", ">=", "between"):
        return 1.0 / 3.0
    if kind == "!=":
        return 1.0 - 1.0 / max(distinct, 1.0)
    return 0.5


@dataclass
class OperatorCost:
    """Estimated input/output rates, state size and work per unit time of one plan node."""
    rate_in: float
    rate_out: float
    state: float
    work: float

    def __str__(self):
        return f"in={self.rate_in:.3g}/s out={self.rate_out:.3g}/s state={self.state:.3g} work={self.work:.3g}/s"
