"""Merge, compression and serialization of :class:`~sketchql.index.StreamIndex`
(a mixin): ``compress``, ``to_bytes`` / ``from_bytes`` (versioned binary
format), ``copy`` and ``merge`` (indexes built on different partitions).

Split out of ``stream_index.py`` along its seams.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import json
import math
import struct
from ..errors import SummaryError
from ..summaries.countsketch import CountSketch
from .declaration import IndexConfig, SummaryDeclaration
from .zone import Chunk

_MAGIC = b"SQIX"
_VERSION = 1


if TYPE_CHECKING:   # annotations only (the class itself imports this module)
    from .stream_index import StreamIndex

class PersistSide:
    """Mixin of :class:`~sketchql.index.StreamIndex` (module doc)."""

    def compress(self, factor: int = 2) -> None:
        """Fold every cell sketch from width w to w/factor (exact; updates ``config.w``)."""
        if not self._sketch:
            return
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1 or self.config.w % factor:
            raise SummaryError(f"compress: factor must be a positive divisor of w={self.config.w}, got {factor!r}")
        if factor == 1:
            return
        B, d, w = self._shape
        nw = w // factor
        # fold columns exactly as CountSketch.compress does (probe its rule once)
        probe = CountSketch(1, w, 0)
        probe.table[0] = np.arange(w)
        folded = probe.compress(factor).table[0]
        if np.array_equal(folded, np.arange(w).reshape(nw, factor).sum(axis=1)):
            fold = lambda a: a.reshape(a.shape[:-1] + (nw, factor)).sum(axis=-1)
        elif np.array_equal(folded, np.arange(w).reshape(factor, nw).sum(axis=0)):
            fold = lambda a: a.reshape(a.shape[:-1] + (factor, nw)).sum(axis=-2)
        else:
            raise SummaryError("compress: unknown CountSketch column folding rule")
        for g in self.grans:
            g.set_store(fold(g.store))
        self._gbuf = None
        for z in self._zones.values():      # change detection restarts in the current T4 zone
            if z.total is not None:
                z.total = z.pending = None
                z.n_total = z.n_pending = 0
        self.config.w //= factor
        self._sig = self.config.fixed_signature()
        self._setup_shapes()
        for z in self._zones.values():
            if z.gran == 0 and self._adaptive:
                z.total = np.zeros((self._d, self._wdet))
                z.pending = np.zeros((self._d, self._wdet))

    # ------------------------------------------------------------------ serialization
    def to_bytes(self) -> bytes:
        """Canonical bytes: equal indexes (same data, same geometry) give equal bytes.

        Each cell's tuples are written in (timestamp, row id) order (equal to
        arrival order for an in-order stream); zone ids, cell handles, wall-clock
        and work counters are not part of the bytes, and a granularity's slot
        capacity is written as the smallest power of two holding its zones (the
        live capacity only grows).
        """
        arrays: list[np.ndarray] = []
        grans = []
        for gi, g in enumerate(self.grans):
            zs = []
            for z in g.zones():
                c = Chunk.concat(z.chunks, canonical=True) if z.chunks else None
                ent = {"slot": z.slot, "start": z.start, "reason": z.reason, "min_ts": z.min_ts,
                       "max_ts": z.max_ts, "n": z.n, "kstart": z.kstart,
                       "n_pending": z.n_pending, "n_total": z.n_total,
                       "arrays": len(arrays)}
                if c is None:
                    c = Chunk(np.zeros(0, self._vdtype or np.int64), np.zeros(0), np.zeros(0, np.int64),
                              np.zeros(self._B + 1, np.int64))
                arrays += [c.values, c.ts, c.rids, c.offsets]
                if g.shape is not None:
                    arrays.append(g.levels[0][z.slot])
                if z.total is not None:
                    arrays += [z.total, z.pending]
                zs.append(ent)
            # the slot capacity only grows (the most zones any period ever needed): written as the
            # smallest one that holds these zones, so equal contents give equal bytes however they were
            # built (a pruned or partitioned build may never have needed the larger one)
            need = max([self._cap0[gi]] + [z.slot + 1 for z in g.zones()])
            grans.append({"period_start": g.period_start, "cap": 1 << (need - 1).bit_length(), "zones": zs})
        head = {"decl": self.decl.to_dict(), "config": self.config.to_dict(), "clock": self.clock,
                "next_row": self._next_row, "g1_next_reason": self._g1_next_reason,
                "vdtype": None if self._vdtype is None else self._vdtype.str, "grans": grans,
                "arrays": [[a.dtype.str, list(a.shape)] for a in arrays]}
        hb = json.dumps(head, sort_keys=True).encode("utf-8")
        body = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
        return _MAGIC + struct.pack("<HI", _VERSION, len(hb)) + hb + body

    @classmethod
    def from_bytes(cls, data: bytes) -> "StreamIndex":
        if len(data) < 10 or data[:4] != _MAGIC:
            raise SummaryError("StreamIndex.from_bytes: not a serialized stream index (bad magic)")
        ver, hl = struct.unpack_from("<HI", data, 4)
        if ver != _VERSION:
            raise SummaryError(f"StreamIndex.from_bytes: unsupported version {ver}")
        try:
            head = json.loads(data[10:10 + hl].decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise SummaryError(f"StreamIndex.from_bytes: corrupt header ({exc})") from None
        arrays, off = [], 10 + hl
        for dt, shape in head["arrays"]:
            dtype = np.dtype(dt)
            cnt = int(np.prod(shape)) if shape else 1
            nb = cnt * dtype.itemsize
            if off + nb > len(data):
                raise SummaryError("StreamIndex.from_bytes: truncated data")
            arrays.append(np.frombuffer(data, dtype=dtype, count=cnt, offset=off).reshape(shape).copy())
            off += nb
        ix = cls(SummaryDeclaration(**head["decl"]), IndexConfig.from_dict(head["config"]))
        ix.clock = head["clock"]
        ix._next_row = head["next_row"]
        ix._g1_next_reason = head["g1_next_reason"]
        ix._vdtype = None if head["vdtype"] is None else np.dtype(head["vdtype"])
        for gi, (g, ge) in enumerate(zip(ix.grans, head["grans"])):
            g.grow(ge["cap"])
            g.period_start = ge["period_start"]
            for ent in ge["zones"]:
                z = ix._new_zone(gi, ent["slot"], ent["start"], ent["reason"])
                a = ent["arrays"]
                v, t, r, o = arrays[a:a + 4]
                a += 4
                if len(r):
                    z.chunks = [Chunk(v, t, r, o.astype(np.int64))]
                z.n, z.min_ts, z.max_ts = ent["n"], ent["min_ts"], ent["max_ts"]
                if ent["kstart"] is not None:
                    z.kstart = ent["kstart"]
                if g.shape is not None:
                    g.levels[0][z.slot] = arrays[a]
                    a += 1
                if z.total is not None:
                    z.total, z.pending = arrays[a], arrays[a + 1]
                z.n_pending, z.n_total = ent["n_pending"], ent["n_total"]
            if g.shape is not None:
                g._rebuild()
        ix.counters["zones_started"] = 0
        return ix

    def copy(self) -> "StreamIndex":
        return type(self).from_bytes(self.to_bytes())

    def merge(self, other: "StreamIndex") -> "StreamIndex":
        """Add an index built over *disjoint* data of the same stream (in place; returns self).

        Both are first advanced to the later clock (deterministic COLLAPSEs);
        zones of G2..Gm (and fixed G1 zones, T1-T3) are aligned to epoch 0, so
        corresponding zones are merged: tables add (count sketches are
        linear), tuple lists are merged in (timestamp, row id) order.  For T4
        the self-adjusting G1 zones depend on arrival order, so G1 is
        *realigned*: the union of both G1 tuple lists is replayed in
        (timestamp, row id) order through the change detector.  Hence for
        T1-T4 alike, merging per-partition indexes equals building one index
        from all the data (byte for byte in ``to_bytes``) provided the
        single build saw the tuples in (timestamp, row id) order and nothing was
        rejected as late.  ``other`` is not modified.
        """
        if not isinstance(other, PersistSide):
            raise SummaryError(f"merge: other is a {type(other).__name__}, not a StreamIndex")
        if self.decl != other.decl:
            raise SummaryError(f"merge: declarations differ ({self.decl} vs {other.decl})")
        if self._sig != other._sig:
            raise SummaryError("merge: fixed config knobs differ "
                               f"({dict(zip(IndexConfig.FIXED, self._sig))} vs {dict(zip(IndexConfig.FIXED, other._sig))})")
        o = other.copy()
        now = max(self.clock, o.clock)
        if math.isfinite(now):
            self.advance(now)
            o.advance(now)
        if self._vdtype is None:
            self._vdtype = o._vdtype
        replay = []
        for gi, (g, og) in enumerate(zip(self.grans, o.grans)):
            if gi == 0 and self._adaptive:
                for ix in (self, o):
                    for z in ix.grans[0].zones():
                        if z.n:
                            replay.append(z.all_tuples())
                for z in g.zones():
                    self._zones.pop(z.id, None)
                g.clear()
                self._g1_next_reason = None
                continue
            if og.period_start is not None:
                g.period_start = og.period_start if g.period_start is None else g.period_start
            for oz in og.zones():
                z = g.slots[oz.slot]
                if z is None:
                    z = self._new_zone(gi, oz.slot, oz.start, oz.reason)
                    z.kstart = oz.kstart
                z.absorb([oz])
                z.compact(canonical=True)
                if self._sketch:
                    g.add(oz.slot, og.levels[0][oz.slot])
        if replay:
            v = np.concatenate([r[0] for r in replay])
            t = np.concatenate([r[1] for r in replay])
            r = np.concatenate([r[2] for r in replay])
            order = np.lexsort((r, t))
            clock = self.clock
            self._ingest_inorder(v[order], t[order], r[order])
            self.clock = clock
        self._next_row = max(self._next_row, o._next_row)
        self._kview = None                   # zones were re-sorted in place: rebuild the compiled view
        for g in self.grans:
            g.version += 1
            g.sversion += 1
        for k in ("ingested", "rejected", "late", "before_history"):
            self.counters[k] += o.counters[k]
        return self
