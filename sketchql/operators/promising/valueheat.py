"""Which join values are heavy: the admission of desc's demand shedding.

When desc's budget can probe only a share ``f`` of the arrivals' work
(:func:`.admission.demand_fraction`), it keeps whole join values (a value is
ingested on both streams or on neither, so every kept probe still meets its
kept partners).  Which values to keep matters: a value ``v`` with ``n_v``
arrivals per window costs ``~ n_v`` inserts, ``~ n_v`` summary lookups and
cells opened, and buys ``~ n_v^2`` pairs (one compare each), so the output
per unit of overhead grows with ``n_v``.  Keeping the *heaviest* values that
hold a share ``f`` of the arrivals spends the overhead where it buys the
most pairs -- desc's own order ("the most promising first") applied to
admission, where a hash of the value keeps a random share of light and
heavy values alike.

:class:`ValueHeat` estimates the values' weights from a systematic sample
of the arrivals (every ``stride``-th row id): each sampled arrival adds 1 to
the counter of its value's slot (a seeded hash into ``slots`` counters);
counters decay by ``2^(-dt / half_life)`` of event time (popularity
drifts).  The caller charges one ``insert`` per sampled arrival (the sample
is a small hash table of counters), i.e. ``1 / stride`` per arrival, out of
the ingest's share of the income (:func:`.admission.ingest_cap`; a tick whose
share cannot pay its sample counts nothing).  The
default stride 64 counts ~3 arrivals a second at 200 arrivals/s, enough to
rank the few values that carry most pairs; a stride of 16 spent 0.6 % of
desc's budget at 10 ms on the sample alone (``bench_promising``: desc / bound
93.7 % with 16, 94.1 % with 64; 32: 93.8 %).
:meth:`ValueHeat.keep` then keeps the arrivals whose slot is among the
heaviest slots holding a share ``f`` of the counted mass (the slot that
crosses ``f`` included).  Values never sampled are kept only when ``f``
covers every counted slot.

>>> import numpy as np
>>> h = ValueHeat(seed=1, stride=1, half_life=100.0)
>>> keys = np.array([1] * 60 + [2] * 30 + [3] * 10)
>>> h.observe(keys, np.arange(100), 0.0)
100
>>> m = h.keep(keys, 0.6)
>>> sorted(set(keys[m].tolist()))
[1]
>>> sorted(set(keys[h.keep(keys, 0.65)].tolist()))
[1, 2]
"""
from __future__ import annotations

import math

import numpy as np

from ...summaries.hashing import hash64


class ValueHeat:
    """Decayed counts of a sample of the arrivals per join-value slot (module doc).

    Parameters: ``seed`` (slot hash), ``slots`` (counters), ``stride``
    (every stride-th row id is counted), ``half_life`` (event seconds).
    """

    def __init__(self, seed: int = 0, slots: int = 4096, stride: int = 64, half_life: float = 30.0):
        if slots < 1 or stride < 1 or not (half_life > 0):
            raise ValueError(f"ValueHeat: need slots >= 1, stride >= 1, half_life > 0; got "
                             f"{slots!r}, {stride!r}, {half_life!r}")
        self.seed = int(seed)
        self.slots = int(slots)
        self.stride = int(stride)
        self.half_life = float(half_life)
        self.counts = np.zeros(self.slots)
        self.t = -math.inf

    def slot(self, keys) -> np.ndarray:
        return (hash64(np.asarray(keys), self.seed, "pt value heat") % np.uint64(self.slots)).astype(np.int64)

    def sampled(self, rids) -> int:
        """How many of ``rids`` :meth:`observe` would count (its cost, known
        before counting: the caller pays it out of the ingest's share)."""
        return int((np.asarray(rids, np.int64) % self.stride == 0).sum())

    def observe(self, keys, rids, t: float) -> int:
        """Count the sampled arrivals (``rid % stride == 0``) at event time
        ``t`` (after decaying the counters to ``t``); returns how many were counted."""
        if math.isfinite(self.t) and t > self.t:
            self.counts *= 2.0 ** (-(t - self.t) / self.half_life)
        self.t = max(self.t, float(t))
        rids = np.asarray(rids, np.int64)
        s = rids % self.stride == 0
        k = int(s.sum())
        if k:
            np.add.at(self.counts, self.slot(np.asarray(keys)[s]), 1.0)
        return k

    def keep(self, keys, f: float):
        """Mask of ``keys`` in the heaviest slots holding share ``f`` of the
        counted mass; None (keep all) if ``f >= 1``, no mask (``None``) either
        when nothing was counted yet -- the caller then falls back to a hash."""
        if f >= 1.0:
            return None
        total = float(self.counts.sum())
        if not total > 0:
            return None
        order = np.argsort(-self.counts, kind="stable")
        cum = np.cumsum(self.counts[order])
        k = min(int(np.searchsorted(cum, max(f, 0.0) * total, "left")) + 1, self.slots)
        hot = np.zeros(self.slots, bool)
        hot[order[:k]] = True
        hot &= self.counts > 0
        return hot[self.slot(keys)]
