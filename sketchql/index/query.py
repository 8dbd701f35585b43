"""Query-side snapshot of a StreamIndex: flat arrays for branch-free probing.

(This is the numpy path: ``promising_regions`` and the reference of
``probe_many``.  The default, compiled ``probe_many`` uses
:mod:`sketchql.index.kview` and :mod:`sketchql.index.kernels` instead.)

A pyramid descent (``StreamIndex.promising_regions``) evaluated level by
level costs a dozen small numpy calls per level and granularity; for the
small pyramids of a stream index that fixed cost dominates.  The view below
flattens every *non-empty* pyramid node of every granularity into one list
(granularity-major, then level 0 .. root, then position), with

- ``lo``/``hi``: the node's data time range, ``leaf``, ``gran`` (1-based),
  ``zid`` (zone id of a leaf), ``anc`` (N, H): the node's strict ancestors
  (padded with the sentinel N);
- ``base``: the node's offset in the shared sketch buffer (all granularities'
  pyramid tables are bound into one array, so one ``np.take`` gathers any
  set of (node, bucket, row, column) counters);
- ``thr`` (N, B): the pruning threshold ``max(min_estimate, prune_sigma *
  sqrt(F2 / w))`` of every (node, bucket);
- a CSR of the tuples: ``V, T, R`` (values, timestamps, row ids of all live
  zones, each zone sorted by bucket; G1's open "hot" zone last) and
  ``cstart``/``clen`` (N*B,): where cell (leaf, bucket) starts and how long it is.

With it a batch of P probes is answered *speculatively*: the estimates of
all (probe, node) pairs are gathered at once (P x N x d counters, in blocks
of probes), a (probe, node) pair passes iff the node overlaps the probe's
window and the estimate reaches the threshold, and a leaf survives iff it
and all its ancestors pass, which is exactly the set of leaves the
level-by-level descent reaches (a node is only reached if every ancestor
passed), and ``visited`` counts the pairs the descent would evaluate
(overlapping nodes whose strict ancestors all passed).  The results are
identical to the descent; only the number of numpy calls changes (the extra
speculative estimates are a few thousand gathered counters).

Views are cached per granularity (keyed by ``Granularity.version``) and as a
whole, so repeated probes between ingests pay nothing; after an ingest that
only appended to G1's open zone the view is *patched* (that leaf's and its
ancestors' ranges and thresholds, the zone's cells); otherwise only the
granularities that changed are re-flattened.

>>> import numpy as np
>>> from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
>>> ix = StreamIndex(SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2),
...                  IndexConfig(structure="T4", n_buckets=4, w=32))
>>> _ = ix.ingest(np.array([5, 5, 6]), np.array([1.0, 2.0, 3.0]))
>>> qv = ix._view()          # two G1 zones (MAXLENGTH = T1/4 = 2.5 s) and their root
>>> int(qv.N), qv.zid[qv.leaf].tolist(), int(qv.clen.sum())
(3, [1, 2], 3)
"""
from __future__ import annotations

import numpy as np

from . import kernels


def _thr(f2, min_est: float, sigma: float, w: int) -> np.ndarray:
    return np.maximum(min_est, sigma * np.sqrt(np.maximum(f2, 0) / w))


def _thr_nodes(g, nodes, min_est: float, sigma: float) -> np.ndarray:
    """Pruning thresholds (len(nodes), B) of store nodes of granularity g."""
    f2 = g.f2_nodes()
    if kernels.ENABLED:
        return kernels.thresholds(f2, nodes, float(min_est), float(sigma), int(g.shape[2]))
    return _thr(f2[nodes], min_est, sigma, g.shape[2])


