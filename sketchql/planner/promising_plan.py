"""Promising-tuple plans: ``WITH PREFERENCE`` queries mapped onto the PT operators.

:func:`promising_plan` rewrites an exact :class:`~sketchql.planner.plan.Plan`
whose engine is ``"promising"``: the two-stream equi-join node becomes a
``pt_join`` node whose operator is a :class:`PTJoinNode` -- a physical node
with the exact operators' protocol ``step(now, *inputs) -> Changes`` wrapping
a :class:`sketchql.operators.promising.PTJoin` (paper Figure 7).  The scans
below it and the residual select / project / distinct above it are unchanged.

Mapping (what is accepted; everything else raises
:class:`~sketchql.errors.SketchQLSemanticError` naming the reason):

* exactly two streams (no tables), one equality ``A.x = B.y`` between them,
  INT join columns, no aggregate / GROUP BY;
* window: the paper's ``WINDOW w`` (the semantic pass gives every stream
  ``[RANGE w]``), or equal ``[RANGE w]`` windows written per stream, or none
  (whole stream: ``UNBOUNDED``).  A pair joins iff the keys are equal and
  ``|ts_a − ts_b| < w`` -- the same pairs as the exact symmetric hash join;
* ``WITH PREFERENCE desc|asc|weighted`` -> PTJoin preference; ``FADE FACTOR``
  -> fade (default 0.8); the engine seed seeds the operator;
* the region index: the engine passes ``index_for(stream, column, window)``,
  which returns the stream attribute's *declared* :class:`sketchql.index.StreamIndex`
  (``CREATE SUMMARY``; when none is declared the engine declares one and
  reuses it for the next query that needs it).  Each side probes it through
  a :class:`~sketchql.operators.promising.sources.SharedIndexSource`: the
  index is fed once per pushed tuple by the engine (stream row ids); the
  query's own input (filtered / sampled, one arrival number across both
  streams) is a ``stream row -> seq`` mapping applied at probe time.  The
  Query hands the stream rows of the tuples it feeds to each scan to
  :meth:`PTJoinNode.feed_rows`.  Before each time chunk of a step's arrivals
  the source's ``before_ingest(t_lo, t_hi)`` has the engine ingest the tuples
  up to ``t_hi`` that it kept back (:mod:`sketchql.engine.index_feed`), so the
  index holds exactly the streams up to that chunk, as a private index fed
  arrival by arrival would.  Without ``index_for`` (engine knob
  ``share_indexes`` off) PTJoin keeps a private StreamIndex per side
  configured like the declared one.

Budget (work units of :data:`sketchql.approx.UNIT_COSTS`, per arriving tuple
that reaches the join, read from the query contract at every step so that
``query.set_knob("budget", n)`` takes effect at the next step):

* ``WITHIN n PROBES PER TUPLE`` -> ``n`` units per tuple (deterministic);
* ``WITHIN n MS`` -> ``n / 1000 * units_per_second`` units per tuple, with
  ``units_per_second`` = :data:`sketchql.approx.BENCH_UNITS_PER_SECOND`
  (2000: 1 ms = 2 units), the fixed conversion the benchmarks use;
* no ``WITHIN`` -> :data:`DEFAULT_BUDGET_UNITS` units per tuple;
* idle units -- ``Engine.idle(units)``, and a heartbeat over a silent gap
  ``g``, which brings ``budget x rate x g`` -- are credited to the operator's
  allowance and probe its queue (:meth:`PTJoinNode.idle`), at most the units
  the arrivals of the last window brought, less the idle units already
  granted in that window (a gap is in effect capped at one window: idle work
  can only probe arrivals still in it); the rest is refused
  (``pt_idle_units_refused``).  ``q.stats()["promising"]`` shows the account:
  ``pt_allowance`` (units given + idle units), ``pt_work`` (charged),
  ``pt_debt`` (carried at the end), ``pt_debt_max`` and its documented bound
  ``pt_debt_bound`` (:mod:`sketchql.operators.promising.admission`), with
  ``pt_work <= pt_allowance + pt_debt`` and ``pt_debt_max <= pt_debt_bound``.

Output: a windowed relation of the produced pairs -- ``snapshot(t)`` = the
pairs produced so far that are still alive at ``t``.  A pair (a, b) of a
window-``w`` join is alive while both members are in their windows, i.e. on
``[max(ts_a, ts_b), min(ts_a, ts_b) + w)`` (the lifetime the exact
:class:`~sketchql.operators.exact.SymmetricHashJoin` gives it).  Each
produced pair gives a ``+1`` row at ``p = max(max(ts_a, ts_b), t_prev)``
(capped at the step time), where ``t_prev`` is the time of the previous
step: the event time at which the pair became valid (the ``at`` the exact
join gives its ``+1`` row) when the pair is produced in the step that first
covers that time, else the start of the step that produced it (a change
cannot be reported in the past of what was already reported -- operators
above check it); and a ``−1`` row with the same columns and rid at its
expiry ``e = min(ts_a, ts_b) + w``, emitted by the step whose time reaches
``e`` (also a step without arrivals, e.g. a heartbeat).  A pair produced
*late* -- ``e <= p``, possible because PT probes out of arrival order -- was
never alive in any snapshot from its production on: it gives neither row
(counted in ``pt_pairs_late``).  Whole-stream window: nothing expires (only
``+1`` rows).  The row's ``ts`` is always ``max(ts_a, ts_b)``.  ``rid`` =
``mix_rids(seq_a, seq_b)``.  The row columns are those the exact
join would give (``alias.column`` of both members), looked up by arrival
number in a per-side store that keeps the tuples of the last two windows
(a pair's members are both younger than ``now − 2w`` when it is produced).

>>> from sketchql.engine import Engine
>>> eng = Engine(seed=1)
>>> eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
>>> q = eng.register("SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k "
...                  "WITH PREFERENCE desc A.k WINDOW 10 SECONDS WITHIN 1000 PROBES PER TUPLE")
>>> eng.push("A", {"ts": [1.0, 2.0], "k": [7, 8]})
>>> eng.push("B", {"ts": [3.0, 4.0], "k": [7, 9]})
>>> eng.heartbeat("A", 5.0)
>>> q.results()[["k", "A.ts", "B.ts"]].values.tolist()
[[7.0, 1.0, 3.0]]
>>> eng.heartbeat("A", 12.0); eng.heartbeat("B", 12.0)   # the pair expires at 1 + 10 = 11
>>> len(q.snapshot(10.0)), len(q.snapshot(12.0)), q.changes().sign.tolist()
(1, 0, [1, -1])
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ..errors import SketchQLSemanticError
from ..operators.changes import Batch, Changes, mix_rids
from .plan import MONO, Plan, PlanNode

__all__ = ["PTJoinNode", "promising_plan", "DEFAULT_BUDGET_UNITS", "DEFAULT_FADE"]

#: Work units per arriving tuple when the query has no WITHIN clause
#: (knob ``budget`` of the query; the benchmarks' tight regime is ~20-200).
DEFAULT_BUDGET_UNITS = 50.0


def contract_budget(ct, units_per_second):
    """Work units per tuple from a query contract, read at every call (so a
    ``budget`` knob change takes effect at the next step): ``WITHIN n PROBES``
    -> n; ``WITHIN n MS`` -> n/1000 * ``units_per_second``; none -> default."""

    def budget_units() -> float:
        if ct.budget is None:
            return DEFAULT_BUDGET_UNITS
        if (ct.budget_unit or "probes") == "ms":
            return float(ct.budget) / 1000.0 * float(units_per_second)
        return float(ct.budget)
    return budget_units
#: FADE FACTOR when the query gives none (paper section 3).
DEFAULT_FADE = 0.8


def _err(msg: str, plan: Plan):
    pos = plan.bound.query.pos
    return SketchQLSemanticError(msg + "; add EXACT to evaluate this query exactly", *pos)


_SUPPORTED = ("promising-tuple operators through SQL: WITH PREFERENCE is supported for two-stream equi-joins "
              "(SELECT ... FROM A, B WHERE A.x = B.y ... WITH PREFERENCE desc|asc|weighted ...)")


class PTJoinNode:
    """Physical adapter: exact-operator protocol around a promising-tuple join.

    ``step(now, in_a, in_b)`` takes the two window scans' change streams,
    keeps their ``+1`` rows (arrivals; expirations are the PT operator's own
    business), merges them into one arrival sequence ordered by ``(ts,
    side)`` with global arrival numbers ``seq``, ticks the PTJoin with
    ``allowance = budget_units()`` per arrival, and returns the pairs it
    produced as ``+1`` Changes (``at = max(ts_a, ts_b, previous step time)``, columns
    ``prefix_a + col`` / ``prefix_b + col`` like the exact join), plus the
    ``−1`` of every produced pair whose expiry ``e = min(ts_a, ts_b) + w``
    is ``<= now`` (same columns and rid as its ``+1``; ``at = e``).  A pair is
    thus in the output relation on ``[at_plus, e)``; a pair produced with
    ``e <= at_plus`` (late: its first member had left the window before the
    PT operator found it) is dropped -- neither row -- and counted in
    ``pairs_late``.  Pending expirations live in numpy arrays (expiry, rid,
    ts, columns); each step emits those with ``e <= now`` in one vectorized
    pass.  ``window = inf``: nothing expires, nothing is kept pending.

    Parameters: ``op`` (a PTJoin over streams (0, 1) on column ``"key"``),
    ``keys`` (join column of each side), ``prefixes``, ``window`` (seconds,
    ``inf`` = whole stream), ``budget_units`` (callable -> units per tuple).

    >>> import numpy as np
    >>> from sketchql.operators.promising import build_promising_operator
    >>> from sketchql.operators.changes import Batch, Changes
    >>> op = build_promising_operator({"kind": "join", "window": 10.0, "key": "key"})
    >>> node = PTJoinNode(op, ("k", "k"), ("A.", "B."), 10.0, lambda: 1e6)
    >>> a = Batch({"k": np.array([5]), "ts": np.array([1.0])}, ts=np.array([1.0]))
    >>> b = Batch({"k": np.array([5]), "ts": np.array([2.0])}, ts=np.array([2.0]))
    >>> out = node.step(2.0, Changes.inserts(a, a.ts, [0]), Changes.inserts(b, b.ts, [0]))
    >>> out.columns["A.ts"].tolist(), out.columns["B.ts"].tolist(), out.at.tolist()
    ([1.0], [2.0], [2.0])
    >>> node.step(10.0) is None, node.pending_expirations()   # alive on [2, 11)
    (True, 1)
    >>> gone = node.step(11.0)
    >>> gone.sign.tolist(), gone.at.tolist(), bool(gone.rid[0] == out.rid[0]), node.pending_expirations()
    ([-1], [11.0], True, 0)
    """

    def __init__(self, op, keys, prefixes, window: float, budget_units):
        self.op = op
        self.keys = tuple(keys)
        self.prefixes = tuple(prefixes)
        self.window = float(window)
        self.budget_units = budget_units
        self._seq = 0
        # per side: arrival numbers, timestamps and the columns of the stored tuples
        self._store = [None, None]
        self.pairs_out = 0
        self.pairs_lost = 0       # pairs whose member left the store (should stay 0)
        self.pairs_late = 0       # pairs produced after their expiry (dropped: never alive)
        self.pairs_expired = 0    # -1 rows emitted
        # pending expirations: expiry time, rid, ts and columns of each live produced pair
        self._pend_at = np.empty(0)
        self._pend_rid = np.empty(0, np.int64)
        self._pend_ts = np.empty(0)
        self._pend_cols: Optional[dict] = None
        self.tuples_in = 0
        self.units_given = 0.0
        self.idle_units = 0.0
        self.idle_refused = 0.0            # idle units beyond idle_cap(), not granted
        self._idle_log = []                # (operator clock, units) of the idle grants (idle_cap)
        self.clock = -math.inf
        #: plan source index of each side's scan -> side (set by the planner); the query
        #: feeds the stream rows of the tuples it gives those scans (``feed_rows``)
        self.row_sources: dict = {}
        self._rows_fed = [[], []]          # stream rows fed to each side's scan, in scan rid order
        self._rows_base = [0, 0]           # scan rid of the first row in _rows_fed
        #: called with (indexes, now) before a step: the engine brings its shared indexes up to
        #: ``now`` (sketchql.engine.index_feed), so they hold what a private index would
        self.before_step = None
        #: steps (and idle drains) at which a shared index probed had tuples beyond the join's time
        #: (its answers may then differ from a private index's; 0 when fed in lockstep and every
        #: consumer of the index steps in time order, sketchql.engine.index_feed)
        self.steps_index_ahead = 0

    @property
    def shared(self) -> bool:
        """True when both sides probe a shared (engine-declared) index."""
        srcs = getattr(self.op, "sources", None)
        return bool(srcs) and all(hasattr(s, "bind") for s in srcs)

    def feed_rows(self, side: int, rows) -> None:
        """Stream row ids of the tuples the query feeds to ``side``'s scan (its next scan rids)."""
        if not self.shared:
            return
        self._rows_fed[side].append(np.asarray(rows, np.int64))

    def _rows_of(self, side: int, scan_rid):
        parts = self._rows_fed[side]
        allr = np.concatenate(parts) if len(parts) != 1 else parts[0]
        k = np.asarray(scan_rid, np.int64) - self._rows_base[side]
        if k.shape[0] and (k.min() < 0 or k.max() >= allr.shape[0]):
            from ..errors import SketchQLError
            raise SketchQLError("PT join over a shared index: the scan's arrivals do not match the rows fed")
        # a range / unbounded scan emits every fed tuple's +1 in the step it is fed; under the
        # scheduler later steps' rows may already be fed: keep those
        used = int(k.max()) + 1 if k.shape[0] else 0
        self._rows_base[side] += used
        self._rows_fed[side] = [allr[used:]] if used < allr.shape[0] else []
        return allr[k]

    def idle_cap(self) -> float:
        """Most idle units the join may take now: the units the arrivals of its
        last window brought (``budget_units()`` times the tuples with ``ts >
        now - w``, ``now`` its newest arrival), less the idle units it was
        granted while its newest arrival was in that window.  Idle work can
        only probe the entries of arrivals still in the window (an older probe
        finds no partner alive), so a heartbeat over a gap ``g`` -- the engine
        grants ``budget x rate x g`` -- is in effect capped at ``g = w``, over
        any number of heartbeats (and so is ``Engine.idle``); whole-stream
        window: every arrival so far and every idle unit granted."""
        now = float(self.op.now)
        if not math.isfinite(now):
            return 0.0
        lo = now - self.window
        n = 0
        for st in self._store:
            if st is not None:
                n += int((st["__ts"] > lo).sum())
        log = [g for g in getattr(self, "_idle_log", []) if g[0] > lo]
        self._idle_log = log
        return max(0.0, float(self.budget_units()) * n - sum(u for _, u in log))

    def idle(self, units: float) -> None:
        """Idle time (or a heartbeat) brings ``units`` of work: credited to the
        operator's allowance up to :meth:`idle_cap` (the rest is refused and
        counted in ``pt_idle_units_refused``), the queue probed with it, and a
        debt left by the probing noted in ``debt_max`` (the operator's budget
        rule, work charged <= allowance + carried debt, then holds with the
        idle units in the allowance)."""
        if units > 0:
            if self.shared and any(float(getattr(src.ix, "clock", -math.inf)) > self.clock
                                   for src in self.op.sources):
                self.steps_index_ahead += 1    # probing with an index ahead of this join's clock
            give = min(float(units), self.idle_cap())
            self.idle_refused = getattr(self, "idle_refused", 0.0) + float(units) - give
            if give <= 0:
                return
            self.idle_units += give
            self._idle_log.append((float(self.op.now), give))
            self.op._credit(give)
            self.op.drain()
            self.op._note_debt()

    # -- protocol of the exact operators ------------------------------------
    def step(self, now: float, *inputs) -> Optional[Changes]:
        if self.before_step is not None:
            self.before_step([src.ix for src in self.op.sources], now)
        if self.shared and any(float(getattr(src.ix, "clock", -math.inf)) > now for src in self.op.sources):
            self.steps_index_ahead += 1    # the shared index holds tuples (or a clock) beyond this step
        arr, rids = [], []
        for side, ch in enumerate(inputs):
            if ch is None or not len(ch):
                continue
            ins = ch.sign > 0
            if not ins.any():
                continue
            rows = ch.rows.take(ins) if not ins.all() else ch.rows
            arr.append((side, rows))
            rids.append(ch.rid[ins])
        self._arr_rids = rids
        if arr:
            self._arrive(now, arr)
        else:
            self.op.tick(_empty_batch(), np.zeros(0))
        out = self._collect(now)
        out = self._expire(now, out)
        self._prune()
        self.clock = max(self.clock, float(now))
        return out

    def _arrive(self, now, arr):
        from ..operators.promising import make_batch
        side = np.concatenate([np.full(len(r), s, np.int64) for s, r in arr])
        ts = np.concatenate([r.ts for _, r in arr])
        key = np.concatenate([np.asarray(r.columns[self.keys[s]]).astype(np.int64) for s, r in arr])
        o = np.lexsort((side, ts))                     # arrival order: by ts, side a first at ties
        n = len(o)
        seq = np.empty(n, np.int64)
        seq[o] = np.arange(self._seq, self._seq + n, dtype=np.int64)
        self._seq += n
        off = 0
        for s, r in arr:
            m = len(r)
            self._append(s, seq[off:off + m], r)
            off += m
        batch = make_batch(side[o], ts[o], seq[o], key=key[o])
        if self.shared:
            # stream rows of each side's arrivals, in the order the PTJoin ingests them
            rws = np.concatenate([self._rows_of(s, r_rid) for (s, _), r_rid in zip(arr, self._arr_rids)])
            so, qo = side[o], seq[o]
            for s in (0, 1):
                self.op.sources[s].bind(qo[so == s], rws[o][so == s])
        units = float(self.budget_units())
        self.units_given += units * n
        self.tuples_in += n
        self.op.tick(batch, np.full(n, units))

    def _append(self, side, seq, rows: Batch):
        o = np.argsort(seq, kind="stable")
        new = {"__seq": seq[o], "__ts": rows.ts[o]}
        new.update({c: v[o] for c, v in rows.columns.items()})
        cur = self._store[side]
        self._store[side] = new if cur is None else {k: np.concatenate([cur[k], new[k]]) for k in cur}

    def _prune(self):
        # the operator's clock (latest arrival), not the step time: a later pair has both
        # members younger than op.now - 2w (its probe tuple is younger than op.now - w)
        now = float(self.op.now)
        if not math.isfinite(self.window) or not math.isfinite(now):
            return
        horizon = now - 2.0 * self.window
        for s, st in enumerate(self._store):
            if st is None or not len(st["__ts"]):
                continue
            old = st["__ts"] <= horizon
            k = int(old.sum())
            if k and 2 * k >= len(old):                  # amortized: compact when half is old
                self._store[s] = {c: v[~old] for c, v in st.items()}

    def _collect(self, now: float) -> Optional[Changes]:
        out = self.op._out                               # drained here: the PTJoin keeps no history
        if not out["a"]:
            return None
        ra, rb = np.concatenate(out["a"]), np.concatenate(out["b"])
        ta, tb = np.concatenate(out["ta"]), np.concatenate(out["tb"])
        for v in out.values():
            v.clear()
        ia, oka = self._find(0, ra)
        ib, okb = self._find(1, rb)
        ok = oka & okb
        if not ok.all():
            self.pairs_lost += int((~ok).sum())
            ra, rb, ta, tb, ia, ib = ra[ok], rb[ok], ta[ok], tb[ok], ia[ok], ib[ok]
        if not len(ra):
            return None
        cols = {}
        for s, idx in ((0, ia), (1, ib)):
            st = self._store[s]
            for c, v in st.items():
                if not c.startswith("__"):
                    cols[self.prefixes[s] + c] = v[idx]
        ts = np.maximum(ta, tb)
        at = np.minimum(np.maximum(ts, self.clock), float(now))
        end = np.minimum(ta, tb) + self.window            # the pair's expiry (inf: whole stream)
        alive = end > at
        if not alive.all():                                # late: never alive from `at` on
            self.pairs_late += int((~alive).sum())
            cols = {c: v[alive] for c, v in cols.items()}
            ts, at, end, ra, rb = ts[alive], at[alive], end[alive], ra[alive], rb[alive]
            if not len(ra):
                return None
        rid = mix_rids(ra, rb)
        self.pairs_out += len(ra)
        fin = np.isfinite(end)
        if fin.any():
            self._pend_at = np.concatenate([self._pend_at, end[fin]])
            self._pend_rid = np.concatenate([self._pend_rid, rid[fin]])
            self._pend_ts = np.concatenate([self._pend_ts, ts[fin]])
            pc = self._pend_cols
            self._pend_cols = ({c: v[fin] for c, v in cols.items()} if pc is None else
                               {c: np.concatenate([pc[c], cols[c][fin]]) for c in pc})
        return Changes.inserts(Batch(cols, ts=ts), at, rid)

    def _expire(self, now: float, out: Optional[Changes]) -> Optional[Changes]:
        """Append the −1 rows of the pending pairs with expiry <= now (removed from pending)."""
        if not len(self._pend_at):
            return out
        due = self._pend_at <= float(now)
        if not due.any():
            return out
        keep = ~due
        gone = Changes.deletes(Batch({c: v[due] for c, v in self._pend_cols.items()}, ts=self._pend_ts[due]),
                               self._pend_at[due], self._pend_rid[due])
        self._pend_at, self._pend_rid, self._pend_ts = self._pend_at[keep], self._pend_rid[keep], self._pend_ts[keep]
        self._pend_cols = {c: v[keep] for c, v in self._pend_cols.items()}
        self.pairs_expired += len(gone)
        return gone if out is None else Changes.concat([out, gone])   # concat sorts by (at, sign)

    def _find(self, side, seq):
        st = self._store[side]
        if st is None:
            return np.zeros(len(seq), np.int64), np.zeros(len(seq), bool)
        s = st["__seq"]
        i = np.searchsorted(s, seq)
        ok = i < len(s)
        ok[ok] = s[i[ok]] == seq[ok]
        return np.where(ok, i, 0), ok

    # -- introspection ------------------------------------------------------
    def pending_expirations(self) -> int:
        """Produced pairs still alive (their −1 row not emitted yet)."""
        return int(len(self._pend_at))

    def state_size(self) -> int:
        return int(sum(len(st["__seq"]) for st in self._store if st is not None)) + self.pending_expirations()

    def stats(self) -> dict:
        s = self.op.stats()
        return {"pt_operator": type(self.op).__name__, "pt_preference": self.op.preference,
                "pt_fade": self.op.fade, "pt_window": self.window,
                "pt_budget_units_per_tuple": float(self.budget_units()),
                "pt_units_given": self.units_given, "pt_work": float(s["work"]),
                "pt_pairs": self.pairs_out, "pt_pairs_lost": self.pairs_lost,
                "pt_pairs_late": self.pairs_late, "pt_pairs_expired": self.pairs_expired,
                "pt_pending_expirations": self.pending_expirations(),
                "pt_queue": int(s["queued"]), "pt_probes": int(s["probes"]),
                "pt_tuples_in": self.tuples_in, "pt_discarded": int(s["discarded"]),
                "pt_stored_tuples": self.state_size(), "pt_idle_units": self.idle_units,
                "pt_idle_units_refused": float(getattr(self, "idle_refused", 0.0)),
                # the operator's budget account: allowance = units given + idle units granted;
                # work <= allowance + the carried debt, debt_max <= its documented bound
                "pt_allowance": float(s["allowance"]), "pt_debt": max(0.0, -float(s["account"])),
                "pt_debt_max": float(s["debt_max"]),
                "pt_debt_bound": max(float(s["max_forced"]), float(s["max_plan_overrun"])),
                "pt_shed": int(s["shed"]),
                "pt_index": "shared" if self.shared else "private",
                "pt_index_steps_ahead": int(getattr(self, "steps_index_ahead", 0)),
                "pt_index_bytes": self.index_nbytes(shared_once=False)}

    def index_nbytes(self, shared_once: bool = True) -> int:
        """Bytes of the region index this join probes: private indexes in full; for a
        shared index only the query's mapping unless ``shared_once`` is False."""
        from ..operators.promising.sources import index_nbytes
        srcs = self.op.sources
        if self.shared and shared_once:
            return int(sum(s.mapping_nbytes for s in srcs))
        return index_nbytes(srcs)


