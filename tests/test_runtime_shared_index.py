"""One index per stream attribute, shared by every promising-tuple query on it.

Oracles: the same queries on private indexes configured like the declared one
(engine knob ``share_indexes`` off) with the same seeds and budgets, and the
brute-force window join.
"""
from collections import Counter

import numpy as np
import pytest

from sketchql.engine import Engine

DDL = """
CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts;
CREATE STREAM B (k INT, v DOUBLE) TIMESTAMP ts;
CREATE SUMMARY sa ON A (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4);
CREATE SUMMARY sb ON B (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)
"""
JOIN = ("SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k WITH PREFERENCE {pref} A.k "
        "FADE FACTOR 0.8 WINDOW 30 SECONDS WITHIN {budget} PROBES PER TUPLE")


def _data(seed, duration=80.0, step=0.25, n_items=150):
    """Both streams on one time grid (k * step): every batch (t0, t0 + 5] ends at the same ts on
    both streams, so a query step consumes exactly what the shared index holds."""
    rng = np.random.default_rng(seed)
    ts = np.round(np.arange(1, int(duration / step) + 1) * step, 6)
    z = rng.zipf(1.3, size=(2, ts.shape[0])) % n_items
    return ts, z[0].astype(np.int64), z[1].astype(np.int64)


def _run(share, prefs=("desc",), budget=4, seed=3, data_seed=1):
    ts, ka, kb = _data(data_seed)
    eng = Engine(seed=seed)
    eng.set_control("share_indexes", share)
    eng.execute(DDL)
    qs = [eng.register(JOIN.format(pref=p, budget=budget)) for p in prefs]
    for q in qs:
        q.set_knob("retain_changes", None)
    for t0 in np.arange(0.0, 80.0, 5.0):
        m = (ts > t0) & (ts <= t0 + 5.0 + 1e-9)
        eng.push("A", {"ts": ts[m], "k": ka[m], "v": np.ones(m.sum())})
        eng.push("B", {"ts": ts[m], "k": kb[m], "v": np.ones(m.sum())})
    return eng, qs, (ts, ka, kb)


def _pairs(q):
    r = q.results()
    return Counter(zip(r["k"].tolist(), r["A.ts"].tolist(), r["B.ts"].tolist()))


def _brute(ts, ka, kb, w=30.0):
    m = (ka[:, None] == kb[None, :]) & (np.abs(ts[:, None] - ts[None, :]) < w)
    i, j = np.nonzero(m)
    return Counter(zip(ka[i].tolist(), ts[i].tolist(), ts[j].tolist()))


@pytest.mark.parametrize("pref", ["desc", "weighted", "asc"])
def test_shared_index_equals_private_index(pref):
    eng_s, qs_s, data = _run(True, (pref,))
    eng_p, qs_p, _ = _run(False, (pref,))
    got_s, got_p = _pairs(qs_s[0]), _pairs(qs_p[0])
    brute = _brute(*data)
    assert got_s == got_p
    assert not (got_s - brute) and max(got_s.values(), default=1) == 1
    if pref == "desc":
        assert 0 < sum(got_s.values()) < sum(brute.values())       # the budget is binding
    assert qs_s[0].stats()["promising"]["pt_index"] == "shared"
    assert qs_p[0].stats()["promising"]["pt_index"] == "private"


def test_declared_index_serves_every_query_and_memory_grows_slowly():
    eng, qs, _ = _run(True, ("desc",) * 6)
    decls = {d.name for d in eng.catalog.summaries}
    assert decls == {"sa", "sb"}                                   # no index built besides the declared
    ix = eng.catalog.summary("sa").index["k"]
    for q in qs:
        (node,) = [n for n in q.plan.nodes if n.kind == "pt_join"]
        assert node.op.op.sources[0].ix is ix
        assert "shared sa.k, sb.k" in q.explain()
    shared = sum(d.index[a].nbytes for d in eng.catalog.summaries for a in d.index)
    mapping = sum(n.op.index_nbytes() for q in qs for n in q.plan.nodes if n.kind == "pt_join")
    eng1, qs1, _ = _run(False, ("desc",))
    one = sum(n.op.index_nbytes() for q in qs1 for n in q.plan.nodes if n.kind == "pt_join")
    assert (shared + mapping) / one <= 1.2
    # same queries, private: six times the index memory
    engp, qsp, _ = _run(False, ("desc",) * 6)
    private = sum(n.op.index_nbytes() for q in qsp for n in q.plan.nodes if n.kind == "pt_join")
    assert private > 5 * one


