"""The apply thread's pre-touched heap reserve (engine.heap.prefault, ApplyQueue(heap_reserve=...)).

Oracle: the kernel's minor-fault counter (getrusage) in a fresh process.  A new stream's engine state
is memory the heap has never had: ~24 MB per stream in the service benchmark, each 4 KiB page faulted
in (and zeroed) when first written, ~6 000 faults per run on the apply thread.  With the reserve
topped up beforehand, the same growth reuses resident pages.
"""
import os
import platform
import subprocess
import sys
import threading
import time

import pytest

from sketchql.service.applier import RESERVE_IDLE_S, ApplyQueue

glibc_linux = pytest.mark.skipif(platform.libc_ver()[0] != "glibc" or not sys.platform.startswith("linux"),
                                 reason="malloc arenas and MADV_POPULATE_WRITE are glibc's / Linux's")

GROW = r"""
import resource, sys
import numpy as np
from sketchql.engine.heap import keep_freed_heap, one_arena, prefault
one_arena(); keep_freed_heap()
populated = prefault(int(sys.argv[1]) << 20)
again = prefault(int(sys.argv[1]) << 20)            # all resident now: nothing more to populate
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
kept = [np.ones(1 << 17) for _ in range(24)]        # 24 MB of new state, kept (as a new stream's is)
print(populated, again, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


def _grow(reserve_mb: int):
    out = subprocess.run([sys.executable, "-c", GROW, str(reserve_mb)], capture_output=True, text=True,
                         timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    return [int(x) for x in out.stdout.split()]


@glibc_linux
def test_prefault_makes_the_next_heap_growth_fault_free():
    populated0, _, faults0 = _grow(0)
    populated, again, faults = _grow(32)
    assert populated0 == 0
    assert faults0 > 4_000, faults0               # the case is real: 24 MB = 6 144 pages, faulted when written
    if populated == 0:
        pytest.skip("MADV_POPULATE_WRITE unsupported here (Linux < 5.14)")
    assert populated >= 24 << 20, populated      # the top of the heap was populated ...
    assert again == 0                            # ... once: resident blocks are skipped (mincore)
    assert faults < faults0 // 10, (faults, faults0)


STOP = r"""
import sys
from sketchql.engine.heap import keep_freed_heap, one_arena, prefault
one_arena(); keep_freed_heap()
calls = []
def stop():                                          # asked between blocks: True after the third
    calls.append(1)
    return len(calls) > 3
print(prefault(32 << 20, stop=stop), len(calls))
"""


@glibc_linux
def test_prefault_stops_between_blocks_when_asked():
    """What lets an arriving batch cut a top-up short: ``stop()`` is asked before every 1 MB block and
    True abandons the rest (a wall-clock bound on the queue could not tell: a whole 48 MB top-up takes
    only ~15 ms here)."""
    out = subprocess.run([sys.executable, "-c", STOP], capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    populated, calls = (int(x) for x in out.stdout.split())
    if populated == 0:
        pytest.skip("MADV_POPULATE_WRITE unsupported here (Linux < 5.14)")
    assert calls == 4 and populated <= 3 << 20, (populated, calls)


def test_prefault_is_a_noop_without_bytes():
    from sketchql.engine.heap import prefault
    assert prefault(0) == 0


def test_apply_queue_tops_the_reserve_up_when_idle_and_applies_in_order():
    lock, seen = threading.RLock(), []
    q = ApplyQueue(lock, lambda item: seen.append(item), max_pending=2, heap_reserve=4 << 20)
    try:
        for i in range(5):
            q.put(i)
            time.sleep(RESERVE_IDLE_S * 3)            # idle long enough for a top-up between items
        assert q.wait_applied(5, 10)
        deadline = time.monotonic() + 5
        while q.reserve["top_ups"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        st = q.status()["heap_reserve"]
        assert st["bytes"] == 4 << 20 and st["top_ups"] >= 1
        # items arriving back to back (no idle): applied in order, no top-up between them needed
        for i in range(5, 40):
            q.put(i)
        assert q.wait_applied(40, 10)
        assert seen == list(range(40))
    finally:
        q.close()


def test_apply_queue_without_reserve_never_tops_up():
    q = ApplyQueue(threading.RLock(), lambda item: None, max_pending=2)
    try:
        q.put("a")
        assert q.wait_applied(1, 10)
        time.sleep(RESERVE_IDLE_S * 5)
        assert q.status()["heap_reserve"] == {"bytes": 0, "top_ups": 0, "populated_bytes": 0, "seconds": 0.0}
    finally:
        q.close()


def test_an_item_put_during_a_top_up_is_applied_promptly():
    """Liveness: an item put while a top-up may be running is applied (the abandoning itself is
    test_prefault_stops_between_blocks_when_asked's)."""
    lock, done = threading.RLock(), []
    q = ApplyQueue(lock, lambda item: done.append(time.perf_counter()), max_pending=2, heap_reserve=48 << 20)
    try:
        q.put("first")
        assert q.wait_applied(1, 10)
        time.sleep(RESERVE_IDLE_S * 1.5)               # a top-up is starting or running
        t0 = time.perf_counter()
        q.put("second")
        assert q.wait_applied(2, 10)
        assert done[-1] - t0 < 0.25, done[-1] - t0
    finally:
        q.close()


def test_serve_refuses_a_reserve_past_its_bound():
    from sketchql.cli import main
    assert main(["serve", "--in-memory", "--no-demo", "--heap-reserve-mb", "100"]) == 2
    assert main(["serve", "--in-memory", "--no-demo", "--heap-reserve-mb", "-1"]) == 2


def test_health_reports_the_reserve_configured_in_create_app():
    from fastapi.testclient import TestClient
    from sketchql.service.app import create_app

    with TestClient(create_app(demo=False, heap_reserve_mb=8)) as c:
        assert c.get("/health").json()["apply"]["heap_reserve"]["bytes"] == 8 << 20
    with TestClient(create_app(demo=False)) as c:               # off unless asked (sketchql serve: 48)
        assert c.get("/health").json()["apply"]["heap_reserve"]["bytes"] == 0
