"""Budget admission for the promising-tuple join: what a tick may start
before its work is charged, so that the account is never overdrawn by more
than one step.

A PT-Join tick does three kinds of work, all charged to one account
(``COSTS``: insert per ingested tuple, node per summary estimate, probe +
compare per cell scanned):

1. **ingest** -- the arrivals go into the region index (``insert`` each);
2. **plan** -- the promising regions of the arrivals are looked up
   (``node`` per estimate; about ``c_plan`` units per arrival, measured);
3. **probe** -- queued entries are scanned in preference order.

Rules (:class:`~.join.PTJoin`):

* *Ingest*: with ``n`` arrivals and income ``I`` (the tick's allowance), a
  share

      f = min(1, I / (2 n insert))

  of the arrivals is ingested: all of them as long as the budget brings at
  least two inserts' worth per arrival, otherwise half the income goes to
  ingest and the rest to planning and probing (a budget of 1 unit
  per tuple still buys output instead of only inserts).  The ingested ones
  are chosen by a seeded hash (:func:`keep_mask`): of the join *value* for
  desc/asc (a value is kept on both streams or on neither, so every kept
  probe can meet its kept partners: the output shrinks like ``f``, not
  ``f^2``), of the row id for weighted (a uniform sample of tuples keeps
  the output a uniform sample of pairs).
* *Cap*: a value sample keeps whole values, so its rows are ``f n`` only on
  average: on skewed values the kept ones can hold several times that
  (``WITHIN 0.1 PROBES PER TUPLE`` on ``generate_stores`` data kept 28 % of
  the arrivals for ``f = 0.05``: 2.8x the allowance charged in inserts
  alone, a debt of 352 units and no probe; one key with 40 % of the tuples
  at 0.5 units per tuple: 1.08x).  While ``f < 1`` the ingest -- inserts
  and the value heat's sample -- is therefore capped at
  :func:`ingest_cap` units, half the income (plus the rounding carried
  from earlier ticks, when the account covers it), and the kept rows
  beyond it are shed by :func:`cap_rows`: whole values in the order of
  their hash (the heaviest first for the value heat), the last one cut by
  a hash of the row id.  Measured with the cap, charged / allowance at
  0.1 / 0.25 units per tuple: 1.00-1.13 / 1.05-1.06 (the rest is the
  documented debt of one forced probe), the 40 % key 0.90-1.04, and the
  output > 0 at 0.1 (it was 0); at 1 unit per tuple asc kept 74 % of its
  arrivals for ``f = 0.5`` and now 50 %, its output 169 -> 306 pairs.
  ``bench_promising --quick`` is unchanged (its desc sheds by demand at
  ``f_in = 1``, where the cap does not apply).
* *Demand* (desc, ``PTJoin(demand_shed=True)``): the planned entries tell
  what a kept arrival costs to process in full -- ``D``, the mean
  estimated probe work (``probe + compare * cell size`` over its regions)
  queued per planned arrival.  When the
  tick's arrivals would queue far more work than its income can probe, the
  inserts of the excess only feed entries that are never probed; the share
  is then also capped at

      f_D = min(1, kappa I / (n D))      (:func:`demand_fraction`, kappa = 2.5)

  keeping whole values (a value is kept on both streams or on neither), the
  heaviest ones first (:mod:`.valueheat`: a value's pairs grow with the
  square of its arrivals, its inserts, lookups and cells only linearly), so
  the queue holds ``kappa`` times what the income can probe and desc still
  chooses the most promising half.  (kappa = 4 with a hash of the value
  measured 88-89 % of the Figure 11 bound at 10-20 ms, kappa = 2 with the
  heaviest values 92 %: with heavy values kept the choice matters less than
  the inserts and lookups of entries never probed.  kappa = 2 -> 2.5, full
  bench, desc output / bound at 10..100 ms: 96.5 / 97.6 / 97.6 / 97.4 / 95.7
  / 91.0 / 93.9 / 98.6 / 99.5 / 100.0 -> 96.5 / 97.5 / 97.5 / 97.0 / 95.2 /
  91.7 / 96.5 / 99.6 / 99.9 / 100.0 %: near the balance (70 ms: the budget
  covers the whole join on average, 14.6 % of it went unspent) kappa = 2
  shed 696 arrivals on bursts of heavy values; kappa = 3 gave 60 / 70 ms
  92.2 / 96.7 % but 50 ms 95.0 % and --quick 10 ms 95.8 %.  A slower mean of
  D (over ~20 ticks) instead: 70 ms 95.9 %, --quick 10 ms 95.3 % (D lags
  while the window fills).  The wall clock's direct rounds keep kappa = 2.)
  ``D`` is estimated from whole cells, but a bounded scan is charged only the
  window's part of a cell and its searches (:mod:`sketchql.index.cellscan`):
  on a unit budget ``D`` is scaled by what the probe batches were charged
  over what they were estimated (decayed per batch; 0.91 at 10 ms, 0.79 at
  60 ms, 0.71 at 70 ms), so that the queue holds kappa times the work the
  income can probe, not kappa times its estimate (issue 16, full bench desc
  / Figure 11 bound at 10..100 ms: 96.41 / 97.12 / 97.44 / 97.41 / 96.90 /
  94.58 / 98.13 / 99.67 / 99.91 / 99.99 -> 96.41 / 97.12 / 97.44 / 97.39 /
  96.67 / 95.17 / 98.39 / 99.80 / 99.94 / 99.99 %; 60 ms: 886 -> 373
  arrivals shed).  Every kept arrival is inserted and planned at the
  full price; the work saved is that of the arrivals not ingested.
* *Plan*: arrivals are planned only while their measured planning cost
  ``c_plan`` stays within half the account (:func:`plan_count`): planning
  never eats the whole budget, leaving nothing to probe.  Which
  ones: the ``k`` with the smallest seeded hash of their row id (a uniform
  sample).  The others wait in a planning backlog: once the queue is empty
  the account left (a later tick, idle time, a heartbeat) plans the newest
  of them that are still in the window; the operator keeps the unspent
  account meanwhile (it is not idle).
* *Probe*: a batch is cut where its estimated cost reaches the account
  (:meth:`~.join.PTJoin.drain`).

Nothing is started while the account is <= 0 (no planning, no probe), and
a probe batch keeps the longest prefix (priority order) whose cost -- the
cells' current sizes, exact in work units -- fits the account
(:meth:`~.join.PTJoin.drain`).  Two steps can still end a tick with a
negative account, the **carried debt**: a first entry that alone costs more
than the account is started anyway (skipping it would bias the preference:
weighted's sample, asc's order) -- at most that entry's cost,
``stats()["max_forced"]`` -- and a planning call is charged after the fact
(its ``node`` count is known once the index has been descended) -- at most
its excess over ``c_plan`` per arrival, ``stats()["max_plan_overrun"]``;
on a wall-clock budget also the timing noise of one batch.  While in debt
only the ingest runs, and it takes at most half of each tick's income
(the cap above, or all of it only when the income covers two inserts per
arrival), so the debt shrinks by at least half the income per tick and
never grows beyond one step's overrun.  Over any run: ``work charged <=
allowance granted + the debt carried at the end``, and ``stats()["debt_max"]
<= max(max_forced, max_plan_overrun)``.

Batches spanning more than the index keeps beyond the window are split in
time (:func:`time_chunks`, :func:`chunk_span`): ingesting a long batch at once
would let the index expire the partners of its first arrivals before they
are planned (the pairs near the window's edge went missing).

>>> time_chunks(np.array([0.0, 1.0, 2.5, 2.6, 9.0]), 2.0)
[(0, 2), (2, 4), (4, 5)]
>>> ingest_fraction(income=10.0, n=10, price=1.0)
0.5
>>> plan_count(account=7.0, n=10, plan_cost=1.0)
3
>>> demand_fraction(income=100.0, n=10, demand=80.0, margin=4.0)
0.5
"""
from __future__ import annotations

