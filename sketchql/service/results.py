"""Cursor-readable change logs of continuous queries, and JSON encoding of columns.

A query's answer is a change stream: rows with ``sign`` (+1 enters the
result, -1 leaves it) and ``at`` (the event time of the change), in the
query's view (ISTREAM: +1 rows, DSTREAM: -1 rows, relation/RSTREAM: both).
The service drains each query with ``Query.poll()`` into a
:class:`ResultLog` that numbers the rows 0, 1, 2, ... (``seq``).  A client
reads ``rows with seq >= since`` (at most ``limit``) and continues from the
returned ``next`` cursor, so repeated polls see every row exactly once.

Memory: a log keeps at most ``max_rows`` rows (the newest); a read whose
cursor points before the oldest kept row starts at the oldest and reports
``missed`` (how many rows it can no longer see).

>>> import numpy as np
>>> from sketchql.operators.changes import Batch, Changes
>>> log = ResultLog(["v"], max_rows=3)
>>> b = Batch({"v": np.array([1.0, 2.0])}, ts=np.array([1.0, 2.0]))
>>> log.append(Changes.inserts(b, at=b.ts, rid=np.arange(2)))
>>> log.append(Changes.deletes(b, at=b.ts + 10, rid=np.arange(2)))
>>> r = log.read(0, 10)
>>> r["missed"], r["next"], [(x["seq"], x["sign"], x["row"]["v"]) for x in r["rows"]]
(1, 4, [(1, 1, 2.0), (2, -1, 1.0), (3, -1, 2.0)])
"""
from __future__ import annotations

import asyncio
import math
import threading
from collections import deque

import numpy as np


def json_values(a) -> list:
    """A numpy column as JSON-safe Python values (NaN / inf -> None)."""
    a = np.asarray(a)
    if a.dtype.kind == "f":
        vals = a.tolist()
        if not np.isfinite(a).all():
            vals = [v if math.isfinite(v) else None for v in vals]
        return vals
    if a.dtype.kind == "O":
        return [None if (isinstance(v, float) and not math.isfinite(v)) else
                (v.item() if isinstance(v, np.generic) else v) for v in a.tolist()]
    return a.tolist()


def json_number(x):
    """A float for JSON (None for NaN / +-inf)."""
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def frame_records(df, limit: int):
    """(list of row dicts, total rows) of a DataFrame, at most ``limit`` rows."""
    n = len(df)
    head = df.iloc[:limit]
    cols = {str(c): json_values(head[c].to_numpy()) for c in head.columns}
    names = list(cols)
    rows = [dict(zip(names, vals)) for vals in zip(*cols.values())] if names else [{} for _ in range(len(head))]
    return rows, n


