"""Feeding a shared stream index in lockstep with the promising-tuple joins that probe it.

A ``WITH PREFERENCE`` join steps at ``now = min(clock of its two streams)``: it
ingests its arrivals with ``ts <= now`` and plans them against the other
side's index.  A *private* index then holds exactly the tuples of its side up
to ``now``.  The engine's *shared* index (the declared summary) used to be fed
at every push, so it also held the tuples of a stream whose clock is ahead of
the other one (stream A pushed up to 7.3 while B is at 5.0: the join steps to
5.0, A's index holds (5.0, 7.3] too).  Those tuples change the zones' sketch
estimates, their time extents (the pro-rating of an edge zone) and the cell
sizes, so under a binding budget the join chose other regions than on a
private index with the same seed and budget.

:class:`IndexFeed` removes that difference: an index with PT-join consumers
keeps the in-order tuples pushed beyond its consumers' clocks in a *tail*
(exact tuples: key, ts, stream row) and ingests them just before a consumer's
operator ingests a time chunk reaching them (:meth:`IndexFeed.release`, called
by :meth:`SharedIndexSource.before_ingest
<sketchql.operators.promising.shared_source.SharedIndexSource.before_ingest>`
with the chunk's newest arrival), so at every chunk the index holds exactly
the stream up to that chunk -- the private index's content, ingested in the
same order and the same chunks.  (Released up to the step's time before the
step, a step spanning more than one chunk -- one push of 200 s per stream at a
10 s window -- had the index expire the partners of its first chunks'
arrivals: 496 of 768 pairs missed at a budget covering the join.)  What is not
delayed:

* the index's *value layers* (PT-Selection / PT-Aggregates read them at the
  stream's own clock) are fed at the push, and the tail's later ingest skips
  them (:class:`sketchql.index.value_layer.layers_detached`);
* readers outside the joins see the whole stream: :class:`TailedIndex` (the
  estimate endpoint's view) answers ``estimate = index estimate + exact count
  of the tail tuples in the window`` -- the tail is exact, so the error bound
  is the index's;
* a batch that is not in order with what the index and its tail hold (late
  tuples within the allowed lateness) first releases the whole tail, then is
  ingested as before, so the index sees the tuples in push order and rejects
  exactly what it rejected before.

Bounds: the tail holds at most ``max_rows`` tuples (default 2^20, 24 bytes
each); beyond that its oldest tuples are ingested anyway (a consumer whose
other stream stalls for more than ``max_rows`` tuples sees them early and may
miss pairs near the window's edge, ``stats()["forced_rows"]``).  The join's
input waits for the stalled stream anyway (a step goes to the smaller clock):
the tail adds 24 bytes per waiting tuple to the rows the engine holds.  (It
used to be bounded to one granularity ``T1`` of time too: a stream pushed
ahead of the other by more than ``T1`` -- one push per stream -- was ingested
before the join stepped, with the loss above.)  After every push / heartbeat
:meth:`IndexFeed.settle` ingests what every active consumer has passed (and
everything when none is left).

When equality with private indexes holds: every PT consumer of the index
steps to the same times (all join the same two streams, so the same clocks)
and in time order (inline, or round robin; Chain may run one consumer's older
step after another's newer one: the index is then ahead for it, counted in
``PTJoinNode.steps_index_ahead``), a query without a WHERE filter or
sample on the join's streams (a private index is built from the filtered input,
the shared one holds the stream), and arrivals of a step within one time chunk
of the operator (``admission.chunk_span``: the history the index keeps beyond
the window).  ``benchmarks/bench_plans.py`` prints the count over the queries
where it is defined.

>>> import numpy as np
>>> from sketchql.engine import Engine
>>> eng = Engine(seed=1)
>>> eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
>>> q = eng.register("SELECT A.k FROM A, B WHERE A.k = B.k WITH PREFERENCE desc A.k WINDOW 20 SECONDS")
>>> eng.push("B", {"ts": [1.0], "k": [5]})
>>> eng.push("A", {"ts": [1.0, 2.0, 3.0], "k": [5, 5, 6]})    # the join steps to 1.0 (B's clock)
>>> ix = eng.catalog.summary("_auto_A_k").index["k"]
>>> ix.stats()["tuples"], eng.index_feed.tail_rows(ix)        # 2.0 and 3.0 wait in the tail
(1, 2)
>>> eng.index_feed.reader(ix).estimate([5], 0.0, 10.0).tolist()   # the estimate sees them
[2.0]
"""
from __future__ import annotations

