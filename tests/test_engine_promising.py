"""WITH PREFERENCE queries through the SQL engine (promising-tuple join).

Oracles: brute-force numpy window join (equal items, |ts1 - ts2| < w) and the
same query evaluated EXACT by the engine.
"""
from collections import Counter

import numpy as np
import pytest

from sketchql.data import generate_stores
from sketchql.engine import Engine
from sketchql.errors import SketchQLSemanticError

DDL = """
CREATE STREAM Store1 (ItemNo INT, price DOUBLE) TIMESTAMP ts;
CREATE STREAM Store2 (ItemNo INT, price DOUBLE) TIMESTAMP ts;
CREATE SUMMARY s1 ON Store1 (ItemNo) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4);
CREATE SUMMARY s2 ON Store2 (ItemNo) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)
"""
PREF = ("SUMMARY.Estimate.Count(S1.ItemNo), SUMMARY.Estimate.Count(S2.ItemNo) FADE FACTOR 0.8 "
        "WINDOW 1 MINUTE")
FIG6 = ("SELECT S1.ItemNo, S1.ts, S2.ts FROM Store1 S1, Store2 S2 WHERE S1.ItemNo = S2.ItemNo "
        "WITH PREFERENCE {pref} " + PREF + " {tail}")
DURATION = 90.0


@pytest.fixture(scope="module")
def stores():
    return generate_stores(2, duration=DURATION, n_items=300, seed=11)


def _feed(eng, stores, step=5.0, on_step=None):
    a, b = stores
    for k, t0 in enumerate(np.arange(0.0, DURATION, step)):
        for name, s in (("Store1", a), ("Store2", b)):
            m = (s.ts >= t0) & (s.ts < t0 + step)
            eng.push(name, {"ts": s.ts[m], "ItemNo": s.item[m], "price": s.price[m]})
        if on_step is not None:
            on_step(k)
    eng.heartbeat("Store1", DURATION + 200)
    eng.heartbeat("Store2", DURATION + 200)


def _run(stores, pref="desc", tail="WITHIN 50 PROBES PER TUPLE", seed=0, on_step=None):
    eng = Engine(seed=seed)
    eng.execute(DDL)
    q = eng.register(FIG6.format(pref=pref, tail=tail))
    q.set_knob("retain_changes", None)
    _feed(eng, stores, on_step=on_step and (lambda k: on_step(q, k)))
    return q


def _triples(q):
    r = q.results()
    assert list(r.columns[:3]) == ["ItemNo", "S1.ts", "S2.ts"]
    assert (r["__sign"] == 1).all()
    return Counter(zip(r["ItemNo"].tolist(), r["S1.ts"].tolist(), r["S2.ts"].tolist()))


@pytest.fixture(scope="module")
def brute(stores):
    a, b = stores
    m = (a.item[:, None] == b.item[None, :]) & (np.abs(a.ts[:, None] - b.ts[None, :]) < 60.0)
    i, j = np.nonzero(m)
    return Counter(zip(a.item[i].tolist(), a.ts[i].tolist(), b.ts[j].tolist()))


@pytest.fixture(scope="module")
def exact(stores):
    return _triples(_run(stores, tail="EXACT"))


def test_exact_oracle_agrees_with_brute_force(exact, brute):
    assert exact == brute and sum(brute.values()) > 1000


def test_figure6_tight_budget_subset_no_duplicates(stores, brute):
    q = _run(stores)
    assert q.plan.engine == "promising"
    got = _triples(q)
    assert max(got.values()) == 1                       # no duplicates
    assert not (got - brute)                            # every pair is an exact join result
    assert 0 < sum(got.values()) < sum(brute.values())  # tight budget: fewer, but some
    st = q.stats()["promising"]
    assert st["pt_pairs"] == sum(got.values()) and st["pt_pairs_lost"] == 0
    assert st["pt_budget_units_per_tuple"] == 50.0 and st["pt_work"] > 0 and "pt_queue" in st
    assert st["pt_units_given"] == 50.0 * st["pt_tuples_in"]


def test_huge_budget_equals_exact_join(stores, exact):
    q = _run(stores, tail="WITHIN 1000000 PROBES PER TUPLE")
    assert _triples(q) == exact


@pytest.mark.parametrize("pref", ["asc", "weighted"])
def test_other_preferences_run(stores, brute, pref):
    got = _triples(_run(stores, pref=pref))
    assert max(got.values(), default=1) == 1 and not (got - brute)
    assert sum(got.values()) < sum(brute.values())
    if pref == "weighted":
        assert sum(got.values()) > 0


def test_same_seed_same_output(stores):
    r1 = _run(stores, pref="weighted", seed=5).results()
    r2 = _run(stores, pref="weighted", seed=5).results()
    assert r1.equals(r2)


