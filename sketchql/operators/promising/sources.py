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
    scan_many(cells, values, t_from, t_to, cursor=False) -> (row, rids, ts, work)
        the same for K (cell, value, window) rows in one vectorized call;
        ``row[k]`` is the input row of match k, matches sorted by row (stable:
        within a row in the cell's arrival order), ``work`` = tuples compared;
        ``cursor=True`` (PT-Join's probes): the index source starts each
        window's search at its per-cell expiry cursor (the mini index ignores it)
    cell_end_many(cells) -> float array, ``cell_end`` of each cell
    cell_sizes_many(cells, values) -> int array, tuples a scan of each row
        compares now (the probe cost; the size queued with an entry may have
        grown since)
    rest_cells_many(values, t_from, t_to) -> (row, cell, size): every
        non-empty cell of each row's value bucket in a zone overlapping the
        row's window (the "when idle" sweep), sorted by row
    cell_origins(cells) -> (live, lo, hi) or None (optional; sources with
        ``may_repeat``): the live cell each handle resolves to and the time
        range [lo, hi] of the handle's own tuples there (a merged zone's part)
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
    region_block = "cell"    # regions() rows are ordered (zone, probe)

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

    def scan_many(self, cells, values, t_from, t_to, cursor: bool = False):
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
                 depth: int | None = None, config=None, name: str = "pt", seed: int = 0,
                 whole_g1_zones: bool = False, n_buckets: int = 256, w: int = 64):
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
            # 256 value buckets of 64-counter sketches: the sketch memory of 64 x 256, but a
            # cell holds a quarter of the other values (compares without output, issue 16).
            # whole_g1_zones (desc's private index, PTJoin): a G1 zone may last the whole G1 period
            # (T4 still starts a new zone when the value distribution changes).  Each zone is a
            # cell per probe, and the default MAXLENGTH of a quarter period cut G1 into 2.5 s cells
            # of a few pairs each, a probe and a window search apiece (issue 16, full bench, desc /
            # Figure 11 bound at 10..100 ms: 96.61 / 97.52 / 97.63 / 97.34 / 96.47 / 94.01 / 97.81 /
            # 99.66 / 99.90 / 99.98 -> 96.41 / 97.12 / 97.44 / 97.41 / 96.90 / 94.58 / 98.13 / 99.67
            # / 99.91 / 99.99 %; desc's mean |ts1 - ts2| at 10 ms 12.5 -> 5.4 s).  Not for weighted:
            # its strata are (value, granularity) and coarser G1 zones made its steady-state
            # Hist-MSE at 10 / 20 ms (bench --quick) 0.00084 / 0.00175 -> 0.0022 / 0.0027.
            # desc also takes n_buckets=1024, w=16 (PTJoin): the same sketch memory, a quarter of
            # the other values per cell (the bench's 2,000 items: ~2 per bucket instead of ~8):
            # 60 ms compares of other values 3.1k -> 1.2k (desc / bound 95.17 -> 95.41 %).
            cfg = config if config is not None else IndexConfig(
                structure="T4", n_buckets=int(n_buckets), w=int(w), seed=seed,
                max_zone_length=float(granularity) if whole_g1_zones else None)
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
        fade's intent of favouring recent regions.  (Without the
        normalization desc's output / the Figure 11 bound rose by 0.3-0.5
        points at 10-60 ms, but its pairs' mean |ts1 - ts2| at 10 ms went from
        12.5 s to 29.8 s, the freshness of a random sample of the window's
        pairs: issue 16, not taken.)"""
        r = self.ix.promising_regions(np.asarray(values), t_from, t_to, fade=fade)
        g = (r.granularity - 1).astype(np.float64)
        prio = r.estimate * np.power(float(fade) / self.ix.decl.rate, g)
        return r.probe, r.cell, r.estimate, r.granularity, prio, r.n_tuples, int(r.visited)

    def scan(self, cell, value, t_from, t_to):
        s = self.ix.scan_matching(int(cell), value, t_from, t_to, bounded=True)
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

    def scan_many(self, cells, values, t_from, t_to, cursor: bool = False):
        """One :meth:`StreamIndex.scan_matching_many` call for K rows,
        ``bounded``: only the window's part of each cell is compared (and
        charged), a merged zone's handle scans only its own zone's tuples
        (:mod:`sketchql.index.cellscan`).  ``cursor``: this source's expiry
        cursors (one per cell, kept across calls) start the search for each
        window's start (PT-Join's probes; same matches, less work)."""
        cells = np.asarray(cells, np.int64)
        if cells.shape[0] == 0:
            return _sorted_matches([], 0)
        cur = None
        if cursor:
            cur = getattr(self, "_cursors", None)
            if cur is None:
                cur = self._cursors = {}
        if cur is not None and _takes_cursors(self.ix.scan_matching_many):
            groups = self._cursor_groups(cells, cur)
            if groups is not None:
                values = np.asarray(values)
                tf = np.broadcast_to(np.asarray(t_from, np.float64), cells.shape)
                tt = np.broadcast_to(np.asarray(t_to, np.float64), cells.shape)
                parts, work = [], 0
                for rows, cd in groups:
                    m = self.ix.scan_matching_many(cells[rows], values[rows], tf[rows], tt[rows], bounded=True,
                                                   cursors=cd)
                    parts.append((rows[np.asarray(m.region, np.int64)], m.row_ids, m.timestamps))
                    work += int(m.work)
                return _sorted_matches(parts, work)
            m = self.ix.scan_matching_many(cells, np.asarray(values), t_from, t_to, bounded=True, cursors=cur)
        else:   # an index (or a stand-in) without expiry cursors
            m = self.ix.scan_matching_many(cells, np.asarray(values), t_from, t_to, bounded=True)
        return _sorted_matches([(np.asarray(m.region, np.int64), m.row_ids, m.timestamps)], int(m.work))

    def _cursor_groups(self, cells, cur):
        """Expiry cursors per cell *handle* (issue 16): ``[(rows, cursors)]``, the
        rows of the live zones' handles with the source's cursors ``cur`` and,
        per merged zone's handle (COLLAPSE), its rows with cursors of its own;
        None when every row is a live zone's handle.

        A merged handle scans only its own zone's part of the merged cell (a
        time range, :meth:`StreamIndex.cell_origins`).  With the merged cell's
        one cursor, probes of the live zone and of every part moved it back and
        forth: a part's window start lay far from where the previous scan left
        it, and galloping there passed the other parts' tuples, each one
        charged (full bench at 60 ms: 4.5 compares without output per merged
        handle's scan).  A cursor per handle stays in its own part (full bench,
        desc / Figure 11 bound at 60 ms: 94.96 % with the one cursor, 95.17 %
        with these).  Not a gain everywhere: a handle's first scan searches
        from the cell's start, and where every probe's window start rises
        together (tests/test_pt_cellscan.py's synthetic stream) the one cursor
        served every part as well and cost ~11 % fewer compares; PT-Join's
        probes of merged handles are its oldest entries, whose windows start
        far behind the live zone's.  Cursors of handles that no longer
        resolve (their zone dropped) are forgotten.
        NOTE: StreamIndex internals (``_zones``, ``_resolve``)."""
        live = getattr(self.ix, "_zones", None)
        if live is None or not hasattr(self.ix, "_resolve"):
            return None
        from ...index.results import split_cell

        zids = split_cell(cells)[0]
        u = np.unique(zids)
        merged = [int(z) for z in u.tolist() if z not in live]
        if not merged:
            return None
        own = self.__dict__.setdefault("_handle_cursors", {})
        if len(own) > self.__dict__.get("_handle_keep", 64):
            for a in [a for a in own if self.ix._resolve(a) is None]:
                del own[a]
            self._handle_keep = max(64, 2 * len(own))
        m = np.isin(zids, np.asarray(merged, np.int64))
        groups = [(np.flatnonzero(~m), cur)] if not m.all() else []
        for a in merged:
            groups.append((np.flatnonzero(zids == a), own.setdefault(a, {})))
        return groups

    def cell_origins(self, cells):
        """``(live, lo, hi)`` per cell handle: the live cell it resolves to and
        the time range of its own tuples there (:meth:`StreamIndex.cell_origins`);
        ``None`` if the index cannot say."""
        f = getattr(self.ix, "cell_origins", None)
        return f(cells) if f is not None else None

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


def _takes_cursors(f) -> bool:
    """Whether the bound method ``f`` (``scan_matching_many``) has a ``cursors`` parameter."""
    code = getattr(getattr(f, "__func__", f), "__code__", None)
    return code is not None and "cursors" in code.co_varnames[:code.co_argcount + code.co_kwonlyargcount]


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


def find_sorted(keys: np.ndarray, q: np.ndarray):
    """``(i, ok)``: ``i = searchsorted(keys, q)`` over the ascending ``keys``, and ``ok[j]`` when
    ``keys[i[j]] == q[j]`` (``q[j]`` is present).

    >>> i, ok = find_sorted(np.array([2, 5, 9]), np.array([5, 6, 9, 10]))
    >>> i.tolist(), ok.tolist()
    ([1, 2, 2, 3], [True, False, True, False])
    """
    i = np.searchsorted(keys, q)
    ok = i < keys.shape[0]
    ok[ok] = keys[i[ok]] == q[ok]
    return i, ok


from .shared_source import SharedIndexSource  # noqa: E402,F401  (re-export; lives in its own module)
