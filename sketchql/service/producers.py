"""Pipelined, idempotent ingest: batches tagged with a producer id and a sequence number.

A client that keeps several batches in flight (the fast path: the next batch's
upload and log commit overlap the previous batch's) tags each
``POST /streams/{name}/batches`` with the headers ``X-Producer-Id`` (1-128
characters of ``A-Z a-z 0-9 . _ : @ -``) and ``X-Producer-Seq`` (0, 1, 2, ...
per producer id, across all streams).  The server then, like Kafka's
idempotent producer:

* **admits a producer's batches in sequence order**, whatever order they
  arrive in: batch ``s`` waits (on the event loop, no thread held) until batch
  ``s - 1`` of that producer is admitted -- at most ``max_sequence_wait_s``
  seconds (then 409 ``sequence_gap``, nothing applied), and only up to
  ``producer_window`` batches ahead of the next expected one (further: 409 at
  once);
* **answers a retried (duplicate) sequence number idempotently**: a batch
  with ``s`` below the next expected number is not applied again; the answer
  is 200 with ``"duplicate": true`` and ``"accepted": 0``, sent once the
  original batch is durable (so every 2xx still means "on disk");
* **fails fast after a refusal**: a refused batch (4xx: types, lateness, ...)
  does not consume its sequence number, and the producer's later batches
  waiting for it are answered 409 ``sequence_gap`` at once; resend the fixed
  batch with the same number, then the ones after it.

A new producer starts at 0.  The next expected number of every producer is in
the operation log (each logged batch carries its producer and number) and in
checkpoints, so after a crash, ``kill -9`` included, a client resending every
batch it has no 2xx for (same ids and numbers) gets each batch applied exactly
once.  At most ``max_producers`` producers are remembered; past that the
least recently used one without a batch in flight is forgotten.  Like Kafka's
``UNKNOWN_PRODUCER_ID``, a forgotten id is itself remembered (in a bounded
record of ``max_forgotten_producers`` ids, persisted with the table, and fed by
restarts with a smaller ``max_producers`` too), and any later batch of it is
answered 409 ``unknown_producer`` at once -- use a new producer id -- so a
resend of an acknowledged batch of a forgotten producer is never applied a
second time.  When that record overflows, its oldest id is dropped for good
(counted in ``forgotten_dropped``): that id would be taken for a new producer
starting at 0, so producers should never reuse an id (a fresh random id per
producer session).

Everything but :meth:`Producers.record` / :meth:`Producers.restore` runs on the
event loop; ``record`` runs under the service's admission lock (on any thread),
in the same critical section that appends the batch to the log, so the table
and the log never disagree (a checkpoint sees both or neither).

>>> import asyncio
>>> p = Producers(max_producers=4, window=8, wait_s=1.0)
>>> async def demo():
...     t = await p.turn("a", 0)
...     p.record("a", 0, log_seq=7, apply_number=1)
...     p.leave(t)
...     return (await p.turn("a", 0)).duplicate, p.next_seq("a")
>>> asyncio.run(demo())
(True, 1)
"""
from __future__ import annotations

import asyncio
import re
import threading
from collections import OrderedDict

from .errors import ApiError

ID_HEADER = "x-producer-id"
SEQ_HEADER = "x-producer-seq"
_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")
_MAX_SEQ = 2 ** 63 - 1


def parse_headers(producer_id, seq):
    """``(producer id, sequence number)`` from the two header values, None when both are absent,
    :class:`ApiError` 400 when one is missing or malformed."""
    if producer_id is None and seq is None:
        return None
    if producer_id is None or seq is None:
        missing = "X-Producer-Id" if producer_id is None else "X-Producer-Seq"
        raise ApiError(400, "bad_producer", f"pipelined ingest needs both X-Producer-Id and X-Producer-Seq; "
                       f"{missing} is missing", header=missing)
    if not _ID.match(producer_id):
        raise ApiError(400, "bad_producer", f"X-Producer-Id must be 1-128 characters of A-Z a-z 0-9 . _ : @ -, "
                       f"got {producer_id[:140]!r}", header="X-Producer-Id")
    s = seq.strip()
    if not (s.isascii() and s.isdigit()) or len(s) > 19 or int(s) > _MAX_SEQ:
        raise ApiError(400, "bad_producer", f"X-Producer-Seq must be an integer from 0 to {_MAX_SEQ}, got "
                       f"{seq[:40]!r}", header="X-Producer-Seq")
    return producer_id, int(s)


