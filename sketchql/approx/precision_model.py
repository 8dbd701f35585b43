"""Precision models: from an operator's resources (its knobs) to its precision (STREAM §5.3).

Every model maps a knob vector ``x`` to ``(precision, memory_bytes, cpu_units_per_s)``.
*Precision* is a number in [0, 1] comparable across queries:

* value answers (aggregates): the probability that an answer meets the
  error target ``e`` -- ``P(|relative error| ≤ e)``, averaged over the groups
  by their share of the rows.  With a per-group relative standard error
  ``σ_g(p) = c · k_g · √((1 − p) / (p · N_g))`` (Horvitz–Thompson under
  Bernoulli sampling at rate ``p`` of ``N_g`` window rows; ``k_g = 1`` for
  COUNT and COUNT(DISTINCT) with ``N_g = D``, the coefficient of variation
  ``cv_g`` for AVG, ``√(1 + cv_g²)`` for SUM, ``√(q (1 − q)) / (f̂ x_q)``
  ≈ ``cv_g`` for quantiles) that is ``2 Φ(e / σ_g) − 1``;
  Window reduction (knob ``window_scale`` = s, :mod:`sketchql.approx.window_reduction`:
  on a stationary stream the reduced window is a Bernoulli sample at rate s) and the
  sampler enter as ``σ_g² = c² k_g² F / N_g`` with
  ``F = (1 − a)(1 − ps)/(ps) + a (1 − s)/s`` for Bernoulli with an outlier index (the
  index keeps the share ``a`` of the error variance exactly; ``F = (1 − ps)/(ps)``
  when the index is inactive) and ``F = ψ (1 − ps)/(ps)`` for VarOpt (priority sampling
  ∝ ``|x| + mean|x|``; ``ψ`` its variance relative to Bernoulli, measured on the
  window's rows by the engine).  Memory ``s · keep · M`` (``keep = p + (1 − p) o`` with
  the index's share ``o``, ``p`` for VarOpt), CPU ``keep · C`` (window reduction
  shrinks state, not the work per arrival);
* set answers (joins, selections): the recall ``1 − FN`` (no false positives
  are produced by sampling or by the promising-tuple operators).

Precision propagates bottom-up (:func:`propagate`, the (FP, FN) calculus of
§5.3 specialised to our operators): a scan sampled at ``p`` has
``FN = 1 − p``; select / project keep their input's; a join's recall is the
product of its inputs' recalls times its own (a promising-tuple join on a
budget ``b`` per tuple: ``r(b) = 1 − exp(−b / b₀)``; inputs universe-sampled on
the join key at rate ``p``: recall ``p`` in expectation, not ``p²`` -- and, for the one hash
in use, the measured share of pairs it keeps, :class:`JoinRecallModel`); an aggregate over an
input of recall ``π`` has the relative error above with ``p = π``.

``c`` (aggregates) and ``b₀`` (joins) are *calibrated from measurements*:
:meth:`AggregateModel.calibrate` folds an audited relative error into ``c``
(exponentially weighted ratio of measured to predicted), and
:meth:`JoinRecallModel.calibrate` refits ``b₀`` from observed
(budget, recall) pairs by least squares on ``log(1 − r)``.

>>> m = AggregateModel(group_rows=[1000.0, 1000.0], k=[1.0, 1.0], error=0.05, conf=0.95,
...                    memory_full=1e6, cpu_full=100.0)
>>> round(m.evaluate([1.0])[0], 3), m.evaluate([0.1])[0] < m.evaluate([0.5])[0]
(1.0, True)
>>> round(m.needed()[0], 3)          # meets ±5 % at 95 % in every group (planned at 85 % of it)
0.68
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np
from scipy import stats as _st

__all__ = ["AggregateModel", "JoinRecallModel", "QueryModel", "propagate", "selection_recall", "P_MIN"]

#: lowest sampling rate any knob may take
P_MIN = 1e-3


class QueryModel:
    """Interface: ``dims`` knobs with ``bounds``; ``evaluate(x) -> (precision, memory, cpu)``."""

    dims = 1
    names: tuple = ("sample_rate",)

    def bounds(self) -> list:
        return [(P_MIN, 1.0)] * self.dims

    def full(self) -> list:
        return [b[1] for b in self.bounds()]

    def evaluate(self, x):  # pragma: no cover - interface
        raise NotImplementedError

    def needed(self) -> Optional[list]:
        """The cheapest knobs meeting the query's contract (None: no contract)."""
        return None

    def floor(self) -> list:
        """The knobs used when even the lowest settings do not fit the budgets."""
        return [b[0] for b in self.bounds()]

    def evaluate_grid(self, grid: np.ndarray):
        """Vectorized evaluate over rows of ``grid`` (K × dims) -> three arrays of K."""
        out = np.array([self.evaluate(row) for row in grid], dtype=np.float64)
        return out[:, 0], out[:, 1], out[:, 2]


