"""Engine defects of the second user audit (issue 12): knob writes validated at write time (D3),
snapshots past the query clock (D7), the per-step result-row cap (D10)."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from sketchql.control import ControlError
from sketchql.engine import Engine
from sketchql.errors import SketchQLError


# ----------------------------------------------------------------------------- D3: knob domains
def _stream_engine():
    eng = Engine()
    eng.execute("CREATE STREAM A (k INT, v DOUBLE, s VARCHAR) TIMESTAMP ts")
    return eng


def _rows(n, t0, rng):
    return {"ts": np.sort(t0 + rng.random(n) * 5), "k": rng.integers(0, 50, n), "v": rng.normal(size=n),
            "s": np.array([f"x{j % 7}" for j in range(n)], dtype=object)}


def test_shed_key_must_name_a_column_and_is_refused_at_write_time():
    eng = _stream_engine()
    q = eng.register("SELECT COUNT(*) AS n FROM A [UNBOUNDED]")
    eng.controls.set("stream", "A", "shed_rate", 0.5)
    with pytest.raises(ControlError) as ei:
        eng.controls.set("stream", "A", "shed_key", "nonexistent")
    msg = str(ei.value)
    assert "shed_key" in msg and all(repr(c) in msg for c in ("k", "v", "s", "ts")), msg
    assert isinstance(ei.value, SketchQLError)
    with pytest.raises(ControlError):                      # the stream's own API too
        eng.stream("A").set_knob("shed_key", "nonexistent")
    assert eng.stream("A").knobs()["shed_key"] is None     # unchanged
    eng.push("A", _rows(100, 0.0, np.random.default_rng(0)))   # and a push still works
    assert 0 < int(q.snapshot()["n"].iloc[0]) < 100
    t = eng.controls.get("stream", "A").knobs["shed_key"]
    assert t.kind == "choice" and set(t.choices) == {"k", "v", "s", "ts"} and t.nullable


def test_shed_key_in_another_case_is_the_column_and_sheds_whole_values():
    eng = _stream_engine()
    q = eng.register("SELECT k FROM A [UNBOUNDED]")
    assert eng.controls.set("stream", "A", "shed_key", "K") == "k"
    eng.controls.set("stream", "A", "shed_rate", 0.5)
    rng = np.random.default_rng(1)
    sent = []
    for i in range(4):
        b = _rows(500, 10.0 * i, rng)
        sent.append(b["k"])
        eng.push("A", b)
    sent = np.concatenate(sent)
    got = q.results()["k"].to_numpy()
    kept = set(got.tolist())
    assert 0 < len(kept) < len(set(sent.tolist()))
    # whole values: every row of a kept value is there, none of a dropped one (brute force)
    assert sorted(got.tolist()) == sorted(x for x in sent.tolist() if x in kept)


def test_http_patch_of_an_unknown_shed_key_is_422_and_changes_nothing():
    from test_service_helpers import client
    with client() as c:
        assert c.post("/streams", json={"sql": "CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts"}).status_code == 201
        qid = c.post("/queries", json={"sql": "SELECT COUNT(*) AS n FROM A [UNBOUNDED]"}).json()["id"]
        r = c.patch("/control/stream/A", json={"shed_rate": 0.5, "shed_key": "nonexistent"})
        assert r.status_code == 422, r.text
        assert "'k', 'v', 'ts'" in r.json()["error"]["message"]
        assert "got 'nonexistent'" in r.json()["error"]["message"]      # quoted whole
        knobs = c.get("/control/stream/A").json()["knobs"]
        assert knobs["shed_rate"]["value"] == 0.0 and knobs["shed_key"]["value"] is None   # all or nothing
        r = c.post("/streams/A/batches", json={"rows": [{"ts": 1.0, "k": 1, "v": 1.0}] * 10})
        assert r.status_code == 200, r.text
        assert c.get("/health").json()["status"] == "ok"
        assert c.get(f"/queries/{qid}/snapshot").json()["rows"] == [{"n": 10}]


def _domain_values(k):
    if k.kind == "choice":
        vs = list(k.choices)
    elif k.kind == "bool":
        vs = [False, True]
    elif k.kind in ("float", "int"):
        lo = 0.0 if k.lo is None else k.lo
        step = 1 if k.kind == "int" else 1e-3
        vs = [lo + step if k.lo_open else lo, (k.hi - (step if k.hi_open else 0)) if k.hi is not None else lo + 7]
    else:
        vs = ["k", "nope"]
    return vs + ([None] if k.nullable else [])


def test_no_knob_write_that_passes_validation_makes_a_later_push_fail():
    """Every settable knob of every entity, set to values of its domain one after the other (shedding
    on, so the shedding knobs act), each followed by pushes and a heartbeat: a write is either refused
    (SketchQLError) or every later push, heartbeat and read succeeds."""
    warnings.simplefilter("ignore")
    eng = Engine()
    eng.execute("CREATE STREAM A (k INT, v DOUBLE, s VARCHAR) TIMESTAMP ts; "
                "CREATE STREAM B (k INT, w DOUBLE) TIMESTAMP ts; "
                "CREATE SUMMARY sa ON A (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3); "
                "CREATE SUMMARY sb ON B (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)")
    for sql in ["SELECT COUNT(*) AS n FROM A [UNBOUNDED]",
                "SELECT a.v, b.w FROM A [RANGE 10] a, B [RANGE 10] b WHERE a.k = b.k",
                "SELECT a.v, b.w FROM A [RANGE 10] a, B [RANGE 10] b WHERE a.k = b.k "
                "WITH PREFERENCE desc SUMMARY.Estimate.Count(a.k), SUMMARY.Estimate.Count(b.k)",
                "SELECT k, SUM(v) AS s FROM A [RANGE 10] GROUP BY k WITH ERROR 0.1 CONFIDENCE 0.9",
                "SELECT COUNT(DISTINCT k) AS d FROM A [RANGE 10] WITH ERROR 0.1",
                "SELECT s, COUNT(*) AS n FROM A [RANGE 5] GROUP BY s"]:
        eng.register(sql)
    rng = np.random.default_rng(2)
    t = [0.0]

    def feed(read=False):
        n = 30
        ts = np.sort(t[0] + rng.random(n) * 2)
        eng.push("A", {"ts": ts, "k": rng.integers(0, 10, n), "v": rng.normal(size=n),
                       "s": np.array([f"x{j % 7}" for j in range(n)], dtype=object)})
        eng.push("B", {"ts": ts, "k": rng.integers(0, 10, n), "w": rng.normal(size=n)})
        t[0] += 3
        eng.heartbeat("A", t[0]), eng.heartbeat("B", t[0])
        for q in eng.queries:
            q.poll()
            if read:
                q.snapshot()

    feed()
    eng.controls.set("stream", "A", "shed_rate", 0.5)
    writes = refused = 0
    for tab in eng.controls.tables():
        for name, k in tab.knobs.items():
            if not k.settable:
                continue
            for v in _domain_values(k):
                try:
                    eng.controls.set(tab.kind, tab.name, name, v)
                    writes += 1
                except SketchQLError:
                    refused += 1
                    continue
                feed()               # must not raise
    feed(read=True)
    assert writes > 50 and refused >= 1


# ----------------------------------------------------------------------------- D7: snapshots past the clock
def test_snapshot_past_the_query_clock_is_refused_and_equal_to_brute_force_up_to_it():
    from sketchql.engine import SnapshotPastClock
    eng = Engine()
    eng.execute("CREATE STREAM P (k INT) TIMESTAMP ts")
    q = eng.register("SELECT k, COUNT(*) AS n FROM P [RANGE 10] GROUP BY k")
    eng.push("P", {"ts": [1.0, 2.0], "k": [1, 2]})
    assert q.clock == 2.0
    for at in (2.0000001, 1000.0, 1e308, float("inf"), float("nan")):
        with pytest.raises(SnapshotPastClock) as ei:
            q.snapshot(at)
        assert "past the query clock 2" in str(ei.value) and "up to the clock" in str(ei.value)
        assert isinstance(ei.value, SketchQLError)
    eng.heartbeat("P", 1000.0)

    def brute(t):      # window (t - 10, t]: the groups of the tuples inside it
        rows = [(1.0, 1), (2.0, 2)]
        c = {}
        for ts, k in rows:
            if t - 10 < ts <= t:
                c[k] = c.get(k, 0) + 1
        return sorted(c.items())

    for at in (1.0, 2.0, 5.0, 11.0, 11.5, 12.0, 500.0, 1000.0):
        df = q.snapshot(at)
        assert sorted(zip(df["k"].tolist(), df["n"].tolist())) == brute(at), at
    assert q.snapshot().equals(q.snapshot(1000.0))


def test_http_snapshot_past_the_clock_is_a_client_error_naming_the_clock():
    from test_service_helpers import client
    with client() as c:
        assert c.post("/streams", json={"sql": "CREATE STREAM P (k INT) TIMESTAMP ts"}).status_code == 201
        qid = c.post("/queries", json={"sql": "SELECT k, COUNT(*) AS n FROM P [RANGE 10] GROUP BY k"}).json()["id"]
        assert c.post("/streams/P/batches", json={"rows": [{"ts": 1, "k": 1}, {"ts": 2, "k": 2}]}).status_code == 200
        assert len(c.get(f"/queries/{qid}/snapshot", params={"at": 2}).json()["rows"]) == 2
        r = c.get(f"/queries/{qid}/snapshot", params={"at": 1000})
        # 4xx (the service maps SketchQLError to 400; 422 once it maps SnapshotPastClock)
        assert r.status_code == 422, r.text
        assert "at=1000 is past the query clock 2" in r.json()["error"]["message"]
        assert c.post("/streams/P/heartbeat", json={"ts": 1000}).status_code == 200
        assert c.get(f"/queries/{qid}/snapshot", params={"at": 1000}).json()["rows"] == []


def test_a_shed_batch_still_moves_the_stream_clock_to_its_last_timestamp():
    eng = _stream_engine()
    q = eng.register("SELECT COUNT(*) AS n FROM A [UNBOUNDED]")
    eng.controls.set("stream", "A", "shed_rate", 0.9)
    rng = np.random.default_rng(3)
    kept_short = 0
    for i in range(20):
        b = _rows(3, 10.0 * i, rng)
        eng.push("A", b)
        assert eng.stream("A").clock == b["ts"].max()          # the pushed batch's time, shed or not
        assert q.clock == b["ts"].max()
        kept_short += eng.stream("A").tuples_kept < eng.stream("A").tuples_in
    assert kept_short                     # (some tuples were shed)


# ----------------------------------------------------------------------------- D10: rows per step
SELF_JOIN = "SELECT a1.v AS x, a2.v AS y FROM A [RANGE 1000] a1, A [RANGE 1000] a2 WHERE a1.k = a2.k"


def _d10_batches(n_big=3000):
    """Small batches of spread keys, then one batch of ``n_big`` tuples of one key whose self-join
    explodes (n² pairs), then small ones again."""
    rng = np.random.default_rng(7)
    out = []
    for i in range(4):
        n = 50
        out.append({"ts": np.sort(10.0 * i + rng.random(n)), "k": rng.integers(0, 40, n),
                    "v": np.round(rng.random(n), 4)})
    n = n_big
    out.append({"ts": 45.0 + np.arange(n) * 1e-6, "k": np.full(n, 7), "v": np.round(rng.random(n), 4)})
    for i in range(3):
        out.append({"ts": np.sort(50.0 + 10.0 * i + rng.random(20)), "k": rng.integers(0, 40, 20),
                    "v": np.round(rng.random(20), 4)})
    return out


def _brute_join(batches, t):
    """The self-join's live pairs at time t: both tuples inside the window (t - 1000, t]."""
    rows = [(ts, k, v) for b in batches for ts, k, v in zip(b["ts"], b["k"], b["v"]) if t - 1000 < ts <= t]
    return sorted((v1, v2) for _, k1, v1 in rows for _, k2, v2 in rows if k1 == k2)


