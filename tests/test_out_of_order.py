"""Out-of-order input: a per-stream slack.

Oracle: the same queries over the sorted stream (slack 0).
"""
import numpy as np
import pandas as pd
import pytest

from sketchql.engine import Engine
from sketchql.errors import LateTupleError

QUERIES = (
    "SELECT v FROM S [RANGE 5] WHERE v > 0.5",
    "SELECT k, SUM(v) AS s, COUNT(*) AS n FROM S [RANGE 10] GROUP BY k",
    "SELECT S.k, S.v, T.w FROM S [RANGE 4], T [RANGE 4] WHERE S.k = T.k",
)


def _data(seed=0, n=600, dur=60.0):
    rng = np.random.default_rng(seed)
    ts = np.round(np.sort(rng.uniform(0, dur, n)), 3)
    return ts, rng.integers(0, 6, n), np.round(rng.random(n), 3)


def _shuffle_within(ts, slack, seed=1):
    """An arrival order in which every tuple is at most ``slack`` seconds late: sort by a
    perturbed time ts + U(0, slack) (a tuple is overtaken only by tuples < slack younger)."""
    rng = np.random.default_rng(seed)
    return np.argsort(ts + rng.uniform(0, slack * 0.999, ts.shape[0]), kind="stable")


def _run(order, slack, chunk=37, timeout=None):
    ts, k, v = _data()
    _, k2, w = _data(seed=9)
    eng = Engine(seed=0)
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts; CREATE STREAM T (k INT, w DOUBLE) TIMESTAMP ts")
    if slack:
        eng.controls.set("stream", "S", "slack", slack)
    if timeout is not None:
        eng.controls.set("stream", "S", "slack_timeout", timeout)
    qs = [eng.register(q) for q in QUERIES]
    for q in qs:
        q.set_knob("retain_changes", None)
    o = order if order is not None else np.arange(ts.shape[0])
    for i in range(0, ts.shape[0], chunk):
        sl = o[i:i + chunk]
        eng.push("S", {"ts": ts[sl], "k": k[sl], "v": v[sl]})
    eng.push("T", {"ts": ts, "k": k2, "w": w})
    eng.heartbeat("S", 100.0)
    eng.heartbeat("T", 100.0)
    return eng, qs


def _snap(q, t):
    df = q.snapshot(t)
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def _norm(q):
    df = q.results()
    return df.sort_values(list(df.columns)).reset_index(drop=True)


@pytest.mark.parametrize("slack", [0.5, 2.0])
def test_shuffled_within_slack_equals_sorted(slack):
    ts, _, _ = _data()
    order = _shuffle_within(ts, slack)
    assert (np.diff(ts[order]) < 0).any()                    # really out of order
    _, sorted_qs = _run(None, 0.0)
    eng, qs = _run(order, slack)
    for a, b in zip(sorted_qs, qs):
        # the relation at every time (change logs differ only in the step times of an aggregate's
        # -old/+new pairs); the stream views (selection, join) are equal as change streams
        for t in np.arange(0.5, 70.0, 0.7):
            pd.testing.assert_frame_equal(_snap(a, t), _snap(b, t))
        if not a.bound.is_aggregate:
            pd.testing.assert_frame_equal(_norm(a), _norm(b))
    st = eng.stream("S").stats()
    assert st["slack_late_beyond_slack"] == 0 and st["slack_buffered"] == 0 and st["slack_buffered_max"] > 0


def test_without_slack_out_of_order_is_rejected():
    ts, _, _ = _data()
    with pytest.raises(LateTupleError):
        _run(_shuffle_within(ts, 2.0), 0.0)


