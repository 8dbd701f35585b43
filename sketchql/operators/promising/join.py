"""PT-Join: the promising-tuple window join (paper Figure 7, JOIN-PROBE).

For every arrival ``x1`` of stream S1 (symmetrically S2):

1. ``S1.Summarize(x1)``: the tuple is ingested into S1's region index;
2. for every granularity ``G_i`` of S2 intersecting ``(x1.ts - w, x1.ts]``
   and every zone of it, the estimate of ``x1``'s join value in the zone's
   cell is read from the zone summary (count sketch); entries with estimate
   >= ``min_estimate`` are pushed as ``(x1, cell, priority)`` with
   ``priority = estimate * alpha^(i-1)`` (fade factor alpha);
3. the queue is probed in the preference's order (``desc``/``asc``/
   ``weighted``, see :mod:`.queue`) until the budget of the arrivals runs
   out; whatever budget later arrivals leave unused revisits the queue
   ("when idle").  A probe scans one cell and verifies the key equality and
   the window condition on the real tuples, so every output pair is an exact
   join result; pairs are emitted possibly out of timestamp order and carry
   both timestamps.

Pair semantics (same as the oracle :func:`sketchql.data.window_match_counts`):
``x`` (stream a) and ``y`` (stream b) join iff ``x.key == y.key`` and
``|x.ts - y.ts| < w``; the pair is found by the *later* arrival's entry (rid
order), so every pair can be produced at most once -- no duplicates.  A
pair is a result of the window join at time ``t`` while both members are in
the window (``min(x.ts, y.ts) > t - w``).  An entry probed during a tick whose
arrivals start at ``t0`` is discarded unprocessed (and uncharged) if its
probe tuple left the window before the tick (``x.ts <= t0 - w``) or if its
cell holds nothing newer than ``t0 - w`` (every partner there has expired);
otherwise the cell scan keeps only partners with ``y.ts > max(x.ts - w,
t0 - w)`` -- a pair that had expired before the tick in which it is found is
not produced (with an ample budget every pair is found in its own tick).

Aging (``aging``, see :mod:`.queue`): the priority of a queued entry decays
with its age, ``p * exp(-lambda (now - t_enqueue))`` (asc: grows, so old
entries come later), ordered lazily through the key ``log p + lambda t``.
Default ``lambda = -ln(alpha) / T1`` (fade factor alpha, T1 the first
granularity's length): an entry loses a factor alpha per T1 seconds of age,
the rate at which regions fade across granularities.  desc ages faster, by
alpha per ``DESC_AGING_SPAN`` (0.25 s; T1 if shorter): an entry's *cost* grows
with its age.  Its cell in the current zone keeps receiving the other
stream's newer tuples, which the bounded scan must cut off (a galloping
search from the cell's end, ~``2 log2(k + 1) + 1`` compares for ``k`` newer
tuples) while its yield -- the partners that arrived before it -- does not
grow; among entries of comparable estimates the fresh one buys more output
per unit.  Measured (``bench_promising --quick``, desc output / the
Figure 11 bound at 10 / 20 / 50 ms, compares without output in % of the
budget at 10 / 20 ms): alpha per T1 = 10 s: 94.1 / 94.0 / 96.3 %, waste
2.47 / 3.18 % (260 of 881 cells at 10 ms cut on average 17.6 newer tuples);
per 1 s: 95.9 / 96.5 / 96.6 %, waste 0.66 / 0.88 %; per 0.25 s (the
default; about the replay's tick): 96.2 / 96.9 / 96.6 %, waste 0.36 / 0.61
%; SIMPLE-SHJ 96.5 / 97.0 / 97.2 %.  Pairs are also found sooner (mean lag
from completion to discovery at 10 ms: 1.4 s -> 0.05 s).  Within a span the
estimates still decide (heavy and light values' estimates differ by 10-100x).
weighted is not aged by default (its goal is a near-uniform sample of the window's output; aging would
bias it to the newest pairs); ``aging=<lambda>`` ages every preference,
``aging=False`` or ``0`` turns it off.

Work units (``sketchql.approx.UNIT_COSTS``, the same prices SIMPLE-SHJ pays):
``insert`` per ingested tuple, ``node`` per (probe, zone) summary estimate,
``probe`` per cell opened and ``compare`` per stored tuple of the cell.  On a
wall-clock budget (``set_wall_clock(True)``, done by ``replay`` for
``TimeBudget(wall_clock=True)``) the account is in seconds and is charged the
real time spent (``time.perf_counter``) in ingest + planning and per probe
batch; the work units are still counted in ``stats()``.  A round of ingest +
planning has a fixed real cost per call, so on a wall clock arrivals wait
until the account covers two rounds (or they span ``wall_defer`` seconds),
see :meth:`PTJoin._defer`.

Direct rounds (wall clock, desc, ``wall_direct``): under overload a planned
round's fixed real cost (the pyramid descent of every arrival over the index
view, the queue) can exceed the whole CPU share, and nothing is ever probed.
Unless the account covers ``wall_rounds`` planned rounds at their measured
cost, desc runs a direct round instead (:meth:`PTJoin._tick_direct`): it
ingests the heaviest join values the account can probe (:mod:`.valueheat`),
then probes each kept arrival over its whole window, heaviest first, and a
round the account cannot pay sheds its batch.  The first round is direct.
With a private index (``wall_hash``, the default) desc's wall-clock rounds
are all direct and keep no index: the index's upkeep (0.3-0.6 ms of real
time per ingest call) is what an overloaded share cannot pay, so the
window's arrivals go to a per-value hash (:mod:`.valuehash`) and each round
probes them heaviest first by their exact number of stored partners
(:meth:`PTJoin._tick_hash`: one compiled pass per round, 40-80 us in the
bench at 100 ms, up to ~0.28 ms with a 6,000-row window; a round carries the
heaviest arrivals it cannot pay for to the next).  An index shared with the
engine is kept up anyway: there desc keeps the index's direct rounds.
A :class:`PTJoinGroup` plans every query (its members run no direct rounds).

Everything is charged: besides inserts, estimates, probes and compares, a
``node`` for every entry dropped without a scan (expired probe tuple or
cell) and for every sweep's zone list (``lookup_work``).  What a tick may
start -- the share of arrivals ingested, the arrivals planned -- is decided
by :mod:`.admission` so that a small budget still buys output; a batch that
spans more than the index keeps beyond the window is processed in time
chunks (edge pairs would otherwise be expired before they are planned).

Probing is batched (:meth:`PTJoin.drain`): the next k entries are popped in
priority order, the expired ones dropped vectorized, the prefix whose cost
(the cells' current sizes) fits the account kept (the rest goes back), every
(value, cell, window) row of the batch scanned in one ``scan_many`` call per
source and the pairs deduplicated and emitted at once.  The real cost is
charged after the batch; an entry that alone costs more than the account
is still started (skipping it would bias the preference's order), and
planning can overrun its measured mean: that overrun is carried as debt
into the next tick (``stats()["debt_max"]``, bounded by ``max_forced`` and
``max_plan_overrun``, see :mod:`.admission`).  ``probe_batch=1`` keeps the per-entry loop (reference
path, which starts an entry whenever the account is positive).

A sweep skips the cells queued for its probe.  A queued cell whose zone
COLLAPSE has since merged resolves into a live cell the sweep would scan
whole, meeting again every pair the queued entry found (deduplicated, but
paid): the sweep scans only the time ranges of the merged cell outside the
queued cell's own part (:func:`_sweep_rest`).  Full bench at 70 ms: pairs met
twice 10,603 -> 456 (28,447 compares, 7.9 % of the budget, were spent on the
merged parts); the output was unchanged there (93.9 % of the bound, 14.6 %
of the budget unspent either way): what limited it was the 696 arrivals
demand shedding dropped with kappa = 2 (96.5 % with kappa = 2.5, see
:mod:`.admission`).  The serial path keeps the cell-id exclusion.

The batched probes scan with the sources' expiry cursors (``scan_many(...,
cursor=True)``, :mod:`sketchql.index.cellscan`): the search for a window's
start gallops on from where the previous scan of the cell left it instead
of from the cell's start, so the tuples that left the window are passed
once.  Full bench, desc output / bound at 10..100 ms: 96.5 / 97.5 / 97.5 /
97.0 / 95.2 / 91.7 / 96.5 / 99.6 / 99.9 / 100.0 -> 96.5 / 97.5 / 97.6 /
97.3 / 96.0 / 93.1 / 97.7 / 99.7 / 99.9 / 100.0 %; 60 ms: compares without
output 4.58 -> 3.22 % of the budget, 16.5k -> 11.6k (window-start
searches ~9.7k -> 4.7k; what is left: cutting the newer tuples at the
window's end, 4.2k, and the bucket's other values, 2.6k); 11.8 % of the
budget still unspent (ticks whose queue is empty after demand shedding).
Then the run's end is read on from its start instead of searched from the
cell's end (:mod:`sketchql.index.cellscan`), and a merged zone's handle keeps
a cursor of its own (``IndexSource._cursor_groups``): 96.61 / 97.52 / 97.63 /
97.34 / 96.47 / 94.01 / 97.81 / 99.66 / 99.90 / 99.98 %; 60 ms: compares
without output 11.6k -> 8.1k.

>>> import numpy as np
>>> from sketchql.data import generate_stores, interleave, exact_join_pairs
>>> from sketchql.approx import WorkBudget, replay
>>> arr = interleave(generate_stores(2, duration=20.0, n_items=50, seed=4))
>>> op = replay(arr, {"pt": PTJoin(window=5.0)}, WorkBudget.unlimited())["pt"]
>>> a, b = op.pairs()
>>> ea, eb = exact_join_pairs(arr, 5.0)
>>> bool(np.array_equal(np.sort(a * len(arr) + b), np.sort(ea * len(arr) + eb)))
True
"""
from __future__ import annotations

import math
import time

import numpy as np

from ...errors import SketchQLError
from ...summaries.hashing import hash64
from .costs import COSTS
from .output import PairOutput
from .pairset import PairSet
from .admission import (_Columns as _cols_batch, admission_hash, cap_rows, chunk_span, concat_batches,
                        demand_fraction, ingest_cap, ingest_fraction, keep_mask, plan_count, plan_rows, retained_history, time_chunks, BatchTimer)
from .queue import EntryQueue, check_preference
from .sources import make_source
from .valueheat import ValueHeat
from . import valuehash
from .valuehash import ValueHash

_FIELDS = ("rid", "ts", "val", "side", "cell", "gran", "kind", "size")
#: most entries popped per batch, and the first wall-clock batch (before calibration)
_MAX_BATCH, _FIRST_WALL_BATCH = 4096, 8
_ROW_BITS = 20   # (batch row, cell) pairs are packed as cell << 20 | row (rows < 2^20)
#: wall clock: a planned round's cost in direct rounds, until one was measured (PTJoin._use_direct)
_PLAN_VS_DIRECT = 4.0
#: desc's default aging: an entry loses a factor alpha per this many seconds of age (module doc, "Aging")
DESC_AGING_SPAN = 0.25


