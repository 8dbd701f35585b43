"""Region sources: the one interface the promising-tuple operators use to
reach a stream's summaries.

* :class:`IndexSource` wraps :class:`sketchql.index.StreamIndex` (the real
  index: granularities, self-adjusting zones, pyramids, COLLAPSE) -- the
  default, and what the engine uses for a declared ``CREATE SUMMARY``;
* :class:`MiniSource` wraps the private fixed-zone :class:`._miniindex.MiniIndex`
  (fast, used when no declaration is given).  PT-Selection / PT-Aggregates read
  the value layer of the declared index instead
  (:mod:`sketchql.index.value_layer`: range predicates need value-ordered cells).

Interface::

    ingest(values, ts, rids) -> int                     tuples ingested
    regions(values, t_from, t_to, now, fade)
        -> (probe, cell, estimate, granularity, priority, n_tuples, nodes)
    scan(cell, value, t_from, t_to) -> (rids, ts, work)  matches in (t_from, t_to]
    scan_many(cells, values, t_from, t_to) -> (row, rids, ts, work)
        the same for K (cell, value, window) rows in one vectorized call;
        ``row[k]`` is the input row of match k, matches sorted by row (stable:
        within a row in the cell's arrival order), ``work`` = tuples compared
    cell_end_many(cells) -> float array, ``cell_end`` of each cell
    cell_sizes_many(cells, values) -> int array, tuples a scan of each row
        compares now (the probe cost; the size queued with an entry may have
        grown since)
    rest_cells_many(values, t_from, t_to) -> (row, cell, size): every
        non-empty cell of each row's value bucket in a zone overlapping the
        row's window (the "when idle" sweep), sorted by row
    total(values, t_from, t_to) -> estimated counts over the window
    cell_end(cell) -> newest timestamp the cell can hold (-inf: gone); a
        cell with ``cell_end <= now - w`` holds only expired partners
    t1                                                    length (s) of the
        first granularity (the default aging rate of PT-Join uses it)
    may_repeat                                            True if two cells can
        later resolve to the same tuples (COLLAPSE): the join then deduplicates.
"""
from __future__ import annotations

import math

import numpy as np

from ._miniindex import MiniIndex


