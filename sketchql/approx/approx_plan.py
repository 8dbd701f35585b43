"""Rewrite an exact plan into an approximate one when the query's contract allows error.

:func:`approximate_plan` takes an instantiated exact :class:`~sketchql.planner.plan.Plan`
and, when the contract says ``WITH ERROR e`` (and not ``EXACT``), and the plan
is an aggregate the sampled estimators cover, rewrites it in place:

* every stream scan gets a :class:`~sketchql.approx.sampling.Sampler`
  (``scan.params["sampler"]``; the engine applies it to each batch the query
  receives -- sampling at the query's input queue); a ``SAMPLE`` clause
  becomes the sampler's initial rate; Bernoulli with an outlier index on the
  SUM / AVG arguments, or universe sampling on the argument of
  COUNT(DISTINCT);
* the pre-aggregation projection also carries the row weight ``__w``
  (the product of the members' weights after a join);
* the aggregate becomes an :class:`~sketchql.approx.approx_aggregate.ApproxAggregate`
  at the contract's confidence (0.95 if none);
* the final projection adds ``<col>_lo`` and ``<col>_hi`` after every output
  column that is an aggregate (an expression of aggregates has no interval).

It returns an :class:`ApproxInfo` (also stored as ``plan.approx``), or
``None`` with the reason in ``plan.approx_reason`` when the query stays exact:
no contract / ``EXACT`` / ``WITH PREFERENCE`` (the promising-tuple operators
carry their own precision) / MIN or MAX / COUNT(DISTINCT) mixed with other
aggregates / ROWS or PARTITION windows (sampling does not commute with them)
/ operators other than scan, select, project, join and aggregate.
Initial rates are 1 (exact): the engine's precision manager and the
allocator lower them once the stream statistics are known.

>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.execute("CREATE STREAM F (carrier INT, delay DOUBLE) TIMESTAMP ts")
>>> q = eng.register("SELECT carrier, AVG(delay) AS d FROM F [RANGE 60] GROUP BY carrier "
...                  "WITH ERROR 0.05 CONFIDENCE 0.95")
>>> q.names
['carrier', 'd', 'd_lo', 'd_hi']
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..operators.exact import AggSpec, Project
from .approx_aggregate import APPROXIMABLE, ApproxAggregate
from .sampling import W_COLUMN, Sampler

__all__ = ["ApproxInfo", "approximate_plan", "approximable_reason"]

_OK_KINDS = {"scan", "select", "project", "join", "aggregate", "static_join"}


@dataclass
class ApproxInfo:
    """What the rewrite did: samplers per source index, the aggregate node, the interval columns."""
    samplers: dict                       # source index -> Sampler
    aggregate: object                    # the PlanNode whose op is the ApproxAggregate
    conf: float
    kind: str                            # "aggregate" | "distinct"
    intervals: dict = field(default_factory=dict)    # output column -> (lo column, hi column, func)
    specs: list = field(default_factory=list)         # the aggregate specs (dicts of the planner)
    streams: dict = field(default_factory=dict)       # source index -> stream name
    windows: dict = field(default_factory=dict)       # source index -> window seconds (inf: unbounded)

    @property
    def op(self) -> ApproxAggregate:
        return self.aggregate.op

    def rates(self) -> dict:
        return {i: s.rate for i, s in self.samplers.items()}

    def set_rate(self, rate: float, source: Optional[int] = None):
        for i, s in self.samplers.items():
            if source is None or i == source:
                s.set_rate(rate)


def approximable_reason(plan) -> Optional[str]:
    """None if :func:`approximate_plan` can rewrite ``plan``, else why not."""
    bq = plan.bound
    ct = bq.contract
    if ct.exact:
        return "EXACT requested"
    if ct.error is None:
        return "no WITH ERROR contract: exact"
    if plan.engine != "exact":
        return "WITH PREFERENCE: promising-tuple operators (precision = recall)"
    if not bq.is_aggregate:
        return "not an aggregate query: exact (sampling a set-valued answer only loses rows)"
    kinds = {n.kind for n in plan.nodes}
    bad = kinds - _OK_KINDS
    if bad:
        return f"operators {sorted(bad)} have no sampled estimator: exact"
    aggs = [n for n in plan.nodes if n.kind == "aggregate"]
    if len(aggs) != 1:
        return "more than one aggregate: exact"
    specs = aggs[0].params["specs"]
    funcs = {s["func"] for s in specs}
    if funcs - APPROXIMABLE:
        return f"{', '.join(sorted(f.upper() for f in funcs - APPROXIMABLE))} has no sampled estimator: exact"
    if "count_distinct" in funcs:
        cols = {s["column"] for s in specs}
        if funcs != {"count_distinct"} or len(cols) != 1:
            return "COUNT(DISTINCT) mixed with other aggregates: exact"
        if len(bq.streams) != 1:
            return "COUNT(DISTINCT) over a join: exact"
    for n in plan.nodes:
        if n.kind == "scan":
            w = n.params["window"]
            if w.kind not in ("range", "unbounded", "now"):
                return f"{w.kind.upper()} window: sampling does not commute with it: exact"
    return None


def _raw_column(expr, bq) -> Optional[tuple]:
    """(source index, raw column name) when ``expr`` is a plain column."""
    from ..planner import ast as A
    if isinstance(expr, A.Column) and getattr(expr, "src", None) is not None:
        return int(expr.src), expr.cname
    return None


def _weight_fn(cols):
    ws = [np.asarray(v, np.float64) for c, v in cols.items() if c == W_COLUMN or c.endswith("." + W_COLUMN)]
    if not ws:
        return np.ones(len(cols["__ts"]))
    out = ws[0]
    for w in ws[1:]:
        out = out * w
    return out


def approximate_plan(plan, seed: int = 0, qid: int = 0,
                     stream_keep: Optional[Callable[[str], Callable[[], float]]] = None) -> Optional[ApproxInfo]:
    """Rewrite ``plan`` (instantiated) in place (module doc); returns the :class:`ApproxInfo` or None."""
    why = approximable_reason(plan)
    plan.approx = None
    if why is not None:
        plan.approx_reason = why
        return None
    bq = plan.bound
    agg = next(n for n in plan.nodes if n.kind == "aggregate")
    specs = agg.params["specs"]
    conf = float(bq.contract.confidence or 0.95)
    distinct = all(s["func"] == "count_distinct" for s in specs)
    # the sampling key / outlier columns in raw stream columns
    key = None
    outl: dict = {}
    for k, a in enumerate(bq.aggregates):
        if not a.args:
            continue
        rc = _raw_column(a.args[0], bq)
        if rc is None:
            if distinct:
                plan.approx_reason = "COUNT(DISTINCT) of an expression: exact"
                return None
            continue
        if distinct:
            key = rc
        elif specs[k]["func"] in ("sum", "avg"):
            outl.setdefault(rc[0], []).append(rc[1])
    samplers, streams, windows = {}, {}, {}
    for n in plan.nodes:
        if n.kind != "scan":
            continue
        i = n.source
        src = bq.sources[i]
        rate0 = float(n.params.get("sample") or 1.0)
        n.params["sample"] = None
        if distinct:
            s = Sampler(rate0, "universe", key=key[1], seed=seed, hash_seed=seed * 7919 + 17)
        else:
            s = Sampler(rate0, "bernoulli", outlier_columns=outl.get(i, ()),
                        seed=int(np.random.SeedSequence([seed, qid, i, 11]).generate_state(1)[0]))
        n.params["sampler"] = s
        n.label += " | approx sampler"
        samplers[i] = s
        streams[i] = src.schema.name
        w = n.params["window"]
        windows[i] = float(w.size) if w.kind == "range" else (0.0 if w.kind == "now" else float("inf"))
    # pre-projection: carry the weight
    pre = agg.children[0]
    if pre.kind == "project" and "compute" in pre.params:
        pre.params["compute"] = dict(pre.params["compute"])
        pre.params["compute"][W_COLUMN] = _weight_fn
        pre.op = Project(dict(pre.params["compute"]))
    distinct_rate = None
    hseed = 0
    if distinct:
        i0 = next(iter(samplers))
        s0 = samplers[i0]
        hseed = s0.hash_seed
        keep = stream_keep(streams[i0]) if stream_keep else (lambda: 1.0)
        w0 = windows[i0]
        # the lowest rate used over the window: every part of it kept the values below it
        distinct_rate = lambda now: s0.min_rate_since(now - w0)  # noqa: E731
    aspecs = [AggSpec(s["func"], s["column"], s["name"], s["q"]) for s in specs]
    agg.op = ApproxAggregate(agg.params["group_by"], aspecs, conf=conf, distinct_rate=distinct_rate,
                             hash_seed=hseed, distinct_keep=keep if distinct else None)
    agg.label = "Approx" + agg.label + f" (sampled, intervals at {conf:g})"
    # final projection: interval columns after each plain aggregate output
    root = plan.root
    intervals = {}
    if root.kind == "project" and "compute" in root.params:
        comp = {}
        text2name = {s["text"]: s["name"] for s in specs}
        func_of = {s["name"]: s["func"] for s in specs}
        for name, e in bq.outputs:
            comp[name] = root.params["compute"][name]
            hidden = text2name.get(str(e))
            if hidden is not None:
                comp[name + "_lo"] = (lambda c, h=hidden: c[h + "_lo"])
                comp[name + "_hi"] = (lambda c, h=hidden: c[h + "_hi"])
                intervals[name] = (name + "_lo", name + "_hi", func_of[hidden])
        root.params["compute"] = comp
        root.op = Project(dict(comp))
        plan.output_names = list(comp)
    info = ApproxInfo(samplers, agg, conf, "distinct" if distinct else "aggregate", intervals,
                      list(specs), streams, windows)
    plan.approx = info
    plan.engine = "approximate"          # EXPLAIN, the control tables and the dashboard say so
    plan.approx_reason = (f"approximate: {'universe' if distinct else 'Bernoulli'} sampling at each input, "
                          f"scaled estimates with {conf:g} intervals (contract error {bq.contract.error:g})")
    plan.engine_reason = (plan.engine_reason + "; " if plan.engine_reason else "") + plan.approx_reason
    return info