class PTJoin(PairOutput):
    """Promising-tuple symmetric window join of two streams (module doc).

    Parameters
    ----------
    window : seconds (``math.inf`` = whole stream seen so far).
    preference : ``"desc" | "asc" | "weighted"``.
    fade : fade factor alpha in (0, 1].
    streams : the two stream numbers (``Arrivals.stream``) joined: (a, b).
    key : the join column of :class:`~sketchql.data.Arrivals` (default item).
    seed : seeds the weighted draw (deterministic).
    source : ``"index"`` (a :class:`sketchql.index.StreamIndex` per stream,
        default), ``"mini"`` (private fixed-zone index), a StreamIndex, or a
        pair of them (one per stream, e.g. the engine's declared summaries).
    source_options : keyword arguments of the source (IndexSource:
        granularity, rate, depth, config; MiniSource: zone_seconds, n_buckets,
        t1, rate, depth, min_estimate).
    outlier_quantile : asc only -- the preferred answer set is the values
        whose estimated count is in this lowest quantile.
    weight : the query's CPU weight when several queries share the CPU.
    aging : ``None`` (default: ``-ln(fade) / T1`` for desc and asc, off for
        weighted), ``False``/``0`` (off) or lambda in 1/seconds (module doc).
    probe_batch : ``"auto"`` (default: batched probing, see :meth:`drain`) or
        ``1`` (the reference path: one queue entry per Python iteration).
    stratify : weighted only -- draw the sampling keys stratified per (join
        value, granularity) (default ``True``; see
        :meth:`EntryQueue._stratified_exponential`) rather than independently.
    demand_shed : desc only -- cap the share of arrivals ingested by the
        probe work they queue (:func:`.admission.demand_fraction`: no inserts
        for entries the budget can never probe), keeping the heaviest join
        values (:mod:`.valueheat`; a sample of 1/64 of the arrivals is
        counted, one ``insert`` each).  Off by default: an index
        shared with the engine holds every tuple anyway, and a query's answer
        must not depend on whether its index is shared; asc (rare values) and
        weighted (a uniform sample of the pairs) need every value's tuples.
    """

    def __init__(self, window: float = 60.0, preference: str = "desc", fade: float = 0.8,
                 streams=(0, 1), key: str = "item", seed: int = 0, source="index",
                 source_options: dict | None = None, outlier_quantile: float = 0.05,
                 weight: float = 1.0, name: str = "pt_join", aging=None, probe_batch="auto",
                 stratify: bool = True, demand_shed: bool = False):
        if not (window > 0):
            raise SketchQLError(f"PTJoin: window must be > 0 seconds, got {window!r}")
        if not (0 < fade <= 1):
            raise SketchQLError(f"PTJoin: FADE FACTOR must be in (0, 1], got {fade!r}")
        if len(streams) != 2 or streams[0] == streams[1]:
            raise SketchQLError(f"PTJoin: need two distinct streams, got {streams!r}")
        if not (weight > 0):
            raise SketchQLError(f"PTJoin: query weight must be > 0, got {weight!r}")
        self.window = float(window)
        self.preference = check_preference(preference)
        self.fade = float(fade)
        self.streams = tuple(int(s) for s in streams)
        self.key = key
        self.name = name
        self.weight = float(weight)
        self.outlier_quantile = float(outlier_quantile)
        self.stratify = bool(stratify)
        self.seed = int(seed)
        if self.preference == "desc" and source == "index" and not (source_options or {}).get("config"):
            # desc's private index: G1 zones as long as the period and 1024 value buckets of
            # 16-counter sketches (IndexSource: whole_g1_zones, n_buckets, w)
            source_options = {"whole_g1_zones": True, "n_buckets": 1024, "w": 16, **(source_options or {})}
        if isinstance(source, (list, tuple)):
            self.sources = [make_source(s, self.window, seed, source_options) for s in source]
        else:
            self.sources = [make_source(source, self.window, seed, source_options) for _ in range(2)]
        self._dedup = PairSet() if any(s.may_repeat for s in self.sources) else None
        if not (probe_batch == "auto" or (isinstance(probe_batch, int) and probe_batch >= 1)):
            raise SketchQLError(f"PTJoin: probe_batch must be 'auto' or an integer >= 1, got {probe_batch!r}")
        self.probe_batch = probe_batch
        self._sec_per_unit = None   # wall clock: measured seconds per estimated work unit
        self._timer = BatchTimer()  # wall clock: probe batch seconds = c0 + c1 * units
        self._mean_cost = 16.0      # recent mean estimated units per entry (batch sizing)
        self._plan_cost = 1.0       # recent mean units of planning per arrival (admission)
        self._demand = None         # recent mean estimated probe units queued per planned arrival
        self._scan_ratio = (0.0, 0.0)   # decayed (units charged, units estimated) of the probe batches
        if demand_shed and self.preference != "desc":
            raise SketchQLError(f"PTJoin: demand_shed is for desc only, got preference {self.preference!r}")
        self.demand_shed = bool(demand_shed)
        # desc's demand shedding keeps the heaviest join values (.valueheat)
        self._heat = ValueHeat(seed, half_life=(self.window / 2 if math.isfinite(self.window) else 30.0)) \
            if self.demand_shed else None
        self.demand_margin = 2.5    # kappa of admission.demand_fraction (planned rounds)
        self.direct_margin = 2.0    # kappa of the wall clock's direct rounds (_tick_direct, as measured there)
        self._sec_insert = None     # wall clock: measured seconds per ingested tuple
        self._starved = False       # arrivals went unplanned for lack of budget: keep the account
        self._pend = []             # wall clock: arrivals waiting for a round (see _defer)
        self._hpend = []            # wall clock, hash rounds: arrival batches waiting (see _defer_hash)
        self._backlog = {"side": [], "ts": [], "seq": [], "val": []}   # arrivals not planned yet
        self._sec_round = None      # wall clock: measured seconds of a round's ingest + planning
        self._sec_direct = None     # wall clock: measured seconds of a direct round's fixed part (_tick_direct)
        self._sec_prior = None      # wall clock, hash rounds: a scratch round's seconds (set_wall_clock)
        self.wall_direct = True     # wall clock, desc: direct rounds when planning cannot pay (_use_direct)
        self.wall_hash = True       # wall clock, desc, private index: direct rounds on a value hash (_tick_hash)
        self._vhash = None          # hash rounds: the kept arrivals (.valuehash)
        self.wall_rounds_direct = 4.0   # wall clock: a direct round waits until the account covers this many
        self.wall_rounds_hash = 16.0    # wall clock: the same for a hash round (_defer_hash)
        self._dheat = None          # direct rounds' value heat when desc does not shed by demand
        self.wall_defer = None      # wall clock: most event-time seconds arrivals may wait (None: auto)
        self.wall_rounds = 2.0      # wall clock: a round waits until the account covers this many rounds
        self.aging = self._aging_rate(aging)
        self.queue = EntryQueue(self.preference, seed=seed, fields=_FIELDS, aging=self.aging)
        self.account = 0.0
        self.wall = False
        self.now = -math.inf
        self._t0 = -math.inf   # first timestamp of the current tick's batch
        self._out = self._new_pair_log()
        self._ticks = 0
        self._asc_hist = ([], [])  # (counts, weights) of recent probes, for the outlier threshold
        self._covered: dict = {}   # sweep entry id -> cells already queued (probe_batch=1 path)
        self._cov = ([], [])       # (sweep entry ids ascending, cell) already queued (batched path)
        self._cov_arr = None
        self._asc_thr = math.inf
        self._stats = {"work": 0.0, "insert_work": 0.0, "node_work": 0.0, "probes": 0, "compares": 0,
                       "outputs": 0, "entries": 0, "discarded": 0, "tuples_in": 0, "duplicates_skipped": 0, "sweeps": 0,
                       "discarded_partners_expired": 0, "batches": 0, "max_batch_work": 0.0,
                       "allowance": 0.0, "debt_max": 0.0, "shed": 0, "unplanned": 0, "lookup_work": 0.0,
                       "max_forced": 0.0, "max_plan_overrun": 0.0, "deferred_ticks": 0,
                       "backlog_planned": 0, "unplanned_expired": 0,
                       "rounds": 0, "round_seconds": 0.0, "probe_seconds": 0.0,
                       "direct_rounds": 0, "direct_probed": 0, "direct_unprobed": 0,
                       "shed_seconds": 0.0, "overhead_seconds": 0.0}

    def _aging_rate(self, aging) -> float:
        if aging is None:
            if self.preference == "weighted" or self.fade >= 1.0:
                return 0.0
            t1 = min(float(getattr(s, "t1", math.inf)) for s in self.sources)
            if self.preference == "desc":   # fresh entries are cheaper to probe (module doc, "Aging")
                t1 = min(t1, DESC_AGING_SPAN)
            return -math.log(self.fade) / t1 if math.isfinite(t1) and t1 > 0 else 0.0
        if aging is False:
            return 0.0
        lam = float(aging)
        if not (lam >= 0 and math.isfinite(lam)):
            raise SketchQLError(f"PTJoin: aging must be None, False or a finite lambda >= 0 (1/s), got {aging!r}")
        return lam

    # ------------------------------------------------------------------ driver
    def set_wall_clock(self, on: bool = True) -> None:
        """Charge real seconds instead of work units (module doc)."""
        self.wall = bool(on)
        if self.wall and self.preference == "desc" and self.wall_direct and self._hash_rounds():
            valuehash.warm()   # the hash rounds' kernel is loaded now, not in a timed round
            if self._sec_prior is None:
                # a prior for the round's fixed cost, measured on a scratch round: the first real
                # round's time then passes the 3x clip of _note_round (a first round measured at
                # 4.3 ms under load, ~40x its later cost, made a 7 ms share shed every batch)
                self._sec_prior = valuehash.scratch_round_seconds(self.window)

    def tick(self, batch, allowance) -> None:
        """Ingest a batch of arrivals, queue their promising regions, then
        probe the queue with the batch's budget (``allowance`` per arrival).
        What may be started is decided by :mod:`.admission` (ingest share,
        arrivals planned); a batch spanning more than the index keeps beyond
        the window is processed in time chunks (:func:`.admission.time_chunks`)."""
        if not self.wall:
            return self._tick(batch, allowance)
        # wall clock: the whole call is real time spent -- what the rounds and probe batches do not
        # charge themselves (waiting bookkeeping, joining the waiting batches, time chunks) is charged
        # here (stats()["overhead_seconds"]): at 100 ms it was ~10 us per waiting tick, as much in all
        # as the whole CPU share
        st = self._stats
        t_in = time.perf_counter()
        inner = st["round_seconds"] + st["probe_seconds"] + st["shed_seconds"]
        try:
            self._tick(batch, allowance)
        finally:
            over = time.perf_counter() - t_in - (st["round_seconds"] + st["probe_seconds"] + st["shed_seconds"]
                                                 - inner)
            if over > 0:
                self.account -= over
                st["overhead_seconds"] += over
                self._note_debt()

    def _tick(self, batch, allowance) -> None:
        n = len(batch)
        if not (type(allowance) is np.ndarray and allowance.dtype == np.float64 and allowance.shape == (n,)):
            allowance = np.broadcast_to(np.asarray(allowance, np.float64), (n,))
        if n == 0:
            self._credit(float(np.sum(allowance)))
            return
        if self.wall:
            if self.wall_direct and self.preference == "desc" and self._hash_rounds():
                return self._defer_hash(batch, allowance)
            batch, allowance = self._defer(batch, allowance)
            if batch is None:
                return
        for a, b in time_chunks(batch.ts, self._chunk_span()):
            part = batch if (a == 0 and b == len(batch)) else batch.take(np.arange(a, b))
            self._tick_one(part, allowance[a:b], credit=not self.wall)

    def _chunk_span(self) -> float:
        """:func:`.admission.chunk_span` of the sources (fixed once they are: cached)."""
        c = self.__dict__.get("_chunk")
        if c is None or c[0] is not self.sources:
            c = self._chunk = (self.sources, chunk_span(self.sources, self.window))
        return c[1]

    def _defer(self, batch, allowance):
        """Wall clock: a round (ingest + planning) has a fixed real cost of its
        own (Python and numpy calls, ~ms) whatever the batch size.  When the
        account (seconds) does not cover twice the measured cost of a round,
        the arrivals wait -- their allowance is credited now -- and are
        processed together once it does, or once they span ``wall_defer``
        seconds of event time (latency bound; default a tenth of the window,
        at most 5 s).  Returns the batch to process now (or None) and its
        allowance (already credited)."""
        self._credit(float(allowance.sum()) if allowance.shape[0] > 32 else sum(allowance.tolist()))
        ts = batch.ts
        if not self._pend:
            self._pend_t0 = float(ts[0])
        self._pend.append((batch, allowance))
        span = float(ts[-1]) - self._pend_t0
        if span < self._defer_limit() and self._round_waits():
            self._stats["deferred_ticks"] += 1
            return None, None
        parts, self._pend = _release(self._pend, span, self._chunk_span())
        if self._pend:
            self._pend_t0 = float(self._pend[0][0].ts[0])
        return _join_parts(parts)

    def _defer_hash(self, batch, allowance) -> None:
        """Wall clock, hash rounds: :meth:`_defer`'s waiting (credit now, wait while
        the account does not cover ``wall_rounds_hash`` rounds, at most
        :meth:`_defer_limit` seconds of event time), keeping only the columns a
        hash round reads: joining the waiting batches' every column cost ~45 us
        per round, as much as the round itself.  A hash round keeps no index, so
        the batch is not cut in time chunks either.  ``wall_rounds_hash`` is 16
        (the index's direct rounds: 4): a hash round's fixed part is a merge of
        the whole window's store (~0.1-0.28 ms at the end of the bench's 10 ms
        stream, ~6,000 rows), whatever its arrivals, so fewer, larger rounds
        leave more of the account to probing (bench stream, 10 ms, CPU-time
        clock, 3 runs: desc 100 / 99.3 / 92.0 % with 4, 100 / 100 / 99.9 % with
        8, 100 / 100 / 100 % with 16; rounds 85-95 -> 28-32)."""
        self._credit(float(allowance.sum()) if allowance.shape[0] > 32 else sum(allowance.tolist()))
        ts = batch.ts
        pend = self._hpend
        if not pend:
            self._pend_t0 = float(ts[0])
            if self.__dict__.get("_t_first") is None:
                self._t_first = self._pend_t0
        pend.append(batch)
        if float(ts[-1]) - self._pend_t0 < self._defer_limit() and self._sec_direct is not None \
                and self.account < self.wall_rounds_hash * self._sec_direct:
            self._stats["deferred_ticks"] += 1
            return
        self._hash_release()

    def _span_income(self) -> float:
        """Wall clock, hash rounds: the account's income over one latency span
        (:meth:`_defer_limit` seconds of event time at the mean income so far)."""
        t0 = self.__dict__.get("_t_first")
        span = self.now - t0 if t0 is not None else 0.0
        return self._stats["allowance"] / span * self._defer_limit() if span > 0 else 0.0

    def _hash_release(self) -> None:
        """Run a hash round on the arrivals waiting (:meth:`_defer_hash`).  Joining
        them is part of the round's fixed part: charged (``round_seconds``) before
        the round may find everything probed and drop the unspent account
        (:meth:`_idle`) -- charged after it (as the tick's overhead) it fell on
        the next arrivals' income, and a round just before the stream's end left
        the last arrivals ~20-40 us short of their own round (bench, 50 ms: 26
        arrivals, 20 of them never probed, desc 97.0 %)."""
        pend, self._hpend = self._hpend, []
        if len(pend) == 1:
            batch = pend[0]
        else:
            t = time.perf_counter()
            batch = _cols_batch({k: np.concatenate([getattr(b, k) for b in pend])
                                 for k in (self.key, "stream", "seq", "ts")})
            dt = time.perf_counter() - t
            self.account -= dt
            self._stats["round_seconds"] += dt
        self._tick_hash(batch, 0.0)

    def _defer_limit(self) -> float:
        """Most event-time seconds arrivals wait for a round (:meth:`_defer`):
        ``wall_defer`` (default a tenth of the window, at most 5 s), and never
        more than one time chunk (a longer wait would cost several rounds)."""
        c = self.__dict__.get("_dlim")
        if c is None or c[0] is not self.sources or c[1] != self.wall_defer:
            limit = self.wall_defer if self.wall_defer is not None else (
                min(5.0, 0.1 * self.window) if math.isfinite(self.window) else 5.0)
            c = self._dlim = (self.sources, self.wall_defer, min(limit, self._chunk_span()))
        return c[2]

    def _round_waits(self) -> bool:
        """The next round (direct or planned, :meth:`_use_direct`) costs, as
        measured, more than the account can cover ``wall_rounds`` times
        (``wall_rounds_direct`` for a direct round: 4, so that about 3/4 of the
        account goes to probing rather than to the rounds' fixed part)."""
        if self._use_direct():
            return self._sec_direct is not None and self.account < self.wall_rounds_direct * self._sec_direct
        c = self._sec_round
        if c is None and self._sec_direct is not None and self.wall_direct and self.preference == "desc":
            c = _PLAN_VS_DIRECT * self._sec_direct   # a planned round not measured yet (_use_direct)
        return c is not None and self.account < self.wall_rounds * c

    def _use_direct(self) -> bool:
        """Wall clock, desc: the next round is a direct one (:meth:`_tick_direct`)
        unless the account covers ``wall_rounds`` planned rounds at their measured
        cost.  Before a planned round was measured its cost is taken as
        ``_PLAN_VS_DIRECT`` direct rounds (measured 6-8x in the bench's overload
        regime); the very first round is direct (cheap, and it calibrates)."""
        if not (self.wall and self.wall_direct and self.preference == "desc"):
            return False
        if self._hash_rounds():
            return True
        c = self._sec_round
        if c is None:
            if self._sec_direct is None:
                return True
            c = _PLAN_VS_DIRECT * self._sec_direct
        return self.account < self.wall_rounds * c

    def _note_round(self, seconds: float, direct: bool = False) -> None:
        if direct:
            # a round measured over 3x the estimate is clipped to 3x: real time on a shared machine has
            # one-sided spikes (preemption, a page fault), and one unclipped 5 ms spike in a share of
            # ~2 ms made every later round wait or shed (a real change still passes, 3x per round)
            c = self._sec_direct if self._sec_direct is not None else self._sec_prior
            self._sec_direct = seconds if c is None else 0.8 * c + 0.2 * min(seconds, 3.0 * c)
            self._stats["direct_rounds"] += 1
        else:
            self._sec_round = seconds if self._sec_round is None else 0.8 * self._sec_round + 0.2 * seconds
        self._stats["round_seconds"] += seconds
        self._stats["rounds"] += 1

    def finish(self) -> None:
        """Process the arrivals still waiting (wall clock, see :meth:`_defer`)."""
        if self._hpend:
            self._hash_release()
        if self._pend:
            parts, self._pend = self._pend, []
            batch, allowance = _join_parts(parts)
            for a, b in time_chunks(batch.ts, chunk_span(self.sources, self.window)):
                part = batch if (a == 0 and b == len(batch)) else batch.take(np.arange(a, b))
                self._tick_one(part, allowance[a:b], credit=False)

    def _tick_one(self, batch, allowance, credit: bool = True) -> None:
        income = float(np.sum(allowance))
        if credit:
            self._credit(income)
        if self._use_direct():
            if self._hash_rounds():
                self._tick_hash(batch, income)
            else:
                self._tick_direct(batch, income)
            return
        clock = time.perf_counter
        t = t0 = clock() if self.wall else 0.0
        keep = self.admit_ingest(batch, income)
        sides = self.ingest(batch, keep)
        self.charge_ingest(sides)
        if self.wall:
            t2 = clock()
            self._calibrate_ingest(t2 - t, sum(r.shape[0] for _, r in sides))
            self.account -= t2 - t
            t = t2
        self.plan(batch, self.admit_plan(batch, sides))
        if self.wall:
            t2 = clock()
            self.account -= t2 - t
            self._note_round(t2 - t0)
        self.drain()
        self._note_debt()

    def _tick_direct(self, batch, income: float) -> None:
        """Wall clock, desc: a direct round (module doc, "Direct rounds").

        A planned round's real cost is mostly fixed per call (the pyramid
        descent of every arrival over the index view, the queue and its run
        heap); under overload it exceeds the whole CPU share and nothing is
        ever probed.  A direct round skips the planning: it ingests the
        arrivals of the heaviest values (:mod:`.valueheat`) whose probes the
        account can pay once the round's measured fixed part is paid, with
        desc's demand margin (:func:`.admission.demand_fraction`; shed
        arrivals are neither ingested nor probed), then probes them in the
        preference's order -- the heaviest values first by the value heat
        (``ValueHeat.counts`` of the value's slot: its sampled arrivals over
        about a window, both streams), rid order within a value -- each
        arrival scanning every cell of its bucket in the zones overlapping its
        window (``rest_cells_many`` + one ``scan_many`` per batch), so its
        pairs are all found at once and an arrival is probed at most once
        (no dedup needed: live zones are disjoint).  The probe batches are
        sized like :meth:`_drain_queue`'s (``BatchTimer``) and what the
        account cannot cover is dropped unprobed (``direct_unprobed``; the
        arrivals stay in the index as partners).  A round that finds the
        account below its own measured fixed cost sheds the whole batch
        (neither ingested nor probed, like SIMPLE-SHJ's drops), so the time
        charged stays within the allowance plus one round.  Everything is
        charged: the real seconds, and in ``stats()`` the units (inserts, the
        heat's sample, one ``node`` per probed arrival's zone list, probes,
        compares)."""
        clock = time.perf_counter
        t0 = clock()
        st = self._stats
        if self._sec_direct is not None and self.account < self._sec_direct:
            st["shed"] += len(batch)
            self.now = max(self.now, float(batch.ts[-1]))
            # the estimate decays while no round runs: one costly round (a kernel loaded on first use,
            # a pause) must not shed every later batch; the next round that runs measures it again
            self._sec_direct *= 0.8
            dt = clock() - t0
            self.account -= dt
            st["shed_seconds"] += dt
            self._note_debt()
            return
        keys = getattr(batch, self.key)
        heat = self._heat
        if heat is None:   # desc without demand shedding: a heat of its own
            if self._dheat is None:
                self._dheat = ValueHeat(self.seed, half_life=(self.window / 2 if math.isfinite(self.window)
                                                              else 30.0))
            heat = self._dheat
        self._charge(COSTS["insert"] * heat.observe(keys, batch.seq, float(batch.ts[-1])), "insert_work")
        # the heaviest values whose probes the account can pay once this round's fixed part is paid,
        # with desc's demand margin (admission.demand_fraction; units at the measured seconds per unit)
        f = 1.0
        c1 = self._timer.fit()[1] if self._timer.n >= 3 else self._sec_per_unit
        if self._demand is not None and c1:
            avail = max(self.account - (self._sec_direct or 0.0), 0.0) / c1
            f = demand_fraction(avail, len(batch), self._demand, self.direct_margin)
        keep = None
        if f < 1.0:
            keep = heat.keep(keys, f)
            if keep is None:
                keep = keep_mask(keys, batch.seq, f, self.seed, True)
            st["shed"] += int((~keep).sum())
        sides = self.ingest(batch, keep)
        self.charge_ingest(sides)
        self._t0 = max(self._t0, float(batch.ts[0]))
        t1 = clock()
        self._calibrate_ingest(t1 - t0, sum(r.shape[0] for _, r in sides))
        rows = np.concatenate([r for _, r in sides]) if sides else np.zeros(0, np.int64)
        n = rows.shape[0]
        side = np.concatenate([np.full(r.shape[0], sd, np.int8) for sd, r in sides]) if sides \
            else np.zeros(0, np.int8)
        if n:
            o = np.lexsort((batch.seq[rows], -heat.counts[heat.slot(keys[rows])]))
            rows, side = rows[o], side[o]
        x_ts, val, x_rid = batch.ts[rows], keys[rows], batch.seq[rows]
        w = self.window
        t_lo = np.maximum(x_ts - w, self._t0 - w) if math.isfinite(w) else np.full(n, -math.inf)
        # every non-empty cell of each arrival's bucket in a zone overlapping its window, by row
        c_row, c_cell, c_cost = [], [], []
        for sd in (0, 1):
            m = np.flatnonzero(side == sd)
            if m.shape[0]:
                r, c, sz = self.sources[1 - sd].rest_cells_many(val[m], t_lo[m], x_ts[m])
                c_row.append(m[r]); c_cell.append(c); c_cost.append(COSTS["probe"] + COSTS["compare"] * sz)
        c_row = np.concatenate(c_row) if c_row else np.zeros(0, np.int64)
        c_cell = np.concatenate(c_cell) if c_cell else np.zeros(0, np.int64)
        c_cost = np.concatenate(c_cost) if c_cost else np.zeros(0)
        if len(c_row) > 1:
            o = np.argsort(c_row, kind="stable")
            c_row, c_cell, c_cost = c_row[o], c_cell[o], c_cost[o]
        est = np.full(n, COSTS["node"])          # the zone list of each arrival
        np.add.at(est, c_row, c_cost)
        if n:   # estimated probe units per arrival (admission.demand_fraction), as plan() measures it
            d = float(est.sum()) / n
            self._demand = d if self._demand is None else 0.7 * self._demand + 0.3 * d
        t2 = clock()
        self.account -= t2 - t0
        self._note_round(t2 - t0, direct=True)
        # probe batches, heaviest first, while the account lasts
        cum = np.cumsum(est)
        c_at = np.searchsorted(c_row, np.arange(n + 1), "left")   # cells of rows [a, b): c_at[a]:c_at[b]
        done = 0
        while done < n and self.account > 0:
            ts0 = clock()
            b, est_taken = self._direct_batch_end(cum, est, done)
            take = b - done
            self._charge(COSTS["node"] * take, "lookup_work")
            ca, cb = int(c_at[done]), int(c_at[b])
            cr = c_row[ca:cb]
            for sd, i, y_rid, y_ts in self._scan_sides(cr, c_cell[ca:cb], side, val, t_lo, x_ts)[1]:
                xr = cr[i]
                self._emit_direct(x_rid[xr], x_ts[xr], sd, val[xr], y_rid, y_ts)
            self._wall_batch_done(clock() - ts0, est_taken)
            done = b
        st["direct_probed"] += done
        st["direct_unprobed"] += n - done
        if len(self.queue):
            if self.account > 0:   # entries of earlier planned rounds
                self._drain_queue()
        elif done == n:   # everything probed: idle time cannot be banked
            self._idle()
        self._note_debt()

    def _hash_rounds(self) -> bool:
        """Wall clock, desc: direct rounds run on a value hash (:meth:`_tick_hash`)
        when ``wall_hash`` is on and the index is the query's own (an index
        shared with the engine is kept up by the engine anyway)."""
        if not self.wall_hash:
            return False
        c = self.__dict__.get("_private")
        if c is None or c[0] is not self.sources:
            c = self._private = (self.sources, not any(hasattr(src, "bind") for src in self.sources))
        return c[1]

    def _tick_hash(self, batch, income: float) -> None:
        """Wall clock, desc, private index: a direct round on a value hash
        (:mod:`.valuehash`, module doc "Direct rounds").

        The index's upkeep costs real time per ingest call (0.3-0.6 ms) that an
        overloaded share cannot pay (the bench's 50 and 100 ms streams: 1.7-4 ms
        of CPU for 30 s), so these rounds keep no index: one compiled pass
        (:meth:`.valuehash.ValueHash.round`) stores every arrival of the round
        (the window's arrivals stay partners) and finds each candidate's exact
        partner range -- the other stream's rows of its value, older than it and
        inside its window --, so a probe costs ``probe + compare * k`` for its
        ``k`` pairs, and orders the candidates heaviest first (rid order among
        equals): desc's "most promising first" without estimates, the greedy
        order of the cost model's knapsack.  The candidates are the round's
        arrivals and the heaviest ones an earlier round could not pay for
        (carried, at most as many as that round brought, while they still have
        partners: a spike of real time then delays their probes instead of
        losing them).  They are probed in batches sized by the account
        (``BatchTimer``).  An arrival is probed at most once and a pair is found
        by its later member, so the answer is an exact subset without
        duplicates, and the exact join when the account covers everything.  A
        round that finds the account below its measured fixed part sheds its
        batch (as :meth:`_tick_direct`).  Charged: the round's real seconds;
        counted in ``stats()``: one insert per stored arrival, a probe per
        probed arrival, its compares (``direct_unprobed``: let go or carried)."""
        clock = time.perf_counter
        t0 = clock()
        st = self._stats
        self.now = max(self.now, float(batch.ts[-1]))
        span_income = self._span_income()
        # shed only when the share cannot pay the rounds themselves (a latency span's income below
        # two rounds): a debt from a spike of real time (a preemption: ms, more than
        # the share earns in a span at 50-100 ms) is then repaid by later income while the rounds
        # store their arrivals and carry them (probed once the account allows) -- shedding lost up
        # to a latency span of arrivals per round until the debt was repaid
        if self._sec_direct is not None and self.account < self._sec_direct \
                and span_income < 2.0 * self._sec_direct:
            st["shed"] += len(batch)
            self._sec_direct *= 0.8   # decays while no round runs (see _tick_direct)
            dt = clock() - t0
            self.account -= dt
            st["shed_seconds"] += dt
            self._note_debt()
            return
        if self._vhash is None:
            self._vhash = ValueHash(self.window)
        vh = self._vhash
        stored0 = vh.stored
        w = self.window
        self._t0 = max(self._t0, float(batch.ts[0]))
        if math.isfinite(w):
            horizon = self._t0 - w
        else:   # whole stream: the history the index would keep (its memory bound, admission.retained_history)
            horizon = self._t0 - min(retained_history(src) for src in self.sources)
        # one compiled pass: store the round's arrivals, find each one's exact partner range, order
        # them heaviest first (valuehash.ValueHash.round)
        side, x_rid, x_ts, val, lo, hi, cum, ccum = vh.round(
            getattr(batch, self.key), batch.stream, self.streams[0], self.streams[1], batch.seq, batch.ts,
            horizon, COSTS["probe"], COSTS["compare"])
        n = side.shape[0]
        new = vh.stored - stored0
        self._charge(COSTS["insert"] * new, "insert_work")
        st["tuples_in"] += new
        t1 = clock()
        self.account -= t1 - t0
        self._note_round(t1 - t0, direct=True)
        done = 0
        # the probes may run up to one round's fixed part ahead of the income (repaid by the next
        # arrivals), as SIMPLE-SHJ's bounded backlog starts an arrival before its cost is earned:
        # without it a round just before the stream's end left its arrivals unprobed
        borrow = self._sec_direct or 0.0
        self.account += borrow
        while done < n and self.account > 0:
            ts0 = clock()
            b, units = self._direct_batch_end(cum, None, done)
            take = b - done
            pa, pb, pta, ptb, pv = vh.pairs(val[done:b], x_rid[done:b], x_ts[done:b], side[done:b], lo[done:b],
                                            hi[done:b])
            comps = int(ccum[b - 1]) - (int(ccum[done - 1]) if done else 0)
            self._charge(COSTS["probe"] * take + COSTS["compare"] * comps)
            st["probes"] += take
            st["compares"] += comps
            if pa.shape[0]:
                out = self._out
                out["a"].append(pa); out["b"].append(pb); out["ta"].append(pta); out["tb"].append(ptb)
                out["val"].append(pv); out["at"].append(np.full(pa.shape[0], self.now))
                st["outputs"] += int(pa.shape[0])
            self._wall_batch_done(clock() - ts0, units)
            done = b
        self.account -= borrow
        st["direct_probed"] += done
        # the heaviest arrivals not probed are candidates of the next round again: as many as one
        # latency span's income can probe (at its measured seconds per unit), at least as many as
        # this round brought -- the next rounds' fixed part stays bounded; unprobed = let go + carried
        cap = new
        c1 = self._timer.fit()[1] if self._timer.n >= 3 else self._sec_per_unit
        if done < n and c1:
            base = float(cum[done - 1]) if done else 0.0
            cap = max(cap, int(np.searchsorted(cum, base + span_income / c1, "right")) - done)
        vh.carry(done, cap)
        st["direct_unprobed"] = vh.dropped + vh.carried
        if done == n:   # everything probed: idle time cannot be banked
            self._idle()
        self._note_debt()

    def _wall_need(self) -> float:
        """Wall clock: the estimated work units the account buys in one probe batch -- beyond a
        batch's fixed cost once ``BatchTimer`` has 3 batches, else at the mean measured seconds per
        unit; nan before any batch was measured."""
        if self._timer.n >= 3:
            return self._timer.units(self.account)
        return self.account / self._sec_per_unit if self._sec_per_unit else math.nan

    def _wall_batch_done(self, dt: float, units: float) -> None:
        """Wall clock: a probe batch of ``units`` estimated units took ``dt`` real seconds: charged
        to the account and fed to the batch timer and the mean seconds per unit."""
        st = self._stats
        self.account -= dt
        st["probe_seconds"] += dt
        st["max_batch_work"] = max(st["max_batch_work"], dt)
        if units > 0:
            self._timer.add(units, dt)
            r = dt / units
            self._sec_per_unit = r if self._sec_per_unit is None else 0.7 * self._sec_per_unit + 0.3 * r

    def _direct_batch_end(self, cum, est, done: int):
        """A direct round's next probe batch, arrivals ``done:b`` in order (``cum``: cumulative
        ``est``; ``est`` None: read from ``cum``): the longest prefix the account buys (:meth:`_wall_need`), at least one arrival
        (``max_forced`` notes one that alone costs more), ``_FIRST_WALL_BATCH`` before any batch
        was measured.  Returns ``(b, estimated units of the batch)``."""
        n = cum.shape[0]
        need = self._wall_need()
        base = float(cum[done - 1]) if done else 0.0
        if need != need:   # not calibrated yet: a small first batch
            take = min(n - done, _FIRST_WALL_BATCH)
        else:
            take = int(np.searchsorted(cum[done:], base + need, "right"))
            if take == 0:   # the first arrival alone costs more than the account: started anyway
                take = 1
                first = float(est[done]) if est is not None else float(cum[done]) - base
                self._stats["max_forced"] = max(self._stats["max_forced"], first)
        b = done + take
        return b, float(cum[b - 1]) - base

    def _emit_direct(self, x_rid, x_ts, side: int, val, y_rid, y_ts) -> None:
        """Emit the matches of direct probes (:meth:`_tick_direct`): only pairs
        found by their later member (``y < x``); no dedup (an arrival is probed
        once, over disjoint live zones)."""
        ok = y_rid < x_rid
        if not ok.all():
            x_rid, x_ts, val, y_rid, y_ts = x_rid[ok], x_ts[ok], val[ok], y_rid[ok], y_ts[ok]
        k = y_rid.shape[0]
        if k == 0:
            return
        out = self._out
        if side == 0:
            out["a"].append(x_rid); out["b"].append(y_rid); out["ta"].append(x_ts); out["tb"].append(y_ts)
        else:
            out["a"].append(y_rid); out["b"].append(x_rid); out["ta"].append(y_ts); out["tb"].append(x_ts)
        out["val"].append(np.asarray(val, np.int64))
        out["at"].append(np.full(k, self.now))
        self._stats["outputs"] += k

    def _credit(self, units: float) -> None:
        self.account += units
        self._stats["allowance"] += units

    def _note_debt(self) -> None:
        if self.account < 0:
            self._stats["debt_max"] = max(self._stats["debt_max"], -self.account)

    def _calibrate_ingest(self, seconds: float, n: int) -> None:
        if n > 0:
            r = seconds / n
            self._sec_insert = r if self._sec_insert is None else 0.8 * self._sec_insert + 0.2 * r

    def _insert_price(self) -> float:
        """Price of one insert for the ingest share: ``insert`` units; on a wall
        clock 0 (no shedding): a round's real time is mostly fixed per call,
        not per tuple (measured: ~20 ms per round whether it ingests 30 or
        1,000 arrivals, ``stats()["round_seconds"] / ["rounds"]``; a per-tuple
        price would shed arrivals without saving that time), and the rounds are
        paced by :meth:`_defer` instead."""
        if self.wall:
            return 0.0
        return COSTS["insert"]

    def admit_ingest(self, batch, income: float, fraction: float | None = None, account: float | None = None):
        """Rows of ``batch`` to ingest (None = all): :func:`.admission.ingest_fraction`
        of the tick's income, chosen by :func:`.admission.keep_mask` (or the
        heaviest values, :mod:`.valueheat`), and, while that share is below 1,
        at most :func:`.admission.ingest_cap` units in all -- the value heat's
        sample included: a value-hash sample keeps whole values, so on skewed
        values its rows can be several times ``f n`` (``WITHIN 0.1`` charged
        2.8x the allowance in inserts alone); the rows beyond the cap are shed
        by :func:`.admission.cap_rows`, whole values kept in hash order (the
        heaviest first for the heat), the last one cut by a hash of the row id.
        ``account``: the account the cap may draw on (default this query's;
        a :class:`PTJoinGroup` passes the tightest of its queries').

        The same rule on a shared source (the engine's index, ``bind``): the
        index's own ingest is the stream's, paid by the engine for every
        query and reader of the stream; the query pays one ``insert`` per
        arrival it *admits* into its view of the index (the stream-row
        mapping, :class:`.shared_source.SharedIndexSource`), and a shed
        arrival is never mapped, so neither planned nor found as a partner --
        what a private index does with it.  (Charged the whole shared ingest
        with nothing shed, a query at 1 unit per tuple spent every unit on
        inserts: 0 probes, 0 pairs, where the private index probed 113 times.)"""
        keys = getattr(batch, self.key)
        n = len(batch)
        price = self._insert_price()
        f_in = ingest_fraction(income, n, price)
        cap = math.inf
        if f_in < 1.0:
            cap = ingest_cap(income, self.account if account is None else account, price,
                             self.__dict__.get("_ingest_carry", 0.0))
        heavy = None
        if fraction is None:
            f_d = self._demand_fraction(income, n)
            f = min(f_in, f_d)
            if self._heat is not None:
                # demand shedding keeps the heaviest values (valueheat): a sample of
                # every arrival is counted, one insert per counted arrival, within the cap
                k = self._heat.sampled(batch.seq)
                if COSTS["insert"] * k <= cap:
                    self._heat.observe(keys, batch.seq, float(batch.ts[-1]))
                    self._charge(COSTS["insert"] * k, "insert_work")
                    cap -= COSTS["insert"] * k
                if f_d < f_in:
                    heavy = self._heat.keep(keys, f)
        else:
            f = fraction
        by_value = self.preference != "weighted"
        keep = heavy if heavy is not None else keep_mask(keys, batch.seq, f, self.seed, by_value)
        if keep is not None and math.isfinite(cap):
            k_max = int(math.floor(max(cap, 0.0) / price + 1e-9))
            if int(keep.sum()) > k_max:
                if heavy is not None:
                    prio = -self._heat.counts[self._heat.slot(keys)]
                else:
                    prio = admission_hash(keys if by_value else batch.seq, self.seed)
                keep = cap_rows(keep, k_max, prio, admission_hash(batch.seq, self.seed + 1))
            self._ingest_carry = min(max(cap - price * int(keep.sum()), 0.0), price)
        else:
            self._ingest_carry = 0.0
        if keep is not None:
            self._stats["shed"] += int((~keep).sum())
        return keep

    def _demand_fraction(self, income: float, n: int) -> float:
        """:func:`.admission.demand_fraction` of this query (1 if it does not
        shed by demand); on a wall clock the income (seconds) is converted to
        units at the measured seconds per unit."""
        if not self.demand_shed or self._demand is None:
            return 1.0
        demand = self._demand
        if self.wall:
            c1 = self._timer.fit()[1] if self._timer.n >= 3 else self._sec_per_unit
            if not c1:
                return 1.0
            income = income / c1
        else:
            # D is estimated from whole cells; a bounded scan is charged only the window's run and
            # the searches: D in the units a probe is charged (the probe batches' charged /
            # estimated units, decayed), so that the queue holds kappa times what the income
            # can probe (admission, "Demand")
            a, e = self._scan_ratio
            if e > 0:
                demand *= min(1.0, a / e)
        return demand_fraction(income, n, demand, self.demand_margin)

    def admit_plan(self, batch, sides):
        """The arrivals to plan: all of those ingested while their planning takes
        at most half the account, else a seeded uniform sample
        (:func:`.admission.plan_count`); the rest are counted in ``unplanned``."""
        n = sum(r.shape[0] for _, r in sides)
        if n == 0:
            return sides
        if self.wall:
            rate = self._sec_per_unit
            if rate is None:
                return sides
            pc = self._plan_cost * rate
        else:
            pc = self._plan_cost
        k = plan_count(self.account, n, pc)
        if k >= n:
            return sides
        self._stats["unplanned"] += n - k
        self._starved = True
        rows = np.concatenate([r for _, r in sides])
        side_of = np.concatenate([np.full(r.shape[0], sd) for sd, r in sides])
        pick = plan_rows(batch.seq[rows], k, self.seed)
        out = []
        for sd, _ in sides:
            m = pick[side_of[pick] == sd]
            if m.shape[0]:
                out.append((sd, np.sort(rows[m])))
        # the others wait in the planning backlog: budget left after probing
        # (later ticks, idle time, heartbeats) plans them while they are in the window
        rest = np.ones(rows.shape[0], bool)
        rest[pick] = False
        if rest.any():
            r = rows[rest]
            keys = getattr(batch, self.key)
            bl = self._backlog
            bl["side"].append(side_of[rest].astype(np.int8)); bl["ts"].append(batch.ts[r])
            bl["seq"].append(batch.seq[r]); bl["val"].append(keys[r])
        return out

    def _plan_backlog(self) -> int:
        """Plan arrivals of the backlog (admit_plan) with the account left once
        the queue is empty: the expired ones are dropped, then the newest
        ``plan_count`` of them are planned (the same half-the-account rule).
        Returns how many were planned."""
        bl = self._backlog
        if not bl["ts"]:
            return 0
        cols = {k: (np.concatenate(v) if len(v) > 1 else v[0]) for k, v in bl.items()}
        o = np.argsort(cols["ts"], kind="stable")
        cols = {k: v[o] for k, v in cols.items()}
        if math.isfinite(self.window):
            alive = cols["ts"] > self.now - self.window
            self._stats["unplanned_expired"] += int((~alive).sum())
            cols = {k: v[alive] for k, v in cols.items()}
        n = cols["ts"].shape[0]
        k = plan_count(self.account, n, self._plan_cost) if n else 0
        take = np.arange(n - k, n)          # the newest k
        rest = np.arange(0, n - k)
        for key, v in cols.items():
            bl[key] = [v[rest]] if rest.shape[0] else []
        if not k:
            return 0
        self._stats["backlog_planned"] += k
        b = _cols_batch({"ts": cols["ts"][take], "seq": cols["seq"][take], self.key: cols["val"][take]})
        side = cols["side"][take]
        sides = [(sd, np.flatnonzero(side == sd)) for sd in (0, 1) if (side == sd).any()]
        self.plan(b, sides)
        return k

    def ingest(self, batch, keep=None):
        """Step 1 (Summarize): put the batch (the rows of ``keep``, default
        all) into the sources; returns ``[(side, rows of the batch)]``.  Not
        charged (see ``charge_ingest``)."""
        self.now = max(self.now, float(batch.ts[-1]))
        keys = getattr(batch, self.key)
        t_lo, t_hi = float(batch.ts.min()), float(batch.ts.max())
        for src in self.sources:
            # a shared source: the engine's index takes its tuples up to this chunk's newest one
            # now (not the whole step at once), and the stream-row mapping keeps the partners
            # of this chunk's oldest arrival, whichever side it is on (SharedIndexSource.before_ingest)
            f = getattr(src, "before_ingest", None)
            if f is not None:
                f(t_lo, t_hi)
        sides = []
        for side, s in enumerate(self.streams):
            m = batch.stream == s
            if keep is not None:
                m = m & keep
            if m.any():
                rows = np.flatnonzero(m)
                sides.append((side, rows))
                self.sources[side].ingest(keys[rows], batch.ts[rows], batch.seq[rows])
        return sides

    def charge_ingest(self, sides, share: float = 1.0) -> None:
        n = sum(r.shape[0] for _, r in sides)
        self._charge(COSTS["insert"] * n * share, "insert_work")
        self._stats["tuples_in"] += n

    def plan(self, batch, sides, cache: dict | None = None) -> None:
        """Steps 2-3: the promising regions of the batch's tuples in the other
        stream's granularities intersecting the window go into the queue.
        ``cache`` (shared by the queries of a :class:`PTJoinGroup` within one
        tick) reuses the regions of identical lookups."""
        self.now = max(self.now, float(batch.ts[-1]))
        self._t0 = max(self._t0, float(batch.ts[0]))
        keys = getattr(batch, self.key)
        w0 = self._stats["node_work"]
        n_planned = 0
        demand = 0.0
        for side, rows in sides:
            other = self.sources[1 - side]
            vals = keys[rows]
            ts = batch.ts[rows]
            n_planned += rows.shape[0]
            t_from = float(ts.min()) - self.window if math.isfinite(self.window) else -math.inf
            # the rows are part of the key: queries of a group may plan different samples
            ck = ("regions", side, t_from, self.fade, rows.shape[0], int(rows[0]), int(rows[-1]), int(rows.sum()))
            if cache is not None and ck in cache:
                res = cache[ck]
            else:
                res = _regions_by_value(other, vals, t_from, float(ts.max()), self.now, self.fade)
                if cache is not None:
                    cache[ck] = res
            probe, cell, est, gran, prio, size, nodes = res
            self._charge(COSTS["node"] * nodes, "node_work")
            demand += COSTS["probe"] * probe.shape[0] + COSTS["compare"] * float(np.sum(size))
            admitted = np.ones(rows.shape[0], bool)
            tier = None
            if self.preference == "asc":
                prio, tier = self._asc_priority(side, vals, probe, gran, t_from, cache, ck)
            if probe.shape[0]:
                r = rows[probe]
                cols = {"rid": batch.seq[r], "ts": batch.ts[r], "val": keys[r],
                        "side": np.full(r.shape[0], side, np.int8), "cell": cell, "gran": gran,
                        "kind": np.zeros(r.shape[0], np.int8), "size": np.asarray(size, np.int64)}
                wgt = strata = None
                if self.preference == "weighted":
                    wgt = np.power(self.fade, (gran - 1).astype(np.float64))
                    if self.stratify:   # per (join value, granularity): queue._stratified_exponential
                        strata = hash64(keys[r], self.seed, "join keys") ^ \
                            (gran.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15))
                self._stats["entries"] += self.queue.push(cols, prio, 1.0 + size, batch.seq[r], wgt,
                                                         t=batch.ts[r], stratum=strata, tier=tier)
            # the "when idle" sweep of each admitted probe's non-promising cells
            r = rows[admitted]
            if r.shape[0]:
                base = self.queue.n
                cols = {"rid": batch.seq[r], "ts": batch.ts[r], "val": keys[r],
                        "side": np.full(r.shape[0], side, np.int8), "cell": np.full(r.shape[0], -1, np.int64),
                        "gran": np.zeros(r.shape[0], np.int64), "kind": np.ones(r.shape[0], np.int8),
                        "size": np.zeros(r.shape[0], np.int64)}
                self.queue.push_last(cols, batch.seq[r])
                # cells already queued per probe (excluded from its sweep)
                if probe.shape[0] and self.probe_batch != 1:
                    pos_of_row = np.full(rows.shape[0], -1, np.int64)
                    pos_of_row[np.flatnonzero(admitted)] = np.arange(r.shape[0])
                    o = np.argsort(probe, kind="stable")
                    j = pos_of_row[probe[o]]
                    ok = j >= 0
                    self._cov[0].append(base + j[ok])      # ascending entry ids
                    self._cov[1].append(np.asarray(cell[o][ok], np.int64))
                    self._cov_arr = None
                elif probe.shape[0]:
                    pos_of_row = np.full(rows.shape[0], -1, np.int64)
                    pos_of_row[np.flatnonzero(admitted)] = np.arange(r.shape[0])
                    o = np.argsort(probe, kind="stable")
                    ps, cs = probe[o], cell[o]
                    cuts = np.flatnonzero(np.r_[True, ps[1:] != ps[:-1]])
                    for a, b_ in zip(cuts.tolist(), np.r_[cuts[1:], ps.shape[0]].tolist()):
                        j = int(pos_of_row[ps[a]])
                        if j >= 0:
                            self._covered[base + j] = cs[a:b_]
        if n_planned:   # measured planning cost per arrival (admission, see admit_plan)
            spent = self._stats["node_work"] - w0
            self._stats["max_plan_overrun"] = max(self._stats["max_plan_overrun"],
                                                  spent - n_planned * self._plan_cost)
            self._plan_cost = 0.7 * self._plan_cost + 0.3 * spent / n_planned
            d = demand / n_planned
            self._demand = d if self._demand is None else 0.7 * self._demand + 0.3 * d
        self._ticks += 1
        # expired entries leave the queue every quarter window of event time (memory: the entry
        # table then spans ~one window, EntryQueue.prune(compact=True) shifts the entry ids by `cut`)
        if math.isfinite(self.window) and (self._ticks % 256 == 0 or
                                           self._t0 - getattr(self, "_pruned_at", -math.inf) >= self.window / 4):
            self._pruned_at = self._t0
            E = self.queue.arrays()
            horizon = self._t0 - self.window
            cut = self.queue.prune(lambda ids: E["ts"][ids] > horizon, compact=True)
            self._covered = {k - cut: v for k, v in self._covered.items() if k >= cut and E["ts"][k] > horizon}
            ce, cc = self._covered_arrays()
            if ce.shape[0]:
                live = (E["ts"][ce] > horizon) & (ce >= cut)
                self._cov, self._cov_arr = ([ce[live] - cut], [cc[live]]), None
            if self._dedup is not None:   # pairs whose probe tuple expired cannot be found again
                ts_of = E["ts"]
                rid_live = E["rid"][ts_of > horizon]
                if rid_live.shape[0]:
                    lo = int(rid_live.min())
                    self._dedup.keep(lambda k: (k >> 32) >= lo)
                else:
                    self._dedup = PairSet()

    def _asc_priority(self, side, vals, probe, gran, t_from, cache=None, ck=None):
        """asc: the preference function is the value's estimated count in the
        window of *both* streams (``Estimate.Count(S1.v) + Estimate.Count(S2.v)``),
        faded so that older granularities come later (``count / alpha^(i-1)``,
        ascending).  The preferred answer set is the outliers: a probe is an
        outlier if its count is within the lowest ``outlier_quantile`` of the
        counts of recent *output-weighted* probes (each probe weighted by its
        estimated number of matches, i.e. the quantile over the output tuples'
        frequencies).  Outliers' entries are queued in tier 0, every other
        entry in tier 1 (:meth:`EntryQueue.push`): outliers first, and with a
        budget that covers everything the whole join.  Costs one ``node`` per
        distinct value and stream.  Returns (priority, tier) per region row."""
        uv, inv = np.unique(vals, return_inverse=True)
        ck = ("totals",) + tuple(ck[1:]) if ck is not None else ("totals", side, t_from)
        if cache is not None and ck in cache:
            own, oth = cache[ck]
        else:
            own = self.sources[side].total(uv, t_from, self.now)
            oth = self.sources[1 - side].total(uv, t_from, self.now)
            if cache is not None:
                cache[ck] = (own, oth)
        self._charge(COSTS["node"] * 2 * uv.shape[0], "node_work")
        tot = (own + oth)[inv]
        wgt = np.maximum(oth, 0.0)[inv]
        hv, hw = self._asc_hist
        hv.append(tot); hw.append(wgt)
        if len(hv) > 64:
            del hv[:-64]; del hw[:-64]
        if self._ticks % 8 == 0 or not math.isfinite(self._asc_thr):
            at = np.concatenate(hv); aw = np.concatenate(hw)
            if aw.sum() > 0:
                o = np.argsort(at, kind="stable")
                cw = np.cumsum(aw[o])
                k = int(np.searchsorted(cw, self.outlier_quantile * cw[-1], side="left"))
                self._asc_thr = float(at[o][min(k, o.shape[0] - 1)])
        outlier = (tot <= self._asc_thr + 1e-9) & (wgt >= 0.5)
        prio = tot[probe] / np.power(self.fade, (gran - 1).astype(np.float64))
        return prio, (~outlier[probe]).astype(np.int8)

    def _idle(self) -> None:
        """Nothing left to probe: idle time cannot be banked -- unless arrivals
        went unplanned for lack of budget (admit_plan), then the account is
        kept until one can be planned."""
        if self._starved or self._backlog["ts"]:
            self._starved = False
        else:
            self.account = min(self.account, 0.0)

    def _charge(self, units, what=None):
        if not self.wall:
            self.account -= units
        self._stats["work"] += units
        if what:
            self._stats[what] += units

    def _covered_arrays(self):
        if self._cov_arr is None:
            ce, cc = self._cov
            self._cov_arr = (np.concatenate(ce) if ce else np.zeros(0, np.int64),
                             np.concatenate(cc) if cc else np.zeros(0, np.int64))
            self._cov = ([self._cov_arr[0]], [self._cov_arr[1]])
        return self._cov_arr

    def _batch_size(self, need: float, mean_cost: float) -> int:
        """Entries to pop for a batch: enough to cover ``need`` estimated
        units at the recent mean estimated cost per entry, plus a margin."""
        if self.probe_batch != "auto":
            return int(self.probe_batch)
        if not math.isfinite(need):
            return _MAX_BATCH
        return int(min(_MAX_BATCH, max(4, 1.5 * need / max(mean_cost, 1.0) + 4)))

    def drain(self) -> None:
        """Step 4: probe the queue until the budget runs out, in batches.

        Each batch pops the next ``k`` entries in priority order
        (:meth:`EntryQueue.pop_many`, the order of ``k`` successive pops),
        drops the expired ones (probe tuple out of the window, or every
        partner of the cell expired) vectorized, and keeps the longest prefix
        whose *estimated* cost fits the account (at least one entry): an
        entry's estimate is ``probe + compare * n`` with ``n`` the cell's
        tuple count now (a sweep: its remaining cells, counted now), plus a
        ``node`` for a lookup without a scan; on a wall-clock budget the
        account (seconds) is first converted to estimated units with the
        measured seconds per unit of the previous batches.  The rest of the
        popped entries go back unchanged (:meth:`EntryQueue.unpop`).  All
        (entry value, cell, t_lo, t_hi) rows kept are then scanned in one
        ``scan_many`` call per source and the pairs emitted with one
        vectorized dedup.  The *real* cost (units: probes + tuples compared;
        wall clock: seconds) is charged after the batch.  The estimate is
        exact in work units, so the account goes negative only when the
        first entry alone costs more than it (``stats()["max_forced"]``): a
        debt of at most that entry's cost, paid by the next ticks before
        anything but the ingest runs (:mod:`.admission`).
        ``k`` adapts: ~1.5 x the entries the account covers at the recent mean
        estimated cost per entry (at most 4096)."""
        self._drain_queue()
        while self.account > 0 and not len(self.queue) and self._backlog["ts"]:
            if not self._plan_backlog():
                break
            self._drain_queue()

    def _drain_queue(self) -> None:
        """Probe the queue with the account (:meth:`drain`)."""
        if self.probe_batch == 1:
            return self._drain_serial()
        if self.account <= 0 or not len(self.queue):
            if not len(self.queue):
                self._idle()
            return
        E = self.queue.arrays()
        w = self.window
        horizon = self._t0 - w   # expired before this tick began (module doc)
        wall = self.wall
        clock = time.perf_counter
        mean_cost = self._mean_cost
        while self.account > 0 and len(self.queue):
            t_start = clock() if wall else 0.0
            if wall:
                need = self._wall_need()
                if self._timer.n >= 3 and need < mean_cost:   # not even one entry: wait for more account
                    break
            else:
                need = self.account
            if need != need:   # wall clock, not calibrated yet: a small first batch
                k, need = _FIRST_WALL_BATCH, math.inf
            else:
                k = self._batch_size(need, mean_cost)
            ids = self.queue.pop_many(k)
            took, est = self._probe_batch(E, ids, horizon, need)
            if took and est > 0:
                mean_cost = 0.8 * mean_cost + 0.2 * est / took
            if wall:
                self._wall_batch_done(clock() - t_start, est)
        self._mean_cost = mean_cost
        if not len(self.queue):
            self._idle()

    def _probe_batch(self, E, ids, horizon, need):
        """Probe the prefix of ``ids`` whose estimated cost fits ``need`` (at
        least one entry; the rest is put back); returns (entries taken, their
        estimated cost).  Charges the real cost
        in work units (the caller charges wall-clock time)."""
        n = ids.shape[0]
        w = self.window
        x_ts = E["ts"][ids]
        side = E["side"][ids]
        kind = E["kind"][ids]
        cell = E["cell"][ids]
        val = E["val"][ids]
        t_lo = np.maximum(x_ts - w, horizon)
        alive = x_ts > horizon
        gone = np.zeros(n, bool)
        est = np.zeros(n)
        reg = alive & (kind == 0)
        swp = np.flatnonzero(alive & (kind != 0))
        # regular entries: one cell each, skipped if every partner there expired
        for sd in (0, 1):
            m = np.flatnonzero(reg & (side == sd))
            if m.shape[0]:
                gone[m] = self.sources[1 - sd].cell_end_many(cell[m]) <= t_lo[m]
        live = reg & ~gone
        size = E["size"][ids]
        for sd in (0, 1):   # the cells' sizes now (they may have grown since queued)
            src = self.sources[1 - sd]
            m = np.flatnonzero(live & (side == sd))
            if m.shape[0] and hasattr(src, "cell_sizes_many"):
                size[m] = src.cell_sizes_many(cell[m], val[m])
        est[live] = COSTS["probe"] + COSTS["compare"] * size[live]
        # what is looked up without a scan is charged too: one node per dropped
        # entry (its time / its cell's newest time) and per sweep (the zone list)
        look = np.where(~alive | gone | (alive & (kind != 0)), COSTS["node"], 0.0)
        est += look
        # sweep entries: their remaining cells (those not queued as regions)
        s_row = s_cell = np.zeros(0, np.int64)
        s_tf = s_tt = np.zeros(0)
        s_cont = np.zeros(0, bool)
        if swp.shape[0]:
            rows, cells, costs, tfs, tts, conts = [], [], [], [], [], []
            ce, cc = self._covered_arrays()
            for sd in (0, 1):
                m = swp[side[swp] == sd]
                if not m.shape[0]:
                    continue
                src = self.sources[1 - sd]
                r, c, sz = src.rest_cells_many(val[m], t_lo[m], x_ts[m])
                r = m[r]
                tf, tt, cont = t_lo[r], x_ts[r], np.zeros(r.shape[0], bool)
                if r.shape[0] and ce.shape[0]:
                    lo = np.searchsorted(ce, ids[m], "left")
                    hi = np.searchsorted(ce, ids[m], "right")
                    cnt = hi - lo
                    if cnt.sum():
                        rep = np.repeat(np.arange(m.shape[0]), cnt)
                        at = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt) + lo[rep]
                        ex = (cc[at] << _ROW_BITS) | m[rep]
                        keep = ~np.isin((c << _ROW_BITS) | r, ex)
                        r, c, sz = r[keep], c[keep], sz[keep]
                        r, c, sz, tf, tt, cont = _sweep_rest(src, r, c, sz, cc[at], m[rep], t_lo, x_ts)
                rows.append(r); cells.append(c); tfs.append(tf); tts.append(tt); conts.append(cont)
                costs.append(np.where(cont, 0.0, COSTS["probe"]) + COSTS["compare"] * sz)
            if rows:
                s_row, s_cell = np.concatenate(rows), np.concatenate(cells)
                s_tf, s_tt, s_cont = np.concatenate(tfs), np.concatenate(tts), np.concatenate(conts)
                np.add.at(est, s_row, np.concatenate(costs))
        # the longest prefix (priority order) whose cost fits the account; the
        # rest goes back to the queue unchanged.  If the first entry alone
        # costs more than the account it is still taken (a skip would bias the
        # preference: weighted's sample, asc's order): the carried debt
        if math.isfinite(need):
            took = int(np.searchsorted(np.cumsum(est), need, "right"))
            if took == 0:
                took = 1
                self._stats["max_forced"] = max(self._stats["max_forced"], float(est[0]))
        else:
            took = n
        tk = np.zeros(n, bool)
        tk[:took] = True
        if took < n:
            self.queue.unpop(~tk)
        st = self._stats
        st["batches"] += 1
        lk = float(look[tk].sum())
        if lk:
            self._charge(lk, "lookup_work")
        st["discarded"] += int((~alive & tk).sum())
        st["discarded_partners_expired"] += int((gone & tk).sum())
        st["sweeps"] += int(tk[swp].sum())
        # scan rows: (batch row, cell), in batch order (sweeps: zone order)
        r0 = np.flatnonzero(live & tk)
        s_ok = tk[s_row]
        srow = np.concatenate([r0, s_row[s_ok]])
        scell = np.concatenate([cell[r0], s_cell[s_ok]])
        stf = np.concatenate([t_lo[r0], s_tf[s_ok]])
        stt = np.concatenate([x_ts[r0], s_tt[s_ok]])
        scont = np.concatenate([np.zeros(r0.shape[0], bool), s_cont[s_ok]])
        if srow.shape[0] > 1:
            o = np.argsort(srow, kind="stable")
            srow, scell, stf, stt, scont = srow[o], scell[o], stf[o], stt[o], scont[o]
        est_taken = float(est[tk].sum())
        if srow.shape[0] == 0:
            return took, est_taken
        work, parts = self._scan_sides(srow, scell, side, val, stf, stt, scont)
        if not self.wall:
            st["max_batch_work"] = max(st["max_batch_work"], work)
        if est_taken > 0:   # what the estimates' entries cost when scanned (demand, admission)
            a, e = self._scan_ratio
            self._scan_ratio = (0.95 * a + lk + work, 0.95 * e + est_taken)
        if parts:
            q = np.concatenate([p[1] for p in parts])   # scan row of each match
            y_rid = np.concatenate([p[2] for p in parts])
            y_ts = np.concatenate([p[3] for p in parts])
            if len(parts) > 1:
                o = np.argsort(q, kind="stable")
                q, y_rid, y_ts = q[o], y_rid[o], y_ts[o]
            self._emit_many(ids[srow[q]], y_rid, y_ts, E)
        return took, est_taken

    def _scan_sides(self, rows, cells, side, val, t_lo, x_ts, cont=None):
        """Scan row ``rows[k]``'s arrival (value ``val``, window ``(t_lo, x_ts]``, stream
        ``side``) in cell ``cells[k]`` of the other stream's source: one vectorized
        ``scan_many`` per source, charged (a probe per cell and its compares) and
        counted.  ``t_lo``/``x_ts`` are per batch row, or with ``cont`` given per
        scan row (``cont[k]``: the scan row is a further time range of the cell
        opened by the row before it -- a sweep cut around a collapsed cell's part
        already scanned, :func:`_sweep_rest` -- and pays no probe).  Returns
        ``(work, parts)``, ``parts`` a list of ``(side, i, y_rid, y_ts)`` per
        source with matches (side 0 first), ``i`` the position in ``rows`` of
        each match's scan row."""
        st = self._stats
        parts, work = [], 0.0
        for sd in (0, 1):
            m = np.flatnonzero(side[rows] == sd)
            if not m.shape[0]:
                continue
            rr = rows[m]
            if cont is None:
                tf, tt, opened = t_lo[rr], x_ts[rr], m.shape[0]
            else:
                tf, tt, opened = t_lo[m], x_ts[m], m.shape[0] - int(cont[m].sum())
            q, y_rid, y_ts, comps = self.sources[1 - sd].scan_many(cells[m], val[rr], tf, tt, cursor=True)
            cost = COSTS["probe"] * opened + COSTS["compare"] * comps
            work += cost
            self._charge(cost)
            st["probes"] += int(opened)
            st["compares"] += int(comps)
            if y_rid.shape[0]:
                parts.append((sd, m[q], y_rid, y_ts))
        return work, parts

    def _emit_many(self, e, y_rid, y_ts, E) -> None:
        """Emit the matches ``(entry e[k], stored tuple y_rid[k])``: only pairs
        found by their later member (``y < x``), deduplicated, one append."""
        x_rid = E["rid"][e]
        ok = y_rid < x_rid
        if not ok.all():
            e, x_rid, y_rid, y_ts = e[ok], x_rid[ok], y_rid[ok], y_ts[ok]
        if self._dedup is not None and y_rid.shape[0]:
            fresh = self._dedup.add_new((x_rid << 32) | y_rid)
            if not fresh.all():
                self._stats["duplicates_skipped"] += int((~fresh).sum())
                e, x_rid, y_rid, y_ts = e[fresh], x_rid[fresh], y_rid[fresh], y_ts[fresh]
        k = y_rid.shape[0]
        if k == 0:
            return
        x_ts = E["ts"][e]
        s0 = E["side"][e] == 0
        out = self._out
        out["a"].append(np.where(s0, x_rid, y_rid)); out["b"].append(np.where(s0, y_rid, x_rid))
        out["ta"].append(np.where(s0, x_ts, y_ts)); out["tb"].append(np.where(s0, y_ts, x_ts))
        out["val"].append(E["val"][e].astype(np.int64, copy=False))
        out["at"].append(np.full(k, self.now))
        self._stats["outputs"] += k

    def _drain_serial(self) -> None:
        """Reference path (``probe_batch=1``): one queue entry per iteration."""
        if self.account <= 0 or not len(self.queue):
            if not len(self.queue):
                self._idle()
            return
        E = self.queue.arrays()
        e_rid, e_ts, e_val, e_side, e_cell, e_kind = E["rid"], E["ts"], E["val"], E["side"], E["cell"], E["kind"]
        w = self.window
        horizon = self._t0 - w   # expired before this tick began (module doc)
        wall = self.wall
        clock = time.perf_counter
        last = clock() if wall else 0.0
        while self.account > 0 and len(self.queue):
            if wall:   # charge the time of the previous entry
                t = clock()
                self.account -= t - last
                last = t
                if self.account <= 0:
                    break
            e = self.queue.pop()
            x_ts = float(e_ts[e])
            if x_ts <= horizon:
                self._stats["discarded"] += 1
                self._charge(COSTS["node"], "lookup_work")
                self._covered.pop(e, None)
                continue
            side = int(e_side[e])
            src = self.sources[1 - side]
            t_lo = max(x_ts - w, horizon)   # partners older than t0 - w have expired
            if e_kind[e] == 0:
                cells = (int(e_cell[e]),)
                if src.cell_end(cells[0]) <= t_lo:
                    self._stats["discarded_partners_expired"] += 1
                    self._charge(COSTS["node"], "lookup_work")
                    continue
            else:
                cells = src.rest_cells(e_val[e], t_lo, x_ts, self._covered.pop(e, ()))
                self._stats["sweeps"] += 1
                self._charge(COSTS["node"], "lookup_work")
            for c in cells:
                y_rid, y_ts, comps = src.scan(c, e_val[e], t_lo, x_ts)
                self._charge(COSTS["probe"] + COSTS["compare"] * comps)
                self._stats["probes"] += 1
                self._stats["compares"] += comps
                if y_rid.shape[0]:
                    self._emit(int(e_rid[e]), x_ts, side, y_rid, y_ts, e_val[e])
        if wall:
            self.account -= clock() - last
        if not len(self.queue):
            self._idle()

    def _emit(self, x_rid, x_ts, side, y_rid, y_ts, val) -> None:
        ok = y_rid < x_rid
        if not ok.all():
            y_rid = y_rid[ok]
            y_ts = y_ts[ok]
        dedup = self._dedup
        if dedup is not None and y_rid.shape[0]:
            fresh = dedup.add_new((np.int64(x_rid) << 32) | y_rid.astype(np.int64))
            if not fresh.all():
                self._stats["duplicates_skipped"] += int((~fresh).sum())
                y_rid = y_rid[fresh]
                y_ts = y_ts[fresh]
        k = y_rid.shape[0]
        if k == 0:
            return
        out = self._out
        xr = np.full(k, x_rid, np.int64)
        xt = np.full(k, x_ts)
        y_rid = y_rid.astype(np.int64)
        if side == 0:
            out["a"].append(xr); out["b"].append(y_rid); out["ta"].append(xt); out["tb"].append(y_ts)
        else:
            out["a"].append(y_rid); out["b"].append(xr); out["ta"].append(y_ts); out["tb"].append(xt)
        out["val"].append(np.full(k, val))
        out["at"].append(np.full(k, self.now))
        self._stats["outputs"] += k

    # ------------------------------------------------------------------ results
    def stats(self) -> dict:
        return dict(self._stats, queued=len(self.queue), account=self.account)


