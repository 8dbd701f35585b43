"""An operator error under the global scheduler fails one query, exactly as inline (issue 16 follow-up).

Inline, an error raised while one query is stepped fails that query only (``Engine._dispatch``).  Under a
scheduler strategy the step runs later, in a scheduler turn; the same contract must hold there: the
push / heartbeat / ``run`` does not raise, the failing query (every query sharing the failing operator)
goes to 'failed' naming the error, its queues are dropped, and nothing half-made remains.

Oracles, per strategy and for ``inline`` alike:

* a *twin* engine where the failing query was never registered: every other query's results equal
  the twin's (also after a checkpoint / restore of the faulted engine and more pushes);
* the *inline* engine with the same fault: the failed query's results, clock and error are the
  inline ones (the scheduler completes every step older than the failing one first, as inline had);
* the unfaulted engine: the failed query's results equal its snapshot at the last instant before.

The fault is the monkeypatched operator step of the inline tests (``test_engine_lateness``,
``test_engine_guarded_dispatch``): an operator's (or the result log's) method raising from a time on.
"""
import numpy as np
import pytest

from sketchql.engine import Engine
from sketchql.engine.checkpoint import dumps, loads
from sketchql.engine.sharing import SharedConsumer

STRATEGIES = ["inline", "round_robin", "fifo", "greedy", "chain"]

SQLS = ["SELECT COUNT(*) AS n FROM S [RANGE 5]",
        "SELECT k, ts FROM S [RANGE 6] WHERE k > 0",
        "SELECT S.k, S.ts, T.ts AS tts FROM S [RANGE 5], T [RANGE 5] WHERE S.k = T.k",
        "SELECT SUM(k) AS s FROM S [RANGE 7]",
        "SELECT k FROM T [RANGE 5]"]
J, C = SQLS[2], SQLS[0]
FAIL_AT = 5.0


def _pushes(seed=3, n=11, t0=0.0):
    rng = np.random.default_rng(seed)
    out = []
    for t in range(1, n + 1):
        for s in "ST":
            m = int(rng.integers(1, 4))
            ts = np.sort(t0 + t + rng.uniform(0.0, 0.9, m)).round(3)
            out.append((s, ts.tolist(), rng.integers(0, 3, m).tolist()))
    return out


def _engine(strategy, sqls, work=None, quantum=2.0):
    e = Engine()
    e.execute("CREATE STREAM S (k INT) TIMESTAMP ts; CREATE STREAM T (k INT) TIMESTAMP ts")
    if strategy != "inline":
        e.set_control("scheduler", strategy)
        e.set_control("quantum", quantum)
        e.set_control("work_per_push", work)
    qs = [e.register(s) for s in sqls]
    for q in qs:
        q.set_knob("retain_changes", None)
    return e, qs


def _feed(engines, pushes, end=None):
    for s, ts, k in pushes:
        for e in engines:
            e.push(s, {"ts": ts, "k": k})
    if end is not None:
        for e in engines:
            e.heartbeat("S", end)
            e.heartbeat("T", end)
            e.run()


def _rows(df):
    """The rows as sorted tuples of exact reprs (an empty window's SUM is NaN: equal to itself here)."""
    return sorted(tuple(repr(x) for x in r) for r in df.values.tolist())


def _fault(obj, name, raised, exc=RuntimeError("forced failure"), at=FAIL_AT, after=False):
    """``obj.name`` raises ``exc`` once, at its first call at time >= ``at`` (``after``: once it ran)."""
    real = getattr(obj, name)

    def boom(*a):
        now = a[0] if not hasattr(a[0], "at") else (float(a[0].at.max()) if len(a[0]) else -np.inf)
        if now >= at and not raised:
            raised.append(now)
            if after:
                real(*a)
            raise exc
        return real(*a)
    setattr(obj, name, boom)


def _target(q, where):
    if where == "record":
        return q, "_record"
    if where == "root":
        return q.plan.root.op, "step"
    node = next(n for n in reversed(q.plan.nodes) if n.kind == "scan")
    return node.op, "step"


