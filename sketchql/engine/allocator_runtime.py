"""The engine's allocator: measured statistics -> precision models -> knobs, re-planned with hysteresis.

``engine.allocator`` (an :class:`EngineAllocator`) owns the knobs of the
approximate queries: the sampling rate at each query's inputs, for
promising-tuple joins the probe budget per tuple, and -- unless the user set
them by hand -- ``window_scale`` (aggregates with an error contract where
window reduction is allowed; under a kept contract the window stays whole)
and the ``sampler`` (bernoulli or varopt, whichever the model predicts more
precise at the query's memory, by at least 10 % in error).

* **models** (:mod:`sketchql.approx.precision_model`) are built from what the
  engine measures: stream rates (:class:`~sketchql.engine.precision.RateMeter`,
  over half the longest window), bytes per row, the approximate aggregates'
  own groups (estimated rows and coefficient of variation per group), and
  calibrated by the audits (measured vs predicted error; join recall per
  budget).  Exact queries (no contract, ``EXACT``) are not approximated: their
  estimated memory and CPU are taken off the budgets first, and so are the
  **shadow exact plans** (:meth:`EngineAllocator.shadow_resources`): the warm
  standby of ``ON MISS EXACT`` (the query's full exact state) and the audits'
  shadows (``min(1, 2 × audit_share)`` of it, time-averaged: an audited window
  needs a window of warm-up).
* **the problem** is solved by :func:`sketchql.approx.allocator.allocate`
  (weights = query weights, 0 for inactive queries: leftovers only;
  contracts as lower bounds when they fit, reported infeasible otherwise).
  Without budgets every approximate query gets exactly what its contract
  needs (static approximation).
* **promising-tuple joins** (:class:`~sketchql.approx.precision_model.JoinRecallModel`): the
  knobs are the input sampling rate (universe sampling on the join key) and the probe budget per
  tuple.  The user's ``WITHIN b`` (in probes) is the budget's lower bound -- raised, never lowered
  (a ``budget`` set by hand becomes the new floor); under a tight CPU budget the rate goes down
  instead.  The model uses the shares of tuples and pairs the current hash keeps, measured from
  the recent keys (:meth:`~sketchql.approx.sampling.Sampler.key_bins`), not their expectation
  ``p`` (on a skewed key they differ by 10-100x), and the units a join really spends per tuple
  (:meth:`EngineAllocator._units_cap`: a join with few partners per kept key does not spend its
  budget).  Deliberate trade-off: its audit shadow is charged ``2 × audit_share`` of the exact
  join's CPU, time-averaged, also while no audit runs.  ``decision()["per_query"][id]`` says
  what the plan did to the contract and why (``within_probes``, ``tuple_share``, ``pair_share``,
  ``notes``).
* **re-planning**: at once when a query is added / removed / reweighted /
  (de)activated, when a contract, an audit share or a budget changes and when statistics
  first become available; when a stream's measured rate moves by more than
  ``rate_factor`` (1.5×) or a query's group statistics (number of groups, mean
  error factor, estimated window rows) move by more than 50 %, when the tuples a PT join's
  rate lets in move by 25 % or the pairs it keeps by 2×, or a PT join spends 25 % more per
  tuple than planned,
  at most once per ``min_gap`` (half a window) of data time, and applied only
  if it improves the predicted weighted precision by ``hysteresis`` (1 % of
  the total weight; 1 % of the current value when the current knobs leave more than half of
  a budget unused that the new plan uses) or the current knobs no longer fit the budgets (no
  flapping).  A kept plan's predictions are refreshed from the new measurements.

>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.allocator.enabled, eng.allocator.decision()["replans"]
(False, 0)
"""
from __future__ import annotations

import math
import warnings
from typing import Optional

import numpy as np

from ..approx.allocator import allocate
from ..approx.precision_model import AggregateModel, JoinRecallModel, P_MIN
from ..control import jsonable
from ..errors import SketchQLError

__all__ = ["EngineAllocator", "ContractInfeasible"]

#: memory horizon assumed for an UNBOUNDED window (seconds of data)
UNBOUNDED_HORIZON = 3600.0


class ContractInfeasible(SketchQLError):
    """A contract that cannot be met within the engine's budgets (ON MISS FAIL refuses it)."""