class MiniSource:
    may_repeat = False

    def __init__(self, window: float, seed: int = 0, zone_seconds: float = 5.0, n_buckets: int = 64,
                 t1: float = 10.0, rate: int = 2, depth: int = 4, min_estimate: float = 0.5):
        keep = window + 2 * zone_seconds if math.isfinite(window) else math.inf
        self.ix = MiniIndex(n_buckets=n_buckets, zone_seconds=zone_seconds, t1=t1, rate=rate, depth=depth,
                            keep=keep, seed=seed, sketch_w=1024, sketch_d=5)
        self.min_estimate = float(min_estimate)
        self.t1 = float(t1)

    def cell_end(self, cell) -> float:
        z = int(cell)
        return (z + 1) * self.ix.zone_seconds if z in self.ix.zones else -math.inf

    def ingest(self, values, ts, rids) -> int:
        return self.ix.ingest(values, ts, rids)

    def regions(self, values, t_from, t_to, now, fade):
        probe, zone, est, gran, prio, size, nodes = self.ix.regions(values, t_from, t_to, now, fade,
                                                                    self.min_estimate)
        return probe, zone, est, gran, prio, size, nodes

    def scan(self, cell, value, t_from, t_to):
        ix = self.ix
        pos, comps = ix.scan_value(int(cell), int(value))
        t = ix.ts[pos]
        m = (t > t_from) & (t <= t_to)
        return ix.rid[pos[m]], t[m], comps

    def cell_end_many(self, cells) -> np.ndarray:
        z = np.asarray(cells, np.int64)
        live = np.isin(z, np.fromiter(self.ix.zones.keys(), np.int64, len(self.ix.zones)))
        return np.where(live, (z + 1) * self.ix.zone_seconds, -math.inf)

    def cell_sizes_many(self, cells, values) -> np.ndarray:
        """Tuples a scan of each (cell, value) row compares now (0: zone gone)."""
        ix = self.ix
        z = np.asarray(cells, np.int64)
        out = np.zeros(z.shape[0], np.int64)
        if not z.shape[0]:
            return out
        b = ix.bucket_of(np.asarray(values, np.int64))
        for zz in np.unique(z).tolist():
            if zz in ix.zones:
                m = z == zz
                out[m] = ix.zones[zz]["counts"][b[m]]
        return out

    def scan_many(self, cells, values, t_from, t_to):
        ix = self.ix
        cells = np.asarray(cells, np.int64)
        values = np.asarray(values, np.int64)
        tf = np.broadcast_to(np.asarray(t_from, np.float64), cells.shape)
        tt = np.broadcast_to(np.asarray(t_to, np.float64), cells.shape)
        bk = ix.bucket_of(values) if cells.shape[0] else np.zeros(0, np.int64)
        parts, work = [], 0
        for z in np.unique(cells).tolist():
            if z not in ix.zones:
                continue
            rows = np.flatnonzero(cells == z)
            order, off = ix._csr(z)
            st = off[bk[rows]]
            ln = off[bk[rows] + 1] - st
            tot = int(ln.sum())
            if tot == 0:
                continue
            work += tot
            rep = np.repeat(np.arange(rows.shape[0]), ln)
            pos = order[np.arange(tot) - np.repeat(np.cumsum(ln) - ln, ln) + st[rep]]
            r = rows[rep]
            t = ix.ts[pos]
            m = (ix.vals[pos] == values[r]) & (t > tf[r]) & (t <= tt[r])
            parts.append((r[m], ix.rid[pos[m]], t[m]))
        return _sorted_matches(parts, work)

    def rest_cells_many(self, values, t_from, t_to):
        ix = self.ix
        values = np.asarray(values, np.int64)
        tf = np.asarray(t_from, np.float64)
        tt = np.asarray(t_to, np.float64)
        if values.shape[0] == 0 or not ix.zones:
            e = np.zeros(0, np.int64)
            return e, e, e
        zs = ix.zone_seconds
        lo = np.where(np.isfinite(tf), np.floor(np.where(np.isfinite(tf), tf, 0.0) / zs), -np.inf)
        hi = np.floor(tt / zs)
        b = ix.bucket_of(values)
        rows, cells, sizes = [], [], []
        for z in sorted(ix.zones):
            cnt = ix.zones[z]["counts"][b]
            m = np.flatnonzero((lo <= z) & (z <= hi) & (cnt > 0))
            if m.shape[0]:
                rows.append(m); cells.append(np.full(m.shape[0], z, np.int64)); sizes.append(cnt[m])
        return _by_row(rows, cells, sizes)

    def rest_cells(self, value, t_from, t_to, exclude) -> list:
        """Cells of ``value``'s bucket overlapping the window, not in ``exclude``, non-empty."""
        ix = self.ix
        b = int(ix.bucket_of(np.array([value]))[0])
        ex = set(np.asarray(exclude).tolist())
        return [z for z in ix.zones_between(t_from, t_to) if z not in ex and ix.zones[z]["counts"][b] > 0]

    def total(self, values, t_from, t_to):
        ix = self.ix
        values = np.asarray(values)
        out = np.zeros(values.shape[0])
        zs = ix.zones_between(t_from, t_to)
        if not zs or not values.shape[0]:
            return out
        idx, sgn = ix.zones[zs[0]]["sketch"].locate(values)
        for z in zs:
            out += ix.zones[z]["sketch"].estimate_located(idx, sgn)
        return out


