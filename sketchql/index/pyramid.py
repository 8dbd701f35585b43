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

from . import kernels
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

    Storage: all levels live in one array ``store`` of shape (2 cap - 1, B, d, w)
    (level 0 first, the root last); ``levels[l]`` is a view of its slice, so
    the index can gather any set of nodes of any level with one fancy index
    (and can bind the stores of all granularities into one buffer, see
    :meth:`bind`).  ``rownorm[node, b, r]`` is the exact squared norm of row r of
    the bucket-b sketch of a node, kept up to date incrementally by
    :meth:`add_sparse` and recomputed lazily for nodes changed densely;
    ``f2`` is the median over rows (the F2 estimate used for pruning).
    ``version`` increases with every change, ``sversion`` with every change
    other than appending tuples to a zone (query-side caches key on them).
    """

    def __init__(self, index: int, cap: int, shape):
        self.index = index
        self.shape = shape
        self.cap = _pow2(max(1, cap))
        self.slots: list[Zone | None] = [None] * self.cap
        self.period_start: float | None = None
        self.levels: list[np.ndarray] = []
        self.store = None
        self.version = 0              # any change
        self.sversion = 0             # structural change (anything but appends to zones)
        self.last_append = None       # zone id of the latest append, and how often that zone changed
        self.append_switches = 0
        if shape is not None:
            self._alloc()

    # -- storage -----------------------------------------------------------------
    def level_offsets(self) -> list[int]:
        """Index in ``store`` of the first node of each level."""
        offs, o, n = [], 0, self.cap
        while True:
            offs.append(o)
            o += n
            if n == 1:
                return offs
            n //= 2

    @property
    def n_nodes(self) -> int:
        return 2 * self.cap - 1

    def _alloc(self):
        self.set_store(np.zeros((self.n_nodes,) + tuple(self.shape), dtype=np.int64))

    def set_store(self, store: np.ndarray) -> None:
        """Use ``store`` (n_nodes, B, d, w) as the node tables; re-slice the level views."""
        self.store = store
        self.shape = tuple(store.shape[1:])
        self._slice_levels()
        B, d, _ = self.shape
        self.rownorm = np.zeros((self.n_nodes, B, d), dtype=np.int64)
        self._norm_dirty = np.ones(self.n_nodes, dtype=bool)
        self._f2 = np.zeros((self.n_nodes, B))
        self._f2_stale = np.ones(self.n_nodes, dtype=bool)
        self._path_cache = {}
        self.sversion += 1
        self.version += 1

    def _slice_levels(self) -> None:
        """``levels``: one view of ``store`` per pyramid level."""
        self.levels = [self.store[o:o + (self.cap >> l)] for l, o in enumerate(self.level_offsets())]

    def _sum_up(self, store: np.ndarray) -> None:
        """Fill the upper levels of ``store`` with the sums of their children (in place)."""
        levs = [store[o:o + (self.cap >> l)] for l, o in enumerate(self.level_offsets())]
        for l in range(1, len(levs)):
            levs[l][...] = levs[l - 1][0::2] + levs[l - 1][1::2]

    def __getstate__(self):
        """The levels are views of ``store`` (pickle would copy them apart): rebuilt on restore.
        Every inner node is the exact (int64) sum of its children, so only the non-zero leaves
        are written (checked: a store that is not such a pyramid is written whole)."""
        s = self.__dict__.copy()
        s["levels"] = None
        st = self.store
        if st is not None:
            rebuilt = st.copy()
            self._sum_up(rebuilt)
            if np.array_equal(rebuilt, st):
                leaves = st[:self.cap]
                nz = np.flatnonzero(leaves.reshape(self.cap, -1).any(axis=1))
                s["store"] = ("leaves", st.shape, nz, leaves[nz])
        return s

    def __setstate__(self, s):
        self.__dict__.update(s)
        st = self.store
        if isinstance(st, tuple):
            _, shape, nz, tabs = st
            st = np.zeros(shape, dtype=np.int64)
            st[nz] = tabs
            self._sum_up(st)
            self.store = st
        if self.store is not None:
            self._slice_levels()
        else:
            self.levels = []

    def bind(self, buf: np.ndarray) -> None:
        """Move the node tables into ``buf`` (a view of a shared buffer), keeping norms."""
        buf[...] = self.store
        rn, nd, f2, st = self.rownorm, self._norm_dirty, self._f2, self._f2_stale
        self.set_store(buf)
        self.rownorm, self._norm_dirty, self._f2, self._f2_stale = rn, nd, f2, st

    def grow(self, need: int) -> None:
        """Make room for ``need`` slots (doubling; rebuilds the upper levels)."""
        if need <= self.cap:
            return
        old = self.cap
        self.cap = _pow2(need)
        self.slots.extend([None] * (self.cap - old))
        self.sversion += 1
        self.version += 1
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
        self._touch_all()

    def _touch_all(self):
        self.sversion += 1
        self.version += 1
        if self.store is not None:
            self._norm_dirty[:] = True
            self._f2_stale[:] = True

    @property
    def height(self) -> int:
        return len(self.levels) - 1 if self.levels else 0

    def path(self, slot: int) -> np.ndarray:
        """Store indexes of the leaf ``slot`` and all its ancestors (leaf first)."""
        p = self._path_cache.get(slot)
        if p is None:
            p = np.array([o + (slot >> l) for l, o in enumerate(self.level_offsets())], dtype=np.int64)
            self._path_cache[slot] = p
        return p

    # -- updates -------------------------------------------------------------------
    def add(self, slot: int, delta: np.ndarray) -> None:
        """Add a (B, d, w) delta to a leaf and every ancestor (compiled: with their row norms
        recomputed in the same pass, :func:`kernels.add_dense`; numpy: norms recomputed lazily)."""
        p = self.path(slot)
        if not self._add_dense(p, delta, 1):
            for l, lev in enumerate(self.levels):
                lev[slot >> l] += delta
            self._norm_dirty[p] = True
        self._f2_stale[p] = True
        self.version += 1

    def _add_dense(self, p, delta, sign: int) -> bool:
        """``store[p] += sign * delta`` and exact row norms of ``p`` in one compiled pass; False (nothing
        done) without the kernels or for a delta that is not an int64 (B, d, w) table."""
        if not (kernels.ENABLED and isinstance(delta, np.ndarray) and delta.dtype == np.int64
                and delta.shape == tuple(self.shape) and self.store.flags.c_contiguous):
            return False
        kernels.add_dense(self.store, self.rownorm, p, np.ascontiguousarray(delta), sign)
        self._norm_dirty[p] = False
        return True

    def add_sparse(self, slot: int, pos: np.ndarray, val: np.ndarray) -> None:
        """Add ``val`` at flat positions ``pos`` (unique, into a (B*d*w) table) of a leaf and its ancestors.

        Row norms are updated exactly: ||t + v||^2 = ||t||^2 + sum (2 t_u + v_u) v_u.
        """
        p = self.path(slot)
        B, d, w = self.shape
        flat = self.store.reshape(-1)            # a view: the store is always C-contiguous
        at = (p * (B * d * w))[:, None] + pos[None, :]
        old = flat[at]
        flat[at] = old + val
        inc = (2 * old + val) * val
        rows = (p * (B * d))[:, None] + (pos // w)[None, :]
        np.add.at(self.rownorm.reshape(-1), rows.ravel(), inc.ravel())
        self._f2_stale[p] = True
        self.version += 1

    def add_tuples(self, slot: int, bucket: np.ndarray, idx: np.ndarray, sgn: np.ndarray, a: int, b: int) -> None:
        """Add tuples ``a..b-1`` of a hashed batch (``bucket`` (n,), ``idx`` (d, n) flat ``r w + col``,
        ``sgn`` (d, n)) to a leaf and its ancestors in place (:func:`kernels.sketch_add`): the same
        counters and exact row norms as :meth:`add_sparse` of the batch's summed delta, without
        building it (no (B, d, w) delta, no unique/bincount temporaries)."""
        kernels.sketch_add(self.store, self.rownorm, self.path(slot), bucket, idx, sgn, a, b, self.shape[2])
        self._f2_stale[self.path(slot)] = True
        self.version += 1

    def remove(self, slot: int) -> None:
        """Subtract a leaf from its ancestors (expiry) and zero it."""
        self.sversion += 1
        self.version += 1
        if self.shape is None:
            self.slots[slot] = None
            return
        delta = self.levels[0][slot].copy()
        p = self.path(slot)
        if not self._add_dense(p, delta, -1):
            for l, lev in enumerate(self.levels):
                lev[slot >> l] -= delta
            self._norm_dirty[p] = True
        self._f2_stale[p] = True
        self.slots[slot] = None

    def clear(self) -> None:
        self.slots = [None] * self.cap
        self.period_start = None
        if self.store is not None:
            self.store[...] = 0
            self.rownorm[...] = 0
            self._norm_dirty[:] = False
            self._f2[...] = 0
            self._f2_stale[:] = False
        self.sversion += 1
        self.version += 1

    def zones(self) -> list[Zone]:
        """Live zones, oldest first."""
        return sorted((z for z in self.slots if z is not None), key=lambda z: (z.start, z.slot))

    def free_slot(self) -> int | None:
        for i, z in enumerate(self.slots):
            if z is None:
                return i
        return None

    # -- queries -------------------------------------------------------------------
    def f2_nodes(self) -> np.ndarray:
        """(n_nodes, B) F2 estimates (median over rows of the row's squared norm), cached."""
        nd = self._norm_dirty
        if kernels.ENABLED:
            kernels.refresh_f2(self.store, self.rownorm, nd, self._f2_stale, self._f2)
            return self._f2
        if nd.any():
            nodes = nd.nonzero()[0]
            t = self.store[nodes]
            self.rownorm[nodes] = np.einsum("nbdw,nbdw->nbd", t, t)
            nd[nodes] = False
            self._f2_stale[nodes] = True
        st = self._f2_stale
        if st.any():
            nodes = st.nonzero()[0]
            rows = np.sort(self.rownorm[nodes], axis=2)
            d = rows.shape[2]
            self._f2[nodes] = rows[:, :, d // 2] if d % 2 else 0.5 * (rows[:, :, d // 2 - 1] + rows[:, :, d // 2])
            st[nodes] = False
        return self._f2

    def f2(self, level: int) -> np.ndarray:
        """(nodes of ``level``, B) F2 estimates."""
        o = self.level_offsets()[level]
        return self.f2_nodes()[o:o + (self.cap >> level)]

    def topology(self):
        """(level, position, strict ancestors (n_nodes, max(h, 1)) padded with -1, leaf membership
        (n_nodes, cap) bool) of the store's nodes; cached per ``cap``."""
        t = getattr(self, "_topo", None)
        if t is not None and t[0] == self.cap:
            return t[1]
        offs = self.level_offsets()
        h = len(offs) - 1
        level = np.concatenate([np.full(self.cap >> l, l, dtype=np.int64) for l in range(h + 1)])
        pos = np.concatenate([np.arange(self.cap >> l, dtype=np.int64) for l in range(h + 1)])
        anc = np.full((len(level), max(h, 1)), -1, dtype=np.int64)
        for k in range(1, h + 1):
            ok = level + k <= h
            anc[ok, k - 1] = np.asarray(offs)[level[ok] + k] + (pos[ok] >> k)
        leaves = np.arange(self.cap)
        member = (leaves[None, :] >> level[:, None]) == pos[:, None]
        topo = (level, pos, anc, member)
        self._topo = (self.cap, topo)
        return topo

    def leaf_ranges(self):
        """(min_ts, max_ts, n) over all store nodes (level 0 first), from the zones' ranges."""
        lo = np.array([z.min_ts if z is not None else np.inf for z in self.slots])
        hi = np.array([z.max_ts if z is not None else -np.inf for z in self.slots])
        nn = np.array([z.n if z is not None else 0 for z in self.slots], dtype=np.int64)
        if self.cap == 1:
            return lo, hi, nn
        member = self.topology()[3]
        return (np.where(member, lo, np.inf).min(axis=1), np.where(member, hi, -np.inf).max(axis=1),
                member @ nn)

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
        norms = self.rownorm.nbytes + self._f2.nbytes if self.store is not None else 0
        return sum(l.nbytes for l in self.levels) + norms + sum(z.nbytes for z in self.slots if z is not None)
