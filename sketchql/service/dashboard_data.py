"""What the dashboard shows, sampled from a running engine: one JSON *frame* per tick.

A frame is read under the service lock from the engine's control tables
(:mod:`sketchql.engine.control_tables`) and, where they exist, from the
precision API (``query.precision()``, ``query.precision_series()``), the
allocator (``engine.allocator.decision()``) and the plan view
(``query.plan_view()``).  Anything the engine does not provide is sent as
``None`` with ``available[...] = False``; the page prints "not available".
No figure is invented.

Derived rates (measured between two consecutive samples ``a`` and ``b`` of
the same server, never extrapolated):

* stream ingest rate   ``(tuples_in_b - tuples_in_a) / (clock_b - clock_a)``
  (tuples per second of data time), and per second of wall time over the
  last :data:`WALL_WINDOW` seconds;
* query output rate    ``(changes_out_b - changes_out_a) / (clock_b - clock_a)``
  (result change rows per second of data time);
* budget used (PT operators) ``Δ work / Δ units given`` -- the share of the
  probe budget the operator spent in the interval (the precision API's
  ``budget_used`` replaces it when present);
* shed rate (PT operators) ``Δ discarded / (Δ discarded + Δ probes)`` -- the
  share of dequeued probe entries dropped without a probe (their tuple or
  every partner had left the window);
* sampling rate = ``stream.sample_rate * min(scan sample)`` over the query's
  inputs (the product of the two Bernoulli rates a tuple passes).

The *series* the page plots are bounded: the server keeps the last
``history`` points (a deque), the browser keeps as many.

>>> from sketchql.service.state import ServiceState
>>> st = ServiceState()
>>> st.engine.execute("CREATE STREAM S (k INT) TIMESTAMP ts")
>>> feed = DashboardFeed(st, interval=0.0)
>>> st.engine.push("S", {"k": [1, 2], "ts": [0.5, 1.5]})
>>> f = feed.sample()
>>> f["streams"][0]["name"], f["streams"][0]["tuples_in"]
('S', 2)
"""
from __future__ import annotations

import math
import os
import threading
import time
from collections import deque

from ..control import jsonable
from .background import BackgroundLoop

#: points of every series kept (server side; the page keeps the same bound)
HISTORY = 600
#: precision-series points read per query per frame
SERIES_LIMIT = 300
#: wall seconds the wall-clock ingest rate is measured over
WALL_WINDOW = 5.0


def _num(x):
    """A finite float (or int) or None."""
    if x is None or isinstance(x, bool):
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _ratio(a, b):
    a, b = _num(a), _num(b)
    if a is None or b is None or b <= 0:
        return None
    return a / b


def _call(obj, name, *args, **kw):
    """``obj.name(*args)`` JSON-able, or ``(False, None)`` when the method does not exist
    (the API is built by another engineer and may not have landed); errors are reported."""
    fn = getattr(obj, name, None)
    if fn is None or not callable(fn):
        return False, None
    try:
        return True, jsonable(fn(*args, **kw))
    except Exception as exc:  # a figure we could not read is shown as an error, never guessed
        return True, {"error": f"{type(exc).__name__}: {exc}"}


def _knob_meta(k: dict) -> dict:
    return {f: k.get(f) for f in ("value", "kind", "lo", "hi", "lo_open", "hi_open", "choices", "nullable",
                                  "doc", "settable", "effect")}


def query_kind(q) -> str:
    """A short description of what the query computes (for the cards)."""
    kinds = [n.kind for n in q.plan.nodes]
    pt = next((n for n in q.plan.nodes if n.kind.startswith("pt_")), None)
    if pt is not None and pt.op is not None:
        pref = getattr(pt.op, "preference", None) or pt.params.get("preference")
        name = {"pt_join": "PT-Join"}.get(pt.kind, pt.kind.replace("pt_", "PT-").title())
        return f"{name} {pref}" if pref else name
    if "aggregate" in kinds:
        return "aggregate"
    if "join" in kinds:
        return "join"
    return kinds[0] if kinds else "query"