def _d10_engine():
    eng = Engine(seed=3)
    eng.execute("CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts")
    j = eng.register(SELF_JOIN)
    c = eng.register("SELECT COUNT(*) AS n, SUM(v) AS s FROM A [UNBOUNDED]")
    sel = eng.register("SELECT k, v FROM A [RANGE 1000] WHERE k >= 0")
    return eng, j, c, sel


def _pairs(df):
    return sorted(zip(df["x"].tolist(), df["y"].tolist()))


def test_a_step_over_the_row_cap_fails_that_query_only_and_cleanly():
    import tracemalloc
    eng, j, c, sel = _d10_engine()
    assert eng.controls.get("engine", "engine").knobs["max_rows_per_step"].value == 2_000_000
    bs = _d10_batches()
    for b in bs[:4]:
        eng.push("A", b)
    assert j.state == "active" and _pairs(j.snapshot()) == _brute_join(bs[:4], 31.0)
    before = j.clock
    tracemalloc.start()
    eng.push("A", bs[4])                       # 3000² = 9,000,000 pairs > 2,000,000
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 30e6, peak                   # counted, not built (9M pairs would be ~300 MB)
    assert j.state == "failed" and not j.active
    assert "max_rows_per_step = 2,000,000" in j.failed and "9,0" in j.failed and "t=45" in j.failed
    assert j.fail_rows > 2_000_000 and j.fail_cap == 2_000_000
    st = eng.controls.get("query", "q1").stats
    assert st["state"] == "failed" and st["error"] == j.failed
    # its results up to the step before stay readable (and snapshots past its clock are refused)
    assert j.clock == before and _pairs(j.snapshot()) == _brute_join(bs[:4], before)
    with pytest.raises(SketchQLError):
        j.snapshot(45.1)
    with pytest.raises(SketchQLError):
        eng.controls.set("query", "q1", "active", True)
    for b in bs[5:]:
        eng.push("A", b)
    eng.heartbeat("A", 2000.0)
    # the other queries saw every batch (brute force)
    allv = np.concatenate([b["v"] for b in bs])
    (n, s), = c.snapshot()[["n", "s"]].values.tolist()
    assert n == len(allv) and s == pytest.approx(allv.sum())
    got = sorted(zip(sel.results()["k"].tolist(), sel.results()["v"].tolist()))
    assert got == sorted((int(k), float(v)) for b in bs for k, v in zip(b["k"], b["v"]))
    assert j.clock == before and j.state == "failed"          # not fed any more


