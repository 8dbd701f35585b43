"""The maintained result relation: a multiset of rows kept from +1/-1 changes."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..operators.changes import Batch, Changes, mix_rids


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
