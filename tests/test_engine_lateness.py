"""The stream knob ``allowed_lateness`` (a second name of ``slack``): tuples within the bound reach every
query kind in timestamp order (results equal a brute-force oracle), later ones are reported, never lost
and never break later pushes; checkpoints written while it was a knob of its own restore to the slack;
an operator error mid-dispatch fails that query only (the others get the batch, the next push works);
INT nulls are called null."""
from collections import Counter

import numpy as np
import pytest

from sketchql.engine import BatchError, Engine
from sketchql.engine.checkpoint import dumps, loads
from sketchql.errors import LateTupleError

KINDS = {
    "count": "SELECT COUNT(*) AS n FROM A [RANGE 5]",
    "select": "SELECT k, ts FROM A [RANGE 5] WHERE k > 0",
    "rows": "SELECT k, ts FROM A [ROWS 3]",
    "join": "SELECT A.k, A.ts, B.ts FROM A [RANGE 5], B [RANGE 5] WHERE A.k = B.k",
    "pt_join": "SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k WITH PREFERENCE desc "
               "SUMMARY.Estimate.Count(A.k), SUMMARY.Estimate.Count(B.k) WINDOW 5 SECONDS "
               "WITHIN 100000 PROBES PER TUPLE",
    "pt_select": "SELECT A.k, A.ts FROM A [RANGE 5] WHERE A.k BETWEEN 0 AND 5 WITH PREFERENCE desc A.k "
                 "WITHIN 100000 PROBES PER TUPLE",
    "approx_avg": "SELECT AVG(k) AS a FROM A [RANGE 5] WITH ERROR 0.1 CONFIDENCE 0.9",
}


def _engine(lateness=None):
    eng = Engine()
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    if lateness is not None:
        for s in "AB":
            eng.controls.set("stream", s, "allowed_lateness", lateness)
    return eng


def _feed(eng, pushes):
    for s, ts, k in pushes:
        eng.push(s, {"ts": ts, "k": k})
    eng.heartbeat("A", 100.0)
    eng.heartbeat("B", 100.0)


# the audit's scenario: A at 1 and 4, B at 4, then A at 2.5 (1.5 s late, within 3), A at 5, B at 5
LATE = [("A", [1.0, 4.0], [1, 1]), ("B", [4.0], [1]), ("A", [2.5], [1]), ("A", [5.0], [1]), ("B", [5.0], [1])]


def _same(a, b):
    """Equal as multisets of rows (the order of rows within one instant is not part of the answer);
    NaN equals NaN."""
    import pandas as pd
    assert list(a.columns) == list(b.columns)
    key = list(a.columns)
    pd.testing.assert_frame_equal(a.sort_values(key).reset_index(drop=True), b.sort_values(key).reset_index(drop=True))


def _sorted_pushes(pushes):
    """The same tuples, each stream pushed once in timestamp order (what the slack must be equivalent to)."""
    out = []
    for s in "AB":
        ts = [t for x, tt, _ in pushes if x == s for t in tt]
        ks = [k for x, _, kk in pushes if x == s for k in kk]
        o = np.argsort(ts, kind="stable")
        out.append((s, [ts[i] for i in o], [ks[i] for i in o]))
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_tuple_within_allowed_lateness_reaches_every_query_kind(kind):
    """Before: LateTupleError out of an operator, the tuple lost, later pushes raising.  Now: no error and
    the query's change stream equals the one over the same tuples pushed in timestamp order."""
    late = _engine(3.0)
    q = late.register(KINDS[kind])
    _feed(late, LATE)
    ref = _engine()
    r = ref.register(KINDS[kind])
    _feed(ref, _sorted_pushes(LATE))
    assert q.state == "active" and q.failed is None
    _same(q.results(), r.results())
    assert len(late.stream("A").late_tuples()) == 0
    assert late.stream("A").stats()["tuples_in"] == 4


