"""A value-ordered layer of a stream attribute's index: the range side of the
declared summary, shared by every range selection and aggregate over it.

The declared :class:`~sketchql.index.StreamIndex` partitions values by a
*hash* (count-sketch cells), which answers point probes (the join) but not
range predicates.  The promising-tuple paper (section 3.1) asks only for "a
suitable hash function over the tuple values" for the value dimension and
treats the summary as a black box with ``Estimate`` (section 3.2: "other
forms of summarizations, e.g., histograms"); for range predicates the
suitable partition is order preserving.  This layer keeps, per time zone,
the zone's tuples *sorted by value* (sorted runs), which is an exact
histogram at every resolution at once:

* zones: fixed ``zone_seconds`` slices of the time axis aligned to epoch 0
  (``z = floor(ts / zone_seconds)``, the index's G1 grid when
  ``zone_seconds`` divides its granularity T1);
* a zone holds one or more *runs*, each sorted by (value, arrival); a batch
  appends a run and runs are merged LSM-style (the newest two while the older
  is not larger), so a zone has O(log n) runs and a late tuple is one more run;
* a *cell* is (zone, value range ``[a, b)``) for any ``a < b`` the caller
  chooses: its exact size is ``sum over runs of searchsorted(b) -
  searchsorted(a)`` (:meth:`cell_counts`, every bucket of a query in one
  call), its tuples are contiguous slices of the runs (:meth:`gather`);
* "the last tuple processed" (paper section 4.2): every tuple has a row id
  increasing with arrival, so "the part of a cell not yet scanned by a query"
  is the cell's tuples with ``row > watermark`` -- :meth:`gather` takes a row
  range per cell;
* columns: the layer keeps the attribute's values, timestamps and row ids,
  plus the other columns its consumers ask for (:meth:`require`, e.g. the
  aggregated price), fed through the index's ``ingest(..., columns=)``;
* history: zones older than ``keep`` seconds (the longest window of the
  consumers plus two zones, :meth:`require`) are dropped.

Memory: 24 bytes (value, ts, row) + 8 per extra column per tuple of the kept
history, one copy per stream attribute however many queries read it
(:attr:`nbytes`, reported in the index's ``stats()`` and so in the summaries'
control tables).  A query's own part is a :class:`RowMap` (runs of stream
rows it accepted -> its arrival numbers), O(1) when it accepts every tuple.

:func:`layer_of` attaches (once) the layer of a given zone length to a
StreamIndex; its ingest then feeds the layer with the accepted tuples.

>>> import numpy as np
>>> L = ValueLayer(zone_seconds=2.0)
>>> L.ingest(np.array([5, 1, 9, 3]), np.array([0.1, 0.5, 1.0, 2.5]), np.array([0, 1, 2, 3]))
4
>>> L.zones_between(0.0, 3.0)
[0, 1]
>>> L.cell_counts(0, np.array([-np.inf, 2, 6, np.inf])).tolist()   # [.., 2), [2, 6), [6, ..)
[1, 1, 1]
>>> reg, rid, ts, val, _ = L.gather(np.array([0]), np.array([2.0]), np.array([10.0]))
>>> rid.tolist(), val.tolist()                                     # arrival order
([0, 2], [5, 9])
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import SummaryError

_I64_MIN, _I64_MAX = np.iinfo(np.int64).min, np.iinfo(np.int64).max


class _Run:
    """Tuples of one zone sorted by (value, arrival): values, rids, ts, extra columns."""

    __slots__ = ("values", "rids", "ts", "cols")

    def __init__(self, values, rids, ts, cols):
        self.values, self.rids, self.ts, self.cols = values, rids, ts, cols

    @property
    def n(self) -> int:
        return int(self.rids.shape[0])

    @classmethod
    def build(cls, values, rids, ts, cols) -> "_Run":
        o = np.lexsort((rids, values))
        return cls(values[o], rids[o], ts[o], {k: v[o] for k, v in cols.items()})

    @classmethod
    def merge(cls, a: "_Run", b: "_Run") -> "_Run":
        v = np.concatenate([a.values, b.values])
        r = np.concatenate([a.rids, b.rids])
        if a.n and b.n and a.rids.max() < b.rids.min():
            o = np.argsort(v, kind="stable")       # b arrived after a: ties keep arrival order
        else:
            o = np.lexsort((r, v))
        cols = {k: np.concatenate([a.cols[k], b.cols[k]])[o] for k in a.cols}
        return cls(v[o], r[o], np.concatenate([a.ts, b.ts])[o], cols)

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes + self.rids.nbytes + self.ts.nbytes + sum(c.nbytes for c in self.cols.values()))


class _VZone:
    __slots__ = ("runs", "n", "version", "min_ts", "max_ts")

    def __init__(self):
        self.runs: list[_Run] = []
        self.n = 0
        self.version = 0
        self.min_ts, self.max_ts = math.inf, -math.inf

    def add(self, run: _Run) -> None:
        self.runs.append(run)
        self.n += run.n
        self.version += 1
        self.min_ts = min(self.min_ts, float(run.ts.min()))
        self.max_ts = max(self.max_ts, float(run.ts.max()))
        while len(self.runs) >= 2 and self.runs[-2].n <= self.runs[-1].n:
            b, a = self.runs.pop(), self.runs.pop()
            self.runs.append(_Run.merge(a, b))


class ValueLayer:
    """Value-ordered zones of one stream attribute (module doc).

    Parameters: ``zone_seconds`` (zone length), ``keep`` (seconds of history,
    default everything; raised by :meth:`require`), ``columns`` (extra columns kept per tuple).

    >>> import numpy as np
    >>> L = ValueLayer(1.0, columns=("price",))
    >>> L.ingest(np.array([3, 3, 7]), np.array([0.2, 0.4, 0.6]), np.array([10, 11, 12]),
    ...          {"price": np.array([1.5, 2.5, 9.0])})
    3
    >>> _, rid, _, _, cols = L.gather(np.array([0]), np.array([0]), np.array([5]), columns=("price",))
    >>> rid.tolist(), cols["price"].tolist()
    ([10, 11], [1.5, 2.5])
    """

    def __init__(self, zone_seconds: float = 2.0, keep: float = math.inf, columns=()):
        zs = float(zone_seconds)
        if not (zs > 0 and math.isfinite(zs)):
            raise SummaryError(f"ValueLayer: zone_seconds must be a finite number > 0, got {zone_seconds!r}")
        self.zone_seconds = zs
        self.keep = float(keep)
        self.columns: list[str] = []
        self.zones: dict[int, _VZone] = {}
        self.now = -math.inf
        self.max_rid = -1
        self.n = 0                  # tuples held
        self.ingested = 0
        self.consumers = 0
        self._vdtype = None
        self._kmemo: dict = {}
        for c in columns:
            self._add_column(c)

    # ------------------------------------------------------------------ consumers
    def require(self, keep: float = 0.0, columns=()) -> "ValueLayer":
        """A consumer needs ``keep`` seconds of history and ``columns``: the layer keeps the
        longest history asked and every column asked (older tuples get NaN in a new column)."""
        self.keep = max(self.keep, float(keep))
        for c in columns:
            self._add_column(c)
        self.consumers += 1
        return self

    def _add_column(self, c: str) -> None:
        c = str(c)
        if c in self.columns:
            return
        self.columns.append(c)
        for z in self.zones.values():
            for r in z.runs:
                r.cols[c] = np.full(r.n, np.nan)

    # ------------------------------------------------------------------ ingest
    def ingest(self, values, ts, rids, columns=None) -> int:
        """Add accepted tuples (any ts order; row ids increasing with arrival)."""
        values = np.asarray(values)
        ts = np.asarray(ts, np.float64)
        rids = np.asarray(rids, np.int64)
        n = values.shape[0]
        if ts.shape != (n,) or rids.shape != (n,):
            raise SummaryError(f"ValueLayer.ingest: {n} values but ts {ts.shape} and rids {rids.shape}")
        if not n:
            return 0
        if values.dtype.kind not in "iuf":
            raise SummaryError(f"ValueLayer.ingest: values must be numeric, got dtype {values.dtype}")
        if self._vdtype is None:
            self._vdtype = np.int64 if values.dtype.kind in "iu" else np.float64
        values = values.astype(self._vdtype, copy=False)
        cols = {}
        for c in self.columns:
            v = None if columns is None else columns.get(c)
            cols[c] = np.full(n, np.nan) if v is None else np.asarray(v, np.float64)
            if cols[c].shape != (n,):
                raise SummaryError(f"ValueLayer.ingest: column {c!r} has shape {cols[c].shape}, expected ({n},)")
        zn = np.floor(ts / self.zone_seconds).astype(np.int64)
        if n > 1 and (np.diff(zn) >= 0).all():
            cuts = np.flatnonzero(zn[1:] != zn[:-1]) + 1
            bounds = np.concatenate([[0], cuts, [n]])
            parts = [(int(zn[a]), slice(int(a), int(b))) for a, b in zip(bounds[:-1], bounds[1:])]
        else:
            parts = [(int(z), np.flatnonzero(zn == z)) for z in np.unique(zn).tolist()]
        for z, sel in parts:
            zone = self.zones.get(z)
            if zone is None:
                zone = self.zones[z] = _VZone()
            zone.add(_Run.build(values[sel], rids[sel], ts[sel], {c: v[sel] for c, v in cols.items()}))
        self.n += n
        self.ingested += n
        self.max_rid = max(self.max_rid, int(rids.max()))
        self.advance(float(ts.max()))
        return n

    def advance(self, now: float) -> None:
        """Move the clock; drop zones entirely older than ``now - keep``."""
        if now <= self.now:
            return
        self.now = now
        if math.isfinite(self.keep):
            lim = now - self.keep
            for z in [z for z in self.zones if (z + 1) * self.zone_seconds <= lim]:
                self.n -= self.zones.pop(z).n

    # ------------------------------------------------------------------ query
    def zones_between(self, t_from: float, t_to: float) -> list:
        """Zone numbers intersecting ``[t_from, t_to]`` (sorted)."""
        zs = self.zone_seconds
        lo = math.floor(t_from / zs) if math.isfinite(t_from) else -(1 << 62)
        hi = math.floor(t_to / zs) if math.isfinite(t_to) else (1 << 62)
        return sorted(z for z in self.zones if lo <= z <= hi)

    def _keys(self, x) -> np.ndarray:
        """Range bounds as search keys of the value dtype (integers: [a, b) = [ceil a, ceil b))."""
        x = np.asarray(x, np.float64)
        if self._vdtype is np.int64:
            with np.errstate(invalid="ignore"):
                k = np.ceil(np.clip(x, -9.2e18, 9.2e18))
            k = k.astype(np.int64)
            k[x == -np.inf] = _I64_MIN
            k[x == np.inf] = _I64_MAX
            return k
        return x

    def cell_counts(self, z: int, edges) -> np.ndarray:
        """Exact tuple counts of zone ``z`` in ``[edges[i], edges[i+1])`` (edges increasing;
        ``-inf`` / ``+inf`` allowed).  Zeros if the zone is gone."""
        edges = np.asarray(edges, np.float64)
        out = np.zeros(edges.shape[0] - 1, np.int64)
        zone = self.zones.get(int(z))
        if zone is None or self._vdtype is None:
            return out
        hit = self._kmemo.get(id(edges))
        if hit is None or hit[0] is not edges:       # the consumer's fixed edges: converted once
            if len(self._kmemo) > 64:
                self._kmemo.clear()
            hit = self._kmemo[id(edges)] = (edges, self._keys(edges))
        k = hit[1]
        pos = np.zeros(edges.shape[0], np.int64)
        for r in zone.runs:
            pos += np.searchsorted(r.values, k, "left")
        if self._vdtype is np.int64:
            pos[edges == np.inf] = zone.n        # [.., +inf) holds the largest int64 too
        return np.diff(pos)

    def range_counts(self, zones, a, b) -> np.ndarray:
        """Exact counts of rows (zone ``zones[k]``, values in ``[a[k], b[k])``)."""
        zones = np.asarray(zones, np.int64)
        a, b = np.broadcast_to(a, zones.shape), np.broadcast_to(b, zones.shape)
        out = np.zeros(zones.shape[0], np.int64)
        if self._vdtype is None:
            return out
        ka, kb = self._keys(a), self._keys(b)
        top = np.asarray(b, np.float64) == np.inf
        for z in np.unique(zones).tolist():
            zone = self.zones.get(z)
            if zone is None:
                continue
            m = zones == z
            for r in zone.runs:
                hi = np.searchsorted(r.values, kb[m], "left")
                hi[top[m]] = r.n
                out[m] += hi - np.searchsorted(r.values, ka[m], "left")
        return out

    def gather(self, zones, a, b, rid_after=None, rid_upto=None, columns=()):
        """Tuples of the cells (``zones[k]``, ``[a[k], b[k])``) with ``rid_after[k] < row <=
        rid_upto[k]`` (default: all), one vectorized pass per zone and run.

        Returns ``(reg, rid, ts, values, cols)`` sorted by (reg, rid) -- each cell in arrival
        order -- with ``reg[j]`` the input row of tuple j and ``cols`` the asked columns."""
        zones = np.asarray(zones, np.int64)
        K = zones.shape[0]
        a = np.broadcast_to(np.asarray(a, np.float64), (K,))
        b = np.broadcast_to(np.asarray(b, np.float64), (K,))
        ra = np.broadcast_to(np.asarray(-1 if rid_after is None else rid_after, np.int64), (K,))
        ru = np.broadcast_to(np.asarray(_I64_MAX if rid_upto is None else rid_upto, np.int64), (K,))
        parts = []
        if K and self._vdtype is not None:
            ka, kb = self._keys(a), self._keys(b)
            top = b == np.inf
            for z in np.unique(zones).tolist():
                zone = self.zones.get(z)
                if zone is None:
                    continue
                rows = np.flatnonzero(zones == z)
                for r in zone.runs:
                    st = np.searchsorted(r.values, ka[rows], "left")
                    en = np.searchsorted(r.values, kb[rows], "left")
                    en[top[rows]] = r.n
                    ln = np.maximum(en - st, 0)
                    tot = int(ln.sum())
                    if not tot:
                        continue
                    rep = np.repeat(np.arange(rows.shape[0]), ln)
                    pos = np.arange(tot) - np.repeat(np.cumsum(ln) - ln, ln) + st[rep]
                    rid = r.rids[pos]
                    reg = rows[rep]
                    ok = (rid > ra[reg]) & (rid <= ru[reg])
                    pos, reg = pos[ok], reg[ok]
                    parts.append((reg, r.rids[pos], r.ts[pos], r.values[pos], {c: r.cols[c][pos] for c in columns}))
        if not parts:
            e = np.zeros(0, np.int64)
            return e, e, np.zeros(0), np.zeros(0, self._vdtype or np.int64), {c: np.zeros(0) for c in columns}
        reg = np.concatenate([p[0] for p in parts])
        rid = np.concatenate([p[1] for p in parts])
        o = np.lexsort((rid, reg))
        return (reg[o], rid[o], np.concatenate([p[2] for p in parts])[o], np.concatenate([p[3] for p in parts])[o],
                {c: np.concatenate([p[4][c] for p in parts])[o] for c in columns})

    # ------------------------------------------------------------------ management
    @property
    def nbytes(self) -> int:
        return int(sum(r.nbytes for z in self.zones.values() for r in z.runs))

    def stats(self) -> dict:
        return {"zone_seconds": self.zone_seconds, "keep_seconds": self.keep, "zones": len(self.zones),
                "tuples": self.n, "runs": sum(len(z.runs) for z in self.zones.values()),
                "columns": list(self.columns), "consumers": self.consumers, "nbytes": self.nbytes}


# ---------------------------------------------------------------------- the index's layers
def layer_of(index, zone_seconds: float) -> ValueLayer:
    """The value layer of ``index`` (a StreamIndex) with this zone length, created and
    attached on first use; the index's ingest feeds it from then on (tuples before
    that are not in it: a consumer registered then only needs its own later rows)."""
    layers = index.__dict__.setdefault("_value_layers", {})
    key = float(zone_seconds)
    L = layers.get(key)
    if L is None:
        L = layers[key] = ValueLayer(key, keep=0.0)     # its consumers raise keep (require)
    return L


def layers_nbytes(index) -> int:
    return int(sum(L.nbytes for L in getattr(index, "_value_layers", {}).values()))


def feed_layers(index, keys, ts, rids, rejected_positions=None, columns=None) -> None:
    """The index's ingest hook: the accepted tuples of a batch go to every attached layer."""
    layers = getattr(index, "_value_layers", None)
    if not layers:
        return
    n = len(ts)
    if rejected_positions is not None and len(rejected_positions):
        ok = np.ones(n, bool)
        ok[np.asarray(rejected_positions, np.int64)] = False
        keys, ts, rids = keys[ok], ts[ok], rids[ok]
        if columns is not None:
            columns = {c: np.asarray(v)[ok] for c, v in columns.items() if np.ndim(v) and len(v) == n}
    for L in layers.values():
        L.ingest(keys, ts, rids, columns)


