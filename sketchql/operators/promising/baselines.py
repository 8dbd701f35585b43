"""Baselines of the promising-tuple operators, on the same work-unit budget.

All of them process arrivals *in order* (FIFO) on a processor with a bounded
input backlog and drop what the budget cannot cover (load shedding by
arrival): time is measured in work units (the cumulative allowance of the
arrivals, ``T_k``); arrival k is processed iff the work already queued
before it is at most ``max_backlog`` units (``busy_until - T_k <=
max_backlog``), and then ``busy_until = max(busy_until, T_k) + cost_k``.
``max_backlog=0`` drops whatever arrives while the processor is busy; the
benchmarks give the baselines the same latency the PT operators have (the
budget of one replay tick).  Idle time is lost (a baseline has nothing to
catch up on).

* :class:`SimpleSHJ` -- SIMPLE-SHJ, the symmetric hash join (Wilschut &
  Apers): a processed arrival costs ``insert + probe + compare * (live
  tuples of its hash bucket in the other table)``; a dropped arrival is
  neither inserted nor probed.  ``n_buckets=None`` is an ideal hash table
  (one bucket per distinct key: every comparison is a match);
  ``n_buckets=64`` hashes the values into as many buckets as the PT index has
  value buckets (the same seeded hash), so both compare the same bucket
  contents.
* :class:`SimpleSelection` -- SIMPLE-Selection: the stream is fed to every
  query separately; each query gets ``budget / num_queries`` and pays
  ``compare`` per tuple it evaluates.
* :class:`PerQueryAggregate` -- per-query aggregation (SUM/COUNT/AVG/MEDIAN
  over each selection's window) on the same per-query drops; SUM and COUNT
  are scaled by the inverse of the share of arrivals the query processed.

>>> import numpy as np
>>> from sketchql.data import generate_stores, interleave, exact_join_pairs
>>> from sketchql.approx import WorkBudget, replay
>>> arr = interleave(generate_stores(2, duration=20.0, n_items=50, seed=4))
>>> shj = replay(arr, {"shj": SimpleSHJ(window=5.0)}, WorkBudget.unlimited())["shj"]
>>> shj.stats()["dropped"], len(shj.pairs()[0]) == len(exact_join_pairs(arr, 5.0)[0])
(0, True)
"""
from __future__ import annotations

import math
import time
from collections import defaultdict

import numpy as np

from ...errors import SketchQLError
from ...summaries.hashing import hash64
from .costs import COSTS
from .output import PairOutput, fold_allowance
from .selection import as_queries


class _Busy:
    """Busy/drop bookkeeping in work-unit time."""

    def __init__(self, max_backlog: float = 0.0):
        self.clock = 0.0       # unit-time at the current arrival
        self.busy_until = 0.0
        self.max_backlog = float(max_backlog)

    def admit(self) -> bool:
        return self.busy_until - self.clock <= self.max_backlog

    def run(self, cost: float):
        self.busy_until = max(self.busy_until, self.clock) + cost

    def advance(self, allowance_k: float):
        self.clock += allowance_k


def init_shj(op, who: str, window, streams, key, n_buckets, seed, name) -> None:
    """The checked join parameters of a SIMPLE-SHJ (``SimpleSHJ``, ``CompiledSHJ``) set on ``op``."""
    if not (window > 0):
        raise SketchQLError(f"{who}: window must be > 0 seconds, got {window!r}")
    if n_buckets is not None and (int(n_buckets) != n_buckets or n_buckets < 1):
        raise SketchQLError(f"{who}: n_buckets must be None or a positive integer, got {n_buckets!r}")
    op.n_buckets = None if n_buckets is None else int(n_buckets)
    op.seed = int(seed)
    op.window = float(window)
    op.streams = tuple(int(s) for s in streams)
    op.key = key
    op.name = name