def _no_queues(q):
    # (not stats()["pending_tuples"]: it counts a released shared store's later rows, see the report)
    assert not any(q._pending.values())
    if q._runner is not None:
        assert q._runner.queued() == 0


@pytest.mark.parametrize("work", [None, 3.0])
@pytest.mark.parametrize("where", ["root", "leaf", "record"])
@pytest.mark.parametrize("victim", [2] + [pytest.param(i, marks=pytest.mark.slow) for i in (0, 1, 3)])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_an_operator_error_fails_that_query_only(strategy, victim, where, work):
    if strategy == "inline" and work is not None:
        pytest.skip("work_per_push is a scheduler knob")
    others = [s for i, s in enumerate(SQLS) if i != victim]
    eng, qs = _engine(strategy, SQLS, work)
    twin, ts_ = _engine(strategy, others, work)         # the failing query never registered
    inl, iq = _engine("inline", SQLS)                   # the same fault, inline
    ref, rq = _engine("inline", SQLS)                   # no fault
    raised, iraised = [], []
    _fault(*_target(qs[victim], where), raised)
    _fault(*_target(iq[victim], where), iraised)
    pushes = _pushes()
    _feed([eng, twin, inl, ref], pushes[:16])           # no call raises
    _feed([eng, twin, inl, ref], pushes[16:], end=30.0)
    v, iv = qs[victim], iq[victim]
    assert raised and raised == iraised
    assert v.state == "failed" and iv.state == "failed"
    assert "RuntimeError in its plan: forced failure" in v.failed
    assert "RuntimeError: forced failure" in v.fail_traceback
    # the failed query: what inline keeps, at the same instant, with the same message
    assert v.failed == iv.failed and v.clock == iv.clock < FAIL_AT + 1
    assert _rows(v.results()) == _rows(iv.results())
    assert _rows(v.snapshot()) == _rows(rq[victim].snapshot(v.clock))
    assert v._instants == iv._instants
    _no_queues(v)
    # every other query: as if the failing one had never been registered
    mine = [q for i, q in enumerate(qs) if i != victim]
    for q, t in zip(mine, ts_):
        assert q.state == "active"
        assert _rows(q.results()) == _rows(t.results())
    if eng.scheduler is not None:
        assert eng.scheduler.queued() == 0
    # nothing half-made: a checkpoint restores, and it and the engine go on like the twin
    eng2 = loads(dumps(eng))
    more = _pushes(seed=9, n=6, t0=30.0)
    _feed([eng, eng2, twin], more, end=60.0)
    for e in (eng, eng2):
        vv = e.queries[victim]
        assert vv.state == "failed" and vv.clock == iv.clock
        _no_queues(vv)
        for q, t in zip([q for i, q in enumerate(e.queries) if i != victim], ts_):
            assert q.state == "active" and _rows(q.results()) == _rows(t.results())