@dataclass
class AggregateModel(QueryModel):
    """Sampled aggregate (module doc).  ``group_rows``: window rows per group at full rate;
    ``k``: per-group error factor; ``memory_full`` / ``cpu_full``: resources at rate 1."""

    group_rows: Sequence[float]
    k: Sequence[float]
    error: float = 0.05
    conf: float = 0.95
    memory_full: float = 0.0
    cpu_full: float = 0.0
    calib: float = 1.0
    contract: bool = True
    outlier_share: float = 0.0
    #: plan for this share of the error bound, so that the estimate's own noise stays inside it
    margin: float = 0.85
    #: window reduction offered (second knob ``window_scale`` in [s_min, 1])
    window_ok: bool = False
    s_min: float = 0.05
    #: share of the estimate's error variance carried by the rows the outlier index keeps
    out_var: float = 0.0
    #: sampler: "bernoulli" (with the outlier index) or "varopt" (no index: inclusion ∝ size)
    mode: str = "bernoulli"
    #: varopt's error variance relative to Bernoulli without an outlier index (None: not offered)
    varopt_factor: Optional[float] = None

    def __post_init__(self):
        self.group_rows = np.maximum(np.asarray(self.group_rows, np.float64), 1.0)
        self.k = np.asarray(self.k, np.float64)
        tot = self.group_rows.sum()
        self.share = self.group_rows / tot if tot > 0 else np.ones_like(self.group_rows)
        self.dims = 2 if self.window_ok else 1
        self.names = ("sample_rate", "window_scale") if self.window_ok else ("sample_rate",)

    def bounds(self):
        return [(P_MIN, 1.0)] + ([(self.s_min, 1.0)] if self.window_ok else [])

    def _ps(self, x):
        x = np.atleast_2d(np.asarray(x, np.float64))
        p = np.clip(x[:, 0], P_MIN, 1.0)
        s = np.clip(x[:, 1], self.s_min, 1.0) if (self.window_ok and x.shape[1] > 1) else np.ones(len(p))
        return p, s

    def _factor(self, p, s, mode=None):
        """Relative error variance × N / k² of each (p, s): (module doc)."""
        mode = mode or self.mode
        ps = p * s
        if mode == "varopt":
            return (self.varopt_factor or 1.0) * (1.0 - ps) / ps
        if self.outlier_share > 0:
            return (1.0 - self.out_var) * (1.0 - ps) / ps + self.out_var * (1.0 - s) / s
        return (1.0 - ps) / ps

    def _keep(self, p, mode=None):
        mode = mode or self.mode
        if mode == "varopt":
            return p
        return np.minimum(1.0, p + (1 - p) * self.outlier_share)

    def sigma(self, p: float, s: float = 1.0) -> np.ndarray:
        f = float(self._factor(np.array([float(np.clip(p, P_MIN, 1.0))]), np.array([float(s)]))[0])
        return self.calib * self.k * np.sqrt(max(f, 0.0) / self.group_rows)

    def best_mode(self, memory: float) -> str:
        """The sampler with the higher predicted precision at ``memory`` bytes (window scale 1):
        varopt only when it is offered and at least 10 % more precise in error terms."""
        if self.varopt_factor is None or self.memory_full <= 0:
            return "bernoulli"
        share = float(np.clip(memory / self.memory_full, 0.0, 1.0))
        pv = max(share, P_MIN)
        pb = max((share - self.outlier_share) / max(1 - self.outlier_share, 1e-12), P_MIN)
        eb = float(self._factor(np.array([pb]), np.array([1.0]), "bernoulli")[0])
        ev = float(self._factor(np.array([pv]), np.array([1.0]), "varopt")[0])
        return "varopt" if np.sqrt(max(ev, 0.0)) < 0.9 * np.sqrt(max(eb, 0.0)) else "bernoulli"

    def floor(self) -> list:
        """Lowest rate, whole window: when nothing fits, shrinking the window too only empties
        the answer (a budget the floor overflows is reported, not met)."""
        return [P_MIN] + ([1.0] if self.window_ok else [])

    def prefer_sampling(self, x) -> list:
        """Knobs with the same precision and no more memory, using sampling rather than window
        reduction where the model cannot tell them apart (no outlier index: p·s is all that
        counts; sampling also saves CPU and assumes nothing about stationarity)."""
        x = [float(v) for v in x]
        if not self.window_ok or len(x) < 2 or x[1] >= 1.0:
            return x
        if (self.mode == "varopt" or self.outlier_share <= 0) and x[0] * x[1] >= P_MIN:
            return [x[0] * x[1], 1.0]
        return x

    def rel_error(self, p: float) -> float:
        """Predicted worst-group relative half-width at ``conf``."""
        z = float(_st.norm.ppf(0.5 + self.conf / 2))
        s = self.sigma(p)
        return float(z * s.max()) if len(s) else 0.0

    def evaluate(self, x):
        P, M, C = self.evaluate_grid(np.asarray(x, np.float64)[None, :])
        return float(P[0]), float(M[0]), float(C[0])

    def evaluate_grid(self, grid):
        p, sc = self._ps(grid)
        f = np.maximum(self._factor(p, sc), 0.0)
        s = self.calib * self.k[None, :] * np.sqrt(f[:, None] / self.group_rows[None, :])
        with np.errstate(divide="ignore"):
            prec = np.where(s <= 0, 1.0, 2 * _st.norm.cdf(self.error / np.maximum(s, 1e-300)) - 1)
        keep = self._keep(p)
        # window reduction shrinks the state; every arrival is still processed (CPU unchanged)
        return (prec * self.share[None, :]).sum(1), sc * keep * self.memory_full, keep * self.cpu_full

    def needed(self):
        """The cheapest sampling rate meeting the contract at window scale 1 (a box lower bound:
        under a contract the allocator keeps the window whole and samples)."""
        if not self.contract:
            return None
        z = float(_st.norm.ppf(0.5 + self.conf / 2))
        kk = np.maximum(self.calib * self.k, 1e-12)
        if not len(kk):
            return [P_MIN] + ([1.0] if self.window_ok else [])
        # z c k sqrt(F(p) / N) <= m e with F(p) = a (1 - p) / p, a = 1 - out_var (Bernoulli with the
        # outlier index) or the varopt factor  <=>  p >= 1 / (1 + N (m e / (z c k))^2 / a)
        a = (self.varopt_factor or 1.0) if self.mode == "varopt" else \
            ((1.0 - self.out_var) if self.outlier_share > 0 else 1.0)
        p = 1.0 / (1.0 + self.group_rows * (self.margin * self.error / (z * kk)) ** 2 / max(a, 1e-12))
        return [float(np.clip(p.max(), P_MIN, 1.0))] + ([1.0] if self.window_ok else [])

    def calibrate(self, measured_rel: float, predicted_rel: float, alpha: float = 0.3):
        """Fold one audit (measured vs predicted relative error) into ``calib``."""
        if predicted_rel > 0 and np.isfinite(measured_rel) and measured_rel >= 0:
            r = float(np.clip(measured_rel / predicted_rel, 0.25, 4.0))
            self.calib = float(np.clip((1 - alpha) * self.calib + alpha * self.calib * r, 0.25, 4.0))