def test_row_cap_is_a_query_knob_and_the_engine_default_can_be_lifted():
    eng, j, c, sel = _d10_engine()
    bs = _d10_batches(600)
    eng.controls.set("query", "q3", "max_rows_per_step", 60)    # the selection: batches of 50 pass, 3000 not
    eng.controls.set("engine", "engine", "max_rows_per_step", None)
    for b in bs[:5]:
        eng.push("A", b)
    assert sel.state == "failed" and "max_rows_per_step = 60" in sel.failed
    assert j.state == "active" and _pairs(j.snapshot()) == _brute_join(bs[:5], 46.0)   # 360k+ rows: no cap
    assert c.state == "active" and int(c.snapshot()["n"].iloc[0]) == sum(len(b["ts"]) for b in bs[:5])
    with pytest.raises(ControlError):
        eng.controls.set("query", "q2", "max_rows_per_step", 0)


def test_row_cap_failure_is_the_same_after_checkpoint_and_replay():
    """An engine restored from a checkpoint taken before the explosive batch and fed the rest of the
    log fails the query at the same step, with the same message, and ends in the same state."""
    from sketchql.engine.checkpoint import dumps, loads
    bs = _d10_batches(600)
    ref, rj, rc, rs = _d10_engine()
    ref.controls.set("engine", "engine", "max_rows_per_step", 100_000)
    eng, *_ = _d10_engine()
    eng.controls.set("engine", "engine", "max_rows_per_step", 100_000)
    for b in bs[:3]:
        ref.push("A", b)
        eng.push("A", b)
    eng2 = loads(dumps(eng))
    for e in (ref, eng2):
        for b in bs[3:]:
            e.push("A", b)
        e.heartbeat("A", 1030.0)
    q = {x.id: x for x in eng2.queries}
    assert rj.failed is not None and q[1].failed == rj.failed and q[1].clock == rj.clock
    for a, b in ((rj, q[1]), (rc, q[2]), (rs, q[3])):
        assert a.state == b.state
        pd_a, pd_b = a.results(), b.results()
        assert pd_a.equals(pd_b)
    # and a third engine fed everything from the start agrees too (no checkpoint)
    e3, j3, *_ = _d10_engine()
    e3.controls.set("engine", "engine", "max_rows_per_step", 100_000)
    for b in bs:
        e3.push("A", b)
    assert j3.failed == rj.failed


