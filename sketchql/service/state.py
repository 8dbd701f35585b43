"""The service's state: one Engine, its query result logs, loaded summaries and counters, behind one lock.

The engine is single-threaded, so every call into it (HTTP handlers run in a
thread pool, the demo feeder in its own thread) goes through ``with
state.lock``.  Nothing here looks at the wall clock: time is the data's.

>>> st = ServiceState()
>>> st.execute_ddl("CREATE STREAM S (k INT) TIMESTAMP ts")["created"]
['S']
>>> import numpy as np
>>> st.push("S", {"k": np.array([1, 2]), "ts": np.array([0.5, 1.0])}, 2)["accepted"]
2
>>> qid = st.register("SELECT k FROM S [RANGE 10]")["id"]
>>> st.push("S", {"k": np.array([3]), "ts": np.array([2.0])}, 1)["clock"]
2.0
>>> [r["row"]["k"] for r in st.results(qid, 0, 10)["rows"]]
[3]
"""
from __future__ import annotations

import threading
from collections import defaultdict

import numpy as np

from ..errors import SketchQLError
from .errors import ApiError, from_exception, limit_exceeded, not_found
from .limits import Limits
from .results import ResultLog, frame_records, json_number
from .summaries import SummaryRegistry, estimate as estimate_summary

_DDL = ("CreateStream", "CreateTable", "CreateSummary", "Drop")