@pytest.mark.parametrize("work", [None, 0.0])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_shared_operator_that_fails_fails_every_sharer(strategy, work):
    """Two identical join queries share the join; it steps, then raises: both fail (the second at the
    shared operator's broken step, not stepping it again), with the inline results; the count query
    equals an engine without the joins."""
    if strategy == "inline" and work is not None:
        pytest.skip("work_per_push is a scheduler knob")
    eng, (qa, qb, qc) = _engine(strategy, [J, J, C], work)
    twin, (tc,) = _engine(strategy, [C], work)
    inl, (ia, ib, _) = _engine("inline", [J, J, C])
    for qs, raised in (((qa, qb), []), ((ia, ib), [])):
        shared = [n.op for n in qs[0].plan.nodes if isinstance(n.op, SharedConsumer) and n.kind == "join"][0].shared
        assert shared is [n.op for n in qs[1].plan.nodes if n.kind == "join"][0].shared
        _fault(shared.op, "step", raised, after=True)
    _feed([eng, twin, inl], _pushes(), end=30.0)
    assert qa.state == "failed" and qb.state == "failed"
    assert "forced failure" in qa.failed and "shared operator" in qb.failed
    for q, i in ((qa, ia), (qb, ib)):
        assert q.failed == i.failed and q.clock == i.clock
        assert _rows(q.results()) == _rows(i.results())
        _no_queues(q)
    assert qc.state == "active" and _rows(qc.results()) == _rows(tc.results())
    eng2 = loads(dumps(eng))
    more = _pushes(seed=4, n=5, t0=30.0)
    _feed([eng, eng2, twin], more, end=60.0)
    for e in (eng, eng2):
        assert [q.state for q in e.queries] == ["failed", "failed", "active"]
        assert _rows(e.queries[2].results()) == _rows(tc.results())


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_the_earliest_failure_is_the_one_reported(strategy):
    """Both scans of the join raise: the first in task order (the one every strategy runs first at
    equal stamps) at a later instant than the second.  With everything queued (``work_per_push`` 0)
    the first scan reaches its failure first; the query still fails at the second's earlier instant,
    as inline, with the inline results."""
    def build(s):
        e, (j, c) = _engine(s, [J, C], 0.0 if s != "inline" else None, quantum=1e9)
        first, second = [n.op for n in j.plan.nodes if n.kind == "scan"]
        late, early = [], []
        _fault(first, "step", late, exc=KeyError("late one"), at=8.0)
        _fault(second, "step", early, exc=ValueError("early one"), at=4.0)
        return e, j, c, late, early
    eng, j, c, late, early = build(strategy)
    inl, ij, ic, _, _ = build("inline")
    twin, (tc,) = _engine(strategy, [C], 0.0 if strategy != "inline" else None)
    _feed([eng, inl, twin], _pushes())
    assert eng.run() >= 0 and twin.run() >= 0
    assert early and 4.0 <= early[0] < 5.0
    if strategy != "inline":
        assert late, "the later failure was not reached first: the test does not test the order"
    assert j.state == "failed" and "ValueError in its plan: early one" in j.failed
    assert j.failed == ij.failed and j.clock == ij.clock < 4.0
    assert _rows(j.results()) == _rows(ij.results())
    assert _rows(c.results()) == _rows(tc.results())
    _no_queues(j)


@pytest.mark.parametrize("strategy", STRATEGIES[1:])
def test_max_rows_per_step_under_a_scheduler_keeps_the_inline_results(strategy):
    """The row cap's failure (StepRowLimit) completes the older queued steps first too: with everything
    queued and whole turns (a scan may run all its steps before the join runs one), the failed join
    keeps what the inline engine keeps."""
    out = {}
    for s in ("inline", strategy):
        e, (j, c) = _engine(s, [J, C], 0.0 if s != "inline" else None, quantum=1e9)
        j.set_knob("max_rows_per_step", 6)
        _feed([e], _pushes(seed=5), end=30.0)
        out[s] = (j.state, j.clock, j.failed, _rows(j.results()), _rows(c.results()), j._instants)
    assert out[strategy][0] == "failed" and out[strategy] == out["inline"]


PT = ("SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k WITH PREFERENCE {} A.k "
      "FADE FACTOR 0.8 WINDOW 30 SECONDS WITHIN 4 PROBES PER TUPLE")
PT_DDL = """CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts; CREATE STREAM B (k INT, v DOUBLE) TIMESTAMP ts;
CREATE SUMMARY sa ON A (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4);
CREATE SUMMARY sb ON B (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)"""


def _pt_engine(strategy, sqls, work):
    e = Engine(seed=3)
    e.execute(PT_DDL)
    if strategy != "inline":
        e.set_control("scheduler", strategy)
        e.set_control("quantum", 16)
        e.set_control("work_per_push", work)
    qs = [e.register(s) for s in sqls]
    for q in qs:
        q.set_knob("retain_changes", None)
    return e, qs


