"""Precision wiring: approximate plans, errors on every answer, audits, contracts and the allocator.

One :class:`PrecisionManager` per :class:`~sketchql.engine.Engine` (``engine._precision``)
connects :mod:`sketchql.approx` to the runtime:

* **registration** (:meth:`PrecisionManager.rewrite`): a query whose contract
  allows error is rewritten by :func:`sketchql.approx.approx_plan.approximate_plan`
  (sampled input, scaled estimates, ``<col>_lo`` / ``<col>_hi``); a promising-tuple
  join gets input samplers too; ``EXACT`` and contract-less queries stay exact.
  Each query gets a :class:`QueryPrecision` (``query.precision()``,
  ``query.precision_series()``);
* **input** (:meth:`PrecisionManager.on_input`): every validated batch feeds the
  shadow exact plans of the audits *before* any reduction, then the stream's
  load shedding (knobs ``sample_rate``, ``shed_rate``, ``shed_key``;
  :func:`sketchql.approx.sampling.shed`) runs, protecting the outliers of the
  columns that approximate SUM / AVG queries on that stream aggregate;
* **each step** of a query (:meth:`QueryPrecision.on_step`, called by
  ``Query._advance``): the estimated error of the live answer (widest relative
  half-interval over its rows), the audit comparison when an audited window is
  being compared, the contract's ``ON MISS`` action (RETURN: flag; EXACT: the
  answer is replaced by the exact plan's -- kept warm as a standby -- until
  the estimate is back within the contract for one window; FAIL: the answer is
  replaced by one error row until then), and one entry of the bounded series;
* **promising-tuple joins and selections**: ``WITH ERROR e`` is a recall contract,
  ``recall >= 1 − e``.  A selection's recall is counted at every step (the share
  of the window's qualifying rows it has served,
  :func:`~sketchql.approx.precision_model.selection_recall`); a join's is the one
  its last audit measured (the exact join exists only where the audit shadow
  runs), and it stands until the next audit -- before the first audit the status
  is "unknown"; under ``ON MISS EXACT`` its standby is warm anyway and it is
  audited at every step.  ``ON MISS EXACT | FAIL`` act on them as on aggregates: EXACT keeps
  the exact plan (same SQL, exact operators) warm as a standby from registration
  and publishes its answer while the contract is missed; if the standby is not
  comparable yet (a query registered mid-stream: one window of warm-up) the
  answer is the error row, with the reason "no exact standby yet", until the
  standby is comparable (then it switches to it).  The answer
  comes back at the first step where the contract holds and a window has passed
  since the switch.  A promising-tuple aggregate checks its contract in its own
  node (:class:`~sketchql.planner.promising_single.PTAggregateNode`); its status
  follows that node's test;
* **after each push** (:meth:`PrecisionManager.after_push`): the
  :class:`EngineAllocator` decides whether to re-plan.

>>> from sketchql.engine import Engine
>>> eng = Engine(seed=1)
>>> eng.execute("CREATE STREAM S (g INT, v DOUBLE) TIMESTAMP ts")
>>> q = eng.register("SELECT g, SUM(v) AS s FROM S [RANGE 100] GROUP BY g WITH ERROR 0.1 CONFIDENCE 0.9")
>>> import numpy as np
>>> eng.push("S", {"ts": np.arange(1000) * 0.1, "g": np.arange(1000) % 2, "v": np.ones(1000)})
>>> p = q.precision(); p["exact"], p["status"] in ("met", "unknown")
(False, True)
"""
from __future__ import annotations

import math
from collections import deque
from typing import Optional

import numpy as np

from ..control import jsonable
from ..operators.changes import Batch, Changes
from ..approx.approx_plan import approximate_plan
from ..approx.window_reduction import apply_window_scale, expected_recall, range_scans
from ..approx.audit import AuditSchedule, compare_aggregate, compare_sets
from ..approx.estimators import relative_halfwidth
from ..approx.precision_model import AggregateModel, JoinRecallModel, P_MIN, selection_recall
from ..approx.sampling import PI_COLUMN, W_COLUMN, Sampler, shed, stream_keep_fn
from .rows_by_rid import RowsByRid

__all__ = ["PrecisionManager", "QueryPrecision", "EngineAllocator", "RateMeter"]

SERIES_MAX = 2000
_SHADOW_RID = 1 << 60
DEFAULT_AUDIT_SHARE = 0.1