class SimpleSHJ(PairOutput):
    """SIMPLE-SHJ on a work budget (module doc).  Same constructor shape and
    output methods as :class:`PTJoin` (``pairs``, ``result``, ``stats``)."""

    def __init__(self, window: float = 60.0, streams=(0, 1), key: str = "item", n_buckets: int | None = None,
                 seed: int = 0, max_backlog: float = 0.0, name: str = "simple_shj"):
        init_shj(self, "SimpleSHJ", window, streams, key, n_buckets, seed, name)
        # hash bucket -> [rids, ts, start, values]
        self.tables = [defaultdict(lambda: [[], [], 0, []]) for _ in range(2)]
        self.busy = _Busy(max_backlog)
        self.wall = False
        self._out = self._new_pair_log()
        self._stats = {"work": 0.0, "insert_work": 0.0, "outputs": 0, "processed": 0, "dropped": 0,
                       "compares": 0, "tuples_in": 0, "charged_seconds": 0.0, "overhead_seconds": 0.0}

    def set_wall_clock(self, on: bool = True) -> None:
        """Wall-clock budget: allowances (and ``max_backlog``) are seconds and a
        processed arrival costs the real time spent on it (``perf_counter``)."""
        self.wall = bool(on)

    def tick(self, batch, allowance) -> None:
        if not self.wall:
            return self._tick(batch, allowance)
        # wall clock: the whole call is real time spent; what the processed arrivals do not charge
        # themselves (the batch's columns as lists, the loop over dropped arrivals) is charged to the
        # processor at the end of the tick (stats()["overhead_seconds"]), as PTJoin.tick does
        t_in = time.perf_counter()
        st = self._stats
        inner = st["charged_seconds"]
        self._tick(batch, allowance)
        over = time.perf_counter() - t_in - (st["charged_seconds"] - inner)
        if over > 0:
            self.busy.run(over)
            st["overhead_seconds"] += over

    def _tick(self, batch, allowance) -> None:
        kv = getattr(batch, self.key)
        keys = kv.tolist()
        wall = self.wall
        clock = time.perf_counter
        if self.n_buckets is None:
            bks = keys
        else:
            bks = (hash64(kv, self.seed ^ 0xB0C3) % np.uint64(self.n_buckets)).astype(np.int64).tolist()
        streams = batch.stream.tolist()
        tss = batch.ts.tolist()
        seqs = batch.seq.tolist()
        al = np.asarray(allowance, np.float64).tolist()
        w = self.window
        s0, s1 = self.streams
        busy = self.busy
        out = self._out
        st = self._stats
        unlimited = math.isinf(al[0]) if al else False
        for k in range(len(keys)):
            s = streams[k]
            if s != s0 and s != s1:
                busy.advance(al[k])
                continue
            side = 0 if s == s0 else 1
            st["tuples_in"] += 1
            if not unlimited and not busy.admit():
                st["dropped"] += 1
                busy.advance(al[k])
                continue
            t_start = clock() if wall else 0.0
            v, t, r, bk = keys[k], tss[k], seqs[k], bks[k]
            ent = self.tables[1 - side].get(bk)
            n_cmp = 0
            n_hit = 0
            if ent is not None:
                rids, ts, start, vals = ent
                lim = t - w
                while start < len(ts) and ts[start] <= lim:
                    start += 1
                ent[2] = start
                n_cmp = len(ts) - start
                if n_cmp:
                    y = np.array(rids[start:], np.int64)
                    yt = np.array(ts[start:], np.float64)
                    if self.n_buckets is not None:
                        hit = np.array(vals[start:]) == v
                        y = y[hit]
                        yt = yt[hit]
                    n_hit = y.shape[0]
                if n_hit:
                    xr = np.full(n_hit, r, np.int64)
                    xt = np.full(n_hit, t)
                    if side == 0:
                        out["a"].append(xr); out["b"].append(y); out["ta"].append(xt); out["tb"].append(yt)
                    else:
                        out["a"].append(y); out["b"].append(xr); out["ta"].append(yt); out["tb"].append(xt)
                    out["val"].append(np.full(n_hit, v, np.int64))
                    out["at"].append(xt)
                    st["outputs"] += n_hit
            mine = self.tables[side][bk]
            mine[0].append(r)
            mine[1].append(t)
            if self.n_buckets is not None:
                mine[3].append(v)
            if mine[2] > 4096 and mine[2] > len(mine[1]) // 2:  # compact expired prefix
                c = mine[2]
                mine[0] = mine[0][c:]; mine[1] = mine[1][c:]; mine[2] = 0
                if self.n_buckets is not None:
                    mine[3] = mine[3][c:]
            cost = COSTS["insert"] + COSTS["probe"] + COSTS["compare"] * n_cmp
            st["work"] += cost
            st["insert_work"] += COSTS["insert"]
            st["compares"] += n_cmp
            st["processed"] += 1
            if not unlimited:
                if wall:
                    dt = clock() - t_start
                    st["charged_seconds"] += dt
                    busy.run(dt)
                else:
                    busy.run(cost)
            busy.advance(al[k])

    def finish(self) -> None:
        pass

    def stats(self) -> dict:
        return dict(self._stats)