def _regions_by_value(source, vals, t_from: float, t_to: float, now: float, fade: float):
    """``source.regions`` of the probe values ``vals`` over one window, looked
    up once per distinct value: the regions of a value depend only on the
    value and the (scalar) window, so every arrival of a value gets its
    value's rows -- the same rows in the same (granularity, probe, slot) order
    as one lookup per arrival -- and only the distinct values' summary
    estimates are done and charged (``nodes``).  A hot value arrives many
    times per tick."""
    uv, inv = np.unique(vals, return_inverse=True)
    if uv.shape[0] == vals.shape[0]:
        return source.regions(vals, t_from, t_to, now, fade)
    pu, cell, est, gran, prio, size, nodes = source.regions(uv, t_from, t_to, now, fade)
    if not pu.shape[0]:
        return pu, cell, est, gran, prio, size, nodes
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")              # arrivals grouped by value, in row order
    cnt = np.bincount(inv, minlength=uv.shape[0])
    first = np.cumsum(cnt) - cnt
    rep = cnt[pu]
    k = np.repeat(np.arange(pu.shape[0]), rep)          # region row of each expanded row
    within = np.arange(k.shape[0]) - np.repeat(np.cumsum(rep) - rep, rep)
    probe = order[first[pu][k] + within]
    # the source's row order: (block, probe, ...) with block the granularity (StreamIndex) or the
    # zone (the mini index); a stable sort keeps the rest (slots) in the source's order
    block = cell[k] if getattr(source, "region_block", "granularity") == "cell" else gran[k]
    o = np.lexsort((probe, block))
    k, probe = k[o], probe[o]
    return probe, cell[k], est[k], gran[k], prio[k], size[k], nodes