def test_exact_join_with_lateness_equals_brute_force():
    """Two streams shuffled within 2 s, allowed_lateness 3: every pair of the windowed equi-join, no extra."""
    rng = np.random.default_rng(8)
    n, w = 400, 5.0
    tA, tB = np.round(rng.uniform(0, 100, n), 2), np.round(rng.uniform(0, 100, n), 2)
    kA, kB = rng.integers(0, 10, n), rng.integers(0, 10, n)
    m = (kA[:, None] == kB[None, :]) & (np.abs(tA[:, None] - tB[None, :]) < w)
    i, j = np.nonzero(m)
    want = Counter(zip(i.tolist(), (j + 1000).tolist()))
    oA, oB = np.argsort(tA + rng.uniform(0, 2, n)), np.argsort(tB + rng.uniform(0, 2, n))
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM A (id INT, k INT) TIMESTAMP ts; CREATE STREAM B (id INT, k INT) TIMESTAMP ts")
    for s in "AB":
        eng.stream(s).set_knob("allowed_lateness", 3.0)
    q = eng.register("SELECT A.id, B.id FROM A [RANGE 5], B [RANGE 5] WHERE A.k = B.k")
    q.set_knob("retain_changes", None)
    for c in range(0, n, 10):
        eng.push("A", {"ts": tA[oA[c:c + 10]], "id": oA[c:c + 10], "k": kA[oA[c:c + 10]]})
        eng.push("B", {"ts": tB[oB[c:c + 10]], "id": oB[c:c + 10] + 1000, "k": kB[oB[c:c + 10]]})
    eng.heartbeat("A", 1000.0)
    eng.heartbeat("B", 1000.0)
    r = q.results()
    r = r[r["__sign"] == 1]
    got = Counter(zip(r.iloc[:, 0].tolist(), r.iloc[:, 1].tolist()))
    assert got == want
    assert sum(len(eng.stream(s).late_tuples()) for s in "AB") == 0


def test_allowed_lateness_and_slack_are_one_knob_in_every_view():
    eng = _engine()
    h = eng.stream("A")
    assert h.knobs()["allowed_lateness"] == h.knobs()["slack"] == 0.0
    assert not eng.input_buffered("A")
    eng.controls.set("stream", "A", "allowed_lateness", 3)
    t = eng.controls.get("stream", "A")
    assert t.knobs["slack"].value == t.knobs["allowed_lateness"].value == 3.0
    assert "slack" in t.knobs["allowed_lateness"].doc
    assert eng.input_buffered("A")              # the service pushes such a stream synchronously
    eng.controls.set("stream", "A", "slack", 1.5)
    assert h.knobs()["allowed_lateness"] == 1.5
    eng.execute("CREATE STREAM C (k INT) TIMESTAMP ts SLACK 2 SECONDS")
    assert eng.stream("C").knobs()["allowed_lateness"] == 2.0
    with pytest.raises(Exception, match="allowed_lateness"):
        eng.controls.set("stream", "A", "allowed_lateness", -1)
    assert h.knobs()["slack"] == 1.5


def test_beyond_the_bound_reported_and_later_pushes_work():
    """A tuple older than the bound is counted and kept in the late log (late_policy 'report'), the
    others of its batch are accepted; the queries go on."""
    eng = _engine(1.0)
    q = eng.register("SELECT k, ts FROM A [RANGE 100]")
    eng.push("A", {"ts": [1.0, 5.0], "k": [1, 5]})             # released up to 4
    eng.push("A", {"ts": [2.0, 6.0], "k": [2, 6]})             # 2 <= 4: beyond the bound
    assert eng.stream("A").late_tuples()["k"].tolist() == [2]
    assert eng.stream("A").stats()["slack_late_beyond_slack"] == 1
    eng.push("A", {"ts": [7.0], "k": [7]})
    eng.heartbeat("A", 10.0)
    assert q.results()["k"].tolist() == [1, 5, 6, 7]


def test_late_policy_error_refuses_the_whole_batch_and_changes_nothing():
    """With late_policy 'error' a batch holding a tuple later than the slack is refused whole, before the
    buffer changes (a 4xx over HTTP leaves nothing applied; the log's replay agrees): the buffered tuple
    stays buffered, the clock stays, later pushes work."""
    eng = _engine(1.0)
    eng.controls.set("stream", "A", "late_policy", "error")
    q = eng.register("SELECT k, ts FROM A [RANGE 100]")
    eng.push("A", {"ts": [1.0, 5.0], "k": [1, 5]})             # released up to 4; 5 buffered
    with pytest.raises(LateTupleError, match="later than the slack.*nothing of the batch was applied"):
        eng.push("A", {"ts": [2.0, 8.0, 9.0], "k": [2, 8, 9]})  # 2 is late: the batch is refused
    assert sorted(q.results()["k"].tolist()) == [1]
    assert eng.stream("A").clock == 4.0
    eng.push("A", {"ts": [8.0, 9.0], "k": [8, 9]})
    eng.heartbeat("A", 20.0)
    assert q.results()["k"].tolist() == [1, 5, 8, 9]
    assert len(eng.stream("A").late_tuples()) == 0


