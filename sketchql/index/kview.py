"""Incrementally maintained query view of the compiled probe path.

The numpy reference path flattens the *non-empty* pyramid nodes into a
:class:`~sketchql.index.query.QueryView`, rebuilt (or patched) after each
ingest: dozens of small numpy calls per probe batch.  The compiled path
(:func:`sketchql.index.kernels.probe_kview`) instead reads a view whose
shape never changes between structural changes and whose per-ingest
maintenance is a handful of array writes:

- **nodes** = *every* node of every granularity's pyramid store, in the
  order of the index's shared sketch buffer (granularity-major, level 0
  first, root last), so node k's sketch table is ``store[k]`` and the
  parent/leaf/granularity topology is static (rebuilt only when a
  granularity's capacity changes).  Empty nodes get the range
  ``(+inf, -inf)``: they overlap no window, so they are never visited nor
  counted, and the results (regions, order, ``visited``, ``flat``) equal the
  non-empty flattening of the reference path.  Structure T1 (no summaries)
  has leaves only (one per zone slot).
- **node ranges** ``lo``/``hi`` and the **F2** estimates (``F2``, from which
  the kernel derives the pruning threshold ``max(min_estimate, prune_sigma
  sqrt(F2 / w))`` of each visited (node, bucket) on the fly) are refreshed
  per granularity whose ``version`` changed: a copy of ``f2_nodes()`` and a
  compiled min/max up the pyramid.
- **cold cells**: the tuples of every zone except the hot one live in an
  append-only CSR (``Vc``, ``Tc``, ``Rc``, preallocated and doubled when
  full, ``nc`` used; ``cstart``/``clen`` per (leaf, bucket)).  A zone is
  (re)appended only when its (id, size) differs from
  what the CSR holds (a zone that became cold, a COLLAPSE target); dropped
  zones leave garbage that is compacted away once it exceeds the live part.
- **hot zone** (the zone of G1 that received the latest append): an arena
  with one contiguous *segment* per bucket, each with room to grow
  (:class:`HotArena`), so a hot cell is read sequentially like a cold one, in
  arrival order, without any per-probe copy.  :meth:`KernelView.on_append`
  extends it *at ingest time* (one compiled call per appended run, counted in
  t_ins: each tuple is written at its bucket segment's end; a full segment
  makes the arena lay every bucket out again with twice the room, amortized
  O(1) per tuple); if it ever disagrees with the zone (size mismatch after a
  merge, late tuples, a new hot zone) it is rebuilt from the zone at the next
  refresh.  (It used to be a linked list per bucket that a probe batch laid
  out in cell order whenever the arena had grown since the last copy: ~8 ns
  per hot tuple in the probe after each ingest, ~20 us per batch at ~6,000
  tuples per window, ~200 us at ~60,000.)

Memory: the arena duplicates the hot zone's tuples, with up to twice their
room (plus 8 slots per bucket; a new hot zone's arena starts with room for ~1.1x the previous hot
zone's tuples per bucket, so that a zone of a steady stream is not laid out again while it fills);
the CSR holds at most twice the live cold tuples plus 4096 (its capacity, reserved when the view is
built, is ``max(1024, 3 live + 4096)`` tuples for the index's live tuples then; doubled when full).  Values are kept
in their stored dtype; the compiled path is used for int64 and float64
stored values (other dtypes and strings use the numpy path).
"""
from __future__ import annotations

import numpy as np

from . import kernels

_INF = np.inf
_NO_ARENA = {}           # vdtype -> empty placeholder arena (no hot leaf)
_NOT_HELD = (None, None, 0)
_NO_HP = np.zeros(0, dtype=np.uint64)
_NO_STORE = np.zeros(1, dtype=np.int64)
_NO_TABS = (np.zeros((1, 1, 1, 1), dtype=np.int64), np.zeros((1, 1, 1), dtype=np.int64), np.zeros(1, dtype=bool),
            np.zeros(1, dtype=bool), np.zeros((1, 1)))        # refresh_hot's sketch arguments without sketches