def _sweep_rest(src, r, c, sz, cov_c, cov_r, t_lo, x_ts):
    """The sweep's scan rows once a queued cell was merged by COLLAPSE (issue 16).

    ``(r, c, sz)``: the sweep's rows (batch row, live cell, size) left after
    the cells queued for the row's probe were excluded; ``(cov_c, cov_r)``: the
    cells queued per batch row.  A queued cell whose zone was since merged
    resolves to a live cell the sweep would scan whole, meeting again every
    pair the queued entry found (deduplicated, but paid).  Such a row keeps
    only the time ranges outside the queued handles' own parts
    (:meth:`StreamIndex.cell_origins`: ``[lo, hi]``), ends included (a tuple of
    another zone with the very same timestamp); each range is a scan row of
    its own, the first one opens the cell (a probe), the others are marked
    ``cont`` (no probe).  Returns ``(r, c, sz, t_from, t_to, cont)``, still
    sorted by row."""
    tf, tt, cont = t_lo[r], x_ts[r], np.zeros(r.shape[0], bool)
    origin = getattr(src, "cell_origins", None)
    got = origin(cov_c) if (origin is not None and r.shape[0] and cov_c.shape[0]) else None
    if got is None:
        return r, c, sz, tf, tt, cont
    live, lo, hi = got
    mg = (live >= 0) & (live != cov_c)
    if not mg.any():
        return r, c, sz, tf, tt, cont
    kx = (live[mg] << _ROW_BITS) | cov_r[mg]
    o = np.argsort(kx, kind="stable")
    kx, slo, shi = kx[o], lo[mg][o], hi[mg][o]
    key = (c << _ROW_BITS) | r
    hit = np.isin(key, kx)
    if not hit.any():
        return r, c, sz, tf, tt, cont
    R, C, S, F, T, K = [], [], [], [], [], []
    for j in np.flatnonzero(hit).tolist():
        a, b = np.searchsorted(kx, key[j], "left"), np.searchsorted(kx, key[j], "right")
        cur, end, first = float(tf[j]), float(tt[j]), True
        spans = sorted(zip(slo[a:b].tolist(), shi[a:b].tolist()))
        for L, H in spans + [(math.inf, math.inf)]:
            if L > cur and min(L, end) > cur:   # (cur, L]: before the part already scanned (its end included)
                R.append(r[j]); C.append(c[j]); S.append(sz[j]); F.append(cur)
                T.append(min(L, end)); K.append(not first)
                first = False
            if L >= end:
                break
            cur = max(cur, float(np.nextafter(H, -math.inf)))   # from H on (H included)
    k = ~hit
    r = np.concatenate([r[k], np.asarray(R, np.int64)])
    c = np.concatenate([c[k], np.asarray(C, np.int64)])
    sz = np.concatenate([sz[k], np.asarray(S, np.int64)])
    tf = np.concatenate([tf[k], np.asarray(F, np.float64)])
    tt = np.concatenate([tt[k], np.asarray(T, np.float64)])
    cont = np.concatenate([cont[k], np.asarray(K, bool)])
    o = np.argsort(r, kind="stable")   # by row; a row's ranges stay in time order
    return r[o], c[o], sz[o], tf[o], tt[o], cont[o]