class IndexSource:
    """Adapter over :class:`sketchql.index.StreamIndex` (``index`` given, or
    built from ``granularity``/``rate``/``depth``/``config``)."""

    may_repeat = True

    def __init__(self, window: float, index=None, granularity: float = 10.0, rate: int = 2,
                 depth: int | None = None, config=None, name: str = "pt", seed: int = 0):
        from ...index import IndexConfig, StreamIndex, SummaryDeclaration

        if index is None:
            if depth is None:
                # enough history for the window (whole-stream: ~10 minutes)
                span = window if math.isfinite(window) else 600.0
                # the covered history dips by up to one period of the last
                # granularity right after a COLLAPSE: keep one level more
                depth, hist = 1, granularity
                while hist < span + granularity and depth < 16:
                    depth += 1
                    hist += granularity * rate ** (depth - 1)
                depth = min(depth + 1, 16)
            decl = SummaryDeclaration(name, name, "key", granularity=float(granularity), rate=int(rate),
                                      depth=int(depth))
            cfg = config if config is not None else IndexConfig(structure="T4", n_buckets=64, w=256, seed=seed)
            index = StreamIndex(decl, cfg)
        self.ix = index
        self.t1 = float(index.decl.granularity)

    def cell_end(self, cell) -> float:
        """Newest timestamp of the cell's zone (after COLLAPSE: of the zone it
        was merged into); ``+inf`` if the index cannot say (never skipped).
        NOTE: uses StreamIndex internals (``_resolve``, ``Zone.max_ts``)."""
        from ...index.results import split_cell

        resolve = getattr(self.ix, "_resolve", None)
        if resolve is None:
            return math.inf
        z = resolve(int(split_cell(int(cell))[0]))
        if z is None or getattr(z, "n", 1) == 0:
            return -math.inf
        return float(getattr(z, "max_ts", math.inf))

    def ingest(self, values, ts, rids) -> int:
        rep = self.ix.ingest(np.asarray(values), np.asarray(ts, np.float64), np.asarray(rids, np.int64))
        return int(rep.accepted)

    def regions(self, values, t_from, t_to, now, fade):
        """Priority = estimate / rate^(i-1) * fade^(i-1): a zone of granularity
        i spans rate^(i-1) times more time than one of G1, so its estimate is
        first normalized per G1-length of time -- otherwise an old, coarse
        zone would outrank a recent fine one by sheer size, against the
        fade's intent of favouring recent regions."""
        r = self.ix.promising_regions(np.asarray(values), t_from, t_to, fade=fade)
        g = (r.granularity - 1).astype(np.float64)
        prio = r.estimate * np.power(float(fade) / self.ix.decl.rate, g)
        return r.probe, r.cell, r.estimate, r.granularity, prio, r.n_tuples, int(r.visited)

    def scan(self, cell, value, t_from, t_to):
        s = self.ix.scan_matching(int(cell), value, t_from, t_to)
        return s.row_ids, s.timestamps, int(s.work)

    def cell_end_many(self, cells) -> np.ndarray:
        """Vectorized :meth:`cell_end` (one zone lookup per distinct zone)."""
        from ...index.results import split_cell

        cells = np.asarray(cells, np.int64)
        resolve = getattr(self.ix, "_resolve", None)
        if resolve is None:
            return np.full(cells.shape[0], math.inf)
        zids = split_cell(cells)[0]
        u, inv = np.unique(zids, return_inverse=True)
        ends = np.empty(u.shape[0])
        for i, zid in enumerate(u.tolist()):
            z = resolve(int(zid))
            ends[i] = -math.inf if (z is None or getattr(z, "n", 1) == 0) else float(getattr(z, "max_ts", math.inf))
        return ends[inv]

    def cell_sizes_many(self, cells, values=None) -> np.ndarray:
        """Tuples a scan of each cell compares now (after COLLAPSE: the cell of
        the zone it was merged into; 0: zone gone).  NOTE: StreamIndex internals
        like :meth:`cell_end_many`."""
        from ...index.results import split_cell

        cells = np.asarray(cells, np.int64)
        resolve = getattr(self.ix, "_resolve", None)
        if resolve is None or not cells.shape[0]:
            return np.zeros(cells.shape[0], np.int64)
        zids, b = split_cell(cells)
        out = np.zeros(cells.shape[0], np.int64)
        for zid in np.unique(zids).tolist():
            z = resolve(int(zid))
            if z is not None and getattr(z, "n", 0):
                m = zids == zid
                out[m] = np.asarray(z.cell_size(b[m]), np.int64)
        return out

    def scan_many(self, cells, values, t_from, t_to):
        """One :meth:`StreamIndex.scan_matching_many` call for K rows."""
        cells = np.asarray(cells, np.int64)
        if cells.shape[0] == 0:
            return _sorted_matches([], 0)
        m = self.ix.scan_matching_many(cells, np.asarray(values), t_from, t_to)
        return _sorted_matches([(np.asarray(m.region, np.int64), m.row_ids, m.timestamps)], int(m.work))

    def rest_cells_many(self, values, t_from, t_to):
        """Vectorized :meth:`rest_cells` without the exclusion (the caller
        removes the cells already queued); one pass over the live zones.
        NOTE: uses StreamIndex internals like :meth:`rest_cells`."""
        from ...index import cell_handle

        ix = self.ix
        values = np.asarray(values)
        tf = np.asarray(t_from, np.float64)
        tt = np.asarray(t_to, np.float64)
        if values.shape[0] == 0:
            e = np.zeros(0, np.int64)
            return e, e, e
        b = np.asarray(ix._hash(values)[0], np.int64)
        rows, cells, sizes = [], [], []
        for _, z in ix._live():
            if z.n == 0:
                continue
            m = (z.max_ts > tf) & (z.min_ts <= tt)
            if not m.any():
                continue
            r = np.flatnonzero(m)
            sz = np.asarray(z.cell_size(b[r]), np.int64)
            ok = sz > 0
            if ok.any():
                r = r[ok]
                rows.append(r); cells.append(np.asarray(cell_handle(z.id, b[r]), np.int64)); sizes.append(sz[ok])
        return _by_row(rows, cells, sizes)

    def rest_cells(self, value, t_from, t_to, exclude) -> list:
        """Cells of ``value``'s bucket in zones overlapping the window, not in
        ``exclude``, non-empty.  NOTE: uses StreamIndex internals (``_hash``,
        ``_live``, ``Zone.cell_size``) -- the index has no public "all cells
        of a value" query yet."""
        from ...index import cell_handle

        ix = self.ix
        b = int(ix._hash(np.asarray([value]))[0][0])
        ex = set(np.asarray(exclude).tolist())
        out = []
        for _, z in ix._live():
            if z.n == 0 or z.max_ts <= t_from or z.min_ts > t_to:
                continue
            c = int(cell_handle(z.id, b))
            if c not in ex and int(z.cell_size(np.array([b]))[0]) > 0:
                out.append(c)
        return out

    def total(self, values, t_from, t_to):
        return self.ix.estimate(np.asarray(values), t_from, t_to, edge="prorate")


