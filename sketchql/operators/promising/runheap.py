"""A priority queue of ``(key, tie, id)`` items held in sorted numpy runs.

The promising-tuple operators pop their entries in the lexicographic order
of ``(key: float64, tie: int64, id: int64)`` -- ``heapq``'s order on the
tuples ``(key, tie, id)``.  A Python heap of such tuples costs about 150
bytes per item (the tuple, a float and two int objects, a list slot); this
queue keeps the items in a few numpy runs, each sorted, at 24 bytes per
item, and pops and pushes batches with numpy only:

* ``push(key, tie, id)``: the batch is sorted (``lexsort``) and appended as
  a run; while the newest run holds at least half as many items as the one
  before it, the two are merged (an LSM / binary-counter schedule: every
  item is merged O(log n) times, there are at most ~log2(n) runs);
* ``pop_many(k)``: the ``k`` smallest items over all runs.  Every run is
  sorted, so they are among the first ``k`` of each run; with
  ``b`` = the smallest ``k``-th key of a run holding at least ``k`` items (an
  upper bound of the global ``k``-th key) only the items of key ``<= b``
  are candidates; the candidates are sorted and the first ``k`` taken (each
  run's head advances by what it gave).  The order is exactly the order
  of ``k`` successive ``heapq.heappop`` calls (the order is total: ids are
  unique);
* ``push_sorted``: items already in order (e.g. popped items put back) go
  in as a run without sorting;
* ``filter(alive)``: drop items, each run stays sorted.

>>> h = RunHeap()
>>> h.push(np.array([3.0, 1.0, 2.0]), np.zeros(3, np.int64), np.array([10, 11, 12]))
>>> h.push(np.array([1.5, 0.5]), np.zeros(2, np.int64), np.array([13, 14]))
>>> h.pop_many(3)[2].tolist(), len(h)
([14, 11, 13], 2)
>>> h.pop_many(5)[2].tolist()
[12, 10]
"""
from __future__ import annotations

import numpy as np


def _order(key, tie, ids):
    return np.lexsort((ids, tie, key))


class RunHeap:
    """Sorted numpy runs with batched push / pop (module doc)."""

    __slots__ = ("runs", "_n")

    def __init__(self):
        # each run: [key, tie, id, head] -- arrays sorted by (key, tie, id); items before head are gone
        self.runs: list = []
        self._n = 0

    def __len__(self) -> int:
        return self._n

    @property
    def nbytes(self) -> int:
        """Bytes of the arrays held (popped-over heads included until a run is compacted)."""
        return int(sum(r[0].nbytes + r[1].nbytes + r[2].nbytes for r in self.runs))

    # ------------------------------------------------------------------ push
    def push(self, key, tie, ids) -> None:
        key = np.asarray(key, np.float64)
        if not key.shape[0]:
            return
        tie = np.asarray(tie, np.int64)
        ids = np.asarray(ids, np.int64)
        o = _order(key, tie, ids)
        self.push_sorted(key[o], tie[o], ids[o])

    def push_sorted(self, key, tie, ids) -> None:
        """Items already sorted by (key, tie, id)."""
        if not key.shape[0]:
            return
        self.runs.append([np.asarray(key, np.float64), np.asarray(tie, np.int64), np.asarray(ids, np.int64), 0])
        self._n += int(key.shape[0])
        self._merge()

    def _merge(self) -> None:
        runs = self.runs
        while len(runs) > 1 and 2 * (runs[-1][0].shape[0] - runs[-1][3]) >= runs[-2][0].shape[0] - runs[-2][3]:
            b = runs.pop()
            a = runs.pop()
            k = np.concatenate([a[0][a[3]:], b[0][b[3]:]])
            t = np.concatenate([a[1][a[3]:], b[1][b[3]:]])
            i = np.concatenate([a[2][a[3]:], b[2][b[3]:]])
            o = _order(k, t, i)
            runs.append([k[o], t[o], i[o], 0])

    # ------------------------------------------------------------------ pop
    def pop_many(self, k: int):
        """The ``min(k, len)`` smallest items (key, tie, id arrays), in order; they leave the queue."""
        k = min(int(k), self._n)
        if k <= 0:
            e = np.zeros(0, np.int64)
            return np.zeros(0), e, e
        runs = self.runs
        if len(runs) == 1:
            r = runs[0]
            h = r[3]
            out = (r[0][h:h + k], r[1][h:h + k], r[2][h:h + k])
            r[3] = h + k
        else:
            # upper bound of the k-th smallest key: the k-th key of any run holding >= k items
            bound = np.inf
            for r in runs:
                if r[0].shape[0] - r[3] >= k:
                    bound = min(bound, float(r[0][r[3] + k - 1]))
            parts, counts = [], []
            for r in runs:
                h = r[3]
                seg = r[0][h:h + k]
                c = int(np.searchsorted(seg, bound, "right")) if bound < np.inf else seg.shape[0]
                counts.append(c)
                parts.append((seg[:c], r[1][h:h + c], r[2][h:h + c]))
            ck = np.concatenate([p[0] for p in parts])
            ct = np.concatenate([p[1] for p in parts])
            ci = np.concatenate([p[2] for p in parts])
            src = np.repeat(np.arange(len(runs)), counts)
            o = _order(ck, ct, ci)[:k]
            taken = np.bincount(src[o], minlength=len(runs))
            for r, c in zip(runs, taken.tolist()):
                r[3] += c
            out = (ck[o], ct[o], ci[o])
        self._n -= k
        self._tidy()
        return out

    def _tidy(self) -> None:
        """Drop exhausted runs; copy a run's live tail once more than half of it was popped."""
        keep = []
        for r in self.runs:
            n, h = r[0].shape[0], r[3]
            if h >= n:
                continue
            if h and 2 * h >= n:
                r[:] = [r[0][h:].copy(), r[1][h:].copy(), r[2][h:].copy(), 0]
            keep.append(r)
        self.runs = keep

    # ------------------------------------------------------------------ filter
    def filter(self, alive) -> int:
        """Keep the items for which ``alive(ids) -> bool array`` is True; returns how many were dropped."""
        before = self._n
        runs, n = [], 0
        for r in self.runs:
            h = r[3]
            ids = r[2][h:]
            ok = np.asarray(alive(ids), bool)
            if ok.all() and not h:
                runs.append(r)
            elif ok.any():
                runs.append([r[0][h:][ok], r[1][h:][ok], ids[ok], 0])
            else:
                continue
            n += int(ok.sum())
        self.runs, self._n = runs, n
        return before - n

    def ids(self) -> np.ndarray:
        """Every queued id (no order)."""
        if not self.runs:
            return np.zeros(0, np.int64)
        return np.concatenate([r[2][r[3]:] for r in self.runs])

    def shift(self, d: int) -> None:
        """Subtract ``d`` from every queued id (the entry table dropped its first ``d`` rows)."""
        if d:
            for r in self.runs:
                r[2] = r[2] - d
