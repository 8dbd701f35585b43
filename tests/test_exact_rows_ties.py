"""[ROWS n] / [PARTITION BY g ROWS n] when rows of one timestamp arrive in separate pushes.

A row pushed out of a ROWS window by younger rows of its *own* timestamp gets an empty
lifetime; when it had been shown by an earlier push it must be retracted (it used to stay in
the window for good: ``[ROWS 2]`` held 3 rows and ``COUNT(*)`` read 3 forever).  Oracle: the
window at time t is the last n rows (per partition) among those with ts <= t, in arrival
order (push order; a batch stably sorted by ts), computed by brute force.
"""
from __future__ import annotations

import numpy as np
import pytest

from sketchql.engine import Engine


def _arrivals(rng, n_pushes):
    pushes, t = [], 0.0
    for i in range(n_pushes):
        k = int(rng.integers(1, 4))
        t += float(rng.choice([0.0, 0.0, 1.0]))           # many ties across pushes
        ts = np.full(k, t)
        pushes.append({"ts": ts, "g": rng.choice(["a", "b"], k).tolist(), "seq": np.arange(k) + 10 * i})
    return pushes


def _oracle(rows, t, n, partition):
    """The seqs of the last n rows (per partition when ``partition``) with ts <= t, arrival order."""
    keep = [r for r in rows if r[0] <= t]
    out = []
    for g in ({r[1] for r in keep} if partition else {None}):
        mine = [r for r in keep if not partition or r[1] == g]
        out += [r[2] for r in mine[-n:]]
    return sorted(out)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("partition", [False, True])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_rows_window_with_ties_across_pushes_matches_brute_force(seed, partition, n):
    rng = np.random.default_rng(seed)
    win = f"[PARTITION BY g ROWS {n}]" if partition else f"[ROWS {n}]"
    e = Engine()
    e.execute("CREATE STREAM S (seq INT, g VARCHAR) TIMESTAMP ts")
    q = e.register(f"SELECT seq, g FROM S {win}")
    qc = e.register(f"SELECT COUNT(*) AS c FROM S {win}")
    rows = []
    for b in _arrivals(rng, 14):
        e.push("S", b)
        rows += list(zip(b["ts"].tolist(), b["g"], b["seq"].tolist()))
        now = rows[-1][0]
        want = _oracle(rows, now, n, partition)
        assert sorted(q.snapshot(now)["seq"].tolist()) == want
        assert qc.snapshot(now)["c"].tolist() == [len(want)]
    for t in sorted({r[0] for r in rows}):          # every earlier instant, after the fact
        assert sorted(q.snapshot(t)["seq"].tolist()) == _oracle(rows, t, n, partition)


def test_audit_case_rows_two_three_ties():
    """hQ's case: three rows at ts 2.0, one push each, then later rows: ROWS 2 holds two."""
    e = Engine()
    e.execute("CREATE STREAM S (seq INT) TIMESTAMP ts")
    qc = e.register("SELECT COUNT(*) AS n FROM S [ROWS 2]")
    for seq, t in ((0, 1.0), (1, 2.0), (2, 2.0), (3, 2.0), (4, 3.0)):
        e.push("S", {"ts": [t], "seq": [seq]})
    assert qc.snapshot(2.0)["n"].tolist() == [2] and qc.snapshot(3.0)["n"].tolist() == [2]
