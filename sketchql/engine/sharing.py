"""Shared subplans, window stores and queues across registered queries (STREAM §3.2).

Two mechanisms, both exact (sharing never changes a result):

**Shared window stores** (:class:`WindowStore`).  The window scans of all queries
over one stream with the same window filter (pushed predicates, compared on
their canonical form) share *one* store of the filtered tuples, also when
their window sizes differ (RANGE w of any size, and UNBOUNDED).  The store is
a shared queue: each consumer (:class:`StoreScan`, the scan operator of one
query) keeps two read positions -- ``plus`` (next tuple to report as it
enters the window) and ``minus`` (next tuple to report as it leaves: at
``ts + w``) -- and the store frees a tuple once every consumer has reported
its departure (UNBOUNDED: its arrival).  A consumer emits exactly the changes
a private :class:`~sketchql.operators.exact.WindowScan` of its window would
(same rows, rids counted from its registration, ``at`` = ts and ts + w), so a
query cannot tell the difference; the memory is one window (the largest)
instead of one per query.

**Shared operators** (:class:`SharedOperator`).  Identical subexpressions --
same node kinds and parameters (canonical form), same shared children, over the
same set of streams and registered at the same data time -- run once.  The
first consumer to ask for a step computes it; the output waits in a shared
queue with one read position per consumer and is freed once every consumer has
read it.

**Shared PT entry columns** (:class:`~sketchql.operators.promising.entrytable.SharedEntryTable`).
Promising-tuple joins probing the same shared region indexes with the same
window and fade queue, for the same arrivals, byte-identical entries; their
queues keep the entry columns once (each query its own order and an 8-byte
row per entry).  A block is reused only if it is identical, so no query's
answer changes.

**Queries registered after data** share the window store from their start
(and, for PT joins, the entry table) but not running operators, because an
operator's state is the content of its windows *since its first query's
registration*, while a query registered later must answer as if it started
fresh at its registration (no past data is replayed).  Hence:

* over UNBOUNDED windows the two states never coincide (the running one holds
  every earlier tuple);
* over RANGE w they coincide w seconds after the late registration (every
  earlier tuple has expired), but a hand-over then also needs (1) equal row
  ids -- each :class:`StoreScan` counts rids from its own registration, as a
  private WindowScan does, and the joins' / aggregates' output rids and the
  result relation's retraction matching derive from them -- and (2) the late
  consumer joining the shared output queue exactly after the step its private
  operator produced last, which the lazily computed, freed-on-read queue does
  not pin down when several steps carry one time;
* the PT queues of a late query hold different arrival numbers, so identical
  entry blocks cannot occur (its blocks go to the shared table as its own).

Checked for the one kind whose state is "fully determined by the window
contents", a grouped aggregate over RANGE w (``operators/exact/aggregate.py``):
its output rids are a counter of the ``+`` rows it emitted since it started,
so after the states coincide a hand-over would still need a per-group map from
the running operator's current rids to the late query's and an offset for the
new ones; and COUNT / SUM / AVG are *running* sums (adds and subtracts since
the start), so over DOUBLE the running operator's sums carry the rounding of
tuples that left the window long ago and differ in the last bits from a fresh
operator's over the same window (measured: ``SUM(v) ... [RANGE 10] GROUP
BY k`` registered at t = 0 and at t = 40, 50 tuples/s of v in [0, 1000): at
t = 100 the sums differ by up to 3e-11, COUNT and MAX are equal).  Only
COUNT, MIN / MAX and integer sums would be bit-identical; a hand-over limited
to them, with that rid translation, is not implemented.

So a later query with an identical subexpression gets its own operators (and
EXPLAIN lists only the store as shared); queries registered at the same data
time share everything identical.

>>> from sketchql.engine import Engine
>>> eng = Engine()
>>> eng.execute("CREATE STREAM S (v DOUBLE) TIMESTAMP ts")
>>> q1 = eng.register("SELECT v FROM S [RANGE 5] WHERE v > 1")
>>> q2 = eng.register("SELECT v FROM S [RANGE 10] WHERE v > 1")
>>> q3 = eng.register("SELECT MAX(v) AS m FROM S [RANGE 10] WHERE v > 1")
>>> q4 = eng.register("SELECT MAX(v) AS top FROM S [RANGE 10] WHERE v > 1")
>>> eng.push("S", {"ts": [1.0, 2.0, 7.0], "v": [2.0, 3.0, 4.0]})
>>> q1.snapshot()["v"].tolist(), q2.snapshot()["v"].tolist(), q4.snapshot()["top"].tolist()
([4.0], [2.0, 3.0, 4.0], [4.0])
>>> st = eng.sharing.stats(); st["stores"], st["store_consumers"], st["shared_operators"]
(1, 4, 2)
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from ..errors import SketchQLError
from ..operators.changes import Batch, Changes
from ..operators.exact.base import _ROW_CAP, StepRowLimit, check_step_rows, new_rows, row_cap
from .query import without_pi

__all__ = ["WindowStore", "StoreScan", "SharedOperator", "Sharing", "canon"]

_AGG_ARGS = "Project group keys and aggregate arguments"     # the planner's label of that node


def canon(x):
    """A hashable canonical form of plan parameters: AST nodes by value, columns by their
    resolved name; compiled functions and unknown objects by identity (never shared)."""
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    if isinstance(x, np.generic):
        return x.item()
    if isinstance(x, np.ndarray):
        return ("nd", x.dtype.str, x.tobytes())
    if isinstance(x, (list, tuple)):
        return tuple(canon(v) for v in x)
    if isinstance(x, dict):
        return tuple(sorted(((str(k), canon(v)) for k, v in x.items()), key=lambda kv: kv[0]))
    if isinstance(x, (set, frozenset)):
        return tuple(sorted(repr(canon(v)) for v in x))
    if callable(x):
        return ("fn", _Same(x))            # compiled code: equal only if it is the same object
    if type(x).__name__ == "Column":
        return ("col", getattr(x, "cname", None) or x.name)
    if dataclasses.is_dataclass(x):
        return (type(x).__name__,) + tuple(canon(getattr(x, f.name)) for f in dataclasses.fields(x)
                                          if f.name not in ("pos", "op"))
    return (type(x).__name__, _Same(x))       # unknown objects: never equal across queries


class _Same:
    """An object compared by identity inside a signature.  Unlike ``id(obj)`` it stays valid
    after a checkpoint round trip (the restored signature holds the restored object, and the
    dict holding it rehashes on load), and it cannot collide with a stale id of an object
    from before the restore."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __eq__(self, other):
        return type(other) is _Same and other.obj is self.obj

    def __hash__(self):
        return id(self.obj)

    def __repr__(self):
        return f"<same {type(self.obj).__name__} at {id(self.obj):#x}>"