class DashboardFeed(BackgroundLoop):
    """Samples frames of a :class:`~sketchql.service.state.ServiceState` and keeps the bounded history.

    ``sample()`` reads one frame now; ``latest(max_age)`` returns the newest
    frame, sampling if it is older than ``max_age`` seconds; ``start()`` /
    ``stop()`` run a background sampler every ``interval`` seconds so the
    history exists before a page connects.
    """

    # The background sampler holds ``state.lock`` for a frame (5-8 ms with 7 streams and queries, more
    # under load): every second that stalled admission and the apply thread in the middle of an
    # ingest.  It now samples when no batch was admitted or applied for IDLE_S, or at the latest
    # MAX_DEFER_S after its last sample; a page that is open samples on demand (``latest``) anyway.
    IDLE_S = 0.2
    MAX_DEFER_S = 10.0

    def __init__(self, state, interval: float = 1.0, history: int = HISTORY, max_defer: float | None = None):
        self.state = state
        self.interval = float(interval)
        self.max_defer = self.MAX_DEFER_S if max_defer is None else float(max_defer)
        self.boot = f"{os.getpid():x}-{time.time_ns():x}"      # identity of this server run
        self.seq = 0
        self.points: deque = deque(maxlen=int(history))
        self._frame = None
        self._prev = None            # (wall, {key: counters}) of the previous sample
        self._last = {}              # key -> the last rates measured over an interval with data
        self._walls = {}             # key -> recent (wall, tuples_in) for the wall-clock ingest rate
        self._lock = threading.Lock()
        self._init_loop()

    # -- sampling ------------------------------------------------------------------
    def sample(self) -> dict:
        with self._lock:
            wall = time.time()
            with self.state.lock:
                frame, counters = self._build(wall)
            self.seq += 1
            frame["seq"] = self.seq
            self._prev = (wall, counters)
            frame["point"] = pt = point_of(frame)
            self._frame = frame
            if not self.points or self.points[-1]["sig"] != pt["sig"]:   # only when something moved
                self.points.append(pt)
            return frame

    def latest(self, max_age: float | None = None) -> dict:
        max_age = self.interval if max_age is None else max_age
        f = self._frame
        if f is None or time.time() - f["wall"] >= max_age:
            return self.sample()
        return f

    THREAD_NAME = "sketchql-dashboard"

    def history(self) -> list:
        with self._lock:
            return list(self.points)

    def _quiet(self) -> bool:
        """No HTTP batch admitted or applied for ``IDLE_S`` seconds (and none waiting)."""
        ap = getattr(self.state, "applier", None)
        return ap is None or ap.idle_for() >= self.IDLE_S

    def _run(self):
        last = time.monotonic() - self.max_defer          # the first frame at once
        while not self._stop.is_set():
            if self._quiet() or time.monotonic() - last >= self.max_defer:
                try:
                    self.sample()
                except Exception:   # never kill the server; the next tick tries again
                    pass
                last = time.monotonic()
                self._stop.wait(self.interval)
            else:                   # an ingest is running: try again shortly
                self._stop.wait(min(self.interval, self.IDLE_S) / 4)

    # -- one frame -------------------------------------------------------------------
    def _build(self, wall: float):
        st = self.state
        eng = st.engine
        prev_wall, prev = self._prev if self._prev is not None else (None, {})
        counters = {}
        tables = {}
        for t in eng.controls.tables():
            tables.setdefault(t.kind, []).append(t.as_dict())
        eng_t = tables.get("engine", [{}])[0]
        summaries = self._summaries(eng, tables.get("summary", []))
        streams = self._streams(st, tables.get("stream", []), summaries, prev, prev_wall, wall, counters)
        by_parent = {}
        for kind in ("operator", "queue"):
            for t in tables.get(kind, []):
                by_parent.setdefault(t.get("parent"), []).append(t)
        sample_rates = {s["name"].lower(): s["knobs"]["sample_rate"]["value"] for s in streams
                        if "sample_rate" in s["knobs"]}
        queries = []
        for t in tables.get("query", []):
            q = next((x for x in eng.queries if f"q{x.id}" == t["name"]), None)
            if q is None:
                continue
            queries.append(self._query(q, t, by_parent, sample_rates, prev, counters))
        has_alloc = getattr(eng, "allocator", None) is not None
        alloc = None
        if has_alloc:
            ok, alloc = _call(eng.allocator, "decision")
            if ok and isinstance(alloc, dict):
                alloc["enabled"] = bool(getattr(eng.allocator, "enabled", True))
        demo = st.demo._status() if st.demo is not None else None
        frame = {
            "boot": self.boot, "wall": wall, "interval": self.interval,
            "engine": {"stats": eng_t.get("stats", {}),
                       "knobs": {n: _knob_meta(k) for n, k in eng_t.get("knobs", {}).items()}},
            "demo": jsonable(demo),
            "streams": streams, "summaries": summaries, "queries": queries,
            "allocator": alloc,
            "available": {"precision": any(q["precision"] is not None for q in queries),
                          "allocator": has_alloc,
                          "plan_view": any(q["plan"].get("source") == "plan_view" for q in queries)},
        }
        return frame, counters

    def _hold(self, key, **values):
        """Each value, or -- when this interval measured nothing (no data time passed, no budget
        given) -- the last value measured for ``key``: a rate over the last interval that had data."""
        last = self._last.setdefault(key, {})
        out = []
        for k, v in values.items():
            if v is None:
                v = last.get(k)
            else:
                last[k] = v
            out.append(v)
        return out

    def _summaries(self, eng, tables) -> list:
        decls = {d.name.lower(): d for d in eng.catalog.summaries}
        out = []
        for t in tables:
            s = t["stats"]
            d = decls.get(t["name"].split(".")[0].lower())
            c = s.get("counters", {}) or {}
            out.append({
                "name": t["name"], "stream": (t.get("parent") or "stream:").split(":", 1)[1],
                "granularity": getattr(d, "granularity", None), "rate": getattr(d, "rate", None),
                "depth": getattr(d, "depth", None), "clock": _num(s.get("clock")),
                "structure": s.get("structure"), "zones": s.get("zones"), "cells": s.get("cells"),
                "tuples": s.get("tuples"), "nbytes": s.get("nbytes"), "sketch_bytes": s.get("sketch_bytes"),
                "zones_per_granularity": s.get("zones_per_granularity") or [],
                "counters": c,
            })
        return out

    def _streams(self, st, tables, summaries, prev, prev_wall, wall, counters) -> list:
        out = []
        for t in tables:
            s = t["stats"]
            name = t["name"]
            mine = [x for x in summaries if x["stream"].lower() == name.lower()]
            late = s.get("late_rows")
            late_src = "stream"
            if late is None:
                late = sum(int((x["counters"].get("late") or 0)) for x in mine)
                late_src = "summaries" if mine else None
            mem = s.get("memory_bytes")
            mem_src = "stream"
            if mem is None:
                mem = sum(int(x["nbytes"] or 0) for x in mine) if mine else None
                mem_src = "summaries" if mine else None
            key = f"stream:{name}"
            clock = _num(s.get("clock"))
            cur = {"clock": clock, "tuples_in": s.get("tuples_in", 0)}
            counters[key] = cur
            p = prev.get(key)
            rate_data = rate_wall = None
            if p is not None and clock is not None and p["clock"] is not None and clock > p["clock"]:
                rate_data = (cur["tuples_in"] - p["tuples_in"]) / (clock - p["clock"])
            # per wall second over the last >= WALL_WINDOW seconds (one tick alone jitters)
            hist = self._walls.setdefault(key, deque(maxlen=64))
            hist.append((wall, cur["tuples_in"]))
            old = next((h for h in reversed(hist) if wall - h[0] >= WALL_WINDOW), hist[0])
            if wall > old[0]:
                rate_wall = (cur["tuples_in"] - old[1]) / (wall - old[0])
            (rate_data,) = self._hold(key, ingest_rate=rate_data)
            out.append({
                "name": name, "clock": clock, "tuples_in": s.get("tuples_in"), "tuples_kept": s.get("tuples_kept"),
                "batches": s.get("batches"), "heartbeats": s.get("heartbeats"),
                "rejected_batches": int(st.rejected_batches.get(name, 0)),
                "rejected_rows": int(st.rejected_rows.get(name, 0)),
                "late_rows": late, "late_source": late_src,
                "memory_bytes": mem, "memory_source": mem_src,
                "ingest_rate": rate_data, "ingest_rate_wall": rate_wall,
                "summaries": [x["name"] for x in mine],
                "knobs": {n: _knob_meta(k) for n, k in t.get("knobs", {}).items()},
            })
        return out

    def _query(self, q, t, by_parent, sample_rates, prev, counters) -> dict:
        s = t["stats"]
        qn = t["name"]
        knobs = {n: _knob_meta(k) for n, k in t.get("knobs", {}).items()}
        kv = {n: k["value"] for n, k in knobs.items()}
        ops = by_parent.get(f"query:{qn}", [])
        pt = s.get("promising") or {}
        pt_node = next((o for o in ops if str(o["stats"].get("node", "")).startswith("pt_")), None)
        pt_raw = pt_node["stats"] if pt_node is not None else {}
        key = f"query:{qn}"
        cur = {"clock": _num(s.get("clock")), "changes_out": s.get("changes_out", 0),
               "work": _num(pt.get("pt_work", pt_raw.get("work"))),
               "given": _num(pt.get("pt_units_given", pt_raw.get("units_given"))),
               "discarded": _num(pt.get("pt_discarded", pt_raw.get("discarded"))),
               "probes": _num(pt.get("pt_probes", pt_raw.get("probes")))}
        counters[key] = cur
        p = prev.get(key)
        out_rate = budget_used = shed = None
        if p is not None:
            if cur["clock"] is not None and p["clock"] is not None and cur["clock"] > p["clock"]:
                out_rate = (cur["changes_out"] - p["changes_out"]) / (cur["clock"] - p["clock"])
            if cur["work"] is not None and p["work"] is not None and cur["given"] is not None \
                    and p["given"] is not None:
                budget_used = _ratio(cur["work"] - p["work"], cur["given"] - p["given"])
            if None not in (cur["discarded"], p["discarded"], cur["probes"], p["probes"]):
                dropped = cur["discarded"] - p["discarded"]
                shed = _ratio(dropped, dropped + cur["probes"] - p["probes"])
        out_rate, budget_used, shed = self._hold(key, output_rate=out_rate, budget_used=budget_used, shed_rate=shed)
        # sampling: stream Bernoulli rate x the scan's own sample knob, the smallest over the inputs
        rates = []
        for n in q.plan.nodes:
            if n.kind == "scan" and n.source is not None:
                src = q.bound.sources[n.source]
                r = float(n.params.get("sample") or 1.0) * float(sample_rates.get(src.schema.name.lower(), 1.0))
                rates.append(r)
        ok_p, precision = _call(q, "precision")
        ok_s, series = _call(q, "precision_series", limit=SERIES_LIMIT)
        plan = self._plan(q, qn, ops, by_parent)
        return {
            "id": q.id, "name": qn, "sql": q.sql, "engine": q.plan.engine, "view": s.get("view"),
            "kind": query_kind(q), "clock": cur["clock"],
            "active": kv.get("active"), "weight": kv.get("weight"),
            "contract": {k: kv.get(k) for k in ("error", "confidence", "on_miss", "budget", "budget_unit")},
            "knobs": knobs,
            "stats": {k: s.get(k) for k in ("changes_out", "live_rows", "state_rows", "steps", "pending_tuples",
                                            "retained_changes")},
            "pt": pt or None,
            "measured": {"output_rate": out_rate, "budget_used": budget_used, "shed_rate": shed,
                         "sample_rate": min(rates) if rates else None},
            "precision": precision if ok_p else None,
            "series": series if ok_s else None,
            "plan": plan,
        }

    def _plan(self, q, qn, ops, by_parent) -> dict:
        ok, view = _call(q, "plan_view")
        if ok and isinstance(view, dict) and "error" not in view:
            view["source"] = "plan_view"
            return view
        # the plan as the control tables describe it: nodes in plan order, edges child -> parent
        nodes = q.plan.nodes
        index = {id(n): i for i, n in enumerate(nodes)}
        tables = {o["name"]: o for o in ops}
        out = []
        for i, n in enumerate(nodes):
            on = f"{qn}.n{i}"
            t = tables.get(on, {"stats": {}, "knobs": {}})
            st = dict(t["stats"])
            queues = [{"name": x["name"].rsplit(".", 1)[1], "stats": x["stats"]} for x in by_parent.get(f"operator:{on}", [])]
            synopses = []
            if st.get("state_structure") and st.get("state_structure") != "stateless":
                synopses.append({"structure": st.get("state_structure"),
                                 "rows": st.get("state_rows", st.get("pt_stored_tuples"))})
            out.append({"id": on, "kind": n.kind, "label": st.get("label") or n.label,
                        "stats": {k: v for k, v in st.items() if k not in ("label", "node", "state_structure")},
                        "knobs": {k: v.get("value") for k, v in t.get("knobs", {}).items()},
                        "queues": queues, "synopses": synopses,
                        "children": [f"{qn}.n{index[id(c)]}" for c in n.children if id(c) in index]})
        edges = [[c, o["id"]] for o in out for c in o["children"]]
        return {"query": q.id, "source": "control_tables", "nodes": out, "edges": edges}