def _processed_mask(allowance: np.ndarray, cost: float, state: list, max_backlog: float = 0.0) -> np.ndarray:
    """Busy/drop (module doc) for a constant cost per processed arrival.

    ``state = [clock, busy_until]`` is updated; sequential but cheap (a
    Python loop over floats)."""
    clock, busy_until = state
    al = allowance.tolist()
    keep = np.zeros(len(al), bool)
    if al and math.isinf(al[0]):
        keep[:] = True
        return keep
    for k, a in enumerate(al):
        if busy_until - clock <= max_backlog:
            keep[k] = True
            busy_until = max(busy_until, clock) + cost
        clock += a
    state[0], state[1] = clock, busy_until
    return keep


class SimpleSelection:
    """SIMPLE-Selection: every query sees the stream separately with
    ``budget / num_queries`` and pays ``compare`` per evaluated tuple.

    ``queries``: list of :class:`~.selection.RangeQuery` (or ``(lo, hi)``
    pairs over ``attr``).  Results: ``results()`` -> list (per query) of rid
    arrays; expiry with ``window`` is applied by ``current(q, now)``."""

    def __init__(self, queries, attr: str = "item", stream: int = 0, window: float = math.inf,
                 max_backlog: float = 0.0, name: str = "simple_selection"):
        self.queries = as_queries(queries, attr)
        self.max_backlog = float(max_backlog)
        self.stream = int(stream)
        self.window = float(window)
        self.name = name
        nq = len(self.queries)
        self._state = [[0.0, 0.0] for _ in range(nq)]
        self._out = [[] for _ in range(nq)]
        self._stats = {"work": 0.0, "outputs": 0, "evaluated": 0, "tuples_in": 0}

    def tick(self, batch, allowance) -> None:
        m = batch.stream == self.stream
        share = np.asarray(allowance, np.float64) / max(1, len(self.queries))
        if not m.any():
            for st in self._state:
                st[0] += float(share.sum())
            return
        # allowance of non-stream arrivals still advances the clock: fold it
        # into the preceding stream arrival's allowance
        idx, lead, per = fold_allowance(m, share)
        vals = getattr(batch, self.queries[0].attr)[idx] if self.queries else None
        rids = batch.seq[idx]
        self._stats["tuples_in"] += idx.shape[0]
        for q, st, out in zip(self.queries, self._state, self._out):
            st[0] += lead
            keep = _processed_mask(per, COSTS["compare"], st, self.max_backlog / max(1, len(self.queries)))
            n = int(keep.sum())
            self._stats["evaluated"] += n
            self._stats["work"] += n * COSTS["compare"]
            v = vals[keep]
            hit = (v >= q.lo) & (v <= q.hi)
            if hit.any():
                out.append(rids[keep][hit])
                self._stats["outputs"] += int(hit.sum())

    def finish(self) -> None:
        pass

    def results(self) -> list:
        return [np.concatenate(o) if o else np.zeros(0, np.int64) for o in self._out]

    def stats(self) -> dict:
        return dict(self._stats)


