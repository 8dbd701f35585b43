"""The Engine façade: DDL, continuous queries, pushing batches, results.

>>> import numpy as np
>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.execute("CREATE STREAM Sales (price DOUBLE) TIMESTAMP ts")
>>> q = eng.register("SELECT SUM(price) AS s FROM Sales [RANGE 10] WHERE price > 4")
>>> eng.push("Sales", {"ts": [1.0, 2.0, 3.0], "price": [6.0, 9.0, 2.0]})
>>> eng.heartbeat("Sales", 12.0)
>>> q.snapshot(2.0)["s"].tolist(), q.snapshot(11.0)["s"].tolist(), q.snapshot(12.0)["s"].tolist()
([15.0], [9.0], [0.0])

Time: every stream has a clock = the latest timestamp pushed to it or the
latest heartbeat.  A query advances to the *minimum* clock of the streams it
reads (a join cannot move past a stream that may still deliver older
tuples); tuples beyond that are buffered inside the query.  Every operator is
stepped to the same time, so expirations are reported when they happen (W3),
not when the next tuple arrives.  A tuple older than its stream's clock is
rejected with :class:`~sketchql.errors.LateTupleError` (unless the stream's
``allowed_lateness`` knob admits it... it is 0 by default: data must arrive in
event-time order per stream; a batch may be unsorted internally).

Results: a query's answer is a change stream (+1 / −1 rows with the time
``at`` of the change).  ``query.changes()`` returns it (the retained part:
the newest ``retain_changes`` rows, a query knob); ``query.results()``
returns it as a DataFrame in the query's view (ISTREAM: the +1 rows, DSTREAM:
the −1 rows, RSTREAM / relation: all changes; CQL's default is ISTREAM for a
non-aggregate query over streams, the relation otherwise);
``query.snapshot(t)`` is the relation at time t (exact back to
``query.snapshot_from``; the current relation is maintained incrementally, so
memory follows the window state, not the history);  iterating over the query
(or ``query.poll()``) yields the batches of changes not consumed yet.
"""
from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from .errors import LateTupleError, SketchQLError, SketchQLSemanticError
from .operators.changes import Batch, Changes, dstream, istream, mix_rids, snapshot
from .planner import ast as A
from .planner.catalog import Catalog, Schema, SummaryDecl, numpy_dtype, type_kind
from .planner.explain import explain_plan
from .planner.parser import parse
from .planner.plan import Plan, PlanNode, StreamStats, instantiate, plan_query, promising_available
from .planner.semantic import analyze

__all__ = ["Engine", "Query", "StreamHandle", "BatchError", "HistoryUnavailable", "PollResult"]


class BatchError(SketchQLError, ValueError):
    """A pushed batch does not match its stream's declaration (nothing of it was accepted)."""


class HistoryUnavailable(SketchQLError, LookupError):
    """A snapshot was asked for a time older than the query's retained change history."""


# ---------------------------------------------------------------------- batches
def _to_columns(data, where: str) -> dict:
    """pandas / pyarrow / dict of arrays / Batch -> dict of 1-D numpy arrays."""
    if isinstance(data, Batch):
        return dict(data.columns)
    mod = type(data).__module__
    if mod.startswith("pandas"):
        if not hasattr(data, "columns"):
            raise BatchError(f"{where}: a pandas Series is not a batch; give a DataFrame")
        return {str(c): data[c].to_numpy() for c in data.columns}
    if mod.startswith("pyarrow"):
        if not hasattr(data, "schema"):
            raise BatchError(f"{where}: give a pyarrow Table or RecordBatch, got {type(data).__name__}")
        return {str(n): data.column(i).to_numpy(zero_copy_only=False) for i, n in enumerate(data.schema.names)}
    if isinstance(data, dict):
        out = {}
        for k, v in data.items():
            a = np.asarray(v) if not isinstance(v, np.ndarray) else v
            if not isinstance(v, np.ndarray) and a.dtype.kind == "U":
                a = np.array(list(v), dtype=object)    # keep the given values (["a", 7] is not all text)
            if a.ndim != 1:
                raise BatchError(f"{where}: column {k!r} must be one-dimensional, got shape {a.shape}")
            out[str(k)] = a
        return out
    raise BatchError(f"{where}: cannot read a batch from {type(data).__name__}; give a pandas DataFrame, "
                     f"a pyarrow Table or a dict of arrays")