class RateMeter:
    """Arrival rate of a stream over the last ``horizon`` seconds of data time."""

    def __init__(self, horizon: float = 10.0):
        self.horizon = float(horizon)
        self._q: deque = deque()
        self._in_q = 0                      # sum of the rows in _q, kept so rate() is O(1)
        self.first = None
        self.last = -math.inf
        self.total = 0

    def add(self, ts: np.ndarray):
        if not len(ts):
            return
        t0, t1 = float(ts[0]), float(ts[-1])
        if self.first is None:
            self.first = t0
        self.last = max(self.last, t1)
        self.total += len(ts)
        self._q.append((t1, len(ts)))
        self._in_q += len(ts)
        while self._q and self._q[0][0] <= self.last - self.horizon:
            self._in_q -= self._q.popleft()[1]

    def __setstate__(self, state: dict):
        self.__dict__.update(state)
        if "_in_q" not in state:            # a checkpoint written before the running sum
            self._in_q = sum(n for _, n in self._q)

    def rate(self) -> Optional[float]:
        if self.first is None or self.last <= self.first:
            return None
        if len(self._q) >= 2 and self.last > self._q[0][0]:
            # rows that arrived in (end of the oldest batch kept, last]: the oldest batch began
            # before the horizon, so counting it over the horizon overstated the rate
            return (self._in_q - self._q[0][1]) / (self.last - self._q[0][0])
        span = min(self.horizon, self.last - self.first)
        return self._in_q / max(span, 1e-9)


def _row_bytes(b: Batch) -> float:
    n = 8.0 + 8.0                                   # ts + weight
    for v in b.columns.values():
        n += 48.0 if v.dtype.kind == "O" else float(v.dtype.itemsize)
    return n