def test_row_cap_under_the_scheduler_and_with_shared_operators():
    """Two identical self-joins share their operators: the step over the cap fails both (the shared
    step is refused once, before it is built); with one of them given a larger cap, only the other."""
    bs = _d10_batches(350)          # 122,500 pairs in one step: over 100,000
    for big in (False, True):
        eng = Engine(seed=3)
        eng.execute("CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts")
        eng.controls.set("engine", "engine", "max_rows_per_step", 100_000)
        j1, j2 = eng.register(SELF_JOIN), eng.register(SELF_JOIN)
        assert "shared" in j2.explain()
        if big:
            eng.controls.set("query", "q2", "max_rows_per_step", 10_000_000)
        for b in bs:
            eng.push("A", b)
        assert j1.state == "failed"
        if big:
            assert j2.state == "active" and _pairs(j2.snapshot()) == _brute_join(bs, bs[-1]["ts"][-1])
        else:
            assert j2.state == "failed" and j2.clock == j1.clock
    eng = Engine(seed=3)
    eng.execute("CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts")
    eng.controls.set("engine", "engine", "scheduler", "round_robin")
    eng.controls.set("engine", "engine", "max_rows_per_step", 100_000)
    j, c = eng.register(SELF_JOIN), eng.register("SELECT COUNT(*) AS n FROM A [UNBOUNDED]")
    for b in bs:
        eng.push("A", b)
    eng.run()
    assert j.state == "failed" and "t=45" in j.failed
    assert int(c.snapshot()["n"].iloc[0]) == sum(len(b["ts"]) for b in bs)