@dataclass
class JoinRecallModel(QueryModel):
    """Promising-tuple join: knobs (input sampling rate p, budget b per tuple).

    recall = g(p) · (1 − exp(−b / b₀)); memory = s(p) · memory_full;
    cpu = s(p) · rate_in · (1 + min(b, units_cap)).

    ``g(p)`` is the share of the join pairs and ``s(p)`` the share of the input tuples that the
    input sampling keeps.  Without measurements ``s(p) = p`` and ``g(p) = p^e`` (``e = 1`` when both
    inputs are universe-sampled on the join key with one hash -- a kept key keeps all its pairs --,
    2 for independent sampling).  Those are expectations over the hash function; for *one* hash and
    a skewed key they are far off (a heavy key is all in or all out: with 200 Zipf keys, rate 0.095
    kept 2.4 % of the tuples and 0.08 % of the pairs).  So, when the samplers measured the recent rows
    per hash bin (``n₁ⱼ``, ``n₂ⱼ``: :meth:`sketchql.approx.sampling.Sampler.key_bins`), the model
    uses the realized shares of the current hash: ``s(p) = Σ_{j<pB} (n₁ⱼ + n₂ⱼ) / Σ (n₁ⱼ + n₂ⱼ)``
    and ``g(p) = Σ_{j<pB} n₁ⱼ n₂ⱼ / Σ n₁ⱼ n₂ⱼ`` (pairs of a bin = product of its two sides' rows:
    exact for keys alone in their bin), linear inside a bin (``tuple_cdf`` / ``pair_cdf``: the
    cumulative shares at the ``B + 1`` bin edges).

    The measured ``g`` is a step function whose flat stretches are estimates (often 0 at low rates
    after a few seconds of keys): ``TILT · s(p)`` (1e-6) is added to ``g`` so that among rates with
    the same measured pair share the allocator lets in the most tuples that fit -- the join sees
    more keys and its budget is used -- instead of choosing the lowest rate.

    ``units_cap`` (measured by the engine at rate ``cap_rate``): a join whose kept keys have fewer
    candidate partners than its budget does not spend the budget; it costs
    ``s(p) · rate_in · (1 + min(b, cap(p)))``, the cap scaled by the partners per kept tuple,
    ``cap(p) = cap · (g(p) / s(p)) / (g(p₀) / s(p₀))`` (a rate that lets a heavy key in raises it).

    ``b_min`` is the user's ``WITHIN b PROBES PER TUPLE``: a lower bound of the budget knob (the
    allocator may raise it, never lower it); the rate is traded instead.
    """

    rate_in: float = 1.0
    memory_full: float = 0.0
    b0: float = 50.0
    b_max: float = 1000.0
    observations: list = field(default_factory=list)
    exponent: float = 1.0
    b_min: float = 1.0
    tuple_cdf: Optional[np.ndarray] = None
    pair_cdf: Optional[np.ndarray] = None
    units_cap: Optional[float] = None
    cap_rate: Optional[float] = None

    dims = 2
    names = ("sample_rate", "budget")
    TILT = 1e-6

    def bounds(self):
        lo = float(min(max(self.b_min, 1.0), self.b_max))
        return [(P_MIN, 1.0), (lo, self.b_max)]

    def recall_budget(self, b):
        return 1.0 - np.exp(-np.asarray(b, np.float64) / max(self.b0, 1e-9))

    def shares(self, p):
        """(pair share g(p), tuple share s(p)) kept by input sampling at rate ``p`` (class doc)."""
        p = np.clip(np.asarray(p, np.float64), P_MIN, 1.0)
        if self.pair_cdf is None or self.tuple_cdf is None:
            return p ** self.exponent, p
        edges = np.linspace(0.0, 1.0, len(self.pair_cdf))
        t = np.interp(p, edges, self.tuple_cdf)
        return np.interp(p, edges, self.pair_cdf) + self.TILT * t, t

    def evaluate(self, x):
        b = float(max(x[1], 0.0))
        g, s = self.shares(float(x[0]))
        return float(g * self.recall_budget(b)), float(s * self.memory_full), float(s * self.rate_in * (1.0 + self._spent(b, x[0])))

    def evaluate_grid(self, grid):
        g_ = np.asarray(grid, np.float64)
        b = np.maximum(g_[:, 1], 0.0)
        g, s = self.shares(g_[:, 0])
        return g * self.recall_budget(b), s * self.memory_full, s * self.rate_in * (1.0 + self._spent(b, g_[:, 0]))

    def _spent(self, b, p):
        """Units a tuple really costs at budget ``b`` and rate ``p`` (class doc)."""
        if self.units_cap is None:
            return b
        cap = self.units_cap
        if self.cap_rate is not None and self.pair_cdf is not None:
            cap = cap * self._partners(p) / max(self._partners(self.cap_rate), 1e-12)
        return np.minimum(b, cap)

    def _partners(self, p):
        """Candidate partners per kept tuple, up to a constant: pair share / tuple share at ``p``."""
        edges = np.linspace(0.0, 1.0, len(self.pair_cdf))
        p = np.clip(np.asarray(p, np.float64), P_MIN, 1.0)
        return np.interp(p, edges, self.pair_cdf) / np.maximum(np.interp(p, edges, self.tuple_cdf), 1e-12)

    @staticmethod
    def cdfs(bins: Sequence[np.ndarray]) -> Optional[tuple]:
        """(tuple_cdf, pair_cdf) from the two inputs' per-bin row counts (one array: a self-join,
        pairs ``n²``); None when there are no rows or no pairs."""
        bins = [np.asarray(x, np.float64) for x in bins if x is not None]
        if not bins or len({len(x) for x in bins}) != 1:
            return None
        n1 = bins[0]
        n2 = bins[1] if len(bins) > 1 else bins[0]
        rows = n1 + (n2 if len(bins) > 1 else 0.0)
        pairs = n1 * n2
        if rows.sum() <= 0 or pairs.sum() <= 0:
            return None
        tc = np.concatenate([[0.0], np.cumsum(rows) / rows.sum()])
        pc = np.concatenate([[0.0], np.cumsum(pairs) / pairs.sum()])
        return tc, pc

    def calibrate(self, budget: float, recall_given_input: float):
        """Add a (budget, recall of the join on its sampled input) observation and refit b₀."""
        r = float(recall_given_input)
        if not (budget > 0 and 0 < r < 1):
            return
        self.observations.append((float(budget), r))
        self.observations = self.observations[-50:]
        b = np.array([o[0] for o in self.observations])
        y = -np.log1p(-np.array([o[1] for o in self.observations]))      # = b / b0
        self.b0 = float(np.clip((b * b).sum() / max((b * y).sum(), 1e-12), 1e-3, 1e6))