def _sorted_matches(parts, work):
    """(row, rids, ts, work) from per-zone parts, stably sorted by row."""
    if not parts:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0), int(work)
    row = np.concatenate([p[0] for p in parts]).astype(np.int64, copy=False)
    rid = np.concatenate([p[1] for p in parts]).astype(np.int64, copy=False)
    ts = np.concatenate([p[2] for p in parts]).astype(np.float64, copy=False)
    if row.shape[0] > 1 and (np.diff(row) < 0).any():
        o = np.argsort(row, kind="stable")
        row, rid, ts = row[o], rid[o], ts[o]
    return row, rid, ts, int(work)


def _by_row(rows, cells, sizes):
    """Concatenate per-zone (row, cell, size) parts, stably sorted by row
    (within a row in zone order)."""
    if not rows:
        e = np.zeros(0, np.int64)
        return e, e, e
    r, c, s = np.concatenate(rows), np.concatenate(cells), np.concatenate(sizes)
    o = np.argsort(r, kind="stable")
    return r[o], c[o], s[o]


def make_source(kind, window: float, seed: int = 0, options: dict | None = None):
    """``kind``: ``"index"`` (StreamIndex), ``"mini"``, a ready StreamIndex, or a
    :class:`SharedIndexSource` (a query's view of the engine's shared index, used as is)."""
    if isinstance(kind, IndexSource):
        return kind
    opts = dict(options or {})
    if kind == "mini":
        return MiniSource(window, seed=seed, **opts)
    if kind == "index":
        return IndexSource(window, seed=seed, **opts)
    if hasattr(kind, "promising_regions"):
        return IndexSource(window, index=kind)
    from ...errors import SketchQLError

    raise SketchQLError(f"PT operator: unknown region source {kind!r} (use 'index', 'mini' or a StreamIndex)")