def test_http_row_cap_knob_and_failed_query_state():
    from test_service_helpers import client
    with client() as c:
        assert c.post("/streams", json={"sql": "CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts"}).status_code == 201
        j = c.post("/queries", json={"sql": SELF_JOIN}).json()["id"]
        n = c.post("/queries", json={"sql": "SELECT COUNT(*) AS n FROM A [UNBOUNDED]"}).json()["id"]
        r = c.patch(f"/control/query/q{j}", json={"max_rows_per_step": 1000})
        assert r.status_code == 200, r.text
        assert c.patch(f"/control/query/q{j}", json={"max_rows_per_step": -1}).status_code == 422
        rows = [{"ts": 1 + i * 1e-3, "k": i % 3, "v": 1.0} for i in range(30)]       # 300 pairs
        assert c.post("/streams/A/batches", json={"rows": rows}).status_code == 200
        rows = [{"ts": 2 + i * 1e-3, "k": 7, "v": 2.0} for i in range(100)]          # 10,000 pairs
        assert c.post("/streams/A/batches", json={"rows": rows}).status_code == 200
        q = c.get(f"/queries/{j}").json()
        assert q["stats"]["state"] == "failed" and "max_rows_per_step = 1,000" in q["stats"]["error"]
        assert c.get(f"/control/query/q{j}").json()["stats"]["state"] == "failed"
        assert c.get(f"/queries/{j}/results", params={"since": 0}).json()["total"] == 300
        assert c.get(f"/queries/{n}/snapshot").json()["rows"] == [{"n": 130}]
        assert c.get("/health").json()["status"] == "ok"


# ----------------------------------------------------------------------------- auto-declared PT indexes
def _pt_run(sql, ddl="", n_batches=10, n=40):
    eng = Engine(seed=5)
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts" + ddl)
    q = eng.register(sql)
    rng = np.random.default_rng(0)
    sent = {"A": [], "B": []}
    for i in range(n_batches):
        for s in "AB":
            b = {"ts": np.sort(i * 2 + rng.random(n) * 2), "k": rng.zipf(1.5, n) % 30}
            sent[s].append(b)
            eng.push(s, b)
    eng.heartbeat("A", 100.0), eng.heartbeat("B", 100.0)
    return q, eng, sent


PT_SUMMARY = ("SELECT A.k, A.ts, B.ts FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k WITH PREFERENCE desc "
              "SUMMARY.Estimate.Count(A.k), SUMMARY.Estimate.Count(B.k) WITHIN {} PROBES PER TUPLE")
PT_COLUMN = ("SELECT A.k, A.ts, B.ts FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k WITH PREFERENCE desc A.k "
             "WITHIN {} PROBES PER TUPLE")


def _pt_pairs(q):
    r = q.results()
    r = r[r["__sign"] > 0] if "__sign" in r else r
    return sorted(zip(r["k"].tolist(), r["A.ts"].tolist(), r["B.ts"].tolist()))


