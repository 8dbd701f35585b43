"""Single-stream ``WITH PREFERENCE`` queries on the promising-tuple operators.

:func:`promising_single_plan` maps (everything else returns ``None``; the
engine then raises its error asking for EXACT):

* ``SELECT ... FROM S [RANGE w] WHERE lo <= S.col <= hi ... WITH PREFERENCE ...``
  (BETWEEN, ``>=``/``<=``/``>``/``<`` on one INT column, finite bounds) ->
  a ``pt_select`` node (:class:`PTSelectNode` around
  :class:`sketchql.operators.promising.PTSelection`) between the window scan
  and the nodes above it.  Output: ``+1`` for each selected tuple
  (``at = max(ts, previous step time)``), ``−1`` when it leaves the window
  (the scan's expiration, only for tuples that were reported);
* ``SELECT AVG(S.v) | SUM(S.v) | COUNT(*) | MEDIAN(S.v) FROM S [RANGE w]
  WHERE <range on S.col> WITH PREFERENCE ...`` -> a ``pt_aggregate`` node
  (:class:`PTAggregateNode` around ``PTAggregate``, whose preference is fixed
  by the function, paper 4.3).  Output: one row ``<name>`` (estimate) and
  ``<name>_error`` (~95 % bound), as ``−old/+new`` changes at each step where
  it changed.  The contract ``WITH ERROR e`` is checked on that bound
  (``error <= e * |estimate|``); a miss is counted (``pt_contract_misses``)
  and, with ``ON MISS EXACT``, the answer is replaced by the exact aggregate
  of the stored window tuples (error 0).  ``ON MISS RETURN`` (default) returns
  the estimate; ``ON MISS FAIL`` replaces it with an error row (the aggregate
  and its error NaN, the message in the node's ``pt_contract_error``) from the
  first miss on, until the contract holds again at least a window later -- the
  rule of the exact aggregates' ``ON MISS FAIL`` (:mod:`sketchql.engine.precision`).

Other conjuncts on S stay pushed below the window (they filter before the PT
operator).  Budget: units per arriving tuple exactly as for the join
(:data:`~sketchql.planner.promising_plan.DEFAULT_BUDGET_UNITS`, WITHIN n
PROBES PER TUPLE, WITHIN n MS).

>>> from sketchql.engine import Engine
>>> eng = Engine(seed=1)
>>> eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
>>> q = eng.register("SELECT S.k FROM S [RANGE 10] WHERE S.k BETWEEN 3 AND 5 "
...                  "WITH PREFERENCE desc S.k WITHIN 1000 PROBES PER TUPLE")
>>> eng.push("S", {"ts": [1.0, 2.0, 3.0], "k": [4, 9, 5], "v": [1.0, 2.0, 3.0]})
>>> sorted(q.snapshot()["k"].tolist())
[4, 5]
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..operators.changes import Batch, Changes
from . import ast as A
from .plan import Plan, PlanNode
from .promising_plan import contract_budget

__all__ = ["PTSelectNode", "PTAggregateNode", "promising_single_plan", "SINGLE_UNSUPPORTED"]

#: Message of the error the engine raises when a single-stream WITH PREFERENCE query does not fit.
SINGLE_UNSUPPORTED = (
    "promising-tuple operators through SQL: WITH PREFERENCE is supported for two-stream equi-joins, "
    "single-stream range selections (SELECT ... FROM S [RANGE w] WHERE S.col BETWEEN lo AND hi, INT column, "
    "finite bounds) and single-stream AVG | SUM | COUNT | MEDIAN over such a range (finite RANGE window, "
    "no GROUP BY / HAVING); this single-stream query has another shape; add EXACT to evaluate this query exactly")


def _arrivals(ch):
    if ch is None or not len(ch):
        return None, None
    ins = ch.sign > 0
    dels = ch.take(~ins) if not ins.all() else None
    rows = ch.take(ins) if ins.any() else None
    return rows, dels


class _Base:
    def __init__(self, op, attr, value, window, budget_units):
        self.op, self.attr, self.value = op, attr, value
        self.window = float(window)
        self.budget_units = budget_units
        self._seq = 0
        self.tuples_in = 0
        self.units_given = 0.0
        self.idle_units = 0.0
        self.clock = -math.inf
        #: plan source index of the scan -> 0 (set by the planner when the operator reads the
        #: shared layer); the query feeds the stream rows of the tuples it gives that scan
        self.row_sources: dict = {}
        self._rows_fed: list = []          # stream rows fed to the scan, in scan rid order
        self._rows_base = 0                # scan rid of the first row in _rows_fed

    @property
    def shared(self) -> bool:
        """True when the operator reads the stream attribute's shared value layer."""
        return bool(getattr(self.op, "shared", False))

    def feed_rows(self, side: int, rows) -> None:
        """Stream row ids of the tuples the query feeds to the scan (its next scan rids)."""
        if self.shared:
            self._rows_fed.append(np.asarray(rows, np.int64))

    def _rows_of(self, scan_rid):
        parts = self._rows_fed
        allr = np.concatenate(parts) if len(parts) != 1 else parts[0]
        k = np.asarray(scan_rid, np.int64) - self._rows_base
        if k.shape[0] and (k.min() < 0 or k.max() >= allr.shape[0]):
            from ..errors import SketchQLError
            raise SketchQLError("PT selection over a shared layer: the scan's arrivals do not match the rows fed")
        # a range / unbounded scan emits every fed tuple's +1 in the step it is fed; under the
        # scheduler later steps' rows may already be fed: keep those
        used = int(k.max()) + 1 if k.shape[0] else 0
        self._rows_base += used
        self._rows_fed = [allr[used:]] if used < allr.shape[0] else []
        return allr[k]

    def index_nbytes(self) -> int:
        """Index memory of this query: its row map on the shared layer, or its private layer."""
        return int(self.op.index_nbytes())

    def _empty(self):
        from ..operators.promising import make_batch
        return make_batch(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64),
                          **{self.attr: np.zeros(0, np.int64),
                             **({self.value: np.zeros(0)} if self.value and self.value != self.attr else {})})

    def idle(self, units: float) -> None:
        """Idle time (or a heartbeat) brings ``units`` of work: the operator probes its pending
        regions with it (what it finds is reported at the next step)."""
        if units > 0:
            self.idle_units += float(units)
            self.op.tick(self._empty(), np.array([float(units)]))

    def _feed(self, rows) -> Optional[dict]:
        from ..operators.promising import make_batch
        if rows is None or not len(rows):
            group = getattr(self, "group", None)
            if group is None or group.ticked_at != self._now:
                if group is not None:
                    group.ticked_at = self._now
                self.op.tick(self._empty(), np.zeros(0))
            return None
        ts = rows.rows.ts
        o = np.lexsort((rows.rid, ts))
        n = len(o)
        seq = np.arange(self._seq, self._seq + n, dtype=np.int64)
        self._seq += n
        cols = {self.attr: np.asarray(rows.columns[self.attr]).astype(np.int64)[o]}
        if self.value and self.value != self.attr:
            cols[self.value] = np.asarray(rows.columns[self.value], np.float64)[o]
        units = float(self.budget_units())
        self.units_given += units * n
        self.tuples_in += n
        srows = self._rows_of(rows.rid)[o] if self.shared else None
        group = getattr(self, "group", None)
        if group is None:
            if srows is not None:
                self.op.bind(seq, srows, ts[o])
            self.op.tick(make_batch(np.zeros(n, np.int64), ts[o], seq, **cols), np.full(n, units))
        elif group.ticked_at != self._now:
            # one tick per step for every query sharing the operator (identical arrivals); it brings
            # the budgets of all of them, split by the operator among its queries
            group.ticked_at = self._now
            total = float(sum(m.budget_units() for m in group.members))
            if srows is not None:
                self.op.bind(seq, srows, ts[o])
            self.op.tick(make_batch(np.zeros(n, np.int64), ts[o], seq, **cols), np.full(n, total))
        return {"seq": seq, "order": o}

    def stats(self) -> dict:
        s = self.op.stats()
        return {"pt_operator": type(self.op).__name__, "pt_window": self.window,
                "pt_budget_units_per_tuple": float(self.budget_units()), "pt_units_given": self.units_given,
                "pt_work": float(s["work"]), "pt_probes": int(s["probes"]), "pt_tuples_in": self.tuples_in,
                "pt_idle_units": self.idle_units}


