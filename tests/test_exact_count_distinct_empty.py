"""COUNT(DISTINCT x) is a count: 0 over an empty window (also before the stream's first tuple, where
it read NULL) and an integer (it read 0.0 / 1.0: audit hQ item 11); checked against brute force."""
import numpy as np
import pytest

from sketchql.engine import Engine


@pytest.mark.parametrize("col", ["k", "g"])
@pytest.mark.parametrize("win", ["[NOW]", "[RANGE 1]", "[RANGE 3]"])
def test_count_distinct_matches_brute_force_including_empty_windows(col, win):
    e = Engine()
    e.execute("CREATE STREAM S (k INT, g VARCHAR) TIMESTAMP ts")
    q = e.register(f"SELECT COUNT(*) AS n, COUNT(DISTINCT {col}) AS d FROM S {win}")
    e.heartbeat("S", 0.0)
    ts = np.array([1.0, 1.0, 2.5, 6.0, 6.0, 6.5])
    k = np.array([3, 3, 4, 3, 5, 5])
    g = ["x", "x", "y", "x", "z", "z"]
    e.push("S", {"ts": ts, "k": k, "g": g})
    e.heartbeat("S", 12.0)
    vals = np.array(k if col == "k" else g, dtype=object)
    w = 0.0 if win == "[NOW]" else float(win.split()[1].rstrip("]"))
    for t in [0.0, 0.5, 1.0, 2.0, 2.5, 3.4, 5.0, 6.0, 6.5, 8.0, 12.0]:
        inwin = (ts == t) if w == 0 else ((ts > t - w) & (ts <= t))
        d = q.snapshot(t)["d"].tolist()
        assert d == [len(set(vals[inwin].tolist()))], (t, d)
        assert isinstance(d[0], int)