class ResultLog:
    """The change rows of one query, numbered, bounded to the newest ``max_rows``."""

    def __init__(self, names, max_rows: int):
        self.names = list(names)
        self.max_rows = int(max_rows)
        self._chunks: deque = deque()   # (first seq, Changes)
        self.total = 0                  # rows ever appended = next seq
        self.first = 0                  # seq of the oldest kept row
        self.plus = 0
        self.minus = 0
        self._lock = threading.Lock()     # readers (HTTP threads) never wait for the engine lock

    def __getstate__(self):
        d = dict(self.__dict__)
        d.pop("_lock", None)
        return d

    def __setstate__(self, d):
        self.__dict__.update(d)
        self._lock = threading.Lock()

    def append(self, ch) -> None:
        with self._lock:
            self._append(ch)

    def _append(self, ch) -> None:
        n = len(ch)
        if not n:
            return
        self._chunks.append((self.total, ch))
        self.total += n
        pos = int((ch.sign > 0).sum())
        self.plus += pos
        self.minus += n - pos
        self._trim()

    def resize(self, max_rows: int) -> None:
        """Keep at most ``max_rows`` rows from now on (a restart with another buffer size); when shrinking,
        the oldest rows go at once and a reader that wanted them is told how many it missed."""
        with self._lock:
            self.max_rows = int(max_rows)
            self._trim()

    def _trim(self) -> None:
        while self.total - self.first > self.max_rows:
            start, c = self._chunks[0]
            excess = self.total - self.first - self.max_rows
            if len(c) <= excess:
                self._chunks.popleft()
                self.first = start + len(c)
            else:
                self._chunks[0] = (start + excess, c.take(slice(excess, None)))
                self.first = start + excess

    def skip(self, n: int) -> None:
        """Account for ``n`` rows the engine dropped before they were read (they
        are newer than everything kept here, so the kept rows go too: the
        sequence numbers stay contiguous and readers are told what they missed)."""
        if n > 0:
            with self._lock:
                self._skip(n)

    def _skip(self, n: int) -> None:
        if n > 0:
            self._chunks.clear()
            self.total += int(n)
            self.first = self.total

    @property
    def retained(self) -> int:
        return self.total - self.first

    def read(self, since: int, limit: int) -> dict:
        with self._lock:
            since = max(int(since), 0)
            start = max(since, self.first)
            end = min(start + int(limit), self.total)
            parts = [(first, ch) for first, ch in self._chunks if max(start, first) < min(end, first + len(ch))]
            first_kept, total = self.first, self.total
        return self._render(since, start, end, parts, first_kept, total)

    def _render(self, since, start, end, parts, first_kept, total) -> dict:
        missed = start - since if since < first_kept else 0
        rows = []
        for first, ch in parts:
            lo, hi = max(start, first), min(end, first + len(ch))
            part = ch.take(slice(lo - first, hi - first))
            cols = [json_values(part.columns[c]) for c in self.names]
            signs = part.sign.tolist()
            ats = json_values(part.at)
            for i in range(hi - lo):
                rows.append({"seq": lo + i, "sign": signs[i], "at": ats[i],
                             "row": {c: cols[j][i] for j, c in enumerate(self.names)}})
        nxt = max(end, start)
        return {"since": since, "next": nxt, "rows": rows, "missed": missed,
                "available": max(total - nxt, 0), "first_available": first_kept, "total": total}


class Notifier:
    """Wakes asyncio waiters (SSE streams) from any thread when a query's results grew -- only the
    subscribers of that query (``key``), with one ``call_soon_threadsafe`` per event loop per
    notification however many of them there are.  ``max_subscribers`` bounds the subscriptions of all
    keys together (:meth:`subscribe` returns None past it).

    >>> n = Notifier()
    >>> async def main():
    ...     a, b = n.subscribe(1), n.subscribe(2)
    ...     n.notify([1])
    ...     await asyncio.wait_for(a.wait(), 1)
    ...     woken = b.is_set()
    ...     n.unsubscribe(a); n.unsubscribe(b)
    ...     return woken, n.count
    >>> asyncio.run(main())
    (False, 0)
    """

    def __init__(self, max_subscribers: int | None = None):
        self._lock = threading.Lock()
        self._subs: dict = {}            # key -> {asyncio.Event: its loop}
        self._keys: dict = {}            # asyncio.Event -> key
        self.max_subscribers = max_subscribers
        self.refused = 0                 # subscriptions refused past max_subscribers
        self.woken = 0                   # wake-ups the SSE streams saw (counted by them: sse.result_events)

    @property
    def count(self) -> int:
        return len(self._keys)

    def subscribe(self, key=None):
        """An event set when ``key``'s results grow (or on :meth:`notify` of every key), or None when
        ``max_subscribers`` are subscribed already.  On the event loop."""
        ev = asyncio.Event()
        loop = asyncio.get_running_loop()
        with self._lock:
            if self.max_subscribers is not None and len(self._keys) >= self.max_subscribers:
                self.refused += 1
                return None
            self._subs.setdefault(key, {})[ev] = loop
            self._keys[ev] = key
        return ev

    def unsubscribe(self, ev) -> None:
        with self._lock:
            key = self._keys.pop(ev, None)
            subs = self._subs.get(key)
            if subs is not None:
                subs.pop(ev, None)
                if not subs:
                    del self._subs[key]

    def notify(self, keys=None) -> None:
        """Wake the subscribers of ``keys`` (None: of every key)."""
        with self._lock:
            if keys is None:
                groups = list(self._subs.values())
            else:
                groups = [self._subs[k] for k in keys if k in self._subs]
            by_loop: dict = {}
            for g in groups:
                for ev, loop in g.items():
                    by_loop.setdefault(loop, []).append(ev)
        for loop, evs in by_loop.items():
            try:
                loop.call_soon_threadsafe(_set_all, evs)
            except RuntimeError:          # the loop is closed
                for ev in evs:
                    self.unsubscribe(ev)


def _set_all(events) -> None:
    for ev in events:
        ev.set()