def test_budget_knob_and_ms_and_default(stores, brute):
    base = _run(stores)
    n_base = base.stats()["promising"]["pt_pairs"]

    def bump(q, k):
        if k == 3:
            q.set_knob("budget", 5000)
    q = _run(stores, on_step=bump)
    st = q.stats()["promising"]
    assert st["pt_budget_units_per_tuple"] == 5000.0
    assert st["pt_units_given"] > 50.0 * st["pt_tuples_in"]
    assert st["pt_pairs"] > n_base and not (_triples(q) - brute)
    # WITHIN n MS: n / 1000 * BENCH_UNITS_PER_SECOND units per tuple (2000/s -> 2 units per ms)
    q = _run(stores, tail="WITHIN 25 MS PER TUPLE")
    assert q.stats()["promising"]["pt_budget_units_per_tuple"] == 50.0
    assert q.results().equals(base.results())
    # no WITHIN: the documented default
    from sketchql.planner.promising_plan import DEFAULT_BUDGET_UNITS
    q = _run(stores, tail="")
    assert q.stats()["promising"]["pt_budget_units_per_tuple"] == DEFAULT_BUDGET_UNITS


def test_explain_shows_promising_operator():
    eng = Engine()
    eng.execute(DDL)
    text = eng.explain(FIG6.format(pref="desc", tail="WITHIN 50 PROBES PER TUPLE"))
    assert "PromisingTupleJoin ON S1.ItemNo = S2.ItemNo PREFERENCE desc FADE 0.8 WINDOW 60 s" in text
    assert "SymmetricHashJoin" not in text.split("join orders")[0]


def test_unsupported_shapes_raise_clearly():
    eng = Engine()
    eng.execute(DDL)
    with pytest.raises(SketchQLSemanticError, match="two-stream equi-joins.*add EXACT"):
        eng.register("SELECT ItemNo FROM Store1 WHERE price > 3 WITH PREFERENCE desc "
                     "SUMMARY.Estimate.Count(ItemNo) WINDOW 1 MINUTE")
    with pytest.raises(SketchQLSemanticError, match="aggregates"):
        eng.register("SELECT COUNT(*) FROM Store1 S1, Store2 S2 WHERE S1.ItemNo = S2.ItemNo "
                     "WITH PREFERENCE desc " + PREF)
    with pytest.raises(SketchQLSemanticError, match="INT columns"):
        eng.register("SELECT S1.ts FROM Store1 S1, Store2 S2 WHERE S1.price = S2.price "
                     "WITH PREFERENCE desc S1.price WINDOW 1 MINUTE")
    # EXPLAIN still shows the (exact) plan and why it cannot run
    assert "cannot run it" in eng.explain("SELECT ItemNo FROM Store1 WITH PREFERENCE desc "
                                          "SUMMARY.Estimate.Count(ItemNo) WINDOW 1 MINUTE")


def test_residual_filter_and_projection_above_pt_join(stores, brute):
    eng = Engine()
    eng.execute(DDL)
    q = eng.register("SELECT S1.ItemNo AS item, S2.ts - S1.ts AS d FROM Store1 S1, Store2 S2 "
                     "WHERE S1.ItemNo = S2.ItemNo AND S1.price > 50 WITH PREFERENCE desc " + PREF +
                     " WITHIN 1000000 PROBES PER TUPLE")
    q.set_knob("retain_changes", None)
    _feed(eng, stores)
    a, b = stores
    m = ((a.item[:, None] == b.item[None, :]) & (np.abs(a.ts[:, None] - b.ts[None, :]) < 60.0)
         & (a.price[:, None] > 50))
    i, j = np.nonzero(m)
    want = sorted(zip(a.item[i].tolist(), np.round(b.ts[j] - a.ts[i], 9).tolist()))
    r = q.results()
    got = sorted(zip(r["item"].tolist(), np.round(r["d"].to_numpy(), 9).tolist()))
    assert got == want and len(want) > 0


# ---------------------------------------------------------------- windowed output (expirations)
SNAP_TIMES = [3.3, 10.0, 37.5, 60.0, 61.2, 75.0, 89.9, 100.0, 130.0, 149.9, 150.0, 290.0]


def _snap(q, t):
    r = q.snapshot(t)
    return Counter(zip(r["ItemNo"].tolist(), r["S1.ts"].tolist(), r["S2.ts"].tolist()))


def _brute_snap(stores, t, w=60.0):
    """Pairs alive at t: max(ts) <= t < min(ts) + w, equal items."""
    a, b = stores
    m = ((a.item[:, None] == b.item[None, :]) & (np.maximum(a.ts[:, None], b.ts[None, :]) <= t)
         & (t < np.minimum(a.ts[:, None], b.ts[None, :]) + w))
    i, j = np.nonzero(m)
    return Counter(zip(a.item[i].tolist(), a.ts[i].tolist(), b.ts[j].tolist()))


