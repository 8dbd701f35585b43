"""Logical and physical plans: AST -> BoundQuery -> plan tree of exact operators.

Pipeline (:func:`plan_query`):

1. **logical plan** (:func:`logical_plan`): a tree of :class:`PlanNode` with
   ``op=None``: per stream a ``scan`` (sampling and pushed-down filters run
   on the raw batch before the window when the window is time-based), an
   optional post-window ``select`` (ROWS / PARTITION windows, where filtering
   does not commute with the window), one ``join`` over all streams (two
   inputs: symmetric hash join; more: MJoin with the probe orders of the
   cost model), ``static_join`` per table (non-retroactive relation), a
   residual ``select``, ``aggregate`` (+ ``having`` select), the final
   ``project`` and ``distinct``.
2. **annotation** (:func:`annotate`): each node's output edge gets its update
   pattern (golab-ozsu update-pattern paper §5.2: windows WKS — UNBOUNDED
   monotonic, PARTITION BY weak —; select/project/NRR-join keep the input's;
   joins WK or STR if an input is STR; group-by always WK; δ* WK) and each
   stateful node the state structure that pattern calls for (FIFO list for
   WKS, expiration-partitioned buffer for WK, negative tuples for STR); δ*
   (``Distinct(mode="replace")``) is chosen when the input is FIFO.
3. **cost** (:func:`estimate`): rates, state sizes and work per unit time per
   node (``sketchql.planner.cost``); the join order is the cheapest global
   order of the multi-join paper's eager cost model.
4. **physical plan** (:func:`instantiate`): the exact operators of
   ``sketchql.operators.exact`` are created from the annotated tree.

>>> from sketchql.planner.catalog import Catalog, Schema
>>> from sketchql.planner.parser import parse_query
>>> from sketchql.planner.semantic import analyze
>>> cat = Catalog(); _ = cat.add_stream(Schema("Sales", {"price": "float", "ts": "float"}, "ts"))
>>> p = plan_query(analyze(parse_query("SELECT SUM(price) FROM Sales [RANGE 10] WHERE price > 4"), cat))
>>> [n.kind for n in p.root.walk()]
['project', 'aggregate', 'project', 'scan']
>>> p.root.children[0].pattern
'weak'
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Callable, Optional

import numpy as np

from ..errors import SketchQLError, SketchQLSemanticError
from . import ast as A
from .compile import compile_expr
from .cost import (DEFAULT_DISTINCT, DEFAULT_RATE, DEFAULT_UNBOUNDED_HORIZON, JoinStream,
                   OperatorCost, all_orders, probe_orders_from_global, selectivity)
from .semantic import BoundQuery, Source

__all__ = ["PlanNode", "Plan", "plan_query", "logical_plan", "annotate", "estimate",
           "instantiate", "choose_engine", "StreamStats", "MONO", "WKS", "WK", "STR"]

MONO, WKS, WK, STR = "monotonic", "weakest", "weak", "strict"
_RANK = {MONO: 0, WKS: 1, WK: 2, STR: 3}

STRUCTURE = {
    MONO: "append-only list (nothing expires)",
    WKS: "FIFO list (expire from the head)",
    WK: "expiration-partitioned buffer (calendar queue)",
    STR: "negative tuples (hash on key)",
}


@dataclass
class StreamStats:
    """What the cost model knows of a stream: rate (tuples/s) and distinct counts per column."""
    rate: float = DEFAULT_RATE
    distinct: dict = field(default_factory=dict)

    def v(self, col) -> float:
        return float(self.distinct.get(col, DEFAULT_DISTINCT) or DEFAULT_DISTINCT)


@dataclass
class PlanNode:
    """A plan operator: ``kind``, parameters, children, and (once instantiated) ``op``.

    ``pattern`` is the update pattern of the node's output edge, ``structure``
    the state structure chosen for it, ``cost`` its estimate.  ``stats()``
    merges the annotations with the operator's own counters; ``knobs()`` /
    ``set_knob`` expose what may be tuned at run time.
    """
    kind: str
    label: str
    children: list = field(default_factory=list)
    params: dict = field(default_factory=dict)
    op: object = None
    pattern: str = ""
    structure: str = ""
    cost: Optional[OperatorCost] = None
    source: Optional[int] = None

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def stats(self) -> dict:
        d = {"node": self.kind, "label": self.label, "update_pattern": self.pattern,
             "state_structure": self.structure}
        if self.cost is not None:
            d["estimated_work_per_s"] = self.cost.work
            d["estimated_state"] = self.cost.state
        if self.op is not None and hasattr(self.op, "stats"):
            d.update(self.op.stats())
        return d

    def knobs(self) -> dict:
        k = {}
        if self.kind == "join" and self.op is not None and hasattr(self.op, "probe_orders"):
            k["probe_orders"] = {i: list(o) for i, o in self.op.probe_orders.items()}
        if self.kind == "scan":
            k["sample"] = self.params.get("sample") or 1.0
        return k

    def set_knob(self, name, value):
        if name == "probe_orders" and self.kind == "join" and hasattr(self.op, "set_probe_order"):
            for i, o in dict(value).items():
                self.op.set_probe_order(int(i), o)
            return
        if name == "sample" and self.kind == "scan":
            v = float(value)
            if not 0 < v <= 1:
                raise SketchQLError(f"sample rate must be in (0, 1], got {value}")
            self.params["sample"] = v
            return
        raise SketchQLError(f"{self.kind} node has no knob {name!r} (knobs: {sorted(self.knobs())})")


@dataclass
class Plan:
    """The planned query: the root node, the chosen engine and the join-order analysis."""
    bound: BoundQuery
    root: PlanNode
    engine: str = "exact"           # exact | promising
    engine_reason: str = ""
    join_orders: list = field(default_factory=list)   # [(order aliases, cost)] cheapest first
    output_names: list = field(default_factory=list)

    @property
    def nodes(self) -> list:
        return list(self.root.walk())

    def total_work(self) -> float:
        return float(sum(n.cost.work for n in self.nodes if n.cost is not None))


# ---------------------------------------------------------------------- helpers
def _q(src: Source, col: str, qualified: bool) -> str:
    return f"{src.alias}.{col}" if qualified else col


def _subst(e, table: dict):
    """Copy of ``e`` where sub-expressions whose text is in ``table`` become hidden columns."""
    key = str(e)
    if key in table:
        c = A.Column(None, table[key], pos=e.pos)
        c.phys = table[key]
        return c
    if isinstance(e, A.Column):
        return e
    if not isinstance(e, A.Expr):
        return e
    kw = {}
    for k, v in vars(e).items():
        if isinstance(v, A.Expr):
            kw[k] = _subst(v, table)
        elif isinstance(v, list):
            kw[k] = [_subst(x, table) if isinstance(x, A.Expr) else x for x in v]
        else:
            kw[k] = v
    new = type(e).__new__(type(e))
    new.__dict__.update(kw)
    return new


def _selectivity_of(conj: list, stats: StreamStats) -> float:
    s = 1.0
    for c in conj:
        if isinstance(c, A.Compare):
            col = c.left.cname if isinstance(c.left, A.Column) else None
            s *= selectivity(c.op, stats.v(col) if col else DEFAULT_DISTINCT)
        elif isinstance(c, A.Between):
            s *= selectivity("between")
        else:
            s *= selectivity("other")
    return s


def _closure(conds: list) -> list:
    """All equalities implied by transitivity (A.k = B.k, B.k = C.k  =>  A.k = C.k).

    Members of one equivalence class are paired across different inputs, so
    every probe order is linked (the multi-join paper's common-attribute case).
    """
    parent = {}

    def find(x):
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x
    for i, ci, j, cj in conds:
        parent[find((i, ci))] = find((j, cj))
    classes = {}
    for x in list(parent):
        classes.setdefault(find(x), []).append(x)
    out, seen = [], set()
    for members in classes.values():
        members.sort()
        for a in range(len(members)):
            for b in range(a + 1, len(members)):
                (i, ci), (j, cj) = members[a], members[b]
                if i == j:
                    continue
                key = (i, ci, j, cj)
                if key not in seen:
                    seen.add(key)
                    out.append(key)
    return out


# ---------------------------------------------------------------------- logical plan
def logical_plan(bq: BoundQuery) -> tuple:
    """Build the logical tree; returns ``(root, output_names)`` (see module docstring).

    A set operation is a ``setop`` node over its two sides' trees (output
    names: the left side's); a subquery in FROM contributes its own tree as
    the leaf of that FROM item; ``[NOT] IN`` / ``[NOT] EXISTS`` add a
    ``semijoin`` node (left: the outer rows after the joins and WHERE; right:
    the subquery's key columns) below the aggregation / projection.
    """
    if bq.setop is not None:
        left, ln = logical_plan(bq.nested[0])
        right, rn = logical_plan(bq.nested[1])
        op, all_ = bq.setop
        word = op.upper() + (" ALL" if all_ else "")
        node = PlanNode("setop", f"{word} ({', '.join(ln)}) vs ({', '.join(rn)})", [left, right],
                        params={"op": op, "all": all_, "columns": list(ln), "right_columns": list(rn)})
        return node, list(ln)
    return _logical_core(bq)


def _logical_core(bq: BoundQuery) -> tuple:
    streams = bq.local_streams
    qualified = len(bq.sources) > 1
    colname_raw = lambda c: getattr(c, "phys", None) or c.cname  # noqa: E731

    def colname_q(c):
        if getattr(c, "phys", None):
            return c.phys
        return _q(bq.sources[c.src], c.cname, qualified)

    leaves = []
    for s in streams:
        if s.derived is not None:
            node, inner_names = logical_plan(s.derived)
            node = PlanNode("project", f"Derived relation {s.alias} ({', '.join(inner_names)})", [node],
                            params={"rename": {c: c for c in inner_names}}, source=None)
            if s.post or s.pushed:
                conj = list(s.pushed) + list(s.post)
                node = PlanNode("select", "Select " + " AND ".join(map(str, conj)) + f" (on {s.alias})",
                                [node], params={"pred": A.BoolOp("and", conj) if len(conj) > 1 else conj[0],
                                                "colname": colname_raw})
            if qualified and len(streams) == 1:
                node = PlanNode("project", f"Rename {s.alias}.*", [node],
                                params={"rename": {f"{s.alias}.{c}": c for c in s.schema.columns}})
            leaves.append(node)
            continue
        w = s.window
        label = f"WindowScan {s.schema.name} AS {s.alias} {w}"
        if s.sample is not None:
            label += f" SAMPLE {s.sample * 100:g}%"
        if s.prefilter is not None:
            label += f" window filter {s.prefilter}"
        if s.pushed:
            label += " | filter " + " AND ".join(map(str, s.pushed)) + " (pushed below the window)"
        node = PlanNode("scan", label, source=s.index,
                        params={"window": w, "sample": s.sample, "prefilter": s.prefilter,
                                "pushed": list(s.pushed), "stream": s.schema.name, "alias": s.alias})
        if s.post:
            node = PlanNode("select", "Select " + " AND ".join(map(str, s.post)) + " (after the window)",
                            [node], params={"pred": A.BoolOp("and", s.post) if len(s.post) > 1 else s.post[0],
                                            "colname": colname_raw})
        if qualified and len(streams) == 1:
            node = PlanNode("project", f"Rename {s.alias}.*", [node],
                            params={"rename": {f"{s.alias}.{c}": c for c in s.schema.columns}})
        leaves.append(node)

    if len(streams) > 1:
        conds = _closure([(i, ci, j, cj) for i, ci, j, cj, _ in bq.join_conds
                          if not bq.sources[i].is_table and not bq.sources[j].is_table])
        pos = {s.index: k for k, s in enumerate(streams)}
        mconds = [((pos[i], ci), (pos[j], cj)) for i, ci, j, cj in conds]
        kind = "SymmetricHashJoin" if len(streams) == 2 else "MJoin"
        desc = " AND ".join(f"{bq.sources[i].alias}.{ci} = {bq.sources[j].alias}.{cj}" for i, ci, j, cj in conds)
        node = PlanNode("join", f"{kind} ON {desc}", leaves,
                        params={"conditions": mconds, "prefixes": [f"{s.alias}." for s in streams],
                                "aliases": [s.alias for s in streams]})
    else:
        node = leaves[0]

    joined = {s.index for s in streams}
    pending = list(bq.local_tables)
    while pending:
        progressed = False
        for t in list(pending):
            on = []
            for i, ci, j, cj, _ in bq.join_conds:
                if i == t.index and j in joined:
                    on.append((_q(bq.sources[j], cj, True), ci))
                elif j == t.index and i in joined:
                    on.append((_q(bq.sources[i], ci, True), cj))
            if on:
                node = PlanNode("static_join", f"StaticJoin {t.schema.name} AS {t.alias} ON " +
                                " AND ".join(f"{a} = {t.alias}.{b}" for a, b in on), [node],
                                source=t.index, params={"on": on, "table": t.schema.name, "alias": t.alias,
                                                        "pushed": list(t.pushed)})
                joined.add(t.index)
                pending.remove(t)
                progressed = True
        if not progressed:  # pragma: no cover - semantic analysis guarantees connectivity
            raise SketchQLSemanticError(f"table {pending[0].alias} is not joined to any stream")
    # join conditions not used by the operators (e.g. a second equality between already joined items)
    used_pairs = set()
    extra = []
    for i, ci, j, cj, p in bq.join_conds:
        si, sj = bq.sources[i], bq.sources[j]
        if si.is_table or sj.is_table:
            continue
        key = (min(i, j), max(i, j), ci, cj)
        if key in used_pairs:
            continue
        used_pairs.add(key)
    residual = list(bq.residual) + extra
    if residual:
        pred = A.BoolOp("and", residual) if len(residual) > 1 else residual[0]
        node = PlanNode("select", f"Select {pred}", [node], params={"pred": pred, "colname": colname_q})

    for k, link in enumerate(bq.sublinks):
        inner, inner_names = logical_plan(link.inner)
        on = [(colname_q(oc), iname) for oc, iname in zip(link.outer, inner_names)]
        word = {("in", False): "IN", ("in", True): "NOT IN", ("exists", False): "EXISTS",
                ("exists", True): "NOT EXISTS"}[(link.kind, link.negated)]
        desc = ", ".join(a for a, _ in on) or "(uncorrelated: is the subquery empty?)"
        node = PlanNode("semijoin", f"{'Anti' if link.negated else 'Semi'}Join {word} on {desc}", [node, inner],
                        params={"on": on, "anti": link.negated, "null_aware": link.null_aware})

    names = [n for n, _ in bq.outputs]
    if bq.is_aggregate:
        table = {}
        pre = {}
        gcols = []
        for k, g in enumerate(bq.group_by):
            nm = f"__g{k}"
            table[str(g)] = nm
            if isinstance(g, A.Column):
                # allow the unqualified / qualified spellings of the same column
                table.setdefault(g.cname, nm)
                table.setdefault(f"{bq.sources[g.src].alias}.{g.cname}", nm)
            pre[nm] = compile_expr(g, colname_q)
            gcols.append(nm)
        specs = []
        for k, a in enumerate(bq.aggregates):
            nm = f"__agg{k}"
            table[str(a)] = nm
            func = "count_distinct" if (a.func == "count" and a.distinct) else a.func
            col = None
            if a.args:
                col = f"__a{k}"
                pre[col] = compile_expr(a.args[0], colname_q)
            q = float(a.args[1].value) if a.func == "quantile" else None
            if func == "count" and a.args:
                # COUNT(expr) counts non-null values: the exact Aggregate's COUNT(col) does that
                pass
            specs.append({"func": func, "column": col, "name": nm, "q": q, "text": str(a)})
        if not specs:
            specs.append({"func": "count", "column": None, "name": "__agg_hidden", "q": None, "text": "COUNT(*)"})
        node = PlanNode("project", "Project group keys and aggregate arguments", [node],
                        params={"compute": pre})
        node = PlanNode("aggregate", "Aggregate " + ", ".join(s["text"] for s in specs) +
                        (" GROUP BY " + ", ".join(map(str, bq.group_by)) if bq.group_by else ""),
                        [node], params={"group_by": gcols, "specs": specs})
        hid = lambda c: getattr(c, "phys", None) or table.get(c.cname) or c.cname  # noqa: E731
        if bq.having is not None:
            h = _subst(bq.having, table)
            node = PlanNode("select", f"Having {bq.having}", [node], params={"pred": h, "colname": hid})
        outs = {n: compile_expr(_subst(e, table), hid) for n, e in bq.outputs}
        node = PlanNode("project", "Project " + ", ".join(names), [node], params={"compute": outs})
    else:
        outs = {n: compile_expr(e, colname_q) for n, e in bq.outputs}
        node = PlanNode("project", "Project " + ", ".join(names), [node], params={"compute": outs})
        if bq.distinct:
            node = PlanNode("distinct", "Distinct " + ", ".join(names), [node], params={"columns": names})
    # the project pipeline above the aggregate pre-projection is a no-op to describe
    if node.kind == "project" and node.children and node.children[0].kind == "project" and False:
        pass  # pragma: no cover
    return node, names


# ---------------------------------------------------------------------- annotation
def annotate(root: PlanNode) -> PlanNode:
    """Label every output edge with its update pattern and pick state structures."""
    for c in root.children:
        annotate(c)
    ins = [c.pattern for c in root.children]
    k = root.kind
    if k == "scan":
        w = root.params["window"]
        root.pattern = {"unbounded": MONO, "partition": WK}.get(w.kind, WKS)
        if w.kind == "unbounded" and (w.start_at is not None or w.end_at is not None):
            root.structure = "append-only list (landmark window: nothing expires)"
        root.structure = root.structure or {"unbounded": "append-only list (nothing expires)",
                                            "partition": "one FIFO list per partition",
                                            "rows": "FIFO ring of the last n rows"}.get(w.kind, STRUCTURE[WKS])
    elif k in ("select", "project"):
        root.pattern = ins[0]
        root.structure = "stateless"
    elif k == "static_join":
        root.pattern = ins[0]        # non-retroactive relation: rule 1
        root.structure = "hash table on the relation (stream side not stored)"
    elif k == "join":
        if STR in ins:
            root.pattern = STR
        elif all(p == MONO for p in ins):
            root.pattern = MONO
        else:
            root.pattern = WK
        root.structure = "; ".join(f"{a}: {STRUCTURE[p]}" for a, p in zip(root.params["aliases"], ins))
    elif k == "aggregate":
        root.pattern = WK            # rule 4: group-by output is always weak
        holistic = [s for s in root.params["specs"] if s["func"] in ("min", "max", "median", "quantile",
                                                                     "count_distinct")]
        root.structure = "array indexed by group" + (
            " + per-group value multiset for " + ", ".join(s["text"] for s in holistic) if holistic else "")
        if ins[0] == STR:
            root.structure += " (input carries negative tuples)"
    elif k == "setop":
        op, all_ = root.params["op"], root.params["all"]
        worst = max(ins, key=lambda p: _RANK[p])
        if op == "union" and all_:
            root.pattern = worst                       # rule 2: merge-union
            root.structure = "stateless (merge of the two inputs)"
        elif op == "except":
            root.pattern = STR                         # rule 5: negation
            root.structure = "counts per value of both inputs (hash on the value); negative tuples"
        else:
            root.pattern = STR if STR in ins else (MONO if all(p == MONO for p in ins) else WK)
            root.structure = "counts per value of both inputs (hash on the value)"
    elif k == "semijoin":
        if root.params["anti"]:
            root.pattern = STR
            root.structure = "left rows + right counts per key; negative tuples when a right arrival matches"
        else:
            root.pattern = STR if STR in ins else (MONO if all(p == MONO for p in ins) else WK)
            root.structure = "left rows + right counts per key"
    elif k == "distinct":
        if ins[0] == MONO:
            root.pattern = MONO
        elif ins[0] == STR:
            root.pattern = STR
        else:
            root.pattern = WK
        fifo = ins[0] in (MONO, WKS)
        root.params["mode"] = "replace" if fifo else "count"
        root.structure = ("δ*: output + youngest duplicate per value (≤ 2× output)" if fifo else
                          "every input copy counted per value (input does not expire FIFO)")
    else:  # pragma: no cover
        root.pattern = ins[0] if ins else WKS
    return root


# ---------------------------------------------------------------------- costs
def estimate(root: PlanNode, bq: BoundQuery, stats: Callable[[str], StreamStats]) -> list:
    """Fill ``node.cost`` bottom-up; returns the join-order table [(aliases, cost)]."""
    orders = []

    def rec(n: PlanNode):
        for c in n.children:
            rec(c)
        if n.kind == "scan":
            src = bq.sources[n.source]
            st = stats(src.schema.name)
            lam = st.rate * (n.params.get("sample") or 1.0)
            sel = _selectivity_of(n.params["pushed"], st) * (0.5 if n.params["prefilter"] is not None else 1.0)
            w = n.params["window"]
            out = lam * sel
            if w.kind == "range":
                N = out * w.size
            elif w.kind in ("rows",):
                N = float(w.size)
            elif w.kind == "partition":
                N = float(w.size) * st.v(w.partition_by[0].cname if w.partition_by else None)
            elif w.kind == "now":
                N = out * 1e-3
            else:
                N = out * DEFAULT_UNBOUNDED_HORIZON
            n.params["_N"] = N
            n.params["_T"] = N / out if out > 0 else 0.0
            n.params["_v"] = {c: st.v(c) for c in src.schema.columns}
            n.cost = OperatorCost(lam, out, N, lam * (1 if n.pattern == MONO else 2))
        elif n.kind in ("select", "project"):
            c = n.children[0]
            rin = c.cost.rate_out
            sel = 0.5 if n.kind == "select" else 1.0
            n.params["_N"] = c.params.get("_N", 0.0) * sel
            n.params["_T"] = c.params.get("_T", 0.0)
            n.params["_v"] = c.params.get("_v", {})
            n.cost = OperatorCost(rin, rin * sel, 0.0, rin * (2 if n.pattern == STR else 1))
        elif n.kind == "join":
            js = []
            for k, c in enumerate(n.children):
                # distinct join values of input k: those of its first join column
                col = next((ci for (i, ci), (j, cj) in n.params["conditions"] if i == k), None) or \
                    next((cj for (i, ci), (j, cj) in n.params["conditions"] if j == k), None)
                v = c.params.get("_v", {}).get(col, DEFAULT_DISTINCT)
                rate = c.cost.rate_out
                T = c.params.get("_T", 0.0)
                js.append(JoinStream(rate, T, v))
            conds = n.params["conditions"]

            def linked(i, rest):
                bound = {i}
                for r in rest:
                    if not any((a == r and b in bound) or (b == r and a in bound) for (a, _), (b, _) in conds):
                        return False
                    bound.add(r)
                return True
            table = all_orders(js, linked)
            best, cost = table[0]
            if not np.isfinite(cost):
                best = tuple(range(len(js)))
            n.params["order"] = best
            n.params["probe_orders"] = probe_orders_from_global(best)
            aliases = n.params["aliases"]
            orders.extend([(tuple(aliases[i] for i in o), c) for o, c in table])
            from .cost import phi
            size = phi(js, list(range(len(js))))
            rate_out = sum(size / s.window for s in js if s.window > 0)
            factor = 2 if n.pattern == STR else 1
            n.params["_N"] = size
            n.params["_T"] = min((s.window for s in js), default=0.0)
            merged = {}
            for k, c in enumerate(n.children):
                for col, v in c.params.get("_v", {}).items():
                    merged[f"{aliases[k]}.{col}"] = v
            n.params["_v"] = merged
            n.cost = OperatorCost(sum(s.rate for s in js), rate_out, sum(s.size for s in js),
                                  factor * (cost if np.isfinite(cost) else 0.0))
        elif n.kind == "static_join":
            c = n.children[0]
            rin = c.cost.rate_out
            n.params["_N"] = c.params.get("_N", 0.0)
            n.params["_T"] = c.params.get("_T", 0.0)
            n.params["_v"] = c.params.get("_v", {})
            n.cost = OperatorCost(rin, rin, 0.0, rin)
        elif n.kind == "aggregate":
            c = n.children[0]
            rin = c.cost.rate_out
            holistic = any(s["func"] in ("min", "max", "median", "quantile", "count_distinct")
                           for s in n.params["specs"])
            groups = 1.0
            for g in n.params["group_by"]:
                groups *= DEFAULT_DISTINCT
            groups = min(groups, max(c.params.get("_N", 1.0), 1.0)) if n.params["group_by"] else 1.0
            C = max(c.params.get("_N", 1.0) / groups, 1.0) if holistic else 1.0
            n.params["_N"] = groups
            n.cost = OperatorCost(rin, 2 * rin, groups, 2 * rin * C)
        elif n.kind in ("setop", "semijoin"):
            l, r = n.children
            r1, r2 = l.cost.rate_out, r.cost.rate_out
            N1, N2 = l.params.get("_N", 0.0), r.params.get("_N", 0.0)
            op, all_ = n.params.get("op", "semijoin"), n.params.get("all", False)
            d1, d2 = max(min(N1, DEFAULT_DISTINCT), 2.0), max(min(N2, DEFAULT_DISTINCT), 2.0)
            if op == "union" and all_:
                work, out, N = r1 + r2, r1 + r2, N1 + N2          # merge: Σλ
            elif op == "intersect":
                work, out, N = r1 * N1 + r2 * N2, min(r1, r2), min(N1, N2)   # like a join (§5.4.1)
            elif op == "union":
                work, out, N = 2 * r1 * np.log2(d1) + 2 * r2 * np.log2(d2), r1 + r2, N1 + N2
            else:   # negation and semi-joins: counts binary-searched by value, 2λ1 log d1 + 2λ2 log d2
                work, out, N = 2 * r1 * np.log2(d1) + 2 * r2 * np.log2(d2), r1, N1
            n.params["_N"] = N
            n.params["_T"] = max(l.params.get("_T", 0.0), r.params.get("_T", 0.0))
            n.params["_v"] = l.params.get("_v", {})
            n.cost = OperatorCost(r1 + r2, out, N1 + N2, float(work))
        elif n.kind == "distinct":
            c = n.children[0]
            rin = c.cost.rate_out
            No = min(c.params.get("_N", 1.0), DEFAULT_DISTINCT)
            n.params["_N"] = No
            n.cost = OperatorCost(rin, rin, 2 * No, rin * No / 2 * (2 if n.pattern == STR else 1))
    rec(root)
    return orders


# ---------------------------------------------------------------------- engine choice
def choose_engine(bq: BoundQuery, exact_work_per_tuple: float) -> tuple:
    """Exact or promising-tuple operators, from the contract (and a simple cost test).

    * ``EXACT`` or no ``WITH PREFERENCE``: exact.
    * ``WITH PREFERENCE``: promising tuples, except when the contract says
      ``ON MISS EXACT`` with a probe budget that the exact plan's estimated
      work per input tuple already fits in (then exact answers cost no more).
    """
    ct = bq.contract
    if ct.exact:
        return "exact", "EXACT requested"
    if bq.preference is None:
        return "exact", "no WITH PREFERENCE clause"
    if (ct.on_miss == "exact" and ct.budget is not None and ct.budget_unit == "probes"
            and exact_work_per_tuple <= ct.budget):
        return "exact", (f"exact work {exact_work_per_tuple:.3g} probes/tuple fits the budget "
                         f"{ct.budget:g} (ON MISS EXACT)")
    why = "WITH PREFERENCE " + bq.preference.kind
    if ct.budget is not None:
        why += f", budget {ct.budget:g} {ct.budget_unit}/tuple"
    return "promising", why


def promising_available() -> bool:
    try:
        return importlib.util.find_spec("sketchql.operators.promising") is not None
    except (ImportError, ValueError):  # pragma: no cover
        return False


# ---------------------------------------------------------------------- physical plan
def instantiate(root: PlanNode, bq: BoundQuery, tables: Optional[dict] = None) -> PlanNode:
    """Create the exact operators for every node (``tables``: name -> Batch of static rows)."""
    from ..operators import exact as X

    for n in root.walk():
        k = n.kind
        if k == "scan":
            w = n.params["window"]
            if w.kind == "range":
                spec = X.WindowSpec.range(w.size, w.slide)
            elif w.kind == "rows":
                spec = X.WindowSpec.rows(int(w.size))
            elif w.kind == "partition":
                spec = X.WindowSpec.partitioned([c.cname for c in w.partition_by], int(w.size))
            elif w.kind == "now":
                spec = X.WindowSpec.now()
            elif w.start_at is not None or w.end_at is not None:
                spec = X.WindowSpec.landmark(w.start_at, w.end_at)
            else:
                spec = X.WindowSpec.unbounded()
            n.op = X.WindowScan(spec)
            filters = ([n.params["prefilter"]] if n.params["prefilter"] is not None else []) + n.params["pushed"]
            n.params["filter_fns"] = [compile_expr(f, lambda c: c.cname) for f in filters]
        elif k == "select":
            n.op = X.Select(compile_expr(n.params["pred"], n.params["colname"]))
        elif k == "project":
            if "rename" in n.params:
                n.op = X.Project(dict(n.params["rename"]))
            else:
                n.op = X.Project(dict(n.params["compute"]))
        elif k == "join":
            conds = n.params["conditions"]
            if len(n.children) == 2:
                on = []
                for (i, ci), (j, cj) in conds:
                    on.append((ci, cj) if i == 0 else (cj, ci))
                n.op = X.SymmetricHashJoin(on, prefixes=tuple(n.params["prefixes"]))
            else:
                n.op = X.MJoin(len(n.children), conds, prefixes=n.params["prefixes"],
                               probe_orders=n.params.get("probe_orders"))
        elif k == "static_join":
            tb = (tables or {}).get(n.params["table"].lower())
            src = bq.sources[n.source]
            tb = _filtered_table(tb, src, n.params["pushed"])
            n.params["source_schema"] = src.schema
            n.op = X.StaticJoin(tb, on=n.params["on"], prefix=f"{n.params['alias']}.")
        elif k == "aggregate":
            specs = [X.AggSpec(s["func"], s["column"], s["name"], s["q"]) for s in n.params["specs"]]
            n.op = X.Aggregate(n.params["group_by"], specs)
        elif k == "distinct":
            n.op = X.Distinct(n.params["columns"], mode=n.params.get("mode", "replace"))
        elif k == "setop":
            if n.params["op"] == "union" and n.params["all"]:
                n.op = X.UnionAll(n.params["columns"], n.params["right_columns"])
            else:
                n.op = X.SetOp(n.params["op"], n.params["all"], n.params["columns"], n.params["right_columns"])
        elif k == "semijoin":
            n.op = X.SemiJoin(n.params["on"], anti=n.params["anti"], null_aware=n.params["null_aware"])
    return root


def _filtered_table(tb, src: Source, pushed: list):
    from ..operators.changes import Batch
    from .catalog import numpy_dtype
    if tb is None:
        tb = Batch({c: np.empty(0, dtype=numpy_dtype(k)) for c, k in src.schema.columns.items()},
                   ts=np.empty(0))
    if pushed:
        f = compile_expr(A.BoolOp("and", pushed) if len(pushed) > 1 else pushed[0], lambda c: c.cname)
        m = np.asarray(f(dict(tb.columns)), dtype=bool)
        tb = tb.take(m)
    return tb


def plan_query(bq: BoundQuery, stats: Optional[Callable[[str], StreamStats]] = None) -> Plan:
    """Logical plan + annotation + costs + engine choice (operators not yet created)."""
    stats = stats or (lambda name: StreamStats())
    root, names = logical_plan(bq)
    annotate(root)
    orders = estimate(root, bq, stats)
    total = sum(n.cost.work for n in root.walk() if n.cost is not None)
    lam = sum(n.cost.rate_in for n in root.walk() if n.kind == "scan") or 1.0
    engine, why = choose_engine(bq, total / lam)
    return Plan(bq, root, engine, why, orders, names)
