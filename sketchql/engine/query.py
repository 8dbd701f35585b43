"""A registered continuous query: feeding, result history, reading, knobs."""
from __future__ import annotations

from collections import deque
from typing import Optional

import numpy as np

from ..approx.knobs import QUERY_KNOBS as _PRECISION_KNOBS
from ..approx.sampling import PI_COLUMN
from ..control import ControlTable, Knob
from ..errors import SketchQLError
from ..operators.changes import Batch, Changes, dstream, istream, rstream, snapshot
from ..operators.exact.base import StepRowLimit, new_rows, row_cap
from ..planner.explain import explain_plan
from ..planner.plan import Plan, PlanNode
from .errors import HistoryUnavailable, SnapshotPastClock
from .relation import _Relation, _row_keys


class PollResult(list):
    """The change batches returned by :meth:`Query.poll` (a list), plus ``missed``: rows of the
    query's view that left the retained change log before this consumer read them."""

    missed: int = 0


# ---------------------------------------------------------------------- queries
def without_pi(b: Batch) -> Batch:
    """``b`` without the stream's inclusion-probability column ``__pi``.

    Load shedding (stream knob ``shed_rate``, :func:`sketchql.approx.sampling.shed`) adds
    ``__pi`` to the batches it reduces, and only while it drops anything, so a stream's batches
    gain and lose the column when the knob changes.  Only a query's input sampler reads it
    (turning it into the row weight ``__w = 1 / (π_query · __pi)``); every window, join and
    promising-tuple operator keeps columns by name and must see one schema for the stream's
    lifetime, so they receive the declared columns only."""
    if PI_COLUMN not in b.columns:
        return b
    return Batch({k: v for k, v in b.columns.items() if k != PI_COLUMN}, ts=b.ts)