@pytest.fixture(scope="module")
def exact_q(stores):
    return _run(stores, tail="EXACT")


def _check_minus_rows_match_plus(q):
    ch = q.changes()
    cols = ["ItemNo", "S1.ts", "S2.ts"]
    plus = {}
    for k in range(len(ch)):
        rid, at, s = int(ch.rid[k]), float(ch.at[k]), int(ch.sign[k])
        row = tuple(float(ch.columns[c][k]) for c in cols)
        if s > 0:
            assert rid not in plus                          # one +1 per pair
            plus[rid] = (at, row, False)
        else:
            assert rid in plus, "a -1 row without an earlier +1"
            at_p, row_p, done = plus[rid]
            assert not done and at_p < at and row_p == row  # later, same row, retracted once
            assert at == min(row[1], row[2]) + 60.0          # expiry = min(ts_a, ts_b) + w
            plus[rid] = (at_p, row_p, True)
    assert np.all(np.diff(ch.at) >= 0)
    return sum(1 for v in plus.values() if v[2]), len(plus)


def test_huge_budget_snapshots_equal_exact_and_brute(stores, exact_q):
    q = _run(stores, tail="WITHIN 1000000 PROBES PER TUPLE")
    nonempty = 0
    for t in SNAP_TIMES:
        want = _brute_snap(stores, t)
        assert _snap(exact_q, t) == want
        assert _snap(q, t) == want
        nonempty += sum(want.values()) > 0
    assert nonempty >= 8
    st = q.stats()
    assert st["live_rows"] == 0 and st["promising"]["pt_pending_expirations"] == 0
    assert st["promising"]["pt_pairs_expired"] == st["promising"]["pt_pairs"] > 1000


def test_tight_budget_snapshots_subset_of_exact(stores, exact_q):
    q = _run(stores)
    strict = 0
    for t in SNAP_TIMES:
        got, want = _snap(q, t), _snap(exact_q, t)
        assert not (got - want)
        strict += sum(got.values()) < sum(want.values())
    assert strict >= 3 and sum(_snap(q, 60.0).values()) > 0
    st = q.stats()["promising"]
    assert st["pt_pairs_expired"] == st["pt_pairs"] and st["pt_pending_expirations"] == 0


@pytest.mark.parametrize("tail", ["WITHIN 50 PROBES PER TUPLE", "WITHIN 1000000 PROBES PER TUPLE"])
def test_every_minus_row_matches_an_earlier_plus(stores, tail):
    q = _run(stores, tail=tail)
    n_minus, n_plus = _check_minus_rows_match_plus(q)
    assert n_minus == n_plus > 0                            # all expired after the final heartbeat
    r = q.results()                                         # default view: ISTREAM (+1 rows only)
    assert (r["__sign"] == 1).all() and len(r) == n_plus


def test_expirations_come_out_on_heartbeats_without_arrivals():
    eng = Engine(seed=3)
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    q = eng.register("SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k WITH PREFERENCE desc A.k "
                     "WINDOW 10 SECONDS WITHIN 1000 PROBES PER TUPLE")
    eng.push("A", {"ts": [1.0, 2.0], "k": [7, 8]})
    eng.push("B", {"ts": [3.0, 4.0], "k": [7, 8]})
    eng.heartbeat("A", 5.0)
    eng.heartbeat("B", 5.0)
    assert q.stats()["live_rows"] == 2
    for t, live in ((10.9, 2), (11.0, 1), (11.5, 1), (12.0, 0)):
        eng.heartbeat("A", t)
        eng.heartbeat("B", t)
        assert q.stats()["live_rows"] == live, t
    ch = q.changes()
    assert ch.sign.tolist() == [1, 1, -1, -1] and ch.at.tolist() == [3.0, 4.0, 11.0, 12.0]
    assert ch.rid[2] == ch.rid[0] and ch.rid[3] == ch.rid[1]


def test_whole_stream_window_never_expires():
    eng = Engine(seed=3)
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    q = eng.register("SELECT A.k FROM A, B WHERE A.k = B.k WITH PREFERENCE desc A.k "
                     "WITHIN 1000 PROBES PER TUPLE")
    eng.push("A", {"ts": [1.0, 2.0], "k": [7, 8]})
    eng.push("B", {"ts": [3.0, 4.0], "k": [7, 8]})
    for t in (5.0, 1e6):
        eng.heartbeat("A", t)
        eng.heartbeat("B", t)
    assert (q.changes().sign == 1).all() and q.stats()["live_rows"] == 2
    assert q.stats()["promising"]["pt_pending_expirations"] == 0