def _show(x) -> str:
    return repr(x.item() if isinstance(x, np.generic) else x)


def _coerce(col: str, kind: str, a: np.ndarray, where: str) -> np.ndarray:
    """Convert one column to the declared kind or raise naming the first bad row."""
    if kind in ("int", "float"):
        if a.dtype == bool:
            return a.astype(np.int64 if kind == "int" else np.float64)
        if a.dtype.kind in "iu":
            return a.astype(np.int64 if kind == "int" else np.float64, copy=False)
        if a.dtype.kind == "f":
            if kind == "int":
                bad = ~np.isfinite(a) | (a != np.round(a))
                if bad.any():
                    r = int(np.flatnonzero(bad)[0])
                    raise BatchError(f"{where}: column {col!r} is INT but row {r} holds {_show(a[r])}")
                return a.astype(np.int64)
            return a.astype(np.float64, copy=False)
        # object / strings: try a numeric reading, report the first failure
        import pandas as pd
        num = pd.to_numeric(pd.Series(a, dtype=object), errors="coerce").to_numpy(dtype=np.float64)
        isnull = pd.isna(pd.Series(a, dtype=object)).to_numpy()
        bad = np.isnan(num) & ~isnull
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise BatchError(f"{where}: column {col!r} is {'INT' if kind == 'int' else 'DOUBLE'} "
                             f"but row {r} holds {_show(a[r])}")
        if kind == "int":
            if isnull.any():
                r = int(np.flatnonzero(isnull)[0])
                raise BatchError(f"{where}: column {col!r} is INT but row {r} is NULL")
            return num.astype(np.int64)
        return num
    if kind == "str":
        if a.dtype.kind in "USO":
            out = a.astype(object)
            if a.dtype.kind == "O":
                ok = np.array([x is None or isinstance(x, str) or (isinstance(x, float) and x != x)
                               for x in out], dtype=bool) if len(out) else np.ones(0, bool)
                if not ok.all():
                    r = int(np.flatnonzero(~ok)[0])
                    raise BatchError(f"{where}: column {col!r} is STRING but row {r} holds {_show(out[r])}")
            return out
        raise BatchError(f"{where}: column {col!r} is STRING but the batch gives {a.dtype} values "
                         f"(row 0: {_show(a[0])})" if len(a) else f"{where}: column {col!r} is STRING, got {a.dtype}")
    if kind == "bool":
        if a.dtype == bool:
            return a
        if a.dtype.kind in "iu" and np.isin(a, (0, 1)).all():
            return a.astype(bool)
        bad = np.flatnonzero(~np.isin(a, (True, False, 0, 1))) if a.dtype.kind != "O" else \
            np.flatnonzero([not isinstance(x, (bool, np.bool_)) for x in a])
        r = int(bad[0]) if len(bad) else 0
        raise BatchError(f"{where}: column {col!r} is BOOL but row {r} holds {_show(a[r])}")
    raise BatchError(f"{where}: unknown column kind {kind}")  # pragma: no cover


