"""The Engine façade: DDL, registration, pushing batches and heartbeats, introspection."""
from __future__ import annotations

import itertools
from typing import Optional

import numpy as np

from ..control import ControlError, ControlTable, Knob
from ..errors import SketchQLError, SketchQLSemanticError
from ..operators.changes import Batch
from ..planner import ast as A
from ..planner.catalog import Catalog, Schema, SummaryDecl, numpy_dtype, type_kind
from ..planner.explain import explain_plan
from ..planner.parser import parse
from ..planner.plan import Plan, StreamStats, instantiate, plan_query, promising_available
from ..planner.semantic import analyze
from .batches import _validate
from .control_tables import ControlTables
from .heap import keep_freed_heap
from .index_adapter import _build_indexes
from .query import Query
from .runner import fail_query
from .streams import StreamHandle


#: engine-wide default of the rows one step of a query may produce (knob ``max_rows_per_step``)
DEFAULT_MAX_ROWS_PER_STEP = 2_000_000


class _Queries(dict):
    """The registered queries, ``id -> Query`` in registration order, with an index
    ``stream (lower case) -> the queries reading it`` in that same order, so that a push touches
    only the queries of its stream.  The index is rebuilt (O(queries)) on first use after any
    change of the membership; ``epoch`` counts every such change and every change of a registered
    query's allocator-visible state (:meth:`Query._touch`: weight, active, knobs, contract,
    pinned sample rate, audit share) -- the allocator recomputes its signature only when it moved."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.epoch = 0
        self._by = None

    def _changed(self) -> None:
        self.__dict__["_by"] = None
        self.epoch = self.__dict__.get("epoch", 0) + 1

    def on_stream(self, name: str) -> tuple:
        """The queries reading stream ``name`` (lower case), in registration order."""
        by = self.__dict__.get("_by")
        if by is None:
            by = {}
            for q in self.values():
                for s in q.stream_sources():
                    by.setdefault(s, []).append(q)
            by = self.__dict__["_by"] = {k: tuple(v) for k, v in by.items()}
        return by.get(name, ())

    def __setitem__(self, k, v):
        super().__setitem__(k, v)
        self._changed()

    def __delitem__(self, k):
        super().__delitem__(k)
        self._changed()

    def pop(self, *a):
        n = len(self)
        r = super().pop(*a)
        if len(self) != n:
            self._changed()
        return r

    def popitem(self):
        r = super().popitem()
        self._changed()
        return r

    def clear(self):
        super().clear()
        self._changed()

    def update(self, *a, **k):
        super().update(*a, **k)
        self._changed()

    def setdefault(self, k, v=None):
        if k not in self:
            self[k] = v
        return self[k]

    def __ior__(self, other):
        self.update(other)
        return self

    def __reduce_ex__(self, protocol):
        # the items are set (through __setitem__) before the state: the index is rebuilt on use
        return (_Queries, (), {"epoch": self.__dict__.get("epoch", 0)}, None, iter(self.items()))

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.__dict__["_by"] = None


def _statement_texts(sql: str, stmts) -> list:
    """The source text of each parsed statement: from its position to the next one's (``;`` dropped)."""
    starts = [0] + [i + 1 for i, ch in enumerate(sql) if ch == "\n"]

    def off(st):
        pos = getattr(st, "pos", None)
        if not pos or pos[0] is None or not 1 <= pos[0] <= len(starts):
            return None
        return starts[pos[0] - 1] + (pos[1] or 1) - 1
    offs = [off(st) for st in stmts]
    out = []
    for i, o in enumerate(offs):
        if o is None:
            out.append(type(stmts[i]).__name__)
            continue
        end = next((x for x in offs[i + 1:] if x is not None and x > o), len(sql))
        out.append(" ".join(sql[o:end].strip().rstrip(";").split()))
    return out


class _Batch:
    """What :meth:`Engine.execute` needs to undo its statements exactly: the catalog's and the engine's
    containers as they were (shallow copies: DDL adds and removes entries, it does not change them),
    the query-id counter, the declared constraints, the allocator's signature; the queries the batch
    registered (released as ``deregister`` releases them) and the ones it dropped (released at commit
    only, so a rollback puts them back untouched)."""

    def __init__(self, eng):
        from .checkpoint import next_query_id
        self.eng = eng
        self.catalog = {k: (dict(v) if isinstance(v, dict) else v) for k, v in vars(eng.catalog).items()}
        self.streams, self.tables = dict(eng._streams), dict(eng._tables)
        self.queries = dict(eng._queries)
        self.pool = dict(eng._selection_pool)
        self.next_id = next_query_id(eng)
        self.n_constraints = len(eng.constraints.items)
        self.sig = eng.allocator._sig
        self.registered: list = []
        self.dropped: list = []

    def commit(self) -> None:
        for q in self.dropped:
            self.eng._release(q)

    def rollback(self) -> None:
        eng = self.eng
        for q in reversed(self.registered):
            eng._release(q)
        declared = {id(ix): ix for d in eng.catalog.summaries for ix in (d.index or {}).values()}
        for live, saved in ((eng._queries, self.queries), (eng._streams, self.streams),
                            (eng._tables, self.tables), (eng._selection_pool, self.pool)):
            live.clear()
            live.update(saved)
        vars(eng.catalog).update({k: (dict(v) if isinstance(v, dict) else v) for k, v in self.catalog.items()})
        kept = {id(ix) for d in eng.catalog.summaries for ix in (d.index or {}).values()}
        gone = {k for k in declared if k not in kept}   # indexes the batch declared (e.g. _auto_ ones of PT queries)
        for k in gone:
            eng.index_feed.forget(declared[k])
        if gone:
            eng.sharing.forget_indexes(gone)
        del eng.constraints.items[self.n_constraints:]
        eng._ids = itertools.count(self.next_id)
        eng._sums_by_stream = None
        eng._stream_changed(None)
        eng.allocator._sig = self.sig
        eng.allocator._tracked_cache = None