class ServiceState:
    """Engine + result logs + loaded summaries + counters (see module docstring)."""

    def __init__(self, engine=None, limits: Limits | None = None, seed: int = 0):
        if engine is None:
            from ..engine import Engine
            engine = Engine(seed=seed)
        self.engine = engine
        self.limits = limits or Limits()
        self.lock = threading.RLock()
        self.logs: dict[int, ResultLog] = {}
        self.summaries = SummaryRegistry(self.limits.max_summaries, self.limits.max_summary_file_bytes,
                                         self.limits.summary_roots)
        self.rejected_rows = defaultdict(int)
        self.rejected_batches = defaultdict(int)
        self.http = defaultdict(int)          # (method, status) -> requests (guarded by http_lock)
        self.http_lock = threading.Lock()
        self.demo = None

    # -- checks ------------------------------------------------------------------
    def check_sql(self, sql) -> str:
        if not isinstance(sql, str) or not sql.strip():
            raise ApiError(422, "bad_request", "\"sql\" must be a non-empty string", field="sql")
        if len(sql) > self.limits.max_sql_chars:
            raise limit_exceeded(413, "max_sql_chars", len(sql), self.limits.max_sql_chars, "SQL length")
        return sql

    # -- streams -------------------------------------------------------------------
    def _schema(self, name: str):
        schema = self.engine.catalog.get(name)
        if schema is None:
            raise not_found("stream", name, [s.name for s in self.engine.catalog.streams] +
                            [t.name for t in self.engine.catalog.tables])
        return schema

    def schema(self, name: str):
        with self.lock:
            return self._schema(name)

    def execute_ddl(self, sql: str) -> dict:
        """Run CREATE STREAM / TABLE / SUMMARY and DROP STREAM / TABLE / SUMMARY statements."""
        from ..planner.parser import parse

        self.check_sql(sql)
        with self.lock:
            try:
                stmts = parse(sql)
            except SketchQLError as exc:
                raise from_exception(exc) from None
            created = []
            for s in stmts:
                kind = type(s).__name__
                pos = getattr(s, "pos", (None, None)) or (None, None)
                if kind not in _DDL:
                    what = "POST /queries" if kind in ("Query", "Explain") else "another endpoint"
                    raise ApiError(400, "wrong_endpoint", f"{kind} statements are not accepted here; use {what} "
                                   f"(this endpoint takes CREATE STREAM / TABLE / SUMMARY and DROP)",
                                   line=pos[0], column=pos[1])
                if kind == "Drop" and s.kind == "query":
                    raise ApiError(400, "wrong_endpoint", "drop a query with DELETE /queries/{id}",
                                   line=pos[0], column=pos[1])
                if kind in ("CreateStream", "CreateTable"):
                    created.append(s.name)
                elif kind == "CreateSummary":
                    created.append(s.name)
            n_rel = len(self.engine.catalog.streams) + len(self.engine.catalog.tables)
            n_new = sum(type(s).__name__ in ("CreateStream", "CreateTable") for s in stmts)
            if n_rel + n_new > self.limits.max_streams:
                raise limit_exceeded(422, "max_streams", n_rel + n_new, self.limits.max_streams,
                                     "declared streams and tables")
            try:
                self.engine.execute(sql)
            except SketchQLError as exc:
                raise from_exception(exc) from None
            return {"ok": True, "statements": len(stmts), "created": created}

    def describe_stream(self, name: str) -> dict:
        with self.lock:
            schema = self._schema(name)
            out = {"name": schema.name, "kind": "table" if schema.is_table else "stream",
                   "columns": [{"name": c, "type": k} for c, k in schema.columns.items()],
                   "timestamp": schema.timestamp,
                   "summaries": [d.name for d in self.engine.catalog.summaries_on(schema.name)]
                   if not schema.is_table else []}
            if not schema.is_table:
                st = self.engine.stream(schema.name).stats()
                out["stats"] = {k: (json_number(v) if isinstance(v, float) else v) for k, v in st.items()
                                if k != "knobs"}
                out["stats"]["rejected_rows"] = self.rejected_rows[schema.name]
                out["knobs"] = st.get("knobs", {})
            return out

    def list_streams(self) -> dict:
        with self.lock:
            cat = self.engine.catalog
            return {"streams": [self.describe_stream(s.name) for s in cat.streams],
                    "tables": [self.describe_stream(t.name) for t in cat.tables]}

    def push(self, name: str, columns: dict, n: int) -> dict:
        """Push one parsed batch; a rejected batch changes nothing (and is counted). Returns the receipt."""
        with self.lock:
            schema = self._schema(name)
            try:
                self.engine.push(schema.name, columns)
            except SketchQLError as exc:
                self.rejected_rows[schema.name] += n
                self.rejected_batches[schema.name] += 1
                raise from_exception(exc, stream=schema.name) from None
            clock = None if schema.is_table else self.engine.stream(schema.name).clock
            return {"stream": schema.name, "accepted": n, "clock": json_number(clock)}

    def reject(self, name: str, n: int = 0):
        with self.lock:
            schema = self.engine.catalog.get(name)
            if schema is not None:
                self.rejected_batches[schema.name] += 1
                self.rejected_rows[schema.name] += n

    def heartbeat(self, name: str, ts) -> dict:
        with self.lock:
            schema = self._schema(name)
            if schema.is_table:
                raise ApiError(400, "bad_request", f"{schema.name} is a table; heartbeats are for streams",
                               stream=schema.name)
            try:
                self.engine.heartbeat(schema.name, float(ts))
            except (TypeError, ValueError) as exc:
                if isinstance(exc, SketchQLError):
                    raise from_exception(exc, stream=schema.name) from None
                raise ApiError(422, "bad_request", f"\"ts\" must be a number, got {ts!r}", field="ts") from None
            return {"stream": schema.name, "clock": json_number(self.engine.stream(schema.name).clock)}

    # -- queries ---------------------------------------------------------------------
    def _query(self, qid: int):
        for q in self.engine.queries:
            if q.id == qid:
                return q
        raise not_found("query", qid, [q.id for q in self.engine.queries])

    def register(self, sql: str) -> dict:
        self.check_sql(sql)
        with self.lock:
            if len(self.engine.queries) >= self.limits.max_queries:
                raise limit_exceeded(422, "max_queries", len(self.engine.queries) + 1, self.limits.max_queries,
                                     "registered queries (DELETE /queries/{id} one first)")
            try:
                q = self.engine.register(sql)
            except SketchQLError as exc:
                raise from_exception(exc) from None
            self.logs[q.id] = ResultLog(q.names, self.limits.max_retained_rows)
            return self._describe_query(q, full=False)

    def _collect(self, q):
        log = self.logs.get(q.id)
        if log is None:
            log = self.logs[q.id] = ResultLog(q.names, self.limits.max_retained_rows)
        batches = q.poll()
        log.skip(getattr(batches, "missed", 0))
        for ch in batches:
            log.append(ch)
        return log

    def collect_all(self):
        with self.lock:
            for q in self.engine.queries:
                self._collect(q)

    def _describe_query(self, q, full=True) -> dict:
        out = {"id": q.id, "sql": q.sql, "view": q.view, "columns": list(q.names), "engine": q.plan.engine,
               "clock": json_number(q.clock), "links": {"self": f"/queries/{q.id}",
                                                        "results": f"/queries/{q.id}/results?since=0",
                                                        "snapshot": f"/queries/{q.id}/snapshot"}}
        if full:
            log = self._collect(q)
            out["explain"] = q.explain()
            st = q.stats()
            out["stats"] = {k: v for k, v in st.items() if k not in ("operators", "knobs")}
            out["stats"]["clock"] = json_number(st.get("clock"))
            out["stats"]["result_rows"] = log.total
            out["stats"]["retained_rows"] = log.retained
            out["operators"] = _clean(st.get("operators", []))
            out["knobs"] = st.get("knobs", {})
        return out

    def describe_query(self, qid: int) -> dict:
        with self.lock:
            return self._describe_query(self._query(qid))

    def list_queries(self) -> dict:
        with self.lock:
            return {"queries": [self._describe_query(q, full=False) for q in self.engine.queries]}

    def drop_query(self, qid: int) -> dict:
        with self.lock:
            q = self._query(qid)
            self.engine.deregister(q)
            self.logs.pop(qid, None)
            return {"ok": True, "deleted": qid}

    def check_limit(self, limit) -> int:
        if limit is None:
            return self.limits.default_results_limit
        if limit < 1 or limit > self.limits.max_results_limit:
            raise limit_exceeded(422, "max_results_limit", limit, self.limits.max_results_limit,
                                 "limit (must be 1..max)")
        return int(limit)

    def results(self, qid: int, since: int, limit) -> dict:
        limit = self.check_limit(limit)
        if since < 0:
            raise ApiError(422, "bad_parameter", f"since must be >= 0, got {since}", parameter="since")
        with self.lock:
            q = self._query(qid)
            log = self._collect(q)
            out = log.read(since, limit)
            return dict({"query": qid, "view": q.view, "columns": list(q.names), "clock": json_number(q.clock)},
                        **out)

    def snapshot(self, qid: int, at, limit) -> dict:
        limit = self.check_limit(limit)
        with self.lock:
            q = self._query(qid)
            t = q.clock if at is None else float(at)
            if not np.isfinite(t):
                return {"query": qid, "at": None, "columns": list(q.names), "rows": [], "count": 0,
                        "truncated": False}
            try:
                df = q.snapshot(t)
            except SketchQLError as exc:
                raise from_exception(exc) from None
        rows, n = frame_records(df, limit)
        return {"query": qid, "at": t, "columns": list(q.names), "rows": rows, "count": n,
                "truncated": n > len(rows)}

    # -- summaries ---------------------------------------------------------------------
    def live_summaries(self) -> dict:
        return {d.name: d for d in self.engine.catalog.summaries}

    def list_summaries(self) -> dict:
        with self.lock:
            live = [{"name": d.name, "origin": "live", "stream": d.stream, "attrs": list(d.attrs),
                     "granularity": d.granularity, "collapse": [d.rate, d.depth],
                     "kind": "index" if d.index else None} for d in self.engine.catalog.summaries]
            loaded = [self.summaries.describe(n) for n in sorted(self.summaries.entries)]
            return {"summaries": loaded + live}

    def load_summary(self, path, name=None, as_name=None) -> dict:
        with self.lock:
            reserved = list(self.live_summaries())
        info = self.summaries.load(path, name, as_name, reserved=reserved)   # file reading outside the lock
        return info

    def describe_summary(self, name: str) -> dict:
        with self.lock:
            if name in self.summaries.entries:
                return self.summaries.describe(name)
            d = self._live(name)
            out = {"name": d.name, "origin": "live", "stream": d.stream, "attrs": list(d.attrs),
                   "granularity": d.granularity, "collapse": [d.rate, d.depth]}
            if d.index:
                out["index"] = {a: _clean(ix.stats(), drop=("zones_per_granularity",)) for a, ix in d.index.items()}
            return out

    def _live(self, name: str):
        for d in self.engine.catalog.summaries:
            if d.name.lower() == name.lower():
                return d
        raise not_found("summary", name, sorted(self.summaries.entries) +
                        [d.name for d in self.engine.catalog.summaries])

    def estimate(self, name, values, t_from, t_to, confidence, attr=None) -> dict:
        if len(values) > self.limits.max_estimate_values:
            raise limit_exceeded(422, "max_estimate_values", len(values), self.limits.max_estimate_values,
                                 "values in one estimate")
        if not values:
            raise ApiError(422, "bad_parameter", "give at least one value (?value=...)", parameter="value")
        with self.lock:
            if name in self.summaries.entries:
                return self.summaries.estimate_loaded(name, values, t_from, t_to, confidence)
            d = self._live(name)
            if not d.index:
                raise ApiError(400, "bad_request", f"summary {d.name!r} has no index to answer from", name=d.name)
            if attr is None:
                if len(d.index) != 1:
                    raise ApiError(422, "bad_parameter", f"summary {d.name!r} covers {list(d.index)}; choose "
                                   f"one with ?attr=", parameter="attr")
                attr = next(iter(d.index))
            ix = next((v for k, v in d.index.items() if k.lower() == str(attr).lower()), None)
            if ix is None:
                raise ApiError(422, "bad_parameter", f"summary {d.name!r} has no attribute {attr!r} "
                               f"(has {list(d.index)})", parameter="attr")
            out = estimate_summary(ix, d.name, values, t_from, t_to, confidence)
            out["origin"] = "live"
            return out

    def unload_summary(self, name: str) -> dict:
        with self.lock:
            self.summaries.unload(name)
            return {"ok": True, "deleted": name}


def _clean(x, drop=()):
    """JSON-safe copy (NaN/inf floats -> None, numpy scalars -> Python)."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items() if k not in drop}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (float, np.floating)):
        return json_number(x)
    if isinstance(x, np.generic):
        return x.item()
    return x