def point_of(frame) -> dict:
    """The series values of one frame (what the charts plot), compact."""
    qs = {}
    for q in frame["queries"]:
        m = q["measured"]
        qs[q["name"]] = {"t": q["clock"], "output_rate": m["output_rate"], "budget_used": m["budget_used"],
                         "shed_rate": m["shed_rate"], "sample_rate": m["sample_rate"],
                         "error": q["contract"]["error"], "changes_out": q["stats"]["changes_out"]}
    ss = {}
    for s in frame["streams"]:
        ss[s["name"]] = {"t": s["clock"], "ingest_rate": s["ingest_rate"], "ingest_rate_wall": s["ingest_rate_wall"],
                         "late_rows": s["late_rows"], "rejected_rows": s["rejected_rows"],
                         "rejected_batches": s["rejected_batches"], "memory_bytes": s["memory_bytes"],
                         "tuples_in": s["tuples_in"]}
    sig = (tuple((k, v["t"], v["changes_out"], v["error"]) for k, v in sorted(qs.items())),
           tuple((k, v["t"], v["tuples_in"], v["rejected_rows"]) for k, v in sorted(ss.items())))
    return {"seq": frame["seq"] if "seq" in frame else None, "wall": frame["wall"], "queries": qs,
            "streams": ss, "sig": repr(sig)}