import math

import numpy as np

from ...summaries.hashing import hash64

_U53 = 2.0 ** -53


def time_chunks(ts, span: float) -> list:
    """[(a, b)] row ranges of non-decreasing ``ts`` whose time span is at most
    ``span`` (greedy from the first row; rows of one timestamp are never
    split); one range when the whole batch fits."""
    n = int(ts.shape[0])
    if n == 0:
        return []
    if not math.isfinite(span) or float(ts[-1]) - float(ts[0]) <= span:
        return [(0, n)]
    out, a = [], 0
    while a < n:
        b = int(np.searchsorted(ts, float(ts[a]) + span, "right"))
        b = max(b, a + 1)
        out.append((a, b))
        a = b
    return out


def retained_history(source) -> float:
    """Seconds of history a region source is guaranteed to keep behind its
    newest tuple: a :class:`~sketchql.index.StreamIndex` of granularity ``g``,
    rate ``r`` and depth ``d`` covers ``g (r^d - 1) / (r - 1)`` seconds, less up
    to one period of its last granularity right after a COLLAPSE; the mini
    index keeps ``keep`` seconds less one zone.  ``inf`` if unknown."""
    ix = getattr(source, "ix", None)
    decl = getattr(ix, "decl", None)
    if decl is not None and hasattr(decl, "depth") and hasattr(decl, "granularity"):
        g, r, d = float(decl.granularity), int(decl.rate), int(decl.depth)
        return g * (r ** (d - 1) - 1) / (r - 1) if r > 1 else g * (d - 1)
    keep = getattr(ix, "keep", None)
    if keep is not None:
        return float(keep) - float(getattr(ix, "zone_seconds", 0.0))
    return math.inf


