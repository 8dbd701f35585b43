"""The plan view: every registered plan as a graph of operators, queues and synopses.

``query.plan_view()`` / ``engine.plan_view()`` (JSON-able dicts, the format of
``notes/interfaces.md``)::

    {"query": id, "sql": ..., "nodes": [{"id": "q1.n0", "kind", "label",
       "stats": {...live operator counters...}, "shared_with": [qids],
       "synopses": [{"kind", "name", "rows", "bytes", "shared_with"}],
       "queues": [{"kind", "name", "rows", "bytes"}]}],
     "edges": [[child_id, parent_id], ...], "scheduler": {...}}

Synopses: a window scan's window (its own, or the shared window store and its
consumers), an operator's state rows, a PT operator's region index (declared
and shared, or private) and its per-query mapping.  Queues: the scheduler's
input queues of the node (rows waiting), a shared operator's output queue, a
PT operator's priority queue.  ``engine.plan_view()`` adds the streams' slack
buffers and the shared stores.

>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.execute("CREATE STREAM S (v DOUBLE) TIMESTAMP ts")
>>> q1 = eng.register("SELECT v FROM S [RANGE 5]")
>>> q2 = eng.register("SELECT v FROM S [RANGE 9]")
>>> eng.push("S", {"ts": [1.0, 2.0], "v": [3.0, 4.0]})
>>> v = q2.plan_view()
>>> [n["kind"] for n in v["nodes"]], v["edges"]
(['project', 'scan'], [['q2.n1', 'q2.n0']])
>>> syn = v["nodes"][1]["synopses"][0]
>>> syn["kind"], syn["rows"], syn["shared_with"]
('window store', 2, [1])
"""
from __future__ import annotations

from ..control import jsonable

__all__ = ["query_plan_view", "engine_plan_view"]


def _bytes(x) -> int:
    nb = getattr(x, "nbytes", 0)
    try:
        return int(nb() if callable(nb) else nb)
    except Exception:  # pragma: no cover - defensive: a synopsis without a size
        return 0


def _node_view(engine, query, node, nid, task) -> dict:
    from .sharing import SharedConsumer, StoreScan
    op = node.op
    shared_with = engine.sharing.shared_with(query, node) if engine is not None else []
    synopses, queues = [], []
    if isinstance(op, StoreScan):
        st = op.store
        synopses.append({"kind": "window store", "name": f"{st.stream} store", "rows": int(len(st.ts)),
                         "bytes": st.nbytes, "window": op.window, "consumers": len(st.consumers),
                         "shared_with": shared_with})
    elif isinstance(op, SharedConsumer):
        real = op.shared.op
        synopses.append({"kind": "operator state", "name": type(real).__name__,
                         "rows": int(real.state_size()) if hasattr(real, "state_size") else 0,
                         "shared_with": shared_with})
        queues.append({"kind": "shared output queue", "name": f"{nid}.out", "rows": op.shared.queued_rows(),
                       "consumers": len(op.shared.positions)})
    elif op is not None:
        if node.kind == "scan":
            synopses.append({"kind": "window", "name": f"{node.params.get('stream')} window",
                             "rows": int(op.state_size()), "shared_with": []})
        elif hasattr(op, "state_size"):
            synopses.append({"kind": "operator state", "name": type(op).__name__, "rows": int(op.state_size()),
                             "shared_with": []})
    inner = getattr(op, "op", None)               # PT nodes: the promising-tuple operator
    srcs = getattr(inner, "sources", None)
    if srcs:
        users = _index_users(engine, query, node) if engine is not None else []
        for side, s in enumerate(srcs):
            ix = getattr(s, "ix", None)
            shared = hasattr(s, "bind")
            name = f"{ix.decl.name}.{ix.decl.attr}" if ix is not None and hasattr(ix, "decl") else f"side {side}"
            synopses.append({"kind": "region index", "name": name, "shared": shared,
                             "bytes": _bytes(ix) if ix is not None else 0,
                             "mapping_bytes": int(getattr(s, "mapping_nbytes", 0)),
                             "shared_with": users if shared else []})
    layer = getattr(inner, "layer", None)         # PT selections / aggregates: their value layer
    if layer is not None and hasattr(inner, "index_nbytes"):
        users = sorted(q.id for q in engine.queries if q.id != query.id for m in q.plan.nodes
                       if getattr(getattr(m.op, "op", None), "layer", None) is layer) if engine is not None else []
        synopses.append({"kind": "value layer", "name": node.params.get("index", "value layer"),
                         "shared": bool(inner.shared), "bytes": _bytes(layer),
                         "mapping_bytes": int(inner.index_nbytes()) if inner.shared else 0,
                         "shared_with": users})
    pq = getattr(inner, "queue", None)
    if pq is not None and hasattr(pq, "__len__"):
        queues.append({"kind": "priority queue", "name": f"{nid}.queue", "rows": int(len(pq))})
    if task is not None:
        queues.append({"kind": "input queue", "name": f"{nid}.in", "rows": int(task.queued()),
                       "bytes": task.queued_bytes(), "steps": int(sum(len(q) for q in task.inputs))})
    stats = node.stats()
    return {"id": nid, "kind": node.kind, "label": node.label, "stats": stats, "shared_with": shared_with,
            "synopses": synopses, "queues": queues}


def _index_users(engine, query, node) -> list:
    name = node.params.get("index")
    return sorted(q.id for q in engine.queries if q.id != query.id
                  for m in q.plan.nodes if m.kind == node.kind and m.params.get("index") == name)


def query_plan_view(query, engine=None) -> dict:
    """The plan view of one query (module doc)."""
    nodes = list(query.plan.nodes)
    ids = {id(n): f"q{query.id}.n{i}" for i, n in enumerate(nodes)}
    runner = getattr(query, "_runner", None)
    tasks = runner.by_node if runner is not None else {}
    sched = getattr(engine, "scheduler", None) if engine is not None else None
    prio = sched.priorities() if sched is not None and sched.strategy == "chain" else {}
    out_nodes = []
    for n in nodes:
        nv = _node_view(engine, query, n, ids[id(n)], tasks.get(id(n)))
        if nv["id"] in prio:
            nv["stats"]["chain_priority"] = prio[nv["id"]]
        out_nodes.append(nv)
    edges = [[ids[id(c)], ids[id(n)]] for n in nodes for c in n.children]
    scheduler = sched.stats() if sched is not None else {"strategy": "inline"}
    view = {"query": query.id, "sql": query.sql, "engine": query.plan.engine, "nodes": out_nodes,
            "edges": edges, "scheduler": scheduler,
            "sharing_notes": list(getattr(query, "_sharing_notes", []))}
    return jsonable(view)


def engine_plan_view(engine) -> dict:
    """Every registered plan, plus the shared stores, indexes, slack buffers and the scheduler."""
    stores = [s.stats() for s in engine.sharing.stores.values() if s.consumers]
    indexes = [{"name": f"{d.name}.{a}", "stream": d.stream, "bytes": _bytes(ix),
                "auto_declared": d.name.startswith("_auto_")}
               for d in engine.catalog.summaries for a, ix in (d.index or {}).items()]
    streams = {h.name: (h._slack.stats() if getattr(h, "_slack", None) is not None else None)
               for h in engine._streams.values()}
    return jsonable({"queries": [query_plan_view(q, engine) for q in engine.queries],
                     "shared_stores": stores, "indexes": indexes, "slack_buffers": streams,
                     "sharing": engine.sharing.stats(),
                     "scheduler": engine.scheduler.stats() if engine.scheduler is not None else {"strategy": "inline"}})