def test_undeclared_index_is_declared_once_and_reused():
    eng = Engine(seed=0)
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    q1 = eng.register("SELECT A.k FROM A, B WHERE A.k = B.k WITH PREFERENCE desc A.k WINDOW 20 SECONDS")
    q2 = eng.register("SELECT A.k FROM A, B WHERE A.k = B.k WITH PREFERENCE weighted A.k WINDOW 20 SECONDS")
    names = sorted(d.name for d in eng.catalog.summaries)
    assert names == ["_auto_A_k", "_auto_B_k"]
    ixa = eng.catalog.summary("_auto_A_k").index["k"]
    for q in (q1, q2):
        (node,) = [n for n in q.plan.nodes if n.kind == "pt_join"]
        assert node.op.op.sources[0].ix is ixa
    eng.push("A", {"ts": [1.0, 2.0], "k": [5, 6]})
    eng.push("B", {"ts": [1.5, 2.0], "k": [5, 7]})
    assert ixa.stats()["tuples"] == 2                               # fed by the engine like a declared one
    assert sorted(q1.snapshot()["k"].tolist()) == [5]
    # the estimate side reads the same index: visible in the control tables as a summary
    assert eng.controls.get("summary", "_auto_A_k.k").stats["tuples"] == 2


@pytest.mark.parametrize("scheduler", ["chain", "round_robin"])
def test_shared_index_join_under_a_bounded_scheduler_is_the_exact_join(scheduler):
    """Under a scheduler with a bounded ``work_per_push`` the index is fed batches ahead of the
    PT step that consumes them; the step must bind only its own arrivals (this raised "the
    scan's arrivals do not match the rows fed").  Full budget: exactly the brute-force join."""
    rng = np.random.default_rng(3)
    n = 1200
    ts = np.sort(rng.uniform(0, 30, n))
    k = rng.integers(0, 30, n)
    side = rng.integers(0, 2, n)
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts; CREATE STREAM B (k INT, v DOUBLE) TIMESTAMP ts")
    eng.set_control("scheduler", scheduler)
    eng.set_control("work_per_push", 5)
    q = eng.register("SELECT A.k, A.ts, B.ts FROM A [RANGE 10], B [RANGE 10] WHERE A.k = B.k "
                     "WITH PREFERENCE desc A.k WITHIN 1000000 PROBES PER TUPLE")
    q.set_knob("retain_changes", None)
    for part in np.array_split(np.arange(n), 12):
        for s, name in ((0, "A"), (1, "B")):
            m = part[side[part] == s]
            eng.push(name, {"ts": ts[m], "k": k[m], "v": ts[m]})
    for name in ("A", "B"):           # the last tuples wait for the other stream's clock
        eng.heartbeat(name, 30.0)
    eng.run()
    assert q.stats()["promising"]["pt_index"] == "shared"
    a, b = side == 0, side == 1
    assert _pairs(q) == _brute_pairs(ts[a], k[a], ts[b], k[b], 10.0)


def _brute_pairs(ta, ka, tb, kb, w):
    m = (ka[:, None] == kb[None, :]) & (np.abs(ta[:, None] - tb[None, :]) < w)
    i, j = np.nonzero(m)
    return Counter(zip(ka[i].tolist(), ta[i].tolist(), tb[j].tolist()))


# -- un-aligned batches: the shared index is fed in lockstep with its PT joins (engine.index_feed) --

def _unaligned(seed=7, duration=60.0, n=(420, 330), n_items=60):
    """Two streams on different times, pushed in different batch spans (A: 1.7 s, B: 3.1 s),
    interleaved by batch start: after most pushes one stream's clock is ahead of the other's."""
    rng = np.random.default_rng(seed)
    out = []
    for m in n:
        ts = np.round(np.sort(rng.uniform(0, duration, m)), 3)
        k = (rng.zipf(1.4, m) % n_items).astype(np.int64)
        out.append((ts, k))
    pushes = []
    for name, (ts, k), span in (("A", out[0], 1.7), ("B", out[1], 3.1)):
        for lo in np.arange(0.0, duration, span):
            m = (ts > lo) & (ts <= lo + span)
            if m.any():
                pushes.append((lo, name, {"ts": ts[m], "k": k[m], "v": np.ones(int(m.sum()))}))
    pushes.sort(key=lambda p: (p[0], p[1]))
    return out, pushes