class PTSelectNode(_Base):
    """Exact-operator protocol (``step(now, scan_changes) -> Changes``) around a PTSelection.

    The scan's ``+1`` rows are the arrivals (arrival numbers ``seq`` in (ts, rid)
    order); each step the selection is ticked with ``budget_units()`` per arrival,
    the newly reported tuples still in the window at ``now`` are returned as ``+1``
    rows (the scan's columns and rid, ``at = max(ts, previous step time)``), and the
    scan's expirations of reported tuples are passed through as ``−1`` rows.

    >>> import numpy as np
    >>> from sketchql.operators.promising import build_promising_operator
    >>> op = build_promising_operator({"kind": "selection", "predicates": [(3, 5)], "key": "k", "window": 10.0})
    >>> node = PTSelectNode(op, "k", 10.0, lambda: 1e6)
    >>> b = Batch({"k": np.array([4, 9]), "ts": np.array([1.0, 2.0])}, ts=np.array([1.0, 2.0]))
    >>> node.step(2.0, Changes.inserts(b, b.ts, [0, 1])).columns["k"].tolist()
    [4]
    """

    def __init__(self, op, attr, window, budget_units):
        super().__init__(op, attr, None, window, budget_units)
        self._store = None            # Changes of the +1 rows, by seq
        self._store_seq = np.zeros(0, np.int64)
        self._done = 0                # results already reported
        self._emitted = np.zeros(0, np.int64)   # scan rids reported and not yet expired (sorted)
        self.qi = 0                   # this query's index in a shared PTSelection
        self.group = None             # SelectionGroup when several queries share the operator
        self._now = None

    def step(self, now: float, ch=None) -> Optional[Changes]:
        now = float(now)
        self._now = now
        rows, dels = _arrivals(ch)
        info = self._feed(rows)
        if info is not None:
            new = rows.take(info["order"])
            self._store = new if self._store is None else _cat(self._store, new)
            self._store_seq = np.concatenate([self._store_seq, info["seq"]])
        res = self.op.results()[self.qi]
        fresh = res[self._done:]
        self._done = len(res)
        parts = []
        if dels is not None and len(dels) and len(self._emitted):
            m = np.isin(dels.rid, self._emitted)
            if m.any():
                gone = dels.take(m)
                parts.append(gone)
                self._emitted = np.setdiff1d(self._emitted, gone.rid)
        if len(fresh) and self._store is not None:
            i = np.searchsorted(self._store_seq, fresh)
            ok = i < len(self._store_seq)
            ok[ok] = self._store_seq[i[ok]] == fresh[ok]
            i = i[ok]
            if len(i):
                got = self._store.take(i)
                alive = got.rows.ts > now - self.window
                got = got.take(alive)
                if len(got):
                    at = np.minimum(np.maximum(got.rows.ts, self.clock), now)
                    parts.append(Changes.inserts(got.rows, at, got.rid))
                    self._emitted = np.union1d(self._emitted, got.rid)
        self._prune(now)
        self.clock = max(self.clock, now)
        if not parts:
            return None
        return Changes.concat(parts) if len(parts) > 1 else parts[0]

    def _prune(self, now):
        if self._store is None or not math.isfinite(self.window):
            return
        old = self._store.rows.ts <= now - self.window
        k = int(old.sum())
        if k and 2 * k >= len(old):
            self._store = self._store.take(~old)
            self._store_seq = self._store_seq[~old]

    def state_size(self) -> int:
        return 0 if self._store is None else len(self._store)

    def stats(self) -> dict:
        d = super().stats()
        d.update({"pt_results": self._done, "pt_stored_tuples": self.state_size()})
        return d