class PerQueryAggregate:
    """Per-query windowed aggregation with the same drops as SIMPLE-Selection.

    Every query sees the stream separately with ``budget / num_queries``
    (``compare`` per evaluated tuple) and keeps the qualifying tuples it
    evaluated.  At ``now`` with ``p`` = (evaluated arrivals in the window) /
    (arrivals in the window): ``AVG`` / ``MEDIAN`` of the kept values,
    ``SUM = kept sum / p``, ``COUNT = kept count / p`` (Horvitz-Thompson
    scaling by the query's processed share).

    >>> import numpy as np
    >>> from sketchql.data import generate_stores, interleave
    >>> from sketchql.approx import WorkBudget, replay
    >>> arr = interleave(generate_stores(1, duration=30.0, seed=2))
    >>> op = PerQueryAggregate([(1, 300)], func="count", window=10.0)
    >>> _ = replay(arr, {"b": op}, WorkBudget.unlimited())
    >>> int(op.answer(0)) == int(((arr.item <= 300) & (arr.ts > arr.ts[-1] - 10.0)).sum())
    True
    """

    def __init__(self, queries, func: str = "avg", attr: str = "item", value_attr: str = "price",
                 stream: int = 0, window: float = 60.0, max_backlog: float = 0.0, name: str | None = None):
        func = str(func).lower()
        if func not in ("avg", "sum", "count", "median"):
            raise SketchQLError(f"PerQueryAggregate: func must be avg|sum|count|median, got {func!r}")
        self.queries = as_queries(queries, attr)
        self.func = func
        self.attr = attr
        self.value_attr = value_attr
        self.stream = int(stream)
        self.window = float(window)
        self.max_backlog = float(max_backlog)
        self.name = name or f"per_query_{func}"
        nq = len(self.queries)
        self._state = [[0.0, 0.0] for _ in range(nq)]
        self._kept = [[] for _ in range(nq)]      # (ts, value) chunks of kept qualifying tuples
        self._proc = [[] for _ in range(nq)]      # ts chunks of evaluated arrivals
        self._arr_ts = []
        self.now = -math.inf
        self._stats = {"work": 0.0, "evaluated": 0, "tuples_in": 0}

    def tick(self, batch, allowance) -> None:
        m = batch.stream == self.stream
        share = np.asarray(allowance, np.float64) / max(1, len(self.queries))
        if len(batch):
            self.now = max(self.now, float(batch.ts[-1]))
        if not m.any():
            for st in self._state:
                st[0] += float(share.sum())
            return
        idx, lead, per = fold_allowance(m, share)
        keys = getattr(batch, self.attr)[idx]
        vals = getattr(batch, self.value_attr)[idx]
        ts = batch.ts[idx]
        self._arr_ts.append(ts)
        self._stats["tuples_in"] += idx.shape[0]
        for qi, (q, st) in enumerate(zip(self.queries, self._state)):
            st[0] += lead
            keep = _processed_mask(per, COSTS["compare"], st, self.max_backlog / max(1, len(self.queries)))
            n = int(keep.sum())
            self._stats["evaluated"] += n
            self._stats["work"] += n * COSTS["compare"]
            self._proc[qi].append(ts[keep])
            hit = keep & (keys >= q.lo) & (keys <= q.hi)
            if hit.any():
                self._kept[qi].append((ts[hit], vals[hit]))

    def finish(self) -> None:
        pass

    def _trim(self, lst, lo_t):
        if len(lst) > 64:
            merged = [np.concatenate(lst)]
            lst[:] = [merged[0][merged[0] > lo_t]]

    def answer(self, qi: int, now: float | None = None) -> float:
        now = self.now if now is None else float(now)
        lo_t = now - self.window
        arr_ts = np.concatenate(self._arr_ts) if self._arr_ts else np.zeros(0)
        n_arr = int(((arr_ts > lo_t) & (arr_ts <= now)).sum())
        pr = np.concatenate(self._proc[qi]) if self._proc[qi] else np.zeros(0)
        n_proc = int(((pr > lo_t) & (pr <= now)).sum())
        kept = self._kept[qi]
        if kept:
            kt = np.concatenate([k[0] for k in kept]); kv = np.concatenate([k[1] for k in kept])
            sel = (kt > lo_t) & (kt <= now)
            v = kv[sel]
        else:
            v = np.zeros(0)
        p = n_proc / n_arr if n_arr else 1.0
        if self.func == "count":
            return v.shape[0] / p if p > 0 else 0.0
        if self.func == "sum":
            return float(v.sum()) / p if p > 0 else 0.0
        if not v.shape[0]:
            return float("nan")
        return float(v.mean()) if self.func == "avg" else float(np.median(v))

    def answers(self, now: float | None = None) -> np.ndarray:
        return np.array([self.answer(qi, now) for qi in range(len(self.queries))])

    def stats(self) -> dict:
        return dict(self._stats)