class HotArena:
    """One zone's tuples in cell order: bucket b's tuples, in arrival order, are the segment
    ``V/T/R[start[b] : start[b] + count[b]]`` of room ``room[b]`` (see the module doc).

    Appends write each tuple at its segment's end (:func:`kernels.seg_append`); when a segment
    is full every bucket is laid out again with room ``2 (count + new) + 8``
    (:func:`kernels.seg_relayout`): a tuple is copied O(1) times on average.

    >>> import numpy as np
    >>> a = HotArena(zid=1, B=2, vdtype=np.int64)
    >>> a.append(np.array([7, 8, 9]), np.array([1.0, 2.0, 3.0]), np.array([0, 1, 2]), np.array([1, 0, 1]))
    >>> b = 1; a.R[a.start[b]:a.start[b] + a.count[b]].tolist(), a.count.tolist()
    ([0, 2], [1, 2])
    """

    def __init__(self, zid: int, B: int, vdtype, need=None):
        self.zid = zid
        self.B = B
        self.n = 0
        self.count = np.zeros(B, dtype=np.int64)
        self.start = np.zeros(B, dtype=np.int64)
        self.room = np.zeros(B, dtype=np.int64)
        self.V = np.empty(0, dtype=vdtype)
        self.T = np.empty(0)
        self.R = np.empty(0, dtype=np.int64)
        self._layout(np.zeros(B, dtype=np.int64) if need is None else need)

    def _layout(self, need) -> None:
        """Lay the segments out again with room ``2 need + 8`` per bucket (need >= count)."""
        room = 2 * need + 8
        start = np.zeros(self.B, dtype=np.int64)
        np.cumsum(room[:-1], out=start[1:])
        cap = int(start[-1] + room[-1])
        V, T, R = np.empty(cap, dtype=self.V.dtype), np.empty(cap), np.empty(cap, dtype=np.int64)
        if self.n:
            kernels.seg_relayout(self.V, self.T, self.R, self.start, self.count, V, T, R, start)
        self.V, self.T, self.R, self.start, self.room = V, T, R, start, room

    def append(self, v, t, r, b) -> None:
        c = np.ascontiguousarray
        v, t, r, b = c(v), c(t), c(r), c(b)
        if not kernels.seg_append(self.V, self.T, self.R, self.start, self.room, self.count, v, t, r, b):
            self._layout(self.count + np.bincount(b, minlength=self.B))
            kernels.seg_append(self.V, self.T, self.R, self.start, self.room, self.count, v, t, r, b)
        self.n += len(r)