import numpy as np

from ..summaries.hashing import as_key_array


class _Tail:
    __slots__ = ("keys", "ts", "rids", "adv")

    def __init__(self):
        self.keys, self.ts, self.rids = [], [], []
        self.adv = -np.inf                 # a heartbeat's advance waiting for the tail to empty

    def arrays(self):
        if len(self.ts) > 1:
            self.keys, self.ts, self.rids = ([np.concatenate(self.keys)], [np.concatenate(self.ts)],
                                             [np.concatenate(self.rids)])
        if not self.ts:
            return None, np.zeros(0), None
        return self.keys[0], self.ts[0], self.rids[0]

    def __len__(self):
        return int(sum(t.shape[0] for t in self.ts))


class IndexFeed:
    """The engine's feed of its shared indexes (module doc).  One per engine
    (``engine.index_feed``); the facade calls :meth:`accept` for every accepted
    batch, :meth:`advance` for heartbeats, :meth:`settle` after each; the PT
    joins' shared sources call :meth:`release` before they ingest a chunk."""

    def __init__(self, max_rows: int = 1 << 20):
        self.max_rows = int(max_rows)
        self._tails: dict = {}           # id(index) -> _Tail
        self._index: dict = {}           # id(index) -> index
        self._consumers: dict = {}       # id(index) -> [(query, node)]
        self.released_rows = 0
        self.forced_rows = 0             # tail rows ingested before every consumer passed them (bounds)
        self._lockstep = True

    # -- pickling (checkpoints) ------------------------------------------------------
    def __getstate__(self):
        """The per-index dicts are keyed by ``id(index)``, which a restored index does not keep:
        written keyed by the index object (same order) and re-keyed on restore.  (Keyed by the
        old ids, a restored engine found no consumers and ingested every later batch at the
        push, so its PT joins probed a different index than the original's.)"""
        s = self.__dict__.copy()
        ix = self._index
        s["_tails"] = [(ix[k], t) for k, t in self._tails.items()]
        s["_consumers"] = [(ix[k], c) for k, c in self._consumers.items()]
        s["_index"] = list(ix.values())
        return s

    def __setstate__(self, s):
        s = dict(s)
        s["_tails"] = {id(i): t for i, t in s["_tails"]}
        s["_consumers"] = {id(i): c for i, c in s["_consumers"]}
        s["_index"] = {id(i): i for i in s["_index"]}
        self.__dict__.update(s)

    @property
    def lockstep(self) -> bool:
        """Engine knob ``index_lockstep``; off: every batch is ingested at the push (as before)."""
        return self._lockstep

    @lockstep.setter
    def lockstep(self, on: bool) -> None:
        self._lockstep = bool(on)
        if not self._lockstep:
            self.flush()

    # -- consumers ----------------------------------------------------------------
    def attach(self, query) -> int:
        """Register the shared-index PT joins of ``query``'s plan; returns how many."""
        n = 0
        for node in query.plan.nodes:
            op = node.op
            if node.kind != "pt_join" or op is None or not getattr(op, "shared", False):
                continue
            for src in op.op.sources:
                k = id(src.ix)
                self._index[k] = src.ix
                self._tails.setdefault(k, _Tail())
                lst = self._consumers.setdefault(k, [])
                if not any(nd is op for _, nd in lst):
                    lst.append((query, op))
                # released chunk by chunk as the operator ingests (SharedIndexSource.before_ingest),
                # not up to the step's time before it starts
                src.feed = self.release
            op.before_step = None
            n += 1
        return n

    def detach(self, query) -> None:
        for k, lst in self._consumers.items():
            lst[:] = [(q, nd) for q, nd in lst if q is not query]
        self.settle()

    def forget(self, ix) -> None:
        """Drop every trace of index ``ix`` (its summary left the catalog, e.g. a rolled-back batch that
        had declared it): without this the feed kept it, its tail and its consumer list for good."""
        k = id(ix)
        for d in (self._index, self._tails, self._consumers):
            d.pop(k, None)

    # -- input --------------------------------------------------------------------
    def accept(self, decl, b, first_row: int) -> None:
        """A validated batch of ``decl``'s stream: ingested, or (an index with consumers, in
        order) its value layers fed and the tuples kept in the tail."""
        from .index_adapter import _feed_indexes
        if not decl.index or not len(b):
            return
        plain = {}
        rids = None
        for a, ix in decl.index.items():
            k = id(ix)
            if not self._lockstep or not self._consumers.get(k):
                plain[a] = ix
                continue
            tail = self._tails[k]
            ts = np.asarray(b.ts, np.float64)
            _, tts, _ = tail.arrays()
            last = max(float(getattr(ix, "clock", -np.inf)), float(tts[-1]) if tts.shape[0] else -np.inf)
            if (ts.shape[0] > 1 and (np.diff(ts) < 0).any()) or float(ts[0]) < last:
                self._release(k, np.inf, forced=False)     # out of order: as before, in push order
                plain[a] = ix
                continue
            if rids is None:
                rids = np.arange(first_row, first_row + len(b), dtype=np.int64)
            keys = as_key_array(b.columns[a], f"summary {decl.name}.{a}")
            if getattr(ix, "_value_layers", None):
                from ..index.value_layer import feed_layers
                feed_layers(ix, keys, ts, rids, None, b.columns)
            tail.keys.append(keys)
            tail.ts.append(ts)
            tail.rids.append(rids)
        if plain:
            from types import SimpleNamespace
            _feed_indexes(SimpleNamespace(index=plain), b, first_row)

    def advance(self, decl, now: float) -> None:
        """A heartbeat: advance the indexes.  An index with PT-join consumers (lockstep) advances
        only its value layers: its own clock would pass tuples still in the tail, and its due
        COLLAPSEs would change the zones before the joins' private counterparts (which only
        ingest) do; it is advanced once no consumer is left (:meth:`settle`)."""
        from ..index.value_layer import advance_layers
        for ix in (decl.index or {}).values():
            tail = self._tails.get(id(ix))
            if tail is None or not self._lockstep or not self._consumers.get(id(ix)):
                if tail is not None:
                    self._release(id(ix), np.inf, forced=False)
                f = getattr(ix, "advance", None)
                if f is not None:
                    f(now)
            else:
                advance_layers(ix, now)
                tail.adv = max(tail.adv, float(now))

    # -- release ------------------------------------------------------------------
    def release(self, indexes, now: float) -> None:
        """Ingest the tail tuples of ``indexes`` with ``ts <= now`` (a consumer's operator is about
        to ingest its arrivals up to ``now``)."""
        for ix in indexes:
            k = id(ix)
            if k in self._tails:
                self._release(k, float(now), forced=False)

    def settle(self) -> None:
        """Ingest what every active consumer has passed; everything when none is left; and
        what exceeds the bound (``max_rows`` rows)."""
        for k, tail in self._tails.items():
            if not len(tail) and tail.adv == -np.inf:
                continue
            live = [nd for q, nd in self._consumers.get(k, []) if q.active]
            upto = min((float(nd.clock) for nd in live), default=np.inf)
            self._release(k, upto, forced=False)
            _, ts, _ = tail.arrays()
            if ts.shape[0] > self.max_rows:
                self._release(k, float(ts[ts.shape[0] - self.max_rows - 1]), forced=True)

    def _release(self, k, upto: float, forced: bool) -> None:
        tail = self._tails[k]
        ix = self._index[k]
        keys, ts, rids = tail.arrays()
        if ts.shape[0]:
            j = int(np.searchsorted(ts, upto, side="right"))
            if j:
                from ..index.value_layer import layers_detached
                with layers_detached(ix):
                    ix.ingest(keys[:j], ts[:j], rids[:j])
                tail.keys, tail.ts, tail.rids = ([keys[j:]], [ts[j:]], [rids[j:]]) if j < ts.shape[0] else \
                    ([], [], [])
                self.released_rows += j
                if forced:
                    self.forced_rows += j
        if not len(tail) and tail.adv > -np.inf and not (self._lockstep and self._consumers.get(k)):
            adv, tail.adv = tail.adv, -np.inf
            f = getattr(ix, "advance", None)
            if f is not None:
                f(adv)

    # -- when the answers equal a private index's -------------------------------------
    def private_equivalent(self, query) -> tuple:
        """``(True, "")`` when ``query``'s PT answers on the shared index are, by construction,
        those on private indexes with the same seed and budget (module doc), else ``(False,
        reason)``: the index is fed in lockstep, the join reads its streams unfiltered and
        unsampled, every consumer of its indexes joins the same streams (so steps at the same
        clocks), and none of its steps or idle drains found the index ahead of its clock
        (``PTJoinNode.steps_index_ahead``: a scheduler running one consumer's older step after
        another's newer one -- Chain does -- makes it so)."""
        nodes = [n for n in query.plan.nodes if n.kind == "pt_join"]
        if not nodes:
            return False, "no PT join"
        if not self._lockstep:
            return False, "index_lockstep is off"
        streams = {s.schema.name.lower() for s in query.bound.streams}
        for node in nodes:
            if not getattr(node.op, "shared", False):
                return False, "private indexes"
            if getattr(node.op, "steps_index_ahead", 0):
                return False, f"the shared index held tuples beyond {node.op.steps_index_ahead} of its steps"
            for c in node.children:
                p = c.params or {}
                if p.get("filter_fns") or p.get("sample") not in (None, 1.0):
                    return False, f"{p.get('alias', 'a stream')} is filtered or sampled before the join"
            for src in node.op.op.sources:
                for q, _ in self._consumers.get(id(src.ix), []):
                    if {s.schema.name.lower() for s in q.bound.streams} != streams:
                        return False, f"query {q.id} probes the same index from other streams"
        return True, ""

    # -- readers ------------------------------------------------------------------
    def tail_rows(self, ix) -> int:
        t = self._tails.get(id(ix))
        return len(t) if t is not None else 0

    def tail_of(self, ix):
        """(keys, ts) of the tuples pushed to ``ix``'s stream that it has not ingested yet."""
        t = self._tails.get(id(ix))
        if t is None:
            return None, np.zeros(0)
        keys, ts, _ = t.arrays()
        return keys, ts

    def reader(self, ix):
        """``ix`` as readers outside the joins see it: the whole stream (:class:`TailedIndex`)."""
        return TailedIndex(ix, self) if self.tail_rows(ix) else ix

    def flush(self) -> None:
        """Ingest every tail (e.g. before the engine stops feeding PT joins)."""
        for k in list(self._tails):
            self._release(k, np.inf, forced=False)

    @property
    def nbytes(self) -> int:
        """Bytes of the tails (key, ts, row per waiting tuple)."""
        return int(sum(a.nbytes for t in self._tails.values() for part in (t.keys, t.ts, t.rids) for a in part))

    def stats(self) -> dict:
        return {"lockstep": self._lockstep, "tail_bytes": self.nbytes,
                "indexes_with_consumers": sum(1 for v in self._consumers.values() if v),
                "tail_rows": sum(len(t) for t in self._tails.values()),
                "released_rows": self.released_rows, "forced_rows": self.forced_rows}