def test_later_than_slack_counted_reported_not_dropped_silently():
    eng = Engine()
    eng.execute("CREATE STREAM S (v DOUBLE) TIMESTAMP ts")
    eng.controls.set("stream", "S", "slack", 1.0)
    q = eng.register("SELECT v FROM S [UNBOUNDED]")
    eng.push("S", {"ts": [1.0, 3.0, 2.5, 5.0], "v": [1.0, 3.0, 2.5, 5.0]})    # W = 4: 1, 2.5, 3 out
    assert sorted(q.snapshot()["v"].tolist()) == [1.0, 2.5, 3.0]
    eng.push("S", {"ts": [3.5, 4.5], "v": [3.5, 4.5]})                         # 3.5 <= W = 4: late
    st = eng.stream("S").stats()
    assert st["slack_late_beyond_slack"] == 1
    assert eng.stream("S").late_tuples()["v"].tolist() == [3.5]
    assert eng.controls.get("stream", "S").stats["slack_late_beyond_slack"] == 1
    eng.heartbeat("S", 10.0)
    assert sorted(q.snapshot()["v"].tolist()) == [1.0, 2.5, 3.0, 4.5, 5.0]
    eng.controls.set("stream", "S", "late_policy", "error")
    before = eng.stream("S").stats()
    with pytest.raises(LateTupleError, match="later than the slack.*nothing of the batch was applied"):
        eng.push("S", {"ts": [9.0, 12.0], "v": [9.0, 12.0]})
    after = eng.stream("S").stats()
    assert after["slack_late_beyond_slack"] == before["slack_late_beyond_slack"]   # refused, not logged late
    eng.heartbeat("S", 20.0)
    assert 12.0 not in q.snapshot()["v"].tolist()                     # refused whole: nothing applied


def test_timeout_releases_and_marks_results_possibly_imprecise():
    eng = Engine()
    eng.execute("CREATE STREAM S (k INT) TIMESTAMP ts; CREATE STREAM T (k INT) TIMESTAMP ts")
    eng.controls.set("stream", "S", "slack", 5.0)
    eng.controls.set("stream", "S", "slack_timeout", 3.0)
    q = eng.register("SELECT S.k FROM S [RANGE 100], T [RANGE 100] WHERE S.k = T.k")
    eng.push("S", {"ts": [1.0, 2.0], "k": [1, 2]})          # buffered (slack 5), S is then silent
    eng.push("T", {"ts": [1.5, 2.5], "k": [1, 2]})
    assert len(q.snapshot()) == 0 and q.possibly_imprecise() == []
    eng.push("T", {"ts": [6.0], "k": [3]})                   # data clock 6: 6 - 3 >= 2: timeout
    assert q.clock == 3.0                                    # S released up to 6 - 3 (its watermark)
    assert sorted(q.snapshot()["k"].tolist()) == [1, 2]       # (a snapshot past the clock is refused)
    (mark,) = q.possibly_imprecise()
    assert mark["stream"] == "S" and mark["from"] == 1.0 and mark["reason"] == "slack timeout"
    assert eng.stream("S").stats()["slack_released_by_timeout"] == 2


def test_slack_declared_in_sql():
    eng = Engine()
    eng.execute("CREATE STREAM S (v DOUBLE) TIMESTAMP ts SLACK 2 SECONDS; CREATE STREAM T (v DOUBLE) TIMESTAMP ts")
    assert eng.stream("S").knobs()["slack"] == 2.0 and eng.stream("T").knobs()["slack"] == 0.0
    q = eng.register("SELECT v FROM S [UNBOUNDED]")
    eng.push("S", {"ts": [3.0, 1.5, 4.0], "v": [3.0, 1.5, 4.0]})      # W = 2: 1.5 released
    eng.push("S", {"ts": [2.5], "v": [2.5]})                             # within the slack
    eng.heartbeat("S", 10.0)
    assert q.changes().columns["v"].tolist() == [1.5, 2.5, 3.0, 4.0]     # in timestamp order
    eng.execute("CREATE STREAM U (v DOUBLE) SLACK 500 MS")
    assert eng.stream("U").knobs()["slack"] == 0.5
