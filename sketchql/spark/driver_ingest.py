"""Ingest selected rows into one :class:`~sketchql.index.StreamIndex`, hashing one chunk ahead.

Both index engines end here: the JVM engine hands the driver the rows the
index keeps (:mod:`sketchql.spark.index_jvm`), the Arrow engine a partition's
rows (:class:`~sketchql.spark.index_job.IndexBuilder`).  The rows are
ingested as one ``(ts, row id)``-ordered stream, in chunks of
``INGEST_CHUNK`` rows: in time order, any split into chunks gives the same
index as one call (every chunk's tuples are in order after the previous
chunk's, so each lands where the single call would put it).

Hashing runs one chunk ahead on a helper thread.  The per-key work of an
ingest is hashing (value bucket + the d count-sketch cells of every key:
numpy ufuncs over (d, n) arrays, which release the GIL) and then the zone
appends (bincount / sort per zone, tuple lists, COLLAPSE).  With chunks
c_0, c_1, ..., the helper computes ``hash(c_{i+1})`` while the caller's
thread ingests ``c_i`` with its precomputed ``hash(c_i)``
(``StreamIndex.ingest(..., hashed=)``).  The ingest sequence -- the calls,
their order, their rows and their hashes -- is exactly the one-thread
sequence, so the index and its ``to_bytes()`` are identical; no merge is
involved.  Wall time per chunk is ``max(hash, append)`` instead of their sum
when a second core is free.

>>> import numpy as np
>>> from sketchql.spark.index_job import IndexJob
>>> job = IndexJob("CREATE SUMMARY s ON ev (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)", "ts")
>>> k, t = np.arange(1000) % 17, np.arange(1000) / 10.0
>>> a, b = job.empty(), job.empty()
>>> ingest_rows(a, k, t, np.arange(1000), "s", chunk=64)   # 16 chunks, hashed ahead
0
>>> _ = b.ingest(k, t, np.arange(1000))                      # one call, one thread
>>> a.to_bytes() == b.to_bytes()
True
"""
from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..errors import SummaryError
from ..summaries.hashing import as_key_array
from .partition import SparkInputError
from .retention import kept_mask

# Rows per StreamIndex.ingest call: in time order, chunks give the same index as one call.
# 2^18 keeps the per-call temporaries (hash indexes/signs, d x rows) in the cache-friendly
# range and gives the helper thread enough chunks to overlap (2.7M kept rows: 11 chunks).
INGEST_CHUNK = 1 << 18


def ingest_rows(ix, v: np.ndarray, t: np.ndarray, r: np.ndarray, name: str,
                prune: bool = False, max_rid: int | None = None,
                chunk: int | None = None, prefetch: bool = True) -> int:
    """Ingest valid rows ``(v, t, r)`` into ``ix`` as one ``(ts, row id)``-ordered stream.

    ``prune``: rows that cannot be in the index once its clock reaches max(t)
    (G1 period before :func:`~sketchql.spark.retention.first_kept_period`) are
    skipped -- same bytes (only when every time is finite; an infinite one makes
    the ingest raise).  ``max_rid`` (the largest row id of *all* valid rows, also
    pruned ones) restores the row-id counter of a full ingest.  Time-ordered
    chunks of ``chunk`` rows (default ``INGEST_CHUNK``) give the same index as
    one call; with ``prefetch`` (and more than one chunk) the next chunk is
    hashed on a helper thread meanwhile (module docstring).  Returns the number
    of pruned rows.
    """
    n = len(v)
    pruned = 0
    if n and prune and math.isfinite(float(t.min())) and math.isfinite(float(t.max())):
        keep = kept_mask(ix.decl, ix.config, t)
        if keep is not None:
            v, t, r = v[keep], t[keep], r[keep]
            pruned = n - len(v)
    if len(t) > 1 and not _ordered(t, r):
        order = np.lexsort((r, t))
        v, t, r = v[order], t[order], r[order]
    step = max(1, int(chunk or INGEST_CHUNK))
    try:
        rejected, reasons = _ingest_chunks(ix, v, t, r, step, prefetch and len(v) > step)
    except SummaryError as exc:
        raise SparkInputError(f"summary {name}: {exc}") from None
    if rejected:
        raise SparkInputError(f"summary {name}: {rejected} tuples rejected "
                              f"({reasons}) although the partition was time-ordered")
    if max_rid is not None and hasattr(ix, "_next_row"):
        # the one trace pruned rows leave in a full ingest: the row-id counter (a no-op
        # when nothing was pruned: the ingest already counted every row id)
        ix._next_row = max(int(ix._next_row), int(max_rid) + 1)
    return pruned


def _ingest_chunks(ix, v, t, r, step: int, prefetch: bool):
    """``ix.ingest`` of each chunk in order; returns (rejected, reasons) summed."""
    rejected, reasons = 0, {}
    starts = range(0, len(v), step)

    def count(rep):
        nonlocal rejected
        rejected += rep.rejected
        for k, c in rep.reasons.items():
            reasons[k] = reasons.get(k, 0) + c

    if not prefetch:
        for a in starts:
            count(ix.ingest(v[a:a + step], t[a:a + step], r[a:a + step]))
        return rejected, reasons
    keys = as_key_array(v, f"StreamIndex {ix.decl.name}.ingest values")   # what ingest hashes
    hash_of = lambda a: ix._hash(keys[a:a + step])
    with ThreadPoolExecutor(1, thread_name_prefix="sketchql-hash") as pool:
        ahead = pool.submit(hash_of, 0)
        for i, a in enumerate(starts):
            hashed = ahead.result()
            if i + 1 < len(starts):
                ahead = pool.submit(hash_of, starts[i + 1])
            count(ix.ingest(keys[a:a + step], t[a:a + step], r[a:a + step], hashed=hashed))
    return rejected, reasons


def _ordered(t: np.ndarray, r: np.ndarray) -> bool:
    dt = np.diff(t)
    if (dt < 0).any():
        return False
    tie = dt == 0
    return not tie.any() or bool((r[1:][tie] > r[:-1][tie]).all())