def _pt_feed(engines, t_from, t_to):
    rng = np.random.default_rng(1)
    ts = np.round(np.arange(1, 321) * 0.25, 6)
    ka, kb = rng.zipf(1.3, size=(2, ts.shape[0])) % 150
    for t0 in np.arange(t_from, t_to, 5.0):
        m = (ts > t0) & (ts <= t0 + 5.0 + 1e-9)
        for e in engines:
            e.push("A", {"ts": ts[m], "k": ka[m], "v": np.ones(m.sum())})
            e.push("B", {"ts": ts[m], "k": kb[m], "v": np.ones(m.sum())})
    for e in engines:
        e.run()


@pytest.mark.parametrize("strategy, work", [("inline", None), ("round_robin", 0.0), ("chain", 40.0)] + [
    pytest.param(s, w, marks=pytest.mark.slow) for s in STRATEGIES[1:] for w in (None, 0.0, 40.0)
    if (s, w) not in (("round_robin", 0.0), ("chain", 40.0))])
def test_a_failing_pt_join_on_a_shared_index_fails_alone(strategy, work):
    """A promising-tuple join fails in its step; another PT join probing the same shared indexes and a
    count go on exactly as in an engine without the failing join (also after a checkpoint / restore);
    the failed join keeps the inline results.  (No heartbeat: the budget a heartbeat gives the PT joins
    for a silent gap reaches them before their queued steps under a bounded scheduler, so with one their
    output depends on when their steps run even without a failure: 1051 vs 1190 pairs for one join.)"""
    sqls = [PT.format("desc"), PT.format("weighted"), "SELECT COUNT(*) AS n FROM A [RANGE 10]"]
    eng, qs = _pt_engine(strategy, sqls, work)
    twin, tq = _pt_engine(strategy, sqls[1:], work)
    inl, iq = _pt_engine("inline", sqls, None)
    for q in (qs[0], iq[0]):
        (node,) = [n for n in q.plan.nodes if n.kind == "pt_join"]
        _fault(node.op, "step", [], at=20.0)
    _pt_feed([eng, twin, inl], 0.0, 60.0)
    eng2 = loads(dumps(eng))
    _pt_feed([eng, eng2, twin, inl], 60.0, 80.0)
    v = qs[0]
    assert v.state == "failed" and "RuntimeError in its plan: forced failure" in v.failed
    assert v.failed == iq[0].failed and v.clock == iq[0].clock < 20.0
    assert _rows(v.results()) == _rows(iq[0].results())
    for e in (eng, eng2):
        assert e.queries[0].state == "failed"
        _no_queues(e.queries[0])
    assert len(tq[0].results()) > 100 and len(tq[1].results()) > 10
    ahead = [getattr(n.op, "steps_index_ahead", 0) for q in eng.queries[1:] for n in q.plan.nodes
             if n.kind == "pt_join"]
    if any(ahead):
        # the documented limit of the lockstep feed (engine.index_feed, private_equivalent): a scheduler
        # running one PT join's older step after another's newer one (greedy / chain with queued steps)
        # lets the shared index be ahead for it, so its answer depends on the other joins -- with no fault
        # too (weighted 1096 vs 1051 pairs inline, desc 1387 vs 1349; equal at full budget)
        pytest.xfail(f"shared index ahead of {ahead} PT steps: the twin is not an oracle here")
    for e in (eng, eng2):
        for q, t in zip(e.queries[1:], tq):
            assert q.state == "active" and _rows(q.results()) == _rows(t.results())


