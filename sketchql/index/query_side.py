"""The query side of :class:`~sketchql.index.StreamIndex` (a mixin): estimates,
error bounds, promising regions (the pyramid descent on the cached query
view), compiled and numpy probes, cell scans and window scans.

Split out of ``stream_index.py`` along its seams; the window convention and
the query view are documented there and in :mod:`sketchql.index.query`.
"""
from __future__ import annotations
import numpy as np
from ..errors import SummaryError
from ..summaries.hashing import as_key_array
from . import cellscan, kernels
from .kview import KernelView
from .query import GranPart, QueryView
from .results import MAX_PROBE_ROWS, PROBE_DTYPE, SAME_AS_PROBE, Matches, Regions, ScanResult, cell_handle, split_cell
from .zone import Zone

_KERNEL_VDTYPES = (np.dtype(np.int64), np.dtype(np.float64))
_NO_HASH = np.zeros(0, dtype=np.uint64)
_F64 = np.dtype(np.float64)


def _check_rows(n: int, where: str) -> None:
    """``Matches.probe`` is int32: a probe batch has fewer than 2**31 rows."""
    if n > MAX_PROBE_ROWS:
        raise SummaryError(f"StreamIndex.{where}: a probe batch has at most {MAX_PROBE_ROWS} rows "
                           f"(Matches.probe is int32), got {n}; split the batch")