def _empty_batch():
    from ..operators.promising import make_batch
    return make_batch(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64), key=np.zeros(0, np.int64))


def _window_of(plan: Plan, join: PlanNode) -> float:
    q = plan.bound.query
    if q.window is not None:
        # a FROM item without a window took the WINDOW clause's; one with its own must agree with it
        # (the join runs on one window: a [RANGE 5] beside WINDOW 8 SECONDS used to run on 8 silently)
        for c in join.children:
            w = c.params.get("window") if c.kind == "scan" else None
            same = (w is not None and w.kind == "range" and float(w.size) == float(q.window)
                    and getattr(w, "slide", None) in (None, 0, w.size))
            if not same:
                what = f"a {w.kind} window" if w is not None and w.kind != "range" else \
                    f"[RANGE {float(w.size):g}{'' if getattr(w, 'slide', None) in (None, 0, w.size) else f' SLIDE {w.slide:g}'}]" \
                    if w is not None else "no plain window"
                raise _err(f"{_SUPPORTED}: the WINDOW clause says {float(q.window):g} s but "
                           f"{c.params.get('alias', 'a FROM item')} has {what}; give the window once, "
                           f"in FROM or in WINDOW", plan)
        return float(q.window)
    sizes = set()
    for c in join.children:
        if c.kind != "scan":
            raise _err(f"{_SUPPORTED}; the window of every stream must be a time range (RANGE) or none", plan)
        w = c.params["window"]
        if w.kind == "unbounded":
            sizes.add(math.inf)
        elif w.kind == "range" and (getattr(w, "slide", None) in (None, 0) or w.slide == w.size):
            sizes.add(float(w.size))
        else:
            raise _err(f"{_SUPPORTED} over RANGE windows (or the WINDOW clause); "
                       f"{c.params['alias']} has a {w.kind} window", plan)
    if len(sizes) != 1:
        raise _err(f"{_SUPPORTED}; both streams need the same window (write WINDOW w)", plan)
    return sizes.pop()