@pytest.mark.parametrize("strategy, work", [(s, None) for s in STRATEGIES] + [("round_robin", 0.0)])
def test_an_error_in_a_pt_join_s_idle_probing_fails_that_query_only(strategy, work):
    """A heartbeat over a silent gap gives the PT joins idle budget (operator code outside any step):
    one join's idle raises.  The heartbeat does not raise; that join fails at its clock with every step
    up to it kept (the inline results); the other PT join and the count equal a twin without it; the
    next pushes and a checkpoint / restore work."""
    sqls = [PT.format("desc"), PT.format("weighted"), "SELECT COUNT(*) AS n FROM A [RANGE 10]"]
    eng, qs = _pt_engine(strategy, sqls, work)
    twin, tq = _pt_engine(strategy, sqls[1:], work)
    inl, iq = _pt_engine("inline", sqls, None)
    for q in (qs[0], iq[0]):
        (node,) = [n for n in q.plan.nodes if n.kind == "pt_join"]
        _fault(node.op, "idle", [], exc=RuntimeError("idle broke"), at=-np.inf)
    _pt_feed([eng, twin, inl], 0.0, 40.0)
    for e in (eng, twin, inl):
        e.heartbeat("A", 45.0)                 # A's silent gap: idle budget to the joins reading A
    v, iv = qs[0], iq[0]
    assert v.state == "failed" and "RuntimeError in its plan: idle broke" in v.failed
    assert v.failed == iv.failed and v.clock == iv.clock == 40.0
    assert _rows(v.results()) == _rows(iv.results()) and len(v.results()) > 100
    assert v._instants == iv._instants and v._instants[-1] == 40.0
    _no_queues(v)
    eng2 = loads(dumps(eng))
    _pt_feed([eng, eng2, twin], 45.0, 80.0)
    for e in (eng, eng2):
        assert e.queries[0].state == "failed" and e.queries[0].clock == 40.0
        for q, t in zip(e.queries[1:], tq):
            assert q.state == "active" and _rows(q.results()) == _rows(t.results())


@pytest.mark.parametrize("strategy, work", [("inline", None), ("fifo", None), ("round_robin", None),
                                            ("chain", 0.0), ("round_robin", 0.0)])
def test_an_error_in_the_audit_shadow_keeps_the_steps_before(strategy, work):
    """The audit shadow of an approximate query steps when the query is fed (not in a scheduler turn);
    it steps after the plan, so its error fails the registered query with every step up to that instant
    kept (the instant's rows were recorded: its clock stays there, no row lies past it) -- under a
    scheduler the queued steps up to the clock are completed first, not dropped -- and the count equals
    a twin.  (Approximate answers under a scheduler with queued steps differ from inline even without a
    fault -- ON MISS decisions are taken at the feed, 125 vs 111 rows here -- so the inline oracle is
    used where no work is left queued.)"""
    sql = "SELECT AVG(k) AS a FROM S [RANGE 5] WITH ERROR 0.1 CONFIDENCE 0.9 ON MISS EXACT"
    eng, (q, c) = _engine(strategy, [sql, C], work, quantum=1e9)
    inl, (iq, _) = _engine("inline", [sql, C], None)
    twin, (tc,) = _engine(strategy, [C], work)
    rng = np.random.default_rng(0)
    pushes = [("S", [t * 0.1], [int(rng.integers(0, 100))]) for t in range(1, 400)]
    k = 0
    while k < len(pushes) and (q._precision.shadow is None or iq._precision.shadow is None):
        _feed([eng, inl, twin], pushes[k:k + 1])
        k += 1
    assert q._precision.shadow is not None and k < 300
    for x in (q, iq):
        _fault(x._precision.shadow.plan.root.op, "step", [], exc=RuntimeError("shadow broke"),
               at=pushes[k + 5][1][0])
    _feed([eng, inl, twin], pushes[k:k + 40])
    for e in (eng, twin):
        e.run()
    assert q.state == "failed" and "shadow broke" in q.failed and q.failed == iq.failed
    assert q.clock == iq.clock
    got = q.results()
    assert len(got) and (got["__at"] <= q.clock).all()
    assert (iq.results()["__at"] <= iq.clock).all() and iq.clock == pushes[k + 5][1][0]
    if work is None:
        assert _rows(got) == _rows(iq.results())
    _no_queues(q)
    assert c.state == "active" and _rows(c.results()) == _rows(tc.results())