def _validate(schema: Schema, data, clock: float, lateness: float) -> Batch:
    """Typed, time-sorted Batch for ``schema`` or :class:`BatchError` / :class:`LateTupleError`."""
    what = "table" if schema.is_table else "stream"
    where = f"{what} {schema.name}"
    cols = _to_columns(data, where)
    lower = {k.lower(): k for k in cols}
    unknown = [k for k in cols if schema.column(k) is None]
    if unknown:
        raise BatchError(f"{where}: unknown column(s) {unknown}; declared: {list(schema.columns)}")
    missing = [c for c in schema.columns if c.lower() not in lower]
    if missing:
        raise BatchError(f"{where}: batch lacks column(s) {missing}; declared: {list(schema.columns)}")
    n = None
    out = {}
    for c, kind in schema.columns.items():
        a = np.asarray(cols[lower[c.lower()]])
        if a.ndim != 1:
            raise BatchError(f"{where}: column {c!r} must be one-dimensional, got shape {a.shape}")
        if n is None:
            n = len(a)
        elif len(a) != n:
            raise BatchError(f"{where}: column {c!r} has {len(a)} rows, expected {n} like the other columns")
        out[c] = _coerce(c, kind, a, where)
    n = n or 0
    if schema.is_table:
        return Batch(out, ts=np.zeros(n))
    ts = out[schema.timestamp].astype(np.float64)
    if n and np.isnan(ts).any():
        r = int(np.flatnonzero(np.isnan(ts))[0])
        raise BatchError(f"{where}: timestamp column {schema.timestamp!r} is NULL/NaN at row {r}")
    if n and not np.isfinite(ts).all():
        r = int(np.flatnonzero(~np.isfinite(ts))[0])
        raise BatchError(f"{where}: timestamp column {schema.timestamp!r} is infinite at row {r}")
    if n and (ts < clock - lateness).any():
        r = int(np.flatnonzero(ts < clock - lateness)[0])
        raise LateTupleError(f"{where}: row {r} has timestamp {ts[r]:g}, older than the stream clock {clock:g}")
    if n > 1 and np.any(np.diff(ts) < 0):
        o = np.argsort(ts, kind="stable")
        out = {k: v[o] for k, v in out.items()}
        ts = ts[o]
    return Batch(out, ts=ts)


# ---------------------------------------------------------------------- streams
class StreamHandle:
    """A declared stream: its clock, counters, statistics for the planner and knobs.

    Knobs (``knobs()`` / ``set_knob``): ``sample_rate`` (Bernoulli sampling
    of every pushed batch, seeded; 1.0 = keep all) and ``allowed_lateness``
    (seconds a tuple may be older than the clock; 0).
    """

    def __init__(self, schema: Schema, seed: int = 0):
        self.schema = schema
        self.clock = -np.inf
        self.first_ts = None
        self.tuples_in = 0
        self.tuples_kept = 0
        self.batches = 0
        self.rejected_batches = 0
        self.heartbeats = 0
        self._knobs = {"sample_rate": 1.0, "allowed_lateness": 0.0}
        self._rng = np.random.default_rng(seed)
        self._distinct_sample: dict = {}

    @property
    def name(self) -> str:
        return self.schema.name

    def knobs(self) -> dict:
        return dict(self._knobs)

    def set_knob(self, name: str, value):
        if name not in self._knobs:
            raise SketchQLError(f"stream {self.name} has no knob {name!r} (knobs: {sorted(self._knobs)})")
        v = float(value)
        if name == "sample_rate" and not 0 < v <= 1:
            raise SketchQLError(f"stream {self.name}: sample_rate must be in (0, 1], got {value}")
        if name == "allowed_lateness" and v < 0:
            raise SketchQLError(f"stream {self.name}: allowed_lateness must be >= 0, got {value}")
        self._knobs[name] = v

    def planner_stats(self) -> StreamStats:
        rate = 1.0
        if self.first_ts is not None and np.isfinite(self.clock) and self.clock > self.first_ts:
            rate = self.tuples_in / (self.clock - self.first_ts)
        return StreamStats(rate, {c: float(len(v)) for c, v in self._distinct_sample.items()})

    def _observe(self, b: Batch):
        if len(b):
            if self.first_ts is None:
                self.first_ts = float(b.ts[0])
            for c, v in b.columns.items():
                s = self._distinct_sample.setdefault(c, set())
                if len(s) < 10_000:
                    s.update(v[:2_000].tolist())

    def stats(self) -> dict:
        st = self.planner_stats()
        return {"stream": self.name, "clock": self.clock, "tuples_in": self.tuples_in,
                "tuples_kept": self.tuples_kept, "batches": self.batches,
                "rejected_batches": self.rejected_batches, "heartbeats": self.heartbeats,
                "rate_per_s": st.rate, "knobs": self.knobs()}