def test_summary_estimate_preference_without_create_summary_gets_the_auto_index():
    """SUMMARY.Estimate.Count(S.col) with no CREATE SUMMARY on S(col): the engine declares
    _auto_<stream>_<col> (README, "The multi-query runtime"), as it does for PREFERENCE desc S.col; both
    forms then probe the same index and give the same pairs row for row, also under a tight budget."""
    q1, e1, _ = _pt_run(PT_SUMMARY.format(3))
    assert sorted(d.name for d in e1.catalog.summaries) == ["_auto_A_k", "_auto_B_k"]
    q2, _, _ = _pt_run(PT_COLUMN.format(3))
    assert q1.results().equals(q2.results()) and len(q1.results())


def test_auto_index_join_equals_explicit_summary_and_brute_force_at_full_budget():
    q1, e1, sent = _pt_run(PT_SUMMARY.format(100000))
    d = e1.catalog.summary("_auto_A_k")
    shape = f"WITH GRANULARITY {d.granularity:g} SECONDS AND COLLAPSE({d.rate}, {d.depth})"
    q2, _, _ = _pt_run(PT_SUMMARY.format(100000), f"; CREATE SUMMARY sa ON A (k) {shape}; "
                                                  f"CREATE SUMMARY sb ON B (k) {shape}")
    a = [(k, t) for b in sent["A"] for k, t in zip(b["k"].tolist(), b["ts"].tolist())]
    b = [(k, t) for bb in sent["B"] for k, t in zip(bb["k"].tolist(), bb["ts"].tolist())]
    brute = sorted((ka, ta, tb) for ka, ta in a for kb, tb in b if ka == kb and abs(ta - tb) < 10)
    assert _pt_pairs(q1) == brute and _pt_pairs(q2) == brute and len(brute) > 100


# ------------------------------------------------- D10 follow-up: the cap counts true, new rows
def _live(rows, t, rng_=10.0):
    """The rows of a RANGE window at time t: t - range < ts <= t."""
    return [r for r in rows if t - rng_ < r["ts"] <= t]


def _eq(a, b):
    """SQL equality of two keys: NULL (NaN / None) equals nothing."""
    return a is not None and b is not None and a == a and b == b and a == b


def _records(b):
    return [dict(zip(b, vals)) for vals in zip(*b.values())]


def test_a_multi_column_join_is_capped_on_its_true_matches_not_the_first_conditions():
    """``A.region = B.region AND A.id = B.id`` with 10 regions: the first condition alone pairs
    each new A row with a tenth of B (20,000 candidates), the real output is 20 rows.  The cap
    counts the matches of every condition: 1,000 and 20 let the step through (the results are the
    brute force's), 19 refuses it and names the true count, 20."""
    nb, na = 2000, 100
    B = {"ts": np.full(nb, 1.0), "region": np.arange(nb) % 10, "id": np.arange(nb), "v": np.arange(nb)}
    A = {"ts": np.full(na, 2.0), "region": np.arange(na) % 10, "id": np.arange(na) * 3, "v": -np.arange(na)}
    truth = sorted((int(a["v"]), int(b["v"])) for a in _records(A) for b in _records(B)
                   if a["region"] == b["region"] and a["id"] == b["id"])
    assert len(truth) == 20             # id 3i sits in region 3i % 10, equal to i % 10 iff 5 | i
    for cap, ok in ((1000, True), (len(truth), True), (len(truth) - 1, False)):
        e = Engine()
        e.execute("CREATE STREAM A (region INT, id INT, v INT) TIMESTAMP ts")
        e.execute("CREATE STREAM B (region INT, id INT, v INT) TIMESTAMP ts")
        e.controls.set("engine", "engine", "max_rows_per_step", cap)
        q = e.register("SELECT A.v AS a, B.v AS b FROM A [RANGE 100], B [RANGE 100] "
                       "WHERE A.region = B.region AND A.id = B.id")
        e.push("B", B)
        e.heartbeat("A", 1.0)
        e.push("A", A)
        e.heartbeat("B", 2.0)
        if ok:
            assert q.state == "active", q.failed
            got = q.snapshot()
            assert sorted(zip(got["a"].tolist(), got["b"].tolist())) == truth
        else:
            assert q.state == "failed" and q.fail_rows == len(truth), q.failed