# ---------------------------------------------------------------------- window stores
class WindowStore:
    """The filtered tuples of one stream, shared by the window scans of several queries."""

    def __init__(self, stream: str, filters, key):
        self.stream = stream
        self.filters = list(filters)       # compiled predicates (applied once per tuple)
        self.key = key
        self.cols: Optional[dict] = None
        self.ts = np.zeros(0)
        self.base = 0                      # absolute position of ts[0]
        self.total = 0                     # tuples ever stored
        self.consumers: list = []
        self.peak = 0

    def feed(self, b: Batch) -> None:
        if not len(b):
            return
        mask = None
        for f in self.filters:
            m = np.asarray(f(dict(b.columns)), dtype=bool)
            mask = m if mask is None else mask & m
        if mask is not None:
            b = b.take(mask)
        if not len(b):
            return
        if self.cols is None:
            self.cols = {k: v[:0] for k, v in b.columns.items()}
        self.cols = {k: np.concatenate([self.cols[k], b.columns[k]]) for k in self.cols}
        self.ts = np.concatenate([self.ts, b.ts])
        self.total += len(b)
        self.peak = max(self.peak, len(self.ts))

    def consumer(self, window: float) -> "StoreScan":
        c = StoreScan(self, window)
        self.consumers.append(c)
        return c

    def release(self, c: "StoreScan") -> None:
        if c in self.consumers:
            self.consumers.remove(c)
        self._free()

    def _free(self) -> None:
        """Drop the tuples every consumer has finished with (a shared queue's read positions)."""
        keep_from = min((c.needed_from() for c in self.consumers), default=self.base + len(self.ts))
        k = int(keep_from - self.base)
        if k > 0 and 2 * k >= len(self.ts):
            self.cols = {n: v[k:] for n, v in self.cols.items()} if self.cols is not None else None
            self.ts = self.ts[k:]
            self.base += k

    def rows(self, a: int, b: int) -> Batch:
        i, j = a - self.base, b - self.base
        return Batch({n: v[i:j] for n, v in self.cols.items()}, ts=self.ts[i:j])

    @property
    def nbytes(self) -> int:
        if self.cols is None:
            return 0
        return int(self.ts.nbytes + sum(v.nbytes for v in self.cols.values()))

    def stats(self) -> dict:
        return {"stream": self.stream, "stored": int(len(self.ts)), "stored_bytes": self.nbytes,
                "peak_stored": self.peak, "total": self.total, "consumers": len(self.consumers),
                "windows": [c.window for c in self.consumers]}