class Engine:
    """Streams, tables, summaries and continuous queries in one process.

    * ``execute(sql)``: DDL (CREATE STREAM/TABLE/SUMMARY, DROP); a SELECT is
      registered (returns the :class:`Query`); EXPLAIN returns the plan text.
      Several statements are all or nothing (a failure undoes the earlier ones).
    * ``register(sql) -> Query``; ``deregister(query)``.
    * ``push(name, batch)``: a pandas DataFrame, pyarrow Table or dict of
      arrays, for a stream (must carry the timestamp column) or a table
      (rows are appended; joins see them from then on — non-retroactive).
    * ``heartbeat(stream, ts)``: the stream promises no tuple older than ts.
    * ``explain(sql)``, ``stats()``, ``stream(name)``, ``queries``.
    """

    def __init__(self, seed: int = 0):
        keep_freed_heap()              # per-batch temporaries are reused, not faulted in again (engine.heap)
        self.catalog = Catalog()
        self.seed = int(seed)
        self._streams: dict[str, StreamHandle] = {}
        self._tables: dict[str, Batch] = {}
        self._queries: _Queries = _Queries()     # id -> Query, indexed by stream (a push touches its own)
        self._ids = itertools.count(1)
        #: engine-wide resource budgets (None = unlimited); the allocator works within them
        self.budgets = {"memory_bytes": None, "cpu_units_per_s": None}
        #: runtime settings (engine knobs): one index per stream attribute shared by the PT queries
        self.runtime = {"share_indexes": True, "share_plans": True, "scheduler": "inline", "quantum": 1024.0,
                        "work_per_push": None, "index_lockstep": True,
                        "max_rows_per_step": DEFAULT_MAX_ROWS_PER_STEP}
        from .constraints import ConstraintRegistry
        from .sharing import Sharing
        #: declared k-constraints of the streams, measured on the data (sketchql.engine.constraints)
        self.constraints = ConstraintRegistry(self)
        #: shared window stores and operators across queries (sketchql.engine.sharing)
        self.sharing = Sharing(self)
        self._selection_pool: dict = {}    # shared PT selections (planner.promising_single)
        from .index_feed import IndexFeed
        #: the shared indexes' feed, in lockstep with the PT joins that probe them (engine.index_feed)
        self.index_feed = IndexFeed()
        self._explaining = False
        self._batch: Optional[_Batch] = None   # the statements execute() is running (undone on failure)
        #: the global operator scheduler (None while ``scheduler`` is ``inline``)
        self.scheduler = None
        self.controls = ControlTables(self)
        from .precision import PrecisionManager
        self._precision = PrecisionManager(self)     # approximate plans, errors, audits, contracts
        #: the resource allocator (sketchql.engine.allocator_runtime.EngineAllocator)
        self.allocator = self._precision.allocator

    def __setstate__(self, state: dict):
        q = state.get("_queries")
        if q is not None and not isinstance(q, _Queries):   # a checkpoint written before the index
            state["_queries"] = _Queries(q)
        self.__dict__.update(state)

    # -- DDL ----------------------------------------------------------------
    def execute(self, sql: str):
        """Run one or more statements, all or nothing; returns the last statement's result.

        The statements run in order, each against the catalog the earlier ones left; if one fails,
        the earlier ones are rolled back (:class:`_Batch`) and the error -- its class, position and
        token kept -- names the failing statement (``statement_index``, 0-based; ``statement``: its
        text) and says that nothing was applied (``applied_statements`` = 0)."""
        stmts = parse(sql)
        texts = _statement_texts(sql, stmts)
        batch = self._batch = _Batch(self)
        res = None
        try:
            for i, stmt in enumerate(stmts):
                try:
                    res = self._execute_stmt(stmt, sql)
                except Exception as e:
                    batch.rollback()
                    if not isinstance(e, SketchQLError):
                        raise                   # (a bug: undone all the same, reported as it is)
                    e.statement_index, e.statement, e.applied_statements = i, texts[i], 0
                    if len(stmts) > 1 and e.args and isinstance(e.args[0], str):
                        e.args = (f"{e.args[0]} [statement {i + 1} of {len(stmts)}: {texts[i]!r}; nothing was "
                                  f"applied: the {i} before it were rolled back]",) + e.args[1:]
                    raise
            batch.commit()
        finally:
            self._batch = None
        return res

    def _execute_stmt(self, s, sql):
        if isinstance(s, A.CreateStream):
            self._create_relation(s.name, s.columns, s.timestamp, False, s.pos)
            slack = getattr(s, "slack", None)
            if slack is not None:                 # CREATE STREAM ... SLACK d: the stream's slack knob
                if not slack >= 0:
                    raise SketchQLSemanticError(f"SLACK must be >= 0 seconds, got {slack:g}", *s.pos)
                self._streams[s.name.lower()].set_knob("slack", float(slack))
            for c in getattr(s, "constraints", ()):  # CONSTRAINT CLUSTERED|ORDERED|REFERENTIAL ... (k-constraints)
                self.constraints.declare_sql(s.name, c, s.pos)
            return None
        if isinstance(s, A.AlterStream):          # ALTER STREAM s ADD CONSTRAINT ...
            self.constraints.declare_sql(s.name, s.constraint, s.pos)
            return None
        if isinstance(s, A.CreateTable):
            return self._create_relation(s.name, s.columns, None, True, s.pos)
        if isinstance(s, A.CreateSummary):
            return self._create_summary(s)
        if isinstance(s, A.Drop):
            return self._drop(s)
        if isinstance(s, A.Explain):
            return self._explain_text(self._plan_physical(s.query, explain=True))
        if isinstance(s, A.Query):
            return self._register(s, sql)
        raise SketchQLSemanticError(f"unsupported statement {type(s).__name__}")  # pragma: no cover

    def _create_relation(self, name, coldefs, ts, is_table, pos):
        cols = {}
        for cd in coldefs:
            if cd.name.lower() in (c.lower() for c in cols):
                raise SketchQLSemanticError(f"column {cd.name!r} declared twice", *cd.pos, token=cd.name)
            cols[cd.name] = type_kind(cd.type, cd.pos)
        if not is_table:
            if ts is None:
                ts = next((c for c in cols if c.lower() == "ts"), "ts")
            canon = next((c for c in cols if c.lower() == ts.lower()), None)
            if canon is None:
                cols[ts] = "float"
            else:
                if cols[canon] not in ("int", "float"):
                    raise SketchQLSemanticError(
                        f"TIMESTAMP column {canon!r} must be numeric (seconds), it is {cols[canon]}", *pos,
                        token=canon)
                cols[canon] = "float"
                ts = canon
        schema = Schema(name, cols, ts, is_table)
        self.catalog.add_stream(schema, pos)
        if is_table:
            self._tables[name.lower()] = Batch({c: np.empty(0, dtype=numpy_dtype(k)) for c, k in cols.items()},
                                              ts=np.empty(0))
        else:
            h = self._streams[name.lower()] = StreamHandle(schema, self.seed)
            self._stream_changed(h)
        return None

    def _create_summary(self, s: A.CreateSummary):
        rel = self.catalog.get(s.stream)
        if rel is None or rel.is_table:
            raise SketchQLSemanticError(f"unknown stream {s.stream!r} in CREATE SUMMARY", *s.pos, token=s.stream)
        attrs = []
        for a in s.attrs:
            c = rel.column(a)
            if c is None:
                raise SketchQLSemanticError(f"unknown column {a!r} of {rel.name} in CREATE SUMMARY", *s.pos, token=a)
            attrs.append(c)
        if not s.granularity > 0:
            raise SketchQLSemanticError(f"GRANULARITY must be positive, got {s.granularity:g}", *s.pos)
        if not (float(s.rate).is_integer() and s.rate >= 2):
            raise SketchQLSemanticError(f"COLLAPSE rate must be an integer >= 2, got {s.rate:g}", *s.pos)
        if not (float(s.depth).is_integer() and 1 <= s.depth <= 32):
            raise SketchQLSemanticError(f"COLLAPSE depth must be an integer in 1..32, got {s.depth:g}", *s.pos)
        decl = SummaryDecl(s.name, rel.name, attrs, s.granularity, int(s.rate), int(s.depth))
        decl.index = _build_indexes(decl)
        self.catalog.add_summary(decl, s.pos)
        self._sums_by_stream = None
        return None

    def _drop(self, s: A.Drop):
        if s.kind == "query":
            try:
                qid = int(s.name.lstrip("qQ"))
            except ValueError:
                raise SketchQLSemanticError(f"queries are dropped by id (DROP QUERY q3), got {s.name!r}",
                                            *s.pos) from None
            if qid not in self._queries:
                if s.if_exists:
                    return None
                raise SketchQLSemanticError(f"unknown query {s.name!r}", *s.pos)
            q = self._queries.pop(qid)
            if self.__dict__.get("_batch") is not None:
                self._batch.dropped.append(q)       # released at commit (a rollback puts it back as it was)
            else:
                self._release(q)
            return None
        if s.kind in ("stream", "table"):
            users = [q.id for q in self._queries.values()
                     if any(src.schema.name.lower() == s.name.lower() for src in q.bound.sources)]
            if users:
                raise SketchQLSemanticError(f"cannot drop {s.kind} {s.name!r}: queries {users} read it", *s.pos)
        dropped = self.catalog.drop(s.kind, s.name, s.if_exists, s.pos)
        self._sums_by_stream = None
        if dropped is not None and s.kind in ("stream", "table"):
            (self._tables if s.kind == "table" else self._streams).pop(s.name.lower(), None)
            self._stream_changed(None)
        return None

    # -- queries --------------------------------------------------------------
    def _stats_for(self, name: str) -> StreamStats:
        h = self._streams.get(name.lower())
        return h.planner_stats() if h is not None else StreamStats()

    def _plan(self, q: A.Query) -> Plan:
        bq = analyze(q, self.catalog)
        return plan_query(bq, self._stats_for)

    def _plan_physical(self, q: A.Query, explain: bool = False) -> Plan:
        """The plan with the promising-tuple operators substituted (what ``register`` runs).

        For EXPLAIN a WITH PREFERENCE query that cannot be mapped shows the exact plan and why.
        """
        plan = self._plan(q)
        if plan.engine != "promising":
            return self.constraints.plan(plan)    # joins of constrained streams: k-constraint-aware
        if not explain:
            return self._promising(plan)
        try:
            self._explaining = True
            return self._promising(plan)
        except SketchQLSemanticError as e:
            plan.engine_reason += f"; cannot run it: {e.args[0] if e.args else e}"
            return plan
        finally:
            self._explaining = False

    def explain(self, sql: str) -> str:
        """The plan of a query (``EXPLAIN`` prefix optional) as text."""
        s = parse(sql)
        if len(s) != 1 or not isinstance(s[0], (A.Query, A.Explain)):
            raise SketchQLSemanticError("explain() takes one SELECT query")
        q = s[0].query if isinstance(s[0], A.Explain) else s[0]
        return self._explain_text(self._plan_physical(q, explain=True))

    def _explain_text(self, plan) -> str:
        """The planner's EXPLAIN plus what the runtime shares with the registered queries."""
        txt = explain_plan(plan)
        notes = self.sharing.preview(plan) if self.runtime["share_plans"] else []
        for n in plan.nodes:
            if n.kind == "pt_join" and str(n.params.get("index", "")).startswith("shared"):
                users = [q.id for q in self._queries.values() for m in q.plan.nodes
                         if m.kind == "pt_join" and m.params.get("index") == n.params["index"]]
                notes.append(f"pt_join: region index {n.params['index'][7:]} (declared) shared"
                             + (f" with queries {users}" if users else " with the estimate endpoint"))
        if self.scheduler is not None:
            notes.append(f"scheduler: {self.scheduler.strategy} (quantum {self.scheduler.quantum:g} tuples)")
        if notes:
            txt += "\nShared with other queries:\n" + "\n".join("  " + x for x in notes)
        return txt

    def register(self, sql: str) -> Query:
        """Register a continuous query once; it is fed by every later ``push``."""
        s = parse(sql)
        if len(s) != 1 or not isinstance(s[0], A.Query):
            raise SketchQLSemanticError("register() takes exactly one SELECT query")
        return self._register(s[0], sql)

    def _register(self, q: A.Query, sql: str) -> Query:
        plan = self._plan_physical(q)
        instantiate(plan.root, plan.bound, self._tables)
        qid = next(self._ids)
        self._precision.rewrite(plan, qid)     # approximate plan when the contract allows error
        query = Query(qid, sql, plan, self.seed)
        query._engine = self
        if self.runtime["share_plans"]:
            self.sharing.attach(query)
        self._queries[qid] = query
        self.index_feed.attach(query)          # its shared PT indexes are fed in lockstep with it
        if self.scheduler is not None:
            from .runner import PlanRunner
            query._runner = PlanRunner(query)
        try:
            self._precision.on_register(query)
        except SketchQLError:
            self._queries.pop(qid, None)
            self.index_feed.detach(query)
            self.sharing.detach(query)         # (attached above: a refused query shares nothing)
            raise
        if self.__dict__.get("_batch") is not None:
            self._batch.registered.append(query)
        # a query over streams that already have a clock starts there (no past data is replayed)
        clocks = [self._streams[s.schema.name.lower()].clock for s in plan.bound.streams]
        if clocks and all(np.isfinite(c) for c in clocks):
            query._advance(min(clocks))
        return query

    def _promising(self, plan: Plan) -> Plan:
        """Map a ``WITH PREFERENCE`` plan onto the promising-tuple operators.

        Two-stream equi-joins become a PTJoin node (``sketchql.planner.promising_plan``:
        window, preference, fade, budget per tuple from WITHIN / the ``budget`` knob, default
        :data:`~sketchql.planner.promising_plan.DEFAULT_BUDGET_UNITS`; ``WITHIN n MS`` is
        converted with ``sketchql.approx.BENCH_UNITS_PER_SECOND``); any other shape raises
        :class:`SketchQLSemanticError` asking for EXACT.
        """
        if not promising_available():
            raise SketchQLSemanticError(
                "this query asks for WITH PREFERENCE evaluation, but the promising-tuple operators "
                "are not available yet (sketchql.operators.promising); add EXACT to evaluate it exactly",
                *plan.bound.query.pos)
        from ..approx import BENCH_UNITS_PER_SECOND
        from ..planner.promising_plan import promising_plan
        if len(plan.bound.streams) == 1 and not plan.bound.tables:
            from ..planner.promising_single import promising_single_plan
            mapped = promising_single_plan(plan, self.catalog, self.seed, BENCH_UNITS_PER_SECOND,
                                           selection_pool=self._selection_pool if (
                                               self.runtime["share_plans"] and self.scheduler is None
                                               and not self._explaining) else None,
                                           index_for=self._index_for if self.runtime["share_indexes"] else None)
            if mapped is not None:
                return mapped
            from ..planner.promising_single import SINGLE_UNSUPPORTED
            raise SketchQLSemanticError(SINGLE_UNSUPPORTED, *plan.bound.query.pos)
        return promising_plan(plan, self.catalog, self.seed, BENCH_UNITS_PER_SECOND,
                              index_for=self._index_for if self.runtime["share_indexes"] else None,
                              private_index_for=self._private_index_for)

    def _private_index_for(self, stream: str, col: str, window: float):
        """Unshared mode: a fresh private index configured like the declared one (None if none is)."""
        from .index_adapter import private_copy
        ix = self._index_for(stream, col, window, declare=False)
        return private_copy(ix) if ix is not None else None

    def _index_for(self, stream: str, col: str, window: float, declare: bool = True):
        """The shared index of ``stream.col``: the declared summary's when it covers ``window``,
        else one the engine declares (``_auto_<stream>_<col>``, history sized for the window,
        fed like a declared one) and reuses for the next query that needs it."""
        from .index_adapter import auto_history, covered_history, declare_auto
        span = window if np.isfinite(window) else 600.0
        best = deepest = None
        for d in self.catalog.summaries_on(stream):
            if d.index and any(a.lower() == col.lower() for a in d.attrs):
                ix = next(v for a, v in d.index.items() if a.lower() == col.lower())
                if covered_history(d) >= span:
                    return ix
                best = best or ix
                if deepest is None or covered_history(d) > covered_history(deepest[0]):
                    deepest = (d, ix)
        if not declare:
            return None
        # a window longer than any index can keep (depth is capped): a new index would cover no more
        # than the deepest one there is, so reuse that one -- automatic indexes stay bounded
        if deepest is not None and auto_history(span, best.decl if best is not None else None) <= \
                covered_history(deepest[0]):
            return deepest[1]
        h = self._streams.get(stream.lower())
        decl = declare_auto(self.catalog, h.schema if h is not None else self.catalog.get(stream), col, window,
                            self.seed, like=best)
        self._sums_by_stream = None
        return decl.index[decl.attrs[0]]

    def _on_query_failed(self, query: Query) -> None:
        """A query failed (:meth:`Query._fail`): it stays registered (its results readable) but is no
        longer fed, so its shared window stores, operators and indexes stop waiting for it."""
        self.sharing.detach(query)
        self.index_feed.detach(query)

    def deregister(self, query: Query):
        if self._queries.pop(query.id, None) is not None:
            self._release(query)

    def _release(self, query: Query) -> None:
        """A query no longer registered (deregister, DROP QUERY): its shared window stores and
        operators and its shared indexes' lockstep feed stop waiting for it."""
        self.sharing.detach(query)
        self.index_feed.detach(query)

    @property
    def queries(self) -> list:
        return list(self._queries.values())

    # -- data -----------------------------------------------------------------
    def stream(self, name: str) -> StreamHandle:
        h = self._streams.get(name.lower())
        if h is None:
            raise SketchQLSemanticError(f"unknown stream {name!r} (streams: {[s.name for s in self._streams.values()]})")
        return h

    def validate(self, name: str, batch, clock: float | None = None) -> Batch:
        """The typed, time-sorted batch :meth:`push` would accept for stream or table ``name`` now, or
        the error it would raise (:class:`BatchError` / :class:`LateTupleError`); changes nothing.

        ``clock``: judge lateness against this clock instead of the stream's (a caller holding batches
        it has accepted but not pushed yet, like the service's apply queue, passes the clock the stream
        will have by then).  A stream whose input goes through a slack buffer (:meth:`input_buffered`;
        a ``slack`` -- alias ``allowed_lateness`` -- above 0) is checked for columns and types only:
        whether its tuples are late depends on the buffer.  Otherwise a tuple older than the clock is
        refused: the operators cannot take it (they are all at the clock already)."""
        key = str(name).lower()
        if key in self._tables:
            return _validate(self.catalog.get(name), batch, -np.inf)
        h = self.stream(name)
        if self.input_buffered(name):
            clock = -np.inf
        elif clock is None:
            clock = h.clock
        return _validate(h.schema, batch, clock)

    def input_buffered(self, name: str) -> bool:
        """True when stream ``name`` takes its input through a slack buffer (out-of-order input): what a
        push accepts then depends on the buffer's state, not on the batch alone."""
        h = self.stream(name)
        return h._slack is not None or h._knobs.get("slack", 0.0) > 0

    def push(self, name: str, batch, validated: bool = False) -> None:
        """Append a batch to a stream (or a table); validates it fully before accepting anything.

        A refused batch (:class:`BatchError`, :class:`LateTupleError` without a slack) changes nothing.
        A stream with a ``slack`` (alias ``allowed_lateness``) takes the batch into its buffer and
        applies what the buffer releases, in timestamp order; tuples later than the slack follow
        ``late_policy`` (with 'error' a batch holding such a tuple is refused whole: nothing applied).
        An error raised inside one query's step fails that query (:meth:`_dispatch`); the batch
        reaches every other query.  Under a global scheduler (knob ``scheduler``) the step runs in a
        scheduler turn and fails its query there, alike (:meth:`PlanRunner.fail`): the push does not raise.

        ``validated=True``: ``batch`` is the :class:`Batch` that :meth:`validate` returned for this stream
        against the clock the stream has now (the service validates at admission, then pushes from its
        apply thread): it is not validated again."""
        key = str(name).lower()
        if key in self._tables:
            b = self.validate(name, batch)
            self._tables[key] = Batch.concat([self._tables[key], b]) if len(self._tables[key]) else b
            for q in self._queries.values():
                for n in q.plan.nodes:
                    if n.kind == "static_join" and n.params["table"].lower() == key:
                        from ..planner.plan import _filtered_table
                        n.op.set_table(_filtered_table(self._tables[key], q.bound.sources[n.source],
                                                       n.params["pushed"]))
            return
        h = self._streams.get(key)
        if h is None:
            raise SketchQLSemanticError(
                f"unknown stream or table {name!r} (streams: {[s.name for s in self._streams.values()]}, "
                f"tables: {[t.name for t in self.catalog.tables]})")
        try:
            b = batch if validated and isinstance(batch, Batch) else self.validate(name, batch)
        except SketchQLError:
            h.rejected_batches += 1
            raise
        if self.input_buffered(name):      # buffered; the tuples the slack releases, in ts order
            b = self._through_slack(h, b)
        h.batches += 1
        self._accept(h, b)
        if h._slack is not None and h._slack.watermark > h.clock:
            # nothing older than the watermark can come: the stream's time moves on to it, as at a
            # heartbeat (expirations up to it are reported; a join waiting for this stream advances)
            h.clock = h._slack.watermark
            self._dispatch(h, None)
            self.index_feed.settle()
        self._after_input()
        self._precision.after_push(h)
        if self._any_timeout:
            self._slack_timeouts(exclude=h)

    def heartbeat(self, name: str, ts: float) -> None:
        """No tuple of ``name`` older than ``ts`` will come: advance time, report expirations."""
        h = self.stream(name)
        ts = float(ts)
        if not np.isfinite(ts):
            raise SketchQLError(f"heartbeat of stream {h.name}: time must be finite, got {ts}")
        h.heartbeats += 1
        if h._slack is not None:               # the stream promises nothing older than ts
            rel = h._slack.release_until(ts)
            if rel is not None and len(rel):
                self._push_released(h, rel)
        advanced = ts > h.clock
        gap = ts - h.clock if advanced else 0.0
        if advanced:
            h.clock = ts
        # the queries first consume what they still buffer (a PT join probes the shared index
        # for it), then the index moves on (and may drop history older than its declaration)
        self._dispatch(h, None)
        self._after_input()
        self._heartbeat_budget(h, gap)
        if self._any_timeout:                  # (else it would walk every stream to release nothing)
            self._slack_timeouts(exclude=h)
        if advanced:
            for decl in self._summaries_on(h.name):
                self.index_feed.advance(decl, ts)
        self.index_feed.settle()

    # -- out-of-order input (sketchql.engine.ordering) -----------------------------------
    def _through_slack(self, h: StreamHandle, b: Batch) -> Batch:
        """The tuples the slack buffer releases now, in ts order; with ``late_policy`` 'error' a batch
        holding a tuple later than the slack raises here, refused whole before the buffer changes."""
        from .ordering import SlackBuffer
        if h._slack is None:
            h._slack = SlackBuffer(h._knobs["slack"])
            h._slack.watermark = h.clock
        h._slack.slack = float(h._knobs["slack"])
        if h._knobs.get("late_policy") == "error" and len(b):
            # 'error': a batch with a tuple later than the slack is refused whole, before the buffer
            # changes (a 4xx over HTTP must leave nothing applied, and a replay must agree)
            old = h._slack.late(b.ts)
            if old.any():
                from ..errors import LateTupleError
                h.rejected_batches += 1
                raise LateTupleError(
                    f"stream {h.name}: {int(old.sum())} tuple(s) later than the slack of {h._slack.slack:g} s "
                    f"(oldest ts {float(b.ts[old].min()):g} <= released watermark {h._slack.watermark:g}, "
                    f"row {int(np.flatnonzero(old)[0])}); nothing of the batch was applied")
        released, late = h._slack.offer(b)
        if late is not None and len(late):
            h._note_late(late)
        if released is None:
            return b.take(np.zeros(0, np.int64))
        return released

    def _push_released(self, h: StreamHandle, b: Batch) -> None:
        """Tuples a heartbeat or a timeout released: through the normal path (no re-validation)."""
        self._accept(h, b)

    def _accept(self, h: StreamHandle, b: Batch) -> None:
        """A validated (and, with a slack, released) batch: count it, sample/shed it, feed the
        stream's indexes, move the clock, then the shared subplans and the queries."""
        h.tuples_in += len(b)
        h._observe(b)
        last_ts = float(b.ts[-1]) if len(b) else -np.inf
        b = self._precision.on_input(h, b)     # audits see the raw batch; then sampling / shedding
        first_row = h.tuples_kept
        h.tuples_kept += len(b)
        for decl in self._summaries_on(h.name):     # PT joins' indexes: in lockstep (index_feed)
            self.index_feed.accept(decl, b, first_row)
        # the clock follows the batch as pushed: tuples sampled or shed away still say time passed
        # (a slack's release goes in at the time of its last tuple; the clock moves on to the
        # watermark after it, in push or heartbeat, so each tuple reaches the operators at its own time)
        h.clock = max(h.clock, last_ts)
        if self.constraints.items and len(b):
            self.constraints.observe(h.name, b.columns)
        self.sharing.feed(h.name, b)
        self._dispatch(h, b, np.arange(first_row, first_row + len(b), dtype=np.int64))
        self._after_input()
        self.index_feed.settle()

    def _stream_epoch_ref(self) -> list:
        """``[n]``, shared by the engine and its stream handles: bumped when a stream is created or
        dropped and by every ``StreamHandle.set_knob`` (an engine restored from an older checkpoint
        hands it out on first use)."""
        ep = self.__dict__.get("_stream_epoch")
        if ep is None:
            ep = self._stream_epoch = [0]
            for x in self._streams.values():
                x._epoch = ep
        return ep

    def _stream_changed(self, h) -> None:
        ep = self._stream_epoch_ref()
        if h is not None:
            h._epoch = ep
        ep[0] += 1

    def _summaries_on(self, name: str):
        """``catalog.summaries_on(name)`` from a per-stream index (the catalog filters every summary);
        rebuilt after the engine changes the catalog's summaries (``_sums_by_stream = None``)."""
        by = self.__dict__.get("_sums_by_stream")
        if by is None:
            by = {}
            for d in self.catalog.summaries:
                by.setdefault(d.stream.lower(), []).append(d)
            self._sums_by_stream = by
        return by.get(name.lower(), ())

    @property
    def _any_timeout(self) -> bool:
        """Some stream has a ``slack_timeout``; recomputed only when a stream knob was set or a stream
        created / dropped since (``_stream_epoch``, shared with the handles: StreamHandle.set_knob)."""
        ep = self._stream_epoch_ref()
        c = self.__dict__.get("_timeout_cache")
        if c is None or c[0] != ep[0]:
            c = self._timeout_cache = (ep[0], any(x._knobs.get("slack_timeout") is not None
                                                 for x in self._streams.values()))
        return c[1]

    def _slack_timeouts(self, exclude=None) -> None:
        """Release, on every other stream with a ``slack_timeout``, what is older than the engine's
        data clock minus the timeout; mark the queries reading it as possibly imprecise."""
        g = max((x._slack.max_seen if x._slack is not None else x.clock) for x in self._streams.values())
        if not np.isfinite(g):
            return
        for x in self._streams.values():
            to = x._knobs.get("slack_timeout")
            if x is exclude or x._slack is None or to is None or not len(x._slack):
                continue
            w = g - float(to)
            if x._slack.oldest() > w:
                continue
            rel = x._slack.timeout(w)
            if rel is not None and len(rel):
                for q in self._queries.on_stream(x.name.lower()):
                    q._mark_imprecise(x.name, float(rel.ts.min()), "slack timeout")
                self._push_released(x, rel)          # at the time of its tuples, then on to w
            if x._slack.watermark > x.clock:
                x.clock = x._slack.watermark
                self._dispatch(x, None)

    # -- k-constraints -------------------------------------------------------------------
    def declare_constraint(self, kind: str, stream: str, attr: str, k: int, parent=None):
        """Declare that ``stream.attr`` arrives ``clustered`` / ``ordered`` with adherence k, or
        ``referential`` to ``parent=(stream, attr)``; measured as data arrives (STREAM §4.1)."""
        return self.constraints.declare(kind, stream, attr, k, parent)

    def constraint_join(self, a: str, attr_a: str, b: str, attr_b: str, spill: bool = True):
        """A constraint-aware join of ``a.attr_a = b.attr_b`` using the declared constraints."""
        return self.constraints.join(a, attr_a, b, attr_b, spill)

    # -- scheduling -------------------------------------------------------------
    def _tasks(self) -> list:
        return [t for q in self._queries.values() if q._runner is not None for t in q._runner.tasks]

    def _paths(self) -> list:
        return [p for q in self._queries.values() if q._runner is not None for p in q._runner.paths()]

    def _set_scheduler(self, strategy: str) -> None:
        from .runner import PlanRunner
        from .scheduler import Scheduler
        if strategy == "inline":
            if self.scheduler is not None:
                self.scheduler.run()                 # drain what is queued, then run inline
            self.scheduler = None
            for q in self._queries.values():
                q._runner = None
            return
        if self.scheduler is None:
            self.scheduler = Scheduler(strategy, self.runtime["quantum"], self._tasks, self._paths)
            for q in self._queries.values():
                q._runner = PlanRunner(q)
        else:
            self.scheduler.set_strategy(strategy)

    def _after_input(self) -> None:
        if self.scheduler is not None:
            w = self.runtime["work_per_push"]
            self.scheduler.run(None if w is None else float(w))

    def run(self, budget: Optional[float] = None) -> float:
        """Give the scheduler ``budget`` work units (None: until every queue is empty); returns
        the units spent.  Inline (no scheduler) there is nothing queued: returns 0.  An operator
        error in a turn fails that operator's query (state 'failed', as inline); it does not raise."""
        if self.scheduler is None:
            return 0.0
        return self.scheduler.run(budget)

    def idle(self, units: float) -> float:
        """Idle time worth ``units`` work units: first the scheduler's queues, then what is left
        goes to the promising-tuple operators (split by query weight) to probe their queues."""
        units = float(units)
        if units < 0:
            raise SketchQLError(f"idle: units must be >= 0, got {units}")
        left = units - self.run(units) if self.scheduler is not None else units
        self._give_pt(left, [q for q in self._queries.values() if q.active])
        return left

    def _pt_nodes(self, queries):
        return [(q, n) for q in queries for n in q.plan.nodes
                if n.op is not None and hasattr(n.op, "idle")]

    def _give_pt(self, units: float, queries) -> None:
        nodes = self._pt_nodes(queries)
        w = sum(q.weight for q, _ in nodes)
        if units <= 0 or not nodes or w <= 0:
            return
        for q, n in nodes:
            self._idle_op(q, n, lambda: units * q.weight / w)

    def _heartbeat_budget(self, h: StreamHandle, gap: float) -> None:
        """A heartbeat over a silent gap brings the PT operators reading ``h`` the budget the
        arrivals would have brought: units per tuple × the stream's rate × the gap."""
        if not (gap > 0 and np.isfinite(gap)):
            return
        rate = h.planner_stats().rate
        for q, n in self._pt_nodes([q for q in self._queries.on_stream(h.name.lower()) if q.active]):
            self._idle_op(q, n, lambda: float(n.op.budget_units()) * rate * gap * q.weight)

    def _idle_op(self, q: Query, n, units) -> None:
        """``n.op.idle(units())``: idle budget for a PT operator of query ``q``.  An error there fails
        ``q`` as an error of its step does (:meth:`_dispatch`), instead of raising out of the heartbeat or
        :meth:`idle` half-way: results up to its clock kept (under a scheduler its queued steps are
        completed first: :meth:`PlanRunner.fail`), a shared operator is marked broken, so every query
        sharing it fails at its next step (and gets no more idle budget)."""
        from .sharing import SharedConsumer
        shared = n.op.shared if isinstance(n.op, SharedConsumer) else None
        if not q.active or (shared is not None and shared._broken is not None):
            return
        try:
            n.op.idle(units())
        except Exception as exc:               # noqa: BLE001 -- this query fails, the others go on
            if shared is not None:
                shared._broken = SketchQLError(
                    f"shared operator {type(shared.op).__name__} failed in its idle probing at t={q.clock:g} "
                    f"({type(exc).__name__}: {exc}); every query sharing it fails")
            if q._runner is not None:
                q._runner.fail(q.clock, exc, complete_before=np.inf)
            else:
                fail_query(q, exc, q.clock)

    def _dispatch(self, h: StreamHandle, b: Optional[Batch], rows=None):
        """Offer ``b`` to the active queries reading ``h`` (registration order) and advance each to
        the least clock of its streams; the other queries are not touched (``_queries.on_stream``).

        An error raised while one query is stepped fails that query only: state 'failed',
        :attr:`Query.failed` names the error, its results up to its last recorded step stay readable (the
        previous one; this one if the error came after its rows were recorded, e.g. in the audit shadow), it
        is no longer fed (as one over ``max_rows_per_step``), and every other query reading ``h``
        still gets the batch, so the next push works.  The error is charged to the registered query
        being dispatched, whatever raised it inside (its plan, a shared operator, its precision
        wrapper or audit shadow).  Under a scheduler the query's steps queued up to its clock are
        completed first (:meth:`PlanRunner.fail`), so it keeps what it keeps inline; an error inside a
        scheduled step is charged in the scheduler's turn, alike."""
        key = h.name.lower()
        for q in self._queries.on_stream(key):
            if not q.active:
                continue
            before = q.clock
            try:
                self._step_query(q, key, b, rows)
            except Exception as exc:           # noqa: BLE001 -- this query fails, the others go on
                if q.failed is not None:       # failed inside already (e.g. over max_rows_per_step): as before
                    raise
                # results kept up to the last step recorded: the one before, or this one when the error
                # came after its rows were (the audit shadow steps after the plan); scheduled, the steps
                # fed up to the clock are completed first (their plan part did not fail), as inline
                if q._runner is not None:
                    q._runner.fail(q.clock, exc, complete_before=np.nextafter(q.clock, np.inf))
                else:                          # (max: a query restored from a checkpoint without _done_at)
                    fail_query(q, exc, max(before, q._done_at))

    def _step_query(self, q: Query, key: str, b: Optional[Batch], rows) -> None:
        by_stream = q.stream_sources()
        if b is not None:
            for s in by_stream[key]:
                q._offer(s.index, b, rows)
        target = min(self._streams[n].clock for n in by_stream)
        if np.isfinite(target):
            q._advance(target)

    # -- control table --------------------------------------------------------------
    #: the engine's knobs (see :mod:`sketchql.control`)
    KNOB_SPECS = {
        "memory_bytes": Knob("memory_bytes", None, "int", lo=1, nullable=True,
                             doc="memory budget of all synopses, windows and queues; null = unlimited",
                             effect={"memory": 1, "cpu": 0, "precision": 1}),
        "cpu_units_per_s": Knob("cpu_units_per_s", None, "float", lo=0.0, lo_open=True, nullable=True,
                                doc="CPU budget in work units (index probes) per second of data time; "
                                    "null = unlimited",
                                effect={"memory": 0, "cpu": 1, "precision": 1}),
        "scheduler": Knob("scheduler", "inline", "choice",
                          choices=("inline", "round_robin", "fifo", "greedy", "chain"),
                          doc="operator scheduling: inline (each plan runs to completion when fed) or a global "
                              "scheduler with bounded work per turn (round robin, FIFO, greedy, Chain)",
                          effect={"memory": 0, "cpu": 0, "precision": 0}),
        "quantum": Knob("quantum", 1024.0, "float", lo=0.0, lo_open=True,
                        doc="input tuples an operator may process per scheduler turn",
                        effect={"memory": 1, "cpu": 0, "precision": 0}),
        "work_per_push": Knob("work_per_push", None, "float", lo=0.0, nullable=True,
                              doc="scheduler work units run after each push or heartbeat; null = until "
                                  "every queue is empty (engine.run / engine.idle give more)",
                              effect={"memory": -1, "cpu": 1, "precision": 0}),
        "max_rows_per_step": Knob("max_rows_per_step", DEFAULT_MAX_ROWS_PER_STEP, "int", lo=1, nullable=True,
                                  doc="most new rows (sign +1: expiring rows never count) one step (a batch or "
                                      "heartbeat) may make any operator of a query produce, for queries without "
                                      "their own max_rows_per_step (a join counts its true matches over every "
                                      "equality before building them); over it that query fails (state "
                                      "'failed', results so far kept) and the others go on; null = no cap",
                                  effect={"memory": 1, "cpu": 1, "precision": 0}),
        "share_plans": Knob("share_plans", True, "bool",
                            doc="identical subexpressions of queries registered later run once: shared window "
                                "stores (any window sizes) and shared operators with per-consumer read positions",
                            effect={"memory": -1, "cpu": -1, "precision": 0}),
        "share_indexes": Knob("share_indexes", True, "bool",
                              doc="PT queries probe the stream attribute's declared (or engine-declared) index "
                                  "instead of building private ones; applies to queries registered later",
                              effect={"memory": -1, "cpu": 0, "precision": 0}),
        "index_lockstep": Knob("index_lockstep", True, "bool",
                               doc="a shared index is fed in lockstep with the PT joins probing it (tuples beyond "
                                   "their clock wait in an exact tail), so they see what a private index holds; "
                                   "off: fed at the push (sketchql.engine.index_feed)",
                               effect={"memory": 0, "cpu": 0, "precision": 0}),
    }

    def _knob_value(self, n):
        if n == "max_rows_per_step":
            return self.runtime.get(n, DEFAULT_MAX_ROWS_PER_STEP)
        return self.runtime[n] if n in self.runtime else self.budgets.get(n)

    def control_table(self) -> ControlTable:
        st = {"streams": len(self._streams), "tables": len(self._tables), "queries": len(self._queries),
              "summaries": len(self.catalog.summaries), "seed": self.seed,
              "scheduler": self.scheduler.stats() if self.scheduler is not None else {"strategy": "inline"},
              "index_feed": self.index_feed.stats()}
        knobs = {n: spec.with_value(self._knob_value(n)) for n, spec in self.KNOB_SPECS.items()}
        return ControlTable("engine", "engine", st, knobs)

    def set_control(self, name: str, value):
        if name not in self.KNOB_SPECS:
            raise ControlError(f"engine has no knob {name!r} (knobs: {', '.join(sorted(self.KNOB_SPECS))})")
        if name in self.runtime or name == "max_rows_per_step":
            v = self.KNOB_SPECS[name].coerce(value, where="engine")
            if name == "scheduler":
                self._set_scheduler(v)
            elif name == "quantum" and self.scheduler is not None:
                self.scheduler.quantum = float(v)
            elif name == "index_lockstep":
                self.index_feed.lockstep = bool(v)
            self.runtime[name] = v
        else:
            self.budgets[name] = value

    # -- introspection -----------------------------------------------------------
    def plan_view(self) -> dict:
        """Every registered plan as a graph (JSON-able; :mod:`sketchql.engine.plan_view`)."""
        from .plan_view import engine_plan_view
        return engine_plan_view(self)

    def stats(self) -> dict:
        return {"streams": {h.name: h.stats() for h in self._streams.values()},
                "tables": {t.name: len(self._tables[t.name.lower()]) for t in self.catalog.tables},
                "summaries": [{"name": d.name, "stream": d.stream, "attrs": d.attrs,
                               "index": type(d.index).__name__ if d.index is not None else None}
                              for d in self.catalog.summaries],
                "queries": {q.id: q.stats() for q in self._queries.values()}}
