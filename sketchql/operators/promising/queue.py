"""The promising-tuple priority queue: (tuple, region, priority) entries
ordered by the query's preference.

Entries live in a columnar table (numpy arrays that grow); the heap holds
``(key, entry id)`` pairs.  The key encodes the preference:

* ``desc``: ``key = -priority`` -- highest priority first (most output);
* ``asc``: ``key = +priority`` -- lowest first (outliers).  ``push(...,
  tier=)`` puts entries in tiers: every tier-0 entry (the outliers) comes
  before any tier-1 entry, each tier in ascending priority (``key += tier *
  TIER``, ``TIER = 1e12`` above any tier-0 key: counts, or aged log-keys
  ``|log p - lambda t|`` far below it);
* ``weighted``: CPU divided among the promising tuples in proportion to
  their count estimates, so that the output is a near-random sample.  An
  entry of priority ``p = est * alpha^(i-1)`` yields about ``est`` pairs and
  (in a cell dominated by its value) costs about ``est`` units.  Entries are
  drawn in random order with weight ``p / est = alpha^(i-1)`` -- weighted
  sampling without replacement by exponential keys (Efraimidis-Spirakis:
  ``key = E / weight``, ``E ~ Exp(1)`` from a seeded generator, smallest key
  first) -- so every entry, hence every output pair, has the same chance to
  be produced (up to the fade), and the CPU an entry receives is on average
  proportional to its estimate.  (Drawing with weight ``p`` itself would
  over-represent frequent values quadratically; ``p / cost`` would penalize
  values sharing a bucket with a heavy hitter.)

Ties are broken by the newest probe tuple first, then by entry id.

**Aging** (``aging = lambda`` per second of event time, 0 = off).  A
priority fixed at enqueue time would let an entry queued a whole window ago
outrank a slightly less promising fresh one forever: under overload ``desc``
then works through old entries and produces almost none of the newest pairs.
With aging the *effective* priority of an entry queued at event time ``t``
is, at any later time ``now``::

    p_eff(now) = p * exp(-lambda * (now - t))          (desc, weighted)
    p_eff(now) = p * exp(+lambda * (now - t))          (asc: older = later)

and the heap key is the time-independent ``log p + lambda * t`` (negated
for desc), because ``log p_eff(now) = log p + lambda * t - lambda * now``
and the last term is common to every entry: the order of the keys is the
order of ``p_eff(now)`` for every ``now``, so aging needs no re-heapify.
(weighted: ``key = log E - log w - lambda * t``, i.e. the exponential-key
draw with the aged weight ``w * exp(-lambda (now - t))``.)

The default lambda (chosen by :class:`~.join.PTJoin`) ties aging to the fade
factor: ``lambda = -ln(alpha) / T1`` (T1 = length of the first
granularity), so an entry loses a factor ``alpha`` per ``T1`` seconds of
age -- the same rate at which a region's priority fades by ``alpha^(i-1)``
when it moves from granularity i to i+1 (exactly for the first step, faster
than the geometric granularity lengths later on).

**Memory.**  The order lives in a :class:`~.runheap.RunHeap` (sorted numpy
runs, 24 bytes per queued entry; a Python heap of tuples cost ~150), the
entries' columns in capacity-doubling numpy buffers.  An entry whose probe
tuple left the window can never produce a pair, so :meth:`EntryQueue.prune`
drops those from the order and, with ``compact=True``, drops the table's
prefix no queued entry refers to any more (positions shift down by the
returned count): the table then spans about one window of entries instead
of every entry ever queued.  :attr:`EntryQueue.nbytes` counts all of it.
Queues of several queries that queue the same entries (same shared index,
window and fade) can keep the columns once in a
:class:`~.entrytable.SharedEntryTable` (:meth:`EntryQueue.attach_table`):
each then holds 8 bytes per entry (its entry's global row) plus its order.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import SketchQLError
from .entrytable import LazyColumns, SharedEntryTable, append_columns
from .runheap import RunHeap

PREFERENCES = ("desc", "asc", "weighted")
_LAST = 1e300
#: key offset per tier (asc: outliers in tier 0 first, then the rest)
TIER = 1e12


def check_preference(pref: str) -> str:
    p = str(pref).lower()
    if p not in PREFERENCES:
        raise SketchQLError(f"PREFERENCE must be one of {PREFERENCES}, got {pref!r}")
    return p


class EntryQueue:
    """Columnar entry table + priority order.  ``push(cols, priority, cost)``, ``pop()``.

    ``aging``: lambda (1/seconds, >= 0) of the lazy exponential aging (module
    doc); ``push(..., t=event times)`` then ages the entries from ``t``.
    Entry ids are positions in the table (:meth:`arrays`); they stay valid
    until a compacting :meth:`prune`, which returns by how much they shift.

    >>> q = EntryQueue("desc", fields=("x",), aging=math.log(2))  # halves per second
    >>> _ = q.push({"x": np.array([0, 1])}, np.array([3.0, 2.0]), np.ones(2), np.array([0, 1]),
    ...            t=np.array([0.0, 1.0]))
    >>> q.pop()   # 3 * 2^-1 < 2 at any now >= 1: the fresher entry first
    1
    """

    def __init__(self, preference: str, seed: int = 0, fields=(), aging: float = 0.0):
        self.preference = check_preference(preference)
        if not (aging >= 0 and math.isfinite(aging)):
            raise SketchQLError(f"EntryQueue: aging must be a finite lambda >= 0 (1/s), got {aging!r}")
        self.aging = float(aging)
        self.rng = np.random.default_rng([int(seed), 0x9E11])
        self.fields = tuple(fields)
        self._buf: dict = {}
        self._cap = 0
        self._arrays = None
        self.n = 0
        self.heap = RunHeap()
        self._popped = _EMPTY_POP
        self.counts = {"pushed": 0, "pruned": 0, "compacted": 0, "compactions": 0}
        self.table = None          # a SharedEntryTable (attach_table) instead of private columns
        self._map = None           # entry id -> global row of the shared table (capacity buffer)

    def attach_table(self, table: SharedEntryTable) -> None:
        """Keep the entries' columns in ``table`` (shared with other queues) from now on; the
        queue must still be empty.  Pop order and ids are those of a private queue."""
        if self.n:
            raise SketchQLError("EntryQueue.attach_table: the queue already holds entries")
        if tuple(table.fields) != self.fields:
            raise SketchQLError(f"EntryQueue.attach_table: table fields {table.fields} != {self.fields}")
        table.attach(self)
        self.table = table
        self._map = np.zeros(1024, np.int64)
        self._buf, self._cap = {}, 0

    def mapped_rows(self) -> np.ndarray:
        """Global table rows of the entries this queue holds (shared table mode)."""
        return self._map[: self.n] if self._map is not None else np.zeros(0, np.int64)

    def _store(self, cols: dict, k: int) -> np.ndarray:
        """Append k entries' columns; return their entry ids.  Columns live in
        capacity-doubling buffers (amortized O(1) per entry, no re-concatenation
        of the whole table per tick)."""
        n = self.n
        if self.table is not None:
            rows = self.table.store(cols, k)
            if n + k > self._map.shape[0]:
                nm = np.zeros(max(2 * self._map.shape[0], n + k), np.int64)
                nm[:n] = self._map[:n]
                self._map = nm
            self._map[n:n + k] = rows
            self.n = n + k
            self.counts["pushed"] += k
            return np.arange(n, n + k)
        self._cap = append_columns(self._buf, self.fields, self._cap, n, cols, k)
        self._arrays = None
        ids = np.arange(n, n + k)
        self.n = n + k
        self.counts["pushed"] += k
        return ids

    def push(self, cols: dict, priority: np.ndarray, cost: np.ndarray, newest: np.ndarray,
             weight: np.ndarray | None = None, t: np.ndarray | None = None,
             stratum: np.ndarray | None = None, tier: np.ndarray | None = None) -> int:
        """Queue entries; ``weight`` (weighted preference only) is the
        sampling weight, default ``priority / cost``; ``t`` the entries'
        event times (aging; required when ``aging > 0``); ``stratum``
        (weighted only, uint64 codes, e.g. a hash of the join value): draw
        the exponential keys stratified per code (:meth:`_stratified_exponential`)
        instead of independently; ``tier`` (int per entry, default 0): every
        entry of a lower tier is popped before any of a higher one."""
        k = int(priority.shape[0])
        if k == 0:
            return 0
        lam = self.aging
        if lam > 0 and t is None:
            raise SketchQLError("EntryQueue.push: aging > 0 needs the entries' event times t")
        ids = self._store(cols, k)
        priority = np.asarray(priority, np.float64)
        if self.preference == "desc":
            key = -priority if lam == 0 else -(np.log(np.maximum(priority, 1e-300)) + lam * np.asarray(t, np.float64))
        elif self.preference == "asc":
            key = priority.copy() if lam == 0 else np.log(np.maximum(priority, 1e-300)) - lam * np.asarray(t, np.float64)
        else:
            w = np.maximum(priority, 1e-12) / np.maximum(cost, 1.0) if weight is None else weight
            e = self.rng.exponential(size=k) if stratum is None else self._stratified_exponential(stratum)
            if lam == 0:
                key = e / np.maximum(w, 1e-300)
            else:
                key = (np.log(np.maximum(e, 1e-300)) - np.log(np.maximum(w, 1e-300))
                       - lam * np.asarray(t, np.float64))
        if tier is not None:
            key = key + np.asarray(tier, np.float64) * TIER
        self.heap.push(key, -np.asarray(newest, np.int64), ids)
        return k

    def _stratified_exponential(self, stratum: np.ndarray) -> np.ndarray:
        """Exp(1) draws that are low-discrepancy within each stratum.

        The j-th entry ever pushed with code c gets ``u = frac(off(c) + j*phi)``
        (phi = golden-ratio conjugate, ``off(c)`` = the top 53 bits of c as a
        fraction) and ``E = -log(1 - u)``.  Each u is uniform over the choice
        of offset, so the key ``E / w`` keeps the Efraimidis-Spirakis order
        in distribution; but within a stratum the u's of a Weyl sequence are
        evenly spread, so for any cut ``key < tau`` (what a budget pops) the
        number of a stratum's entries taken is ``n_c * P(E/w < tau)`` within
        O(log n_c) instead of a binomial O(sqrt(n_c)) -- stratified
        sampling.  With the join value as stratum, the per-value share of the
        output (hence its histogram) varies much less than under independent
        draws.

        >>> q = EntryQueue("weighted", fields=("x",))
        >>> u = 1 - np.exp(-q._stratified_exponential(np.zeros(1000, np.uint64)))
        >>> bool(abs((u < 0.3).sum() - 300) <= 3)
        True
        """
        c = np.asarray(stratum, np.uint64)
        uk, inv = np.unique(c, return_inverse=True)
        order = np.argsort(inv, kind="stable")
        first = np.searchsorted(inv[order], np.arange(uk.shape[0]))
        rank = np.empty(c.shape[0], np.int64)
        rank[order] = np.arange(c.shape[0]) - np.repeat(first, np.bincount(inv, minlength=uk.shape[0]))
        keys = getattr(self, "_strata_keys", np.zeros(0, np.uint64))
        if keys.shape[0] > (1 << 20):      # bounded memory: start the sequences afresh
            keys = np.zeros(0, np.uint64)
        counts = getattr(self, "_strata_counts", np.zeros(0, np.int64))[: keys.shape[0]]
        pos = np.searchsorted(keys, uk)
        found = (pos < keys.shape[0]) & (keys[np.minimum(pos, max(keys.shape[0] - 1, 0))] == uk) \
            if keys.shape[0] else np.zeros(uk.shape[0], bool)
        base = np.where(found, counts[np.minimum(pos, max(counts.shape[0] - 1, 0))] if counts.shape[0] else 0, 0)
        j = base[inv] + rank
        n_new = np.bincount(inv, minlength=uk.shape[0])
        if found.all():
            counts = counts.copy()
            counts[pos] += n_new
        else:
            allk = np.concatenate([keys, uk[~found]])
            allc = np.concatenate([counts, np.zeros(int((~found).sum()), np.int64)])
            o = np.argsort(allk, kind="stable")
            keys, counts = allk[o], allc[o]
            counts[np.searchsorted(keys, uk)] += n_new
        self._strata_keys, self._strata_counts = keys, counts
        off = (c >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        u = np.mod(off + j.astype(np.float64) * 0.6180339887498949, 1.0)
        return -np.log1p(-u)

    def push_last(self, cols: dict, newest: np.ndarray) -> int:
        """Entries processed after every regular entry (whatever the
        preference): the "when idle" sweep of non-promising regions."""
        k = int(np.asarray(newest).shape[0])
        if k == 0:
            return 0
        ids = self._store(cols, k)
        self.heap.push(np.full(k, _LAST), -np.asarray(newest, np.int64), ids)
        return k

    def arrays(self) -> dict:
        """Columns of every entry in the table (views, valid until the next push or compaction;
        on a shared table: a snapshot, each column gathered on first access)."""
        if self.table is not None:
            return LazyColumns(self.table, self._map[: self.n], self.fields)
        if self._arrays is None:
            self._arrays = {f: (self._buf[f][: self.n] if f in self._buf else np.zeros(0)) for f in self.fields}
        return self._arrays

    def pop(self) -> int:
        """The next entry id (leaves :meth:`unpop`'s memory of the last batch alone)."""
        if not len(self.heap):
            raise IndexError("pop from an empty EntryQueue")
        return int(self.heap.pop_many(1)[2][0])

    def pop_many(self, k: int) -> np.ndarray:
        """The next ``min(k, len)`` entry ids, in the order ``k`` successive
        :meth:`pop` calls would return them (same keys, so the aging and,
        for ``weighted``, the exponential-key draw made at push time apply
        unchanged: the k smallest keys of an Efraimidis-Spirakis draw *are*
        k successive weighted draws without replacement).  The popped items
        are kept until the next ``pop_many`` so that :meth:`unpop_last` can
        put back a tail of them (a batch cut short by the budget) -- the
        queue is then exactly as if they never left it.

        >>> q = EntryQueue("desc", fields=("x",))
        >>> _ = q.push({"x": np.arange(4)}, np.array([1.0, 4.0, 3.0, 2.0]), np.ones(4), np.arange(4))
        >>> q.pop_many(3).tolist()
        [1, 2, 3]
        >>> q.unpop_last(2); [q.pop() for _ in range(len(q))]
        [2, 3, 0]
        """
        self._popped = self.heap.pop_many(k)
        return self._popped[2]

    def unpop_last(self, m: int) -> None:
        """Put the last ``m`` items of the latest :meth:`pop_many` back."""
        if m <= 0:
            return
        key, tie, ids = self._popped
        c = ids.shape[0] - min(int(m), ids.shape[0])
        self.heap.push_sorted(key[c:], tie[c:], ids[c:])   # a tail of a sorted batch is sorted
        self._popped = (key[:c], tie[:c], ids[:c])

    def unpop(self, back) -> None:
        """Put back the items of the latest :meth:`pop_many` where ``back``
        (bool per popped item) is True -- same keys, so the queue is as if
        they never left it.

        >>> q = EntryQueue("desc", fields=("x",))
        >>> _ = q.push({"x": np.arange(4)}, np.array([1.0, 4.0, 3.0, 2.0]), np.ones(4), np.arange(4))
        >>> q.pop_many(3).tolist()
        [1, 2, 3]
        >>> q.unpop(np.array([True, False, True])); [q.pop() for _ in range(len(q))]
        [1, 3, 0]
        """
        back = np.asarray(back, bool)
        key, tie, ids = self._popped
        self.heap.push_sorted(key[back], tie[back], ids[back])   # a subsequence of a sorted batch
        self._popped = (key[~back], tie[~back], ids[~back])

    def __len__(self):
        return len(self.heap)

    def prune(self, alive, compact: bool = False) -> int:
        """Drop queued entries for which ``alive(entry_ids) -> bool array`` is
        False.  ``compact``: then also drop the table's prefix before the
        oldest queued entry (when it is at least a quarter of the table) into
        fresh buffers sized to what is left -- earlier :meth:`arrays` stay
        valid as snapshots; every entry id shifts down by the returned count
        (0: nothing moved), which the caller applies to ids it keeps.

        >>> q = EntryQueue("desc", fields=("t",))
        >>> _ = q.push({"t": np.arange(8.0)}, np.ones(8), np.ones(8), np.arange(8))
        >>> q.prune(lambda ids: q.arrays()["t"][ids] >= 5, compact=True)   # entries 0..4 left the window
        5
        >>> q.arrays()["t"].tolist(), sorted(q.pop_many(8).tolist())
        ([5.0, 6.0, 7.0], [0, 1, 2])
        """
        if len(self.heap):
            self.counts["pruned"] += self.heap.filter(alive)
        if not compact or not self.n:
            return 0
        cut = int(self.heap.ids().min()) if len(self.heap) else self.n
        if cut <= 0 or 4 * cut < self.n:
            return 0
        left = self.n - cut
        cap = max(1024, left + left // 2)
        if self.table is not None:
            nm = np.zeros(cap, np.int64)
            nm[:left] = self._map[cut:self.n]
            self._map = nm
        for f, b in self._buf.items():
            nb = np.zeros(cap, b.dtype)
            nb[:left] = b[cut:self.n]
            self._buf[f] = nb
        self._cap, self.n, self._arrays = cap, left, None
        if self.table is not None:
            self.table.compact()
        self.heap.shift(cut)
        self._popped = _EMPTY_POP
        self.counts["compacted"] += cut
        self.counts["compactions"] += 1
        return cut

    @property
    def nbytes(self) -> int:
        """Bytes held: the entry table (allocated capacity; on a shared table only this queue's row
        map -- the table's own bytes are the table's), the order, the last popped batch, the strata."""
        nb = sum(b.nbytes for b in self._buf.values()) + self.heap.nbytes + sum(a.nbytes for a in self._popped)
        if self._map is not None:
            nb += self._map.nbytes
        for a in (getattr(self, "_strata_keys", None), getattr(self, "_strata_counts", None)):
            if a is not None:
                nb += a.nbytes
        return int(nb)

    def stats(self) -> dict:
        """Queued entries (``entries``), preference, aging, table rows / capacity, bytes and what
        pruning dropped (the queue's control table, :mod:`sketchql.engine.control_tables`)."""
        nb = self.nbytes
        d = dict(self.counts, entries=len(self.heap), queued=len(self.heap), preference=self.preference,
                 aging=self.aging, table_rows=self.n, table_capacity=self._cap, nbytes=nb, bytes=nb)
        if self.table is not None:
            d["shared_table"] = self.table.stats()
        return d


_EMPTY_POP = (np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64))