class _Producer:
    __slots__ = ("next", "log_seq", "apply_number", "busy", "refused", "waiters")

    def __init__(self, next_=0, log_seq=None, apply_number=None):
        self.next = next_                 # next expected sequence number
        self.log_seq = log_seq            # log seq of its latest admitted batch (durability of duplicates)
        self.apply_number = apply_number  # apply-queue number of that batch (read-your-writes of duplicates)
        self.busy = False                 # a batch of it is being admitted
        self.refused = None               # sequence number refused last (not consumed)
        self.waiters: list = []           # futures of requests waiting for their turn


class Turn:
    """A request's right to admit batch ``seq`` of ``producer`` (or ``duplicate``: it was admitted)."""
    __slots__ = ("producer", "seq", "duplicate", "log_seq", "apply_number", "_p", "left", "pending")

    def __init__(self, producer, seq, p, duplicate):
        self.producer, self.seq, self._p, self.duplicate = producer, seq, p, duplicate
        self.left = duplicate
        self.pending = None               # an admission still running after its request was cancelled
        self.log_seq, self.apply_number = p.log_seq, p.apply_number


class Producers:
    """The producer table: next expected sequence number per producer id, and the turn-taking of
    requests waiting for their predecessors (module doc).  ``window``: how far ahead of the next
    expected number a batch may be; ``wait_s``: how long it may wait for its turn."""

    def __init__(self, max_producers: int = 10_000, window: int = 64, wait_s: float = 10.0,
                 max_forgotten: int = 100_000):
        self.max_producers = int(max_producers)
        self.max_forgotten = int(max_forgotten)
        self._forgotten: OrderedDict = OrderedDict()   # forgotten ids (oldest first) -> their next expected
        self.forgotten_dropped = 0        # forgotten ids dropped from the bounded record (would be taken as new)
        self.unknown = 0                  # batches refused with unknown_producer
        self.window = int(window)
        self.wait_s = float(wait_s)
        self._lock = threading.Lock()
        self._table: OrderedDict = OrderedDict()
        self.duplicates = 0               # retried batches answered without applying them again
        self.gaps = 0                     # requests refused with sequence_gap
        self.evicted = 0

    # -- the event loop's side ----------------------------------------------------------
    async def turn(self, producer: str, seq: int) -> Turn:
        """Wait until batch ``seq`` is next for ``producer`` (its turn: admit it, then :meth:`leave`), or
        return a duplicate turn at once; :class:`ApiError` 409 for a gap, too far ahead, or a
        predecessor refused."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.wait_s
        while True:
            with self._lock:
                if producer in self._forgotten:
                    self.unknown += 1
                    raise ApiError(409, "unknown_producer", f"producer {producer!r} was forgotten (more than "
                                   f"max_producers={self.max_producers} producers since its last batch): batch "
                                   f"{seq} was not applied; start over with a new producer id",
                                   producer=producer, sequence=seq, limit="max_producers")
                p = self._get(producer)
                if seq < p.next:
                    self.duplicates += 1
                    return Turn(producer, seq, p, True)
                if seq >= p.next + self.window:
                    self.gaps += 1
                    raise self._gap(producer, seq, p, f"it is {seq - p.next} ahead of the next expected batch "
                                    f"{p.next}, beyond the window producer_window={self.window}")
                if seq == p.next and not p.busy:
                    p.busy = True
                    return Turn(producer, seq, p, False)
                if p.refused is not None and p.refused == p.next and seq > p.next:
                    self.gaps += 1
                    raise self._gap(producer, seq, p, f"batch {p.next} of this producer was refused; resend it "
                                    f"(fixed) first")
                fut = loop.create_future()
                p.waiters.append(fut)
            left = deadline - loop.time()
            try:
                if left <= 0:
                    raise asyncio.TimeoutError
                await asyncio.wait_for(fut, left)
            except asyncio.TimeoutError:
                with self._lock:
                    if fut in p.waiters:
                        p.waiters.remove(fut)
                    self.gaps += 1
                    raise self._gap(producer, seq, p, f"it waited {self.wait_s:g} s (max_sequence_wait_s) for "
                                    f"batch {p.next}, which did not come") from None

    def leave(self, turn: Turn, refused: bool = False, force: bool = False) -> None:
        """End ``turn`` (on the loop): wake the producer's waiting requests; ``refused``: its batch was
        refused (4xx), so its number stays the next expected and the later ones fail fast.  Only the
        first call of a turn counts; while an admission of it still runs (``pending``), only the call
        made when it is over (``force``)."""
        if turn.left or (turn.pending is not None and not force):
            return
        turn.left = True
        with self._lock:
            p = turn._p
            p.busy = False
            if refused and p.next == turn.seq:
                p.refused = turn.seq
            waiters, p.waiters = p.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def refuse(self, producer: str, seq: int) -> None:
        """Batch ``seq`` of ``producer`` was refused before taking its turn (its body: 408, 413): when it
        is the next expected one and no batch of the producer is being admitted, the later ones waiting
        fail fast as after any refusal (:meth:`leave` with ``refused``).  A producer not in the table yet
        gets its entry when the refused batch is its first (0; bounded by ``max_producers`` as in
        :meth:`turn`), so its batch 1 arriving after the refusal fails fast too."""
        with self._lock:
            p = self._table.get(producer)
            if p is None:
                if seq != 0 or producer in self._forgotten:
                    return
                try:
                    p = self._get(producer)
                except ApiError:              # every entry busy: its successors wait as before
                    return
            if p.busy or p.next != seq:
                return
            p.refused = seq
            waiters, p.waiters = p.waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    @staticmethod
    def _gap(producer, seq, p, why) -> ApiError:
        return ApiError(409, "sequence_gap", f"producer {producer!r}: batch {seq} was not applied: {why}",
                        producer=producer, sequence=seq, expected=p.next)

    def _get(self, producer: str) -> _Producer:
        """The producer's entry (created, evicting the least recently used idle one if needed); under _lock."""
        p = self._table.get(producer)
        if p is not None:
            self._table.move_to_end(producer)
            return p
        if len(self._table) >= self.max_producers:
            victim = next((k for k, v in self._table.items() if not v.busy and not v.waiters), None)
            if victim is None:
                raise ApiError(503, "too_many_producers", f"{self.max_producers} producers have batches in flight "
                               f"(max_producers); retry later", limit="max_producers")
            self._forget(victim, self._table.pop(victim))
        p = self._table[producer] = _Producer()
        return p

    # -- the admission's side (under the service's admission lock, any thread) -----------------
    def record(self, producer: str, seq: int, log_seq=None, apply_number=None) -> None:
        """Batch ``seq`` of ``producer`` is admitted (logged): the next expected number is ``seq + 1``."""
        with self._lock:
            p = self._table.get(producer)
            if p is None:                     # replay (a request holds its producer's turn: never evicted)
                if len(self._table) >= self.max_producers:       # never refuses here: the batch is logged
                    self._forget(*self._table.popitem(last=False))
                self._forgotten.pop(producer, None)              # the log is authoritative
                p = self._table[producer] = _Producer()
            else:
                self._table.move_to_end(producer)
            if seq >= p.next:
                p.next = seq + 1
                p.refused = None
            if log_seq is not None:
                p.log_seq = log_seq
            if apply_number is not None:
                p.apply_number = apply_number

    def _forget(self, producer: str, p: _Producer) -> None:
        """Move an evicted producer to the bounded record of forgotten ids; under _lock."""
        self.evicted += 1
        self._forgotten[producer] = p.next
        self._forgotten.move_to_end(producer)
        self._bound_forgotten()

    def _bound_forgotten(self) -> None:
        """Drop the oldest forgotten ids past ``max_forgotten`` (counted); under _lock."""
        while len(self._forgotten) > self.max_forgotten:
            self._forgotten.popitem(last=False)
            self.forgotten_dropped += 1

    def next_seq(self, producer: str):
        with self._lock:
            p = self._table.get(producer)
            return None if p is None else p.next

    def snapshot(self) -> dict:
        """``{"table": {producer: next expected}, "forgotten": {id: next}, "dropped": n}`` (for checkpoints)."""
        with self._lock:
            return {"table": {k: v.next for k, v in self._table.items()},
                    "forgotten": dict(self._forgotten), "dropped": self.forgotten_dropped}

    def restore(self, snap: dict) -> None:
        """Load a :meth:`snapshot` (or the plain ``{producer: next}`` table of older checkpoints); producers
        over the current ``max_producers`` are forgotten (recorded) as evictions are."""
        snap = snap or {}
        if "table" not in snap or not isinstance(snap.get("table"), dict):
            snap = {"table": snap}
        with self._lock:
            self.forgotten_dropped = int(snap.get("dropped", 0))
            for k, n in (snap.get("forgotten") or {}).items():
                self._forgotten[k] = int(n)
            self._bound_forgotten()
            for k, n in snap["table"].items():
                self._table[k] = _Producer(int(n))
                self._table.move_to_end(k)
                self._forgotten.pop(k, None)
            while len(self._table) > self.max_producers:
                self._forget(*self._table.popitem(last=False))

    def status(self) -> dict:
        with self._lock:
            return {"producers": len(self._table), "max_producers": self.max_producers, "window": self.window,
                    "max_sequence_wait_s": self.wait_s, "duplicates": self.duplicates, "gaps": self.gaps,
                    "evicted": self.evicted, "forgotten": len(self._forgotten),
                    "max_forgotten_producers": self.max_forgotten, "forgotten_dropped": self.forgotten_dropped,
                    "unknown_producer": self.unknown}