def test_multi_condition_joins_equal_brute_force_over_many_steps():
    """A 3-way join whose third input is linked to both bound ones by two conditions at once (the
    probe from C: A by A.x = C.x, then B by B.y = C.y AND A.y = B.x), NULL keys included, and a
    two-column static join, under a cap that never fires and under none: every snapshot equals the
    brute force over the live windows."""
    rng = np.random.default_rng(11)
    T = {"x": np.array([0.0, 1.0, 2.0, 1.0, 0.0]), "y": np.array([0.0, 0.0, 1.0, 1.0, 2.0]),
         "name": np.arange(5)}
    for cap in (None, 10**6):
        e = Engine()
        for s in "ABC":
            e.execute(f"CREATE STREAM {s} (x DOUBLE, y DOUBLE, v INT) TIMESTAMP ts")
        e.execute("CREATE TABLE T (x DOUBLE, y DOUBLE, name INT)")
        e.push("T", T)
        e.controls.set("engine", "engine", "max_rows_per_step", cap)
        q3 = e.register("SELECT A.v AS a, B.v AS b, C.v AS c FROM A [RANGE 10], B [RANGE 10], C [RANGE 10] "
                        "WHERE A.x = C.x AND B.y = C.y AND A.y = B.x")
        qs = e.register("SELECT A.v AS a, T.name AS n FROM A [RANGE 10], T WHERE A.x = T.x AND A.y = T.y")
        assert "MJoin" in q3.explain()
        rows = {s: [] for s in "ABC"}
        vid = 0
        for r in range(10):
            for s in "ABC":
                n = int(rng.integers(3, 12))
                x = rng.integers(0, 3, n).astype(float)
                y = rng.integers(0, 3, n).astype(float)
                x[rng.random(n) < 0.15] = np.nan
                y[rng.random(n) < 0.15] = np.nan
                b = {"ts": np.sort(3.0 * r + 3.0 * rng.random(n)), "x": x, "y": y, "v": vid + np.arange(n)}
                vid += n
                rows[s] += _records(b)
                e.push(s, b)
            for s in "ABC":
                e.heartbeat(s, 3.0 * r + 3.0)
            t = q3.clock
            assert t == qs.clock == 3.0 * r + 3.0
            A, B, C = (_live(rows[s], t) for s in "ABC")
            want = sorted((a["v"], b["v"], c["v"]) for a in A for b in B for c in C
                          if _eq(a["x"], c["x"]) and _eq(b["y"], c["y"]) and _eq(a["y"], b["x"]))
            got = q3.snapshot()
            assert sorted(zip(got["a"].tolist(), got["b"].tolist(), got["c"].tolist())) == want
            want = sorted((a["v"], int(n)) for a in A for x, y, n in zip(T["x"], T["y"], T["name"])
                          if _eq(a["x"], x) and _eq(a["y"], y))
            got = qs.snapshot()
            assert sorted(zip(got["a"].tolist(), got["n"].tolist())) == want
        assert q3.state == qs.state == "active"


def test_a_two_column_static_join_is_capped_on_its_true_matches():
    """The StaticJoin counts matches of both columns at once: 200 table rows share a, one has b."""
    for cap, ok in ((100, True), (1, True), (None, True)):
        e = Engine()
        e.execute("CREATE STREAM S (a INT, b INT) TIMESTAMP ts")
        e.execute("CREATE TABLE T (a INT, b INT, name INT)")
        e.push("T", {"a": [1] * 200, "b": list(range(200)), "name": list(range(1000, 1200))})
        e.controls.set("engine", "engine", "max_rows_per_step", cap)
        q = e.register("SELECT S.b AS b, T.name AS n FROM S [RANGE 10], T WHERE S.a = T.a AND S.b = T.b")
        assert "static_join" in [n.kind for n in q.plan.nodes]
        e.push("S", {"ts": [1.0, 1.0], "a": [1, 2], "b": [5, 5]})
        assert q.state == "active", q.failed
        assert q.snapshot()[["b", "n"]].values.tolist() == [[5, 1005]]
    e.controls.set("engine", "engine", "max_rows_per_step", 1)   # two true matches in one step: refused
    e.push("S", {"ts": [2.0, 2.0], "a": [1, 1], "b": [6, 7]})
    assert q.state == "failed" and q.fail_rows == 2, q.failed


_EXPIRY_QUERIES = ["SELECT * FROM A [RANGE 10]", "SELECT DISTINCT k FROM A [RANGE 10]",
                   "SELECT A.k AS k FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k",
                   "SELECT k, COUNT(*) AS c FROM A [RANGE 10] GROUP BY k"]