def test_without_lateness_an_old_tuple_is_refused_whole_before_anything_changes():
    eng = _engine()
    q = eng.register("SELECT k FROM A [RANGE 100]")
    eng.push("A", {"ts": [4.0], "k": [4]})
    with pytest.raises(LateTupleError, match="older than the stream clock 4"):
        eng.push("A", {"ts": [5.0, 3.0], "k": [5, 3]})
    st = eng.stream("A").stats()
    assert (st["tuples_in"], st["rejected_batches"], st["clock"]) == (1, 1, 4.0)
    eng.push("A", {"ts": [5.0], "k": [5]})
    assert q.results()["k"].tolist() == [4, 5]


def _old_format(eng, name, lateness, slack=0.0):
    """Make stream ``name``'s state what a checkpoint written before this change holds: allowed_lateness
    a knob of its own, apart from the slack."""
    k = eng.stream(name)._knobs
    k["allowed_lateness"], k["slack"] = float(lateness), float(slack)


@pytest.mark.parametrize("lateness,slack,want", [(3.0, 0.0, 3.0), (2.0, 5.0, 5.0), (0.0, 0.0, 0.0)])
def test_checkpoint_with_the_old_knob_restores_to_the_slack(lateness, slack, want):
    eng = _engine()
    q = eng.register(KINDS["join"])
    eng.push("A", {"ts": [1.0, 4.0], "k": [1, 1]})
    eng.push("B", {"ts": [4.0], "k": [1]})
    _old_format(eng, "A", lateness, slack)
    eng2 = loads(dumps(eng))
    h = eng2.stream("A")
    assert h.knobs()["allowed_lateness"] == h.knobs()["slack"] == want
    assert eng2.controls.get("stream", "A").knobs["allowed_lateness"].value == want
    q2 = next(x for x in eng2.queries if x.id == q.id)
    # a tuple older than the restored clock (4) cannot reach the queries: with a bound it is reported,
    # without one it is refused; either way the engine goes on
    if want > 0:
        eng2.push("A", {"ts": [3.0, 6.0], "k": [1, 1]})
        assert eng2.stream("A").late_tuples()["ts"].tolist() == [3.0]
        eng2.push("A", {"ts": [5.5], "k": [1]})          # within the bound of the newest (6)
    else:
        with pytest.raises(LateTupleError):
            eng2.push("A", {"ts": [3.0, 6.0], "k": [1, 1]})
        eng2.push("A", {"ts": [5.5, 6.0], "k": [1, 1]})
    eng2.push("B", {"ts": [7.0], "k": [1]})
    eng2.heartbeat("A", 50.0)
    eng2.heartbeat("B", 50.0)
    r = q2.results()
    pairs = sorted(map(tuple, r[r["__sign"] == 1].iloc[:, :3].values.tolist()))
    a_ts, b_ts = [1.0, 4.0, 5.5, 6.0], [4.0, 7.0]
    assert pairs == sorted((1, a, b) for a in a_ts for b in b_ts if abs(a - b) < 5)
    assert q2.state == "active"


def _victim_engine():
    eng = Engine()
    eng.execute("CREATE STREAM S (k INT) TIMESTAMP ts; CREATE STREAM T (k INT) TIMESTAMP ts")
    sqls = ["SELECT COUNT(*) AS n FROM S [RANGE 5]",
            "SELECT k, ts FROM S [RANGE 6] WHERE k > 0",
            "SELECT S.k, S.ts, T.ts FROM S [RANGE 5], T [RANGE 5] WHERE S.k = T.k",
            "SELECT SUM(k) AS s FROM S [RANGE 7]",
            "SELECT k FROM T [RANGE 5]"]
    return eng, [eng.register(s) for s in sqls]


PUSHES = [("S", [1.0, 2.0], [1, 2]), ("T", [1.5], [1]), ("S", [3.0, 4.0], [1, 3]), ("T", [4.5], [3]),
          ("S", [5.0], [2]), ("T", [6.0], [2])]