# ---------------------------------------------------------------------- maintained results
def _row_keys(rows: Batch, names) -> np.ndarray:
    """int64 identity of each row's values in ``names`` (the multiset key ``snapshot()`` groups by).

    Per column a seeded 64-bit hash (``pandas.util.hash_array``; -0.0 -> 0.0, every NaN/NULL the
    same), chained with SplitMix64 (:func:`mix_rids`); two distinct live value tuples collide with
    chance ~n²/2^64.
    """
    import pandas as pd
    n = len(rows)
    hs = []
    for c in names:
        a = rows.columns[c]
        if a.dtype.kind == "f":
            a = np.where(np.isnan(a), np.nan, a + 0.0)
        elif a.dtype.kind == "O":
            na = pd.isna(a)
            if na.any():
                a = a.copy()
                a[na] = None
        elif a.dtype.kind not in "iub":
            a = a.astype(object)
        hs.append(pd.util.hash_array(a).view(np.int64))
    return mix_rids(*hs) if hs else np.zeros(n, np.int64)


_BEFORE_ALL = float(np.finfo(np.float64).min)    # `at` of a maintained relation's rows


class _Relation:
    """A multiset of rows maintained from +1/−1 changes, one vectorized merge per batch.

    State: sorted int64 value keys (:func:`_row_keys`), a signed count per key and one
    representative row (columns, ts, rid).  ``apply(ch)`` adds Σ sign per key; keys whose
    count drops to 0 are dropped lazily (compaction when they are half the entries).  Memory
    is O(distinct live rows), independent of how many changes were applied.
    """

    def __init__(self, names):
        self.names = list(names)
        self.keys = np.empty(0, np.int64)
        self.count = np.empty(0, np.int64)
        self.rows: Optional[Batch] = None
        self.rid = np.empty(0, np.int64)

    def apply(self, ch: Changes, keys: Optional[np.ndarray] = None) -> None:
        if not len(ch):
            return
        k = _row_keys(ch.rows, self.names) if keys is None else keys
        uk, first, inv = np.unique(k, return_index=True, return_inverse=True)
        delta = np.zeros(len(uk), np.int64)
        np.add.at(delta, inv.ravel(), ch.sign.astype(np.int64))
        pos = np.searchsorted(self.keys, uk)
        found = pos < len(self.keys)
        found[found] = self.keys[pos[found]] == uk[found]
        if found.any():
            self.count[pos[found]] += delta[found]
        new = ~found & (delta != 0)
        if new.any():
            idx = first[new]
            reps = ch.rows.take(idx)
            keys2 = np.concatenate([self.keys, uk[new]])
            o = np.argsort(keys2, kind="stable")        # two sorted runs: a linear merge
            self.keys = keys2[o]
            self.count = np.concatenate([self.count, delta[new]])[o]
            self.rid = np.concatenate([self.rid, ch.rid[idx]])[o]
            self.rows = (reps if self.rows is None else Batch.concat([self.rows, reps])).take(o)
        dead = int((self.count == 0).sum())
        if dead and dead * 2 >= len(self.count):
            keep = self.count != 0
            self.keys, self.count, self.rid = self.keys[keep], self.count[keep], self.rid[keep]
            self.rows = self.rows.take(keep)

    @property
    def live_rows(self) -> int:
        return int(self.count[self.count > 0].sum())

    def __len__(self) -> int:           # entries held (memory), not the multiset size
        return len(self.keys)

    def as_changes(self, names) -> Changes:
        """The relation as a change stream (one ±1 row per copy, ``at`` = the lowest float)."""
        nz = np.flatnonzero(self.count)
        if self.rows is None or not len(nz):
            return Changes.empty(names)
        c = self.count[nz]
        idx = np.repeat(nz, np.abs(c))
        sign = np.repeat(np.sign(c), np.abs(c)).astype(np.int8)
        return Changes(self.rows.take(idx), sign, np.full(len(idx), _BEFORE_ALL), self.rid[idx])


class PollResult(list):
    """The change batches returned by :meth:`Query.poll` (a list), plus ``missed``: rows of the
    query's view that left the retained change log before this consumer read them."""

    missed: int = 0