def chunk_span(sources, window: float) -> float:
    """Longest time span one ingest+plan step may cover so that every
    arrival's window is still in the sources when it is planned: the history
    kept beyond the window and the open zone (``t1``); never below a quarter of
    ``t1`` (a source too short for its window loses pairs anyway).  ``inf``
    for a whole-stream window (its history is bounded by the index alone)."""
    if not math.isfinite(window):
        return math.inf
    spans = []
    for s in sources:
        t1 = float(getattr(s, "t1", 1.0))
        spans.append(max(retained_history(s) - window - t1, 0.25 * t1))
    return min(spans) if spans else math.inf


def ingest_fraction(income: float, n: int, price: float) -> float:
    """Share of ``n`` arrivals to ingest (module doc): ``min(1, I / (2 n p))``;
    1 when ingest is free or not calibrated (price 0)."""
    cost = n * price
    if n == 0 or not cost > 0:
        return 1.0
    return float(min(1.0, income / (2.0 * cost)))


def demand_fraction(income: float, n: int, demand: float | None, margin: float = 2.0) -> float:
    """Share of ``n`` arrivals worth ingesting when each kept one queues
    ``demand`` units of probe work and the tick brings ``income`` (module
    doc): ``min(1, margin I / (n D))``; 1 when the demand is unknown or 0."""
    if n == 0 or demand is None or not demand > 0 or not math.isfinite(income):
        return 1.0
    return float(min(1.0, margin * max(income, 0.0) / (n * demand)))


def admission_hash(x, seed: int) -> np.ndarray:
    """Seeded uniform hash in [0, 1) of join values or row ids (:func:`keep_mask`)."""
    return (hash64(np.asarray(x), int(seed), "pt admission") >> np.uint64(11)).astype(np.float64) * _U53


def keep_mask(keys, rids, f: float, seed: int, by_value: bool) -> np.ndarray | None:
    """Rows to ingest at share ``f``: ``u < f`` with ``u`` a seeded uniform
    hash of the join value (``by_value``) or of the row id; None = all."""
    if f >= 1.0:
        return None
    return admission_hash(keys if by_value else rids, seed) < f


def ingest_cap(income: float, account: float, price: float, carry: float = 0.0) -> float:
    """Most units a tick's ingest may charge while the ingest share is below
    1 (module doc, "Cap"): half the income plus the ``carry`` (the rounding
    left by earlier ticks, < one insert) as far as the account covers it,

        C = I/2 + min(carry, max(A - I/2, 0)),

    with ``A`` the account after the income was credited.  ``C <= max(I/2,
    A)``, so the ingest never deepens a debt: from ``A - I >= 0`` it ends at
    ``A - C >= 0``, from a debt ``D`` at ``-D + I/2`` at worst.

    >>> ingest_cap(income=10.0, account=10.0, price=1.0, carry=0.7)
    5.7
    >>> ingest_cap(income=10.0, account=5.2, price=1.0, carry=0.7)
    5.2
    """
    if not price > 0:
        return math.inf
    half = 0.5 * max(income, 0.0)
    return half + min(max(carry, 0.0), max(account - half, 0.0))


def cap_rows(keep, k: int, prio, tie) -> np.ndarray:
    """``keep`` (a row mask) limited to its ``k`` rows of smallest ``prio``,
    ties broken by the smaller ``tie`` (:func:`ingest_cap`: the rows beyond
    the income's share are shed; with ``prio`` the join value's hash, whole
    values are kept in hash order and only the last one is cut, by ``tie``, a
    hash of the row id).

    >>> cap_rows(np.array([True, True, False, True]), 2, np.array([0.5, 0.1, 0.0, 0.1]),
    ...          np.array([0.0, 0.9, 0.0, 0.2])).tolist()
    [False, True, False, True]
    """
    keep = np.asarray(keep, bool)
    idx = np.flatnonzero(keep)
    if idx.shape[0] <= k:
        return keep
    out = np.zeros(keep.shape[0], bool)
    if k > 0:
        o = np.lexsort((np.asarray(tie)[idx], np.asarray(prio)[idx]))
        out[idx[o[:k]]] = True
    return out