def _cat(a: Changes, b: Changes) -> Changes:
    return Changes(Batch.concat([a.rows, b.rows]), np.concatenate([a.sign, b.sign]),
                   np.concatenate([a.at, b.at]), np.concatenate([a.rid, b.rid]), sort=False)


class PTAggregateNode(_Base):
    """Exact-operator protocol around a PTAggregate (one query): after each step the
    answer ``(estimate, error)`` at ``now`` is output as one row ``{name, name_error}``,
    retracting the previous row (``−old/+new`` at ``now``) when it changed.

    >>> import numpy as np
    >>> from sketchql.operators.promising import build_promising_operator
    >>> op = build_promising_operator({"kind": "aggregate", "func": "sum", "predicates": [(0, 9)],
    ...                                "key": "k", "value": "v", "window": 10.0, "domain": (0, 9)})
    >>> node = PTAggregateNode(op, "k", "v", 10.0, lambda: 1e6, "s")
    >>> b = Batch({"k": np.array([4, 9]), "v": np.array([1.5, 2.0]), "ts": np.array([1.0, 2.0])},
    ...           ts=np.array([1.0, 2.0]))
    >>> out = node.step(2.0, Changes.inserts(b, b.ts, [0, 1]))
    >>> out.columns["s"].tolist(), out.columns["s_error"].tolist()
    ([3.5], [0.0])
    """

    def __init__(self, op, attr, value, window, budget_units, name, max_rel_error=None, on_miss=None):
        super().__init__(op, attr, value, window, budget_units)
        self.name = name
        self._last = None
        self.max_rel_error = None if max_rel_error is None else float(max_rel_error)
        self.on_miss = (on_miss or "return").lower()
        if self.on_miss == "exact" and self.max_rel_error is not None and hasattr(op, "keep_all"):
            # the exact fallback reads the window from the operator's layer: a private one must hold
            # every arrival (PTAggregate module doc, "Budget"); a shared one holds them anyway
            op.keep_all = True
        self.misses = 0
        self.exact_fallbacks = 0
        self.failed_since = None      # ON MISS FAIL: when the error row replaced the answer
        self.fail_message = None
        self.failures = 0

    def step(self, now: float, ch=None) -> Optional[Changes]:
        now = float(now)
        rows, _ = _arrivals(ch)
        self._feed(rows)
        est, err = self.op.answer(0, now)
        est, err = float(est), float(err)
        missed = self.max_rel_error is not None and not (err <= self.max_rel_error * abs(est))
        if missed:
            self.misses += 1
            if self.on_miss == "exact":
                est, err = self._exact(now), 0.0
                self.exact_fallbacks += 1
        if self.on_miss == "fail" and self.max_rel_error is not None:
            est, err = self._fail(now, missed, est, err)
        self.clock = max(self.clock, now)
        cur = (est, err)
        if self._last is not None and _same(self._last, cur):
            return None
        parts = []
        if self._last is not None:
            parts.append(Changes.deletes(self._row(*self._last[0:2], self._last[2]), [now], [0]))
        self._last = (est, err, now)
        parts.append(Changes.inserts(self._row(est, err, now), [now], [0]))
        return Changes.concat(parts) if len(parts) > 1 else parts[0]

    def _fail(self, now: float, missed: bool, est: float, err: float):
        """ON MISS FAIL: the answer, or the error row ``(NaN, NaN)`` from a miss on until the
        contract holds again at least a window after the miss that started it."""
        if self.failed_since is None:
            if not missed:
                return est, err
            self.failed_since = now
            self.failures += 1
            self.fail_message = (f"contract WITH ERROR {self.max_rel_error:g} missed at t={now:g} "
                                 f"(estimated {est:.3g} +- {err:.3g})")
            return math.nan, math.nan
        if not missed and now >= self.failed_since + self.window:
            self.failed_since = self.fail_message = None
            return est, err
        return math.nan, math.nan

    def _exact(self, now: float) -> float:
        """The exact aggregate over the window tuples of the operator (read from its layer)."""
        op = self.op
        q = op.queries[0]
        cols = (op.value_attr,) if op.value_attr else ()
        _, t, _, c = op.window_tuples(now - op.window, now, q.lo, q.hi, cols)
        x = c[op.value_attr] if cols else t
        if op.func == "count":
            return float(x.shape[0])
        if op.func == "sum":
            return float(x.sum())
        if not x.shape[0]:
            return float("nan")
        return float(x.mean()) if op.func == "avg" else float(np.median(x))

    def _row(self, est, err, ts):
        return Batch({self.name: np.array([est]), self.name + "_error": np.array([err]),
                      "ts": np.array([float(ts)])}, ts=np.array([float(ts)]))

    def state_size(self) -> int:
        return 0 if self.shared else int(self.op.layer.n)

    def stats(self) -> dict:
        d = super().stats()
        if self._last is not None:
            d.update({"pt_estimate": self._last[0], "pt_error": self._last[1]})
        if self.max_rel_error is not None:
            d.update({"pt_contract_misses": self.misses, "pt_exact_fallbacks": self.exact_fallbacks})
            if self.on_miss == "fail":
                d.update({"pt_contract_failed": self.failed_since is not None,
                          "pt_contract_failures": self.failures, "pt_contract_error": self.fail_message})
        return d


