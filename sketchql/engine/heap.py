"""Keep freed heap memory in the process instead of returning it to the OS after every batch.

Why: a push of a 10 000-row batch allocates and frees a few MB of numpy
temporaries (hashes, window concatenations, index deltas: ~3.2 MB for the
service benchmark's workload).  glibc's malloc (dynamic thresholds, the
default) serves blocks above ``M_MMAP_THRESHOLD`` (128 KiB, raised to the
largest freed mmapped block, at most 32 MiB) from fresh ``mmap`` pages and
gives the heap's free top back with ``brk``/``madvise`` once it exceeds
``M_TRIM_THRESHOLD`` (twice the mmap threshold).  Every page given back is
faulted in and zeroed again by the next batch: measured with
``getrusage`` minor faults and ``strace`` on that workload, a batch whose
temporaries were trimmed took ~800-1 400 faults and 5-6 ms, one whose heap top
happened to be pinned by a live small block (so nothing was trimmed) 0-30
faults and 2.7-3.0 ms -- the cause of the engine's bimodal 3.5 / 4.9 ms per
batch between fresh engines.

:func:`keep_freed_heap` fixes both thresholds (which also turns glibc's
dynamic adjustment off): blocks up to ``MMAP_THRESHOLD`` come from the heap,
and at most ``TRIM_THRESHOLD`` of free heap top is kept per arena for reuse
(the memory is the engine's recent peak of temporaries, not a leak: it is
reused by the next batch).  It is a process-wide setting, applied once by the
first :class:`~sketchql.engine.Engine` (``SKETCHQL_KEEP_HEAP=0`` in the
environment leaves malloc as it is); a no-op where ``mallopt`` is not glibc's.
"""
from __future__ import annotations

import ctypes
import os
import threading

#: glibc's ``mallopt`` parameters (malloc.h)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
#: blocks below this are served from the heap (glibc's own upper bound for its dynamic threshold)
MMAP_THRESHOLD = 32 << 20
#: free heap top kept per arena before it is given back to the OS
TRIM_THRESHOLD = 64 << 20

_lock = threading.Lock()
_state: dict = {"applied": None}


def keep_freed_heap() -> bool:
    """Set glibc's ``M_MMAP_THRESHOLD`` / ``M_TRIM_THRESHOLD`` to the module's values, once per process.

    Returns True if they are set (now or by an earlier call), False where this is not glibc or
    ``SKETCHQL_KEEP_HEAP`` is ``0``.
    """
    with _lock:
        if _state["applied"] is None:
            _state["applied"] = _apply()
        return _state["applied"]


def _apply() -> bool:
    if os.environ.get("SKETCHQL_KEEP_HEAP", "1").strip() in ("0", "false", "no", "off"):
        return False
    try:
        libc = ctypes.CDLL(None)
        mallopt = libc.mallopt
        libc.gnu_get_libc_version          # glibc only: other libcs' mallopt take other parameters
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))


# -- a pre-touched heap reserve (the service's apply thread tops it up while idle) ----------------------
#: glibc's ``mallopt`` parameter: the most malloc arenas (one per thread by default, up to 8 per core)
M_ARENA_MAX = -8
#: ``madvise`` advice: populate (prefault) page tables writable (Linux >= 5.14)
MADV_POPULATE_WRITE = 23
_PAGE = 4096
#: the largest reserve: it and a push's temporaries (~10 MB) must stay below ``TRIM_THRESHOLD`` of free
#: heap top, or glibc gives it all back at the next ``free``
RESERVE_MAX = TRIM_THRESHOLD * 3 // 4
_libc: dict = {}


def one_arena() -> bool:
    """Every thread allocates from glibc's main arena (``M_ARENA_MAX`` = 1), a single ``brk`` heap.

    Why: a thread's own arena is made of 64 MiB heaps, and glibc unmaps such a heap as soon as it is
    entirely free -- so memory pre-touched there by :func:`prefault` is lost whenever it spans a new
    heap -- while the main arena's free top is kept up to ``TRIM_THRESHOLD``.  Only threads that have
    not allocated yet are affected: call it before starting any.  True if set (glibc only)."""
    f = _funcs()
    if f is None:
        return False
    return bool(f[4](M_ARENA_MAX, 1))


def _funcs():
    """glibc's (malloc, free, madvise, mincore, mallopt) through ctypes (their calls release the GIL),
    or None where this is not glibc."""
    if "f" not in _libc:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.gnu_get_libc_version
            malloc, free, madvise, mincore, mallopt = libc.malloc, libc.free, libc.madvise, libc.mincore, libc.mallopt
        except (OSError, AttributeError):
            _libc["f"] = None
        else:
            malloc.argtypes, malloc.restype = [ctypes.c_size_t], ctypes.c_void_p
            free.argtypes, free.restype = [ctypes.c_void_p], None
            madvise.argtypes, madvise.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int], ctypes.c_int
            mincore.argtypes, mincore.restype = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p], ctypes.c_int
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            _libc["f"] = (malloc, free, madvise, mincore, mallopt)
    return _libc["f"]


def prefault(nbytes: int, block: int = 1 << 20, stop=None) -> int:
    """Make the next ``nbytes`` of the calling thread's heap resident before they are needed: take
    ``nbytes / block`` blocks from malloc, populate the pages of those not resident yet
    (``madvise(MADV_POPULATE_WRITE)``: the kernel allocates and zeroes them in one call, instead of one
    page fault per 4 KiB page when first written), then free them all.  The freed blocks stay in the
    heap (:func:`keep_freed_heap` keeps up to ``TRIM_THRESHOLD`` of free top), so the allocations that
    grow the heap next (an engine's new state: ~24 MB per stream of the service benchmark, ~6 000
    page faults, ~2 us each with the zeroing) reuse resident pages.  Returns the bytes populated (0 if
    every block was resident already, or where unsupported: not glibc, ``keep_freed_heap`` off, an
    older kernel).  ``stop()``: checked between blocks (one block populates in ~0.3 ms); True abandons
    the rest.  ``nbytes`` is capped at ``RESERVE_MAX``."""
    f = _funcs()
    if f is None or nbytes <= 0 or not keep_freed_heap():
        return 0
    malloc, free, madvise, mincore, _ = f
    nbytes = min(int(nbytes), RESERVE_MAX)
    blocks, done = [], 0
    vec = ctypes.create_string_buffer(block // _PAGE + 1)
    try:
        for _ in range(max(nbytes // block, 1)):
            if stop is not None and stop():
                break
            p = malloc(block)
            if not p:
                break
            blocks.append(p)
            lo, hi = (p + _PAGE - 1) & ~(_PAGE - 1), (p + block) & ~(_PAGE - 1)
            if hi <= lo:
                continue
            if mincore(lo, hi - lo, vec) == 0 and b"\x00" not in vec.raw[:(hi - lo) // _PAGE]:
                continue                                  # every page resident already
            if madvise(lo, hi - lo, MADV_POPULATE_WRITE) != 0:
                break                                     # EINVAL before Linux 5.14: nothing to do
            done += hi - lo
    finally:
        for p in reversed(blocks):
            free(p)
    return done
