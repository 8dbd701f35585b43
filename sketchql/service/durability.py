"""Durable state of the service: an operation log in SQLite (WAL) and atomic checkpoint files.

Layout of a data directory::

    <data-dir>/sketchql.db            SQLite, WAL mode, synchronous=FULL
        meta(key, value)              small JSON values (format version, demo options, ...)
        ops(seq, kind, meta, payload, tuples)
                                      every acknowledged mutation, in the order it was applied:
                                      ddl / register / deregister / push / heartbeat / control /
                                      summary_load / summary_unload / abort; a push's payload is
                                      an Arrow IPC stream (the request body itself when it came
                                      as Arrow, else its parsed columns); ``abort`` marks a push
                                      the engine refused after it was logged
    <data-dir>/checkpoint-<seq>.ckpt  the whole service state after op ``seq``
                                      (header: magic, seq, length, SHA-256; then the snapshot of
                                      :mod:`sketchql.engine.checkpoint`)
    <data-dir>/LOCK                   held (flock) by the running server: one server per directory

Why these stores: SQLite gives an append-only, crash-safe log with group commit
for free (one transaction = one WAL fsync however many operations it holds), and
lets recovery read the tail with one indexed query; Arrow IPC is the columnar
wire format clients already send, so a batch is logged without a row-wise
re-encoding.  A checkpoint is a single file written to ``.tmp``, fsynced,
renamed over, and the directory fsynced (the POSIX recipe for an atomic
replace), so a crash leaves either the old or the new checkpoint, never half
of one; the SHA-256 in the header rejects a torn file anyway.

Group commit: :meth:`OpLog.append` only enqueues (it is called under the
service lock, so sequence numbers follow the order in which operations were
applied to the engine); a writer thread commits everything queued in one
transaction and wakes the callers waiting in :meth:`OpLog.wait` (threads) or
resolves the futures of :meth:`OpLog.when_durable` (event loops: the batch
endpoint awaits its fsync without holding a thread).  The HTTP handler answers
2xx only after the operation's commit: an acknowledged operation is on disk.

WAL checkpoints off the commit path: SQLite's automatic WAL checkpoint runs
inside the commit that crosses 1000 pages (4 MB) and fsyncs the database file
there -- measured on this machine's disk, every ~17th commit of a 240 KB batch
took 15-30 ms instead of 2-4 ms, on the path of the request waiting for it.  The
writer connection turns it off (``wal_autocheckpoint=0``); a ``sketchql-wal``
thread with its own connection copies the WAL into the database (``PASSIVE``:
it never blocks the writer) once ``WAL_CHECKPOINT_BYTES`` were committed since
the last one and the writer has been idle for ``WAL_IDLE_S`` (or at once past
``WAL_FORCE_BYTES``), so the WAL's frames are then reused from its start.
Nothing about durability changes: a commit is still one fsynced WAL append.

Recovery (:meth:`sketchql.service.state.ServiceState.recover`): load the newest
valid checkpoint (seq c), then apply the logged operations with seq > c in
order.  Operations up to c are deleted from the log once checkpoint c is
durable.

Crash-test hook: if the environment variable ``SKETCHQL_CHECKPOINT_PAUSE_S``
is set, a checkpoint pauses that many seconds after writing its ``.tmp`` file
and before renaming it (so a test can SIGKILL the server mid-checkpoint).

>>> import tempfile
>>> log = OpLog(tempfile.mkdtemp())
>>> s = log.append("heartbeat", {"stream": "S", "ts": 1.0})
>>> log.wait(s); [(o.seq, o.kind, o.meta["ts"]) for o in log.ops_after(0)]
[(1, 'heartbeat', 1.0)]
>>> log.close()
"""
from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import logging
import os
import sqlite3
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Iterator, Optional

import numpy as np

log = logging.getLogger("sketchql.service")

MAGIC = b"SQCKPT01"
# WAL checkpoints (module doc): after this many committed bytes, when the writer has been idle this
# long, or at once past the force limit (which also caps the WAL file kept after a reset)
WAL_CHECKPOINT_BYTES = 32 << 20
WAL_IDLE_S = 0.25
WAL_FORCE_BYTES = 256 << 20
_HEADER = struct.Struct("<8sQQ32s")       # magic, seq, payload length, sha256
_INSERT = "INSERT INTO ops (seq, kind, meta, payload, tuples) VALUES (?, ?, ?, ?, ?)"
FORMAT_VERSION = 1