class StoreScan:
    """A query's window scan over a :class:`WindowStore` (the exact-operator protocol).

    ``step(now, batch=None)`` (the batch is ignored: the store is fed by the engine)
    returns the +1 rows of the tuples with ts <= now not reported yet (``at = ts``) and
    the −1 rows of those with ts + w <= now (``at = ts + w``), rids counted from this
    consumer's first tuple -- what a private WindowScan of RANGE w (or UNBOUNDED) gives.
    """

    clock_floor = -math.inf                 # minus rows never before it (window_scale shrink, approx.window_reduction)

    def __init__(self, store: WindowStore, window: float):
        self.store = store
        self.window = float(window)
        self.start = store.total           # absolute position of this consumer's first tuple
        self.plus = store.total
        self.minus = store.total
        self.shared = True
        self.params = None                  # the scan node's params (its ``sample`` knob), set on attach
        self.rng = None
        self._kept = np.zeros(0, bool)      # sampled-in flags of positions [minus, plus)
        self._fed = store.total             # store tuples (ts <= a fed step's time) seen by feeds

    def needed_from(self) -> int:
        return self.plus if not math.isfinite(self.window) else self.minus

    def fed(self, now: float) -> bool:
        """True if tuples with ts <= now reached the store since the last step fed to this consumer
        (decided when the step is queued, not when it runs: consumers of one store agree)."""
        st = self.store
        c = st.base + int(np.searchsorted(st.ts, now, side="right"))
        new = c > self._fed
        self._fed = max(self._fed, c)
        return new

    def pending(self) -> int:
        """Tuples in the store this consumer has not reported yet."""
        return int(self.store.total - self.plus)

    def _sample(self) -> float:
        s = (self.params or {}).get("sample")
        return 1.0 if s is None else float(s)

    def has_pending(self, now: float) -> bool:
        st = self.store
        if self.plus < st.total and st.ts[self.plus - st.base] <= now:
            return True
        return (math.isfinite(self.window) and self.minus < self.plus
                and st.ts[self.minus - st.base] + self.window <= now)

    def step(self, now: float, batch=None) -> Changes:
        st = self.store
        now = float(now)
        ts = st.ts
        b0 = st.base
        k = int(np.searchsorted(ts, now, side="right")) + b0          # + rows: [plus, k)
        k = max(k, self.plus)
        parts_rows, signs, ats, rids = [], [], [], []
        if k > self.plus:
            smp = self._sample()
            keep = (self.rng.random(k - self.plus) < smp) if (smp < 1.0 and self.rng is not None) else \
                np.ones(k - self.plus, bool)      # the scan's SAMPLE knob, per consumer
            if math.isfinite(self.window):
                self._kept = np.concatenate([self._kept, keep])
            idx = np.flatnonzero(keep)
            r = st.rows(self.plus, k).take(idx)
            parts_rows.append(r)
            signs.append(np.ones(idx.shape[0], np.int8))
            ats.append(r.ts.copy())
            rids.append(idx + (self.plus - self.start))
            self.plus = k
        if math.isfinite(self.window) and self.minus < k:
            ends = ts[self.minus - b0:k - b0] + self.window
            j = self.minus + int(np.searchsorted(ends, now, side="right"))
            if j > self.minus:
                m = self._kept[: j - self.minus]
                self._kept = self._kept[j - self.minus:]
                idx = np.flatnonzero(m)
                parts_rows.append(st.rows(self.minus, j).take(idx))
                signs.append(-np.ones(idx.shape[0], np.int8))
                ats.append(np.maximum(ends[idx], self.clock_floor))   # window_scale shrink: never in the past
                rids.append(idx + (self.minus - self.start))
                self.minus = j
        st._free()
        if st.cols is None:
            return Changes.empty()
        if not parts_rows:
            return Changes(Batch({n: v[:0] for n, v in st.cols.items()}, ts=np.zeros(0)),
                           np.zeros(0, np.int8), np.zeros(0), np.zeros(0, np.int64))
        return Changes(Batch.concat(parts_rows), np.concatenate(signs), np.concatenate(ats),
                       np.concatenate(rids))

    def state_size(self) -> int:
        return 0                            # the rows live in the shared store

    def stats(self) -> dict:
        return {"operator": "WindowScan", "shared_store": self.store.stream, "window": self.window,
                "state_rows": 0, "read_plus": self.plus - self.start,
                "read_minus": self.minus - self.start, "store_rows": int(len(self.store.ts)),
                "store_consumers": len(self.store.consumers)}