# ---------------------------------------------------------------------- queries
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
        self.steps = 0
        self.active = True

    # -- feeding ------------------------------------------------------------
    def _offer(self, src_index: int, b: Batch):
        if len(b):
            self._pending[src_index].append(b)

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
            b = Batch.concat(parts) if len(parts) > 1 else parts[0]
            k = int(np.searchsorted(b.ts, now, side="right"))
            take, rest = b.take(slice(0, k)), b.take(slice(k, None))
            self._pending[i] = [rest] if len(rest) else []
            inputs[i] = self._prepare(i, take) if len(take) else None
            has_input = has_input or len(take) > 0
        if now == self.clock and not has_input:
            return
        out = self._run(self.plan.root, now, inputs)
        self.clock = now
        self.steps += 1
        if out is not None and len(out):
            self._record(out)
        self._trim()

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

    def _prepare(self, i: int, b: Batch) -> Optional[Batch]:
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
        """ISTREAM / DSTREAM / RSTREAM (explicit) or the CQL default."""
        if self.bound.stream_op:
            return self.bound.stream_op
        return "relation" if self.bound.is_aggregate else "istream"

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

    def results(self):
        """The (retained) answer in the query's view, as a DataFrame with ``__sign`` and ``__at``."""
        df = self._view(self.changes()).to_pandas()
        return df.drop(columns=["__rid", "__ts"], errors="ignore")

    def snapshot(self, t: Optional[float] = None):
        """The result relation at time ``t`` (default: the query clock), a DataFrame.

        Exact for any t >= :attr:`snapshot_from`; an older t raises :class:`HistoryUnavailable`.
        """
        t = self.clock if t is None else float(t)
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
        return {"query": self.id, "clock": self.clock, "engine": self.plan.engine, "steps": self.steps,
                "changes_out": self._total,
                "retained_changes": self._total - self._first,
                "live_rows": self._live.live_rows,
                "checkpoint_rows": self._base.live_rows,
                "snapshot_from": float(self._base_at) if np.isfinite(self._base_at) else None,
                "poll_missed": self.missed,
                "pending_tuples": int(sum(len(b) for parts in self._pending.values() for b in parts)),
                "state_rows": int(sum((n.op.state_size() if n.op is not None else 0) for n in self.plan.nodes)),
                "operators": [n.stats() for n in self.plan.nodes], "knobs": self.knobs(),
                **({"promising": pt[0].op.stats()} if (pt := [n for n in self.plan.nodes
                                                              if n.kind == "pt_join"]) else {})}

    def knobs(self) -> dict:
        ct = self.bound.contract
        return {"active": self.active, "budget": ct.budget, "budget_unit": ct.budget_unit,
                "on_miss": ct.on_miss, "error": ct.error, "confidence": ct.confidence,
                "retain_changes": self.retain_changes, "retain_seconds": self.retain_seconds}

    def set_knob(self, name: str, value):
        ct = self.bound.contract
        if name == "active":
            self.active = bool(value)
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
        else:
            raise SketchQLError(f"query {self.id} has no knob {name!r} (knobs: {sorted(self.knobs())})")

    def explain(self) -> str:
        return explain_plan(self.plan)

    def __repr__(self):
        return f"Query(id={self.id}, clock={self.clock}, view={self.view}, sql={self.sql!r})"


