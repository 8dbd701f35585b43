"""Vectorized set of int64 keys (the join's duplicate filter).

A log-structured set: the keys seen so far are kept in a few sorted, unique
numpy arrays ("levels") whose sizes at least double from the newest to the
oldest.  ``add_new(keys)`` answers membership with one ``searchsorted`` per
level, appends the batch's new keys as a new level and merges the newest
levels while a level is at least half the size of the one before it, so
every key is merged O(log n) times (amortized O(log n) per key, all in
numpy: no per-key Python work) and there are at most ~log2(n) levels.

>>> s = PairSet()
>>> s.add_new(np.array([5, 3, 5, 9])).tolist()     # first occurrences only
[True, True, False, True]
>>> s.add_new(np.array([9, 1])).tolist()
[False, True]
>>> len(s)
4
"""
from __future__ import annotations

import numpy as np


class PairSet:
    """Set of int64 keys with a batched insert-and-test (module doc)."""

    def __init__(self):
        self.levels: list[np.ndarray] = []

    def __len__(self) -> int:
        return int(sum(a.shape[0] for a in self.levels))

    def contains(self, keys: np.ndarray) -> np.ndarray:
        keys = np.asarray(keys, np.int64)
        seen = np.zeros(keys.shape[0], bool)
        for lv in self.levels:
            i = np.searchsorted(lv, keys)
            i[i == lv.shape[0]] = 0
            seen |= lv[i] == keys
        return seen

    def add_new(self, keys: np.ndarray) -> np.ndarray:
        """Mask of the keys not seen before (earlier in the set or earlier in
        this batch); those keys are added."""
        keys = np.asarray(keys, np.int64)
        n = keys.shape[0]
        if n == 0:
            return np.zeros(0, bool)
        u, first = np.unique(keys, return_index=True)
        if self.levels:
            new = ~self.contains(u)
            u, first = u[new], first[new]
        fresh = np.zeros(n, bool)
        fresh[first] = True
        if u.shape[0]:
            self.levels.append(u)
            lv = self.levels
            while len(lv) > 1 and 2 * lv[-1].shape[0] >= lv[-2].shape[0]:
                b = lv.pop()
                a = lv.pop()
                m = np.concatenate([a, b])
                m.sort(kind="stable")   # two sorted runs: a linear merge
                lv.append(m)
        return fresh

    def keep(self, alive) -> None:
        """Drop the keys for which ``alive(keys) -> bool array`` is False."""
        self.levels = [a for a in (lv[alive(lv)] for lv in self.levels) if a.shape[0]]