def _same(a, b) -> bool:
    return all((x == y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(a[:2], b[:2]))


# ---------------------------------------------------------------------- mapping
def _cname(c):
    return getattr(c, "cname", None) or c.name


def _num(e):
    if isinstance(e, A.Literal) and isinstance(e.value, (int, float)) and not isinstance(e.value, bool):
        return float(e.value)
    return None


def _range_of(conj):
    """(column, lo, hi) for a range conjunct on one column, else None (INT semantics for < / >)."""
    if isinstance(conj, A.Between) and not conj.negated and isinstance(conj.operand, A.Column):
        lo, hi = _num(conj.low), _num(conj.high)
        if lo is not None and hi is not None:
            return _cname(conj.operand), math.ceil(lo), math.floor(hi)
    if isinstance(conj, A.Compare) and conj.op in ("<", "<=", ">", ">="):
        op, l, r = conj.op, conj.left, conj.right
        if isinstance(r, A.Column) and isinstance(l, A.Literal):
            l, r = r, l
            op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
        v = _num(r)
        if isinstance(l, A.Column) and v is not None:
            if op == ">=":
                return _cname(l), math.ceil(v), math.inf
            if op == ">":
                return _cname(l), math.floor(v) + 1, math.inf
            if op == "<=":
                return _cname(l), -math.inf, math.floor(v)
            return _cname(l), -math.inf, math.ceil(v) - 1
    return None


def _window(scan: PlanNode, bq) -> Optional[float]:
    if bq.query.window is not None:
        return float(bq.query.window)
    w = scan.params["window"]
    if w.kind == "unbounded":
        return math.inf
    if w.kind == "range" and (getattr(w, "slide", None) in (None, 0) or w.slide == w.size):
        return float(w.size)
    return None


class SelectionGroup:
    """SQL selections over one stream sharing one PTSelection (one query per range): the
    operator is ticked once per step with every member's budget; member i reads result i."""

    def __init__(self, op):
        self.op = op
        self.members: list = []
        self.ticked_at = None


def _add_range_query(sel, lo, hi) -> Optional[int]:
    """Add the range query ``[lo, hi]`` to a PTSelection that has not received data yet (its
    per-query state is then empty); returns its index, or None when it cannot be added."""
    return sel.add_query(lo, hi)


def _layer_source(index_for, stream: str, col: str, window: float):
    """The StreamIndex whose value layer the operator reads: any declared index of
    ``stream.col`` (the layer keeps its own history), else the one the engine declares."""
    ix = index_for(stream, col, 0.0, declare=False)
    return ix if ix is not None else index_for(stream, col, window)


def promising_single_plan(plan: Plan, catalog, seed: int, units_per_second: float, selection_pool=None,
                          index_for=None):
    """Rewrite a single-stream selection / aggregate plan (module doc); ``None`` if it does not fit.

    ``selection_pool`` (a dict owned by the engine): range selections over the same stream,
    column, window and remaining filters, registered before data arrived, share one
    PTSelection (one query each; the many-queries operator of paper Figure 8).

    ``index_for(stream, col, window, declare=True)`` (the engine's, with ``share_indexes``):
    the operators read the value layer of the stream attribute's declared index (declared by
    the engine as ``_auto_<stream>_<col>`` if there is none), shared by every selection and
    aggregate on it; an aggregate whose scan keeps other filters gets a private layer (its
    counts must be those of its own input)."""
    from ..operators.promising.aggregates import PTAggregate
    from ..operators.promising.selection import PTSelection

    bq = plan.bound
    if bq.tables or len(bq.streams) != 1 or bq.preference is None:
        return None
    scans = [n for n in plan.root.walk() if n.kind == "scan"]
    if len(scans) != 1 or scans[0].params.get("sample") is not None:
        return None
    scan = scans[0]
    if scan.params.get("prefilter") is not None:
        return None
    window = _window(scan, bq)
    if window is None:
        return None
    src = bq.sources[scan.source]
    # the range: all range conjuncts on the first INT column that has one
    ranges = [(i, r) for i, c in enumerate(scan.params["pushed"]) if (r := _range_of(c)) is not None
              and src.schema.columns.get(r[0]) == "int"]
    if not ranges:
        return None
    col = ranges[0][1][0]
    lo, hi, used = -math.inf, math.inf, set()
    for i, (c, a, b) in ranges:
        if c == col:
            lo, hi = max(lo, a), min(hi, b)
            used.add(i)
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo > hi:
        return None
    parents = {id(c): n for n in plan.root.walk() for c in n.children}
    ct = bq.contract
    budget_units = contract_budget(ct, units_per_second)
    rest = [c for i, c in enumerate(scan.params["pushed"]) if i not in used]
    wtxt = "whole stream" if math.isinf(window) else f"{window:g} s"
    if not bq.is_aggregate:
        parent = parents.get(id(scan))
        if parent is None:
            return None
        ix = _layer_source(index_for, src.schema.name, col, window) if index_for is not None else None
        key = (src.schema.name.lower(), col.lower(), window, repr([str(c) for c in rest]), id(ix))
        group, qi = (selection_pool or {}).get(key), None
        if group is not None:
            qi = _add_range_query(group.op, lo, hi)
        if qi is None:
            op = PTSelection([(lo, hi)], attr=col, window=window, seed=seed, source=ix)
            group, qi = SelectionGroup(op), 0
            if selection_pool is not None:
                selection_pool[key] = group
        op = group.op
        where = f"shared value layer of {ix.decl.name}.{ix.decl.attr}" if ix is not None else "private value layer"
        node = PlanNode("pt_select", f"PromisingTupleSelection {src.alias}.{col} BETWEEN {lo:g} AND {hi:g} "
                        f"PREFERENCE desc WINDOW {wtxt} (index: {where})", children=[scan],
                        params={"attr": col, "lo": lo, "hi": hi, "window_s": window, "index": where},
                        op=PTSelectNode(op, col, window, budget_units), pattern=scan.pattern,
                        structure=f"PT regions (value buckets x time zones) on the {where} + pending-region heap")
        node.op.qi = qi
        if ix is not None:
            node.op.row_sources = {scan.source: 0}
        if len(group.op.queries) > 1 or selection_pool is not None:
            group.members.append(node.op)
            node.op.group = group
        node.params["shared_selection"] = len(group.members)
        parent.children = [node if c is scan else c for c in parent.children]
        scan.params["pushed"] = rest
        plan.engine_reason += "; PTSelection (tuples found within the budget)"
        return plan
    # aggregate: project <- aggregate <- project(args) <- scan
    if bq.group_by or len(bq.aggregates) != 1 or bq.having is not None or math.isinf(window):
        return None
    agg = bq.aggregates[0]
    func = agg.func.lower()
    if func not in ("avg", "sum", "count", "median") or agg.distinct:
        return None
    aggs = [n for n in plan.root.walk() if n.kind == "aggregate"]
    if len(aggs) != 1 or len(aggs[0].params["specs"]) != 1 or aggs[0].params["group_by"]:
        return None
    an = aggs[0]
    if func == "count":
        if agg.args and not isinstance(agg.args[0], A.Column):
            return None
        value = col
    else:
        if len(agg.args) != 1 or not isinstance(agg.args[0], A.Column):
            return None
        value = _cname(agg.args[0])
        if src.schema.columns.get(value) not in ("int", "float"):
            return None
    top = parents.get(id(an))
    if top is None or top.kind != "project" or "compute" not in top.params:
        return None
    if not all(n.kind in ("project",) for n in an.walk() if n is not an and n is not scan):
        return None
    name = an.params["specs"][0]["name"]
    ix = _layer_source(index_for, src.schema.name, col, window) if index_for is not None and not rest else None
    op = PTAggregate([(lo, hi)], func=func, attr=col, value_attr=value, window=window, domain=(lo, hi),
                     seed=seed, source=ix)
    where = f"shared value layer of {ix.decl.name}.{ix.decl.attr}" if ix is not None else "private value layer"
    # the domain is the predicate's range: values outside it go to the index's own
    # under/overflow buckets (never into the edge buckets), which this query does not cover
    an.kind = "pt_aggregate"
    an.children = [scan]
    an.label = (f"PromisingTupleAggregate {func.upper()}({src.alias}.{value if func != 'count' else '*'}) "
                f"WHERE {src.alias}.{col} BETWEEN {lo:g} AND {hi:g} PREFERENCE {op.preference} WINDOW {wtxt} "
                f"(index: {where})")
    an.structure = f"PT regions (value buckets x time zones, exact counts) on the {where} + pending-region heap"
    an.params.update({"attr": col, "value": value, "func": func, "window_s": window, "index": where})
    an.op = PTAggregateNode(op, col, None if func == "count" else value, window, budget_units, name,
                            max_rel_error=ct.error, on_miss=ct.on_miss)
    if ix is not None:
        an.op.row_sources = {scan.source: 0}
    if func == "count":
        an.op.value = value
    scan.params["pushed"] = rest
    outs = [o for o, f in top.params["compute"].items()]
    if len(outs) == 1:
        out = outs[0]
        err = name + "_error"
        top.params["compute"][out + "_error"] = lambda cols, err=err: cols[err]
        plan.output_names = list(plan.output_names) + [out + "_error"]
        bq.types[out + "_error"] = "float"
    plan.engine_reason += "; PTAggregate (estimate and its ~95 % error bound)"
    return plan