# ---------------------------------------------------------------------- shared operators
class SharedOperator:
    """One operator computed once for several queries; its output steps wait in a shared
    queue with a read position per consumer (:meth:`consumer`)."""

    def __init__(self, op):
        self.op = op
        self.queue: list = []              # [(now, output)]
        self.base = 0                      # absolute index of queue[0]
        self.positions: dict = {}          # consumer id -> next absolute index
        self._ids = 0
        self._fresh: set = set()           # consumers that have not read a step yet
        self._last = None                  # (now, output) of the last step computed
        self._owners: dict = {}            # consumer id -> its query (for the row cap)
        self._broken = None                # the StepRowLimit (or error) that stopped a step half-way

    def __setstate__(self, state):
        self.__dict__.update(state)
        # (snapshots written before _fresh / _last existed: no consumer is fresh, no step is known)
        self.__dict__.setdefault("_fresh", set())
        self.__dict__.setdefault("_last", None)
        self.__dict__.setdefault("_owners", {})
        self.__dict__.setdefault("_broken", None)

    def _cap(self):
        """The row cap of a shared step: the largest of its consumers' queries' (None if one has none);
        consumers of unknown query (older snapshots): the cap of the query stepping it now."""
        caps = [q.row_cap() for cid, q in self._owners.items() if cid in self.positions and q is not None]
        if not caps or len(caps) < len(self.positions):
            return _ROW_CAP.get()
        return None if any(c is None for c in caps) else max(caps)

    def consumer(self, query=None) -> "SharedConsumer":
        self._ids += 1
        c = SharedConsumer(self, self._ids)
        self._owners[c.cid] = query
        self.positions[c.cid] = self.base + len(self.queue)
        self._fresh.add(c.cid)
        return c

    def _read(self, cid: int, now: float, inputs):
        pos = self.positions[cid]
        end = self.base + len(self.queue)
        if cid in self._fresh:
            self._fresh.discard(cid)
            last = self._last
            if pos >= end and last is not None and last[0] == now:
                # A query registered after data takes its catch-up step at the streams' clock when it
                # registers; a twin registered next (same epoch: no tuple in between, see attach) joins
                # after that step was computed and freed and asks for the very same step: it reads it
                # (computing it again would step the operator twice at one time)
                return last[1]
        if pos < end:
            t, out = self.queue[pos - self.base]
            if t != now:
                raise SketchQLError(f"shared operator: a consumer asks for the step at {now:g} but the shared "
                                    f"queue holds {t:g} next (queries sharing a subplan must advance together)")
        else:
            if self._broken is not None:       # a refused or failed step leaves the operator half-stepped:
                b = self._broken                # every consumer fails at it, as the first one did
                if isinstance(b, StepRowLimit):
                    raise StepRowLimit(b.rows, b.cap, b.what)
                raise SketchQLError(str(b))
            try:
                with row_cap(self._cap()):
                    out = self.op.step(now, *inputs)
            except StepRowLimit as e:
                self._broken = e
                raise
            except Exception as e:             # noqa: BLE001 -- any error: stepping it again would be wrong
                self._broken = SketchQLError(f"shared operator {type(self.op).__name__} failed at t={now:g} "
                                             f"({type(e).__name__}: {e}); every query sharing it fails")
                raise
            self.queue.append((now, out))
            self._last = (now, out)
        self.positions[cid] = pos + 1
        low = min(self.positions.values())
        if low > self.base:
            del self.queue[: low - self.base]
            self.base = low
        return out

    def drop(self, cid: int) -> None:
        self.positions.pop(cid, None)
        self._owners.pop(cid, None)
        if self.positions:
            low = min(self.positions.values())
            if low > self.base:
                del self.queue[: low - self.base]
                self.base = low

    def queued_rows(self) -> int:
        return int(sum(len(o) for _, o in self.queue if o is not None))


