"""One granularity's cells and the pyramid (multi-resolution index) over them.

Leaves: ``levels[0][slot]`` is the (B, d, w) int64 table of the zone in
``slot``: B count sketches (one per value bucket) sharing the same hash
functions, so one ``np.bincount`` over the flattened (bucket, row, column)
index updates all cells of a zone at once.  Level l node j holds the sum of
leaves ``j*2^l .. (j+1)*2^l - 1`` (paper section 3.4: upper cells hold the
Add() of the summaries below plus pointers, here implicit: children of node
j are 2j and 2j+1).  Because count sketches are linear, a node is exactly the
count sketch of the union of its leaves, and expiry is an exact Subtract()
along the leaf's path to the root.

A lookup for value x in bucket b starts at the root, estimates x in the node
(median over rows of sign * counter) and descends only into children whose
estimate is not negligible (see ``StreamIndex.promising_regions``).

>>> import numpy as np
>>> g = Granularity(index=1, cap=2, shape=(1, 1, 4))
>>> g.add(1, np.ones((1, 1, 4), dtype=np.int64))
>>> int(g.levels[1][0].sum())
4
>>> g.remove(1); int(g.levels[1][0].sum())
0
"""
from __future__ import annotations

import numpy as np

from .zone import Zone


def _pow2(n: int) -> int:
    c = 1
    while c < n:
        c *= 2
    return c


class Granularity:
    """Granularity G_index: ``cap`` zone slots and their pyramid.

    ``shape`` = (B, d, w) of a zone table, or None for structure T1 (no sketches).
    ``period_start``: start of the aligned period whose data G_index holds
    (None when empty; unused for the last granularity, which is a ring).
    """

    def __init__(self, index: int, cap: int, shape):
        self.index = index
        self.shape = shape
        self.cap = _pow2(max(1, cap))
        self.slots: list[Zone | None] = [None] * self.cap
        self.period_start: float | None = None
        self.levels: list[np.ndarray] = []
        self._f2: list[np.ndarray] = []
        self._dirty: list[np.ndarray] = []
        if shape is not None:
            self._alloc()

    # -- storage -----------------------------------------------------------------
    def _alloc(self):
        self.levels, self._f2, self._dirty = [], [], []
        n = self.cap
        while True:
            self.levels.append(np.zeros((n,) + tuple(self.shape), dtype=np.int64))
            self._f2.append(np.zeros((n, self.shape[0])))
            self._dirty.append(np.ones(n, dtype=bool))
            if n == 1:
                break
            n //= 2

    def grow(self, need: int) -> None:
        """Make room for ``need`` slots (doubling; rebuilds the upper levels)."""
        if need <= self.cap:
            return
        old = self.cap
        self.cap = _pow2(need)
        self.slots.extend([None] * (self.cap - old))
        if self.shape is None:
            return
        leaves = self.levels[0]
        self._alloc()
        self.levels[0][:old] = leaves
        self._rebuild()

    def _rebuild(self):
        for l in range(1, len(self.levels)):
            below = self.levels[l - 1]
            self.levels[l][...] = below[0::2] + below[1::2]
        for dmask in self._dirty:
            dmask[:] = True

    @property
    def height(self) -> int:
        return len(self.levels) - 1 if self.levels else 0

    # -- updates -------------------------------------------------------------------
    def add(self, slot: int, delta: np.ndarray) -> None:
        """Add a (B, d, w) delta to a leaf and every ancestor."""
        for l, lev in enumerate(self.levels):
            lev[slot >> l] += delta
            self._dirty[l][slot >> l] = True

    def remove(self, slot: int) -> None:
        """Subtract a leaf from its ancestors (expiry) and zero it."""
        if self.shape is None:
            self.slots[slot] = None
            return
        delta = self.levels[0][slot].copy()
        for l, lev in enumerate(self.levels):
            lev[slot >> l] -= delta
            self._dirty[l][slot >> l] = True
        self.slots[slot] = None

    def clear(self) -> None:
        self.slots = [None] * self.cap
        self.period_start = None
        for lev in self.levels:
            lev[...] = 0
        for dmask in self._dirty:
            dmask[:] = True

    def zones(self) -> list[Zone]:
        """Live zones, oldest first."""
        return sorted((z for z in self.slots if z is not None), key=lambda z: (z.start, z.slot))

    def free_slot(self) -> int | None:
        for i, z in enumerate(self.slots):
            if z is None:
                return i
        return None

    # -- queries -------------------------------------------------------------------
    def f2(self, level: int) -> np.ndarray:
        """(nodes, B) F2 estimates (median over rows of the row's squared norm)."""
        dirty = self._dirty[level]
        if dirty.any():
            nodes = np.flatnonzero(dirty)
            t = self.levels[level][nodes]
            rows = np.einsum("nbdw,nbdw->nbd", t, t)
            d = rows.shape[2]
            rows.sort(axis=2)
            self._f2[level][nodes] = rows[:, :, d // 2] if d % 2 else 0.5 * (rows[:, :, d // 2 - 1] + rows[:, :, d // 2])
            dirty[:] = False
        return self._f2[level]

    def node_ranges(self):
        """Per level: (min_ts, max_ts, n_tuples) arrays over nodes."""
        lo = np.array([z.min_ts if z is not None else np.inf for z in self.slots])
        hi = np.array([z.max_ts if z is not None else -np.inf for z in self.slots])
        nn = np.array([z.n if z is not None else 0 for z in self.slots], dtype=np.int64)
        out = [(lo, hi, nn)]
        while len(lo) > 1:
            lo = np.minimum(lo[0::2], lo[1::2])
            hi = np.maximum(hi[0::2], hi[1::2])
            nn = nn[0::2] + nn[1::2]
            out.append((lo, hi, nn))
        return out

    @property
    def nbytes(self) -> int:
        return sum(l.nbytes for l in self.levels) + sum(z.nbytes for z in self.slots if z is not None)