class SharedIndexSource(IndexSource):
    """A query's view of a *shared* :class:`sketchql.index.StreamIndex` (the
    engine's declared index of a stream attribute, fed once by the engine).

    The index holds every tuple of the stream with its *stream row id*; the
    PT operator works in its own arrival numbers (``seq``: one order across
    both sides of a join, the query's filtered / sampled input only).  This
    view keeps the query's part as a mapping ``stream row -> seq`` (two
    sorted int64 arrays) and applies it on top of the index:

    * ``ingest`` does not touch the index (the engine already did): it binds
      the seqs of the arriving tuples to the stream rows given just before
      with :meth:`bind` (same order), so the insert is charged as before;
    * ``scan`` / ``scan_many`` translate the matches' stream rows to seqs and
      drop the rows the query never accepted (filtered, sampled out, pushed
      before the query was registered, or not yet reached by the query's
      clock) -- the per-query filter applied at probe time.  ``work`` still
      counts every tuple compared (the cell is shared);
    * ``regions`` / ``total`` / ``cell_end*`` / ``rest_cells*`` read the shared
      index as is (estimates over the whole stream).

    Memory: 8 bytes (two int32 offsets) per accepted tuple of the last ``w``
    seconds (plus the current ingest), against the index's sketch tables and
    tuple lists.

    >>> import numpy as np
    >>> from sketchql.index import StreamIndex, SummaryDeclaration
    >>> ix = StreamIndex(SummaryDeclaration("s", "S", "k", granularity=10.0, rate=2, depth=4))
    >>> _ = ix.ingest(np.array([5, 6, 5]), np.array([1.0, 2.0, 3.0]), np.array([100, 101, 102]))
    >>> src = SharedIndexSource(60.0, ix)
    >>> src.bind(np.array([0, 1]), np.array([100, 102]))   # the query's tuples 0, 1 are rows 100, 102
    >>> src.ingest(np.array([5, 5]), np.array([1.0, 3.0]), np.array([0, 1]))
    2
    >>> r, cells, _ = src.rest_cells_many(np.array([5]), 0.0, 3.0)     # every cell of value 5
    >>> row, rid, ts, work = src.scan_many(cells, np.full(len(cells), 5), 0.0, 3.0)
    >>> sorted(rid.tolist()), sorted(ts.tolist())                       # row 101 (value 6) is not 5
    ([0, 1], [1.0, 3.0])
    """

    may_repeat = True

    def __init__(self, window: float, index):
        super().__init__(window, index=index)
        self.window = float(window)
        # the mapping, compact: int32 offsets from a base (rows accepted, increasing; their seqs)
        self._rbase = 0
        self._sbase = 0
        self._rows = np.zeros(0, np.int32)
        self._seqs = np.zeros(0, np.int32)
        self._first = 0                        # absolute index of _rows[0]
        self._marks = ([], [])                 # per ingest: absolute end index, newest ts (pruning)
        self._bound = None

    # -- the per-query mapping ------------------------------------------------
    def bind(self, seqs, stream_rows) -> None:
        """The stream row id of each arrival ``seqs`` the operator may ingest next (it may
        ingest them in chunks, or shed some: those are never mapped, so never found)."""
        q = np.asarray(seqs, np.int64)
        r = np.asarray(stream_rows, np.int64)
        if self._bound is not None and self._bound[0].shape[0]:
            q, r = np.concatenate([self._bound[0], q]), np.concatenate([self._bound[1], r])
        o = np.argsort(q, kind="stable")
        self._bound = (q[o], r[o])

    def ingest(self, values, ts, rids) -> int:
        rids = np.asarray(rids, np.int64)
        if not rids.shape[0]:
            return 0
        bq, br = self._bound if self._bound is not None else (np.zeros(0, np.int64),) * 2
        i = np.searchsorted(bq, rids)
        ok = i < bq.shape[0]
        ok[ok] = bq[i[ok]] == rids[ok]
        if not ok.all():
            from ...errors import SketchQLError
            raise SketchQLError(f"shared index source: {int((~ok).sum())} arrivals have no stream row "
                                f"(call bind(seqs, rows) first)")
        rows = br[i]
        drop = bq <= rids.max()          # ingested now, or passed over (shed)
        self._bound = (bq[~drop], br[~drop])
        if not rids.shape[0]:
            return 0
        ts = np.asarray(ts, np.float64)
        o = np.argsort(rows, kind="stable")
        rows, rids, ts = rows[o], rids[o], ts[o]
        if not self._rows.shape[0]:
            self._rbase, self._sbase = int(rows[0]), int(rids.min())
        self._rebase(int(rows.max()), int(rids.min()), int(rids.max()))
        r32 = (rows - self._rbase).astype(np.int32)
        s32 = (rids - self._sbase).astype(np.int32)
        if self._rows.shape[0] and r32[0] <= self._rows[-1]:
            # rows of another side interleave (never for one stream): merge, stop pruning what was there
            allr = np.concatenate([self._rows, r32])
            oo = np.argsort(allr, kind="stable")
            self._rows, self._seqs = allr[oo], np.concatenate([self._seqs, s32])[oo]
            self._marks = ([], [])
        else:
            self._rows = np.concatenate([self._rows, r32])
            self._seqs = np.concatenate([self._seqs, s32])
        self._marks[0].append(self._first + self._rows.shape[0])
        self._marks[1].append(float(ts.max()))
        self._prune(float(ts.min()))
        return int(rids.shape[0])

    def _rebase(self, row_max: int, seq_min: int, seq_max: int) -> None:
        """Keep the int32 offsets in range (the mapping spans ~one window of rows)."""
        lim = 2 ** 31 - 1
        if row_max - self._rbase >= lim and self._rows.shape[0]:
            nb = self._rbase + int(self._rows[0])
            self._rows = (self._rows.astype(np.int64) - (nb - self._rbase)).astype(np.int32)
            self._rbase = nb
        if (seq_max - self._sbase >= lim or seq_min < self._sbase) and self._seqs.shape[0]:
            nb = min(self._sbase + int(self._seqs.min()), seq_min)
            self._seqs = (self._seqs.astype(np.int64) - (nb - self._sbase)).astype(np.int32)
            self._sbase = nb
        if row_max - self._rbase >= lim or seq_max - self._sbase >= lim:
            from ...errors import SketchQLError
            raise SketchQLError("shared index source: the mapping spans more than 2^31 rows")

    def _prune(self, t0: float) -> None:
        """Drop the entries of ingests whose newest tuple is <= t0 - w: the operator's probes
        after an arrival at t0 only look for partners younger than t0 - w (exact)."""
        if not math.isfinite(self.window) or not self._marks[0]:
            return
        ends, tmax = self._marks
        k = int(np.searchsorted(np.asarray(tmax), t0 - self.window, side="right"))
        # marks are in ingest order; their newest ts only grows for one stream
        if k == 0:
            return
        cut = ends[k - 1] - self._first
        if cut > 0 and 4 * cut >= self._rows.shape[0]:     # amortized: compact when a quarter is old
            self._rows, self._seqs = self._rows[cut:], self._seqs[cut:]
            self._first += cut
            del ends[:k], tmax[:k]

    def _translate(self, rows):
        rows = np.asarray(rows, np.int64) - self._rbase
        n = self._rows.shape[0]
        if not n:
            return np.zeros(rows.shape[0], np.int64), np.zeros(rows.shape[0], bool)
        i = np.searchsorted(self._rows, rows)
        ok = i < n
        ok[ok] = self._rows[i[ok]] == rows[ok]
        return np.where(ok, self._seqs[np.minimum(i, n - 1)].astype(np.int64) + self._sbase, 0), ok

    @property
    def mapping_nbytes(self) -> int:
        return int(self._rows.nbytes + self._seqs.nbytes + 16 * len(self._marks[0]))

    # -- probes: the shared index, filtered to the query's tuples ------------
    def scan(self, cell, value, t_from, t_to):
        rows, ts, work = super().scan(cell, value, t_from, t_to)
        seq, ok = self._translate(rows)
        return seq[ok], np.asarray(ts)[ok], work

    def scan_many(self, cells, values, t_from, t_to):
        row, rows, ts, work = super().scan_many(cells, values, t_from, t_to)
        if not rows.shape[0]:
            return row, rows, ts, work
        seq, ok = self._translate(rows)
        return row[ok], seq[ok], ts[ok], work


def index_nbytes(sources) -> int:
    """Memory of the distinct indexes behind ``sources`` plus the shared views' mappings."""
    seen, tot = set(), 0
    for s in sources:
        ix = getattr(s, "ix", None)
        if ix is not None and id(ix) not in seen:
            seen.add(id(ix))
            nb = getattr(ix, "nbytes", 0)
            tot += int(nb() if callable(nb) else nb)
        tot += int(getattr(s, "mapping_nbytes", 0))
    return tot