def _run_unaligned(share, prefs, budget, lockstep=True, seed=3):
    (ta, ka), (tb, kb) = _unaligned()[0]
    _, pushes = _unaligned()
    eng = Engine(seed=seed)
    eng.set_control("share_indexes", share)
    eng.set_control("index_lockstep", lockstep)
    eng.execute(DDL)
    qs = [eng.register(JOIN.format(pref=p, budget=budget)) for p in prefs]
    for q in qs:
        q.set_knob("retain_changes", None)
    ahead = 0
    for _, name, batch in pushes:
        eng.push(name, batch)
        ahead += eng.index_feed.tail_rows(eng.catalog.summary("sa").index["k"]) + \
            eng.index_feed.tail_rows(eng.catalog.summary("sb").index["k"])
    return eng, qs, (ta, ka, tb, kb), ahead


@pytest.mark.parametrize("pref", ["desc", "weighted", "asc"])
def test_unaligned_batches_shared_index_equals_private_index(pref):
    """Streams pushed in different batch sizes, interleaved (one stream's clock ahead of the
    other's after most pushes), under a binding budget: the PT answers on the shared index are
    those on private indexes with the same seed and budget.  (Fed at the push -- engine knob
    ``index_lockstep`` off, the behaviour before -- the shared index held the leading stream's
    tuples beyond the join's clock and the answers differed.)"""
    eng_s, qs_s, (ta, ka, tb, kb), ahead = _run_unaligned(True, (pref, "desc"), 3)
    eng_p, qs_p, _, _ = _run_unaligned(False, (pref, "desc"), 3)
    assert ahead > 0                                    # tuples did wait beyond the join's clock
    brute = _brute_pairs(ta, ka, tb, kb, 30.0)
    for qs, qp in zip(qs_s, qs_p):
        got_s, got_p = _pairs(qs), _pairs(qp)
        assert got_s == got_p
        assert not (got_s - brute)
        assert qs.stats()["promising"]["pt_index"] == "shared"
    got = _pairs(qs_s[1])
    assert 0 < sum(got.values()) < sum(brute.values())                 # the budget is binding
    st = eng_s.index_feed.stats()
    assert st["forced_rows"] == 0 and st["released_rows"] > 0


def test_lockstep_tail_keeps_estimates_and_value_layers_current():
    """While tuples wait in a shared index's tail the estimate endpoint's view counts them (exact
    tail + index) and the value layer read by PT selections already holds them."""
    from sketchql.index.value_layer import layer_of

    eng = Engine(seed=1)
    eng.execute(DDL)
    q = eng.register(JOIN.format(pref="desc", budget=50))
    ixa = eng.catalog.summary("sa").index["k"]
    layer = layer_of(ixa, 5.0).require(keep=100.0)
    eng.push("B", {"ts": [1.0], "k": [1], "v": [0.0]})
    ka = np.array([1, 2, 1, 3, 1, 2])
    ta = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    eng.push("A", {"ts": ta, "k": ka, "v": np.zeros(6)})
    assert eng.index_feed.tail_rows(ixa) == 5                # the join stepped to 1.0 (B's clock)
    assert ixa.stats()["tuples"] == 1
    assert layer.stats()["tuples"] == 6                      # fed at the push
    view = eng.index_feed.reader(ixa)
    for t_from, t_to in ((-np.inf, np.inf), (0.0, 3.0), (2.5, 6.0)):
        m = (ta > t_from) & (ta <= t_to)
        want = [float(((ka == v) & m).sum()) for v in (1, 2, 3, 4)]
        assert view.estimate([1, 2, 3, 4], t_from, t_to).tolist() == want
    # the service's estimate endpoint reads the same view
    from sketchql.service.summaries import estimate as estimate_summary
    out = estimate_summary(view, "sa", [1, 2], None, None)
    assert [e["estimate"] for e in out["estimates"]] == [3.0, 2.0] and out["kind"] == "index"
    eng.push("B", {"ts": [6.0], "k": [2], "v": [0.0]})   # the join passes 6.0: all ingested
    assert eng.index_feed.tail_rows(ixa) == 0 and ixa.stats()["tuples"] == 6
    assert layer.stats()["tuples"] == 6                      # not fed twice
    assert sorted(q.snapshot()["k"].tolist()) == [1, 1, 1, 2, 2]         # the brute-force join


def test_private_equivalence_is_defined_only_where_it_holds():
    """``IndexFeed.private_equivalent``: a filtered join (its private index would hold only its
    own input), another consumer of the index reading other streams, or lockstep off make
    equality with private indexes undefined; the bench counts only the defined ones."""
    eng = Engine(seed=1)
    eng.execute(DDL + "; CREATE STREAM C (k INT, v DOUBLE) TIMESTAMP ts")
    plain = eng.register(JOIN.format(pref="desc", budget=5))
    filt = eng.register(JOIN.format(pref="desc", budget=5).replace("A.k = B.k", "A.k = B.k AND A.v > 0.5"))
    feed = eng.index_feed
    assert feed.private_equivalent(plain) == (True, "")
    ok, why = feed.private_equivalent(filt)
    assert not ok and "filtered" in why
    other = eng.register("SELECT A.k FROM A, C WHERE A.k = C.k WITH PREFERENCE desc A.k WINDOW 30 SECONDS")
    ok, why = feed.private_equivalent(plain)
    assert not ok and f"query {other.id}" in why                  # C's clock paces A's index too
    eng.deregister(other)
    assert feed.private_equivalent(plain) == (True, "")
    eng.set_control("index_lockstep", False)
    assert feed.private_equivalent(plain) == (False, "index_lockstep is off")