def propagate(nodes: list, rates: dict, join_recall: Optional[float] = None) -> dict:
    """Bottom-up (FP, FN) of a plan (STREAM §5.3): ``nodes`` are PlanNodes, ``rates`` the sampling
    rate of each scan's source index; returns ``{id(node): {"recall", "fp"}}``.

    scan: recall = rate; select / project / static_join / aggregate input: the child's;
    join: the product of the children's recalls (× ``join_recall`` for a promising-tuple join);
    distinct: the child's (a value is present if any copy is)."""
    out = {}

    def rec(n):
        for c in n.children:
            rec(c)
        if n.kind == "scan":
            r = float(rates.get(n.source, 1.0))
        elif n.kind in ("join", "pt_join"):
            r = float(np.prod([out[id(c)]["recall"] for c in n.children]))
            if n.kind == "pt_join" and join_recall is not None:
                r *= float(join_recall)
        else:
            r = out[id(n.children[0])]["recall"] if n.children else 1.0
        out[id(n)] = {"recall": r, "fp": 0.0}
    for root in nodes[:1]:
        rec(root)
    return out


def selection_recall(served: int, live: int) -> float:
    """Recall of a promising-tuple selection's live answer: the share of the window's rows that
    satisfy the predicate and have been served, ``served / live`` (1 for an empty window).

    A selection produces no false positives and its output is a subset of the live qualifying
    rows, so this is its precision in the allocator's sense -- counted, not modelled: the
    operator holds the window's arrivals, so both counts are exact at every step (unlike a
    join, whose pair count is unknown without the exact join; :class:`JoinRecallModel`).

    >>> selection_recall(310, 1622) == 310 / 1622, selection_recall(0, 0)
    (True, 1.0)
    """
    if live <= 0:
        return 1.0
    return float(min(1.0, max(0.0, served / live)))


def normal_precision(sigma_rel: float, error: float) -> float:
    """P(|N(0, σ²)| ≤ e) = 2 Φ(e / σ) − 1 (1 when σ = 0)."""
    if sigma_rel <= 0:
        return 1.0
    return float(2 * _st.norm.cdf(error / sigma_rel) - 1)


def z_for(conf: float) -> float:
    return float(_st.norm.ppf(0.5 + conf / 2))


def clamp_rate(p: float) -> float:
    return float(min(1.0, max(P_MIN, p if math.isfinite(p) else 1.0)))
