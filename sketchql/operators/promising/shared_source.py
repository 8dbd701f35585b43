"""A query's view of the engine's *shared* stream index (:class:`SharedIndexSource`).

Kept apart from :mod:`.sources` (the private region sources): this module is the
one place where a PT operator's arrival numbers meet the stream row ids of an
index fed once by the engine.  ``from .sources import SharedIndexSource`` keeps
working (re-exported there).
"""
from __future__ import annotations

import math

import numpy as np

from .sources import IndexSource, find_sorted


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
      index as is: estimates over the whole stream, not only the query's
      filtered / sampled input.  The engine feeds the index in lockstep with
      its PT joins (:mod:`sketchql.engine.index_feed`): at a step to ``now``
      it holds the stream up to ``now`` -- what a private index of an
      unfiltered query holds -- so the estimates, cell sizes and choices are
      those of a private index with the same seed and budget.

    Memory: 8 bytes (two int32 offsets) per accepted tuple of the last ``2 w``
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
        self._floor = math.inf                 # oldest arrival of the operator's current chunk
        #: the engine's feed of the index (``IndexFeed.release(indexes, now)``), set when the
        #: engine attaches the query: called before each ingest (:meth:`before_ingest`)
        self.feed = None

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

    def before_ingest(self, t_lo: float, t_hi: float) -> None:
        """The operator is about to ingest a time chunk of arrivals ``[t_lo, t_hi]`` (both sides).

        * The engine's feed ingests the index's waiting tuples up to ``t_hi`` -- not up to the
          step's time: a step's arrivals are processed in time chunks
          (:func:`.admission.chunk_span`), and an index ingesting the whole step first had
          expired the partners of the first chunks' arrivals (one push per stream of 200 s at a
          10 s window: 496 of 768 pairs missed);
        * the stream-row mapping keeps the tuples younger than ``t_lo - 2w`` (:meth:`_prune`):
          the oldest arrival of the chunk may be on the *other* side (pruned at this side's
          own oldest arrival, a pair 5 s apart in a 10 s window was missed when the partner's
          side arrived at 10 s in the same step: 5 of 768 pairs at 1 s pushes)."""
        self._floor = float(t_lo)
        feed = getattr(self, "feed", None)     # a source restored from an older checkpoint has none
        if feed is not None:
            feed([self.ix], float(t_hi))

    def ingest(self, values, ts, rids) -> int:
        rids = np.asarray(rids, np.int64)
        if not rids.shape[0]:
            return 0
        bq, br = self._bound if self._bound is not None else (np.zeros(0, np.int64),) * 2
        i, ok = find_sorted(bq, rids)
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
        self._prune(min(float(ts.min()), getattr(self, "_floor", math.inf)))
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
        """Drop the entries of ingests whose newest tuple is <= t0 - 2w, ``t0`` the oldest
        arrival of the operator's current chunk (either side): from then on the operator probes
        only entries younger than ``t0' - w`` (``t0' >= t0`` the chunk start at the probe,
        ``PTJoin.drain``'s horizon), whose partners are younger than ``t0 - 2w`` (exact).  (At
        ``t0 - w`` a queued entry probed in a later step, by a budget that could not pay it at
        once, lost its partners in ``(t0 - 2w, t0 - w]``: pairs still alive at that step.)"""
        if not math.isfinite(self.window) or not self._marks[0]:
            return
        ends, tmax = self._marks
        k = int(np.searchsorted(np.asarray(tmax), t0 - 2.0 * self.window, side="right"))
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
        i, ok = find_sorted(self._rows, rows)
        return np.where(ok, self._seqs[np.minimum(i, n - 1)].astype(np.int64) + self._sbase, 0), ok

    @property
    def mapping_nbytes(self) -> int:
        return int(self._rows.nbytes + self._seqs.nbytes + 16 * len(self._marks[0]))

    # -- probes: the shared index, filtered to the query's tuples ------------
    def scan(self, cell, value, t_from, t_to):
        rows, ts, work = super().scan(cell, value, t_from, t_to)
        seq, ok = self._translate(rows)
        return seq[ok], np.asarray(ts)[ok], work

    def scan_many(self, cells, values, t_from, t_to, cursor: bool = False):
        row, rows, ts, work = super().scan_many(cells, values, t_from, t_to, cursor)
        if not rows.shape[0]:
            return row, rows, ts, work
        seq, ok = self._translate(rows)
        return row[ok], seq[ok], ts[ok], work