@pytest.mark.parametrize("sql", _EXPIRY_QUERIES)
def test_expirations_never_count_toward_the_row_cap(sql):
    """A window of 150 rows built 10 at a time under a cap of 100 empties itself in one step (a
    heartbeat past its range): 150 retractions, not refused; the results then equal the brute
    force (nothing live), and a step with 101 new rows is still refused."""
    e = Engine()
    e.execute("CREATE STREAM A (k INT) TIMESTAMP ts")
    e.execute("CREATE STREAM B (k INT) TIMESTAMP ts")
    e.controls.set("engine", "engine", "max_rows_per_step", 100)
    q = e.register(sql)
    for i in range(15):
        for s in "AB":
            e.push(s, {"ts": [i / 10] * 10, "k": list(range(i * 10, i * 10 + 10))})
    assert len(q.snapshot()) == 150            # every k once, in both streams: 150 rows / pairs / groups
    e.heartbeat("A", 50.0)
    e.heartbeat("B", 50.0)
    assert q.state == "active", q.failed
    assert q.clock == 50.0 and len(q.snapshot()) == 0
    assert q.stats()["changes_out"] >= 300     # 150 + and 150 − changes, all recorded
    for s in "AB":
        e.push(s, {"ts": [60.0] * 101, "k": list(range(101))})
    assert q.state == "failed" and q.fail_rows == 101, q.failed


def test_a_join_step_that_expires_many_and_builds_few_is_capped_on_the_new_pairs():
    """One step of A ⋈ B retracts the 61 pairs of the expiring rows and builds 50 new ones (new B
    rows meeting live A rows; brute force): a cap of 50 passes it, 49 refuses it and names 50."""
    A = {"ts": np.arange(150) / 100, "k": np.arange(150)}      # ts 0 .. 1.49
    B2 = {"ts": np.full(60, 10.605), "k": np.arange(100, 160)}
    for cap, ok in ((50, True), (49, False)):
        e = Engine()
        e.execute("CREATE STREAM A (k INT) TIMESTAMP ts")
        e.execute("CREATE STREAM B (k INT) TIMESTAMP ts")
        e.controls.set("engine", "engine", "max_rows_per_step", 10_000)
        q = e.register("SELECT A.k AS a, B.ts AS bt FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k")
        e.push("A", A)
        e.push("B", A)
        e.heartbeat("A", 10.605)
        n_before = len(q.snapshot())
        e.controls.set("engine", "engine", "max_rows_per_step", cap)
        e.push("B", B2)
        allA, allB = _records(A), _records(A) + _records(B2)
        live = sorted((a["k"], b["ts"]) for a in _live(allA, 10.605) for b in _live(allB, 10.605) if a["k"] == b["k"])
        assert n_before - (len(live) - 50) == 61    # the step retracts 61 pairs (k 0..60 expire)
        new = [p for p in live if p[1] == 10.605]
        assert len(new) == 50                    # A k 100..149 are live at 10.605 (ts > 0.605)
        if ok:
            assert q.state == "active", q.failed
            got = q.snapshot()
            assert sorted(zip(got["a"].tolist(), got["bt"].tolist())) == live
        else:
            assert q.state == "failed" and q.fail_rows == 50, q.failed


def test_an_engine_from_a_checkpoint_older_than_the_row_cap_enforces_the_default_it_shows():
    """A checkpoint written before ``max_rows_per_step`` existed has no such runtime entry: the
    control table shows the default (2,000,000) and the queries enforce it (the 9M-pair self-join
    batch is refused, counted before it is built)."""
    from sketchql.engine.checkpoint import dumps, loads
    eng, j, c, sel = _d10_engine()
    bs = _d10_batches()
    for b in bs[:4]:
        eng.push("A", b)
    del eng.runtime["max_rows_per_step"]                   # as in an engine pickled before the knob
    old = loads(dumps(eng))
    assert "max_rows_per_step" not in old.runtime
    shown = old.controls.get("engine", "engine").knobs["max_rows_per_step"].value
    q = {x.id: x for x in old.queries}
    assert shown == 2_000_000 and q[j.id].row_cap() == shown and q[sel.id].row_cap() == shown
    old.push("A", bs[4])                                    # 3000² pairs in one step
    assert q[j.id].state == "failed" and q[j.id].fail_cap == 2_000_000 and q[j.id].fail_rows >= 3000 ** 2
    assert q[c.id].state == "active" and int(q[c.id].snapshot()["n"].iloc[0]) == sum(len(b["ts"]) for b in bs[:5])
