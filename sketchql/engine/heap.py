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