# ---------------------------------------------------------------------- engine
class Engine:
    """Streams, tables, summaries and continuous queries in one process.

    * ``execute(sql)``: DDL (CREATE STREAM/TABLE/SUMMARY, DROP); a SELECT is
      registered (returns the :class:`Query`); EXPLAIN returns the plan text.
    * ``register(sql) -> Query``; ``deregister(query)``.
    * ``push(name, batch)``: a pandas DataFrame, pyarrow Table or dict of
      arrays, for a stream (must carry the timestamp column) or a table
      (rows are appended; joins see them from then on — non-retroactive).
    * ``heartbeat(stream, ts)``: the stream promises no tuple older than ts.
    * ``explain(sql)``, ``stats()``, ``stream(name)``, ``queries``.
    """

    def __init__(self, seed: int = 0):
        self.catalog = Catalog()
        self.seed = int(seed)
        self._streams: dict[str, StreamHandle] = {}
        self._tables: dict[str, Batch] = {}
        self._queries: dict[int, Query] = {}
        self._ids = itertools.count(1)

    # -- DDL ----------------------------------------------------------------
    def execute(self, sql: str):
        """Run one or more statements; returns the last statement's result."""
        res = None
        for stmt in parse(sql):
            res = self._execute_stmt(stmt, sql)
        return res

    def _execute_stmt(self, s, sql):
        if isinstance(s, A.CreateStream):
            return self._create_relation(s.name, s.columns, s.timestamp, False, s.pos)
        if isinstance(s, A.CreateTable):
            return self._create_relation(s.name, s.columns, None, True, s.pos)
        if isinstance(s, A.CreateSummary):
            return self._create_summary(s)
        if isinstance(s, A.Drop):
            return self._drop(s)
        if isinstance(s, A.Explain):
            return explain_plan(self._plan_physical(s.query, explain=True))
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
            self._streams[name.lower()] = StreamHandle(schema, self.seed)
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
            self._queries.pop(qid)
            return None
        if s.kind in ("stream", "table"):
            users = [q.id for q in self._queries.values()
                     if any(src.schema.name.lower() == s.name.lower() for src in q.bound.sources)]
            if users:
                raise SketchQLSemanticError(f"cannot drop {s.kind} {s.name!r}: queries {users} read it", *s.pos)
        dropped = self.catalog.drop(s.kind, s.name, s.if_exists, s.pos)
        if dropped is not None and s.kind in ("stream", "table"):
            (self._tables if s.kind == "table" else self._streams).pop(s.name.lower(), None)
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
            return plan
        if not explain:
            return self._promising(plan)
        try:
            return self._promising(plan)
        except SketchQLSemanticError as e:
            plan.engine_reason += f"; cannot run it: {e.args[0] if e.args else e}"
            return plan

    def explain(self, sql: str) -> str:
        """The plan of a query (``EXPLAIN`` prefix optional) as text."""
        s = parse(sql)
        if len(s) != 1 or not isinstance(s[0], (A.Query, A.Explain)):
            raise SketchQLSemanticError("explain() takes one SELECT query")
        q = s[0].query if isinstance(s[0], A.Explain) else s[0]
        return explain_plan(self._plan_physical(q, explain=True))

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
        query = Query(qid, sql, plan, self.seed)
        self._queries[qid] = query
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
        from .approx import BENCH_UNITS_PER_SECOND
        from .planner.promising_plan import promising_plan
        if len(plan.bound.streams) == 1 and not plan.bound.tables:
            from .planner.promising_single import promising_single_plan
            mapped = promising_single_plan(plan, self.catalog, self.seed, BENCH_UNITS_PER_SECOND)
            if mapped is not None:
                return mapped
            from .planner.promising_single import SINGLE_UNSUPPORTED
            raise SketchQLSemanticError(SINGLE_UNSUPPORTED, *plan.bound.query.pos)
        return promising_plan(plan, self.catalog, self.seed, BENCH_UNITS_PER_SECOND)

    def deregister(self, query: Query):
        self._queries.pop(query.id, None)

    @property
    def queries(self) -> list:
        return list(self._queries.values())

    # -- data -----------------------------------------------------------------
    def stream(self, name: str) -> StreamHandle:
        h = self._streams.get(name.lower())
        if h is None:
            raise SketchQLSemanticError(f"unknown stream {name!r} (streams: {[s.name for s in self._streams.values()]})")
        return h

    def push(self, name: str, batch) -> None:
        """Append a batch to a stream (or a table); validates it fully before accepting anything."""
        key = str(name).lower()
        if key in self._tables:
            schema = self.catalog.get(name)
            b = _validate(schema, batch, -np.inf, 0.0)
            self._tables[key] = Batch.concat([self._tables[key], b]) if len(self._tables[key]) else b
            for q in self._queries.values():
                for n in q.plan.nodes:
                    if n.kind == "static_join" and n.params["table"].lower() == key:
                        from .planner.plan import _filtered_table
                        n.op.set_table(_filtered_table(self._tables[key], q.bound.sources[n.source],
                                                       n.params["pushed"]))
            return
        h = self._streams.get(key)
        if h is None:
            raise SketchQLSemanticError(
                f"unknown stream or table {name!r} (streams: {[s.name for s in self._streams.values()]}, "
                f"tables: {[t.name for t in self.catalog.tables]})")
        try:
            b = _validate(h.schema, batch, h.clock, h._knobs["allowed_lateness"])
        except SketchQLError:
            h.rejected_batches += 1
            raise
        h.batches += 1
        h.tuples_in += len(b)
        h._observe(b)
        if h._knobs["sample_rate"] < 1.0 and len(b):
            b = b.take(h._rng.random(len(b)) < h._knobs["sample_rate"])
        first_row = h.tuples_kept
        h.tuples_kept += len(b)
        for decl in self.catalog.summaries_on(h.name):
            _feed_indexes(decl, b, first_row)
        if len(b):
            h.clock = max(h.clock, float(b.ts[-1]))
        self._dispatch(h, b)

    def heartbeat(self, name: str, ts: float) -> None:
        """No tuple of ``name`` older than ``ts`` will come: advance time, report expirations."""
        h = self.stream(name)
        ts = float(ts)
        if not np.isfinite(ts):
            raise SketchQLError(f"heartbeat of stream {h.name}: time must be finite, got {ts}")
        h.heartbeats += 1
        if ts > h.clock:
            h.clock = ts
            for decl in self.catalog.summaries_on(h.name):
                _advance_indexes(decl, ts)
        self._dispatch(h, None)

    def _dispatch(self, h: StreamHandle, b: Optional[Batch]):
        for q in self._queries.values():
            if not q.active:
                continue
            srcs = [s for s in q.bound.streams if s.schema.name.lower() == h.name.lower()]
            if not srcs:
                continue
            if b is not None:
                for s in srcs:
                    q._offer(s.index, b)
            clocks = [self._streams[s.schema.name.lower()].clock for s in q.bound.streams]
            target = min(clocks)
            if np.isfinite(target):
                q._advance(target)

    # -- introspection -----------------------------------------------------------
    def stats(self) -> dict:
        return {"streams": {h.name: h.stats() for h in self._streams.values()},
                "tables": {t.name: len(self._tables[t.name.lower()]) for t in self.catalog.tables},
                "summaries": [{"name": d.name, "stream": d.stream, "attrs": d.attrs,
                               "index": type(d.index).__name__ if d.index is not None else None}
                              for d in self.catalog.summaries],
                "queries": {q.id: q.stats() for q in self._queries.values()}}


