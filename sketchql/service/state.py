"""The service's state: one Engine, its query result buffers, loaded summaries, counters, the durable log.

The engine is single-threaded, so every call into it (HTTP handlers run in a
thread pool, the demo feeder in its own thread) goes through ``with
state.lock``.  Nothing here looks at the wall clock: time is the data's.

Every mutation (DDL, registration, deregistration, batch, heartbeat, knob
write, summary load) is one *operation*: under the lock it is applied to the
engine, appended to the operation log (:mod:`sketchql.service.durability`,
when the state has a data directory) and the results of every query are
collected into their buffers; outside the lock the caller waits until the
operation is committed, then answers 2xx.  An HTTP batch is the exception
(:meth:`admit`): validated and logged under the admission lock only, then
applied by the apply thread (:mod:`sketchql.service.applier`) in log order;
``state.lock`` is an :class:`~sketchql.service.applier.ExclusiveLock` that
applies every queued batch before it is held, so every other operation and
every locked read sees them (read-your-writes).  Recovery (:meth:`recover`) loads
the newest checkpoint and applies the logged operations after it the same
way, so the state after a restart equals the state before the crash for
everything acknowledged.

Results are collected after *every* operation into a :class:`ResultLog` per
query of ``Limits.max_retained_rows`` rows, whether or not anyone reads, so
nothing is dropped while the buffer has room.

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

import logging
import math
import re
import threading
import time
from collections import defaultdict

import numpy as np

from ..control import ControlError, jsonable
from ..engine.batches import int_fits
from ..errors import SketchQLError
from . import gcpolicy
from .applier import ApplyQueue, ExclusiveLock
from .errors import ApiError, from_exception, limit_exceeded, not_found
from .limits import Limits
from .producers import Producers
from .results import Notifier, ResultLog, frame_records, json_number
from .summaries import AUTO_PREFIX, SummaryRegistry, estimate as estimate_summary, is_auto_index

log = logging.getLogger("sketchql.service")

_DDL = ("CreateStream", "CreateTable", "CreateSummary", "Drop", "AlterStream")
CONTRACT_KNOBS = ("error", "confidence", "budget", "on_miss")
QUERY_STATE_KNOBS = ("weight", "active")
BUDGET_KNOBS = ("memory_bytes", "cpu_units_per_s")


class ServiceState:
    """Engine + result buffers + loaded summaries + counters + durable log (see module docstring).

    ``store``: an :class:`~sketchql.service.durability.OpLog` (None: nothing survives a restart).
    ``auth``: an :class:`~sketchql.service.auth.Auth` (None: no tokens configured).
    """

    def __init__(self, engine=None, limits: Limits | None = None, seed: int = 0, store=None, auth=None,
                 max_pending: int = 2):
        if engine is None:
            from ..engine import Engine
            engine = Engine(seed=seed)
        self.engine = engine
        self.seed = int(seed)
        self.limits = limits or Limits()
        # engine_lock: the engine itself (the apply thread holds it per batch); admit_lock: admissions
        # (seq order = apply order); lock: both + every queued batch applied first (see applier)
        self.engine_lock = threading.RLock()
        self.admit_lock = threading.RLock()
        self.applier = ApplyQueue(self.engine_lock, self._apply_admitted, max_pending=max_pending,
                                  on_error=self._apply_failed)
        self.lock = ExclusiveLock(self.admit_lock, self.engine_lock, self.applier)
        self._admit_clock: dict = {}                # stream -> latest time admitted (applied or queued)
        # pipelined ingest: next expected sequence number per producer (updated under admit_lock with the log)
        self.producers = Producers(self.limits.max_producers, self.limits.producer_window,
                                   self.limits.max_sequence_wait_s, self.limits.max_forgotten_producers)
        self.logs: dict[int, ResultLog] = {}
        self.summaries = SummaryRegistry(self.limits.max_summaries, self.limits.max_summary_file_bytes,
                                         self.limits.summary_roots)
        self.rejected_rows = defaultdict(int)       # stream -> rows of refused batches
        self.rejected_batches = defaultdict(int)
        self.rejected_by_reason = defaultdict(int)  # (stream, reason) -> rows
        self.http = defaultdict(int)                # (method, status) -> requests (guarded by http_lock)
        self.http_lock = threading.Lock()
        self.auth_failures = defaultdict(int)       # status -> requests refused by auth
        self.demo = None
        self.store = store
        self.auth = auth
        self.notifier = Notifier(self.limits.max_sse_clients)
        self.replaying = False
        self.recovery: dict | None = None
        # engine seconds spent on logged operations since the last checkpoint: what a restart would replay
        self.replay_cost_s = 0.0
        self.boot = time.time()

    # -- checks ------------------------------------------------------------------
    def check_sql(self, sql) -> str:
        if not isinstance(sql, str) or not sql.strip():
            raise ApiError(422, "bad_request", "\"sql\" must be a non-empty string", field="sql")
        if len(sql) > self.limits.max_sql_chars:
            raise limit_exceeded(413, "max_sql_chars", len(sql), self.limits.max_sql_chars, "SQL length")
        return sql

    # -- the operation log -----------------------------------------------------------
    def _log(self, kind: str, meta: dict, payload: bytes | None = None, tuples: int = 0):
        """Append an applied operation (under the lock); returns its seq (None without a store)."""
        if self.store is None or self.replaying:
            return None
        return self.store.append(kind, meta, payload, tuples)

    def wait_durable(self, seq) -> None:
        """Block (outside the lock) until operation ``seq`` is on disk."""
        if self.store is not None and seq is not None:
            from .durability import DataDirError
            try:
                self.store.wait(seq)
            except DataDirError as exc:
                raise ApiError(503, "not_durable", f"the change was applied but could not be made durable: {exc}")\
                    from None

    def _collect_all(self) -> None:
        """Drain every query's new changes into its buffer (after each operation, under the lock)."""
        grew = []
        for q in self.engine.queries:
            log_ = self._collect(q)
            if log_.total != getattr(log_, "_seen", -1):
                grew.append(q.id)
                log_._seen = log_.total
            elif q.failed is not None and not getattr(log_, "_failed_seen", False):
                grew.append(q.id)             # failed (e.g. max_rows_per_step): its SSE streams end
            if q.failed is not None:
                log_._failed_seen = True
        if grew and not self.replaying:
            self.notifier.notify(grew)        # only the SSE clients of the queries that grew

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
        """Run CREATE STREAM / TABLE / SUMMARY, ALTER STREAM ... ADD CONSTRAINT and DROP STREAM / TABLE / SUMMARY."""
        from ..planner.parser import parse

        self.check_sql(sql)
        with self.lock:
            try:
                stmts = parse(sql)
            except SketchQLError as exc:
                raise from_exception(exc) from None
            created, dropped = [], []
            for s in stmts:
                kind = type(s).__name__
                pos = getattr(s, "pos", (None, None)) or (None, None)
                if kind not in _DDL:
                    what = "POST /queries (or POST /explain)" if kind in ("Query", "Explain") else "another endpoint"
                    raise ApiError(400, "wrong_endpoint", f"{kind} statements are not accepted here; use {what} "
                                   f"(this endpoint takes CREATE STREAM / TABLE / SUMMARY, ALTER STREAM and DROP)",
                                   line=pos[0], column=pos[1])
                if kind == "Drop" and s.kind == "query":
                    raise ApiError(400, "wrong_endpoint", "drop a query with DELETE /queries/{id}",
                                   line=pos[0], column=pos[1])
                if kind == "CreateSummary" and is_auto_index(s.name):
                    raise ApiError(400, "reserved_name", f"summary names starting with {AUTO_PREFIX!r} are "
                                   f"the engine's own indexes; choose another name for {s.name!r}",
                                   line=pos[0], column=pos[1])
                if kind in ("CreateStream", "CreateTable", "CreateSummary"):
                    created.append(s.name)
                elif kind == "Drop":
                    dropped.append(s.name)
            n_rel = len(self.engine.catalog.streams) + len(self.engine.catalog.tables)
            n_new = sum(type(s).__name__ in ("CreateStream", "CreateTable") for s in stmts)
            if n_rel + n_new > self.limits.max_streams:
                raise limit_exceeded(422, "max_streams", n_rel + n_new, self.limits.max_streams,
                                     "declared streams and tables")
            n_sum = self.n_user_summaries() + len(self.summaries.entries)
            n_new = sum(type(s).__name__ == "CreateSummary" for s in stmts)
            if n_new and n_sum + n_new > self.limits.max_summaries:
                raise limit_exceeded(422, "max_summaries", n_sum + n_new, self.limits.max_summaries,
                                     "summaries, created and loaded together (nothing was created; "
                                     "DROP SUMMARY or DELETE /summaries/{name} one first)")
            applied, err = self._apply_ddl(stmts, sql)
            seq = self._log("ddl", {"sql": sql, "n": applied}) if applied else None
            if applied:
                self._collect_all()
                if any(type(x).__name__ == "Drop" for x in stmts[:applied]):
                    gcpolicy.release()          # a dropped stream / summary may hold reference cycles
        self.wait_durable(seq)
        if err is not None:                     # nothing applied: the engine's message names the statement
            api = from_exception(err)
            api.fields["applied_statements"] = 0
            if getattr(err, "statement_index", None) is not None:
                api.fields["failed_statement"] = int(err.statement_index) + 1
            raise api
        return {"ok": True, "statements": len(stmts), "created": created, "dropped": dropped}

    def _apply_ddl(self, stmts, sql):
        """Apply the statements through ``Engine.execute``, all or nothing: ``(applied, error or None)``
        (0 applied on an error).  The replay of a logged record goes statement by statement instead
        (:meth:`apply_op`)."""
        try:
            self.engine.execute(sql)
            return len(stmts), None
        except SketchQLError as exc:
            return 0, exc

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
                out["stats"] = {k: jsonable(v) for k, v in st.items() if k != "knobs"}
                out["stats"]["rejected_rows"] = self.rejected_rows[schema.name]
                # the service's count (also /metrics): every refusal, incl. unparsable bodies and time jumps
                out["stats"]["rejected_batches"] = self.rejected_batches[schema.name]
                out["stats"]["rejected_rows_by_reason"] = {r: n for (s, r), n in self.rejected_by_reason.items()
                                                           if s == schema.name}
                out["knobs"] = jsonable(st.get("knobs", {}))
            return out

    def list_streams(self) -> dict:
        with self.lock:
            cat = self.engine.catalog
            return {"streams": [self.describe_stream(s.name) for s in cat.streams],
                    "tables": [self.describe_stream(t.name) for t in cat.tables]}

    def _count_reject(self, name: str, n: int, reason: str):
        with self.http_lock:                   # counters only: taken from admission, apply and reads alike
            self.rejected_rows[name] += n
            self.rejected_batches[name] += 1
            self.rejected_by_reason[(name, reason)] += n

    def _check_jump(self, schema, columns: dict, n: int, clock: float | None = None):
        """Refuse times more than ``max_time_jump`` s ahead of the stream clock (``clock``: the clock
        including batches admitted but not applied yet; default the engine's), or of the batch's
        earliest time when the stream has no clock yet.  A missing or non-numeric time column is
        left to the engine's validation, which reports it."""
        jump = self.limits.max_time_jump
        if jump is None or schema.is_table:
            return
        tcol = next((k for k in columns if k.lower() == schema.timestamp.lower()), None)
        if tcol is None:
            return
        try:
            ts = np.asarray(columns[tcol], dtype=np.float64)
        except (TypeError, ValueError):
            return
        if not len(ts):
            return
        if clock is None:
            clock = self.engine.stream(schema.name).clock
        if np.isfinite(clock) and float(ts.max()) <= clock + jump:   # the common case in one pass (NaN: no)
            return
        finite = np.isfinite(ts)
        if not finite.any():
            return
        ref = clock if np.isfinite(clock) else float(ts[finite].min())
        bad = finite & (ts > ref + jump)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            self._count_reject(schema.name, n, "time_jump")
            what = "the stream clock" if np.isfinite(clock) else "the batch's earliest time"
            raise ApiError(400, "TimeJumpError", f"stream {schema.name}: row {r} has timestamp {ts[r]:g}, more "
                           f"than max_time_jump={jump:g} s ahead of {what} {ref:g}; the whole batch is refused "
                           f"(raise --max-time-jump if such jumps are real)", stream=schema.name, row=r,
                           column_name=schema.timestamp, limit="max_time_jump")

    # -- asynchronous ingest: admit (validate + log) now, apply in log order on the apply thread -----
    BUSY = "busy"

    def admit(self, name: str, columns: dict, n: int, raw: bytes | None = None, block: bool = True,
              producer=None):
        """Validate a parsed batch fully, log it and queue it for the apply thread; the receipt, or
        None when this stream needs the synchronous :meth:`push` (a stream with a slack buffer, whose
        acceptance depends on the buffer's state).  Raises :class:`ApiError` for a refused batch
        (counted; nothing logged or queued).

        The checks are the engine's own (:meth:`Engine.validate <sketchql.engine.Engine.validate>`:
        columns, types, NaN / infinite times, lateness) plus ``max_time_jump``, both against the stream's clock
        *including the batches still queued* -- the clock the engine will have when this batch is
        applied -- so an admitted batch cannot be refused later.  The receipt's ``clock`` is that clock
        after this batch; ``apply_number`` numbers the batch in the apply queue (the caller reports
        its acknowledgement with ``applier.acknowledged``).  ``block=False`` (the event loop's fast path): return :attr:`BUSY` at once
        instead of waiting for the admission lock or for room in the apply queue -- with a full queue
        only after the checks, so a batch that will be refused is refused at once, never after
        waiting for room (it is checked again when admitted: the clock may move meanwhile).
        ``producer``: ``(producer id, sequence number)`` of a pipelined batch, logged with it and recorded
        in :attr:`producers` in the same critical section (the caller holds the producer's turn)."""
        if not self._enter_admission(block, lambda: self._checked(name, columns, n)):
            return self.BUSY
        try:
            return self._admit(name, columns, n, raw, producer)
        finally:
            self.admit_lock.release()

    def _enter_admission(self, block: bool, check) -> bool:
        """Take the admission lock (admissions in seq order; excludes ``with self.lock``): True once
        held.  ``block=False``: False at once if the lock is taken, or, after ``check()`` (which raises
        for a batch that would be refused), if the apply queue is full; each counted in
        ``applier.busy``."""
        if block:
            self.admit_lock.acquire()
            return True
        if not self.admit_lock.acquire(blocking=False):
            self.applier.busy["locked"] += 1
            return False
        if self.applier.pending >= self.applier.max_pending:
            try:
                check()
            finally:
                self.admit_lock.release()
            self.applier.busy["full"] += 1
            return False
        return True

    def _admission_clock(self, schema, h) -> float:
        """The clock stream ``h`` will have once the batches admitted so far are applied."""
        prev = self._admit_clock.get(schema.name.lower())
        return max(h.clock, prev[1]) if prev is not None and prev[0] is h else h.clock

    def _receipt_producer(self, out: dict, producer, seq, number) -> dict:
        """Record a pipelined request's admission in :attr:`producers` and name it in its receipt."""
        if producer is not None:
            self.producers.record(producer[0], producer[1], seq, number)
            out["producer"], out["sequence"] = producer
        return out

    def _checked(self, name, columns, n):
        """``(schema, handle or None, clock, validated Batch)`` of a batch admitted now, or None for a
        stream with a slack buffer; :class:`ApiError` (counted) for one that would be refused.  Under
        the admission lock."""
        schema = self._schema(name)
        if schema.is_table:
            h, clock = None, None
        else:
            h = self.engine.stream(schema.name)
            if self.engine.input_buffered(schema.name):
                return None
            clock = self._admission_clock(schema, h)
            self._check_jump(schema, columns, n, clock)
        try:
            b = self.engine.validate(schema.name, columns, clock)
        except SketchQLError as exc:
            if h is not None:
                h.rejected_batches += 1
            self._count_reject(schema.name, n, "late" if type(exc).__name__ == "LateTupleError" else "invalid")
            raise from_exception(exc, stream=schema.name) from None
        return schema, h, clock, b

    def _admit(self, name, columns, n, raw, producer=None):
        checked = self._checked(name, columns, n)
        if checked is None:
            return None
        schema, h, clock, b = checked
        key = schema.name.lower()
        seq = self._log_push(schema.name, columns, n, raw, producer)
        if h is not None and len(b):
            clock = max(clock, float(b.ts[-1]))
            self._admit_clock[key] = (h, clock)
        # a stream's batch is queued as validated here (the apply thread does not check it again: the
        # clock it was judged against is the one the stream will have; heartbeats, DDL and knob changes
        # apply the queue first); a table's columns are validated by the push
        number = self.applier.put(_Admitted(schema.name, b if h is not None else columns, n, seq, h is not None))
        out = {"stream": schema.name, "accepted": n, "clock": json_number(None if h is None else clock),
               "seq": seq, "apply_number": number}
        return self._receipt_producer(out, producer, seq, number)

    def admit_many(self, name: str, parsed: list, raw: bytes, block: bool = True, producer=None):
        """:meth:`admit` for the record batches of one ``X-Arrow-Batches: each`` request, all or nothing:
        ``parsed`` = ``[(columns, n), ...]`` in stream order; each is checked like a batch of its own
        against the clock the stream will have after the ones before it; if every one passes, the body
        is logged once (one record, replayed as the same batches) and queued as one item whose batches
        the apply thread pushes one by one (each its own :meth:`Engine.push`).  A refused one refuses
        the request (:class:`ApiError` with ``batch_index``; nothing logged or queued).  The receipt has
        the total ``accepted``, the clock after the last batch and ``batches``: each one's ``accepted``
        and ``clock``.  :attr:`BUSY` as in :meth:`admit`."""
        if not self._enter_admission(block, lambda: self._checked_many(name, parsed)):
            return self.BUSY
        try:
            return self._admit_many(name, parsed, raw, producer)
        finally:
            self.admit_lock.release()

    def _checked_many(self, name, parsed):
        """``(schema, handle, [(validated Batch, n, clock after it), ...])`` (see :meth:`admit_many`)."""
        from .ingest import batch_error

        schema = self._schema(name)
        if schema.is_table or self.engine.input_buffered(schema.name):
            what = "a table" if schema.is_table else "a stream with a slack buffer (applied before the answer)"
            raise ApiError(400, "bad_request", f"{schema.name} is {what}: send one batch per request there "
                           f"(X-Arrow-Batches: each is for streams)", stream=schema.name)
        h = self.engine.stream(schema.name)
        clock = self._admission_clock(schema, h)
        total = sum(n for _, n in parsed)
        out = []
        for i, (columns, n) in enumerate(parsed):
            try:
                self._check_jump(schema, columns, total, clock)       # counts the request's rows if refused
                b = self.engine.validate(schema.name, columns, clock)
            except ApiError as exc:
                raise batch_error(exc, i) from None
            except SketchQLError as exc:
                h.rejected_batches += len(parsed)
                self._count_reject(schema.name, total, "late" if type(exc).__name__ == "LateTupleError" else "invalid")
                raise batch_error(from_exception(exc, stream=schema.name), i) from None
            if len(b):
                clock = max(clock, float(b.ts[-1]))
            out.append((b, n, clock))
        return schema, h, out

    def _admit_many(self, name, parsed, raw, producer=None):
        schema, h, checked = self._checked_many(name, parsed)
        total = sum(n for _, n, _ in checked)
        seq = self._log_push(schema.name, None, total, raw, producer, each=len(checked))
        clock = checked[-1][2] if checked else self._admission_clock(schema, h)
        self._admit_clock[schema.name.lower()] = (h, clock)
        number = self.applier.put(_AdmittedGroup(schema.name, [(b, n) for b, n, _ in checked], total, seq))
        out = {"stream": schema.name, "accepted": total, "clock": json_number(clock), "seq": seq,
               "apply_number": number,
               "batches": [{"accepted": n, "clock": json_number(c)} for _, n, c in checked]}
        return self._receipt_producer(out, producer, seq, number)

    def _log_push(self, stream: str, columns: dict, n: int, raw: bytes | None, producer=None, each=None):
        """Log one batch (the Arrow body as it came, else the encoded columns) with its producer id and
        sequence number if it has them; None when not logging."""
        from .durability import encode_columns

        if self.store is None or self.replaying:
            return None
        meta = {"stream": stream, "format": "arrow" if raw is not None else "columns"}
        if each is not None:
            meta["each"] = int(each)          # the Arrow stream's record batches are so many batches
        if producer is not None:
            meta["producer"], meta["pseq"] = producer
        return self.store.append("push", meta, raw if raw is not None else encode_columns(columns), n)

    def _apply_admitted(self, item) -> None:
        """The apply thread's work for one admitted batch (engine lock held)."""
        t0 = time.perf_counter()
        if isinstance(item, _AdmittedGroup):
            for b, _ in item.batches:             # each its own push, as if it had come alone
                self.engine.push(item.stream, b, validated=True)
                self._collect_all()
        else:
            self.engine.push(item.stream, item.columns, validated=item.validated)
            self._collect_all()
        self.replay_cost_s += time.perf_counter() - t0

    def _apply_failed(self, item, exc) -> None:
        self._count_reject(item.stream, item.n, "apply_error")

    def when_applied(self, loop):
        """For reads on an event loop: None, or a future resolved once every batch acknowledged so far
        is applied."""
        return self.applier.when_applied(loop)

    def push(self, name: str, columns: dict, n: int, wait: bool = True, raw: bytes | None = None,
             producer=None) -> dict:
        """Push one parsed batch; a refused batch changes nothing (and is counted). Returns the receipt
        once the batch is durable (``wait=False``: at once, for callers already holding the lock).

        The log record is enqueued *before* the engine applies the batch, so the fsync of the group
        commit overlaps the engine's work; a batch the engine then refuses gets an ``abort`` record
        and is skipped on replay.  ``raw``: the request's Arrow IPC body, logged as it came (replay
        parses it with the same :func:`~sketchql.service.ingest.parse_batch`)."""
        with self.lock:
            schema = self._schema(name)
            self._check_jump(schema, columns, n)
            seq = self._log_push(schema.name, columns, n, raw, producer)
            t0 = time.perf_counter()
            try:
                self.engine.push(schema.name, columns)
            except SketchQLError as exc:
                if seq is not None:
                    self.store.append("abort", {"seq": seq})
                self._count_reject(schema.name, n, "late" if type(exc).__name__ == "LateTupleError" else "invalid")
                raise from_exception(exc, stream=schema.name) from None
            if producer is not None:
                self.producers.record(producer[0], producer[1], seq)
            self._collect_all()
            self.replay_cost_s += time.perf_counter() - t0
            clock = None if schema.is_table else self.engine.stream(schema.name).clock
        if wait:
            self.wait_durable(seq)
        out = {"stream": schema.name, "accepted": n, "clock": json_number(clock), "seq": seq}
        if producer is not None:
            out["producer"], out["sequence"] = producer
        return out

    def reject(self, name: str, n: int = 0, reason: str = "invalid"):
        """Count a batch refused before admission (unparsable body).  Takes no engine lock: it may run
        on the event loop while the apply thread works."""
        schema = self.engine.catalog.get(name)
        if schema is not None:
            self._count_reject(schema.name, n, reason)

    def heartbeat(self, name: str, ts, wait: bool = True) -> dict:
        with self.lock:
            schema = self._schema(name)
            if schema.is_table:
                raise ApiError(400, "bad_request", f"{schema.name} is a table; heartbeats are for streams",
                               stream=schema.name)
            if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(float(ts)):
                raise ApiError(422, "bad_request", f"\"ts\" must be a finite number, got {ts!r}", field="ts",
                               stream=schema.name)
            ts = float(ts)
            jump = self.limits.max_time_jump
            clock = self.engine.stream(schema.name).clock
            if jump is not None and np.isfinite(clock) and ts > clock + jump:
                raise ApiError(400, "TimeJumpError", f"stream {schema.name}: heartbeat {ts:g} is more than "
                               f"max_time_jump={jump:g} s ahead of the stream clock {clock:g}", stream=schema.name,
                               field="ts", limit="max_time_jump")
            t0 = time.perf_counter()
            try:
                self.engine.heartbeat(schema.name, ts)
            except SketchQLError as exc:
                raise from_exception(exc, stream=schema.name) from None
            seq = self._log("heartbeat", {"stream": schema.name, "ts": ts})
            self._collect_all()
            self.replay_cost_s += time.perf_counter() - t0
            out = {"stream": schema.name, "clock": json_number(self.engine.stream(schema.name).clock), "seq": seq}
        if wait:
            self.wait_durable(seq)
        return out

    # -- queries ---------------------------------------------------------------------
    def _query(self, qid: int):
        for q in self.engine.queries:
            if q.id == qid:
                return q
        raise not_found("query", qid, [q.id for q in self.engine.queries])

    def explain(self, sql: str) -> dict:
        """EXPLAIN of one query (``EXPLAIN`` prefix optional): the text and the plan as JSON."""
        from ..planner import ast as A
        from ..planner.parser import parse
        from .plans import plan_json

        self.check_sql(sql)
        with self.lock:
            try:
                stmts = parse(sql)
                if len(stmts) != 1 or not isinstance(stmts[0], (A.Query, A.Explain)):
                    raise ApiError(400, "bad_request", "EXPLAIN takes exactly one SELECT query", field="sql")
                q = stmts[0].query if isinstance(stmts[0], A.Explain) else stmts[0]
                text = self.engine.explain(sql)
                plan = None
                physical = getattr(self.engine, "_plan_physical", None)
                if physical is not None:
                    try:
                        plan = plan_json(physical(q, explain=True))
                    except SketchQLError:
                        plan = None
            except SketchQLError as exc:
                raise from_exception(exc) from None
        return {"sql": sql, "explain": text, "plan": plan}

    def register(self, sql: str) -> dict:
        """Register one SELECT (an ``EXPLAIN SELECT`` is explained instead, nothing registered).

        Atomic: a registration that fails leaves no query behind (and consumes no id visible to
        anyone)."""
        from ..engine.checkpoint import next_query_id, set_next_query_id
        from ..planner import ast as A
        from ..planner.parser import parse

        self.check_sql(sql)
        try:
            stmts = parse(sql)
        except SketchQLError as exc:
            raise from_exception(exc) from None
        if len(stmts) == 1 and isinstance(stmts[0], A.Explain):
            out = self.explain(sql)
            out["registered"] = False
            return out
        with self.lock:
            if len(self.engine.queries) >= self.limits.max_queries:
                raise limit_exceeded(422, "max_queries", len(self.engine.queries) + 1, self.limits.max_queries,
                                     "registered queries (DELETE /queries/{id} one first)")
            before = {q.id for q in self.engine.queries}
            nid = next_query_id(self.engine)
            try:
                q = self.engine.register(sql)
            except Exception as exc:                       # roll back whatever the failed attempt left
                for extra in [q for q in self.engine.queries if q.id not in before]:
                    self.engine.deregister(extra)
                set_next_query_id(self.engine, nid)
                if isinstance(exc, SketchQLError):
                    err = from_exception(exc)
                    # the engine's message may name the id the attempt had; it was never given (the next
                    # registration gets it), so the message must not name it
                    err.message = re.sub(r"\b[Qq]uery (\d+)\b",
                                         lambda m: "the query" if int(m.group(1)) >= nid else m.group(0), err.message)
                    raise err from None
                log.exception("registration failed")
                raise ApiError(500, "internal_error", f"registering the query failed inside the engine "
                               f"({type(exc).__name__}: {exc}); nothing was registered") from None
            self.logs[q.id] = ResultLog(q.names, self.limits.max_retained_rows)
            self._fit_retention(q)
            seq = self._log("register", {"sql": sql, "id": q.id})
            if self.store is not None:
                self.store.set_meta("max_query_id", max(q.id, int(self.store.get_meta("max_query_id", 0) or 0)))
            self._collect_all()
            out = self._describe_query(q, full=False)
        self.wait_durable(seq)
        return out

    def _collect(self, q):
        log_ = self.logs.get(q.id)
        if log_ is None:
            log_ = self.logs[q.id] = ResultLog(q.names, self.limits.max_retained_rows)
            self._fit_retention(q)
        batches = q.poll()
        log_.skip(getattr(batches, "missed", 0))
        for ch in batches:
            log_.append(ch)
        return log_

    def _fit_retention(self, q) -> None:
        """Keep the engine's change log of ``q`` (its ``retain_changes`` knob) at least as long as the
        query's result buffer: the engine trims it when one operation makes more rows than that, before
        the service collects them, and those rows would be lost although the buffer has room."""
        log_ = self.logs.get(q.id)
        r = getattr(q, "retain_changes", None)
        if log_ is not None and r is not None and r < log_.max_rows:
            self.engine.controls.set("query", f"q{q.id}", "retain_changes", log_.max_rows)

    def collect_all(self):
        with self.lock:
            self._collect_all()

    def _describe_query(self, q, full=True) -> dict:
        out = {"id": q.id, "sql": q.sql, "view": q.view, "columns": list(q.names), "engine": q.plan.engine,
               "clock": json_number(q.clock), "active": bool(getattr(q, "active", True)),
               "state": q.state, "error": q.failed,
               "weight": jsonable(getattr(q, "weight", 1.0)),
               "links": {"self": f"/queries/{q.id}", "results": f"/queries/{q.id}/results?since=0",
                         "stream": f"/queries/{q.id}/stream", "snapshot": f"/queries/{q.id}/snapshot",
                         "contract": f"/queries/{q.id}/contract", "precision": f"/queries/{q.id}/precision",
                         "plan": f"/queries/{q.id}/plan"}}
        if full:
            log_ = self._collect(q)
            out["explain"] = q.explain()
            st = q.stats()
            out["stats"] = jsonable({k: v for k, v in st.items() if k not in ("operators", "knobs")})
            out["stats"]["result_rows"] = log_.total
            out["stats"]["retained_rows"] = log_.retained
            out["stats"]["buffer_rows"] = log_.max_rows
            out["operators"] = jsonable(st.get("operators", []))
            out["knobs"] = jsonable(st.get("knobs", {}))
            out["contract"] = self._contract(q)
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
            seq = self._log("deregister", {"id": qid})
        gcpolicy.release()                      # the query's plan may hold reference cycles
        self.notifier.notify([qid])             # its SSE clients end
        self.wait_durable(seq)
        return {"ok": True, "deleted": qid}

    # -- contracts, knobs, budgets, control tables -------------------------------------
    def _contract(self, q) -> dict:
        k = q.knobs()
        return jsonable({n: k.get(n) for n in CONTRACT_KNOBS + ("budget_unit",)})

    def _set_controls(self, kind: str, name: str, values: dict) -> dict:
        """Set knobs of one entity, all or nothing (each validated first), logged as one operation each."""
        ct = self.engine.controls
        try:
            table = ct.get(kind, name)
        except ControlError as exc:
            raise ApiError(404, "not_found", str(exc), kind=kind, name=name) from None
        for knob, value in values.items():
            try:
                v = table.knob(knob).coerce(value, where=f"{kind} {table.name}")
            except (ControlError, SketchQLError, KeyError) as exc:
                msg = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)   # KeyError quotes
                raise ApiError(422, "bad_control", msg, kind=kind, name=table.name, knob=knob) from None
            if kind == "query" and knob == "retain_changes" and v is not None:
                q = next((x for x in self.engine.queries if f"q{x.id}" == table.name), None)
                log_ = None if q is None else self.logs.get(q.id)
                if log_ is not None and v < log_.max_rows:
                    raise ApiError(422, "bad_control", f"query {table.name}: retain_changes={v:g} is below the "
                                   f"query's result buffer of {log_.max_rows} rows (--result-buffer-rows): the "
                                   f"engine would drop rows of a large operation before the service collects "
                                   f"them; set at least {log_.max_rows} (or null: unbounded)", kind=kind,
                                   name=table.name, knob=knob, minimum=log_.max_rows)
        applied, seq = {}, None
        for knob, value in values.items():
            try:
                applied[knob] = ct.set(kind, table.name, knob, value)
            except (ControlError, SketchQLError) as exc:
                raise ApiError(422, "bad_control", str(exc), kind=kind, name=table.name, knob=knob) from None
            seq = self._log("control", {"kind": kind, "name": table.name, "knob": knob, "value": jsonable(value)})
        self._collect_all()
        return {"applied": jsonable(applied), "seq": seq}

    def set_controls(self, kind: str, name: str, values: dict) -> dict:
        if not isinstance(values, dict) or not values:
            raise ApiError(422, "bad_request", "the body must be a non-empty JSON object {\"knob\": value, ...}")
        with self.lock:
            res = self._set_controls(kind, name, values)
            table = self.engine.controls.get(kind, name).as_dict()
        self.wait_durable(res["seq"])
        return {"applied": res["applied"], "table": jsonable(table)}

    def control_tables(self, kind=None) -> dict:
        from ..control import KINDS

        if kind is not None and kind not in KINDS:
            raise ApiError(404, "not_found", f"unknown control-table kind {kind!r} (kinds: {', '.join(KINDS)})",
                           kind=kind)
        with self.lock:
            return {"tables": jsonable(self.engine.controls.as_json(kind))}

    def control_table(self, kind: str, name: str) -> dict:
        with self.lock:
            try:
                return jsonable(self.engine.controls.get(kind, name).as_dict())
            except ControlError as exc:
                raise ApiError(404, "not_found", str(exc), kind=kind, name=name) from None

    def contract(self, qid: int) -> dict:
        with self.lock:
            q = self._query(qid)
            return dict({"query": qid}, **self._contract(q))

    def patch_contract(self, qid: int, values: dict) -> dict:
        with self.lock:
            q = self._query(qid)
            res = self._set_controls("query", f"q{q.id}", values)
            out = dict({"query": qid}, **self._contract(q))
        self.wait_durable(res["seq"])
        return out

    def query_state(self, q) -> dict:
        return {"query": q.id, "active": bool(q.active), "weight": jsonable(q.weight)}

    def patch_query(self, qid: int, values: dict) -> dict:
        with self.lock:
            q = self._query(qid)
            res = self._set_controls("query", f"q{q.id}", values)
            out = self._describe_query(q, full=False)
        self.wait_durable(res["seq"])
        return out

    def budgets(self) -> dict:
        with self.lock:
            return jsonable(dict(self.engine.budgets))

    def patch_budgets(self, values: dict) -> dict:
        with self.lock:
            res = self._set_controls("engine", "engine", values)
            out = jsonable(dict(self.engine.budgets))
        self.wait_durable(res["seq"])
        return out

    def precision(self, qid: int, limit=None) -> dict:
        """``query.precision()`` and its series when the precision API exists, else "not available"."""
        with self.lock:
            q = self._query(qid)
            out = {"query": qid, "contract": self._contract(q)}
            if hasattr(q, "precision"):
                out["available"] = True
                out["precision"] = jsonable(q.precision())
            else:
                out["available"] = False
                out["precision"] = None
                out["reason"] = "not available: this engine has no precision API (query.precision())"
            if hasattr(q, "precision_series"):
                out["series"] = jsonable(q.precision_series(limit))
            else:
                out["series"] = None
            return out

    def allocator(self) -> dict:
        with self.lock:
            alloc = getattr(self.engine, "allocator", None)
            if alloc is None:
                return {"available": False, "reason": "not available: this engine has no allocator",
                        "budgets": jsonable(dict(self.engine.budgets))}
            dec = alloc.decision() if hasattr(alloc, "decision") else None
            return {"available": True, "enabled": bool(getattr(alloc, "enabled", True)), "decision": jsonable(dec),
                    "budgets": jsonable(dict(self.engine.budgets))}

    def plan(self, qid: int) -> dict:
        from .plans import plan_json

        with self.lock:
            q = self._query(qid)
            if hasattr(q, "plan_view"):
                view = jsonable(q.plan_view())
            else:
                view = plan_json(q.plan, query=q.id)
            return {"query": qid, "explain": q.explain(), "plan": view}

    # -- results -------------------------------------------------------------------------
    def check_limit(self, limit) -> int:
        if limit is None:
            return self.limits.default_results_limit
        if limit < 1 or limit > self.limits.max_results_limit:
            raise ApiError(422, "bad_parameter", f"limit must be in 1..{self.limits.max_results_limit} "
                           f"(max_results_limit), got {limit}", parameter="limit", limit="max_results_limit",
                           value=limit)
        return int(limit)

    def _check_since(self, since, log_) -> int:
        if since < 0:
            raise ApiError(422, "bad_parameter", f"since must be >= 0, got {since}", parameter="since")
        if since > log_.total:
            raise ApiError(422, "bad_parameter", f"since={since} is past the end of the results: the query has "
                           f"produced {log_.total} rows so far (cursors run 0..{log_.total})",
                           parameter="since", total=log_.total)
        return int(since)

    def _buffer(self, qid: int):
        """(query, its result buffer) without taking the engine lock (reads never wait for a push)."""
        q = next((x for x in self.engine.queries if x.id == qid), None)
        log_ = self.logs.get(qid)
        if q is None or log_ is None:
            raise not_found("query", qid, [x.id for x in self.engine.queries])
        return q, log_

    def results(self, qid: int, since: int, limit) -> dict:
        """Rows ``since <= seq < since + limit`` of the query's buffer (filled after every operation)."""
        limit = self.check_limit(limit)
        q, log_ = self._buffer(qid)
        since = self._check_since(since, log_)
        out = log_.read(since, limit)
        return dict({"query": qid, "view": q.view, "columns": list(q.names), "clock": json_number(q.clock),
                     "buffer_rows": log_.max_rows}, **out)

    def read_for_stream(self, qid: int, since: int, limit: int):
        """(page dict or None if the query is gone) for the SSE endpoint."""
        try:
            _, log_ = self._buffer(qid)
        except ApiError:
            return None
        return log_.read(since, limit)

    def snapshot(self, qid: int, at, limit) -> dict:
        limit = self.check_limit(limit)
        if at is not None and not math.isfinite(at):
            raise ApiError(422, "bad_parameter", f"at must be finite, got {at}", parameter="at")
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

    def n_user_summaries(self) -> int:
        """Live summaries counted by ``max_summaries``: the ``CREATE SUMMARY`` ones, not the engine's
        automatic indexes (``_auto_<stream>_<col>``, declared for a PREFERENCE query's join column)."""
        return sum(not is_auto_index(d.name) for d in self.engine.catalog.summaries)

    def list_summaries(self) -> dict:
        with self.lock:
            live = [{"name": d.name, "origin": "live", "stream": d.stream, "attrs": list(d.attrs),
                     "granularity": d.granularity, "collapse": [d.rate, d.depth],
                     "kind": "index" if d.index else None} for d in self.engine.catalog.summaries]
            loaded = [self.summaries.describe(n) for n in sorted(self.summaries.entries)]
            return {"summaries": loaded + live}

    def load_summary(self, path, name=None, as_name=None) -> dict:
        with self.lock:
            reserved, n_live = list(self.live_summaries()), self.n_user_summaries()
        info = self.summaries.load(path, name, as_name, reserved=reserved, n_live=n_live)   # reads outside the lock
        with self.lock:
            seq = self._log("summary_load", {"path": path, "name": name, "as": as_name})
        self.wait_durable(seq)
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
        for p, v in (("t_from", t_from), ("t_to", t_to), ("confidence", confidence)):
            if v is not None and not math.isfinite(v):
                raise ApiError(422, "bad_parameter", f"{p} must be finite, got {v}", parameter=p)
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
            schema = self.engine.catalog.get(d.stream)
            ctype = None if schema is None else next((t for c, t in schema.columns.items()
                                                      if c.lower() == str(attr).lower()), None)
            values = _values_for(values, ctype, d.name, attr)
            feed = getattr(self.engine, "index_feed", None)    # tuples a PT join's index has not ingested yet
            out = estimate_summary(feed.reader(ix) if feed is not None else ix, d.name, values, t_from, t_to,
                                   confidence)
            out["origin"] = "live"
            return out

    def unload_summary(self, name: str) -> dict:
        with self.lock:
            live = None if name in self.summaries.entries else \
                next((d.name for d in self.engine.catalog.summaries if d.name.lower() == name.lower()), None)
        if live is not None:                    # a CREATE SUMMARY one: dropped as DROP SUMMARY drops it
            self.execute_ddl(f"DROP SUMMARY {live}")
            return {"ok": True, "deleted": live}
        with self.lock:
            self.summaries.unload(name)
            seq = self._log("summary_unload", {"name": name})
        self.wait_durable(seq)
        return {"ok": True, "deleted": name}

    # -- checkpoint and recovery -------------------------------------------------------
    def snapshot_state(self) -> tuple[int, bytes]:
        """``(seq, bytes)``: everything a restart needs, consistent with the log up to ``seq``."""
        from ..engine.checkpoint import dumps, next_query_id

        with self.lock:
            seq = self.store.last_seq if self.store is not None else 0
            self._replay_cost_at_snapshot = self.replay_cost_s
            data = dumps({"version": 1, "seq": seq, "engine": self.engine, "logs": self.logs,
                          "summaries": self.summaries.entries, "next_query_id": next_query_id(self.engine),
                          "rejected_rows": dict(self.rejected_rows), "rejected_batches": dict(self.rejected_batches),
                          "rejected_by_reason": dict(self.rejected_by_reason),
                          "producers": self.producers.snapshot()})
        return seq, data

    def checkpoint(self) -> dict:
        """Write a checkpoint now (atomic) and drop the log before it."""
        if self.store is None:
            raise ApiError(409, "no_data_dir", "this server keeps no state on disk (started without --data-dir)")
        t0 = time.perf_counter()
        seq, data = self.snapshot_state()
        t1 = time.perf_counter()
        self.store.write_checkpoint(seq, data)
        with self.lock:              # what was logged after the snapshot still counts
            self.replay_cost_s = max(0.0, self.replay_cost_s - self._replay_cost_at_snapshot)
        return {"seq": seq, "bytes": len(data), "snapshot_s": t1 - t0, "write_s": time.perf_counter() - t1}

    def recover(self) -> dict:
        """Load the newest checkpoint and replay the log after it (at start-up, before serving)."""
        from ..engine.checkpoint import loads, reserve_query_ids

        if self.store is None:
            return {}
        from ..planner.parser import parse

        tw = time.perf_counter()
        parse("SELECT 1 FROM warmup")          # builds the SQL parser once (a fixed start-up cost, not replay)
        t0 = time.perf_counter()
        info = {"checkpoint_seq": 0, "replayed_ops": 0, "replayed_tuples": 0, "errors": [],
                "parser_warmup_s": t0 - tw}
        with self.lock:
            ck = self.store.read_checkpoint()
            if ck is not None:
                snap = loads(ck[1])
                self.engine = snap["engine"]
                self.logs = snap["logs"]
                self.summaries.entries = snap["summaries"]
                self.rejected_rows.update(snap.get("rejected_rows", {}))
                self.rejected_batches.update(snap.get("rejected_batches", {}))
                self.rejected_by_reason.update(snap.get("rejected_by_reason", {}))
                reserve_query_ids(self.engine, snap.get("next_query_id", 1))
                self.producers.restore(snap.get("producers"))
                info["checkpoint_seq"] = ck[0]
            self.replaying = True
            aborted = self.store.aborted_after(info["checkpoint_seq"])
            try:
                for op in self.store.ops_after(info["checkpoint_seq"]):
                    if op.kind == "abort" or op.seq in aborted:
                        continue
                    try:
                        self.apply_op(op)
                    except Exception as exc:        # keep going: report what could not be replayed
                        info["errors"].append(f"op {op.seq} ({op.kind}): {type(exc).__name__}: {exc}")
                        log.error("replay of op %s (%s) failed: %s", op.seq, op.kind, exc)
                    info["replayed_ops"] += 1
                    info["replayed_tuples"] += op.tuples
            finally:
                self.replaying = False
            reserve_query_ids(self.engine, int(self.store.get_meta("max_query_id", 0) or 0) + 1)
            for q in self.engine.queries:     # the current --result-buffer-rows, whatever the checkpoint had
                log_ = self.logs.get(q.id)
                if log_ is not None and log_.max_rows != self.limits.max_retained_rows:
                    info.setdefault("resized_buffers", {})[q.id] = [log_.max_rows, self.limits.max_retained_rows]
                    log_.resize(self.limits.max_retained_rows)
                self._fit_retention(q)
        info["seconds"] = time.perf_counter() - t0        # checkpoint load + replay of the log's tail
        self.recovery = info
        return info

    def apply_op(self, op) -> None:
        """Apply one logged operation (replay: no validation beyond the engine's, no logging)."""
        from ..engine.checkpoint import set_next_query_id
        from ..planner.parser import parse
        from .durability import decode_columns

        m = op.meta
        t0 = time.perf_counter()
        if op.kind == "push":
            if "producer" in m:              # its number is consumed (it was acknowledged) even if replay fails
                self.producers.record(m["producer"], int(m["pseq"]), op.seq)
            if m.get("each") is not None:     # X-Arrow-Batches: each -- so many pushes, in order
                from .ingest import parse_arrow_batches
                schema = self._schema(m["stream"])
                for cols, _ in parse_arrow_batches(op.payload, schema, 1 << 62, 1 << 62):
                    self.engine.push(m["stream"], cols)
                    self._collect_all()
            else:
                if m.get("format") == "arrow":
                    from .ingest import ARROW_TYPES, parse_batch
                    cols, _ = parse_batch(op.payload, ARROW_TYPES[0], self._schema(m["stream"]), 1 << 62)
                else:
                    cols = decode_columns(op.payload)
                self.engine.push(m["stream"], cols)
        elif op.kind == "heartbeat":
            self.engine.heartbeat(m["stream"], m["ts"])
        elif op.kind == "ddl":
            # what the record holds was applied live; replayed one statement at a time, so a statement
            # refused by rules newer than the record (e.g. a GRANULARITY now below the minimum) loses
            # only itself, not the whole record (reported in recovery's errors)
            stmts = parse(m["sql"])
            n = m.get("n")
            errs = []
            for st in stmts[: len(stmts) if n is None else n]:
                try:
                    self.engine._execute_stmt(st, m["sql"])
                except SketchQLError as exc:
                    errs.append(exc)
            if errs:
                raise errs[0]
        elif op.kind == "register":
            set_next_query_id(self.engine, m["id"])
            q = self.engine.register(m["sql"])
            self.logs[q.id] = ResultLog(q.names, self.limits.max_retained_rows)
            self._fit_retention(q)
        elif op.kind == "deregister":
            q = next((x for x in self.engine.queries if x.id == m["id"]), None)
            if q is not None:
                self.engine.deregister(q)
            self.logs.pop(m["id"], None)
        elif op.kind == "control":
            self.engine.controls.set(m["kind"], m["name"], m["knob"], m["value"])
        elif op.kind == "summary_load":
            reserved = list(self.live_summaries())
            self.summaries.load(m["path"], m.get("name"), m.get("as"), reserved=reserved, check_limit=False)
        elif op.kind == "summary_unload":
            if m["name"] in self.summaries.entries:
                self.summaries.unload(m["name"])
        else:
            raise ValueError(f"unknown logged operation {op.kind!r}")
        self._collect_all()
        self.replay_cost_s += time.perf_counter() - t0     # still in no checkpoint: a restart replays it again


