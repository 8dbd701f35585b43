"""A time zone of one granularity: its tuples, columnar, grouped by value bucket.

Tuples are kept in *chunks*; each chunk holds (values, timestamps, row ids)
stably sorted by value bucket, with ``offsets[b]:offsets[b+1]`` the slice of
bucket b.  Inside a bucket the tuples stay in arrival order, so the cell
(zone, bucket) is the concatenation of its slices over the chunks.  Chunks
are merged LSM-style (the newest two merge while the older is not larger),
so a zone has O(log n) chunks; ``compact()`` merges them all (done when the
zone is sealed or queried).

>>> import numpy as np
>>> z = Zone(zone_id=1, gran=0, slot=0, start=0.0, reason="period", n_buckets=2)
>>> z.append(np.array([5, 6, 7]), np.array([0.1, 0.2, 0.3]), np.array([0, 1, 2]), np.array([1, 0, 1]))
>>> z.cell(1)[2].tolist()
[0, 2]
"""
from __future__ import annotations

import numpy as np

from . import kernels


def _small(b: np.ndarray, n_buckets: int) -> np.ndarray:
    """Bucket ids as uint16 when they fit (numpy sorts 16-bit keys stably by radix sort)."""
    return b.astype(np.uint16) if n_buckets <= 1 << 16 else b


class Chunk:
    __slots__ = ("values", "ts", "rids", "offsets", "_ts_sorted")

    def __init__(self, values, ts, rids, offsets):
        self.values, self.ts, self.rids, self.offsets = values, ts, rids, offsets
        self._ts_sorted = None

    def ts_sorted(self) -> bool:
        """Whether ``ts`` is non-decreasing (computed once: a chunk's arrays are never modified)."""
        s = self._ts_sorted
        if s is None:
            t = self.ts
            s = self._ts_sorted = bool(len(t) < 2 or (t[1:] >= t[:-1]).all())
        return s

    @property
    def n(self) -> int:
        return len(self.rids)

    @classmethod
    def build(cls, values, ts, rids, buckets, n_buckets: int) -> "Chunk":
        if n_buckets == 1:
            return cls(values, ts, rids, np.array([0, len(rids)], dtype=np.int64))
        order = np.argsort(_small(buckets, n_buckets), kind="stable")     # radix sort for small B
        counts = np.bincount(buckets, minlength=n_buckets)
        off = np.zeros(n_buckets + 1, dtype=np.int64)
        np.cumsum(counts, out=off[1:])
        return cls(values[order], ts[order], rids[order], off)

    def buckets(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.offsets) - 1, dtype=np.int64), np.diff(self.offsets))

    @classmethod
    def concat(cls, chunks: list["Chunk"], canonical: bool = False) -> "Chunk":
        """One chunk holding ``chunks`` in order (cell order: bucket, then chunk order).

        ``canonical=True`` orders each cell by (timestamp, row id) instead.
        """
        if len(chunks) == 1 and not canonical:
            return chunks[0]
        nb = len(chunks[0].offsets) - 1
        if not canonical:
            # cell order = bucket, then chunk: gather each chunk's bucket slices (no sort)
            offs = np.array([c.offsets for c in chunks])                 # (C, nb + 1)
            if kernels.ENABLED:
                perm = kernels.concat_perm(offs)
            else:
                sizes = offs[:, -1]
                base = sizes.cumsum() - sizes
                st = (offs[:, :-1] + base[:, None]).T.ravel()              # (bucket, chunk) order
                ln = (offs[:, 1:] - offs[:, :-1]).T.ravel()
                tot = int(sizes.sum())
                ends = ln.cumsum()
                perm = (st - ends + ln).repeat(ln)
                perm += np.arange(tot)
            values = np.concatenate([c.values for c in chunks])[perm]
            ts = np.concatenate([c.ts for c in chunks])[perm]
            rids = np.concatenate([c.rids for c in chunks])[perm]
            return cls(values, ts, rids, offs.sum(axis=0))
        values = np.concatenate([c.values for c in chunks])
        ts = np.concatenate([c.ts for c in chunks])
        rids = np.concatenate([c.rids for c in chunks])
        b = np.concatenate([c.buckets() for c in chunks])
        if canonical:
            order = np.lexsort((rids, ts, b))
        else:
            order = np.argsort(b, kind="stable")
        off = np.zeros(nb + 1, dtype=np.int64)
        off[1:] = np.cumsum(sum(np.diff(c.offsets) for c in chunks))
        return cls(values[order], ts[order], rids[order], off)

    @property
    def nbytes(self) -> int:
        return self.values.nbytes + self.ts.nbytes + self.rids.nbytes + self.offsets.nbytes


