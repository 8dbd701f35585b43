"""EXPLAIN: the plan tree with operators, update patterns, state structures and costs.

Each line is one operator; the bracket gives the update pattern of its output
edge (monotonic / weakest / weak / strict), then the state structure and the
cost estimate (rates in tuples/s, state in tuples, work in tuple accesses per
second).  For multi-way joins the global join orders of the eager cost model
are listed cheapest first.

>>> from sketchql.planner.catalog import Catalog, Schema
>>> from sketchql.planner.parser import parse_query
>>> from sketchql.planner.semantic import analyze
>>> from sketchql.planner.plan import plan_query
>>> cat = Catalog(); _ = cat.add_stream(Schema("s", {"a": "int", "ts": "float"}, "ts"))
>>> print(explain_plan(plan_query(analyze(parse_query("SELECT a FROM s [ROWS 5]"), cat))).splitlines()[0])
Plan for: SELECT a FROM s [ROWS 5]
"""
from __future__ import annotations

from .plan import MONO, STRUCTURE, STR, WK, WKS, Plan, PlanNode

__all__ = ["explain_plan"]


def _lines(n: PlanNode, prefix: str, last: bool, root: bool, out: list):
    branch = "" if root else ("└─ " if last else "├─ ")
    op = type(n.op).__name__ if n.op is not None else {
        "scan": "WindowScan", "select": "Select", "project": "Project", "join":
        ("SymmetricHashJoin" if len(n.children) == 2 else "MJoin"), "static_join": "StaticJoin",
        "aggregate": "Aggregate", "distinct": "Distinct",
        "setop": ("UnionAll" if n.params.get("op") == "union" and n.params.get("all") else "SetOp"),
        "semijoin": "SemiJoin"}.get(n.kind, n.kind)
    extra = ""
    if n.kind == "distinct":
        extra = f" mode={n.params.get('mode')}"
    if n.kind == "join" and "order" in n.params:
        al = n.params["aliases"]
        extra = " global order (" + ", ".join(al[i] for i in n.params["order"]) + ")"
    out.append(f"{prefix}{branch}{n.label}  <{op}{extra}>  [{n.pattern}]")
    sub = prefix + ("" if root else ("   " if last else "│  "))
    if n.structure and n.structure != "stateless":
        out.append(f"{sub}    state: {n.structure}")
    if n.cost is not None:
        out.append(f"{sub}    cost: {n.cost}")
    for i, c in enumerate(n.children):
        _lines(c, sub, i == len(n.children) - 1, False, out)


def explain_plan(plan: Plan) -> str:
    """Render a :class:`~sketchql.planner.plan.Plan` as text."""
    bq = plan.bound
    text = " ".join(bq.query.text.split()) if bq.query.text else ""
    if text.upper().startswith("EXPLAIN "):
        text = text[8:]
    out = [f"Plan for: {text}" if text else "Plan"]
    out.append(f"engine: {plan.engine} ({plan.engine_reason})")
    ct = bq.contract
    parts = []
    if ct.exact:
        parts.append("EXACT")
    if ct.error is not None:
        parts.append(f"error <= {ct.error:g}" + (f" at confidence {ct.confidence:g}" if ct.confidence else ""))
    if ct.budget is not None:
        parts.append(f"budget {ct.budget:g} {ct.budget_unit}/tuple")
    if ct.on_miss:
        parts.append(f"on miss {ct.on_miss}")
    if bq.preference is not None:
        parts.append(f"preference {bq.preference.kind} " + ", ".join(map(str, bq.preference.exprs)) +
                     (f", fade {bq.fade:g}" if bq.fade is not None else ""))
    if parts:
        out.append("contract: " + "; ".join(parts))
    view = (bq.stream_op or "relation").upper()
    pat = plan.root.pattern
    res_struct = "array indexed by group" if plan.root.kind in ("project",) and \
        any(n.kind == "aggregate" for n in plan.root.walk()) else STRUCTURE.get(pat, "")
    out.append(f"output: {view} of a {pat} change stream; result view kept as {res_struct}")
    total = plan.total_work()
    out.append(f"estimated total work: {total:.4g} tuple accesses/s")
    if plan.engine == "promising":
        out.append("promising-tuple operators replace the join/selection/aggregate below when available; "
                   "exact plan shown for reference")
    out.append("")
    _lines(plan.root, "", True, True, out)
    if plan.join_orders and len(plan.join_orders) > 1:
        out.append("")
        out.append("join orders (eager multi-way join cost per unit time, cheapest first):")
        shown = plan.join_orders[:6]
        for o, c in shown:
            out.append(f"  ({', '.join(o)}): {c:.6g}")
        if len(plan.join_orders) > 6:
            o, c = plan.join_orders[-1]
            out.append(f"  ... worst ({', '.join(o)}): {c:.6g}")
    legend = {MONO: "append-only", WKS: "expires FIFO", WK: "expires at known times, not FIFO",
              STR: "needs negative tuples"}
    out.append("")
    out.append("update patterns: " + "; ".join(f"{k} = {v}" for k, v in legend.items()))
    return "\n".join(out)