class QueryPrecision:
    """The precision state of one query (see module doc); ``precision()`` / ``series()``."""

    def __init__(self, manager: "PrecisionManager", query, info, kind: str, reason: str):
        self.m = manager
        self.q = query
        self.info = info                    # ApproxInfo (aggregate / distinct) or None
        self.kind = kind                    # exact | aggregate | distinct | promising
        self.reason = reason
        self.samplers = dict(info.samplers) if info is not None else {}
        self.series: deque = deque(maxlen=SERIES_MAX)
        self.audit_share = DEFAULT_AUDIT_SHARE if kind != "exact" else 0.0
        self._pt_misses_seen = 0      # a PT aggregate node's misses already counted (_pt_missed)
        self.audits: deque = deque(maxlen=SERIES_MAX)
        self.n_audits = 0
        self._cov_hits = 0.0
        self._cov_n = 0
        self.window = self._window()
        self.schedule = AuditSchedule(self.audit_share, self.window, seed=manager.engine.seed * 131 + query.id)
        self.shadow = None
        self._shadow_from = math.inf        # time from which the shadow is comparable
        self._shadow_live = RowsByRid()      # the exact answer's live rows, by rid
        self._live = RowsByRid()             # the approximate answer's, with each row's relative half-width
        self.mode = "approx"                 # approx | exact | failed
        self._mode_since = -math.inf
        self._published: dict = {}           # what the query's relation shows when not in approx mode
        self.model = None
        self.user_budget = None              # promising: the user's WITHIN b (PROBES) -- a lower bound
        self._alloc_budget = None            # the budget the allocator last wrote into the contract
        self.allocated: dict = {}
        self.infeasible: Optional[dict] = None
        self.last_audit: Optional[dict] = None
        self.missed_steps = 0
        self.missed_since: Optional[float] = None    # the first step of the current run of misses
        self._last_t = -math.inf
        self._out_rows = 0
        self.error_message: Optional[str] = None
        self.pinned_rate: Optional[float] = None      # a sample_rate set by hand (the allocator keeps off)
        self.window_scale = 1.0                        # window reduction (sketchql.approx.window_reduction)
        self._base_windows = {i: float(n.params["window"].size)
                              for i, n in range_scans(query.plan).items()}

    # the allocator's signature holds these two: a change bumps the engine's query epoch (Query._touch)
    @property
    def pinned_rate(self) -> Optional[float]:
        return self._pinned_rate

    @pinned_rate.setter
    def pinned_rate(self, v) -> None:
        self._pinned_rate = v
        self.q._touch()

    @property
    def audit_share(self) -> float:
        return self._audit_share

    @audit_share.setter
    def audit_share(self, v) -> None:
        self._audit_share = v
        self.q._touch()

    def __setstate__(self, state: dict):
        for k in ("pinned_rate", "audit_share"):   # a checkpoint written before they were properties
            if k in state:
                state["_" + k] = state.pop(k)
        # a checkpoint written before the live rows were columnar held them in dicts
        if isinstance(state.get("_live"), dict):
            state["_live"] = RowsByRid.from_dict(state["_live"], state.pop("_relerr", None))
            state["_shadow_live"] = RowsByRid.from_dict(state.get("_shadow_live") or {})
        self.__dict__.update(state)

    # -- helpers --------------------------------------------------------------
    def _window(self) -> float:
        ws = []
        for n in self.q.plan.nodes:
            if n.kind == "scan":
                w = n.params["window"]
                ws.append(float(w.size) if w.kind == "range" else (math.inf if w.kind == "unbounded" else 0.0))
            if n.kind == "pt_join":
                ws.append(float(n.params.get("window_s", math.inf)))
        return max(ws) if ws else math.inf

    @property
    def contract(self):
        return self.q.bound.contract

    def _names(self):
        return list(self.q.names)

    def _pt_node(self):
        """The plan's promising-tuple node (``pt_join`` / ``pt_select`` / ``pt_aggregate``), if any."""
        if self.kind != "promising":
            return None
        return next((n for n in self.q.plan.nodes if n.kind in ("pt_join", "pt_select", "pt_aggregate")), None)

    @property
    def pt_shape(self) -> Optional[str]:
        """``"join"`` | ``"select"`` | ``"aggregate"`` for a promising-tuple plan, else None."""
        n = self._pt_node()
        return None if n is None else n.kind[3:]

    def acts_on_miss(self) -> bool:
        """Whether this object carries out ``ON MISS EXACT | FAIL`` (:meth:`_on_miss`): sampled
        aggregates and promising-tuple joins and selections.  A promising-tuple aggregate does it in
        its own node (:class:`sketchql.planner.promising_single.PTAggregateNode`, exact answer from
        the operator's stored window), an exact query has no contract to miss."""
        return self.kind in ("aggregate", "distinct") or self.pt_shape in ("join", "select")

    def selection_counts(self, now: float) -> Optional[tuple]:
        """A promising-tuple selection's ``(served, live)`` at ``now``: the rows it reported that are
        still in the window, and the window's rows that satisfy its range predicate (counted on
        the arrivals its node keeps for the window); None for other plans."""
        n = self._pt_node()
        if n is None or n.kind != "pt_select" or n.op is None:
            return None
        node = n.op
        served = int(len(node._emitted))
        st = node._store
        if st is None or not len(st) or not np.isfinite(now):
            return served, served
        rq = node.op.queries[node.qi]
        v = np.asarray(st.columns[node.attr])
        live = int(((st.rows.ts > now - node.window) & (v >= rq.lo) & (v <= rq.hi)).sum())
        return served, max(live, served)

    def measured_recall(self, now: float) -> Optional[float]:
        """The latest measured recall of a promising-tuple join or selection: a selection's is
        counted at every step (:func:`~sketchql.approx.precision_model.selection_recall`), a
        join's is that of its last audit (the exact join is known only where the audit shadow
        runs); it stands until the next audit.  None before any measurement."""
        shape = self.pt_shape
        if shape == "select":
            c = self.selection_counts(now)
            return None if c is None else selection_recall(*c)
        if shape == "join" and self.last_audit is not None:
            return self.last_audit.get("recall")
        return None

    def interval_cols(self) -> dict:
        return {c: (lo, hi) for c, (lo, hi, _f) in self.info.intervals.items()} if self.info else {}

    # -- shadow exact plan (audit / standby) -------------------------------------
    def _want_shadow(self, t: float) -> bool:
        if self.kind == "exact":
            return False
        if self.contract.on_miss == "exact" and self.acts_on_miss():
            return True
        return self.schedule.phase(t) != "off"

    def feed(self, src_index: int, b: Batch, t_hint: float):
        """A raw (validated, not reduced) batch for one of the query's sources."""
        if self.shadow is None and self._want_shadow(t_hint):
            self._start_shadow(t_hint)
        if self.shadow is not None and len(b):
            self.shadow._offer(src_index, b)

    def _start_shadow(self, t: float):
        sh = self.m.shadow_query(self.q)
        if sh is None:
            return
        self.shadow = sh
        self._shadow_live = RowsByRid()
        orig_record = sh._record

        def record(out, _orig=orig_record):          # the exact answer's rows, by rid
            self._shadow_live.apply(out, rid_offset=_SHADOW_RID)
            if self.mode == "exact" and out is not None and len(out):
                self._forward_exact(out)             # the published exact answer follows the standby
            _orig(out)
        sh._record = record
        started_with_query = not np.isfinite(self.q.clock)
        self._shadow_from = -math.inf if (started_with_query or self.schedule.share >= 1.0) else t + self.window
        if np.isfinite(self.q.clock):
            sh.clock = self.q.clock
            for n in sh.plan.nodes:
                if n.op is not None and hasattr(n.op, "clock"):
                    n.op.clock = self.q.clock

    def _advance_shadow(self, now: float):
        sh = self.shadow
        if sh is None:
            return
        sh._advance(now)
        if not self._want_shadow(now) and self.mode != "exact":
            self.shadow = None
            self._shadow_live = RowsByRid()
            self._shadow_from = math.inf

    # -- hooks on the query (installed by :meth:`install`) ------------------------------------
    def install(self):
        """Wrap the query's ``_offer`` (input sampling), ``_record`` (tracking, ON MISS) and
        ``_advance`` (audit, ON MISS decisions, series) on this instance."""
        q = self.q
        orig_offer, orig_record, orig_advance = q._offer, q._record, q._advance
        self._orig_record = orig_record

        def offer(src_index, b, *args, **kw):
            smp = self.samplers.get(src_index)
            scan = q._scan.get(src_index)
            if smp is not None and scan is not None and scan.params.get("sample") not in (None, 1.0):
                # the scan's own knob (PlanNode "sample") would drop rows unweighted: fold it in
                smp.set_rate(float(scan.params["sample"]))
                scan.params["sample"] = None
            if smp is not None and len(b):
                n = len(b)
                b, mask = smp.sample(b)
                if mask is not None:
                    args = tuple(np.asarray(a)[mask] if isinstance(a, np.ndarray) and len(a) == n else a
                                 for a in args)
                    kw = {k: (np.asarray(v)[mask] if isinstance(v, np.ndarray) and len(v) == n else v)
                          for k, v in kw.items()}
            return orig_offer(src_index, b, *args, **kw)

        def record(out):
            out = self.transform(out)
            if out is not None and len(out):
                orig_record(out)

        def advance(now):
            before = q.clock
            orig_advance(now)
            if q.clock != before or now == q.clock:
                self.after_step(q.clock)
        q._offer, q._record, q._advance = offer, record, advance

    def transform(self, out: Optional[Changes]) -> Optional[Changes]:
        """The plan's output of one step: tracked; recorded as is unless the answer is switched."""
        if out is not None and len(out):
            self._out_rows += len(out)
            if self.info is not None and self.info.intervals:
                rel = np.zeros(len(out))
                for c, (lo, hi, _f) in self.info.intervals.items():
                    r = relative_halfwidth(out.columns[c], out.columns[lo], out.columns[hi])
                    r = np.where(np.isfinite(np.asarray(out.columns[c], np.float64)), r, 0.0)
                    rel = np.maximum(rel, r)
                self._live.apply(out, errv=rel)
            elif self.kind != "exact" and (self.audit_share > 0 or self.contract.on_miss in ("exact", "fail")):
                self._live.apply(out)           # for the audits, and for ON MISS to retract the answer
        return out if self.mode == "approx" else None

    def after_step(self, now: float):
        """After each step: shadow, audit, contract check and ON MISS, one series entry."""
        if self.kind == "exact" and self.m.stream_keep(self.q) >= 1.0:
            self._record_series(now, 0.0, None, False)
            return
        self._advance_shadow(now)
        audited = self._audit(now)
        est = self.estimated_rel_error()
        e = self.contract.error
        missed = False
        if e is not None and self.kind in ("aggregate", "distinct"):
            missed = (est is not None and est > e) or (
                audited is not None and audited.get("max_rel_error") is not None and audited["max_rel_error"] > e)
        elif e is not None and self.kind == "promising":
            missed = self._pt_missed(now)
        if missed:
            self.missed_steps += 1
        self._on_miss(now, missed, est)
        if missed or self.mode != "approx":
            if getattr(self, "missed_since", None) is None:
                self.missed_since = now
        else:
            self.missed_since = None
        self._record_series(now, est, audited, missed)

    def miss_note(self) -> Optional[dict]:
        """While the contract is missed: ``{"stream": None, "from": t, "reason": ...}`` for
        ``Query.possibly_imprecise()`` (``t``: the first step of the current run of misses)."""
        t = getattr(self, "missed_since", None)
        if t is None or self.contract.error is None:
            return None
        e = self.contract.error
        if self.kind == "promising" and self.pt_shape in ("join", "select"):
            r = self.measured_recall(self.q.clock)
            what = (f"{'audited' if self.pt_shape == 'join' else 'measured'} recall "
                    f"{'nan' if r is None else format(r, '.3g')} below {1.0 - e:g}")
        else:
            est = self.estimated_rel_error()
            what = f"estimated error {'nan' if est is None else format(est, '.3g')} above {e:g}"
        return {"stream": None, "from": float(t),
                "reason": f"contract WITH ERROR {e:g} missed: {what} (ON MISS {(self.contract.on_miss or 'return').upper()}, "
                          f"answer mode {self.mode})"}

    def _pt_missed(self, now: float) -> bool:
        """The contract of a promising-tuple plan at ``now``.  Join / selection: the latest
        measured recall (:meth:`measured_recall`) is below ``1 − e`` -- a join's audit keeps
        counting until the next audit replaces it, not only at the step where it completed.
        Aggregate: its node found ``error > e · |estimate|`` at this step (the node's test;
        an audit's set comparison does not apply to a value)."""
        e = self.contract.error
        if self.pt_shape == "aggregate":
            node = self._pt_node().op
            # (first use, e.g. restored from a checkpoint written before this counter: no miss is new)
            seen = getattr(self, "_pt_misses_seen", int(getattr(node, "misses", 0)))
            self._pt_misses_seen = int(getattr(node, "misses", 0))
            return self._pt_misses_seen > seen
        r = self.measured_recall(now)
        return r is not None and r < 1.0 - e

    def _join_value_col(self, names) -> Optional[str]:
        """The output column holding a promising-tuple join's key (for Hist-MSE / outliers), if any."""
        if self.kind != "promising":
            return None
        for n in self.q.plan.nodes:
            if n.kind == "pt_join":
                keys = {str(k).lower() for k in n.params.get("keys", ())}
                return next((c for c in names if c.lower() in keys or c.lower().split(".")[-1] in keys), None)
        return None

    def _audit(self, now: float) -> Optional[dict]:
        # a PT join under ON MISS EXACT keeps its exact standby warm anyway: it is audited at every
        # step once the standby is comparable (its recall is known only where the exact join runs)
        every_step = self.pt_shape == "join" and self.contract.on_miss == "exact"
        if self.shadow is None or now < self._shadow_from or (
                self.schedule.phase(now) != "compare" and not every_step):
            return None
        names = self._names()
        ex_names = list(self.shadow.names)
        a = self._live.frame(names)
        x = self._shadow_live.frame(ex_names)
        if self.info is not None and self.info.intervals:
            vals = set(self.info.intervals)
            gcols = [c for c in ex_names if c not in vals]
            r = compare_aggregate(a, x, gcols, self.interval_cols(), self.contract.error)
        else:
            r = compare_sets(a, x, ex_names, value_col=self._join_value_col(ex_names))
            r["rel_error"] = None
        r["t"] = now
        self.n_audits += 1
        if r.get("coverage") is not None:
            self._cov_hits += r["coverage"] * r["n"]
            self._cov_n += r["n"]
        self.audits.append(r)
        self.last_audit = r
        self.m.allocator.observe_audit(self, r)
        return r

    # -- ON MISS ---------------------------------------------------------------------------
    def _publish_switch(self, now: float, old: dict, new: dict, new_is_error: bool = False):
        """Retract the rows of ``old`` and insert those of ``new`` at ``now`` (two records)."""
        names = self._names()
        q = self.q

        def changes(store: dict, sign: int):
            if not store:
                return None
            rids = np.fromiter(store.keys(), np.int64, len(store))
            cols = list(zip(*store.values()))
            data = {}
            for c, vals in zip(names, cols):
                arr = np.array(vals, dtype=object)
                try:
                    arr = np.array(vals)
                except (ValueError, TypeError):  # pragma: no cover
                    pass
                data[c] = arr
            b = Batch(data, ts=np.full(len(rids), now))
            return Changes(b, np.full(len(rids), sign, np.int8), np.full(len(rids), now), rids)
        for part in (changes(old, -1), changes(new, +1)):
            if part is not None and len(part):
                self._orig_record(part)

    def _exact_columns(self):
        """For each of the query's columns, the shadow column holding it (an interval column
        ``x_lo`` / ``x_hi`` holds ``x``: width 0), or None (NaN)."""
        ex = set(self.shadow.names)
        return [c if c in ex else (c[:-3] if c[:-3] in ex else None) for c in self._names()]

    def _exact_rows(self) -> dict:
        """The shadow's live rows in the query's columns (intervals of width 0), ``{rid: tuple}``."""
        sl = self._shadow_live
        if not len(sl):
            return {}
        pos = {c: i for i, c in enumerate(self.shadow.names)}
        cols = [sl._rows.columns[sl._rows.names[pos[c]]].tolist() if c is not None else [np.nan] * len(sl)
                for c in self._exact_columns()]
        return dict(zip(sl.rid.tolist(), zip(*cols)))

    def _forward_exact(self, out: Changes):
        """In exact mode: the standby's changes of a step, in the query's columns, recorded as the
        query's (rids offset like :meth:`_exact_rows`'), so that the published answer stays the
        standby's live rows at O(changes) per step."""
        data = {}
        for c, src in zip(self._names(), self._exact_columns()):
            data[c] = out.columns[src] if src is not None else np.full(len(out), np.nan)
        b = Batch(data, ts=out.rows.ts)
        self._orig_record(Changes(b, out.sign, out.at, out.rid + _SHADOW_RID, sort=False))

    def _error_row(self) -> dict:
        names = self._names()
        msg = (f"contract missed: recall below {1.0 - self.contract.error:g}" if self.kind == "promising"
               else f"contract missed: estimated error above {self.contract.error:g}")
        vals = []
        for c in names:
            sample = self._live.first_row()
            v0 = sample[names.index(c)] if sample is not None else 0.0
            vals.append(msg if isinstance(v0, str) else float("nan"))
        return {(_SHADOW_RID << 1) + 1: tuple(vals)}

    def _on_miss(self, now, missed: bool, est):
        action = self.contract.on_miss or "return"
        if not self.acts_on_miss() or action == "return":
            return
        e = self.contract.error
        if self.mode == "approx":
            if not missed:
                return
            if action == "exact" and self.shadow is not None and now >= self._shadow_from:
                new = self._exact_rows()
                self._publish_switch(now, self._live.as_dict(), new)
                self._published = new
                self.mode = "exact"
            elif action == "fail" or action == "exact":
                if self.kind == "promising":
                    r = self.measured_recall(now)
                    what = "audited" if self.pt_shape == "join" else "measured"
                    self.error_message = (f"query {self.q.id}: contract WITH ERROR {e:g} missed at t={now:g} "
                                          f"({what} recall {r:.3g} below {1.0 - e:g})")
                else:
                    self.error_message = (f"query {self.q.id}: contract WITH ERROR {e:g} missed at t={now:g} "
                                          f"(estimated {est if est is not None else float('nan'):.3g})")
                if action == "exact":
                    self.error_message += "; no exact standby yet: refused"
                new = self._error_row()
                self._publish_switch(now, self._live.as_dict(), new)
                self._published = new
                self.mode = "failed"
            self._mode_since = now
            return
        # exact / failed: the approximate rows keep being maintained in _live
        back = (not missed) and now >= self._mode_since + (self.window if math.isfinite(self.window) else 0.0)
        if (self.mode == "failed" and action == "exact" and not back and self.shadow is not None
                and now >= self._shadow_from):
            # ON MISS EXACT that had to show the error row (no comparable standby yet): the standby
            # has warmed up since -- switch to it
            new = self._exact_rows()
            self._publish_switch(now, self._published, new)
            self._published = new
            self.mode = "exact"
            self.error_message = None
            return
        if self.mode == "exact" and not back:
            return                  # the standby's changes are forwarded as they come (_forward_exact)
        if back:
            if self.mode == "exact":
                self._published = self._exact_rows()       # what the forwarded changes left published
            self._publish_switch(now, self._published, self._live.as_dict())
            self._published = {}
            self.mode = "approx"
            self.error_message = None
            self._mode_since = now

    # -- reading ---------------------------------------------------------------------------
    def estimated_rel_error(self) -> Optional[float]:
        if self.kind == "exact":
            return 0.0
        if self.info is None or not self.info.intervals:
            return None
        return self._live.max_err()

    def estimated_recall(self) -> Optional[float]:
        if self.kind == "exact":
            keep = self.m.stream_keep(self.q)
            if self.window_scale < 1.0:
                keep *= expected_recall(self.q.plan, self.window_scale)
            return keep
        if self.pt_shape == "select":
            c = self.selection_counts(self.q.clock)
            return None if c is None else selection_recall(*c)
        if self.pt_shape == "join" and isinstance(self.model, JoinRecallModel):
            x = [self.sample_rate() or 1.0, float(self.q.bound.contract.budget or self._budget_now())]
            return float(self.model.evaluate(x)[0]) * self.m.stream_keep(self.q)
        if self.kind in ("aggregate", "distinct"):
            return None
        return None

    def _budget_now(self) -> float:
        for n in self.q.plan.nodes:
            if n.kind == "pt_join":
                return float(n.op.budget_units())
        return 0.0

    def sample_rate(self) -> Optional[float]:
        if not self.samplers:
            return None
        return float(min(s.rate for s in self.samplers.values()))

    def audited_coverage(self) -> Optional[float]:
        return self._cov_hits / self._cov_n if self._cov_n else None

    def status(self) -> str:
        if self.kind == "exact":
            return "exact" if self.m.stream_keep(self.q) >= 1.0 and self.window_scale >= 1.0 else "missed"
        if self.infeasible:
            return "infeasible"
        last = self.series[-1] if self.series else None
        if last is None:
            return "unknown"
        if last["missed"] or self.mode != "approx":
            return "missed"
        if self.contract.error is None:
            return "unknown"
        if self.kind in ("aggregate", "distinct") and last.get("estimated_rel_error") is None:
            return "unknown"
        if self.pt_shape in ("join", "select") and self.measured_recall(self.q.clock) is None:
            return "unknown"                # a join before its first audit: nothing measured yet
        return "met"

    def _record_series(self, now, est, audited, missed):
        if now == self._last_t and self.series:
            e = self.series[-1]
            e["missed"] = e["missed"] or missed
            if audited is not None:
                e["audited_rel_error"] = audited.get("rel_error")
                e["recall"] = audited.get("recall")
                e["hist_mse"] = audited.get("hist_mse")
                e["outlier_precision"] = audited.get("outlier_precision")
            return
        dt = now - self._last_t if np.isfinite(self._last_t) else None
        self._last_t = now
        rate = (self._out_rows / dt) if dt else None
        self._out_rows = 0
        h_shed = [self.m.engine._streams[s.schema.name.lower()]._knobs.get("shed_rate", 0.0)
                  for s in self.q.bound.streams] if self.q.bound.streams else [0.0]
        self.series.append({
            "t": now, "estimated_rel_error": est,
            "audited_rel_error": audited.get("rel_error") if audited else None,
            "recall": audited.get("recall") if audited else self.estimated_recall(),
            "coverage": audited.get("coverage") if audited else None,
            "hist_mse": audited.get("hist_mse") if audited else None,
            "outlier_precision": audited.get("outlier_precision") if audited else None, "output_rate": rate,
            "budget_used": self.allocated.get("memory"), "sample_rate": self.sample_rate(),
            "shed_rate": float(max(h_shed)) if h_shed else 0.0, "missed": bool(missed),
            "mode": self.mode})

    def precision(self) -> dict:
        ct = self.contract
        ex = self.kind == "exact" and self.window_scale >= 1.0
        est = self.estimated_rel_error()
        audited_rel = None
        if self.audits:
            vals = [a.get("rel_error") for a in self.audits if a.get("rel_error") is not None]
            audited_rel = float(np.mean(vals[-20:])) if vals else None
        audited_recall = None
        if self.audits:
            rv = [a.get("recall") for a in self.audits if a.get("recall") is not None]
            audited_recall = float(np.mean(rv[-20:])) if rv else None
        knobs = {"sample_rate": self.sample_rate(), "audit_share": self.audit_share, "mode": self.mode,
                 "window_scale": self.window_scale, **({"sampler": self.knobs().get("sampler")}
                                                       if self.kind == "aggregate" else {})}
        if self.kind == "promising":
            knobs["budget"] = self._budget_now()
        d = {"exact": ex and self.m.stream_keep(self.q) >= 1.0,
             "kind": self.kind, "reason": self.reason,
             "contract": {"error": ct.error, "confidence": ct.confidence, "on_miss": ct.on_miss,
                          "budget": ct.budget, "budget_unit": ct.budget_unit, "exact": bool(ct.exact)},
             "estimated": {"rel_error": est, "confidence": (self.info.conf if self.info else
                                                            (1.0 if ex else ct.confidence)),
                           "recall": self.estimated_recall(),
                           "predicted_precision": self.allocated.get("predicted_precision")},
             "audited": {"rel_error": audited_rel, "recall": audited_recall, "n_audits": self.n_audits,
                         "coverage": self.audited_coverage(),
                         "last": self.last_audit},
             "status": self.status(), "knobs": knobs,
             "infeasible": self.infeasible, "error": self.error_message}
        return jsonable(d)

    def precision_series(self, limit: Optional[int] = None) -> list:
        s = list(self.series)
        if limit is not None:
            s = s[-int(limit):] if limit > 0 else []
        return jsonable(s)

    # -- knobs (the query's control table; sketchql.approx.knobs) ---------------------------
    def knobs(self) -> dict:
        ws = {"window_scale": self.window_scale} if self._base_windows else {}
        if self.kind == "exact":
            return ws
        d = {"sample_rate": self.sample_rate(), "audit_share": self.audit_share, **ws}
        if self.kind == "aggregate":
            d["outlier_share"] = next(iter(self.samplers.values())).outlier_share if self.samplers else 0.0
            d["sampler"] = next(iter(self.samplers.values())).mode if self.samplers else "bernoulli"
        return d

    def set_knob(self, name: str, value):
        from ..approx.knobs import QUERY_KNOBS
        v = QUERY_KNOBS[name].coerce(value, where=f"query {self.q.id}")
        if name == "sample_rate":
            self.pinned_rate = v
            if v is not None:
                for smp in self.samplers.values():
                    smp.set_rate(v)
            self.m.allocator.on_queries_changed("sample_rate pinned" if v is not None else "sample_rate released")
        elif name == "outlier_share":
            for smp in self.samplers.values():
                smp.outlier_share = float(v)
        elif name == "audit_share":
            self.set_audit_share(v)
        elif name == "window_scale":
            self.set_window_scale(v)
            self.window_pinned = True           # set by hand: the allocator leaves it alone
        elif name == "sampler":
            for smp in self.samplers.values():
                smp.set_mode(v)
            self.sampler_pinned = True

    def set_window_scale(self, scale: float):
        """Window reduction (:mod:`sketchql.approx.window_reduction`): run the query's RANGE
        windows at ``scale`` times their size; refused where it would increase the output or
        bias an answer that carries no interval."""
        from ..errors import SketchQLError
        s = float(scale)
        if s < 1.0:
            where = f"query {self.q.id}: window reduction refused"
            if self.kind == "promising":
                raise SketchQLError(f"{where}: a promising-tuple join's window is its index horizon "
                                    "(use its budget / sample_rate knobs)")
            if self.kind == "distinct":
                raise SketchQLError(f"{where}: COUNT(DISTINCT) does not scale with the window size")
            if self.kind == "exact" and self.q.bound.is_aggregate:
                raise SketchQLError(f"{where}: an exact aggregate would silently shrink with its window; "
                                    "add WITH ERROR e to get scaled estimates with intervals")
        apply_window_scale(self.q.plan, s, self._base_windows, self.q.clock)
        self.window_scale = s
        for i, smp in self.samplers.items():
            if i in self._base_windows:
                smp.window_scale = s
        self.m.allocator.on_queries_changed("window_scale set")

    def set_audit_share(self, share: float):
        share = float(share)
        if not 0.0 <= share <= 1.0:
            from ..errors import SketchQLError
            raise SketchQLError(f"query {self.q.id}: audit_share must be in [0, 1], got {share}")
        self.audit_share = share
        self.schedule = AuditSchedule(share, self.window, seed=self.m.engine.seed * 131 + self.q.id)