class Zone:
    """One time zone (a column of cells, one per value bucket).

    ``start`` is the nominal start used for routing (period / fixed-zone
    boundary, or the timestamp that opened a self-adjusted zone);
    ``min_ts``/``max_ts`` are the actual data range, used for window
    overlap tests.  ``reason`` records why the zone started: ``"period"``,
    ``"fixed"``, ``"change"``, ``"max_length"``, ``"collapse"``, ``"late"``,
    ``"merge"``.
    """

    def __init__(self, zone_id: int, gran: int, slot: int, start: float, reason: str, n_buckets: int):
        self.id = zone_id
        self.gran = gran
        self.slot = slot
        self.start = float(start)
        self.reason = reason
        self.n_buckets = n_buckets
        self.chunks: list[Chunk] = []
        self.n = 0
        self.min_ts = np.inf
        self.max_ts = -np.inf
        self.aliases: list[int] = []
        # T4 change detection state (current G1 zone only)
        self.total = None      # (d, w) int64 sketch of the whole zone
        self.pending = None    # (d, w) int64 sketch of tuples since the last check
        self.n_pending = 0
        self.n_total = 0
        self.last_confidence = None
        self.kstart = None     # first G1 period of the zone (granularities >= 2)
        # bumped whenever a cell's tuples may change places (absorb, canonical order): the
        # expiry cursors of bounded scans (cellscan.new_cursor) kept for an older epoch are
        # void; appends keep every tuple's place in its cell (new tuples go after)
        self.epoch = 0

    def append(self, values, ts, rids, buckets) -> None:
        if len(rids) == 0:
            return
        self.chunks.append(Chunk.build(values, ts, rids, buckets, self.n_buckets))
        self.n += len(rids)
        self.min_ts = min(self.min_ts, float(ts.min()))
        self.max_ts = max(self.max_ts, float(ts.max()))
        while len(self.chunks) >= 2 and self.chunks[-2].n <= self.chunks[-1].n:
            b = self.chunks.pop()
            a = self.chunks.pop()
            self.chunks.append(Chunk.concat([a, b]))

    def absorb(self, others: list["Zone"]) -> None:
        """Concatenate the tuple lists of ``others`` (older first) after ours."""
        for z in others:
            if z.n:
                self.chunks.extend(z.chunks)
                self.n += z.n
                self.min_ts = min(self.min_ts, z.min_ts)
                self.max_ts = max(self.max_ts, z.max_ts)
        self.epoch += 1
        self.compact()

    def compact(self, canonical: bool = False) -> Chunk | None:
        if not self.chunks:
            return None
        if len(self.chunks) > 1 or canonical:
            self.chunks = [Chunk.concat(self.chunks, canonical=canonical)]
            if canonical:
                self.epoch += 1
        return self.chunks[0]

    def cell(self, b: int):
        """(values, timestamps, row ids) of bucket ``b`` in arrival order."""
        parts = [(c.values[c.offsets[b]:c.offsets[b + 1]], c.ts[c.offsets[b]:c.offsets[b + 1]],
                  c.rids[c.offsets[b]:c.offsets[b + 1]]) for c in self.chunks]
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0]
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))

    def cell_size(self, b) -> np.ndarray:
        b = np.asarray(b)
        tot = np.zeros(b.shape, dtype=np.int64)
        for c in self.chunks:
            tot += c.offsets[b + 1] - c.offsets[b]
        return tot

    def all_tuples(self):
        if not self.chunks:
            return None
        c = self.compact()
        return c.values, c.ts, c.rids

    @property
    def nbytes(self) -> int:
        return sum(c.nbytes for c in self.chunks)
