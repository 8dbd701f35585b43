"""A query plan as JSON: nodes (id = position in ``plan.nodes``, kind, label, statistics) and edges.

The same shape as the runtime's ``query.plan_view()`` (see ``notes/interfaces``):
``{"query", "engine", "engine_reason", "nodes": [{"id", "kind", "label", "stats", "children"}],
"edges": [[from, to], ...]}`` where an edge runs from a child (producer) to its parent (consumer).
Used for ``GET /queries/{id}/plan`` when the engine has no ``plan_view`` and for ``POST /explain``.

>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.execute("CREATE STREAM S (k INT) TIMESTAMP ts")
>>> q = eng.register("SELECT k FROM S [RANGE 10] WHERE k > 1")
>>> pj = plan_json(q.plan, query=q.id)
>>> [n["kind"] for n in pj["nodes"]][-1], all(len(e) == 2 for e in pj["edges"])
('scan', True)
"""
from __future__ import annotations

from ..control import jsonable


def plan_json(plan, query=None) -> dict:
    nodes = list(plan.root.walk())
    ids = {id(n): i for i, n in enumerate(nodes)}
    out, edges = [], []
    for i, n in enumerate(nodes):
        try:
            st = n.stats()
        except Exception:                      # a node that is not instantiated (EXPLAIN): annotations only
            st = {"node": n.kind, "label": n.label}
        out.append({"id": i, "kind": n.kind, "label": n.label, "children": [ids[id(c)] for c in n.children],
                    "stats": jsonable(st)})
        edges.extend([ids[id(c)], i] for c in n.children)
    return {"query": query, "engine": plan.engine, "engine_reason": plan.engine_reason,
            "columns": list(plan.output_names), "nodes": out, "edges": edges}