class Query:
    """A registered continuous query: fed by the engine, read with ``results()`` / iteration.

    ``plan`` is the :class:`~sketchql.planner.plan.Plan`; ``operators()`` the
    plan nodes (each with ``stats()`` and ``knobs()``/``set_knob``).

    Memory is bounded by the window state, not by the history.  The query keeps

    * the *live relation* R(clock) = Σ of every change, maintained per step as a
      multiset of rows (value key -> count, see :class:`_Relation`);
    * a retained change log: the newest ``retain_changes`` rows (knob, default
      100 000; ``None`` = unbounded) that are also no older than
      ``clock − retain_seconds`` (knob, default ``None`` = no time bound);
    * a checkpoint R_base = Σ of the evicted changes, and ``t_base`` = the latest
      ``at`` among them.

    ``snapshot(t)`` is exact for every t ≥ t_base: R(clock) for t ≥ the latest
    change, else R_base + Σ{retained changes with at ≤ t}; an older t raises
    :class:`HistoryUnavailable` (it names t_base).  ``changes()`` / ``results()``
    cover the retained log; ``poll()`` returns every change exactly once unless
    rows were evicted before it read them, which it reports in ``missed``.

    >>> from sketchql.engine import Engine
    >>> eng = Engine()
    >>> eng.execute("CREATE STREAM S (v DOUBLE) TIMESTAMP ts")
    >>> q = eng.register("SELECT v FROM S [RANGE 5]")
    >>> q.set_knob("retain_changes", 2)
    >>> eng.push("S", {"ts": [1.0, 2.0, 3.0], "v": [1.0, 2.0, 3.0]})
    >>> len(q.changes()), q.snapshot()["v"].tolist(), q.snapshot(2.0)["v"].tolist()
    (2, [1.0, 2.0, 3.0], [1.0, 2.0])
    >>> [len(b) for b in q.poll()], q.missed
    ([2], 1)
    """

    #: why the query stopped (None while it runs); see :meth:`_fail`
    failed: Optional[str] = None
    #: cap on the rows one step may produce (None: the engine's ``max_rows_per_step``)
    max_rows_per_step: Optional[int] = None
    _done_at: float = -np.inf            # the time of the last step whose output was recorded

    def __init__(self, qid: int, sql: str, plan: Plan, seed: int):
        self.id = qid
        self.sql = sql
        self.plan = plan
        self.bound = plan.bound
        self.clock = -np.inf
        self.names = plan.output_names
        self._log: deque = deque()       # (first seq, Changes, row keys), oldest first
        self._total = 0                  # change rows ever produced (= next seq)
        self._first = 0                  # seq of the oldest retained row
        self._consumed = 0               # poll cursor (a seq, always >= _first)
        self._unreported = 0             # view rows the poll cursor lost, not reported yet
        self.missed = 0                  # view rows poll() lost in total (fell behind the retention)
        self._cache = None
        self._live = _Relation(self.names)     # R(clock): every change applied
        self._base = _Relation(self.names)     # R_base: the evicted changes applied
        self._base_at = -np.inf                # latest `at` among the evicted changes
        self._last_at = -np.inf                # latest `at` of any change
        self.retain_changes: Optional[int] = 100_000
        self.retain_seconds: Optional[float] = None
        self._pending: dict[int, list] = {s.index: [] for s in self.bound.streams}
        self._rngs = {s.index: np.random.default_rng([seed, qid, s.index]) for s in self.bound.streams}
        self._scan = {n.source: n for n in plan.root.walk() if n.kind == "scan"}
        # operators that need the stream row ids of their scans' tuples (PT join on a shared index)
        self._row_hooks: dict = {}
        for n in plan.nodes:
            for src, side in (getattr(n.op, "row_sources", None) or {}).items():
                self._row_hooks.setdefault(src, []).append(lambda r, op=n.op, sd=side: op.feed_rows(sd, r))
        self.steps = 0
        self._instants: list = []        # the times the query advanced to (RSTREAM's instants)
        self._rs_polled = -np.inf        # RSTREAM poll cursor: the last instant returned
        self.active = True
        self.weight = 1.0                # the allocator's weight (0: leftovers only)
        self._runner = None              # PlanRunner when the engine runs a scheduler
        self._imprecise: list = []       # [{stream, from, reason}]: results possibly imprecise from then on
        self._shared_sources: set = set()    # sources read from a shared window store (engine.sharing)
        self._sharing_notes: list = []       # what EXPLAIN says is shared

    # -- what the allocator watches ----------------------------------------------
    # ``weight``, ``active`` and every knob (contract included) are in the allocator's signature
    # (engine.allocator_runtime): a change bumps the engine's query epoch so that the allocator
    # recomputes the signature only then, not on every push
    @property
    def weight(self) -> float:
        return self._weight

    @weight.setter
    def weight(self, v) -> None:
        self._weight = v
        self._touch()

    @property
    def active(self) -> bool:
        return self._active

    @active.setter
    def active(self, v) -> None:
        self._active = v
        self._touch()

    def _touch(self) -> None:
        eng = self.__dict__.get("_engine")
        if eng is not None:
            eng._queries.epoch += 1

    def __setstate__(self, state: dict):
        for k in ("weight", "active"):          # a checkpoint written before they were properties
            if k in state:
                state["_" + k] = state.pop(k)
        self.__dict__.update(state)

    # -- feeding ------------------------------------------------------------
    def stream_sources(self) -> dict:
        """Stream name (lower case) -> this query's sources reading that stream; built once (a query's
        streams never change), so dispatching a push does not walk the statement each time."""
        m = self.__dict__.get("_sources_by_stream")
        if m is None:
            m = {}
            for s in self.bound.streams:
                m.setdefault(s.schema.name.lower(), []).append(s)
            self._sources_by_stream = m
        return m

    def _offer(self, src_index: int, b: Batch, rows=None):
        """Buffer a batch of source ``src_index``; ``rows`` = the stream row ids of its tuples
        (the ids under which the shared index holds them; default: none known)."""
        if src_index in self._shared_sources:   # a shared window store holds them (engine.sharing)
            return
        b = without_pi(b)      # a query's sampler (engine.precision) consumed it before this point
        if len(b):
            if rows is None:
                rows = np.full(len(b), -1, np.int64)
            self._pending[src_index].append((b, np.asarray(rows, np.int64)))

    def _advance(self, now: float):
        """Step the whole plan to ``now`` with the buffered tuples of ts <= now."""
        if now < self.clock:
            return
        inputs = {}
        has_input = False
        for i, parts in self._pending.items():
            if not parts:
                inputs[i] = None
                continue
            b = Batch.concat([p[0] for p in parts]) if len(parts) > 1 else parts[0][0]
            rows = np.concatenate([p[1] for p in parts]) if len(parts) > 1 else parts[0][1]
            k = int(np.searchsorted(b.ts, now, side="right"))
            take, rest = b.take(slice(0, k)), b.take(slice(k, None))
            self._pending[i] = [(rest, rows[k:])] if len(rest) else []
            inputs[i] = self._prepare(i, take, rows[:k]) if len(take) else None
            has_input = has_input or len(take) > 0
        if self._shared_sources and now >= self.clock:   # every consumer's marker moves at every feed
            shared_new = any([n.op.fed(now) for i, n in self._scan.items()
                              if i in self._shared_sources and hasattr(n.op, "fed")])
            has_input = has_input or shared_new
        if now == self.clock and not has_input:
            return
        before = self.clock
        self.clock = now
        self.steps += 1
        self._instants.append(now)
        if self._runner is not None:          # under the engine's scheduler: queued, run later
            self._runner.feed(now, inputs)
            return
        try:
            with row_cap(self.row_cap()):
                out = self._run(self.plan.root, now, inputs)
        except StepRowLimit as e:
            self._fail(now, e, before)
            return
        self._deliver(now, out)

    def row_cap(self) -> Optional[int]:
        """The cap on the rows one step of this query may produce: its ``max_rows_per_step`` knob, else
        the engine's (None: no cap)."""
        if self.max_rows_per_step is not None:
            return self.max_rows_per_step
        eng = getattr(self, "_engine", None)
        # the same accessor as the engine's control table: an engine restored from a checkpoint
        # written before the knob existed gets the default, as its control table shows
        return None if eng is None else eng._knob_value("max_rows_per_step")

    def _deliver(self, now: float, out) -> None:
        """The root's output of the step at ``now`` (inline, or from the scheduler's sink)."""
        if self.failed is not None:
            return
        cap = self.row_cap()
        if cap is not None and out is not None:      # operators that cannot count first: new rows only
            n = new_rows(out)
            if n > cap:
                self._fail(now, StepRowLimit(n, cap, "the plan's output"), self._done_at)
                return
        if out is not None and len(out):
            self._record(out)
        self._done_at = now
        self._trim()

    def _fail(self, now: float, err: StepRowLimit, before: float) -> None:
        """Stop the query for good: the step at ``now`` would produce more rows than its cap.

        Deterministic (the count depends on the data and the cap only), so a replay of the same
        input fails it at the same step.  Nothing of the step is recorded: the results up to the
        previous step stay readable (``snapshot`` up to the clock, ``results``, ``poll``); the query
        is no longer fed (``active`` False, its shared stores and queues released by the engine)."""
        self.clock = before
        if self._instants and self._instants[-1] == now:
            self._instants.pop()
        self.active = False
        self.failed = (f"query {self.id} failed at t={now:g}: {err.args[0]}; results up to "
                       f"t={before:g} stay readable; register it again with a larger max_rows_per_step "
                       f"(or a narrower window / more selective predicate) to continue")
        self.fail_rows, self.fail_cap, self.fail_at = err.rows, err.cap, float(now)
        self._pending = {i: [] for i in self._pending}
        if self._runner is not None:
            for t in self._runner.tasks:
                for q in t.inputs:
                    q.clear()
        eng = getattr(self, "_engine", None)
        if eng is not None:
            eng._on_query_failed(self)

    @property
    def state(self) -> str:
        """``failed`` (see :attr:`failed`), ``active`` or ``inactive`` (knob ``active`` off)."""
        return "failed" if self.failed is not None else "active" if self.active else "inactive"

    def _mark_imprecise(self, stream: str, t_from: float, reason: str) -> None:
        self._imprecise.append({"stream": stream, "from": float(t_from), "reason": reason})

    def possibly_imprecise(self) -> list:
        """Where the results may be imprecise: ``[{"stream", "from", "reason"}]`` -- e.g. a stream's
        slack timeout released tuples before the slack allowed, so results with ``at >= from``
        may miss tuples that were still to come within the slack (counted on the stream as
        ``slack_late_beyond_slack``); and, while the query's contract (``WITH ERROR e``) is
        missed, one entry ``{"stream": None, "from": t, "reason": "contract ... missed: ..."}``
        from the first step of the current miss (:meth:`QueryPrecision.miss_note`)."""
        out = [dict(d) for d in self._imprecise]
        note = self._precision.miss_note() if self._precision is not None else None
        if note is not None:
            out.append(note)
        return out

    # -- result history -------------------------------------------------------
    def _record(self, out: Changes):
        keys = _row_keys(out.rows, self.names)
        self._live.apply(out, keys)
        self._log.append((self._total, out, keys))
        self._total += len(out)
        self._last_at = max(self._last_at, float(out.at.max()))

    def _trim(self):
        """Evict the oldest changes beyond ``retain_changes`` rows / older than ``retain_seconds``."""
        excess = 0
        if self.retain_changes is not None:
            excess = self._total - self._first - self.retain_changes
        if self.retain_seconds is not None and np.isfinite(self.clock) and self._log:
            horizon = self.clock - self.retain_seconds
            old = 0
            for _, ch, _ in self._log:
                k = int(np.searchsorted(ch.at, horizon, side="left"))
                old += k
                if k < len(ch):
                    break
            excess = max(excess, old)
        if excess > 0:
            self._evict(excess)
        if self._instants and self._instants[0] < self._base_at:     # RSTREAM instants still exact
            self._instants = [t for t in self._instants if t >= self._base_at]
        if self.retain_changes is not None and len(self._instants) > max(self.retain_changes, 1):
            del self._instants[:len(self._instants) - max(self.retain_changes, 1)]   # bounded memory

    def _evict(self, n: int):
        view = self.view
        while n > 0 and self._log:
            first, ch, keys = self._log[0]
            if len(ch) <= n:
                part, pkeys = ch, keys
                self._log.popleft()
            else:
                part, pkeys = ch.take(slice(0, n)), keys[:n]
                self._log[0] = (first + n, ch.take(slice(n, None)), keys[n:])
            m = len(part)
            self._base.apply(part, pkeys)
            self._base_at = max(self._base_at, float(part.at.max()))
            end = first + m
            if self._consumed < end:
                lost = part.sign[self._consumed - first:]
                self._unreported += (int((lost > 0).sum()) if view == "istream" else
                                     int((lost < 0).sum()) if view == "dstream" else len(lost))
                self._consumed = end
            self._first = end
            n -= m
        self._cache = None

    @property
    def snapshot_from(self) -> float:
        """The oldest time t for which ``snapshot(t)`` is still exact (−inf: nothing was evicted)."""
        return self._base_at

    def _prepare(self, i: int, b: Batch, rows=None) -> Optional[Batch]:
        node = self._scan[i]
        s = node.params.get("sample")
        mask = None
        if s is not None and s < 1.0:
            mask = self._rngs[i].random(len(b)) < s
        for f in node.params.get("filter_fns", []):
            m = np.asarray(f(dict(b.columns)), dtype=bool)
            mask = m if mask is None else (mask & m)
        if mask is not None:
            b = b.take(mask)
            rows = rows[mask] if rows is not None else None
        if len(b) and rows is not None:
            for hook in self._row_hooks.get(i, ()):
                hook(rows)
        return b if len(b) else None

    def _run(self, node: PlanNode, now: float, inputs: dict):
        if node.kind == "scan":
            return node.op.step(now, inputs.get(node.source))
        outs = [self._run(c, now, inputs) for c in node.children]
        outs = [o if (o is not None and len(o)) else None for o in outs]
        return node.op.step(now, *outs)

    # -- reading ------------------------------------------------------------
    @property
    def view(self) -> str:
        """ISTREAM / DSTREAM / RSTREAM (explicit) or the default: the change stream
        ("relation") for aggregates and for queries whose result loses rows by negative
        tuples (set difference, NOT IN / NOT EXISTS), ISTREAM otherwise."""
        if self.bound.stream_op:
            return self.bound.stream_op
        strict = getattr(self.plan.root, "pattern", "") == "strict"
        return "relation" if (self.bound.is_aggregate or strict) else "istream"

    def changes(self) -> Changes:
        """The retained change stream (+1/−1 rows, ``at`` = time of the change).

        All changes so far unless more than ``retain_changes`` rows (or changes older than
        ``retain_seconds``) were produced: then the newest ones (see :attr:`snapshot_from`).
        """
        if not self._log:
            return Changes.empty(self.names)
        key = (self._first, self._total)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, Changes.concat([c for _, c, _ in self._log]))
        return self._cache[1]

    def _view(self, ch: Changes) -> Changes:
        v = self.view
        if v == "istream":
            return istream(ch)
        if v == "dstream":
            return dstream(ch)
        return ch

    def _rstream(self, after: float = -np.inf) -> Changes:
        """RSTREAM: R(τ) at every instant τ > ``after`` the query advanced to (retained history)."""
        ch = Changes.concat([self._base.as_changes(self.names), self.changes()])
        return rstream(ch, [t for t in self._instants if t > after])

    def results(self, view: Optional[str] = None):
        """The (retained) answer in the query's view, as a DataFrame with ``__sign`` and ``__at``.

        ``view`` overrides the query's: ``istream``, ``dstream``, ``rstream`` (the whole
        relation at every instant the query advanced to -- each push or heartbeat that moved
        its clock -- ``__at`` = the instant) or ``changes`` / ``relation`` (the change stream:
        +1 / −1 rows at the time of each change).
        """
        v = view or self.view
        if v not in ("istream", "dstream", "rstream", "changes", "relation"):
            raise SketchQLError(f"unknown view {view!r}; use istream, dstream, rstream or changes")
        if v == "rstream":
            df = self._rstream().to_pandas()
        else:
            ch = self.changes()
            df = (istream(ch) if v == "istream" else dstream(ch) if v == "dstream" else ch).to_pandas()
        return df.drop(columns=["__rid", "__ts"], errors="ignore")

    def snapshot(self, t: Optional[float] = None):
        """The result relation at time ``t`` (default: the query clock), a DataFrame.

        Defined for :attr:`snapshot_from` <= t <= clock: an older t raises :class:`HistoryUnavailable`,
        a t past the clock :class:`SnapshotPastClock` (R(t) for t > clock depends on tuples and
        expirations the query has not seen yet: a window's rows expire at ts + range whether or not
        anything arrives, so R(clock) labelled t would be wrong).
        """
        t = self.clock if t is None else float(t)
        if t > self.clock or t != t:
            raise SnapshotPastClock(
                f"query {self.id}: at={t:g} is past the query clock {self.clock:g}; snapshots are defined up "
                f"to the clock (a heartbeat of the query's streams moves it)")
        if t >= self._last_at:
            return snapshot(self._live.as_changes(self.names), t, columns=self.names)
        if t >= self._base_at:
            ch = self.changes()
            ch = ch.take(ch.at <= t)
            return snapshot(Changes.concat([self._base.as_changes(self.names), ch]), t, columns=self.names)
        raise HistoryUnavailable(
            f"query {self.id}: no snapshot at t={t:g}: older changes were dropped from the retained history "
            f"(retain_changes={self.retain_changes}, retain_seconds={self.retain_seconds}); snapshots are "
            f"available for t >= {self._base_at:g} (up to the clock {self.clock:g}); raise the retention "
            f"with query.set_knob to keep more history")

    def poll(self) -> "PollResult":
        """Batches of changes (in the query's view) produced since the last poll.

        Every change is returned exactly once while the caller keeps up with the retention;
        the returned list's ``missed`` (and the running total ``query.missed``) counts the
        view rows that were evicted before they could be polled.
        """
        out = PollResult()
        if self._consumed == self._total and not self._unreported and self.view != "rstream":
            return out                      # nothing new (the service polls every query after each batch)
        if self.view == "rstream":          # the relation at each instant since the last poll
            r = self._rstream(self._rs_polled)
            if len(r):
                out.append(r)
            self._rs_polled = self._instants[-1] if self._instants else self._rs_polled
            self._consumed = self._total
            self._unreported = 0
            return out
        for first, ch, _ in self._log:
            if first + len(ch) <= self._consumed:
                continue
            part = ch if first >= self._consumed else ch.take(slice(self._consumed - first, None))
            v = self._view(part)
            if len(v):
                out.append(v)
        self._consumed = self._total
        out.missed = self._unreported
        self.missed += self._unreported
        self._unreported = 0
        return out

    def __iter__(self):
        return iter(self.poll())

    # -- introspection ------------------------------------------------------
    def operators(self) -> list:
        return self.plan.nodes

    def stats(self) -> dict:
        return {"query": self.id, "state": self.state, "error": self.failed,
                "clock": self.clock, "engine": self.plan.engine, "steps": self.steps,
                "changes_out": self._total,
                "retained_changes": self._total - self._first,
                "live_rows": self._live.live_rows,
                "checkpoint_rows": self._base.live_rows,
                "snapshot_from": float(self._base_at) if np.isfinite(self._base_at) else None,
                "poll_missed": self.missed, "possibly_imprecise": self.possibly_imprecise(),
                "pending_tuples": int(sum(len(b) for parts in self._pending.values() for b, _ in parts))
                + int(sum(n.op.pending() for i, n in self._scan.items()
                          if i in self._shared_sources and hasattr(n.op, "pending"))),
                "state_rows": int(sum((n.op.state_size() if n.op is not None else 0) for n in self.plan.nodes)),
                "operators": [n.stats() for n in self.plan.nodes], "knobs": self.knobs(),
                **({"promising": pt[0].op.stats()} if (pt := [n for n in self.plan.nodes
                                                              if n.kind == "pt_join"]) else {})}

    def knobs(self) -> dict:
        ct = self.bound.contract
        return {"active": self.active, "weight": self.weight, "budget": ct.budget, "budget_unit": ct.budget_unit,
                "on_miss": ct.on_miss, "error": ct.error, "confidence": ct.confidence,
                "retain_changes": self.retain_changes, "retain_seconds": self.retain_seconds,
                "max_rows_per_step": self.max_rows_per_step,
                **(self._precision.knobs() if self._precision is not None else {})}

    def set_knob(self, name: str, value):
        ct = self.bound.contract
        self._touch()                   # the contract and the knobs are in the allocator's signature
        if name == "active":
            if value and self.failed is not None:
                raise SketchQLError(f"query {self.id} cannot be activated again: {self.failed}")
            self.active = bool(value)
        elif name == "max_rows_per_step":
            v = None if value is None else float(value)
            if v is not None and not (v >= 1 and v.is_integer()):
                raise SketchQLError(f"query {self.id}: max_rows_per_step must be a whole number >= 1 "
                                    f"(or None: the engine's), got {value!r}")
            self.max_rows_per_step = None if v is None else int(v)
        elif name == "weight":
            v = float(value)
            if not (v >= 0 and np.isfinite(v)):
                raise SketchQLError(f"query {self.id}: weight must be a finite number >= 0, got {value!r}")
            self.weight = v
        elif name == "budget":
            if value is not None and not float(value) > 0:
                raise SketchQLError(f"query {self.id}: budget must be positive, got {value}")
            ct.budget = None if value is None else float(value)
            ct.budget_unit = ct.budget_unit or "probes"
        elif name == "on_miss":
            if value not in ("return", "exact", "fail", None):
                raise SketchQLError(f"query {self.id}: on_miss must be return, exact or fail, got {value!r}")
            ct.on_miss = value
        elif name in ("error", "confidence"):
            if value is not None and not 0 < float(value) < 1:
                raise SketchQLError(f"query {self.id}: {name} must be in (0, 1), got {value}")
            setattr(ct, name, None if value is None else float(value))
        elif name == "retain_changes":
            v = None if value is None else float(value)
            if v is not None and not (v >= 0 and (v == np.inf or v.is_integer())):
                raise SketchQLError(f"query {self.id}: retain_changes must be a whole number >= 0 "
                                    f"(or None: unbounded), got {value!r}")
            self.retain_changes = None if v is None or v == np.inf else int(v)
            self._trim()
        elif name == "retain_seconds":
            v = None if value is None else float(value)
            if v is not None and not v >= 0:
                raise SketchQLError(f"query {self.id}: retain_seconds must be >= 0 (or None: no time bound), "
                                    f"got {value!r}")
            self.retain_seconds = None if v is None or v == np.inf else v
            self._trim()
        elif self._precision is not None and name in self._precision.knobs():
            self._precision.set_knob(name, value)          # sample_rate, outlier_share, audit_share
        else:
            raise SketchQLError(f"query {self.id} has no knob {name!r} (knobs: {sorted(self.knobs())})")

    #: the query's knobs: domain, documentation and effect (see :mod:`sketchql.control`)
    KNOB_SPECS = {
        "active": Knob("active", True, "bool", doc="an inactive query is not fed (its weight counts as 0)",
                       effect={"memory": 0, "cpu": 1, "precision": 1}),
        "weight": Knob("weight", 1.0, "float", lo=0.0,
                       doc="importance for the allocator: precision is maximized weighted by it",
                       effect={"memory": 1, "cpu": 1, "precision": 1}),
        "budget": Knob("budget", None, "float", lo=0.0, lo_open=True, nullable=True,
                       doc="WITHIN: work per input tuple (unit in budget_unit); null = the default",
                       effect={"memory": 0, "cpu": 1, "precision": 1}),
        "budget_unit": Knob("budget_unit", None, "choice", choices=("probes", "ms"), nullable=True,
                            doc="unit of the budget: index probes (deterministic) or wall-clock ms per tuple",
                            effect={}, settable=False),
        "on_miss": Knob("on_miss", None, "choice", choices=("return", "exact", "fail"), nullable=True,
                        doc="what to do when the error contract is missed: flag, recompute exactly, refuse",
                        effect={}),
        "error": Knob("error", None, "float", lo=0.0, hi=1.0, lo_open=True, hi_open=True, nullable=True,
                      doc="WITH ERROR: relative error bound of the answers; null = exact",
                      effect={"memory": -1, "cpu": -1, "precision": -1}),
        "confidence": Knob("confidence", None, "float", lo=0.0, hi=1.0, lo_open=True, hi_open=True,
                           nullable=True, doc="CONFIDENCE of the error bound",
                           effect={"memory": 1, "cpu": 1, "precision": 1}),
        "retain_changes": Knob("retain_changes", 100_000, "int", lo=0, nullable=True,
                               doc="newest result changes kept for snapshots and polls; null = unbounded",
                               effect={"memory": 1, "cpu": 0, "precision": 0}),
        "max_rows_per_step": Knob("max_rows_per_step", None, "int", lo=1, nullable=True,
                                  doc="most new rows (sign +1: expiring rows never count) one step (a batch or "
                                      "heartbeat) may make any operator of this query produce (a join counts "
                                      "its true matches before building them); over "
                                      "it the query fails (state 'failed', results so far kept); null = the "
                                      "engine's max_rows_per_step",
                                  effect={"memory": 1, "cpu": 1, "precision": 0}),
        "retain_seconds": Knob("retain_seconds", None, "float", lo=0.0, nullable=True,
                               doc="data-time seconds of result changes kept; null = no time bound",
                               effect={"memory": 1, "cpu": 0, "precision": 0}),
        **_PRECISION_KNOBS,              # sketchql.approx.knobs
    }

    def control_table(self) -> ControlTable:
        st = self.stats()
        st.pop("knobs", None)
        st.pop("operators", None)        # each operator has its own table
        st["sql"] = self.sql
        st["view"] = self.view
        knobs = {}
        for n, v in self.knobs().items():
            spec = self.KNOB_SPECS.get(n)
            knobs[n] = spec.with_value(v) if spec is not None else Knob(n, v, "str", settable=False)
        return ControlTable("query", f"q{self.id}", st, knobs)

    def set_control(self, name: str, value):
        self.set_knob(name, value)

    def plan_view(self) -> dict:
        """This plan as a graph of operators, queues and synopses with live values (JSON-able;
        :mod:`sketchql.engine.plan_view`)."""
        from .plan_view import query_plan_view
        return query_plan_view(self, getattr(self, "_engine", None))

    def explain(self) -> str:
        txt = explain_plan(self.plan)
        if self._sharing_notes:
            txt += "\nShared with other queries:\n" + "\n".join("  " + n for n in self._sharing_notes)
        return txt

    # -- precision (sketchql.engine.precision) ----------------------------------
    _precision = None

    def precision(self) -> dict:
        """The error of the current answer: contract, estimated and audited error, status, knobs."""
        if self._precision is None:
            return {"exact": True, "status": "exact", "estimated": {"rel_error": 0.0}}
        return self._precision.precision()

    def precision_series(self, limit=None) -> list:
        """Bounded per-step series of estimated / audited error, recall, rates (oldest first)."""
        return [] if self._precision is None else self._precision.precision_series(limit)

    def __repr__(self):
        return f"Query(id={self.id}, clock={self.clock}, view={self.view}, sql={self.sql!r})"
