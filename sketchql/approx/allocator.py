"""The allocation problem: choose every query's knobs to maximize weighted precision under budgets.

Given query models ``m_i`` (:mod:`sketchql.approx.precision_model`: knobs ``x_i``
-> precision ``P_i``, memory ``M_i``, cpu ``C_i``), weights ``w_i >= 0`` and
budgets ``M``, ``C`` (None = unlimited)::

    maximize   Σ w_i P_i(x_i)
    subject to Σ M_i(x_i) <= M,  Σ C_i(x_i) <= C,  lo_i <= x_i <= 1
               x_i >= need_i  for the queries whose contract must be met

Method (:func:`allocate`), justified by the problem's structure -- a separable
objective with two coupling constraints and 1 or 2 knobs per query:

1. each query's knob box is discretised (log-spaced rates, budgets); with
   few queries the product grid is searched exhaustively (vectorized), else
   by Lagrangian decomposition: for multipliers ``(λ, μ)`` each query
   independently maximizes ``w P − λ M − μ C`` over its grid, and the
   multipliers are bisected / searched until the budgets hold (the dual
   optimum, exact on the convex hull of each query's frontier), then improved
   by coordinate ascent on the grid (:func:`_ascend`: the dual leaves budget
   unused between hull vertices, e.g. for identical queries);
2. the best grid point is polished by ``scipy.optimize.minimize`` (SLSQP)
   in the continuous space; the polish is kept only if feasible and better;
3. the simple allocations that lie in the same feasible set -- a uniform
   split of the memory (water-filling over the contract floors) and one
   common rate for all queries (what load shedding at the inputs does) --
   are evaluated as candidates (:func:`baseline_candidates`), so the
   predicted optimum is never below theirs.

Contracts: the needs are imposed as lower bounds when all of them fit
together; otherwise the contracts that do not fit (lowest weight first) are
reported infeasible with what they would need, and dropped from the bounds.
Weight-0 queries (inactive, or weight 0) get only leftovers: their floor
(the lowest rate) is reserved, the positive-weight problem is solved in the
rest, then the weight-0 queries share what is left (maximizing their
unweighted precision).

>>> from sketchql.approx.precision_model import AggregateModel
>>> a = AggregateModel([2000.0], [1.0], 0.05, 0.95, memory_full=1000.0, cpu_full=1.0, contract=False)
>>> b = AggregateModel([500.0], [1.0], 0.05, 0.95, memory_full=1000.0, cpu_full=1.0, contract=False)
>>> res = allocate([a, b], [1.0, 1.0], memory=1000.0)
>>> res.memory <= 1000.0 + 1e-6, res.knobs[0][0] < res.knobs[1][0]
(True, True)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from .precision_model import P_MIN, QueryModel

__all__ = ["Allocation", "allocate", "baseline_candidates", "knob_grid"]

_EXHAUSTIVE_MAX = 400_000


@dataclass
class Allocation:
    knobs: list                    # per query: list of knob values
    precision: list                # per query
    memory: float
    cpu: float
    objective: float
    infeasible: dict = field(default_factory=dict)    # query index -> what it would need
    method: str = ""


def knob_grid(model: QueryModel, n: int = 40) -> np.ndarray:
    """Candidate knob vectors of one model (K × dims): log-spaced in each box, ends included."""
    axes = []
    for lo, hi in model.bounds():
        if lo > 0 and hi / lo > 20:
            ax = np.geomspace(lo, hi, n)
        else:
            ax = np.linspace(lo, hi, n)
        axes.append(ax)
    if len(axes) == 1:
        return axes[0][:, None]
    m = max(8, int(round(n ** (1.0 / len(axes)) * 3)))
    axes = [np.geomspace(lo, hi, m) if lo > 0 and hi / lo > 20 else np.linspace(lo, hi, m)
            for lo, hi in model.bounds()]
    return np.array(list(itertools.product(*axes)), dtype=np.float64)


def _fits(mem, cpu, M, C, tol=1e-9):
    ok = np.ones(np.shape(mem), bool)
    if M is not None:
        ok &= mem <= M * (1 + tol) + tol
    if C is not None:
        ok &= cpu <= C * (1 + tol) + tol
    return ok


def _solve(models, weights, M, C, lower, n_grid):
    """Best grid point, then SLSQP polish.  Returns (list of knob arrays, objective) or None."""
    grids, vals = [], []
    for m, lo in zip(models, lower):
        g = knob_grid(m, n_grid)
        if lo is not None:
            g = g[np.all(g >= np.asarray(lo)[None, :] - 1e-12, axis=1)]
            g = np.vstack([g, np.asarray(lo, float)[None, :]])      # the need itself is a candidate
        P, Mm, Cc = m.evaluate_grid(g)
        grids.append(g)
        vals.append((np.asarray(P), np.asarray(Mm), np.asarray(Cc)))
    w = np.asarray(weights, np.float64)
    sizes = [len(g) for g in grids]
    best = None
    if int(np.prod(sizes, dtype=np.float64)) <= _EXHAUSTIVE_MAX:
        # exhaustive, merged query by query with Pareto-irrelevant pruning only by feasibility
        obj = np.zeros(1)
        mem = np.zeros(1)
        cpu = np.zeros(1)
        idx = [np.zeros(1, np.int64)]
        for q, (P, Mm, Cc) in enumerate(vals):
            obj = (obj[:, None] + w[q] * P[None, :]).ravel()
            mem = (mem[:, None] + Mm[None, :]).ravel()
            cpu = (cpu[:, None] + Cc[None, :]).ravel()
            k = len(P)
            idx = [np.repeat(i, k) for i in idx] + [np.tile(np.arange(k), len(idx[0]))]
            ok = _fits(mem, cpu, M, C)
            obj, mem, cpu = obj[ok], mem[ok], cpu[ok]
            idx = [i[ok] for i in idx]
            if not len(obj):
                return None
        j = int(np.argmax(obj))
        choice = [int(i[j]) for i in idx[1:]]
        best = ([grids[q][choice[q]] for q in range(len(models))], float(obj[j]))
        method = "exhaustive grid"
    else:
        best = _lagrange(grids, vals, w, M, C)
        method = "Lagrangian decomposition"
        if best is None:
            return None
    x0, f0 = best
    x, f = _polish(models, w, M, C, lower, x0, f0)
    method += " + SLSQP" if f > f0 + 1e-12 else ""
    # the simple allocations that lie in the same feasible set are candidates too: the optimum
    # returned is never below the predicted value of a uniform split or of proportional shedding
    for name, cand in baseline_candidates(models, M, C, lower, x).items():
        fc = float(sum(wq * m.evaluate(xc)[0] for wq, m, xc in zip(w, models, cand)))
        if fc > f + 1e-9:
            x, f, method = cand, fc, f"{name} candidate (better than {method})"
    return x, f, method


def _rate_axis(model, lo_rate: float, n: int = 512) -> np.ndarray:
    a, b = model.bounds()[0]
    a = max(a, lo_rate)
    return np.unique(np.concatenate([np.geomspace(max(a, 1e-12), b, n), [a, b]]))


def baseline_candidates(models, M, C, lower, x_ref) -> dict:
    """Two simple allocations inside the problem's feasible set, for comparison with the optimum.

    Only the first knob (the sampling rate) is set; the others keep their values in ``x_ref``.

    * ``uniform``: every query gets the same memory (water-filling: a query that needs less at
      rate 1 keeps only that, one whose contract floor needs more keeps its floor), the level
      found by bisection so that the memory and CPU budgets hold;
    * ``proportional``: one common rate for every query (what load shedding at the inputs does),
      the largest that fits, each query's rate at least its lower bound.

    Candidates that do not fit the budgets (the floors alone overflow) are left out."""
    out = {}
    axes, stats = [], []
    for m, lo, xr in zip(models, lower, x_ref):
        ax = _rate_axis(m, lo[0] if lo is not None else m.bounds()[0][0])
        rest = [float(v) for v in list(xr)[1:]]
        g = np.column_stack([ax] + [np.full(len(ax), v) for v in rest]) if rest else ax[:, None]
        P, Mm, Cc = m.evaluate_grid(g)
        axes.append(g)
        stats.append((np.asarray(Mm, float), np.asarray(Cc, float)))

    def pick_level(L):           # per query: the largest rate whose memory is <= max(L, its floor)
        return [int(max(0, np.searchsorted(Mm, max(L, Mm[0]) * (1 + 1e-12), side="right") - 1))
                for Mm, _ in stats]

    def pick_rate(r):
        return [int(max(0, np.searchsorted(g[:, 0], r * (1 + 1e-12), side="right") - 1)) for g in axes]

    def total(ch):
        return (sum(stats[q][0][c] for q, c in enumerate(ch)), sum(stats[q][1][c] for q, c in enumerate(ch)))

    for name, pick, hi in (("uniform", pick_level, max(s[0][-1] for s in stats)),
                           ("proportional", pick_rate, 1.0)):
        a, b = 0.0, hi
        ch = pick(b)
        mem, cpu = total(ch)
        if not _fits(np.array(mem), np.array(cpu), M, C):
            ch = pick(a)
            mem, cpu = total(ch)
            if not _fits(np.array(mem), np.array(cpu), M, C):
                continue
            for _ in range(60):
                mid = 0.5 * (a + b)
                cm = pick(mid)
                mm, cc = total(cm)
                if _fits(np.array(mm), np.array(cc), M, C):
                    a, ch = mid, cm
                else:
                    b = mid
        out[name] = [axes[q][c] for q, c in enumerate(ch)]
    return out


def _lagrange(grids, vals, w, M, C):
    def pick(lam, mu):
        ch = [int(np.argmax(w[q] * P - lam * Mm - mu * Cc)) for q, (P, Mm, Cc) in enumerate(vals)]
        mem = sum(vals[q][1][c] for q, c in enumerate(ch))
        cpu = sum(vals[q][2][c] for q, c in enumerate(ch))
        return ch, mem, cpu
    best = None
    lams = [0.0] + list(np.geomspace(1e-12, 1e3, 60))
    for lam in (lams if M is not None else [0.0]):
        for mu in (lams if C is not None else [0.0]):
            ch, mem, cpu = pick(lam / max(M or 1, 1e-12) * 1e0, mu / max(C or 1, 1e-12))
            if _fits(np.array(mem), np.array(cpu), M, C):
                f = float(sum(w[q] * vals[q][0][c] for q, c in enumerate(ch)))
                if best is None or f > best[1]:
                    best = (list(ch), f)
    if best is None:
        return None
    ch = _ascend(vals, w, M, C, best[0])
    f = float(sum(w[q] * vals[q][0][c] for q, c in enumerate(ch)))
    return [grids[q][c] for q, c in enumerate(ch)], f


def _ascend(vals, w, M, C, ch, rounds: int = 4):
    """Coordinate ascent on the grid from a feasible choice: each query in turn takes its best grid
    point with the others fixed (what the budgets leave).  The dual optimum lies on the convex hull
    of the frontiers; with identical queries it jumps between hull vertices and leaves budget unused
    (all three PT joins of the audit at budget 20 where one more step fitted); this closes that gap.
    Never lowers the objective."""
    ch = list(ch)
    mem = sum(vals[q][1][c] for q, c in enumerate(ch))
    cpu = sum(vals[q][2][c] for q, c in enumerate(ch))
    for _ in range(rounds):
        moved = False
        for q, (P, Mm, Cc) in enumerate(vals):
            c = ch[q]
            ok = _fits(mem - Mm[c] + Mm, cpu - Cc[c] + Cc, M, C)
            if not ok.any():
                continue
            score = np.where(ok, w[q] * P, -np.inf)
            j = int(np.argmax(score))
            if score[j] > w[q] * P[c] + 1e-12:
                mem += Mm[j] - Mm[c]
                cpu += Cc[j] - Cc[c]
                ch[q] = j
                moved = True
        if not moved:
            break
    return ch


def _polish(models, w, M, C, lower, x0, f0):
    from scipy.optimize import minimize
    dims = [m.dims for m in models]
    cuts = np.cumsum([0] + dims)
    bnds = []
    for m, lo in zip(models, lower):
        for d, (a, b) in enumerate(m.bounds()):
            bnds.append((max(a, lo[d]) if lo is not None else a, b))

    def split(z):
        return [z[cuts[i]:cuts[i + 1]] for i in range(len(models))]

    def ev(z):
        r = [m.evaluate(x) for m, x in zip(models, split(z))]
        return (float(sum(wi * ri[0] for wi, ri in zip(w, r))), sum(ri[1] for ri in r), sum(ri[2] for ri in r))
    cons = []
    if M is not None:
        cons.append({"type": "ineq", "fun": lambda z: (M - ev(z)[1]) / max(M, 1e-12)})
    if C is not None:
        cons.append({"type": "ineq", "fun": lambda z: (C - ev(z)[2]) / max(C, 1e-12)})
    z0 = np.concatenate([np.asarray(x, float) for x in x0])
    try:
        res = minimize(lambda z: -ev(z)[0], z0, method="SLSQP", bounds=bnds, constraints=cons,
                       options={"maxiter": 60, "ftol": 1e-9})
        z = np.clip(res.x, [b[0] for b in bnds], [b[1] for b in bnds])
        f, mem, cpu = ev(z)
        if f > f0 + 1e-9 and _fits(np.array(mem), np.array(cpu), M, C):
            return split(z), f
    except (ValueError, FloatingPointError):  # pragma: no cover - solver failure keeps the grid point
        pass
    return x0, f0


def allocate(models: Sequence[QueryModel], weights: Sequence[float], memory: Optional[float] = None,
             cpu: Optional[float] = None, n_grid: int = 40, enforce_contracts: bool = True) -> Allocation:
    """Solve the allocation problem (module doc)."""
    models = list(models)
    w = np.asarray(weights, np.float64)
    n = len(models)
    if n == 0:
        return Allocation([], [], 0.0, 0.0, 0.0, method="none")
    needs = [m.needed() if enforce_contracts else None for m in models]
    pos = [i for i in range(n) if w[i] > 0]
    zero = [i for i in range(n) if w[i] <= 0]
    infeasible = {}
    lower = {i: (list(needs[i]) if needs[i] is not None else None) for i in range(n)}
    for i in list(lower):
        if lower[i] is not None and len(lower[i]) < models[i].dims:
            lower[i] = lower[i] + [b[0] for b in models[i].bounds()[len(lower[i]):]]

    def need_res(i):
        x = lower[i] if lower[i] is not None else [b[0] for b in models[i].bounds()]
        return models[i].evaluate(x)
    # contracts that do not fit together: drop the lowest weight first
    order = sorted([i for i in pos if lower[i] is not None], key=lambda i: (-w[i], i))
    kept = []
    mem_min = sum(models[i].evaluate([b[0] for b in models[i].bounds()])[1] for i in pos)
    cpu_min = sum(models[i].evaluate([b[0] for b in models[i].bounds()])[2] for i in pos)
    for i in order:
        base = models[i].evaluate([b[0] for b in models[i].bounds()])
        _, nm, nc = need_res(i)
        if _fits(np.array(mem_min - base[1] + nm), np.array(cpu_min - base[2] + nc), memory, cpu):
            mem_min += nm - base[1]
            cpu_min += nc - base[2]
            kept.append(i)
        else:
            _, nm, nc = need_res(i)
            infeasible[i] = {"knobs": dict(zip(models[i].names, lower[i])), "memory_bytes": nm, "cpu_units_per_s": nc}
    for i in zero + [i for i in pos if i not in kept]:
        lower[i] = None
    knobs = [None] * n
    method = ""
    # the weight-0 queries' floors are reserved first (their rate cannot go below the floor)
    floor = [models[i].evaluate([b[0] for b in models[i].bounds()]) for i in zero]
    mem_pos = None if memory is None else max(memory - sum(f[1] for f in floor), 0.0)
    cpu_pos = None if cpu is None else max(cpu - sum(f[2] for f in floor), 0.0)
    if pos:
        sol = _solve([models[i] for i in pos], w[pos], mem_pos, cpu_pos, [lower[i] for i in pos], n_grid)
        if sol is None:          # nothing fits even at the lowest rates: everyone at the floor
            for i in pos:
                knobs[i] = list(models[i].floor())
            method = "floor (budget below the minimum)"
        else:
            xs, _, method = sol
            for i, x in zip(pos, xs):
                knobs[i] = [float(v) for v in x]
    used_m = sum(models[i].evaluate(knobs[i])[1] for i in pos)
    used_c = sum(models[i].evaluate(knobs[i])[2] for i in pos)
    if zero:
        left_m = None if memory is None else max(memory - used_m, 0.0)
        left_c = None if cpu is None else max(cpu - used_c, 0.0)
        sol = _solve([models[i] for i in zero], np.ones(len(zero)), left_m, left_c, [None] * len(zero), n_grid)
        for j, i in enumerate(zero):
            knobs[i] = ([float(v) for v in sol[0][j]] if sol is not None
                        else list(models[i].floor()))
    res = [models[i].evaluate(knobs[i]) for i in range(n)]
    return Allocation(knobs, [r[0] for r in res], float(sum(r[1] for r in res)), float(sum(r[2] for r in res)),
                      float(sum(w[i] * res[i][0] for i in range(n))), infeasible, method)