def _run_unaligned_sched(share, pref, scheduler):
    _, pushes = _unaligned()
    eng = Engine(seed=3)
    eng.set_control("share_indexes", share)
    eng.execute(DDL)
    eng.set_control("scheduler", scheduler)
    eng.set_control("work_per_push", 40)
    qs = [eng.register(JOIN.format(pref=p, budget=3)) for p in (pref, "desc")]
    for q in qs:
        q.set_knob("retain_changes", None)
    for _, name, batch in pushes:
        eng.push(name, batch)
    eng.run()
    return eng, qs


@pytest.mark.parametrize("scheduler", ["round_robin", "chain"])
def test_unaligned_batches_under_a_bounded_scheduler(scheduler):
    """Under a bounded scheduler the consumers of one index may step out of time order (Chain
    runs one query's older step after another's newer one): such a step finds the index ahead
    (``pt_index_steps_ahead``) and equality with private indexes is then not defined.  Every
    query for which ``private_equivalent`` says it is defined has the private-index answers.
    Round robin keeps the steps closer to time order than Chain: fewer steps find the index
    ahead, and at least one query stays defined, so the equality is checked (whether a given
    step runs ahead depends on each step's work, which the scan costs change: with the
    one-compare run end of PT-Join's cell scans one desc step here finds the index ahead)."""
    eng_s, qs_s = _run_unaligned_sched(True, "weighted", scheduler)
    _, qs_p = _run_unaligned_sched(False, "weighted", scheduler)
    defined = [eng_s.index_feed.private_equivalent(q)[0] for q in qs_s]
    for q, qp, ok in zip(qs_s, qs_p, defined):
        assert ok == (q.stats()["promising"]["pt_index_steps_ahead"] == 0)
        if ok:
            assert _pairs(q) == _pairs(qp)
    if scheduler == "round_robin":
        assert any(defined)
        _, qs_c = _run_unaligned_sched(True, "weighted", "chain")
        ahead = lambda qs: sum(q.stats()["promising"]["pt_index_steps_ahead"] for q in qs)
        assert ahead(qs_s) < ahead(qs_c)


def test_estimate_endpoint_counts_the_tuples_waiting_for_the_joins():
    """GET /summaries/{name}/estimate while stream A is ahead of B (its newest tuples wait in the
    shared index's tail): the answer covers every pushed tuple -- the same as an index fed at
    the push (engine knob index_lockstep off, the behaviour before) -- and the error bound is
    the index's."""
    from test_service_helpers import client

    rng = np.random.default_rng(4)
    ka = (rng.zipf(1.5, 600) % 40).astype(np.int64)
    ta = np.round(np.sort(rng.uniform(0, 60, 600)), 3)
    answers = []
    for lockstep in (True, False):
        c = client()
        eng = c.app.state.sketchql.engine
        eng.set_control("index_lockstep", lockstep)
        assert c.post("/streams", json={"sql": DDL}).status_code in (200, 201)
        assert c.post("/queries", json={"sql": JOIN.format(pref="desc", budget=5)}).status_code == 201
        c.post("/streams/B/batches", json={"columns": {"k": [1], "v": [0.0], "ts": [20.0]}})
        r = c.post("/streams/A/batches", json={"columns": {"k": ka.tolist(), "v": [0.0] * 600, "ts": ta.tolist()}})
        assert r.status_code == 200, r.text
        params = [("value", str(v)) for v in (0, 1, 2, 7)] + [("t_from", "0"), ("t_to", "60")]
        r = c.get("/summaries/sa/estimate", params=params)
        assert r.status_code == 200, r.text
        ix = eng.catalog.summary("sa").index["k"]
        waiting = eng.index_feed.tail_rows(ix)
        assert (waiting > 0) == lockstep                  # A's tuples after 20.0 wait for B's clock
        body = r.json()
        assert body["kind"] == "index"
        answers.append(([e["estimate"] for e in body["estimates"]], [e["error_bound"] for e in body["estimates"]]))
    (est_l, _), (est_p, _) = answers
    assert est_l == est_p