class SharedConsumer:
    """A query's handle on a :class:`SharedOperator` (the exact-operator protocol)."""

    def __init__(self, shared: SharedOperator, cid: int):
        self.shared, self.cid = shared, cid

    def step(self, now, *inputs):
        out = self.shared._read(self.cid, float(now), inputs)
        if out is not None:       # the shared step ran under the largest cap of its consumers: this one's
            check_step_rows(new_rows(out), type(self.shared.op).__name__)    # (expirations: never)
        return out

    def state_size(self) -> int:
        pos = self.shared.positions
        return 0 if self.cid not in pos or self.cid != min(pos) else _state(self.shared.op)

    def stats(self) -> dict:
        d = self.shared.op.stats() if hasattr(self.shared.op, "stats") else {}
        return {**d, "shared_consumers": len(self.shared.positions), "shared_queue_rows": self.shared.queued_rows()}

    def __getattr__(self, name):            # knobs, probe orders, ... of the real operator
        if name.startswith("__") or name in ("shared", "cid"):   # (e.g. while unpickling)
            raise AttributeError(name)
        return getattr(self.shared.op, name)


def _state(op) -> int:
    f = getattr(op, "state_size", None)
    return int(f()) if f is not None else 0


# ---------------------------------------------------------------------- the registry
class Sharing:
    """The engine's registry of shared stores and operators (see module doc)."""

    def __init__(self, engine):
        self.engine = engine
        self.stores: dict = {}              # key -> WindowStore
        self.ops: dict = {}                 # signature -> (SharedOperator, epoch, [qids])
        #: shared object (WindowStore, SharedOperator, SharedEntryTable) -> [qids], keyed by the
        #: object itself (identity hash): an id() key would not survive a checkpoint round trip
        self.members: dict = {}
        self.entry_tables: dict = {}        # (indexes, window, fade, key) -> SharedEntryTable (PT queues)

    def __setstate__(self, state):
        self.__dict__.update(state)
        # a snapshot written while ``members`` was keyed by id(): those keys name objects of
        # the process that wrote it; rebuilt from the queries on first use (_members_ok)
        self._stale_members = any(isinstance(k, int) for k in self.members)

    def _members_ok(self) -> None:
        if not self.__dict__.pop("_stale_members", False):
            return
        self.members = {}
        for shared, _, qids in self.ops.values():
            self.members[shared] = qids          # the same list as the ops entry (as attach made it)
        for st in self.stores.values():
            self.members[st] = []
        for t in self.entry_tables.values():
            self.members[t] = []
        for qid in sorted(self.engine._queries):
            for node in self.engine._queries[qid].plan.nodes:
                t = getattr(getattr(getattr(node.op, "op", None), "queue", None), "table", None)
                if t is not None and t in self.members and qid not in self.members[t]:
                    self.members[t].append(qid)
                if isinstance(node.op, StoreScan) and qid not in self.members.setdefault(node.op.store, []):
                    self.members[node.op.store].append(qid)

    # -- registration ------------------------------------------------------------
    def _epoch(self, streams) -> tuple:
        return tuple(sorted((s, float(self.engine._streams[s].clock), self.engine._streams[s].tuples_kept)
                            for s in streams))

    def _signatures(self, plan, streams) -> dict:
        """id(node) -> canonical signature of the subtree (equal signatures compute the same)."""
        sigs = {}
        parent = {id(c): n for n in plan.nodes for c in n.children}

        def sig(node):
            if id(node) in sigs:
                return sigs[id(node)]
            if node.kind == "scan":
                s = ("scan", node.params["stream"].lower(), canon(node.params.get("prefilter")),
                     canon(node.params.get("pushed")), canon(node.params["window"]), node.params.get("sample"),
                     _Same(node.params["sampler"]) if node.params.get("sampler") is not None else None)
            elif (node.kind == "project" and node.label == _AGG_ARGS and id(node) in parent
                  and parent[id(node)].kind == "aggregate"):
                # computes exactly the keys and arguments its aggregate's label spells out
                s = ("aggargs", parent[id(node)].label, tuple(sig(c) for c in node.children))
            else:
                p = {k: v for k, v in node.params.items() if k not in ("alias", "aliases", "prefixes")}
                s = (node.kind, node.label, canon(p), tuple(sig(c) for c in node.children), tuple(streams))
            sigs[id(node)] = s
            return s
        sig(plan.root)
        return sigs

    @staticmethod
    def _store_key(node):
        return (node.params["stream"].lower(), canon(node.params.get("prefilter")), canon(node.params.get("pushed")))

    def preview(self, plan) -> list:
        """What registering ``plan`` now would share (notes for EXPLAIN), without registering it."""
        if plan.engine != "exact" or plan.bound.tables:
            return []
        self._members_ok()
        streams = sorted({s.schema.name.lower() for s in plan.bound.streams})
        sigs = self._signatures(plan, streams)
        epoch = self._epoch(streams)
        order = {id(n): i for i, n in enumerate(plan.nodes)}
        notes = []
        for node in plan.nodes:
            if node.kind == "scan":
                st = self.stores.get(self._store_key(node))
                if st is not None and st.consumers:
                    notes.append(f"n{order[id(node)]} scan: window store of {node.params['stream']} shared with "
                                 f"queries {self._others(st, None)}")
            else:
                hit = self.ops.get(sigs[id(node)])
                if hit is not None and hit[1] == epoch and hit[0].positions:
                    notes.append(f"n{order[id(node)]} {node.kind}: shared with queries {sorted(set(hit[2]))}")
        return notes

    def attach(self, query) -> list:
        """Share what can be shared in ``query``'s plan; returns notes for EXPLAIN."""
        self._members_ok()
        if query.plan.engine != "exact" or query.bound.tables:
            query._sharing_notes = self._share_pt_entries(query)
            return query._sharing_notes
        notes = []
        streams = sorted({s.schema.name.lower() for s in query.bound.streams})
        order = {id(n): i for i, n in enumerate(query.plan.nodes)}
        sigs = self._signatures(query.plan, streams)

        def sig(node):
            return sigs[id(node)]

        query._shared_sources = set()
        for node in query.plan.nodes:
            if node.kind == "scan":
                c = self._share_scan(query, node)
                if c is not None:
                    notes.append(f"n{order[id(node)]} {node.kind}: window store of {node.params['stream']} shared "
                                 f"with queries {self._others(c.store, query.id)}")
        # operators: the highest identical subtrees (children first would also match)
        epoch = self._epoch(streams)
        for node in reversed(query.plan.nodes):   # children before their parents
            if node.kind == "scan" or node.op is None:
                continue
            if getattr(node.op, "shared", None) is not None and isinstance(node.op, SharedConsumer):
                continue
            key = sig(node)
            hit = self.ops.get(key)
            if hit is not None and hit[0]._broken is not None:
                hit = None                     # its last step was refused: a fresh operator
            if hit is not None and hit[1] == epoch:
                shared, _, qids = hit
                self._replace_subtree(node, shared, query, key)
                notes.append(f"n{order[id(node)]} {node.kind}: shared with queries {sorted(set(qids))}")
                qids.append(query.id)
            elif hit is None or hit[1] != epoch:
                shared = SharedOperator(node.op)
                node.op = shared.consumer(query)
                self.ops[key] = (shared, epoch, [query.id])
                self.members[shared] = self.ops[key][2]
        query._sharing_notes = notes
        return notes

    def _replace_subtree(self, node, shared, query, key) -> None:
        node.op = shared.consumer(query)
        # the subtree below now only feeds a consumer whose step is read from the shared queue:
        # its own operators still run (they are consumers of shared ones too), cheaply

    def _share_scan(self, query, node) -> Optional[StoreScan]:
        spec = getattr(node.op, "spec", None)
        if spec is None or node.params.get("sample") not in (None, 1.0) or node.params.get("sampler") is not None:
            return None          # a sampled input (sketchql.approx) is the query's own
        if spec.kind == "range" and spec.slide is None:
            w = float(spec.w)
        elif spec.kind == "unbounded" and spec.start is None and spec.end is None:
            w = math.inf
        else:
            return None
        stream = node.params["stream"].lower()
        key = self._store_key(node)
        st = self.stores.get(key)
        if st is None:
            st = WindowStore(node.params["stream"], node.params.get("filter_fns", []), key)
            self.stores[key] = st
            self.members[st] = []
        c = st.consumer(w)
        c.params = node.params
        c.rng = query._rngs.get(node.source)
        node.op = c
        query._shared_sources.add(node.source)
        self.members[st].append(query.id)
        return c

    def _share_pt_entries(self, query) -> list:
        """PT joins on shared indexes: their queues keep the entry columns in one table per
        (indexes, window, fade, key) (module doc)."""
        from ..operators.promising.entrytable import SharedEntryTable
        notes = []
        for i, node in enumerate(query.plan.nodes):
            if node.kind != "pt_join":
                continue
            inner = getattr(node.op, "op", None)
            q = getattr(inner, "queue", None)
            srcs = getattr(inner, "sources", None)
            if (q is None or not srcs or not all(hasattr(s, "bind") for s in srcs) or q.n
                    or getattr(q, "table", 0) is not None):
                continue
            key = ("pt_entries", tuple(_Same(s.ix) for s in srcs), float(inner.window), float(inner.fade),
                   inner.key, tuple(q.fields))
            t = self.entry_tables.get(key)
            if t is None:
                t = self.entry_tables[key] = SharedEntryTable(q.fields)
                self.members[t] = []
            q.attach_table(t)
            others = self._others(t, query.id)
            self.members[t].append(query.id)
            if others:
                notes.append(f"n{i} pt_join: entry columns shared with queries {others}")
        return notes

    def _others(self, obj, qid) -> list:
        return sorted(set(q for q in self.members.get(obj, []) if q != qid))

    def forget_indexes(self, ids) -> None:
        """Drop the PT entry tables keyed on an index whose ``id`` is in ``ids`` and that no query
        uses (the index left the catalog: a rolled-back batch declared it); their keys held it alive."""
        self._members_ok()
        for key in [k for k in self.entry_tables
                    if any(isinstance(x, _Same) and id(x.obj) in ids for x in k[1])]:
            t = self.entry_tables[key]
            if not self.members.get(t):
                del self.entry_tables[key]
                self.members.pop(t, None)

    def detach(self, query) -> None:
        self._members_ok()
        for node in query.plan.nodes:
            q = getattr(getattr(node.op, "op", None), "queue", None)
            t = getattr(q, "table", None)
            if t is not None:
                t.detach(q)
                m = self.members.get(t, [])
                if query.id in m:
                    m.remove(query.id)
            if isinstance(node.op, StoreScan):
                node.op.store.release(node.op)
                m = self.members.get(node.op.store, [])
                if query.id in m:
                    m.remove(query.id)
            elif isinstance(node.op, SharedConsumer):
                node.op.shared.drop(node.op.cid)
                m = self.members.get(node.op.shared, [])
                if query.id in m:
                    m.remove(query.id)

    # -- feeding -------------------------------------------------------------------
    def feed(self, stream: str, b: Batch) -> None:
        # the stores of the stream, from an index by stream (stores are only ever added: their
        # number versions it), so a push does not walk every query's store
        by = self.__dict__.get("_stores_by_stream")
        if by is None or by[0] != len(self.stores):
            d: dict = {}
            for st in self.stores.values():
                d.setdefault(st.stream.lower(), []).append(st)
            by = self._stores_by_stream = (len(self.stores), d)
        sts = by[1].get(stream.lower())
        if not sts:
            return
        b = without_pi(b)       # exact scans only: one schema whether or not the stream sheds
        for st in sts:
            if st.consumers:
                st.feed(b)

    # -- introspection ----------------------------------------------------------------
    def shared_with(self, query, node) -> list:
        self._members_ok()
        op = node.op
        obj = op.store if isinstance(op, StoreScan) else op.shared if isinstance(op, SharedConsumer) else None
        return [] if obj is None else self._others(obj, query.id)

    def stats(self) -> dict:
        ops = [v for v in self.ops.values() if len(v[0].positions) > 0]
        return {"stores": sum(1 for s in self.stores.values() if s.consumers),
                "store_consumers": sum(len(s.consumers) for s in self.stores.values()),
                "store_rows": sum(len(s.ts) for s in self.stores.values()),
                "store_bytes": sum(s.nbytes for s in self.stores.values()),
                "shared_operators": sum(1 for v in ops if len(v[0].positions) > 1),
                "operator_consumers": sum(len(v[0].positions) for v in ops),
                "queued_rows": sum(v[0].queued_rows() for v in ops),
                "pt_entry_tables": sum(1 for t in self.entry_tables.values() if t.queues()),
                "pt_entry_rows": sum(t.rows for t in self.entry_tables.values()),
                "pt_entry_rows_reused": sum(t.counts["reused_rows"] for t in self.entry_tables.values())}