class QuerySide:
    """Mixin of :class:`~sketchql.index.StreamIndex` (module doc)."""

    # ------------------------------------------------------------------ query side
    def _live(self):
        """(granularity index 0-based, zone) of every live zone."""
        for gi, g in enumerate(self.grans):
            for z in g.slots:
                if z is not None:
                    yield gi, z

    @staticmethod
    def _window(n, t_from, t_to):
        out = []
        for t in (t_from, t_to):
            a = np.asarray(t, dtype=np.float64)
            if a.shape != (n,):
                a = np.broadcast_to(a, (n,))
            out.append(a)
        return out[0], out[1]

    def _keys(self, values, where):
        return as_key_array(values, f"StreamIndex {self.decl.name}.{where} values")

    def estimate(self, values, t_from: float, t_to: float, edge: str = "exact") -> np.ndarray:
        """Estimated count of each value among tuples with t_from < ts <= t_to (float64 array).

        Cells fully inside the window are answered from the *sum* of their
        sketches (linear, so it is the count sketch of their union: median over
        rows of sign x summed counter); partially covered edge cells are
        answered exactly from their tuples (``edge="exact"``, default) or
        pro-rated by the share of the cell's data time range in the window
        (``edge="prorate"``).  Structure T1 has no sketches and counts exactly.
        """
        keys = self._keys(values, "estimate")
        tf, tt = float(t_from), float(t_to)
        out = np.zeros(len(keys))
        full_tab, partial = self._split_window(tf, tt)
        if full_tab is not None and len(keys):
            bucket, idx, sgn = self._hash(keys)
            B, d, w = self._shape
            rows = full_tab.reshape(B, d * w)[bucket[None, :], idx] * sgn
            out += np.median(rows, axis=0) if d % 2 == 0 else np.sort(rows, axis=0)[d // 2]
        for z in partial:
            if edge == "prorate" and self._sketch:
                frac = _overlap_frac(z.min_ts, z.max_ts, tf, tt)
                bucket, idx, sgn = self._hash(keys)
                B, d, w = self._shape
                tab = self.grans[z.gran].levels[0][z.slot].reshape(B, d * w)
                rows = tab[bucket[None, :], idx] * sgn
                out += frac * np.sort(rows, axis=0)[d // 2]
            elif edge in ("exact", "prorate"):
                out += self._count_exact(z, keys, tf, tt)
            else:
                raise SummaryError(f"estimate: edge must be 'exact' or 'prorate', got {edge!r}")
        return out

    def _split_window(self, tf, tt):
        """(sum of the tables of fully covered zones or None, partially covered zones)."""
        full, partial = None, []
        for gi, z in self._live():
            if z.max_ts <= tf or z.min_ts > tt or z.n == 0:
                continue
            if tf < z.min_ts and z.max_ts <= tt and self._sketch:
                t = self.grans[gi].levels[0][z.slot]
                full = t.copy() if full is None else full + t
            else:
                partial.append(z)
        return full, partial

    def _count_exact(self, z: Zone, keys, tf, tt) -> np.ndarray:
        v, t, _ = z.all_tuples()
        self.counters["tuples_compared"] += len(t)
        v = v[(t > tf) & (t <= tt)]
        if not len(v) or not len(keys):
            return np.zeros(len(keys))
        v = np.sort(v)
        return (np.searchsorted(v, keys, side="right") - np.searchsorted(v, keys, side="left")).astype(np.float64)

    def error_bound(self, values, t_from: float, t_to: float, confidence: float = 0.95) -> np.ndarray:
        """Additive bound on |estimate - true count| per value holding with probability ``confidence``.

        The sketch part is the count sketch of the union of the fully covered
        cells of the value's bucket, so its bound is
        ``CountSketch.error_bound(confidence)`` of that summed table
        (k sqrt(F2_bucket / w)); edge cells are exact (bound 0).
        """
        keys = self._keys(values, "error_bound")
        full, _ = self._split_window(float(t_from), float(t_to))
        out = np.zeros(len(keys))
        if full is None or not len(keys):
            return out
        bucket, _, _ = self._hash(keys)
        cs = self._tmpl.empty_like()
        for b in np.unique(bucket):
            cs.table[...] = full[b]
            out[bucket == b] = cs.error_bound(confidence)
        return out

    def promising_regions(self, values, t_from, t_to, fade: float = 1.0) -> Regions:
        """Promising regions of each probe value in the window (t_from, t_to] (columnar).

        ``t_from``/``t_to`` are scalars or per-probe arrays.  For every
        granularity the pyramid is descended from its root: at each node the
        probe's estimate (median over rows of the node's summed sketch) is
        compared with ``max(min_estimate, prune_sigma * sqrt(F2_node / w))``
        (F2 of the node's bucket sketch); below it the whole subtree is pruned,
        and nodes whose data range misses the window are skipped.  Each
        estimate costs one work unit (``Regions.visited``); ``Regions.flat`` is
        what evaluating every overlapping leaf cell would cost.  Leaf regions
        carry the estimate pro-rated by the share of the cell's time range in
        the window, and ``priority = estimate * fade ** (i - 1)``.  Rows are
        ordered by (granularity, probe, zone slot).  Structure T1 has no
        summaries: every overlapping cell is returned with its tuple count as
        estimate.

        The descent is evaluated on the cached :class:`~sketchql.index.query.QueryView`
        (all levels of all granularities at once, see that module); the
        result is identical to a level-by-level descent
        (:meth:`_promising_regions_levelwise`).
        """
        if not self._sketch:
            return self._promising_regions_levelwise(values, t_from, t_to, fade)
        keys = self._keys(values, "promising_regions")
        P = len(keys)
        tf, tt = self._window(P, t_from, t_to)
        bucket, idx, sgn = self._hash(keys) if P else (np.zeros(0, np.int64), None, None)
        qv, p, k, est, visited, flat = self._leaf_pairs(bucket, idx, sgn, tf, tt)
        reg = self._make_regions(qv, bucket, tf, tt, p, k, est, visited, flat, float(fade))
        self.counters["nodes_visited"] += reg.visited
        return reg

    def _leaf_pairs(self, bucket, idx, sgn, tf, tt):
        """Surviving (probe, view node) leaf pairs of a hashed probe batch, in
        (granularity, probe, slot) order: (qv, p, k, est, visited, flat)."""
        P = len(bucket)
        qv = self._view()
        B, d, w = self._shape
        if P == 0 or qv.N == 0:
            z = np.zeros(0, dtype=np.int64)
            return qv, z, z, np.zeros(0), 0, 0
        idxb = idx + bucket * (d * w)
        sflat = self._gbuf.reshape(-1)
        step = max(1, (1 << 18) // max(qv.N * d, 1))
        if P <= step:
            p, k, est, visited, flat = qv.descend(sflat, bucket, idxb, sgn, tf, tt)
        else:
            ps, ks, ests, visited, flat = [], [], [], 0, 0
            for s in range(0, P, step):
                e = min(P, s + step)
                p, k, est, v, f = qv.descend(sflat, bucket[s:e], idxb[:, s:e], sgn[:, s:e], tf[s:e], tt[s:e])
                ps.append(p + s), ks.append(k), ests.append(est)
                visited += v
                flat += f
            p, k, est = np.concatenate(ps), np.concatenate(ks), np.concatenate(ests)
        if qv.multi and len(p) > 1:
            gran = qv.gran[k]
            if (gran[1:] < gran[:-1]).any():
                o = gran.argsort(kind="stable")             # (granularity, probe, slot) order
                p, k, est = p[o], k[o], est[o]
        return qv, p, k, est, visited, flat

    def _make_regions(self, qv, bucket, tf, tt, p, k, est, visited, flat, fade) -> Regions:
        if len(p) == 0:
            z = np.zeros(0, dtype=np.int64)
            return Regions(probe=z, cell=z.copy(), zone=z.copy(), bucket=z.copy(), granularity=z.copy(),
                           estimate=np.zeros(0), priority=np.zeros(0), partial=np.zeros(0, dtype=bool),
                           n_tuples=z.copy(), visited=int(visited), flat=int(flat))
        b = bucket[p]
        gran = qv.gran[k]
        zlo, zhi, ptf, ptt = qv.lo[k], qv.hi[k], tf[p], tt[p]
        full = (ptf < zlo) & (zhi <= ptt)
        span = zhi - zlo
        ov = np.minimum(zhi, ptt) - np.maximum(zlo, ptf)
        frac = np.where(full | (span <= 0), 1.0, np.clip(ov / np.where(span > 0, span, 1.0), 0.0, 1.0))
        est = est * frac
        zone = qv.zid[k]
        return Regions(probe=p, cell=cell_handle(zone, b), zone=zone, bucket=b, granularity=gran, estimate=est,
                       priority=est * fade ** (gran - 1).astype(np.float64), partial=~full,
                       n_tuples=qv.clen[k * self._B + b], visited=int(visited), flat=int(flat))

    def _bind(self) -> bool:
        """Bind every granularity's pyramid tables into one shared buffer (rebuilt after a grow/compress);
        True when it (re)bound them, False when they already were."""
        buf = self._gbuf
        if buf is not None:
            for g in self.grans:
                if g.store.base is not buf:
                    break
            else:
                return False
        total = sum(g.n_nodes for g in self.grans)
        buf = np.zeros((total,) + tuple(self._shape), dtype=np.int64)
        at = 0
        for gi, g in enumerate(self.grans):
            g.bind(buf[at:at + g.n_nodes])
            self._goff[gi] = at
            at += g.n_nodes
        self._gbuf = buf
        return True

    def _view(self) -> QueryView:
        """The cached query view: unchanged, patched (only G1's open zone got tuples), or rebuilt
        from per-granularity parts (only the granularities that changed are re-flattened)."""
        self._bind()
        knobs = (float(self.config.min_estimate), float(self.config.prune_sigma))
        state = (knobs,) + tuple((g.version, self._goff[gi]) for gi, g in enumerate(self.grans))
        qv = self._qv
        if qv is not None:
            if qv[0] == state:
                return qv[1]
            view = qv[1]
            g1 = self.grans[0]
            if (view.hot is not None and qv[0][0] == knobs and qv[0][2:] == state[2:]
                    and qv[2] == (g1.sversion, g1.append_switches, self._goff[0]) and g1.last_append == view.hot.id):
                view.patch(g1, *knobs)
                self._parts.pop(0, None)          # the cached G1 part is stale now
                self._qv = (state, view, qv[2])
                return view
        for gi, g in enumerate(self.grans):
            key = (g.version, self._goff[gi], knobs)
            c = self._parts.get(gi)
            if c is None or c[0] != key:
                c = (key, GranPart(g, gi, self._goff[gi], knobs[0], knobs[1], self._B, self._vdtype))
                self._parts[gi] = c
        B, d, w = self._shape
        view = QueryView([self._parts[gi][1] for gi in range(len(self.grans))], self._B, B * d * w)
        g1 = self.grans[0]
        self._qv = (state, view, (g1.sversion, g1.append_switches, self._goff[0]))
        return view

    def probe_many(self, values, t_from, t_to, fade: float = 1.0, with_regions: bool = False) -> Matches:
        """``probe_regions(promising_regions(values, t_from, t_to, fade), values, t_from, t_to)`` in one pass.

        The same set of matches (and the same work counters) as the two
        calls, but vectorized end to end: the pyramid descent of every probe
        runs on the cached query view (see :mod:`sketchql.index.query`) and the
        cells of the surviving regions are gathered from the view's CSR of
        tuples with one ``np.repeat``/``cumsum``.  Matches come region by
        region (``Matches.region`` is the row in ``promising_regions``' output,
        ``Matches.probe`` the probe index), each region's tuples in cell order.
        ``Matches.work`` = tuples compared, ``Matches.visited`` = pyramid nodes
        evaluated (``Regions.visited``).  ``with_regions=True`` also fills
        ``Matches.regions`` (the :class:`Regions` probed).  ``fade`` only
        matters for those regions' priorities.

        Compiled path (default, :mod:`sketchql.index.kernels`): hashing, the
        descent and the matching run in numba kernels on the same view, with
        identical results and counters, matches region by region; structure T1
        uses the same kernel over its zones (every overlapping non-empty zone is
        a region).  The numpy path (``use_kernels=False`` on the index or the
        class, ``kernels.ENABLED = False``, or string keys) is the reference;
        for T1 it returns the same matches grouped by zone id instead of region
        by region.

        >>> import numpy as np
        >>> from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
        >>> decl = SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2)
        >>> ix = StreamIndex(decl, IndexConfig(structure="T4", n_buckets=4, w=32))
        >>> _ = ix.ingest(np.array([1, 2, 1, 3]), np.array([1.0, 2.0, 3.0, 4.0]))
        >>> m = ix.probe_many(np.array([1, 3]), 0.0, np.array([3.0, 4.0]))
        >>> sorted(zip(m.probe.tolist(), m.row_ids.tolist()))
        [(0, 0), (0, 2), (1, 3)]
        """
        if type(values) is np.ndarray and values.ndim == 1 and values.dtype.kind in "if":
            keys = values                   # (what as_key_array returns for it, without the checks' calls)
        else:
            keys = self._keys(values, "probe_many")
        if len(keys) > MAX_PROBE_ROWS:
            _check_rows(len(keys), "probe_many")
        if self.use_kernels and kernels.ENABLED:
            m = self._probe_many_compiled(keys, t_from, t_to, float(fade), with_regions)
            if m is not None:
                return m
        return self._probe_many_numpy(keys, t_from, t_to, fade, with_regions)

    def _probe_many_numpy(self, values, t_from, t_to, fade: float = 1.0, with_regions: bool = False) -> Matches:
        """The numpy reference of :meth:`probe_many` (see there)."""
        if not self._sketch:
            r = self.promising_regions(values, t_from, t_to, fade)
            m = self.probe_regions(r, values, t_from, t_to)
            m.visited = r.visited
            m.regions = r if with_regions else None
            return m
        keys = self._keys(values, "probe_many")
        P = len(keys)
        tf, tt = self._window(P, t_from, t_to)
        bucket, idx, sgn = self._hash(keys) if P else (np.zeros(0, np.int64), None, None)
        qv, p, k, est, visited, flat = self._leaf_pairs(bucket, idx, sgn, tf, tt)
        self.counters["nodes_visited"] += visited
        regions = self._make_regions(qv, bucket, tf, tt, p, k, est, visited, flat, float(fade)) \
            if with_regions else None
        L = len(p)
        if L == 0:
            e = self._empty_scan()
            z = np.zeros(0, np.int64)
            return Matches(z.astype(PROBE_DTYPE), e.values, e.timestamps, e.row_ids, work=0, region=z,
                           regions=regions, visited=visited)
        cell = k * self._B + bucket[p]
        ln = qv.clen[cell]
        ends = ln.cumsum()
        tot = int(ends[-1])
        self.counters["tuples_compared"] += tot
        # candidates: every tuple of every surviving cell; compare values first (full size),
        # then the window only on the value matches
        pos = (qv.cstart[cell] - ends + ln).repeat(ln)
        pos += np.arange(tot)
        sel = (qv.V[pos] == keys[p].repeat(ln)).nonzero()[0]
        at = pos[sel]
        rg = ends.searchsorted(sel, side="right")           # region row of each value match
        pr = p[rg]
        t = qv.T[at]
        keep = ((t > tf[pr]) & (t <= tt[pr])).nonzero()[0]
        at = at[keep]
        return Matches(pr[keep].astype(PROBE_DTYPE), qv.V[at], t[keep], qv.R[at], work=tot, region=rg[keep],
                       regions=regions, visited=visited)

    def _hash_params(self):
        """uint64 [off_b, off_s, shift, logw, mult...] of the fused hash (None: not fused)."""
        h = self._hasher
        if not h.fused:
            return None
        hp = getattr(h, "_kparams", None)
        if hp is None:
            hp = h._kparams = np.concatenate([[h._offs[0], h._offs[1], h._shift, np.uint64(h._logw)],
                                              h._mult[:, 0]]).astype(np.uint64)
        return hp

    def _kernel_view(self, defer: bool = False):
        """The compiled path's :class:`~sketchql.index.kview.KernelView`, refreshed (None when the
        stored values are not int64/float64 or the index is empty).  ``defer=True``: a refresh of the
        hot zone alone may be left pending (``kv.pending``) for the caller's
        :func:`kernels.probe_packed` to apply (see ``KernelView.refresh_fast``)."""
        kv = self._kview
        self._kread = True
        state = tuple([g.version for g in self.grans])
        if kv is not None and state == self._kstate:          # nothing changed since the last refresh
            if kv.pending is not None and not defer:
                kv.flush()
            return kv
        if kv is not None and kv.refresh_fast(self, state, defer):   # only G1's hot zone grew
            self._kstate = state
            return kv
        sver = tuple([g.sversion for g in self.grans])
        if kv is None or sver != self._ksver:                 # structural change: rebind / rebuild if needed
            vdt = self._vdtype
            if vdt is None or self._kmixed or (not (kv is not None and kv.vdtype is vdt)
                                               and np.dtype(vdt) not in _KERNEL_VDTYPES):
                return None
            if self._sketch and self._bind():                 # (rebound: versions moved)
                state = tuple([g.version for g in self.grans])
                sver = tuple([g.sversion for g in self.grans])
            if kv is None or not kv.fits(self):
                kv = self._kview = KernelView(self)
            self._ksver = sver
        kv.refresh(self)
        if not kv.usable:                   # a zone holds values of another dtype: numpy path from now on
            self._kview, self._kmixed = None, True
            return None
        self._kstate = state
        return kv

    def _probe_many_compiled(self, keys, t_from, t_to, fade, with_regions):
        """:meth:`probe_many` through :func:`kernels.probe_kview`; None when the kernels cannot
        compare these keys with the stored values (the caller then uses the numpy path).

        The common case (keys of the stored dtype, hash fused, no regions asked) is written as one
        straight run of attribute reads and one dispatch: at ~500 probes per call this Python is
        ~10% of the call after an ingest (cold interpreter caches make every bytecode dearer), so
        the checks that only matter on other paths come after the fast test."""
        P = len(keys)
        if P == 0 or self._vdtype is None:
            return None
        kv = self._kernel_view(defer=not with_regions)
        if kv is None:
            return None
        vdt = kv.vdtype
        if keys.dtype is vdt and keys.flags.c_contiguous:      # (builtin dtypes are singletons)
            kc = keys
        else:
            ok = kv.key_types.get(keys.dtype)
            if ok is None:
                ok = kv.key_types[keys.dtype] = kernels.comparable(vdt, keys.dtype) == vdt
            if not ok:
                kv.flush()
                return None
            kc = keys if keys.dtype == vdt and keys.flags.c_contiguous else np.ascontiguousarray(keys, dtype=vdt)
        if type(t_from) is np.ndarray and t_from.dtype is _F64 and t_from.shape == (P,) and t_from.flags.c_contiguous:
            tf = t_from
        else:
            tf = _f64_window(P, t_from)
        if type(t_to) is np.ndarray and t_to.dtype is _F64 and t_to.shape == (P,) and t_to.flags.c_contiguous:
            tt = t_to
        else:
            tt = _f64_window(P, t_to)
        pool = self._kbuf
        if pool is None or pool.vdtype is not vdt:
            pool = self._pool(vdt)
        sketch = self._sketch
        buf = pool.get(P, self._d if sketch else 1)       # (with hash scratch of >= P columns)
        cfg = self.config
        min_est, sigma = float(cfg.min_estimate), float(cfg.prune_sigma)
        if kv.fused and (kc.dtype.kind == "i" or not sketch):
            # the view and the buffers packed (kernels.probe_packed: ~10 arguments to unbox instead of 41),
            # a pending refresh of the hot zone applied by the same call, the keys hashed inside it
            pend = kv.pending
            if pend is None:
                nr, nm, visited, flat, work = kernels.probe_packed(min_est, sigma, kc, tf, tt, kv.vd, buf.bd,
                                                                   kv._hd, 1.0, 0.0)
            else:
                nr, nm, visited, flat, work = kernels.probe_packed(min_est, sigma, kc, tf, tt, kv.vd, buf.bd,
                                                                   kv._hd, *pend)
                kv.pending = None
            hp = None
        else:
            kv.flush()
            hp = _NO_HASH
            if sketch:                              # hashed here (not fused, or float keys)
                bucket, idx, sgn = self._hash(keys)
            else:
                bucket, idx, sgn = buf.hash_arrays(P, 1)         # unused (no sketches): zeros
            nr, nm, visited, flat, work = kernels.probe_kview(min_est, sigma, kc, hp, bucket, idx, sgn, tf, tt,
                                                              *kv.args, *buf.outs)
        if nr > len(buf.rp) or nm > len(buf.mp):       # (kernels.probe_k's loop only when they were too small)
            if hp is None:                          # (the packed call's arguments, unpacked)
                hp = self._hash_params() if sketch else _NO_HASH
                bucket, idx, sgn = buf.hash_arrays(P, self._d if sketch else 1)
            nr, nm, visited, flat, work = kernels.probe_k(buf, min_est, sigma, kc, hp, bucket, idx, sgn, tf, tt,
                                                          *kv.args)
        c = self.counters
        c["nodes_visited"] += visited
        c["tuples_compared"] += work
        regions = None
        if with_regions:
            if hp is None:                          # (filled by the packed call)
                bucket = buf.hash_arrays(P, self._d if sketch else 1)[0]
            p, k = buf.rp[:nr].copy(), buf.rk[:nr].copy()
            est = buf.rest[:nr].copy() if sketch else kv.clen[k].astype(np.float64)
            regions = self._make_regions(kv, bucket[:P].copy(), tf, tt, p, k, est, visited, flat, fade)
        # BufferPool.take5, inlined: lent views of a large result, copies of a small one
        pool.rate = nm / P
        if nm >= pool.MIN_LEND and 16 * nm >= len(buf.mp):
            return Matches(buf.mp[:nm], buf.mv[:nm], buf.mt[:nm], buf.mr[:nm], work, None, regions, visited,
                           buf.rend[:nr])
        return Matches(buf.mp[:nm].copy(), buf.mv[:nm].copy(), buf.mt[:nm].copy(), buf.mr[:nm].copy(), work, None,
                       regions, visited, buf.rend[:nr].copy())

    def _pool(self, vdtype) -> "kernels.BufferPool":
        """The index's recycled output arrays (:class:`kernels.BufferPool`) for stored values of ``vdtype``."""
        pool = self._kbuf
        if pool is None or pool.vdtype != vdtype:
            pool = self._kbuf = kernels.BufferPool(vdtype)
        return pool

    def scan_window_many(self, values, t_from, t_to) -> Matches:
        """The raw-window join (structure T1 of the paper's Figure 9; works on any structure).

        For every probe value x_p: all stored tuples with value x_p and
        ``t_from_p < ts <= t_to_p``, found by scanning the window, i.e. without
        summaries.  The tuples of ``(min t_from, max t_to]`` are gathered once
        (:meth:`window_tuples`, sorted by (ts, row id)); then, compiled
        (:func:`kernels.scan_window_emit`), each probe binary-searches its window
        and compares the values in it; the numpy path (``use_kernels=False``,
        string keys) compares each probe with every gathered tuple.  Matches
        are in (probe, ts, row id) order, ``Matches.region`` = ``Matches.probe``,
        ``work`` = the sum of the probes' window sizes (tuples compared).

        >>> import numpy as np
        >>> from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
        >>> ix = StreamIndex(SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2),
        ...                  IndexConfig(structure="T1"))
        >>> _ = ix.ingest(np.array([1, 2, 1, 1]), np.array([1.0, 2.0, 3.0, 4.0]))
        >>> m = ix.scan_window_many(np.array([1, 2]), np.array([1.0, 0.0]), np.array([4.0, 1.5]))
        >>> m.probe.tolist(), m.row_ids.tolist(), m.work
        ([0, 0], [2, 3], 4)
        """
        keys = self._keys(values, "scan_window_many")
        P = len(keys)
        _check_rows(P, "scan_window_many")
        tf, tt = self._window(P, t_from, t_to)
        win = self._window_arrays(float(tf.min()), float(tt.max()), count=False) if P else None
        if win is None or len(win[2]) == 0:
            e = self._empty_scan()
            z = np.zeros(0, np.int64)
            return Matches(z.astype(PROBE_DTYPE), e.values, e.timestamps, e.row_ids, work=0, region=z)
        v, t, r = win
        ct = kernels.comparable(v.dtype, keys.dtype) if (self.use_kernels and kernels.ENABLED) else None
        if ct is not None and v.dtype == ct:        # (int64/float64 stored values: the emitting kernel)
            pool = self._pool(v.dtype)
            buf = pool.get(P)
            nm, work = kernels.scan_k(buf, v, t, r, np.ascontiguousarray(keys, dtype=ct), _f64_window(P, tf),
                                      _f64_window(P, tt))
            p, mv, mt, mr = pool.take(buf, nm, P, fields=("mp", "mv", "mt", "mr"))
            self.counters["tuples_compared"] += int(work)
            return Matches(p, mv, mt, mr, work=int(work), region=SAME_AS_PROBE)
        if ct is not None:
            nm, mp, mj, work = kernels.scan_window(v.astype(ct, copy=False), t, np.ascontiguousarray(keys, dtype=ct),
                                                   np.ascontiguousarray(tf, dtype=np.float64),
                                                   np.ascontiguousarray(tt, dtype=np.float64))
            p, j = mp[:nm], mj[:nm]
        else:
            a = t.searchsorted(tf, side="right")
            e = t.searchsorted(tt, side="right")
            work = int(np.maximum(e - a, 0).sum())
            eq = (keys[:, None] == v[None, :]) & (t[None, :] > tf[:, None]) & (t[None, :] <= tt[:, None])
            p, j = eq.nonzero()
        self.counters["tuples_compared"] += int(work)
        if p.dtype != PROBE_DTYPE:                  # (the numpy comparison's nonzero: int64)
            return Matches(p.astype(PROBE_DTYPE), v[j], t[j], r[j], work=int(work), region=p)
        return Matches(p, v[j], t[j], r[j], work=int(work), region=SAME_AS_PROBE)

    def _promising_regions_levelwise(self, values, t_from, t_to, fade: float = 1.0) -> Regions:
        """The same answer as :meth:`promising_regions` (see its docstring for
        the pruning rule and the work units), computed by descending each
        pyramid level by level; used for T1 and as the reference in tests."""
        keys = self._keys(values, "promising_regions")
        P = len(keys)
        tf, tt = self._window(P, t_from, t_to)
        fade = float(fade)
        bucket, idx, sgn = self._hash(keys) if P else (np.zeros(0, np.int64), None, None)
        cols = {k: [] for k in ("probe", "zone", "bucket", "gran", "est", "partial", "n")}
        visited = flat = 0
        for gi, g in enumerate(self.grans):
            if not any(z is not None for z in g.slots) or not P:
                continue
            ranges = g.node_ranges()
            lo, hi, nn = ranges[0]
            zid = np.array([z.id if z is not None else 0 for z in g.slots], dtype=np.int64)
            if not self._sketch:
                ov = (hi[None, :] > tf[:, None]) & (lo[None, :] <= tt[:, None]) & (nn[None, :] > 0)
                p, node = np.nonzero(ov)
                flat += len(p)
                visited += len(p)
                est = nn[node].astype(np.float64)
                self._emit(cols, p, node, est, gi, lo, hi, tf, tt, zid, np.zeros(len(p), np.int64), g)
                continue
            B, d, w = self._shape
            lvl = g.height
            p = np.arange(P)
            node = np.zeros(P, dtype=np.int64)
            flat += int(((hi[None, :] > tf[:, None]) & (lo[None, :] <= tt[:, None]) & (nn[None, :] > 0)).sum())
            while True:
                l_lo, l_hi, l_n = ranges[lvl]
                ok = (l_hi[node] > tf[p]) & (l_lo[node] <= tt[p]) & (l_n[node] > 0)
                p, node = p[ok], node[ok]
                if not len(p):
                    break
                b = bucket[p]
                tab = g.levels[lvl].reshape(len(l_lo), B, d * w)
                rows = tab[node[None, :], b[None, :], idx[:, p]] * sgn[:, p]
                est = np.sort(rows, axis=0)[d // 2].astype(np.float64) if d % 2 else np.median(rows, axis=0)
                visited += len(p)
                f2 = g.f2(lvl)[node, b]
                thr = np.maximum(self.config.min_estimate, self.config.prune_sigma * np.sqrt(np.maximum(f2, 0) / w))
                keep = est >= thr
                p, node, est = p[keep], node[keep], est[keep]
                if lvl == 0:
                    self._emit(cols, p, node, est, gi, lo, hi, tf, tt, zid, bucket[p], g)
                    break
                p = np.repeat(p, 2)
                node = (np.repeat(node, 2) * 2) + np.tile(np.array([0, 1]), len(node))
                lvl -= 1
        cat = {k: (np.concatenate(v) if v else np.zeros(0)) for k, v in cols.items()}
        gran = cat["gran"].astype(np.int64)
        est = cat["est"].astype(np.float64)
        zone = cat["zone"].astype(np.int64)
        bk = cat["bucket"].astype(np.int64)
        self.counters["nodes_visited"] += visited
        return Regions(probe=cat["probe"].astype(np.int64), cell=cell_handle(zone, bk), zone=zone, bucket=bk,
                       granularity=gran, estimate=est, priority=est * fade ** (gran - 1).astype(np.float64),
                       partial=cat["partial"].astype(bool), n_tuples=cat["n"].astype(np.int64),
                       visited=int(visited), flat=int(flat))

    def _emit(self, cols, p, node, est, gi, lo, hi, tf, tt, zid, b, g):
        zlo, zhi, ptf, ptt = lo[node], hi[node], tf[p], tt[p]
        full = (ptf < zlo) & (zhi <= ptt)
        span = zhi - zlo
        ov = np.minimum(zhi, ptt) - np.maximum(zlo, ptf)
        frac = np.where(full | (span <= 0), 1.0, np.clip(ov / np.where(span > 0, span, 1.0), 0.0, 1.0))
        sizes = self._cell_sizes(g, node, b)
        cols["probe"].append(p)
        cols["zone"].append(zid[node])
        cols["bucket"].append(b)
        cols["gran"].append(np.full(len(p), gi + 1))
        cols["est"].append(est * frac)
        cols["partial"].append(~full)
        cols["n"].append(sizes)

    @staticmethod
    def _cell_sizes(g, node, b):
        out = np.zeros(len(node), dtype=np.int64)
        for s in np.unique(node):
            m = node == s
            out[m] = g.slots[int(s)].cell_size(b[m])
        return out

    def scan(self, cell: int) -> ScanResult:
        """All tuples of a cell (columnar, arrival order); work = tuples read."""
        zid, b = split_cell(int(cell))
        z = self._resolve(int(zid))
        if z is None or z.n == 0:
            return self._empty_scan()
        v, t, r = z.cell(int(b))
        self.counters["tuples_compared"] += len(r)
        return ScanResult(v, t, r, work=len(r))

    def scan_matching(self, cell: int, value, t_from: float, t_to: float, bounded: bool = False) -> ScanResult:
        """The tuples of ``cell`` equal to ``value`` with t_from < ts <= t_to (the probe of a region).

        work = tuples compared (the whole cell); ``bounded=True``: only the
        window's part of the cell, see :meth:`scan_matching_many`.
        """
        if bounded:
            m = self.scan_matching_many(np.array([int(cell)], np.int64), self._keys(value, "scan_matching")[:1],
                                        t_from, t_to, bounded=True)
            return ScanResult(m.values, m.timestamps, m.row_ids, work=m.work)
        zid, b = split_cell(int(cell))
        z = self._resolve(int(zid))
        if z is None or z.n == 0:
            return self._empty_scan()
        v, t, r = z.cell(int(b))
        key = self._keys(value, "scan_matching")[0]
        m = (v == key) & (t > t_from) & (t <= t_to)
        self.counters["tuples_compared"] += len(r)
        return ScanResult(v[m], t[m], r[m], work=len(r))

    def scan_matching_many(self, cells, values, t_from, t_to, bounded: bool = False, cursors=None) -> Matches:
        """Vectorized ``scan_matching`` over K (cell, value, window) rows.

        ``values``, ``t_from``, ``t_to`` are length-K arrays (or scalars);
        ``Matches.region`` (and ``.probe``) give the input row of each match.
        work = tuples compared, summed over rows (the whole cells).

        ``bounded=True`` (:mod:`sketchql.index.cellscan`): a cell whose
        timestamps are sorted (arrival order = time order) is searched for
        the window's run and only that run is compared; work = comparisons
        made (searches + run; unsorted cells in full).  A handle of a zone
        that COLLAPSE merged into another scans only the tuples of its own
        zone (its time range at the merge, kept by the index: the merged
        cell's other tuples were another handle's), so probes queued before
        a merge do not meet the same pairs twice.  Same matches as
        ``bounded=False`` for a live zone's handle.

        ``cursors`` (bounded only; a dict the caller keeps across calls, zone
        id -> (zone epoch, cursor)): an expiry cursor per cell of each zone scanned
        (:func:`cellscan.new_cursor`), so the search for a window's start
        gallops on from where the caller's previous scans of the cell left it
        (forward) or back from it, instead of from the cell's start: the
        tuples older than a window that only moves forward are passed once.
        Same matches; the work then depends on the caller's earlier scans.
        """
        cells = np.asarray(cells, dtype=np.int64).reshape(-1)
        K = len(cells)
        _check_rows(K, "scan_matching_many")
        keys = self._keys(values, "scan_matching_many")
        if len(keys) == 1 and K != 1:
            keys = np.repeat(keys, K)
        if len(keys) != K:
            raise SummaryError(f"scan_matching_many: {K} cells but {len(keys)} values")
        tf, tt = self._window(K, t_from, t_to)
        zids, bks = split_cell(cells)
        if bounded:
            return self._scan_bounded(zids, bks, keys, tf, tt, cursors)
        parts, work = [], 0
        for zid in np.unique(zids):
            z = self._resolve(int(zid))
            if z is None or z.n == 0:
                continue
            rows = np.flatnonzero(zids == zid)
            c = z.compact()
            st = c.offsets[bks[rows]]
            ln = c.offsets[bks[rows] + 1] - st
            tot = int(ln.sum())
            if tot == 0:
                continue
            work += tot
            rep = np.repeat(np.arange(len(rows)), ln)
            pos = np.arange(tot) - np.repeat(np.cumsum(ln) - ln, ln) + st[rep]
            r = rows[rep]
            t = c.ts[pos]
            m = (c.values[pos] == keys[r]) & (t > tf[r]) & (t <= tt[r])
            sel = pos[m]
            parts.append((r[m], c.values[sel], t[m], c.rids[sel]))
        return self._scan_result(parts, work)

    def _scan_bounded(self, zids, bks, keys, tf, tt, cursors=None) -> Matches:
        """``scan_matching_many(..., bounded=True)``: one :func:`cellscan.scan_cells` per zone."""
        span = getattr(self, "_alias_span", None) or {}
        live = self._zones
        parts, work = [], 0
        for zid in np.unique(zids).tolist():
            z = self._resolve(zid)
            if z is None or z.n == 0:
                continue
            rows = np.flatnonzero(zids == zid)
            lo_r, hi_r = tf[rows], tt[rows]
            if zid not in live and zid in span:       # a merged zone's handle: its own time range only
                s_lo, s_hi = span[zid]
                lo_r = np.maximum(lo_r, np.nextafter(s_lo, -np.inf))
                hi_r = np.minimum(hi_r, s_hi)
            c = z.compact()
            srt = cellscan.chunk_sorted(z, c)
            cur = None
            if srt and cursors is not None:
                nb = c.offsets.shape[0] - 1
                ep = getattr(z, "epoch", 0)
                ent = cursors.get(z.id)
                if ent is None or ent[0] != ep or ent[1].shape[0] != nb:
                    if len(cursors) > 2 * len(live) + 8:   # forget the zones that left the index
                        for k in [k for k in cursors if k not in live]:
                            del cursors[k]
                    ent = cursors[z.id] = (ep, *cellscan.new_cursor(nb))
                cur = ent[1:]
            r, pos, w = cellscan.scan_cells(c.values, c.ts, c.offsets, bks[rows], keys[rows],
                                            np.ascontiguousarray(lo_r), np.ascontiguousarray(hi_r),
                                            z.min_ts <= lo_r, z.max_ts > hi_r, srt, cur)
            work += w
            if pos.shape[0]:
                parts.append((rows[r], c.values[pos], c.ts[pos], c.rids[pos]))
        return self._scan_result(parts, work)

    def _scan_result(self, parts, work) -> Matches:
        self.counters["tuples_compared"] += work
        if not parts:
            e = self._empty_scan()
            return Matches(np.zeros(0, PROBE_DTYPE), e.values, e.timestamps, e.row_ids, work=work,
                           region=np.zeros(0, np.int64))
        reg = np.concatenate([p[0] for p in parts])
        return Matches(reg.astype(PROBE_DTYPE), np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts]),
                       np.concatenate([p[3] for p in parts]), work=work, region=reg)

    def probe_regions(self, regions: Regions, values, t_from, t_to) -> Matches:
        """Probe (a subset of) ``promising_regions`` output: the matching tuples.

        ``values``/``t_from``/``t_to`` are the *probe* batch given to
        ``promising_regions`` (indexed by ``regions.probe``).  ``Matches.probe``
        is the probe index and ``Matches.region`` the row in ``regions``.
        """
        keys = self._keys(values, "probe_regions")
        _check_rows(len(keys), "probe_regions")
        tf, tt = self._window(len(keys), t_from, t_to)
        pr = regions.probe
        m = self.scan_matching_many(regions.cell, keys[pr], tf[pr], tt[pr])
        m.probe = pr[m.region].astype(PROBE_DTYPE)
        return m

    def window_tuples(self, t_from: float, t_to: float) -> ScanResult:
        """Every stored tuple with t_from < ts <= t_to, exactly, ordered by (ts, row id)."""
        got = self._window_arrays(float(t_from), float(t_to))
        if got is None:
            return self._empty_scan()
        v, t, r, work = got
        return ScanResult(v, t, r, work=work)

    def _window_arrays(self, tf: float, tt: float, count: bool = True):
        """(values, ts, row ids[, tuples read]) of tf < ts <= tt sorted by (ts, row id), or None."""
        vs, ts_, rs, work = [], [], [], 0
        for _, z in self._live():
            if z.n == 0 or z.max_ts <= tf or z.min_ts > tt:
                continue
            c = z.compact()
            v, t, r = c.values, c.ts, c.rids
            work += len(t)
            if z.min_ts > tf and z.max_ts <= tt:
                vs.append(v), ts_.append(t), rs.append(r)
            elif c.ts_sorted():              # (one bucket, in order: T1's zones) the window is a slice
                i, j = t.searchsorted(tf, side="right"), t.searchsorted(tt, side="right")
                vs.append(v[i:j]), ts_.append(t[i:j]), rs.append(r[i:j])
            else:
                m = (t > tf) & (t <= tt)
                vs.append(v[m]), ts_.append(t[m]), rs.append(r[m])
        if count:
            self.counters["tuples_compared"] += work
        if not vs:
            return None
        v, t, r = np.concatenate(vs), np.concatenate(ts_), np.concatenate(rs)       # copies, always
        # skip the sort when the tuples already are in (ts, row id) order (in-order T1 streams)
        if len(t) > 1:
            dt = np.diff(t)
            if not ((dt >= 0).all() and ((dt > 0) | (np.diff(r) > 0)).all()):
                o = np.lexsort((r, t))
                v, t, r = v[o], t[o], r[o]
        return (v, t, r, work) if count else (v, t, r)

    def _empty_scan(self) -> ScanResult:
        dt = self._vdtype if self._vdtype is not None else np.int64
        return ScanResult(np.zeros(0, dtype=dt), np.zeros(0), np.zeros(0, dtype=np.int64), work=0)


def _f64_window(n: int, t) -> np.ndarray:
    """``t`` (a scalar or n window bounds) as a C-contiguous float64 array of n bounds (no copy when it
    already is one): what ``StreamIndex._window`` gives, in the form the kernels take."""
    if type(t) is np.ndarray and t.dtype == _F64 and t.shape == (n,) and t.flags.c_contiguous:
        return t
    a = np.asarray(t, dtype=np.float64)
    if a.shape != (n,):
        a = np.broadcast_to(a, (n,))
    return np.ascontiguousarray(a)


def _overlap_frac(lo, hi, tf, tt) -> float:
    if hi - lo <= 0:
        return 1.0
    return float(min(1.0, max(0.0, (min(hi, tt) - max(lo, tf)) / (hi - lo))))