class TailedIndex:
    """Read view of a shared index and its tail (:class:`IndexFeed`): ``estimate`` adds the
    tail's exact counts in ``(t_from, t_to]``; ``error_bound`` is the index's (the tail adds
    no error); any other attribute is the index's.  ``summary_kind`` = ``"index"``."""

    summary_kind = "index"

    def __init__(self, index, feed: IndexFeed):
        self._ix = index
        self._feed = feed

    def __getattr__(self, name):
        return getattr(self._ix, name)

    def estimate(self, values, t_from: float, t_to: float, edge: str = "exact") -> np.ndarray:
        out = np.asarray(self._ix.estimate(values, t_from, t_to, edge=edge), np.float64)
        keys, ts = self._feed.tail_of(self._ix)
        if ts.shape[0]:
            q = as_key_array(values, f"StreamIndex {self._ix.decl.name}.estimate values")
            v = np.sort(keys[(ts > float(t_from)) & (ts <= float(t_to))])
            if v.shape[0] and q.shape[0]:
                out = out + (np.searchsorted(v, q, side="right") - np.searchsorted(v, q, side="left"))
        return out

    def error_bound(self, values, t_from: float, t_to: float, confidence: float = 0.95) -> np.ndarray:
        return self._ix.error_bound(values, t_from, t_to, confidence)