# ---------------------------------------------------------------------- index adapter
def _build_indexes(decl: SummaryDecl):
    """One ``sketchql.index.StreamIndex`` per attribute, if that package provides it.

    Thin adapter: returns ``{attr: index}`` or None when the index package has
    no ``StreamIndex`` yet (then the summary is only declared).
    """
    try:
        from . import index as I
    except ImportError:  # pragma: no cover
        return None
    SI = getattr(I, "StreamIndex", None)
    if SI is None:
        return None
    from .index.declaration import SummaryDeclaration
    out = {}
    for a in decl.attrs:
        d = SummaryDeclaration(decl.name, decl.stream, a, decl.granularity, decl.rate, decl.depth)
        out[a] = SI(d)
    return out


def _feed_indexes(decl: SummaryDecl, b: Batch, first_row: int):
    """Ingest a validated batch into the summary's indexes (row ids = stream row numbers)."""
    if not decl.index or not len(b):
        return
    rids = np.arange(first_row, first_row + len(b), dtype=np.int64)
    for a, idx in decl.index.items():
        idx.ingest(b.columns[a], b.ts, rids)


def _advance_indexes(decl: SummaryDecl, now: float):
    if not decl.index:
        return
    for idx in decl.index.values():
        f = getattr(idx, "advance", None)
        if f is not None:
            f(now)