class DataDirError(Exception):
    """The data directory cannot be used (locked by another server, unreadable, wrong format)."""


@dataclass
class Op:
    seq: int
    kind: str
    meta: dict
    payload: Optional[bytes]
    tuples: int = 0


# ----------------------------------------------------------------------- Arrow payloads
def encode_columns(columns: dict) -> bytes:
    """A dict of 1-D numpy arrays as one Arrow IPC stream (the payload of a logged push)."""
    import pyarrow as pa

    arrays, names = [], []
    for k, v in columns.items():
        v = np.asarray(v)
        if v.dtype.kind == "O":
            try:
                arr = pa.array(v, from_pandas=False)
            except (pa.ArrowInvalid, pa.ArrowTypeError):       # mixed objects: keep them as text + tag
                arr = pa.array([None if x is None else repr(x) for x in v], type=pa.string())
        else:
            arr = pa.array(v)
        arrays.append(arr)
        names.append(str(k))
    batch = pa.RecordBatch.from_arrays(arrays, names=names)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


def decode_columns(payload: bytes) -> dict:
    import pyarrow as pa

    table = pa.ipc.open_stream(pa.py_buffer(payload)).read_all()
    out = {}
    for i, n in enumerate(table.schema.names):
        col = table.column(i)
        a = col.to_numpy(zero_copy_only=False)
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            a = a.astype(object)
        out[n] = a
    return out