class EngineAllocator:
    """See the module doc.  ``decision()`` is JSON-able; ``replan(reason)`` forces a re-plan."""

    def __init__(self, manager):
        self.m = manager
        self.replans = 0
        self.rate_factor = 1.5
        self.hysteresis = 0.01
        self._sig = None
        self._rates_at_plan: dict = {}
        self._stats_at_plan: dict = {}
        self._shares_at_plan: dict = {}
        self._last_plan_t = -math.inf
        self._has_stats = False
        self._decision = {"t": None, "reason": "not planned yet", "memory_bytes": None,
                          "cpu_units_per_s": None, "per_query": {}, "replans": 0}
        self._prev_calib: dict = {}
        self._k_ref: dict = {}             # query id -> pooled error factor of well-sampled groups
        self.history: list = []

    # -- properties ---------------------------------------------------------------------
    @property
    def engine(self):
        return self.m.engine

    @property
    def enabled(self) -> bool:
        b = self.engine.budgets
        return b.get("memory_bytes") is not None or b.get("cpu_units_per_s") is not None

    def decision(self) -> dict:
        return jsonable(dict(self._decision, replans=self.replans, enabled=self.enabled))

    def rate_horizon(self, stream: str) -> float:
        ws = []
        for q in self.engine._queries.values():
            qp = getattr(q, "_precision", None)
            if qp is not None and any(s.schema.name.lower() == stream for s in q.bound.streams):
                if math.isfinite(qp.window) and qp.window > 0:
                    ws.append(qp.window)
        return max(1.0, 0.5 * max(ws)) if ws else 10.0

    # -- statistics -> models -------------------------------------------------------------
    def _stream_rate(self, name: str) -> Optional[float]:
        m = self.m.meters.get(name.lower())
        return m.rate() if m is not None else None

    def _resources_full(self, qp) -> tuple:
        """(memory bytes, cpu units/s) of the query at full rate, from the measured streams."""
        mem = cpu = 0.0
        nodes = len(qp.q.plan.nodes)
        for s in qp.q.bound.streams:
            name = s.schema.name.lower()
            r = self._stream_rate(name) or 0.0
            w = s.window
            W = (float(w.size) if w.kind == "range" else UNBOUNDED_HORIZON if w.kind == "unbounded" else 1.0) \
                if w is not None else 1.0
            if qp.kind == "promising":
                W = qp.window if math.isfinite(qp.window) else UNBOUNDED_HORIZON
                W *= 2.0                  # the PT join keeps its members for two windows
            mem += r * W * self.m.row_bytes.get(name, 32.0)
            cpu += r * nodes
        return mem, cpu

    def model_for(self, qp):
        """The precision model of one query from the current measurements (None: no statistics yet)."""
        if qp.kind in ("aggregate", "distinct"):
            N, k = qp.info.op.group_stats()
            if not len(N) or not any(self._stream_rate(s) for s in qp.info.streams.values()):
                return self._prior_model(qp)
            mem, cpu = self._resources_full(qp)
            keep = self.m.stream_keep(qp.q)
            # group rows at full rate over a full window (scale a partially filled window)
            fill = self._window_fill(qp)
            N = np.asarray(N) / max(fill, 1e-3) / max(keep, 1e-9) * keep
            k = self._robust_k(qp, np.asarray(N, np.float64), np.asarray(k, np.float64))
            calib = qp.model.calib if isinstance(qp.model, AggregateModel) else 1.0
            ct = qp.contract
            osh = self._outlier_share(qp)
            rs = self.row_stats(qp, osh) if qp.kind == "aggregate" else None
            m = AggregateModel(N, k, ct.error or 0.05, ct.confidence or 0.95, mem, cpu, calib=calib,
                               contract=ct.error is not None, outlier_share=osh,
                               window_ok=self._window_ok(qp),
                               out_var=rs["out_var"] if rs else 0.0,
                               varopt_factor=rs["varopt_factor"] if (rs and self._sampler_free(qp)) else None)
            if self._sampler_free(qp) and m.varopt_factor is not None:
                ref = qp.allocated.get("memory") if qp.allocated else None
                m.mode = m.best_mode(ref if ref is not None else mem * (qp.sample_rate() or 1.0))
            elif qp.samplers:
                cur = next(iter(qp.samplers.values())).mode
                m.mode = "varopt" if cur == "varopt" else "bernoulli"
            return m
        if qp.kind == "promising":
            mem, cpu = self._resources_full(qp)
            rate = sum(self._stream_rate(s.schema.name) or 0.0 for s in qp.q.bound.streams)
            if rate <= 0:
                return None
            old = qp.model if isinstance(qp.model, JoinRecallModel) else None
            cd = JoinRecallModel.cdfs([smp.key_bins() for smp in qp.samplers.values()
                                       if smp.mode == "universe" and smp.track_keys])
            ub = self.user_budget(qp)
            return JoinRecallModel(rate_in=rate, memory_full=mem, b0=old.b0 if old else 50.0,
                                   observations=list(old.observations) if old else [],
                                   b_min=float(ub) if ub else 1.0, units_cap=self._units_cap(qp),
                                   cap_rate=qp.sample_rate() or 1.0,
                                   tuple_cdf=cd[0] if cd else None, pair_cdf=cd[1] if cd else None)
        return None

    @staticmethod
    def _pt_node(qp):
        return next((n for n in qp.q.plan.nodes if n.kind == "pt_join"), None)

    @classmethod
    def _probes_per_unit(cls, qp) -> float:
        """Probes per unit of the contract's budget: 1 for ``WITHIN b PROBES``; for ``WITHIN b MS``
        the operator's conversion (its probes per tuple / b)."""
        ct = qp.q.bound.contract
        if (ct.budget_unit or "probes") != "ms" or not ct.budget:
            return 1.0
        n = cls._pt_node(qp)
        try:
            return float(n.op.budget_units()) / float(ct.budget)
        except (AttributeError, TypeError, ZeroDivisionError):  # pragma: no cover
            return 1.0

    @classmethod
    def user_budget(cls, qp) -> Optional[float]:
        """A promising-tuple join's ``WITHIN b`` (in probes per tuple) as the user wrote it (or set
        it by hand with the ``budget`` knob): the allocator writes its own budget into the same
        contract field, so a value that differs from the one it last wrote is the user's."""
        if qp.kind != "promising":
            return None
        cur = qp.q.bound.contract.budget
        if cur is not None and cur != getattr(qp, "_alloc_budget", None):
            qp.user_budget = cur * cls._probes_per_unit(qp)
        return getattr(qp, "user_budget", None)

    def _units_cap(self, qp) -> Optional[float]:
        """Work units a PT join really spends per arriving tuple when it does not spend its budget
        (its kept keys have fewer candidate partners than the budget allows), measured from the
        operator's counters since the last plan (or since registration); None while it spends
        half of what it is given (then the cap is not measured) or has seen fewer than 20 tuples."""
        op = getattr(self._pt_node(qp), "op", None)
        try:
            now = (int(op.tuples_in), float(op.units_given), float(op.op.stats()["work"]))
        except (AttributeError, KeyError, TypeError):
            return None
        # a join holds its members for two windows: before that it has fewer partners than it will
        W = qp.window if math.isfinite(qp.window) and qp.window > 0 else 0.0
        reg = getattr(qp, "registered_at", -math.inf)
        first = min((self.m.meters[s.schema.name.lower()].first for s in qp.q.bound.streams
                     if s.schema.name.lower() in self.m.meters
                     and self.m.meters[s.schema.name.lower()].first is not None), default=None)
        start = max(first if first is not None else math.inf, reg if np.isfinite(reg) else -math.inf)
        if not (np.isfinite(qp.q.clock) and qp.q.clock - start >= 2.0 * W):
            return None
        mark = getattr(qp, "_pt_mark", None) or (0, 0.0, 0.0)
        dt, dg, dw = (a - b for a, b in zip(now, mark[:3]))
        if dt < 20:
            dt, dg, dw = now
        if dt < 20 or dw >= 0.5 * dg:
            return None
        return max(dw / dt, 1.0)

    def _overspent(self, qp) -> Optional[float]:
        """Work units per tuple a PT join spent since its plan, when more than 1.25 × planned."""
        op = getattr(self._pt_node(qp), "op", None)
        mark = getattr(qp, "_pt_mark", None)
        planned = (qp.allocated or {}).get("units_per_tuple")
        if op is None or mark is None or not planned:
            return None
        try:
            dt, dw = int(op.tuples_in) - mark[0], float(op.op.stats()["work"]) - mark[2]
        except (AttributeError, KeyError, TypeError):
            return None
        return dw / dt if dt >= 20 and dw / dt > 1.25 * planned else None

    #: fewest sampled rows of a group whose own error factor (its coefficient of variation) is used
    THIN_ROWS = 20

    def _robust_k(self, qp, N: np.ndarray, k: np.ndarray) -> np.ndarray:
        """Error factors of groups with fewer than ``THIN_ROWS`` sampled rows are not trusted (one
        sampled row has cv 0, which would predict a perfect answer): they get at least the
        pooled factor of the well-sampled groups, or the last well-sampled one, or 1."""
        if qp.kind != "aggregate" or not len(k):
            return k
        rows = N * (qp.sample_rate() or 1.0) * float(qp.window_scale) * self.m.stream_keep(qp.q)
        thin = rows < self.THIN_ROWS
        good = ~thin
        if good.any():
            self._k_ref[qp.q.id] = float(np.sqrt((N[good] * k[good] ** 2).sum() / N[good].sum()))
        if thin.any():
            k = np.where(thin, np.maximum(k, self._k_ref.get(qp.q.id, 1.0)), k)
        return k

    # -- knobs the allocator drives besides the rates: window_scale, sampler -------------------
    def _window_ok(self, qp) -> bool:
        """Window reduction is offered where it is allowed (an aggregate with an error contract,
        RANGE windows, no DISTINCT / negation above them) and the user has not set it by hand
        (the query knob ``window_scale`` written through the control tables pins it)."""
        from ..approx.window_reduction import reduction_blockers
        if qp.kind != "aggregate" or qp.contract.error is None or not qp._base_windows:
            return False
        if reduction_blockers(qp.q.plan):
            return False
        return not getattr(qp, "window_pinned", False)

    def _sampler_free(self, qp) -> bool:
        """The sampler is the allocator's to choose: Bernoulli-family samplers on a SUM / AVG
        argument, not set by hand (the query knob ``sampler`` written by the user pins it)."""
        if qp.kind != "aggregate" or not qp.samplers:
            return False
        smp = list(qp.samplers.values())
        if any(x.mode == "universe" or not x.outlier_columns for x in smp):
            return False
        return not getattr(qp, "sampler_pinned", False)

    def row_stats(self, qp, outlier_share: float) -> Optional[dict]:
        """From the rows the query's window holds now (HT-weighted by ``__w``, so population sums
        are estimated): the share of the estimator's error variance carried by the rows the
        outlier index keeps (``out_var``), and VarOpt's variance relative to Bernoulli without an
        index (``varopt_factor`` = Σ w r² ā/a / Σ w r², a = |x| + mean|x|: priority sampling keeps a
        row with π ≈ p a / ā).  ``r`` is the estimator's residual: x for SUM, x − group mean for AVG
        and quantiles.  None without rows."""
        from ..operators.exact.window import WindowScan
        specs = qp.info.specs if qp.info is not None else []
        funcs = {sp["func"] for sp in specs}
        if not funcs & {"sum", "avg", "median", "quantile"}:
            return None
        xs, ws, gs = [], [], []
        for i, smp in qp.samplers.items():
            scan = qp.q._scan.get(i)
            op = getattr(scan, "op", None)
            if not isinstance(op, WindowScan) or op._cols is None or not smp.outlier_columns:
                continue
            col = smp.outlier_columns[0]
            if col not in op._cols:
                continue
            live = (op._start <= qp.q.clock) & (op._end > qp.q.clock) if np.isfinite(qp.q.clock) else \
                np.ones(len(op._start), bool)
            x = np.asarray(op._cols[col], np.float64)[live]
            w = np.asarray(op._cols.get("__w", np.ones(len(live))), np.float64)[live]
            gcols = [getattr(g, "cname", None) for g in qp.q.bound.group_by]
            gcols = [c for c in gcols if c in op._cols]
            if gcols:
                _, g = np.unique(np.stack([np.asarray(op._cols[c])[live].astype(np.int64, copy=False)
                                           if np.asarray(op._cols[c]).dtype.kind in "iub" else
                                           np.unique(np.asarray(op._cols[c])[live], return_inverse=True)[1]
                                           for c in gcols], 1), axis=0, return_inverse=True)
            else:
                g = np.zeros(len(x), np.int64)
            xs.append(x)
            ws.append(w)
            gs.append(np.asarray(g).ravel())
        if not xs:
            return None
        x, w, g = np.concatenate(xs), np.concatenate(ws), np.concatenate(gs)
        ok = np.isfinite(x) & np.isfinite(w) & (w > 0)
        x, w, g = x[ok], w[ok], g[ok]
        if len(x) < 10:
            return None
        if "sum" in funcs:
            r = x
        else:
            sw = np.bincount(g, w)
            mu = np.bincount(g, w * x) / np.maximum(sw, 1e-300)
            r = x - mu[g]
        r2 = w * r * r
        tot = float(r2.sum())
        if tot <= 0:
            return None
        ax = np.abs(x)
        out_var = 0.0
        if outlier_share > 0:
            order = np.argsort(ax)
            cw = np.cumsum(w[order]) / w.sum()
            tau = ax[order][min(int(np.searchsorted(cw, 1.0 - outlier_share)), len(x) - 1)]
            out_var = float(r2[ax >= tau].sum() / tot)
        a = ax + float((w * ax).sum() / w.sum())
        abar = float((w * a).sum() / w.sum())
        return {"out_var": out_var, "varopt_factor": float((r2 * abar / a).sum() / tot), "rows": int(len(x))}

    @staticmethod
    def _outlier_share(qp) -> float:
        """Share of the rows the query's outlier index keeps on top of the sample: the samplers'
        ``outlier_share`` once their threshold is known (batches of at least 2 / share rows, or a
        remembered threshold), else 0 -- the memory it really costs, not a flat guess."""
        if qp.kind != "aggregate":
            return 0.0
        shares = [s.outlier_share for s in qp.samplers.values()
                  if s.mode in ("bernoulli", "reservoir") and s.outlier_columns and getattr(s, "_tau", None)]
        return float(max(shares)) if shares else 0.0

    def _prior_model(self, qp):
        """Before the query has groups: the planner's view (distinct counts of the stream sample)."""
        mem, cpu = self._resources_full(qp)
        if mem <= 0:
            return None
        name = next(iter(qp.info.streams.values())).lower()
        h = self.engine._streams.get(name)
        rate = self._stream_rate(name) or 0.0
        W = next(iter(qp.info.windows.values()))
        W = W if math.isfinite(W) else UNBOUNDED_HORIZON
        rows = rate * W
        G = 1.0
        if h is not None and qp.q.bound.group_by:
            for g in qp.q.bound.group_by:
                cname = getattr(g, "cname", None)
                if cname in h._distinct_sample:
                    G *= max(1.0, float(len(h._distinct_sample[cname])))
        if qp.kind == "distinct":
            col = qp.info.samplers[next(iter(qp.info.samplers))].key
            rows = float(len(h._distinct_sample.get(col, ()))) if h is not None else rows
            G = 1.0
        ct = qp.contract
        return AggregateModel(np.full(int(G), max(rows / G, 1.0)), np.ones(int(G)), ct.error or 0.05,
                              ct.confidence or 0.95, mem, cpu, contract=ct.error is not None)

    def _window_fill(self, qp) -> float:
        W = max(qp.info.windows.values()) if qp.info.windows else math.inf
        if not math.isfinite(W) or W <= 0:
            return 1.0
        firsts = [self.m.meters[s.lower()].first for s in qp.info.streams.values()
                  if s.lower() in self.m.meters and self.m.meters[s.lower()].first is not None]
        if not firsts:
            return 1.0
        reg = getattr(qp, "registered_at", -math.inf)
        start = max(min(firsts), reg if np.isfinite(reg) else -math.inf)
        return float(np.clip((qp.q.clock - start) / W, 1e-3, 1.0)) if np.isfinite(qp.q.clock) else 1.0

    # -- the plan -----------------------------------------------------------------------
    def _queries(self):
        return [q for q in self.engine._queries.values() if getattr(q, "_precision", None) is not None]

    def _state_key(self) -> tuple:
        """O(1) stand-in for :meth:`_signature`: the engine's query epoch (bumped by every change of
        the registered queries and of what the signature reads from them, ``engine._Queries``) and
        the budgets.  The signature is recomputed only when this key moved."""
        b = self.engine.budgets
        return (getattr(self.engine._queries, "epoch", None), b.get("memory_bytes"), b.get("cpu_units_per_s"))

    def _tracked(self):
        """(queries with precision state, their approximate ones, the ones with an ApproxInfo, min gap),
        cached per query epoch: kind, info and window of a query are fixed at registration."""
        key = getattr(self.engine._queries, "epoch", None)
        c = self.__dict__.get("_tracked_cache")
        if c is None or c[0] != key or key is None:
            qs = self._queries()
            ws = [q._precision.window for q in qs if math.isfinite(q._precision.window)]
            c = self._tracked_cache = (key, qs, [q._precision for q in qs if q._precision.kind != "exact"],
                                       [q for q in qs if q._precision.info is not None],
                                       0.5 * min(ws) if ws else 1.0)
        return c[1:]

    def _signature(self):
        qs = []
        for q in self._queries():
            ct = q.bound.contract
            budget = self.user_budget(q._precision) if q._precision.kind == "promising" else ct.budget
            qs.append((q.id, float(q.weight), bool(q.active), ct.error, ct.confidence, ct.on_miss, budget,
                       ct.exact, q._precision.pinned_rate, float(q._precision.audit_share)))
        b = self.engine.budgets
        return (tuple(sorted(qs)), b.get("memory_bytes"), b.get("cpu_units_per_s"))

    def on_queries_changed(self, reason: str):
        self._sig = None          # next tick re-plans at once
        self._tracked_cache = None

    def replan(self, reason: str = "requested", force: bool = True) -> dict:
        """Re-plan now (applied unconditionally when ``force``); returns the decision."""
        self._plan(reason, force=force)
        return self.decision()

    def _plan(self, reason: str, force: bool):
        eng = self.engine
        qs = self._queries()
        tunable, models, weights = [], [], []
        fixed_mem = fixed_cpu = 0.0
        for q in qs:
            qp = q._precision
            if qp.kind == "exact" or qp.mode != "approx" or qp.pinned_rate is not None:
                # exact queries at full size; an approximate plan switched to its exact standby
                # (ON MISS EXACT) keeps running at its rate (the standby is charged as a shadow)
                mem, cpu = self._resources_full(qp)
                share = 1.0 if qp.kind == "exact" else (qp.pinned_rate if qp.pinned_rate is not None
                                                         else (qp.sample_rate() or 1.0))
                fixed_mem += mem * share
                fixed_cpu += cpu * share
                continue
            m = self.model_for(qp)
            if m is None:
                continue
            qp.model = m
            tunable.append(qp)
            models.append(m)
            weights.append(float(q.weight) if q.active else 0.0)
        b = eng.budgets
        M = b.get("memory_bytes")
        C = b.get("cpu_units_per_s")
        # the shadow exact plans (audits, the ON MISS EXACT standby) hold exact state: charged first
        shadow_mem, shadow_cpu = self.shadow_resources()
        Mleft = None if M is None else max(float(M) - fixed_mem - shadow_mem, 0.0)
        Cleft = None if C is None else max(float(C) - fixed_cpu - shadow_cpu, 0.0)
        now = max((q.clock for q in qs if np.isfinite(q.clock)), default=None)
        if not tunable:
            self._decision = {"t": now, "reason": reason, "memory_bytes": M, "cpu_units_per_s": C,
                              "per_query": {}, "objective": None, "method": "nothing to allocate"}
            return
        if not self.enabled:
            # static approximation: each contract gets exactly what it needs; the rest keep their knobs
            keep = [i for i, m in enumerate(models) if m.needed() is not None]
            tunable = [tunable[i] for i in keep]
            models = [models[i] for i in keep]
            weights = [weights[i] for i in keep]
            knobs = [list(m.needed()) for m in models]
            method = "contract needs (no budgets)"
            infeasible = {}
        else:
            res = allocate(models, weights, Mleft, Cleft)
            knobs, method, infeasible = res.knobs, res.method, res.infeasible
        new_obj = sum(w * m.evaluate(x)[0] for w, m, x in zip(weights, models, knobs))
        if not force:
            cur = [self._current_knobs(qp, m) for qp, m in zip(tunable, models)]
            cur_obj = sum(w * m.evaluate(x)[0] for w, m, x in zip(weights, models, cur))
            cur_mem = sum(m.evaluate(x)[1] for m, x in zip(models, cur))
            cur_cpu = sum(m.evaluate(x)[2] for m, x in zip(models, cur))
            fits = (Mleft is None or cur_mem <= Mleft * 1.02) and (Cleft is None or cur_cpu <= Cleft * 1.02)
            # the current knobs leave more than half of a budget unused that the new plan would use:
            # a relative gain is enough (at tight budgets every precision is far below 1 %)
            new_mem = sum(m.evaluate(x)[1] for m, x in zip(models, knobs))
            new_cpu = sum(m.evaluate(x)[2] for m, x in zip(models, knobs))
            idle = ((Cleft is not None and cur_cpu < 0.5 * min(new_cpu, Cleft)) or
                    (Mleft is not None and cur_mem < 0.5 * min(new_mem, Mleft)))
            gain = new_obj > cur_obj * (1 + self.hysteresis) + 1e-12 if idle else \
                new_obj >= cur_obj + self.hysteresis * max(sum(weights), 1e-9)
            if fits and not gain:
                self._decision["last_check"] = {"t": now, "reason": reason, "kept": True}
                # the knobs stay; their prediction is refreshed from the new measurements
                for qp, m, x in zip(tunable, models, cur):
                    prec, mem, cpu = m.evaluate(x)
                    qp.allocated = {"predicted_precision": prec, "memory": mem, "cpu": cpu}
                    per = self._decision.get("per_query", {}).get(qp.q.id)
                    if per is not None:
                        per.update(predicted_precision=prec, memory=mem, cpu=cpu)
                        if isinstance(m, JoinRecallModel):
                            per.update(self._join_notes(qp, m, x))
                return
        per = {}
        for i, (qp, m, x) in enumerate(zip(tunable, models, knobs)):
            x = self._apply(qp, m, x)
            prec, mem, cpu = m.evaluate(x)
            qp.allocated = {"predicted_precision": prec, "memory": mem, "cpu": cpu}
            if isinstance(m, JoinRecallModel):
                qp.allocated["units_per_tuple"] = float(m._spent(float(x[1]), float(x[0])))
            inf = infeasible.get(i)
            if inf is None and qp.contract.error is not None and not self.enabled:
                inf = None
            was = qp.infeasible
            qp.infeasible = inf
            if inf is not None and was is None:
                warnings.warn(f"query {qp.q.id}: contract WITH ERROR {qp.contract.error:g} is infeasible within "
                              f"the budgets; it would need {jsonable(inf)}", stacklevel=3)
            kn = dict(zip(m.names, x))
            if isinstance(m, AggregateModel) and qp.kind == "aggregate":
                kn["sampler"] = m.mode
            per[qp.q.id] = {"weight": weights[i], "knobs": kn, "predicted_precision": prec,
                            "memory": mem, "cpu": cpu, "infeasible": inf}
            if isinstance(m, JoinRecallModel):
                per[qp.q.id].update(self._join_notes(qp, m, x))
        self.replans += 1
        self._last_plan_t = now if now is not None else self._last_plan_t
        self._rates_at_plan = {n: mt.rate() for n, mt in self.m.meters.items()}
        self._stats_at_plan = {qp.q.id: self._stat_sig(qp) for qp in tunable}
        self._shares_at_plan = {qp.q.id: self._join_shares(qp) for qp in tunable if qp.kind == "promising"}
        self._decision = {"t": now, "reason": reason, "memory_bytes": M, "cpu_units_per_s": C,
                          "memory_exact_queries": fixed_mem, "cpu_exact_queries": fixed_cpu,
                          "memory_shadow_plans": shadow_mem, "cpu_shadow_plans": shadow_cpu,
                          "warning": (None if M is None or fixed_mem + shadow_mem <= float(M) else
                                      "the exact queries and shadow plans alone exceed the memory budget "
                                      "(lower the queries' audit_share or drop ON MISS EXACT)"),
                          "per_query": per, "objective": new_obj, "method": method}
        self.history.append({"t": now, "reason": reason, "objective": new_obj})
        self.history = self.history[-200:]

    def _join_notes(self, qp, m, x) -> dict:
        """What the plan does to a promising-tuple join's contract, and why (for ``decision()``)."""
        g, s = (float(v) for v in m.shares(x[0]))
        ub = self.user_budget(qp)
        notes = []
        if ub:
            notes.append(f"budget {x[1]:.3g} probes per tuple: WITHIN {ub:g} (probes) is a lower bound (kept)"
                         if x[1] <= ub * (1 + 1e-9) else
                         f"budget raised from WITHIN {ub:g} to {x[1]:.3g} probes per tuple (a lower bound)")
        notes.append(f"sample_rate {x[0]:.3g} keeps {100 * s:.3g} % of the input tuples and "
                     f"{100 * g:.3g} % of the join pairs (universe sampling on the join key: "
                     + ("shares measured from the hash of the recent keys)" if m.pair_cdf is not None
                        else "no keys measured yet: expected shares, p)"))
        sh = self.shadow_share(qp)
        if sh > 0:
            notes.append(f"its audit shadow (audit_share {qp.audit_share:g}) is charged "
                         f"{sh:g} x the exact join's memory and CPU, time-averaged")
        return {"within_probes": ub, "tuple_share": s, "pair_share": g, "notes": notes}

    def shadow_share(self, qp) -> float:
        """Time-averaged share of the query's exact state its shadow plan holds: 1 for the warm
        ON MISS EXACT standby (aggregates, and promising-tuple joins and selections), else ``min(1, 2 × audit_share)`` (an audited window
        is compared after a window of warm-up: the shadow lives two windows per audit)."""
        if qp.kind == "exact" or not qp.q.active:
            return 0.0
        if qp.contract.on_miss == "exact" and qp.acts_on_miss():
            return 1.0
        return min(1.0, 2.0 * float(qp.audit_share))

    def shadow_resources(self) -> tuple:
        """(memory bytes, cpu units/s) of every query's shadow exact plan, charged to the budgets."""
        mem = cpu = 0.0
        for q in self._queries():
            qp = q._precision
            share = self.shadow_share(qp)
            if share > 0:
                m, c = self._resources_full(qp)
                mem += share * m
                cpu += share * c
        return mem, cpu

    def _current_knobs(self, qp, m):
        p = qp.sample_rate() or 1.0
        if isinstance(m, JoinRecallModel):
            return [p, qp._budget_now() or 1.0]
        if isinstance(m, AggregateModel) and m.window_ok:
            return [p, float(qp.window_scale)]
        return [p]

    def _apply(self, qp, m, x):
        if isinstance(m, AggregateModel):
            x = m.prefer_sampling(x)
        p = float(np.clip(x[0], P_MIN, 1.0))
        for s in qp.samplers.values():
            s.set_rate(p)
        if isinstance(m, JoinRecallModel) and len(x) > 1:
            b = float(max(x[1], m.bounds()[1][0]))
            self.user_budget(qp)                     # notice a hand-set budget before overwriting it
            qp.q.set_knob("budget", b / self._probes_per_unit(qp))      # in the contract's unit
            qp._alloc_budget = qp.q.bound.contract.budget
            op = getattr(self._pt_node(qp), "op", None)
            try:
                qp._pt_mark = (int(op.tuples_in), float(op.units_given), float(op.op.stats()["work"]))
            except (AttributeError, KeyError, TypeError):
                pass
        if isinstance(m, AggregateModel):
            if m.window_ok:
                sc = float(np.clip(x[1] if len(x) > 1 else 1.0, m.s_min, 1.0))
                if abs(sc - qp.window_scale) > 0.02 * max(qp.window_scale, 1e-9):
                    sig = self._sig
                    qp.set_window_scale(sc)          # (it asks for a re-plan: this is the plan)
                    self._sig = sig
            if self._sampler_free(qp) and m.varopt_factor is not None:
                for smp in qp.samplers.values():
                    smp.set_mode(m.mode)
        return x

    def _join_shares(self, qp) -> Optional[tuple]:
        """(tuples/s the current rate lets into the join, pair share it keeps) on the recent keys."""
        cd = JoinRecallModel.cdfs([smp.key_bins() for smp in qp.samplers.values()
                                   if smp.mode == "universe" and smp.track_keys])
        if cd is None:
            return None
        m = JoinRecallModel(tuple_cdf=cd[0], pair_cdf=cd[1])
        g, sh = m.shares(qp.sample_rate() or 1.0)
        rate = sum(self._stream_rate(s.schema.name) or 0.0 for s in qp.q.bound.streams)
        return float(sh) * rate, float(g)

    def _stat_sig(self, qp):
        if qp.info is None:
            return None
        N, k = qp.info.op.group_stats()
        return (len(N), float(np.mean(k)) if len(k) else 0.0, float(np.sum(N)), self._outlier_share(qp))

    # -- triggers --------------------------------------------------------------------------
    def tick(self, now: float):
        key = self._state_key()
        if self._sig is None or key[0] is None or key != self.__dict__.get("_sig_key"):
            self._sig_key = key
            sig = self._signature()
            if sig != self._sig:
                first = self._sig is None and self.replans == 0
                self._sig = sig
                self._plan("queries, weights, contracts or budgets changed" if not first else "initial plan",
                           force=True)
                self._has_stats = self._stats_ready()
                return
        if not self._has_stats and self._stats_ready():
            self._has_stats = True
            self._plan("statistics available", force=True)
            return
        if not (np.isfinite(now) and now - self._last_plan_t >= self._min_gap()):
            return
        # the streams measured at the plan, in the meters' order (meters are never removed and
        # _rates_at_plan is a snapshot of them); a stream first measured since has no rate to compare
        for n, r0 in self._rates_at_plan.items():
            if not r0:
                continue
            r = self.m.meters[n].rate()
            if r and (r / r0 > self.rate_factor or r0 / r > self.rate_factor):
                self._plan(f"rate of {n} changed {r0:.3g} -> {r:.3g} tuples/s", force=False)
                self._rates_at_plan[n] = r
                return
        # a promising join's kept shares of tuples / pairs moved (the keys' frequencies changed)
        for qp in self._tracked()[1]:
            if qp.kind != "promising":
                continue
            over = self._overspent(qp)
            if over is not None:
                self._plan(f"q{qp.q.id} spends {over:.3g} units per tuple, planned "
                           f"{qp.allocated['units_per_tuple']:.3g}", force=False)
                return
            old = getattr(self, "_shares_at_plan", {}).get(qp.q.id)
            new = self._join_shares(qp)
            if new is None or new == old:
                continue
            # the tuples let in set the CPU and memory (re-plan at 25 %), the pair share the recall
            if old is None or any(n > f * o or o > f * n for n, o, f in zip(new, old, (1.25, 2.0))):
                self._plan(f"input of q{qp.q.id} changed: its rate lets in {new[0]:.3g} tuples/s and keeps "
                           f"{new[1]:.3g} of the pairs" + (f" (planned {old[0]:.3g}, {old[1]:.3g})" if old else ""),
                           force=False)
                self._shares_at_plan[qp.q.id] = new
                return
        for q in self._tracked()[2]:
            qp = q._precision
            old = self._stats_at_plan.get(q.id)
            if qp.info is None or old is None:
                continue
            new = self._stat_sig(qp)
            if old[0] and (abs(new[0] - old[0]) > 0.5 * old[0] or abs(new[1] - old[1]) > 0.5 * max(old[1], 1e-9)
                           or abs(new[2] - old[2]) > 0.5 * max(old[2], 1e-9) or new[3:] != old[3:]):
                self._plan(f"distribution of q{q.id} changed (groups {old[0]} -> {new[0]}, window rows "
                           f"{old[2]:.4g} -> {new[2]:.4g}, outlier index {old[3]:g} -> {new[3]:g})", force=False)
                self._stats_at_plan[q.id] = new
                return

    def _min_gap(self) -> float:
        return self._tracked()[3]

    def _stats_ready(self) -> bool:
        qs = self._tracked()[1]
        if not qs:
            return False
        for qp in qs:
            if qp.kind in ("aggregate", "distinct"):
                if not len(qp.info.op.group_stats()[0]) or self._window_fill(qp) < 0.5:
                    return False
        return True

    # -- audits and registration ---------------------------------------------------------
    def observe_audit(self, qp, r: dict):
        m = qp.model
        if isinstance(m, AggregateModel) and r.get("rel_error") is not None:
            p = qp.sample_rate() or 1.0
            if p < 1.0 or qp.window_scale < 1.0:
                pred = float(np.sqrt(2 / np.pi) * (m.sigma(p, qp.window_scale) * m.share).sum())  # E|N(0,σ²)|
                m.calibrate(r["rel_error"], pred)
        elif isinstance(m, JoinRecallModel) and r.get("recall") is not None:
            p = qp.sample_rate() or 1.0
            keep = self.m.stream_keep(qp.q)
            base = float(m.shares(p)[0]) * keep
            if base > 0:
                m.calibrate(qp._budget_now(), min(r["recall"] / base, 0.999))

    def check_registration(self, qp):
        """At registration: an error contract the budgets cannot hold is reported (FAIL: refused)."""
        if qp.kind not in ("aggregate", "distinct") or qp.contract.error is None or not self.enabled:
            return
        m = self.model_for(qp)
        if m is None:
            return
        need = m.needed()
        _, mem, cpu = m.evaluate(need)
        b = self.engine.budgets
        others_mem = sum(self._resources_full(q._precision)[0] * (q._precision.sample_rate() or 1.0)
                         for q in self._queries() if q is not qp.q)
        others_cpu = sum(self._resources_full(q._precision)[1] * (q._precision.sample_rate() or 1.0)
                         for q in self._queries() if q is not qp.q)
        M, C = b.get("memory_bytes"), b.get("cpu_units_per_s")
        # what is left once every other query is at its floor
        floor_mem = sum(self._resources_full(q._precision)[0] * (P_MIN if q._precision.kind != "exact" else 1.0)
                        for q in self._queries() if q is not qp.q)
        floor_cpu = sum(self._resources_full(q._precision)[1] * (P_MIN if q._precision.kind != "exact" else 1.0)
                        for q in self._queries() if q is not qp.q)
        sh_mem, sh_cpu = self.shadow_resources()
        floor_mem += sh_mem
        floor_cpu += sh_cpu
        bad = (M is not None and mem > M - floor_mem) or (C is not None and cpu > C - floor_cpu)
        if bad:
            inf = {"knobs": {"sample_rate": need[0]}, "memory_bytes": mem + floor_mem, "cpu_units_per_s": cpu + floor_cpu,
                   "budgets": {"memory_bytes": M, "cpu_units_per_s": C},
                   "others_now": {"memory_bytes": others_mem, "cpu_units_per_s": others_cpu}}
            qp.infeasible = inf
            msg = (f"query {qp.q.id}: contract WITH ERROR {qp.contract.error:g} CONFIDENCE "
                   f"{qp.contract.confidence or 0.95:g} is infeasible within the budgets "
                   f"(memory {M}, cpu {C}): it needs sampling rate {need[0]:.3g}, i.e. "
                   f"{mem:.3g} bytes and {cpu:.3g} units/s for itself and "
                   f"{mem + floor_mem:.3g} bytes in total")
            if qp.contract.on_miss == "fail":
                raise ContractInfeasible(msg + "; ON MISS FAIL: not registered")
            warnings.warn(msg, stacklevel=4)