@pytest.mark.parametrize("victim", [0, 1, 2, 3])
def test_an_operator_error_mid_dispatch_fails_that_query_only(victim):
    """Force the root operator of one query to raise on the third push: that query fails (its error named,
    its results up to the step before kept), every other query saw the batch -- its results equal those of
    an engine where nothing failed -- and the next pushes work."""
    eng, qs = _victim_engine()
    ref, rs = _victim_engine()
    op = qs[victim].plan.root.op
    step = op.step
    raised = []

    def boom(now, *a, **kw):
        if now >= 3.0 and not raised:
            raised.append(now)
            raise RuntimeError("forced failure")
        return step(now, *a, **kw)
    op.step = boom
    for s, ts, k in PUSHES:
        for e in (eng, ref):
            e.push(s, {"ts": ts, "k": k})
    assert raised
    for e in (eng, ref):
        e.heartbeat("S", 20.0)
        e.heartbeat("T", 20.0)
    v = qs[victim]
    assert v.state == "failed" and "RuntimeError in its plan: forced failure" in v.failed
    assert "RuntimeError: forced failure" in v.fail_traceback
    assert v.stats()["state"] == "failed"
    for i, (q, r) in enumerate(zip(qs, rs)):
        if i != victim:
            assert q.state == "active"
            _same(q.results(), r.results())
    # the victim kept what it had before the failing step
    before = v.clock
    _same(v.snapshot(before), rs[victim].snapshot(before))


def test_an_error_outside_every_query_propagates():
    eng, qs = _victim_engine()
    eng.push("S", {"ts": [1.0], "k": [1]})

    def boom(*a, **kw):
        raise RuntimeError("sharing broke")
    eng.sharing.feed = boom
    with pytest.raises(RuntimeError, match="sharing broke"):
        eng.push("S", {"ts": [2.0], "k": [1]})


@pytest.mark.parametrize("make", ["arrow", "pandas", "dict"])
def test_int_null_is_called_null(make):
    import pandas as pd
    import pyarrow as pa
    eng = _engine()
    data = {"ts": [1.0, 2.0], "k": [1, None]}
    batch = {"arrow": pa.table, "pandas": pd.DataFrame, "dict": dict}[make](data)
    want = r"row 1 holds nan \(NULL / missing\)" if make == "pandas" else r"row 1 is NULL"
    with pytest.raises(BatchError, match=r"column 'k' is INT but " + want + ": an INT column takes no nulls"):
        eng.push("A", batch)
    assert eng.stream("A").stats()["rejected_batches"] == 1
    if make == "arrow":          # a DOUBLE column takes the Arrow null as NaN
        eng.execute("CREATE STREAM D (x DOUBLE) TIMESTAMP ts")
        q = eng.register("SELECT x FROM D [RANGE 10]")
        eng.push("D", pa.table({"ts": [1.0, 2.0, 3.0], "x": pa.array([1.5, None, 2.5])}))
        assert np.isnan(q.results()["x"].tolist()[1]) and q.results()["x"].tolist()[::2] == [1.5, 2.5]
    with pytest.raises(BatchError, match=r"row 1 holds 2.5"):
        eng.push("A", {"ts": [1.0, 2.0], "k": [1.0, 2.5]})


def test_an_operator_error_when_the_slack_moves_the_clock_on():
    """The step that moves a slack stream's clock to its watermark (no input) raises in one query: that
    query fails, the other advances to the watermark (its window expires a tuple there), pushes go on."""
    def build():
        eng = Engine()
        eng.execute("CREATE STREAM S (k INT) TIMESTAMP ts SLACK 2 SECONDS")
        return eng, [eng.register("SELECT COUNT(*) AS n FROM S [RANGE 3]"),
                     eng.register("SELECT k FROM S [RANGE 2]")]
    (eng, (a, v)), (ref, (ra, rv)) = build(), build()
    op, step, raised = v.plan.root.op, v.plan.root.op.step, []

    def boom(now, *inputs):
        if now == 4.0 and not raised:
            raised.append(now)
            raise ValueError("at the watermark")
        return step(now, *inputs)
    op.step = boom
    for e in (eng, ref):
        e.push("S", {"ts": [1.0, 2.0, 3.0, 6.0], "k": [1, 2, 3, 6]})   # releases 1..3 at 3, then W = 4
    assert raised == [4.0] and v.state == "failed" and "ValueError in its plan" in v.failed
    assert a.clock == 4.0 and a.snapshot(4.0)["n"].tolist() == [2]       # 1 expired at 4
    for e in (eng, ref):
        e.push("S", {"ts": [7.0], "k": [7]})
        e.heartbeat("S", 20.0)
    _same(a.results(), ra.results())
    assert v.clock == 3.0
    _same(v.snapshot(3.0), rv.snapshot(3.0))