class PrecisionManager:
    """Engine-wide precision wiring (module doc)."""

    def __init__(self, engine):
        self.engine = engine
        self.meters: dict = {}              # stream name (lower) -> RateMeter
        self.row_bytes: dict = {}           # stream name (lower) -> bytes per row
        self._shed_state: dict = {}
        self._shed_rngs: dict = {}
        from .allocator_runtime import EngineAllocator
        self.allocator = EngineAllocator(self)

    # -- registration ---------------------------------------------------------------------
    def rewrite(self, plan, qid: int):
        """Approximate rewrite of an instantiated plan (before the Query object exists)."""
        keep = lambda name: stream_keep_fn(self.engine._streams[name.lower()])  # noqa: E731
        info = approximate_plan(plan, seed=self.engine.seed, qid=qid, stream_keep=keep)
        if info is None and plan.engine == "promising":
            # a promising-tuple join: samplers at its inputs (the allocator trades them for memory).
            # Universe sampling on the join key with one hash for both sides keeps every pair of a
            # kept key: recall p for memory p (independent sampling would give p² -- and so does
            # random load shedding)
            for j in plan.nodes:
                if j.kind != "pt_join":
                    continue
                for side, n in enumerate(j.children):
                    if n.kind == "scan" and "sampler" not in n.params:
                        n.params["sampler"] = Sampler(1.0, "universe", key=j.params["keys"][side],
                                                      hash_seed=self.engine.seed * 7919 + 41)
        return info

    def on_register(self, query):
        plan = query.plan
        info = getattr(plan, "approx", None)
        if info is not None:
            kind = info.kind
        elif plan.engine == "promising":
            kind = "promising"
        else:
            kind = "exact"
        reason = getattr(plan, "approx_reason", "") or plan.engine_reason
        qp = QueryPrecision(self, query, info, kind, reason)
        if kind == "promising":
            qp.samplers = {n.source: n.params["sampler"] for n in plan.nodes
                           if n.kind == "scan" and n.params.get("sampler") is not None}
            # the allocator models the rows / pairs the join-key hash really keeps (JoinRecallModel)
            for smp in qp.samplers.values():
                if smp.mode == "universe":
                    smp.track_keys = True
                    smp.key_bins_horizon = 6.0 * qp.window if math.isfinite(qp.window) and qp.window > 0 else 60.0
            qp.user_budget = query.bound.contract.budget      # WITHIN b PROBES: the allocator's floor
        query._precision = qp
        qp.registered_at = query.clock
        qp.install()
        self.allocator.on_queries_changed("query added")
        self.allocator.check_registration(qp)
        return qp

    def on_deregister(self, query):
        self.allocator.on_queries_changed("query removed")

    def shadow_query(self, query):
        """A hidden exact copy of ``query`` (same SQL, exact operators), fed by :meth:`on_input`."""
        from ..planner.plan import instantiate
        from .query import Query
        eng = self.engine
        plan = eng._plan(query.bound.query)
        instantiate(plan.root, plan.bound, eng._tables)
        sh = Query(query.id + (1 << 30), query.sql, plan, eng.seed)     # an id no real query has
        sh.retain_changes = 0            # its rows are tracked by rid (no change log needed)
        return sh

    # -- data path ---------------------------------------------------------------------
    def stream_keep(self, query) -> float:
        k = 1.0
        for s in query.bound.streams:
            h = self.engine._streams.get(s.schema.name.lower())
            if h is not None:
                k *= stream_keep_fn(h)()
        return k

    def on_input(self, h, b: Batch) -> Batch:
        """Feed shadows with the raw batch, measure the rate, apply the stream's reduction."""
        name = h.name.lower()
        m = self.meters.get(name)
        if m is None:
            m = self.meters[name] = RateMeter(self.allocator.rate_horizon(name))
        if len(b):
            m.add(b.ts)
            self.row_bytes[name] = _row_bytes(b)
        t = float(b.ts[-1]) if len(b) else h.clock
        for q in self.engine._queries.on_stream(name):
            qp = getattr(q, "_precision", None)
            if qp is None or qp.kind == "exact" or not q.active:
                continue
            for s in q.stream_sources()[name]:
                qp.feed(s.index, b, t)
        k = h._knobs
        sr, shr = float(k.get("sample_rate", 1.0)), float(k.get("shed_rate", 0.0) or 0.0)
        if sr >= 1.0 and shr <= 0.0:
            return b
        rng = self._shed_rngs.get(name)
        if rng is None:
            rng = self._shed_rngs[name] = np.random.default_rng([self.engine.seed, 97, len(self._shed_rngs)])
        protect = self._protected_columns(name)
        return shed(b, sr, shr, rng, key=k.get("shed_key"), protect=protect,
                    seed=self.engine.seed * 7919 + 29, state=self._shed_state.setdefault(name, {}))

    def _protected_columns(self, name: str) -> list:
        cols = []
        for q in self.engine._queries.on_stream(name):
            qp = getattr(q, "_precision", None)
            if qp is None or qp.info is None:
                continue
            for i, s in qp.info.samplers.items():
                if qp.info.streams.get(i, "").lower() == name:
                    cols.extend(c for c in s.outlier_columns if c not in cols)
        return cols

    def after_push(self, h):
        self.allocator.tick(h.clock)
