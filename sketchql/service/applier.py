"""Asynchronous, in-order application of admitted batches to the engine (the service's apply queue).

An HTTP batch is *admitted* (parsed, fully validated against the stream's
clock including batches still queued, appended to the operation log) and
acknowledged once its log record is fsynced; it is *applied* to the engine
afterwards, by one apply thread, in log order.  So the next request's
receive / parse / validate / log overlaps the previous batch's engine work
(the server has two cores; a sequential client waits for each answer).

Guarantees (the README's "Ingest semantics"):

* **2xx = validated and durable.** Every check that can refuse a batch runs
  before the answer; the record is on disk, so it survives ``kill -9`` and is
  replayed on restart, in the same order the apply thread uses.
* **In order.** Items are taken from the queue only under the engine lock,
  by the apply thread or by whoever takes :class:`ExclusiveLock` (which first
  applies every queued item itself), so the engine sees operations in log order.
* **Read-your-writes.** ``with state.lock`` (every mutation and every read that
  locks) applies what is queued first; reads that do not lock await
  :meth:`ApplyQueue.when_applied` (the ``SettleReads`` middleware) -- a read
  sees every batch acknowledged before it arrived.
* **Bounded.** At most ``max_pending`` admitted batches wait; admission blocks
  beyond that (backpressure: the client's request waits).
* **Loud errors.** An engine error while applying (impossible after
  validation, barring a bug) is logged at ERROR with its traceback, kept in
  :attr:`ApplyQueue.errors` (``/health`` reports it and turns ``degraded``)
  and counted by the ``on_error`` callback (``/metrics``, reason
  ``apply_error``).  The batch stays in the log: a restart replays it the same way.

Lock order: admission lock -> engine lock.  The apply thread takes only the
engine lock, so holding the admission lock while waiting for queue space
cannot deadlock.

>>> import threading
>>> seen = []
>>> q = ApplyQueue(threading.RLock(), lambda item: seen.append(item), max_pending=2)
>>> q.put("a"), q.put("b"), q.wait_applied(2, 5)
(1, 2, True)
>>> seen, q.applied
(['a', 'b'], 2)
>>> q.close()
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque

log = logging.getLogger("sketchql.service")
#: the apply queue empty this long after an apply: the apply thread tops its heap reserve up (longer
#: than the gaps of a sequential client or of single-row pushes, ~1-10 ms, so that it runs between
#: bursts, not between their batches)
RESERVE_IDLE_S = 0.02


class ApplyQueue:
    """A bounded FIFO of admitted items applied by one thread under ``engine_lock``.

    ``apply(item)``: applies one item (called with ``engine_lock`` held); an exception it raises is
    reported through ``on_error(item, exc)`` and kept in :attr:`errors`, never swallowed silently.
    """

    def __init__(self, engine_lock, apply, max_pending: int = 2, on_error=None, keep_errors: int = 100,
                 heap_reserve: int = 0):
        if max_pending < 1:
            raise ValueError(f"max_pending must be >= 1, got {max_pending}")
        self.engine_lock = engine_lock
        self._apply = apply
        self._on_error = on_error
        self.max_pending = int(max_pending)
        self._items: deque = deque()
        self._cv = threading.Condition()
        self._waiters: list = []            # (target, loop, future): waiting for items to be applied
        self._room: list = []               # (loop, future): waiting for room in the queue
        self.admitted = 0                   # items ever put
        self.applied = 0                    # items ever applied (successfully or not)
        self.acked = 0                      # highest item number acknowledged to a client
        self.busy = {"locked": 0, "full": 0}   # fast-path admissions that had to wait (state.admit)
        self.errors: deque = deque(maxlen=keep_errors)
        self.error_count = 0
        self.busy_s = 0.0                   # time spent applying (engine lock held)
        self.busy_cpu_s = 0.0               # the apply thread's CPU time in it (busy_s minus waits for
                                            # the GIL or a core)
        self.last_active = time.monotonic()  # when an item was last put or applied (see idle_for)
        self._thread = None
        self._closing = False
        self.heap_reserve = int(heap_reserve)   # bytes of heap the apply thread keeps pre-touched (0: off)
        self.reserve = {"top_ups": 0, "populated_bytes": 0, "seconds": 0.0}

    # -- admission ----------------------------------------------------------------------
    def put(self, item, timeout: float = 600.0) -> int:
        """Queue ``item`` (blocks while ``max_pending`` items wait: backpressure); returns its number
        (1, 2, ...: the count of items admitted so far, this one included)."""
        with self._cv:
            if self._closing:
                raise RuntimeError("the apply queue is closed")
            deadline = time.monotonic() + timeout
            while len(self._items) >= self.max_pending:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"the apply queue stayed full for {timeout:g} s")
                self._cv.wait(min(left, 1.0))
            self._items.append(item)
            self.admitted += 1
            self.last_active = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="sketchql-apply", daemon=True)
                self._thread.start()
            self._cv.notify_all()
            return self.admitted

    def acknowledged(self, number: int) -> None:
        """Item ``number`` was acknowledged to its client: reads arriving from now on wait for it."""
        with self._cv:
            if number > self.acked:
                self.acked = number

    @property
    def pending(self) -> int:
        return len(self._items)

    def idle_for(self) -> float:
        """Seconds since the last item was put or applied; 0 while items wait."""
        with self._cv:
            return 0.0 if self._items else max(time.monotonic() - self.last_active, 0.0)

    # -- applying -----------------------------------------------------------------------
    def apply_pending(self) -> int:
        """Apply every queued item now, in order, on the calling thread (``engine_lock`` must be held)."""
        n = 0
        while True:
            with self._cv:
                if not self._items:
                    return n
                item = self._items.popleft()
                self._wake_room()
            self._run(item)
            n += 1

    def _run(self, item) -> None:
        t0, c0 = time.perf_counter(), time.thread_time()
        try:
            self._apply(item)
        except BaseException as exc:          # noqa: BLE001 -- reported, never lost
            self.error_count += 1
            self.errors.append({"at": time.time(), "item": _describe(item), "error": f"{type(exc).__name__}: {exc}"})
            log.error("sketchql: applying an acknowledged batch failed (%s): %s", _describe(item), exc,
                      exc_info=exc)
            if self._on_error is not None:
                try:
                    self._on_error(item, exc)
                except Exception:             # pragma: no cover -- the error is logged above anyway
                    log.exception("sketchql: apply error callback failed")
        self.busy_s += time.perf_counter() - t0
        self.busy_cpu_s += time.thread_time() - c0
        with self._cv:
            self.applied += 1
            self.last_active = time.monotonic()
            self._cv.notify_all()
            if self._waiters:
                done = [w for w in self._waiters if w[0] <= self.applied]
                if done:
                    self._waiters = [w for w in self._waiters if w[0] > self.applied]
                    for _, loop, fut in done:
                        try:
                            loop.call_soon_threadsafe(_settle, fut)
                        except RuntimeError:  # that loop is closed
                            pass

    def _loop(self) -> None:
        topped = True                       # the heap reserve was topped up since the last apply
        while True:
            with self._cv:
                while not self._items and not self._closing:
                    if topped or not self.heap_reserve:
                        self._cv.wait()
                    elif not self._cv.wait(RESERVE_IDLE_S):
                        break               # idle: top the reserve up (below, without _cv), then wait again
                if not self._items and self._closing:
                    return
                idle = not self._items
            if idle:
                self._top_up()
                topped = True
                continue
            topped = False
            with self.engine_lock:
                with self._cv:
                    item = self._items.popleft() if self._items else None
                    self._wake_room()
                if item is not None:
                    self._run(item)

    def _top_up(self) -> None:
        """Pre-touch :attr:`heap_reserve` bytes of this thread's heap (:func:`~sketchql.engine.heap.prefault`),
        abandoned as soon as an item arrives; outside the engine lock, and mostly outside the GIL."""
        from ..engine.heap import prefault

        t0 = time.perf_counter()
        self.reserve["populated_bytes"] += prefault(self.heap_reserve, stop=lambda: bool(self._items) or self._closing)
        self.reserve["top_ups"] += 1
        self.reserve["seconds"] += time.perf_counter() - t0

    def _wake_room(self) -> None:
        """Resolve the futures of :meth:`when_room` (under ``_cv``, after an item left the queue)."""
        if self._room and len(self._items) < self.max_pending:
            room, self._room = self._room, []
            for loop, fut in room:
                try:
                    loop.call_soon_threadsafe(_settle, fut)
                except RuntimeError:
                    pass

    # -- waiting ------------------------------------------------------------------------
    def when_room(self, loop):
        """None if the queue has room now, else a future of ``loop`` resolved when an item leaves it
        (an event loop waits for room without blocking; room may be taken again meanwhile: retry)."""
        with self._cv:
            if len(self._items) < self.max_pending:
                return None
            fut = loop.create_future()
            self._room.append((loop, fut))
            return fut

    def when_applied(self, loop, target: int | None = None):
        """None if items up to ``target`` are applied, else a future of ``loop`` resolved once they are.
        ``target`` defaults to the highest acknowledged item: a read waits for every batch whose 2xx
        was sent before it arrived, not for batches still waiting for their fsync."""
        with self._cv:
            target = self.acked if target is None else target
            if self.applied >= target:
                return None
            fut = loop.create_future()
            self._waiters.append((target, loop, fut))
            return fut

    def wait_applied(self, target: int, timeout: float = 60.0) -> bool:
        """Block until ``applied >= target`` (True) or ``timeout`` (False)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while self.applied < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
            return True

    def status(self) -> dict:
        with self._cv:
            return {"pending": len(self._items), "max_pending": self.max_pending, "admitted": self.admitted,
                    "acknowledged": self.acked, "applied": self.applied, "errors": self.error_count, "busy_s": round(self.busy_s, 6),
                    "busy_cpu_s": round(self.busy_cpu_s, 6),
                    "admissions_waited": dict(self.busy),
                    "heap_reserve": {"bytes": self.heap_reserve, **self.reserve, "seconds": round(self.reserve["seconds"], 6)},
                    "last_errors": list(self.errors)[-5:]}

    def close(self, timeout: float = 60.0) -> None:
        """Apply what is queued, then stop the thread."""
        with self._cv:
            self._closing = True
            self._cv.notify_all()
            th = self._thread
        if th is not None:
            th.join(timeout)


class ExclusiveLock:
    """``with state.lock``: no admission in progress, every queued item applied, engine locked.

    Re-entrant (both locks are); ``acquire`` / ``release`` mirror the ``with`` form.
    """

    def __init__(self, admit_lock, engine_lock, queue: ApplyQueue):
        self.admit_lock = admit_lock
        self.engine_lock = engine_lock
        self.queue = queue

    def acquire(self) -> bool:
        self.admit_lock.acquire()
        try:
            self.engine_lock.acquire()
        except BaseException:
            self.admit_lock.release()
            raise
        try:
            self.queue.apply_pending()
        except BaseException:
            self.release()
            raise
        return True

    def release(self) -> None:
        self.engine_lock.release()
        self.admit_lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()
        return False


def _describe(item) -> str:
    d = getattr(item, "describe", None)
    return d() if callable(d) else repr(item)[:200]


def _settle(fut) -> None:
    if not fut.done():
        fut.set_result(None)