class GranPart:
    """The flattened non-empty nodes of one granularity (see module doc).

    ``hot`` is the zone that received the latest append (G1's open zone), if
    it is a non-empty leaf here: its tuples are kept apart from the ``cold``
    CSR so that a view can be *patched* after appends to it alone.
    """

    def __init__(self, g, gi: int, goff: int, min_est: float, sigma: float, B: int, vdtype):
        self.gi = gi
        self.sig = (g.sversion, g.append_switches)
        level, pos, anc, _ = g.topology()
        lo, hi, nn = g.leaf_ranges()
        keep = nn.nonzero()[0]
        n = self.n = len(keep)
        self.hot = None
        if n == 0:
            return
        leaf = level[keep] == 0
        slot = pos[keep]
        nleaf = int(np.count_nonzero(leaf))           # leaves come first (level 0 is first in the store)
        zones = [g.slots[int(s)] for s in slot[:nleaf]]
        self.F = np.array([lo[keep], hi[keep]]).T
        self.I = np.zeros((n, 3), dtype=np.int64)     # leaf, zone id, store node
        self.I[:nleaf, 0] = 1
        self.I[:nleaf, 1] = [z.id for z in zones]
        self.I[:, 2] = goff + keep
        remap = np.full(len(level) + 1, -1, dtype=np.int64)
        remap[keep] = np.arange(n)
        self.anc = remap[anc[keep]] if anc.shape[1] else np.full((n, 1), -1, dtype=np.int64)
        self.thr = _thr_nodes(g, keep, min_est, sigma)                               # (n, B)
        # tuples: cold zones concatenated, the hot zone apart
        hot_row = -1
        if gi == 0:
            for r_, z in enumerate(zones):
                if z.id == g.last_append:
                    hot_row = r_
        chunks = [z.compact() for z in zones]
        cst = np.zeros((n, B), dtype=np.int64)
        cln = np.zeros((n, B), dtype=np.int64)
        offs = np.array([c.offsets for c in chunks])                # (nleaf, B + 1), all non-empty
        sizes = offs[:, -1].copy()
        if hot_row >= 0:
            sizes[hot_row] = 0
        cst[:nleaf] = offs[:, :-1] + (sizes.cumsum() - sizes)[:, None]
        cln[:nleaf] = offs[:, 1:] - offs[:, :-1]
        cold = [c for r_, c in enumerate(chunks) if r_ != hot_row]
        self.is_hot = np.zeros(n, dtype=bool)
        if hot_row >= 0:
            z = zones[hot_row]
            self.hot = z
            self.hot_row = hot_row
            self.hot_chunk = chunks[hot_row]
            self.is_hot[hot_row] = True
            self.path_store = g.path(z.slot)                      # the hot leaf and its ancestors
            self.path_rows = remap[self.path_store]
            cst[hot_row] = offs[hot_row, :-1]
        if cold:
            self.V = np.concatenate([c.values for c in cold]) if len(cold) > 1 else cold[0].values
            self.T = np.concatenate([c.ts for c in cold]) if len(cold) > 1 else cold[0].ts
            self.R = np.concatenate([c.rids for c in cold]) if len(cold) > 1 else cold[0].rids
        else:
            self.V = np.zeros(0, dtype=chunks[0].values.dtype if chunks else (vdtype or np.int64))
            self.T, self.R = np.zeros(0), np.zeros(0, dtype=np.int64)
        self.cstart, self.clen = cst, cln


