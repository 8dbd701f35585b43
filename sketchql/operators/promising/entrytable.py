"""Entry columns shared by the priority queues of several PT queries.

Queries over the same shared region index with the same window and fade
queue, for the same arrivals, the *same* entries (probe tuple, its side,
join value, region, size): what differs per query is only the order (the
preference's keys) and how far it got.  A :class:`SharedEntryTable` stores
such blocks once.  A queue attached to it (``EntryQueue.attach_table``)
keeps per entry only the global row of its entry in the table (8 bytes);
``push`` hands the block's columns to :meth:`SharedEntryTable.store`, which
returns the rows of an identical block stored earlier by another queue --
identical bytes of every column, recognized by a 128-bit BLAKE2b
fingerprint of the block -- or appends the block.  Sharing never changes
what a query reads: a reused block is byte-for-byte what the query pushed.

Rows are numbered globally (``base`` = global number of buffer position 0).
:meth:`SharedEntryTable.compact` drops the buffer prefix no attached queue
refers to any more (the smallest row any of them still maps), so the table
spans about one window of entries, like a private queue's.

>>> import numpy as np
>>> t = SharedEntryTable(("x",))
>>> r1 = t.store({"x": np.array([5, 6])}, 2)
>>> r2 = t.store({"x": np.array([5, 6])}, 2)      # another query, same block: same rows
>>> r1.tolist(), r2.tolist(), t.rows, t.stats()["reused_rows"]
([0, 1], [0, 1], 2, 2)
"""
from __future__ import annotations

import hashlib
import weakref
from collections import OrderedDict

import numpy as np



def append_columns(buf: dict, fields, cap: int, n: int, cols: dict, k: int) -> int:
    """Write ``k`` rows of ``cols`` at row ``n`` of the growable column buffers ``buf`` (capacity
    ``cap``, doubled when short; a column's dtype widened when the new values need it); returns
    the capacity after."""
    if n + k > cap:
        cap = max(2 * cap, n + k, 1024)
        for f in fields:
            a = np.asarray(cols[f])
            old = buf.get(f)
            dt = a.dtype if old is None else np.result_type(old.dtype, a.dtype)
            nb = np.zeros(cap, dt)
            if old is not None:
                nb[:n] = old[:n]
            buf[f] = nb
    for f in fields:
        a = np.asarray(cols[f])
        b = buf[f]
        if not np.can_cast(a.dtype, b.dtype, "same_kind") or a.dtype.itemsize > b.dtype.itemsize:
            nb = np.zeros(cap, np.result_type(b.dtype, a.dtype))
            nb[:n] = b[:n]
            buf[f] = b = nb
        b[n:n + k] = a
    return cap

class SharedEntryTable:
    """Columnar entry blocks stored once for several queues (module doc)."""

    #: fingerprints of the most recent blocks remembered for reuse
    RECENT = 256

    def __init__(self, fields):
        self.fields = tuple(fields)
        self._buf: dict = {}
        self._cap = 0
        self.n = 0                 # rows in the buffers
        self.base = 0              # global row number of buffer position 0
        self._recent: OrderedDict = OrderedDict()     # fingerprint -> (global start, k)
        self._queues: list = []    # weak references to the attached queues
        self.counts = {"stored_rows": 0, "reused_rows": 0, "compacted": 0}

    @property
    def rows(self) -> int:
        return self.n

    def attach(self, queue) -> None:
        self._queues.append(weakref.ref(queue))

    def detach(self, queue) -> None:
        self._queues = [r for r in self._queues if r() is not None and r() is not queue]

    # Checkpoints pickle the engine: weak references cannot be pickled, so the
    # state holds the live queues themselves (pickle keeps their identity).
    def __getstate__(self):
        state = dict(self.__dict__)
        state["_queues"] = self.queues()
        return state

    def __setstate__(self, state):
        state = dict(state)
        state["_queues"] = [weakref.ref(q) for q in state["_queues"]]
        self.__dict__.update(state)

    def queues(self) -> list:
        live = [r() for r in self._queues]
        self._queues = [r for r, q in zip(self._queues, live) if q is not None]
        return [q for q in live if q is not None]

    @staticmethod
    def _fingerprint(cols: dict, fields, k: int) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        h.update(int(k).to_bytes(8, "little"))
        for f in fields:
            a = np.ascontiguousarray(cols[f])
            h.update(a.dtype.str.encode())
            h.update(memoryview(a).cast("B"))
        return h.digest()

    def store(self, cols: dict, k: int) -> np.ndarray:
        """Global rows of a block of ``k`` entries: an identical block's if one is still held, else new rows."""
        fp = self._fingerprint(cols, self.fields, k)
        hit = self._recent.get(fp)
        if hit is not None and hit[0] >= self.base and hit[1] == k:
            self._recent.move_to_end(fp)
            self.counts["reused_rows"] += k
            return np.arange(hit[0], hit[0] + k, dtype=np.int64)
        start = self.base + self.n
        self._append(cols, k)
        self._recent[fp] = (start, k)
        if len(self._recent) > self.RECENT:
            self._recent.popitem(last=False)
        self.counts["stored_rows"] += k
        return np.arange(start, start + k, dtype=np.int64)

    def _append(self, cols: dict, k: int) -> None:
        n = self.n
        self._cap = append_columns(self._buf, self.fields, self._cap, n, cols, k)
        self.n = n + k

    def gather(self, field: str, rows: np.ndarray) -> np.ndarray:
        """Column ``field`` of global ``rows``."""
        b = self._buf.get(field)
        if b is None:
            return np.zeros(0)
        return b[np.asarray(rows, np.int64) - self.base]

    def compact(self) -> int:
        """Drop the rows before the smallest one an attached queue still maps (when that is at
        least a quarter of the table), into fresh buffers; returns the rows dropped."""
        lo = self.base + self.n
        for q in self.queues():
            m = q.mapped_rows()
            if m.shape[0]:
                lo = min(lo, int(m.min()))
        cut = lo - self.base
        if cut <= 0 or 4 * cut < self.n:
            return 0
        left = self.n - cut
        cap = max(1024, left + left // 2)
        for f, b in self._buf.items():
            nb = np.zeros(cap, b.dtype)
            nb[:left] = b[cut:self.n]
            self._buf[f] = nb
        self._cap, self.n = cap, left
        self.base += cut
        self.counts["compacted"] += cut
        return cut

    @property
    def nbytes(self) -> int:
        return int(sum(b.nbytes for b in self._buf.values()))

    def stats(self) -> dict:
        return dict(self.counts, rows=self.n, capacity=self._cap, queues=len(self.queues()), bytes=self.nbytes)


class LazyColumns(dict):
    """``arrays()`` of a queue on a shared table: each column gathered on first access."""

    def __init__(self, table: SharedEntryTable, rows: np.ndarray, fields=None):
        super().__init__()
        # a snapshot: the buffers and base of now (appends and compactions make fresh buffers)
        self._bufs, self._base, self._rows = dict(table._buf), table.base, rows
        self._fields = tuple(fields if fields is not None else table.fields)

    def __missing__(self, field):
        if field not in self._fields:
            raise KeyError(field)
        b = self._bufs.get(field)
        v = np.zeros(0) if b is None else b[self._rows - self._base]
        self[field] = v
        return v