# ----------------------------------------------------------------------- the log
class OpLog:
    """The SQLite operation log + checkpoint files of one data directory (see module doc)."""

    def __init__(self, path: str, sync: bool = True):
        self.path = os.path.abspath(path)
        os.makedirs(self.path, exist_ok=True)
        self._lockfh = open(os.path.join(self.path, "LOCK"), "a+")
        try:
            fcntl.flock(self._lockfh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lockfh.close()
            raise DataDirError(f"data directory {self.path} is in use by another sketchql server "
                               f"(its LOCK file is held)") from None
        self.db_path = os.path.join(self.path, "sketchql.db")
        try:
            self.db = sqlite3.connect(self.db_path, check_same_thread=False, isolation_level=None)
            # 64 KB pages (a new store; an existing one keeps its size): a 240 KB batch is 4 WAL frames,
            # not 60 -- 0.4 instead of 0.6 ms of the writer's CPU per commit, measured
            self.db.execute("PRAGMA page_size=65536")
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute(f"PRAGMA synchronous={'FULL' if sync else 'OFF'}")
            self.db.execute("PRAGMA wal_autocheckpoint=0")             # the sketchql-wal thread does it
            self.db.execute(f"PRAGMA journal_size_limit={WAL_FORCE_BYTES}")
            self.db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            self.db.execute("CREATE TABLE IF NOT EXISTS ops (seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, "
                            "meta TEXT NOT NULL, payload BLOB, tuples INTEGER NOT NULL DEFAULT 0)")
        except sqlite3.DatabaseError as exc:
            raise DataDirError(f"{self.db_path}: not a sketchql data store ({exc})") from None
        self._db_lock = threading.Lock()
        ver = self.get_meta("format_version")
        if ver is None:
            self.set_meta("format_version", FORMAT_VERSION)
        elif ver != FORMAT_VERSION:
            raise DataDirError(f"{self.path}: data format version {ver}, this server reads {FORMAT_VERSION}")
        row = self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM ops").fetchone()
        ck = self.latest_checkpoint_seq()
        self.last_seq = max(int(row[0]), ck or 0)          # last assigned sequence number
        self.durable_seq = self.last_seq
        self.checkpoint_seq = ck or 0
        self.tuples_since_checkpoint = int(self.db.execute(
            "SELECT COALESCE(SUM(tuples), 0) FROM ops WHERE seq > ?", (self.checkpoint_seq,)).fetchone()[0])
        self.ops_since_checkpoint = int(self.db.execute(
            "SELECT COUNT(*) FROM ops WHERE seq > ?", (self.checkpoint_seq,)).fetchone()[0])
        self.commits = 0
        self.committed_ops = 0
        self.last_checkpoint_s = None
        self.checkpoints = 0
        self._queue: list = []
        self._waiters: list = []                   # (seq, loop, future) of async waiters (when_durable)
        self._ckpt_lock = threading.Lock()         # one checkpoint at a time
        self._cv = threading.Condition()
        self._error: Optional[BaseException] = None
        self._closed = False
        self.sync = bool(sync)
        self.wal_bytes = 0                         # bytes committed since the last WAL checkpoint
        self.wal_checkpoints = 0
        self.last_commit_at = time.monotonic()
        self.commit_s_max = 0.0                    # the slowest commit (write + fsync) so far
        self.commit_s_total = 0.0                  # all commits' durations, summed
        self._commit_s: deque = deque(maxlen=256)  # the latest commits' durations (status: p50 / p90)
        self._wal_cv = threading.Condition()
        self._writer = threading.Thread(target=self._write_loop, name="sketchql-oplog", daemon=True)
        self._writer.start()
        self._wal_thread = threading.Thread(target=self._wal_loop, name="sketchql-wal", daemon=True)
        self._wal_thread.start()

    # -- meta --------------------------------------------------------------------
    def get_meta(self, key: str, default=None):
        with self._db_lock:
            row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else json.loads(row[0])

    def set_meta(self, key: str, value) -> None:
        with self._db_lock:
            self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))

    # -- appending -------------------------------------------------------------------
    def append(self, kind: str, meta: dict, payload: Optional[bytes] = None, tuples: int = 0) -> int:
        """Enqueue one operation; returns its sequence number (durable after :meth:`wait`)."""
        with self._cv:
            if self._error is not None:
                raise DataDirError(f"the operation log cannot be written: {self._error}")
            self.last_seq += 1
            seq = self.last_seq
            self._queue.append((seq, kind, json.dumps(meta), payload, int(tuples)))
            self.tuples_since_checkpoint += int(tuples)
            self.ops_since_checkpoint += 1
            self._cv.notify_all()
        return seq

    def wait(self, seq: Optional[int], timeout: float = 60.0) -> None:
        """Block until operation ``seq`` is committed (fsynced)."""
        if seq is None:
            return
        deadline = time.monotonic() + timeout
        with self._cv:
            while self.durable_seq < seq:
                if self._error is not None:
                    raise DataDirError(f"the operation log cannot be written: {self._error}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DataDirError(f"operation {seq} was not committed within {timeout} s")
                self._cv.wait(left)

    def when_durable(self, seq: Optional[int], loop):
        """For an event loop: None if operation ``seq`` is already committed, else an
        :class:`asyncio.Future` of ``loop`` that the writer thread resolves once it is (or fails with
        :class:`DataDirError` if the log cannot be written).  No thread blocks while waiting, so a
        request awaiting its fsync leaves the ingest thread free for the next batch (group commit)."""
        if seq is None:
            return None
        with self._cv:
            if self.durable_seq >= seq:
                return None
            fut = loop.create_future()
            if self._error is not None:
                fut.set_exception(DataDirError(f"the operation log cannot be written: {self._error}"))
            else:
                self._waiters.append((seq, loop, fut))
            return fut

    def _wake_async(self, error: Optional[BaseException] = None) -> None:
        """Resolve the async waiters now covered by ``durable_seq`` (all of them on ``error``); under _cv."""
        if not self._waiters:
            return
        done = self._waiters if error is not None else [w for w in self._waiters if w[0] <= self.durable_seq]
        if not done:
            return
        self._waiters = [] if error is not None else [w for w in self._waiters if w[0] > self.durable_seq]
        for _, loop, fut in done:
            exc = None if error is None else DataDirError(f"the operation log cannot be written: {error}")
            try:
                loop.call_soon_threadsafe(_settle, fut, exc)
            except RuntimeError:                     # that loop is closed: nobody is waiting any more
                pass

    def _write_loop(self):
        while True:
            with self._cv:
                while not self._queue and not self._closed:
                    self._cv.wait()
                if not self._queue and self._closed:
                    return
                batch, self._queue = self._queue, []
            try:
                t0 = time.perf_counter()
                with self._db_lock:
                    if len(batch) == 1:     # one statement in autocommit: as durable (the WAL is fsynced at its
                        # commit), and one GIL round trip instead of three (BEGIN, INSERT, COMMIT each release
                        # and retake the GIL, each time waiting for the apply thread to yield it)
                        self.db.execute(_INSERT, batch[0])
                    else:
                        self.db.execute("BEGIN")
                        self.db.executemany(_INSERT, batch)
                        self.db.execute("COMMIT")
                took = time.perf_counter() - t0
            except BaseException as exc:                 # disk full, I/O error: refuse further writes
                with self._cv:
                    self._error = exc
                    self._cv.notify_all()
                    self._wake_async(exc)
                return
            with self._cv:
                self.durable_seq = max(self.durable_seq, batch[-1][0])
                self.commits += 1
                self.committed_ops += len(batch)
                self.commit_s_max = max(self.commit_s_max, took)
                self.commit_s_total += took
                self._commit_s.append(took)
                self._cv.notify_all()
                self._wake_async()
            with self._wal_cv:
                self.wal_bytes += sum(len(b[2]) + (len(b[3]) if b[3] is not None else 0) + 64 for b in batch)
                self.last_commit_at = time.monotonic()
                if self.wal_bytes >= WAL_CHECKPOINT_BYTES:
                    self._wal_cv.notify_all()

    def _wal_loop(self):
        """Checkpoint the WAL into the database off the commit path (module doc), on its own connection."""
        db = None
        try:
            while True:
                with self._wal_cv:
                    while not self._closed:
                        if self.wal_bytes >= WAL_FORCE_BYTES:
                            break
                        if self.wal_bytes >= WAL_CHECKPOINT_BYTES:
                            idle = time.monotonic() - self.last_commit_at
                            if idle >= WAL_IDLE_S:
                                break
                            self._wal_cv.wait(WAL_IDLE_S - idle)
                        else:
                            self._wal_cv.wait()
                    if self._closed:
                        return
                    done = self.wal_bytes
                if db is None:
                    db = sqlite3.connect(self.db_path, isolation_level=None)
                    db.execute(f"PRAGMA synchronous={'FULL' if self.sync else 'OFF'}")
                db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                with self._wal_cv:
                    self.wal_bytes = max(self.wal_bytes - done, 0)
                    self.wal_checkpoints += 1
        except sqlite3.Error as exc:             # the log itself still works; the WAL just grows
            log.error("sketchql: WAL checkpoint failed: %s", exc)
        finally:
            if db is not None:
                db.close()

    # -- reading ---------------------------------------------------------------------
    def ops_after(self, seq: int) -> Iterator[Op]:
        """The logged operations with sequence number > ``seq``, in order."""
        last = int(seq)
        while True:
            with self._db_lock:
                rows = self.db.execute("SELECT seq, kind, meta, payload, tuples FROM ops WHERE seq > ? "
                                       "ORDER BY seq LIMIT 256", (last,)).fetchall()
            if not rows:
                return
            for s, k, m, p, t in rows:
                yield Op(int(s), k, json.loads(m), p, int(t))
            last = rows[-1][0]

    def aborted_after(self, seq: int) -> set:
        """Sequence numbers of logged pushes the engine refused after logging (``abort`` records)."""
        with self._db_lock:
            rows = self.db.execute("SELECT meta FROM ops WHERE kind = 'abort' AND seq > ?", (int(seq),)).fetchall()
        return {int(json.loads(m)["seq"]) for (m,) in rows}

    def count_after(self, seq: int) -> tuple[int, int]:
        with self._db_lock:
            n, t = self.db.execute("SELECT COUNT(*), COALESCE(SUM(tuples), 0) FROM ops WHERE seq > ?",
                                   (int(seq),)).fetchone()
        return int(n), int(t)

    # -- checkpoints -----------------------------------------------------------------
    def _ckpt_path(self, seq: int, tmp: bool = False) -> str:
        return os.path.join(self.path, f"checkpoint-{seq:020d}.{'tmp' if tmp else 'ckpt'}")

    def checkpoint_files(self) -> list:
        return sorted(glob.glob(os.path.join(self.path, "checkpoint-*.ckpt")))

    def latest_checkpoint_seq(self) -> Optional[int]:
        files = self.checkpoint_files()
        return int(os.path.basename(files[-1])[len("checkpoint-"):-len(".ckpt")]) if files else None

    def read_checkpoint(self) -> Optional[tuple[int, bytes]]:
        """``(seq, snapshot bytes)`` of the newest intact checkpoint, or None."""
        for path in reversed(self.checkpoint_files()):
            try:
                with open(path, "rb") as fh:
                    head = fh.read(_HEADER.size)
                    magic, seq, n, digest = _HEADER.unpack(head)
                    data = fh.read()
            except (OSError, struct.error):
                continue
            if magic == MAGIC and len(data) == n and hashlib.sha256(data).digest() == digest:
                return int(seq), data
        return None

    def write_checkpoint(self, seq: int, data: bytes) -> str:
        """Write checkpoint ``seq`` atomically, then drop the log up to ``seq`` and older checkpoints."""
        with self._ckpt_lock:
            return self._write_checkpoint(seq, data)

    def _write_checkpoint(self, seq: int, data: bytes) -> str:
        t0 = time.perf_counter()
        if seq < self.checkpoint_seq:          # a newer one was written meanwhile
            return self._ckpt_path(self.checkpoint_seq)
        self.wait(seq)                       # the log is never behind a checkpoint
        tmp, final = self._ckpt_path(seq, tmp=True), self._ckpt_path(seq)
        with open(tmp, "wb") as fh:
            fh.write(_HEADER.pack(MAGIC, int(seq), len(data), hashlib.sha256(data).digest()))
            fh.write(data)
            fh.flush()
            pause = os.environ.get("SKETCHQL_CHECKPOINT_PAUSE_S")
            if pause:
                time.sleep(float(pause))
            os.fsync(fh.fileno())
        os.replace(tmp, final)
        dfd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        for old in self.checkpoint_files():
            if old != final:
                os.remove(old)
        for stale in glob.glob(os.path.join(self.path, "checkpoint-*.tmp")):
            os.remove(stale)
        with self._db_lock:
            self.db.execute("DELETE FROM ops WHERE seq <= ?", (int(seq),))
        with self._cv:
            self.checkpoint_seq = int(seq)
            n, t = self.count_after(seq)
            self.ops_since_checkpoint, self.tuples_since_checkpoint = n + len(self._queue), t + sum(
                q[4] for q in self._queue)
        self.checkpoints += 1
        self.last_checkpoint_s = time.perf_counter() - t0
        return final

    # -- status / shutdown ----------------------------------------------------------
    def status(self) -> dict:
        return {"data_dir": self.path, "last_seq": self.last_seq, "durable_seq": self.durable_seq,
                "checkpoint_seq": self.checkpoint_seq, "ops_since_checkpoint": self.ops_since_checkpoint,
                "tuples_since_checkpoint": self.tuples_since_checkpoint, "commits": self.commits,
                "committed_ops": self.committed_ops, "commit_ms_max": round(1000.0 * self.commit_s_max, 3),
                "commit_s_total": round(self.commit_s_total, 6),
                **self._commit_percentiles(),
                "wal_bytes": self.wal_bytes, "wal_checkpoints": self.wal_checkpoints, "checkpoints": self.checkpoints,
                "last_checkpoint_s": self.last_checkpoint_s,
                "error": None if self._error is None else str(self._error)}

    def _commit_percentiles(self) -> dict:
        """p50 / p90 (ms) of the latest commits' durations (write + fsync of one group commit)."""
        recent = list(self._commit_s)
        if not recent:
            return {"commit_ms_p50": None, "commit_ms_p90": None}
        p50, p90 = np.percentile(np.asarray(recent) * 1000.0, [50, 90])
        return {"commit_ms_p50": round(float(p50), 3), "commit_ms_p90": round(float(p90), 3)}

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        with self._wal_cv:
            self._wal_cv.notify_all()
        self._writer.join(10)
        self._wal_thread.join(10)
        with self._cv:
            self._wake_async(self._error or DataDirError("the operation log was closed"))
        with self._db_lock:
            try:
                self.db.close()
            except sqlite3.Error:
                pass
        try:
            fcntl.flock(self._lockfh, fcntl.LOCK_UN)
            self._lockfh.close()
        except OSError:
            pass


def _settle(fut, exc) -> None:
    """Resolve an async durability waiter on its own loop (unless it was cancelled meanwhile)."""
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)


def wipe(path: str) -> None:
    """Remove what a sketchql data directory holds (``--fresh``); other files are left alone."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        return
    for name in ("sketchql.db", "sketchql.db-wal", "sketchql.db-shm"):
        p = os.path.join(path, name)
        if os.path.exists(p):
            os.remove(p)
    for p in glob.glob(os.path.join(path, "checkpoint-*.ckpt")) + glob.glob(os.path.join(path, "checkpoint-*.tmp")):
        os.remove(p)