class KernelView:
    """The compiled probe path's view of a :class:`StreamIndex` (see the module doc).

    Created and refreshed by ``StreamIndex._kernel_view()`` (the first compiled
    ``probe_many`` creates it; from then on ``_append`` feeds the hot arena).

    >>> import numpy as np
    >>> from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
    >>> ix = StreamIndex(SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2),
    ...                  IndexConfig(structure="T4", n_buckets=4, w=32))
    >>> _ = ix.ingest(np.array([5, 5, 6]), np.array([1.0, 2.0, 3.0]))
    >>> kv = ix._kernel_view()
    >>> int(kv.N), int(kv.hot.n), int(kv.clen.sum())     # 2 granularities x (2 slots + root); hot zone: ts 3
    (6, 1, 3)
    """

    def __init__(self, ix):
        self.sketch = ix._sketch
        self.B = ix._B
        self.vdtype = np.dtype(ix._vdtype)
        grans = ix.grans
        self.caps = tuple(g.cap for g in grans)
        self.buf_id = id(ix._gbuf) if self.sketch else None
        # static topology
        sizes = [g.n_nodes if self.sketch else g.cap for g in grans]
        self.goff = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        N = self.N = int(self.goff[-1])
        self.gstart = self.goff
        self.parent = np.full(N, -1, dtype=np.int64)
        self.leaf = np.zeros(N, dtype=bool)
        self.gran = np.zeros(N, dtype=np.int64)
        self.leaf_node = []                                   # per granularity: node index of slot 0
        for gi, g in enumerate(grans):
            o = int(self.goff[gi])
            self.gran[o:o + sizes[gi]] = gi + 1
            self.leaf[o:o + g.cap] = True
            self.leaf_node.append(o)
            if self.sketch and g.cap > 1:
                anc = g.topology()[2][:, 0]
                self.parent[o:o + sizes[gi]] = np.where(anc >= 0, anc + o, -1)
        self.lo = np.full(N, _INF)
        self.hi = np.full(N, -_INF)
        self.zid = np.zeros(N, dtype=np.int64)
        self.F2 = np.zeros((N, self.B))
        self.cstart = np.zeros(N * self.B, dtype=np.int64)
        self.clen = np.zeros(N * self.B, dtype=np.int64)
        # capacity (the first nc entries are used): room for the steady state from the start, written
        # once here so that its pages are faulted in now -- growing by doubling later allocates fresh
        # memory whose first touch (~2 us per 4 KiB page on this VM) lands in a probe's refresh: at
        # ~6,000 tuples per window the first zone that turned cold after the view was built cost
        # ~50-80 us of growth and faults in that probe call
        live = sum(z.n for g in grans for z in g.slots if z is not None)
        cap = max(1024, 3 * live + 4096)
        self.Vc = np.empty(cap, dtype=self.vdtype)
        self.Tc = np.empty(cap)
        self.Rc = np.empty(cap, dtype=np.int64)
        for a in (self.Vc, self.Tc, self.Rc):
            a.fill(0)
        self.nc = 0
        self.live_cold = 0
        self.held = {}                                        # node -> (zone id, zone n, tuples in the CSR) held
        self.seen = [None] * len(grans)
        self.seen_s = None                                    # G1 (sversion, append_switches) last refreshed
        self.leaf_lo = [np.full(g.cap, _INF) for g in grans]
        self.leaf_hi = [np.full(g.cap, -_INF) for g in grans]
        self.hot = None                                       # HotArena
        self.hot_k = -1
        self.hot_ok = False
        self.hot_zone = None                                  # the Zone object of the hot arena
        self.args = None                                      # probe_kview's view arguments (set by refresh)
        self.vd = np.zeros(kernels.VIEW_DESC, dtype=np.int64)  # the same, packed (kernels.pack_view)
        self._hp = None                                       # the hash parameters packed in vd
        self.fused = False                                    # probe_packed hashes the keys (or no sketches)
        self._hd = np.zeros(kernels.HOT_DESC, dtype=np.int64)  # refresh_fast's bound arguments, packed
        self._hd_g1 = None                                    # the G1 whose arrays _hd holds (_hd_bound: them)
        self._hd_bound = None
        self.usable = True                                    # False once a zone holds values of another dtype
        self.key_types = {}                                   # keys dtype -> comparable with the values?
        self._fast = None                                     # what refresh_fast needs (set by refresh)
        self.pending = None                                   # a deferred hot refresh (refresh_fast)
        self._grown = False                                   # the CSR arrays were replaced since the last pack
        # refresh_gran's arguments per granularity, packed once (kernels.pack_gran): the arrays are the view's
        # own and the granularity's store / norms, which are replaced only with a new shared buffer or a new
        # capacity (then fits() is False and the index builds a new view); _gheld keeps them alive and lets
        # fits() check that
        self.gd = np.zeros((len(grans), kernels.GRAN_DESC), dtype=np.int64)
        self._gheld = None
        if self.sketch and kernels.ENABLED:
            self._gheld = self._gran_arrays(grans)
            self._galive = [(g._norm_dirty, g._f2_stale, g._f2) for g in grans]      # (gd points to them too)
            for gi, g in enumerate(grans):
                o, n = int(self.goff[gi]), int(self.goff[gi + 1] - self.goff[gi])
                kernels.pack_gran(self.gd[gi], self.leaf_lo[gi], self.leaf_hi[gi], self.lo[o:o + n], self.hi[o:o + n],
                                  g.store, g.rownorm, g._norm_dirty, g._f2_stale, g._f2, self.F2[o:o + n])
        if self.vdtype not in _NO_ARENA:
            _NO_ARENA[self.vdtype] = HotArena(0, 1, self.vdtype)

    @property
    def nbytes(self) -> int:
        """Memory of the view (a cache: the CSR copy of the cold tuples, the hot arena, node arrays)."""
        arrays = (self.Vc, self.Tc, self.Rc, self.cstart, self.clen, self.F2, self.lo, self.hi, self.parent)
        hot = sum(a.nbytes for a in (self.hot.V, self.hot.T, self.hot.R, self.hot.start, self.hot.room,
                                     self.hot.count)) if self.hot else 0
        return sum(a.nbytes for a in arrays) + hot

    @staticmethod
    def _gran_arrays(grans) -> list:
        """What ``gd`` was packed from: each granularity's store and row norms (``Granularity.set_store``
        replaces the norms, flags and F2 arrays together, ``bind`` the store)."""
        return [a for g in grans for a in (g.store, g.rownorm)]

    def fits(self, ix) -> bool:
        """Whether this view still describes ``ix``'s layout (else the index builds a new one).  With
        sketches, the shared buffer decides: growing a granularity or compressing allocates a new one,
        and the stores and norms packed in ``gd`` are replaced only then (checked too, by identity)."""
        if self.sketch != ix._sketch or not (self.vdtype is ix._vdtype or self.vdtype == np.dtype(ix._vdtype)):
            return False
        grans = ix.grans
        if not self.sketch:
            return self.caps == tuple([g.cap for g in grans])
        if self.buf_id != id(ix._gbuf) or len(grans) != len(self.caps):
            return False
        held = self._gheld
        if held is not None:                                  # the arrays packed in gd
            i = 0
            for g in grans:
                if g.store is not held[i] or g.rownorm is not held[i + 1]:
                    return False
                i += 2
        return self.caps == tuple([g.cap for g in grans])

    # -- ingest side --------------------------------------------------------------
    def on_append(self, z, v, t, r, b) -> None:
        """Called by ``StreamIndex._append`` after ``z.append(v, t, r, b)``: the hot arena follows G1's
        appends (a zone that starts with these tuples gets its arena here, at ingest, instead of
        being laid out from the zone at the next refresh: ~20 us of the probe after a new zone at
        ~6,000 tuples per window)."""
        if v.dtype != self.vdtype:                         # mixed value types: leave it to the numpy path
            self.usable = False
            return
        if z.gran != 0:
            return
        h = self.hot
        if h is not None and h.zid == z.id and self.hot_ok and h.n + len(r) == z.n:
            h.append(v, t, r, b)
        elif z.n == len(r):                 # a zone that starts with these tuples (a new G1 zone): its arena too
            need = np.bincount(b, minlength=self.B)
            if h is not None and h.zid != z.id and h.count.shape == need.shape:
                # room for about the previous hot zone's tuples per bucket (~1.1x: room = 2 need + 8): zones of a
                # steady stream are alike, and an arena sized by its first batch alone was laid out again twice
                # in a 30 s zone (each time a probe then re-packed the arena's arrays: ~3.5 us after an ingest)
                np.maximum(need, (h.count >> 1) + (h.count >> 4), out=need)
            a = HotArena(z.id, self.B, self.vdtype, need=need)
            a.append(v, t, r, b)
            self.hot, self.hot_ok = a, True
        else:
            self.hot_ok = False                                # re-synced from the zone at refresh

    # -- query side ---------------------------------------------------------------
    def _append_cold(self, z, node: int) -> None:
        c = z.compact()
        if c.values.dtype != self.vdtype:
            self.usable = False
            return
        base, n = self.nc, c.n
        if base + n > len(self.Rc):                           # grow by doubling (amortized O(1) per tuple)
            cap = max(2 * len(self.Rc), base + n)
            for name in ("Vc", "Tc", "Rc"):
                old = getattr(self, name)
                new = np.empty(cap, dtype=old.dtype)
                new[:base] = old[:base]
                setattr(self, name, new)
            self._grown = True
        B = self.B
        if kernels.ENABLED:                                   # one call instead of five numpy writes
            kernels.csr_append(self.Vc, self.Tc, self.Rc, base, c.values, c.ts, c.rids, c.offsets,
                               self.cstart[node * B:(node + 1) * B], self.clen[node * B:(node + 1) * B])
        else:
            self.Vc[base:base + n] = c.values
            self.Tc[base:base + n] = c.ts
            self.Rc[base:base + n] = c.rids
            o = c.offsets
            self.cstart[node * B:(node + 1) * B] = base + o[:-1]
            self.clen[node * B:(node + 1) * B] = o[1:] - o[:-1]
        self.nc = base + n
        self.live_cold += n
        self.held[node] = (z.id, z.n, n)

    def _drop_cold(self, node: int) -> None:
        held = self.held.pop(node, None)
        if held is not None:
            self.live_cold -= held[2]
        self.clen[node * self.B:(node + 1) * self.B] = 0

    def _ranges(self, gi, g, o, n_nodes) -> None:
        lo, hi = self.leaf_lo[gi], self.leaf_hi[gi]
        if self.sketch:
            if kernels.ENABLED:                               # ranges + F2 refresh + copy, one call
                kernels.refresh_gran(lo, hi, self.lo[o:o + n_nodes], self.hi[o:o + n_nodes], g.store, g.rownorm,
                                     g._norm_dirty, g._f2_stale, g._f2, self.F2[o:o + n_nodes])
            else:
                kernels.pyramid_ranges(lo, hi, self.lo[o:o + n_nodes], self.hi[o:o + n_nodes])
                self.F2[o:o + n_nodes] = g.f2_nodes()
        else:
            self.lo[o:o + g.cap] = lo
            self.hi[o:o + g.cap] = hi

    def refresh(self, ix) -> None:
        """Bring the view up to date with the index (cheap when only the hot zone grew)."""
        self.flush()
        g1 = ix.grans[0]
        hz = None
        la = g1.last_append
        if la is not None:
            z = self.hot_zone                                 # O(1) when the hot zone is unchanged
            if z is not None and z.id == la and z.slot < len(g1.slots) and g1.slots[z.slot] is z:
                hz = z if z.n else None
            else:
                for z in g1.slots:
                    if z is not None and z.id == la and z.n:
                        hz = z
                        break
        self.hot_zone = hz
        changed = self.args is None
        # the hot arena: the zone of G1 appended last
        if hz is None:
            if self.hot is not None:
                self.hot, self.hot_ok = None, False
        elif self.hot is None or self.hot.zid != hz.id or not self.hot_ok or self.hot.n != hz.n:
            changed = True
            c = hz.compact()
            if c.values.dtype != self.vdtype:
                self.usable = False
                return
            a = HotArena(hz.id, self.B, self.vdtype, need=np.diff(c.offsets))
            a.append(c.values, c.ts, c.rids, c.buckets())
            self.hot, self.hot_ok = a, True
        hot_id = hz.id if hz is not None else None
        B = self.B
        packed = self._gheld is not None and kernels.ENABLED
        which = 0                                             # granularities whose ranges / F2 to refresh
        for gi, g in enumerate(ix.grans):
            o = self.leaf_node[gi]
            if self.seen[gi] == g.version:
                continue
            self.seen[gi] = g.version
            n_nodes = self.goff[gi + 1] - self.goff[gi]
            lo, hi = self.leaf_lo[gi], self.leaf_hi[gi]
            hot_before = -2
            if gi == 0:
                sig = (g.sversion, g.append_switches)
                if sig == self.seen_s and self.hot_k >= 0 and hz is not None and self.hot_k == o + hz.slot:
                    # only the hot zone received tuples since the last refresh
                    lo[hz.slot], hi[hz.slot] = hz.min_ts, hz.max_ts
                    self.clen[self.hot_k * B:(self.hot_k + 1) * B] = self.hot.count
                    if packed:
                        which |= 1 << gi
                    else:
                        self._ranges(gi, g, o, n_nodes)
                    continue
                self.seen_s = sig
                hot_before, self.hot_k = self.hot_k, -1
            changed = True
            lo[:] = _INF
            hi[:] = -_INF
            for s, z in enumerate(g.slots):
                node = o + s
                if z is None or z.n == 0:
                    if node in self.held or node == hot_before:
                        self._drop_cold(node)
                    self.zid[node] = 0
                    continue
                lo[s], hi[s] = z.min_ts, z.max_ts
                self.zid[node] = z.id
                if z.id == hot_id:
                    if node in self.held:
                        self._drop_cold(node)
                    self.hot_k = node
                    self.clen[node * B:(node + 1) * B] = self.hot.count
                elif self.held.get(node, _NOT_HELD)[:2] != (z.id, z.n):
                    self._drop_cold(node)             # (also clears the cells of a former hot leaf)
                    self._append_cold(z, node)
            if packed:
                which |= 1 << gi
            else:
                self._ranges(gi, g, o, n_nodes)
        if which:                                             # every changed granularity in one call
            kernels.refresh_grans_packed(self.gd, which)
        changed |= self._garbage(ix)
        h = self.hot if self.hot_k >= 0 else _NO_ARENA[self.vdtype]
        if changed or self.args[18] is not h.V or self.args[21] is not h.start:     # (the arena may have grown)
            self._set_args(ix, h)
        self._fast = None
        if (hz is not None and self.hot_ok and self.hot_k == self.leaf_node[0] + hz.slot
                and self.seen_s == (g1.sversion, g1.append_switches)):
            k = self.hot_k
            clen_k, count = self.clen[k * B:(k + 1) * B], self.hot.count
            if self._hd_g1 is g1:
                # packed before in this view: only the hot zone's slot, cells and arena changed (G1's node
                # arrays and tables are fixed while the view fits, see fits())
                kernels.pack_hot_arena(self._hd, hz.slot, clen_k, count)
            else:
                o, n = self.leaf_node[0], int(self.goff[1] - self.goff[0])
                if self.sketch:
                    tabs = (g1.store, g1.rownorm, g1._norm_dirty, g1._f2_stale, g1._f2)
                else:
                    tabs = _NO_TABS
                bound = (self.leaf_lo[0], self.leaf_hi[0], hz.slot, clen_k, count,
                         self.sketch, self.lo[o:o + n], self.hi[o:o + n]) + tabs + (self.F2[o:o + n],)
                kernels.pack_hot(self._hd, *bound)
                self._hd_g1, self._hd_bound = g1, bound
            self._fast = (g1, hz, self.seen_s, tuple([g.version for g in ix.grans[1:]]), count, clen_k)

    def flush(self) -> None:
        """Apply a deferred hot refresh (``pending``, see :meth:`refresh_fast`)."""
        if self.pending is not None:
            kernels.refresh_hot_packed(self._hd, *self.pending)
            self.pending = None

    def refresh_fast(self, ix, state, defer: bool = False) -> bool:
        """:meth:`refresh` when only G1's hot zone received tuples since the last refresh (``state``: the
        granularities' versions now): one compiled call (:func:`kernels.refresh_hot`: the hot leaf's range
        and cell lengths, G1's node ranges and F2) on arguments bound at the last full refresh, instead of
        the per-granularity walk.  False (nothing done) when anything else changed.

        ``defer=True``: the compiled call is left to the probe kernel that follows (``pending`` = its
        ``(t_min, t_max)``; :func:`kernels.probe_packed` applies it first, saving a dispatch), and
        until then the view is *not* up to date: whoever reads it otherwise calls :meth:`flush`
        first (``StreamIndex._kernel_view`` does).  ``refresh_hot`` recomputes from the current
        state, so a later refresh supersedes a pending one."""
        f = self._fast
        if f is None:
            return False
        g1, hz, sig, rest, count, _ = f          # (f[4:]: the arrays packed in _hd, kept alive here)
        h = self.hot
        if (state[1:] != rest or g1.last_append != hz.id or g1.sversion != sig[0] or g1.append_switches != sig[1]
                or h is None or h.count is not count or h.zid != hz.id or not self.hot_ok or h.n != hz.n
                or not self.usable or ix.grans[0] is not g1 or g1.slots[hz.slot] is not hz):
            return False
        if defer:                                             # the probe kernel applies it (kernels.probe_packed)
            self.pending = (hz.min_ts, hz.max_ts)
        else:
            kernels.refresh_hot_packed(self._hd, hz.min_ts, hz.max_ts)
            self.pending = None
        self.seen[0] = state[0]
        a = self.args
        if a[18] is not h.V or a[21] is not h.start:          # the arena grew
            self.args = a[:18] + (h.V, h.T, h.R, h.start)
            kernels.pack_arena(self.vd, a[17], h.V, h.T, h.R, h.start)
        return True

    def _set_args(self, ix, h) -> None:
        old = self.args
        if self.sketch:
            Bs, d, w = ix._shape
            g = ix._gbuf
            store = old[1] if old is not None and old[1].base is g else g.reshape(-1)
            hp = ix._hash_params()
        else:
            Bs, d, w = 1, 1, 1
            store, hp = _NO_STORE, None
        self.fused = not self.sketch or hp is not None
        hp = _NO_HP if hp is None else hp
        self.args = a = (self.sketch, store, self.F2, float(w), Bs * d * w, d * w, self.lo, self.hi, self.parent,
                         self.leaf, self.gstart, self.B, self.cstart, self.clen, self.Vc, self.Tc, self.Rc,
                         self.hot_k, h.V, h.T, h.R, h.start)
        # packed (vd: kernels.pack_view); at most structural refreshes only the hot leaf (and its arena)
        # changed: within a view's life its node arrays, the store and the shapes are fixed (fits()), and
        # the CSR arrays are replaced only when they grow (_grown)
        if old is not None and hp is self._hp and not self._grown:
            kernels.pack_arena(self.vd, self.hot_k, h.V, h.T, h.R, h.start)
        else:
            self._hp = hp                                       # (kept alive: vd points to it)
            kernels.pack_view(self.vd, *a, hp)
            self._grown = False

    def _garbage(self, ix) -> bool:
        if self.nc > 2 * self.live_cold + 4096:               # garbage of dropped zones: rebuild the CSR
            self.nc = 0
            self.live_cold = 0
            held, self.held = self.held, {}
            for node in held:
                gi = int(self.gran[node]) - 1
                z = ix.grans[gi].slots[node - self.leaf_node[gi]]
                self._append_cold(z, node)
            return True
        return False