class _Admitted:
    """One admitted batch waiting for the apply thread."""
    __slots__ = ("stream", "columns", "n", "seq", "validated")

    def __init__(self, stream, columns, n, seq, validated=False):
        self.stream, self.columns, self.n, self.seq, self.validated = stream, columns, n, seq, validated

    def describe(self) -> str:
        return f"stream {self.stream}, {self.n} rows, log seq {self.seq}"


class _AdmittedGroup:
    """The admitted record batches of one ``X-Arrow-Batches: each`` request (one log record), pushed
    one by one by the apply thread."""
    __slots__ = ("stream", "batches", "n", "seq")

    def __init__(self, stream, batches, n, seq):
        self.stream, self.batches, self.n, self.seq = stream, batches, n, seq

    def describe(self) -> str:
        return f"stream {self.stream}, {len(self.batches)} batches, {self.n} rows, log seq {self.seq}"


def _values_for(values, ctype, summary, attr):
    """Estimate values checked against the attribute's column type (``int`` / ``float`` / ``str`` / ``bool``):
    a value the column cannot hold (``abc``, ``1e400``, or outside int64's -2**63 <= v < 2**63 for an INT)
    is a 422, not an estimate of 0 (or the sketch's 400)."""
    if ctype not in ("int", "float"):
        return values
    out = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                (ctype == "int" and not (isinstance(v, int) and int_fits(v))) or \
                (isinstance(v, float) and not math.isfinite(v)):
            raise ApiError(422, "bad_parameter", f"summary {summary!r}: attribute {attr!r} is {ctype.upper()}, "
                           f"value {v!r} is not one", parameter="value", value=str(v))
        out.append(v)
    return out


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