def plan_count(account: float, n: int, plan_cost: float, share: float = 0.5) -> int:
    """How many of ``n`` arrivals to plan: all if their planning takes at most
    ``share`` of the account, else ``floor(share * A / c_plan)`` -- the rest of
    the account stays for probing."""
    if not plan_cost > 0 or n * plan_cost <= share * account:
        return n
    return int(max(0.0, share * account) // plan_cost)


def plan_rows(rids, k: int, seed: int) -> np.ndarray:
    """Positions of the ``k`` rows with the smallest seeded hash of their row
    id (a uniform sample, in input order)."""
    n = int(np.asarray(rids).shape[0])
    if k >= n:
        return np.arange(n)
    if k <= 0:
        return np.zeros(0, np.int64)
    h = hash64(np.asarray(rids, np.int64), int(seed), "pt plan")
    return np.sort(np.argpartition(h, k - 1)[:k])


class _Columns:
    """A batch as plain columns (what :func:`concat_batches` returns)."""

    def __init__(self, cols: dict):
        self.__dict__.update(cols)

    def __len__(self):
        return int(self.ts.shape[0])

    def take(self, idx):
        return _Columns({k: v[idx] for k, v in self.__dict__.items()})


def concat_batches(batches):
    """Arrival batches (objects with equal-length numpy columns, e.g.
    :class:`sketchql.data.Arrivals`) joined in order into one.

    >>> b = concat_batches([_Columns({"ts": np.array([1.0])}), _Columns({"ts": np.array([2.0, 3.0])})])
    >>> len(b), b.ts.tolist()
    (3, [1.0, 2.0, 3.0])
    """
    cols = [{k: v for k, v in vars(b).items() if isinstance(v, np.ndarray)} for b in batches]
    return _Columns({k: np.concatenate([c[k] for c in cols]) for k in cols[0]})


class BatchTimer:
    """Wall clock: the real seconds of a probe batch fitted as ``c0 + c1 *
    units`` -- a fixed cost per batch (its Python and numpy calls) plus a cost
    per estimated work unit -- by least squares with exponential forgetting
    (``decay`` per batch).  A batch is then sized by what the account buys
    once the fixed part is paid, ``units = (A - c0) / c1``
    (:meth:`units`); a single seconds-per-unit ratio would charge the fixed
    part to every unit, size the next batches smaller, and so make the fixed
    part dominate ever more.  Guards against timing noise: ``c1`` is kept
    within [0.05, 1] times the plain ratio ``mean seconds / mean units`` and
    ``c0 >= 0``.

    >>> t = BatchTimer()
    >>> for u in (100, 1000, 5000, 200):
    ...     t.add(u, 0.002 + 1e-6 * u)
    >>> c0, c1 = t.fit()
    >>> round(c0, 6), round(c1 * 1e6, 3)
    (0.002, 1.0)
    >>> round(t.units(0.012))
    10000
    """

    def __init__(self, decay: float = 0.9):
        self.decay = float(decay)
        self.s = np.zeros(5)   # weights, sum x, sum y, sum xx, sum xy
        self.n = 0

    def add(self, units: float, seconds: float) -> None:
        u, y = float(units), float(seconds)
        if not (u > 0 and y >= 0):
            return
        self.s = self.decay * self.s + np.array([1.0, u, y, u * u, u * y])
        self.n += 1

    def fit(self):
        """(c0 seconds per batch, c1 seconds per unit); (0, None) before any batch."""
        w, sx, sy, sxx, sxy = self.s.tolist()
        if w <= 0 or sx <= 0:
            return 0.0, None
        mx, my = sx / w, sy / w
        ratio = my / mx
        var = sxx / w - mx * mx
        if var <= 1e-9 * mx * mx:
            return 0.0, ratio
        c1 = (sxy / w - mx * my) / var
        c1 = min(max(c1, 0.05 * ratio), ratio)
        c0 = max(0.0, my - c1 * mx)
        return c0, c1

    def units(self, account: float) -> float:
        """Estimated work units a batch can take with ``account`` seconds
        (0 if the account does not cover the fixed part; nan before any batch)."""
        c0, c1 = self.fit()
        if c1 is None:
            return math.nan
        return max(0.0, (account - c0) / c1)