class _StubPT:
    """A PTJoin stand-in whose produced pairs the test writes directly (late pairs on demand)."""

    def __init__(self):
        self.now = -np.inf
        self._out = {"a": [], "b": [], "ta": [], "tb": [], "val": []}

    def tick(self, batch, allowance):
        if len(batch.ts):
            self.now = max(self.now, float(batch.ts.max()))

    def produce(self, a, b, ta, tb):
        for k, v in (("a", a), ("b", b), ("ta", ta), ("tb", tb)):
            self._out[k].append(np.asarray(v))


def test_late_pair_gives_neither_row():
    from sketchql.operators.changes import Batch, Changes
    from sketchql.planner.promising_plan import PTJoinNode
    op = _StubPT()
    node = PTJoinNode(op, ("k", "k"), ("A.", "B."), 10.0, lambda: 1.0)

    def ins(ts):
        b = Batch({"k": np.array([5]), "ts": np.array([ts])}, ts=np.array([ts]))
        return Changes.inserts(b, b.ts, [0])
    assert node.step(1.0, ins(1.0), None) is None            # seq 0: A at 1
    assert node.step(9.0, None, ins(9.0)) is None            # seq 1: B at 9 (not probed yet)
    assert node.step(10.5, None, ins(10.5)) is None          # seq 2: B at 10.5
    assert node.step(11.5, None, None) is None               # the clock passes 11 (nothing found yet)
    op.produce([0, 0], [1, 2], [1.0, 1.0], [9.0, 10.5])      # both pairs expired at 1 + 10 = 11
    out = node.step(12.0, None, None)                        # found in the step after 11.5 -> late
    assert out is None and node.pairs_late == 2 and node.pairs_out == 0
    assert node.pending_expirations() == 0
    assert node.step(13.0, ins(13.0), None) is None          # seq 3: A at 13
    op.produce([3], [2], [13.0], [10.5])                     # alive on [13, 20.5): produced in time
    out = node.step(14.0, None, None)
    assert out.sign.tolist() == [1] and out.at.tolist() == [13.0]
    out2 = node.step(30.0, None, None)
    assert out2.sign.tolist() == [-1] and out2.at.tolist() == [20.5] and out2.rid[0] == out.rid[0]
    assert out2.columns["A.ts"].tolist() == [13.0] and out2.columns["B.ts"].tolist() == [10.5]


@pytest.mark.parametrize("n, dur, tail", [
    (6_000, 120.0, ""),
    (6_000, 120.0, "WITHIN 1000000 PROBES PER TUPLE"),
    pytest.param(30_000, 600.0, "", marks=pytest.mark.slow),     # 60k tuples (~25 s)
])
def test_live_rows_stay_bounded_on_a_long_stream(n, dur, tail):
    """2n tuples, 10 s window: the live relation is at most the exact live join, not the history."""
    rng = np.random.default_rng(7)
    w = 10.0
    a_ts, b_ts = np.sort(rng.uniform(0, dur, n)), np.sort(rng.uniform(0, dur, n))
    a_k, b_k = rng.integers(0, 400, n), rng.integers(0, 400, n)
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    q = eng.register("SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k WITH PREFERENCE desc A.k "
                     "WINDOW 10 SECONDS " + tail)
    q.set_knob("retain_changes", 2000)
    peak, exact_peak = 0, 0
    for t0 in np.arange(0.0, dur, 2.0):
        ma, mb = (a_ts >= t0) & (a_ts < t0 + 2.0), (b_ts >= t0) & (b_ts < t0 + 2.0)
        eng.push("A", {"ts": a_ts[ma], "k": a_k[ma]})
        eng.push("B", {"ts": b_ts[mb], "k": b_k[mb]})
        eng.heartbeat("A", t0 + 2.0)
        eng.heartbeat("B", t0 + 2.0)
        st = q.stats()
        now = st["clock"]
        # brute force: pairs alive at `now` (max ts <= now < min ts + w)
        ia = (a_ts > now - w) & (a_ts <= now)
        ib = (b_ts > now - w) & (b_ts <= now)
        live_exact = int((a_k[ia][:, None] == b_k[ib][None, :]).sum())
        assert st["live_rows"] <= live_exact
        peak, exact_peak = max(peak, st["live_rows"]), max(exact_peak, live_exact)
    total = q.stats()["changes_out"]
    assert 0 < peak <= exact_peak < 1000 and total > (dur / 60.0) * peak   # history >> live relation
    for s in ("A", "B"):
        eng.heartbeat(s, dur + 2 * w)
    st = q.stats()
    assert st["live_rows"] == 0 and st["promising"]["pt_pending_expirations"] == 0
    assert st["promising"]["pt_pairs_expired"] == st["promising"]["pt_pairs"] > 1000