def _summary_options(catalog, stream: str, col: str) -> dict:
    for d in catalog.summaries_on(stream):
        if any(a.lower() == col.lower() for a in d.attrs):
            return {"granularity": float(d.granularity), "rate": int(d.rate)}
    return {}


def promising_plan(plan: Plan, catalog, seed: int, units_per_second: float, index_for=None,
                   private_index_for=None) -> Plan:
    """Replace the plan's join by a promising-tuple join (module doc); raises for the rest.

    ``index_for(stream, column, window) -> StreamIndex``: the shared index of a stream
    attribute (the engine's); None keeps a private index per side, built by
    ``private_index_for(stream, column, window)`` when that returns one (configured like the
    declared index), else from the declaration's granularity and rate."""
    from ..operators.promising import build_promising_operator

    bq = plan.bound
    if bq.is_aggregate:
        raise _err(f"{_SUPPORTED}; promising-tuple aggregates (PTAggregate) are not reachable from SQL yet", plan)
    if bq.tables or len(bq.streams) != 2:
        raise _err(f"{_SUPPORTED}; this query reads {len(bq.streams)} stream(s) and {len(bq.tables)} table(s) "
                   "(single-stream PT selections are not reachable from SQL yet)", plan)
    joins = [n for n in plan.root.walk() if n.kind == "join"]
    if len(joins) != 1:
        raise _err(_SUPPORTED, plan)
    join = joins[0]
    conds = join.params["conditions"]
    if len(conds) != 1:
        raise _err(f"{_SUPPORTED}; it needs exactly one equality between the two streams, got {len(conds)}", plan)
    (i, ci), (j, cj) = conds[0]
    keys = (ci, cj) if i == 0 else (cj, ci)
    scans = [c for c in join.children]
    for s, k in enumerate(keys):
        if s >= len(scans) or scans[s].kind != "scan":
            raise _err(f"{_SUPPORTED}; windows other than RANGE are not supported", plan)
        src = bq.sources[scans[s].source]
        kind = src.schema.columns.get(k)
        if kind not in ("int", "bool"):
            raise _err(f"{_SUPPORTED} on INT columns; {src.alias}.{k} is {kind}", plan)
    window = _window_of(plan, join)
    pref = bq.preference.kind.lower()
    if pref not in ("desc", "asc", "weighted"):
        raise _err(f"{_SUPPORTED}; unknown preference {pref!r}", plan)
    fade = DEFAULT_FADE if bq.fade is None else float(bq.fade)
    names = [bq.sources[s.source].schema.name for s in scans]
    opts = {}
    for s in range(2):
        o = _summary_options(catalog, names[s], keys[s])
        if o and not opts:
            opts = o
    source, ixname = "index", "private"
    if index_for is not None:
        from ..operators.promising.sources import SharedIndexSource
        ixs = [index_for(names[s], keys[s], window) for s in range(2)]
        source = tuple(SharedIndexSource(window, ix) for ix in ixs)
        opts = {"granularity": float(ixs[0].decl.granularity), "rate": int(ixs[0].decl.rate)}
        ixname = "shared " + ", ".join(f"{ix.decl.name}.{ix.decl.attr}" for ix in ixs)
    elif private_index_for is not None:
        ixs = [private_index_for(names[s], keys[s], window) for s in range(2)]
        if all(ix is not None for ix in ixs):
            source = tuple(ixs)
            opts = {"granularity": float(ixs[0].decl.granularity), "rate": int(ixs[0].decl.rate)}
            index_for = True      # options come with the indexes
    op = build_promising_operator({"kind": "join", "window": None if math.isinf(window) else window,
                                   "preference": pref, "fade": fade, "streams": (0, 1), "key": "key",
                                   "seed": seed, "source": source,
                                   "source_options": None if index_for is not None else (opts or None)})
    index_for = None
    budget_units = contract_budget(bq.contract, units_per_second)

    aliases = join.params["aliases"]
    join.kind = "pt_join"
    wtxt = "whole stream" if math.isinf(window) else f"{window:g} s"
    join.label = (f"PromisingTupleJoin ON {aliases[0]}.{keys[0]} = {aliases[1]}.{keys[1]} "
                  f"PREFERENCE {pref} FADE {fade:g} WINDOW {wtxt} "
                  f"(index: {ixname}, G1 {opts.get('granularity', 10.0):g} s, rate {opts.get('rate', 2)})")
    join.structure = "PT region index per stream + entry queue; member columns kept for 2 windows"
    join.params.update({"keys": keys, "window_s": window, "preference": pref, "fade": fade})
    join.op = PTJoinNode(op, keys, tuple(join.params["prefixes"]), window, budget_units)
    join.op.row_sources = {scans[0].source: 0, scans[1].source: 1}
    join.params["index"] = ixname
    # windowed output: pairs expire at min(ts_a, ts_b) + w, not in arrival order (weak), as
    # the exact join's edge annotate() labelled; whole stream: nothing expires (monotonic)
    if math.isinf(window):
        for n in plan.root.walk():
            if n is join:
                break
            n.pattern = MONO
        join.pattern = MONO
    plan.engine_reason += ("; PTJoin (pairs only, no expirations)" if math.isinf(window) else
                           "; PTJoin (pairs, each expiring at min(ts_a, ts_b) + w)")
    return plan