def _release(pend, span: float, chunk: float):
    """(parts to process now, parts still waiting) of the arrivals waiting for a
    round: all of them, unless the newest tick pushed their span beyond one time
    chunk -- processed together they would be cut into two chunks, i.e. two
    rounds (the second a sliver of one tick), so the newest tick waits for the
    next round instead (its allowance is already credited)."""
    if len(pend) > 1 and span > chunk:
        return pend[:-1], pend[-1:]
    return pend, []


def _join_parts(parts):
    """[(batch, allowance)] waiting for a round, as one (batch, allowance)."""
    if len(parts) == 1:
        return parts[0]
    return concat_batches([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


class PTJoinGroup:
    """Several standing PT-Join queries over the same two streams, sharing one
    region index per stream (the summaries are stream-dependent, the queues
    query-dependent: paper section 2).

    ``cpu="shared"``: the queries share the CPU round robin in proportion to
    their ``weight`` -- each tick's allowance and the (single) ingest cost are
    split by weight.  ``cpu="separate"``: every query gets the whole
    allowance and pays the whole ingest, exactly as if it ran alone (used by
    the benchmarks to compare preferences on identical index states).

    On a wall clock the group's rounds wait like a single query's
    (:meth:`PTJoin._defer`): the arrivals are held (their allowance
    credited) while some query's account does not cover ``wall_rounds`` of
    its measured rounds, at most one time chunk / ``wall_defer`` seconds;
    ``finish`` processes what still waits.

    >>> from sketchql.data import generate_stores, interleave
    >>> from sketchql.approx import WorkBudget, replay
    >>> arr = interleave(generate_stores(2, duration=10.0, n_items=50, seed=4))
    >>> g = PTJoinGroup([PTJoin(5.0, "desc", weight=3), PTJoin(5.0, "weighted", weight=1)])
    >>> _ = replay(arr, {"g": g}, WorkBudget(units_per_arrival=20))
    >>> w = [q.stats()["work"] for q in g.queries]
    >>> bool(2.0 < w[0] / w[1] < 4.0)
    True
    """

    def __init__(self, queries, cpu: str = "shared"):
        if not queries:
            raise SketchQLError("PTJoinGroup: need at least one query")
        if cpu not in ("shared", "separate"):
            raise SketchQLError(f"PTJoinGroup: cpu must be 'shared' or 'separate', got {cpu!r}")
        self.queries = list(queries)
        self.cpu = cpu
        # the widest window's index; among those a query's other than desc (desc's private index
        # is laid out for desc: whole G1 zones, 1024 buckets; PTJoin.__init__)
        lead = max(self.queries, key=lambda q: (q.window, q.preference != "desc"))
        for q in self.queries:
            if q.streams != lead.streams or q.key != lead.key:
                raise SketchQLError("PTJoinGroup: all queries must join the same streams on the same key")
            q.sources = lead.sources
            q._dedup = PairSet() if any(s.may_repeat for s in lead.sources) else None
            q.wall_direct = False   # the group ingests once and plans every query (no direct rounds)
        self._lead = lead
        self._pend = []   # wall clock: arrivals waiting for a round (tick)
        w = np.array([q.weight for q in self.queries], np.float64)
        self.shares = w / w.sum() if cpu == "shared" else np.ones(len(self.queries))

    def set_wall_clock(self, on: bool = True) -> None:
        for q in self.queries:
            q.set_wall_clock(on)

    def tick(self, batch, allowance) -> None:
        allowance = np.broadcast_to(np.asarray(allowance, np.float64), (len(batch),))
        if len(batch) == 0:
            units = float(np.sum(allowance))
            for q, sh in zip(self.queries, self.shares):
                q._credit(units * sh)
            return
        credit = True
        if self._lead.wall:   # rounds wait for their cost, as a single query's (PTJoin._defer)
            units = float(np.sum(allowance))
            for q, sh in zip(self.queries, self.shares):
                q._credit(units * sh)
            self._pend.append((batch, allowance))
            span = float(batch.ts[-1]) - float(self._pend[0][0].ts[0])
            if any(q._round_waits() for q in self.queries) and span < min(q._defer_limit() for q in self.queries):
                for q in self.queries:
                    q._stats["deferred_ticks"] += 1
                return
            span_max = min(chunk_span(q.sources, q.window) for q in self.queries)
            parts, self._pend = _release(self._pend, span, span_max)
            batch, allowance = _join_parts(parts)
            credit = False
        self._run(batch, allowance, credit)

    def _run(self, batch, allowance, credit: bool) -> None:
        span = min(chunk_span(q.sources, q.window) for q in self.queries)
        for a, b in time_chunks(batch.ts, span):
            part = batch if (a == 0 and b == len(batch)) else batch.take(np.arange(a, b))
            self._tick_one(part, allowance[a:b], credit)

    def _tick_one(self, batch, allowance, credit: bool = True) -> None:
        """One chunk: the lead ingests once (the share of :mod:`.admission`
        that every query's account can pay), each query is charged its share
        of it, plans what its own account admits and probes."""
        units = float(np.sum(allowance))
        if credit:
            for q, sh in zip(self.queries, self.shares):
                q._credit(units * sh)
        clock = time.perf_counter
        lead = self._lead
        n = len(batch)
        f = min(ingest_fraction(units * sh, n, q._insert_price() * sh) for q, sh in zip(self.queries, self.shares))
        # the demand cap only if every query sheds by demand (the others need every value)
        f = min(f, max(q._demand_fraction(units * sh, n) for q, sh in zip(self.queries, self.shares)))
        t = clock()
        # the ingest cap draws on the tightest account: query q pays its share sh of each insert
        keep = lead.admit_ingest(batch, units, fraction=f,
                                 account=min(q.account / sh for q, sh in zip(self.queries, self.shares)))
        sides = lead.ingest(batch, keep)
        t_ingest = clock() - t
        cache = {}
        for q, sh in zip(self.queries, self.shares):
            t = clock()
            q.charge_ingest(sides, share=sh)
            if q is not lead and keep is not None:
                q._stats["shed"] += int((~keep).sum())
            if q.wall:
                q._calibrate_ingest(t_ingest * sh, sum(r.shape[0] for _, r in sides))
                q.account -= t_ingest * sh
            q.plan(batch, q.admit_plan(batch, sides), cache if q.window == lead.window else None)
            if q.wall:   # the shared ingest is split like the units
                dt = clock() - t
                q.account -= dt
                q._note_round(t_ingest * sh + dt)
            q.drain()
            q._note_debt()

    def finish(self) -> None:
        """Process the arrivals still waiting for a round (wall clock)."""
        if self._pend:
            parts, self._pend = self._pend, []
            self._run(*_join_parts(parts), credit=False)
        for q in self.queries:
            q.finish()

    def stats(self) -> dict:
        return {q.name: q.stats() for q in self.queries}
