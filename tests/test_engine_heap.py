"""sketchql.engine.heap: freed temporaries stay in the process instead of being faulted in again.

Oracle: the kernel's minor-fault counter (getrusage) in a fresh process.  The churn is glibc's
trimming case: once a 2 MiB block was freed (dynamic mmap threshold 2 MiB, trim threshold 4 MiB),
4.5 MiB of temporaries at the heap top are given back at each free and faulted in again (~1 100
faults per round) -- what every engine batch did with its temporaries.
"""
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt thresholds are glibc's")

CHURN = r"""
import resource, sys
import numpy as np
from sketchql.engine import Engine
Engine()                                            # the first engine sets the thresholds (or not)
big = np.ones(2 << 20, np.uint8); del big
def churn():
    a = [np.ones(3 << 19, np.uint8) for _ in range(3)]
    del a
churn()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    churn()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 20)
"""


def _faults_per_round(keep: str) -> float:
    env = dict(os.environ, SKETCHQL_KEEP_HEAP=keep)
    out = subprocess.run([sys.executable, "-c", CHURN], env=env, capture_output=True, text=True, timeout=120,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0, out.stderr
    return float(out.stdout.split()[-1])


def test_engine_keeps_freed_heap_so_temporaries_are_not_faulted_in_again():
    kept = _faults_per_round("1")
    default = _faults_per_round("0")            # opted out: glibc's dynamic thresholds
    assert default > 500, default               # the case is real: 4.5 MiB given back and faulted in per round
    assert kept < 20, kept                      # 1 152 pages reused, not faulted


def test_keep_freed_heap_is_idempotent():
    from sketchql.engine.heap import keep_freed_heap

    first = keep_freed_heap()
    assert keep_freed_heap() is first