class QueryView:
    """All granularities' parts concatenated (see module doc); ``patch`` follows appends to G1's hot zone."""

    def __init__(self, parts: list[GranPart], B: int, bdw: int):
        parts = [p for p in parts if p.n]
        ns = np.array([p.n for p in parts], dtype=np.int64)
        N = int(ns.sum())
        self.N, self.B = N, B
        self.multi = len(parts) > 1
        self.hot = None
        if not N:
            return
        one = len(parts) == 1
        cat = (lambda xs: xs[0]) if one else np.concatenate
        F = cat([p.F for p in parts])
        I = cat([p.I for p in parts])
        self.lo, self.hi = F[:, 0].copy(), F[:, 1].copy()
        self.leaf = I[:, 0] == 1
        self.zid, self.base = I[:, 1], I[:, 2]
        self.gran = np.repeat(np.array([p.gi + 1 for p in parts], dtype=np.int64), ns)
        H = max(p.anc.shape[1] for p in parts)
        ancs = [p.anc if p.anc.shape[1] == H else
                np.pad(p.anc, ((0, 0), (0, H - p.anc.shape[1])), constant_values=-1) for p in parts]
        anc = cat(ancs)
        first = (ns.cumsum() - ns).repeat(ns)[:, None]
        self.anc = np.where(anc >= 0, anc + first, N)
        self.thr = cat([p.thr for p in parts]).copy()                            # (N, B)
        self.clen = cat([p.clen for p in parts]).reshape(-1).copy()
        # CSR: every part's cold tuples, then the hot zone of the first granularity (if any)
        lens = np.array([len(p.R) for p in parts], dtype=np.int64)
        cbase = lens.cumsum() - lens
        rowbase = cbase.repeat(ns)
        hp = parts[0] if parts[0].gi == 0 and parts[0].hot is not None else None
        total_cold = int(lens.sum())
        if hp is not None:
            rowbase[hp.hot_row] = total_cold
        self.cstart = (cat([p.cstart for p in parts]) + rowbase[:, None]).reshape(-1)
        self.Vc = cat([p.V for p in parts])
        self.Tc = cat([p.T for p in parts])
        self.Rc = cat([p.R for p in parts])
        if hp is not None:
            self.hot = hp.hot
            self.hot_row = hp.hot_row
            self.path_store = hp.path_store
            self.path_rows = hp.path_rows
            self.hot_n = hp.hot.n
            hv, ht, hr = [hp.hot_chunk.values], [hp.hot_chunk.ts], [hp.hot_chunk.rids]
        else:
            hv, ht, hr = [], [], []
        self.V = np.concatenate([self.Vc] + hv) if hv else self.Vc
        self.T = np.concatenate([self.Tc] + ht) if ht else self.Tc
        self.R = np.concatenate([self.Rc] + hr) if hr else self.Rc
        self.prepare(bdw)

    def prepare(self, bdw: int) -> None:
        """Per-view constants for :meth:`descend` (flat table offsets, (B, N) thresholds)."""
        self.base_flat = self.base * bdw
        self.thrB = np.ascontiguousarray(self.thr.T)
        self.leaf_row = self.leaf[None, :]
        self.leaf_ids = self.leaf.nonzero()[0]

    def patch(self, g, min_est: float, sigma: float) -> None:
        """Follow appends to the hot zone since the view was built (nothing else changed)."""
        z = self.hot
        c = z.compact()
        pr = self.path_rows
        self.lo[pr] = np.minimum(self.lo[pr], z.min_ts)
        self.hi[pr] = np.maximum(self.hi[pr], z.max_ts)
        thr = _thr_nodes(g, self.path_store, min_est, sigma)
        self.thr[pr] = thr
        self.thrB[:, pr] = thr.T
        B, r = self.B, self.hot_row
        base = len(self.Rc)
        self.cstart[r * B:(r + 1) * B] = base + c.offsets[:-1]
        o = c.offsets
        self.clen[r * B:(r + 1) * B] = o[1:] - o[:-1]
        self.V = np.concatenate([self.Vc, c.values])
        self.T = np.concatenate([self.Tc, c.ts])
        self.R = np.concatenate([self.Rc, c.rids])
        self.hot_n = z.n

    def descend(self, store_flat, bucket, idxb, sgn, tf, tt):
        """Speculative descent of P probes (dense over the N view nodes); see the module doc.

        ``idxb`` (d, P) = the probes' counter indexes within a node table
        (``bucket * d w + r w + h_r``).  Returns (p, k, est) of the surviving
        leaf pairs in (probe, node) order, ``visited`` and ``flat``.
        """
        P, N = len(bucket), self.N
        ok = self.hi > tf[:, None]
        ok &= self.lo <= tt[:, None]                                   # (P, N) node overlaps window
        rows = store_flat.take(idxb[:, :, None] + self.base_flat)    # (d, P, N)
        rows *= sgn[:, :, None]
        d = rows.shape[0]
        if d % 2:
            rows.sort(axis=0)
            est = rows[d // 2]
        else:
            est = np.median(rows, axis=0)
        pm = np.ones((P, N + 1), dtype=bool)                           # last column: sentinel "passed"
        pv = pm[:, :N]
        np.greater_equal(est, self.thrB[bucket], out=pv)
        pv &= ok
        reach = pm[:, self.anc].all(axis=2)                            # all strict ancestors passed
        visited = int(np.count_nonzero(reach & ok))
        flat = int(np.count_nonzero(ok & self.leaf_row))
        reach &= pv
        reach &= self.leaf_row
        p, k = reach.nonzero()
        return p, k, est[p, k].astype(np.float64), visited, flat