def restore_index(data: bytes, layers: dict):
    """A StreamIndex from ``to_bytes`` with its value layers attached again (checkpoints: the
    layers are pickled with the operators that read them, so both keep the same objects)."""
    from .stream_index import StreamIndex
    ix = StreamIndex.from_bytes(data)
    ix._value_layers = layers
    return ix


def advance_layers(index, now: float) -> None:
    for L in getattr(index, "_value_layers", {}).values():
        L.advance(float(now))


class RowMap:
    """A query's part of a shared layer: the stream rows it accepted -> its arrival numbers.

    Stored as runs (first row, first seq, length, newest ts): one run while the query
    accepts consecutive rows, so a query without filters costs O(1) whatever its window.
    ``translate(rows) -> (seqs, ok)``; ``prune(t)`` drops runs whose newest tuple is <= t.

    >>> import numpy as np
    >>> m = RowMap()
    >>> m.bind(np.array([0, 1, 2]), np.array([10, 11, 13]), np.array([1.0, 1.0, 2.0]))
    >>> m.translate(np.array([11, 12, 13]))[0].tolist(), m.translate(np.array([11, 12, 13]))[1].tolist()
    ([1, 0, 2], [True, False, True])
    >>> m.runs
    2
    """

    def __init__(self):
        self._r0 = np.zeros(0, np.int64)
        self._s0 = np.zeros(0, np.int64)
        self._ln = np.zeros(0, np.int64)
        self._tmax = np.zeros(0, np.float64)
        self.first_row = None
        self.last_row = -1
        self.first_ts = math.inf

    @property
    def runs(self) -> int:
        return int(self._r0.shape[0])

    def bind(self, seqs, rows, ts) -> None:
        """Arrivals ``seqs`` (the query's numbers) are the stream rows ``rows`` (both
        increasing in arrival order) with timestamps ``ts``."""
        s = np.asarray(seqs, np.int64)
        r = np.asarray(rows, np.int64)
        t = np.asarray(ts, np.float64)
        if not s.shape[0]:
            return
        if (r < 0).any():
            raise SummaryError("RowMap.bind: the stream row of an arrival is unknown (-1); a shared layer "
                               "needs the rows under which the index holds the tuples")
        o = np.argsort(r, kind="stable")
        s, r, t = s[o], r[o], t[o]
        if r[0] <= self.last_row or (r.shape[0] > 1 and (np.diff(r) <= 0).any()):
            raise SummaryError("RowMap.bind: stream rows must increase with arrival")
        brk = np.flatnonzero((np.diff(r) != 1) | (np.diff(s) != 1)) + 1
        st = np.concatenate([[0], brk])
        en = np.concatenate([brk, [r.shape[0]]])
        r0, s0, ln = r[st], s[st], en - st
        tm = np.maximum.reduceat(t, st)
        if self._r0.shape[0] and self._r0[-1] + self._ln[-1] == r0[0] and self._s0[-1] + self._ln[-1] == s0[0]:
            self._ln[-1] += ln[0]
            self._tmax[-1] = max(self._tmax[-1], tm[0])
            r0, s0, ln, tm = r0[1:], s0[1:], ln[1:], tm[1:]
        self._r0 = np.concatenate([self._r0, r0])
        self._s0 = np.concatenate([self._s0, s0])
        self._ln = np.concatenate([self._ln, ln])
        self._tmax = np.concatenate([self._tmax, tm])
        if self.first_row is None:
            self.first_row = int(r[0])
            self.first_ts = float(t.min())
        self.last_row = int(r[-1])

    def translate(self, rows):
        rows = np.asarray(rows, np.int64)
        if not self._r0.shape[0]:
            return np.zeros(rows.shape[0], np.int64), np.zeros(rows.shape[0], bool)
        i = np.searchsorted(self._r0, rows, "right") - 1
        j = np.maximum(i, 0)
        ok = (i >= 0) & (rows < self._r0[j] + self._ln[j])
        return np.where(ok, self._s0[j] + rows - self._r0[j], 0), ok

    def prune(self, t: float) -> None:
        """Drop the runs whose newest tuple has ts <= t (amortized: when a quarter is old)."""
        if not self._tmax.shape[0]:
            return
        k = int(np.searchsorted(np.maximum.accumulate(self._tmax), t, "right"))
        if k and 4 * k >= self._tmax.shape[0]:
            self._r0, self._s0, self._ln, self._tmax = self._r0[k:], self._s0[k:], self._ln[k:], self._tmax[k:]

    @property
    def nbytes(self) -> int:
        return int(self._r0.nbytes + self._s0.nbytes + self._ln.nbytes + self._tmax.nbytes)


class layers_detached:
    """Context manager: ``index.ingest`` inside it does not feed the attached value layers
    (the engine fed them already, see :mod:`sketchql.engine.index_feed`).

    >>> import numpy as np
    >>> from sketchql.index import StreamIndex, SummaryDeclaration
    >>> ix = StreamIndex(SummaryDeclaration("s", "S", "k", granularity=10.0, rate=2, depth=3))
    >>> L = layer_of(ix, 5.0)
    >>> with layers_detached(ix):
    ...     _ = ix.ingest(np.array([1, 2]), np.array([1.0, 2.0]), np.array([0, 1]))
    >>> L.stats()["tuples"], ix.stats()["tuples"]
    (0, 2)
    """

    def __init__(self, index):
        self.index = index
        self._saved = None

    def __enter__(self):
        self._saved = self.index.__dict__.pop("_value_layers", None)
        return self.index

    def __exit__(self, *exc):
        if self._saved is not None:
            self.index._value_layers = self._saved
        return False
