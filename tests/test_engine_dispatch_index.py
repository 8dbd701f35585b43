"""A push touches only the queries of its stream; the allocator's signature is versioned.

Oracle: the same workload run through the previous, exhaustive code paths (every query walked on
every push, the allocator's signature rebuilt on every tick, the catalog filtered for the stream's
summaries, every stream's knobs and every shared store scanned), installed here by monkeypatching
-- the results, the allocator's decisions and every query's statistics must be identical.
"""
from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from sketchql.engine import Engine
from sketchql.engine import facade as F
from sketchql.engine.allocator_runtime import EngineAllocator
from sketchql.engine.checkpoint import dumps, loads
from sketchql.engine.query import Query
from sketchql.engine.sharing import Sharing, without_pi

DDL = """
CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts;
CREATE STREAM B (k INT, v DOUBLE) TIMESTAMP ts;
CREATE STREAM C (k INT, v DOUBLE) TIMESTAMP ts SLACK 1 SECONDS;
CREATE STREAM Store1 (ItemNo INT, price DOUBLE) TIMESTAMP ts;
CREATE STREAM Store2 (ItemNo INT, price DOUBLE) TIMESTAMP ts;
CREATE SUMMARY s1 ON Store1 (ItemNo) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4);
CREATE SUMMARY s2 ON Store2 (ItemNo) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4);
CREATE SUMMARY sa ON A (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)
"""
QUERIES = [
    "SELECT COUNT(*) AS n, SUM(v) AS s FROM A [RANGE 10 SECONDS SLIDE 1 SECONDS]",
    "SELECT A.k, A.v, B.v FROM A [RANGE 5], B [RANGE 5] WHERE A.k = B.k",
    "SELECT k, AVG(v) AS a FROM B [RANGE 20] GROUP BY k WITH ERROR 0.05 CONFIDENCE 0.95",
    ("SELECT S1.ItemNo, S1.ts, S2.ts FROM Store1 S1, Store2 S2 WHERE S1.ItemNo = S2.ItemNo "
     "WITH PREFERENCE desc SUMMARY.Estimate.Count(S1.ItemNo), SUMMARY.Estimate.Count(S2.ItemNo) "
     "FADE FACTOR 0.8 WINDOW 1 MINUTE WITHIN 20 PROBES PER TUPLE"),
    "SELECT k, v FROM C [RANGE 5] WHERE v > 0.5",
    "SELECT B.k, C.v FROM B [RANGE 4], C [RANGE 4] WHERE B.k = C.k",
    "SELECT k, SUM(v) AS s FROM A [RANGE 10] GROUP BY k WITH ERROR 0.1 CONFIDENCE 0.9",
]
LATE = "SELECT k, COUNT(*) AS n FROM A [RANGE 6] GROUP BY k"


# -- the previous code paths (the oracle) ------------------------------------------------------
def _old_dispatch(self, h, b, rows=None):
    key = h.name.lower()
    for q in self._queries.values():
        if not q.active:
            continue
        by_stream = q.stream_sources()
        srcs = by_stream.get(key)
        if not srcs:
            continue
        if b is not None:
            for s in srcs:
                q._offer(s.index, b, rows)
        target = min(self._streams[n].clock for n in by_stream)
        if np.isfinite(target):
            q._advance(target)


def _old_feed(self, stream, b):
    b = without_pi(b)
    for st in self.stores.values():
        if st.stream.lower() == stream.lower() and st.consumers:
            st.feed(b)


def _install_old_paths(mp):
    orig_tracked = EngineAllocator._tracked

    def tracked(self):
        self._tracked_cache = None
        return orig_tracked(self)
    mp.setattr(F.Engine, "_dispatch", _old_dispatch)
    mp.setattr(F._Queries, "on_stream", lambda self, name: tuple(
        q for q in self.values() if any(s.schema.name.lower() == name for s in q.bound.streams)))
    mp.setattr(F.Engine, "_summaries_on", lambda self, name: self.catalog.summaries_on(name))
    mp.setattr(F.Engine, "_any_timeout", property(
        lambda self: any(x._knobs.get("slack_timeout") is not None for x in self._streams.values())))
    mp.setattr(EngineAllocator, "_state_key", lambda self: (object(),))    # never equal: full signature
    mp.setattr(EngineAllocator, "_tracked", tracked)
    mp.setattr(Sharing, "feed", _old_feed)


# -- the workload ------------------------------------------------------------------------------
def _batch(rng, t0, n, cols=("k", "v"), kmax=8):
    ts = np.sort(t0 + rng.random(n))
    return {"ts": ts, cols[0]: rng.integers(0, kmax, n), cols[1]: rng.random(n)}


def _workload(steps=30, restore_at=None):
    rng = np.random.default_rng(5)
    eng = Engine(seed=3)
    eng.execute(DDL)
    eng.controls.set("stream", "C", "slack_timeout", 2.0)
    qs = [eng.register(sql) for sql in QUERIES]
    for q in qs:
        q.set_knob("retain_changes", None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for step in range(steps):
            t = float(step)
            if step == restore_at:
                eng = loads(dumps(eng))
                qs = [eng._queries.get(q.id, q) for q in qs]
            eng.push("A", _batch(rng, t, 30))
            eng.push("B", _batch(rng, t, 25))
            c = _batch(rng, t, 10)
            c["ts"] = c["ts"] - rng.random(10) * 0.8          # out of order (slack buffer)
            eng.push("C", {k: v[np.argsort(rng.random(10))] for k, v in c.items()})
            for s in ("Store1", "Store2"):
                eng.push(s, _batch(rng, t, 40, cols=("ItemNo", "price"), kmax=60))
            if step % 7 == 3:
                eng.heartbeat("B", t + 1.0)
            if step == 4:
                qs[1].set_knob("weight", 3.0)
            if step == 6:
                eng.budgets["memory_bytes"] = 60_000
            if step == 8:
                qs[2].set_knob("active", False)
            if step == 9:
                qs[6]._precision.set_knob("sample_rate", 0.5)
            if step == 11:
                qs.append(eng.register(LATE))
                qs[-1].set_knob("retain_changes", None)
            if step == 12:
                eng.deregister(qs[0])
            if step == 13:
                qs[2].set_knob("active", True)
                qs[3].set_knob("budget", 10)
            if step == 15:
                eng.execute(f"DROP QUERY q{qs[4].id}")
            if step == 17:
                qs[6]._precision.set_audit_share(0.5)
                eng.set_control("cpu_units_per_s", 1e6)
            if step == 20:
                qs[6].set_knob("error", 0.2)
        for s in ("A", "B", "C", "Store1", "Store2"):
            eng.heartbeat(s, steps + 30.0)
    return eng, qs


def _outcome(eng, qs):
    out = {}
    for q in qs:
        out[q.id] = (q.results(), q.stats(), q.clock, q.active)
    dec = eng.allocator.decision()
    return out, dec, list(eng.allocator.history), eng.allocator.replans


def _same(a, b):
    oa, da, ha, ra = a
    ob, db, hb, rb = b
    assert oa.keys() == ob.keys()
    for qid in oa:
        pd.testing.assert_frame_equal(oa[qid][0], ob[qid][0], check_exact=True)
        assert oa[qid][1:] == ob[qid][1:], qid
    assert (da, ha, ra) == (db, hb, rb)


@pytest.fixture(scope="module")
def old_run():
    mp = pytest.MonkeyPatch()
    try:
        _install_old_paths(mp)
        return _outcome(*_workload())
    finally:
        mp.undo()


def test_mixed_workload_matches_the_exhaustive_paths(old_run):
    new = _outcome(*_workload())
    assert old_run[3] >= 3                    # the allocator did re-plan along the way
    assert len(old_run[0]) == len(QUERIES) + 1
    assert any(len(r[0]) for r in old_run[0].values())
    _same(old_run, new)


def test_mixed_workload_through_a_checkpoint_matches(old_run):
    _same(old_run, _outcome(*_workload(restore_at=10)))


# -- a push touches only its stream's queries ------------------------------------------------------
def _many(n):
    eng = Engine(seed=7)
    for i in range(n):
        eng.execute(f"CREATE STREAM S{i} (k INT, v DOUBLE) TIMESTAMP ts; "
                    f"CREATE SUMMARY S{i}_k ON S{i} (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)")
        eng.register(f"SELECT COUNT(*) AS n, SUM(v) AS sv FROM S{i} [RANGE 10 SECONDS SLIDE 1 SECONDS]")
        eng.push(f"S{i}", {"ts": np.array([0.0]), "k": np.array([1]), "v": np.array([1.0])})
    return eng


def test_push_touches_only_the_queries_of_its_stream(monkeypatch):
    eng = _many(30)
    q0 = eng.queries[0]
    for t in (1.0, 2.0):            # settle: first plans, statistics
        eng.push("S0", {"ts": np.array([t]), "k": np.array([1]), "v": np.array([1.0])})
    calls = {"sources": [], "signature": 0, "catalog": 0}
    real_sources = Query.stream_sources
    monkeypatch.setattr(Query, "stream_sources", lambda self: calls["sources"].append(self.id) or real_sources(self))
    real_sig = EngineAllocator._signature
    monkeypatch.setattr(EngineAllocator, "_signature", lambda self: calls.__setitem__(
        "signature", calls["signature"] + 1) or real_sig(self))
    real_cat = type(eng.catalog).summaries_on
    monkeypatch.setattr(type(eng.catalog), "summaries_on", lambda self, *a: calls.__setitem__(
        "catalog", calls["catalog"] + 1) or real_cat(self, *a))
    for i in range(50):
        eng.push("S0", {"ts": np.array([3.0 + i]), "k": np.array([i % 5]), "v": np.array([1.0])})
    assert set(calls["sources"]) == {q0.id}
    assert calls["signature"] == 0 and calls["catalog"] == 0
    # heartbeats too: no stream has a slack timeout, so no walk over the streams to release nothing
    walks = []
    real_to = F.Engine._slack_timeouts
    monkeypatch.setattr(F.Engine, "_slack_timeouts", lambda self, *a, **k: walks.append(1) or real_to(self, *a, **k))
    for i in range(5):
        eng.heartbeat("S0", 53.0 + i)
    assert set(calls["sources"]) == {q0.id} and calls["signature"] == 0 and not walks
    # a change the allocator watches is seen at the next push (once)
    eng.queries[5].set_knob("weight", 2.0)
    eng.push("S0", {"ts": np.array([60.0]), "k": np.array([1]), "v": np.array([1.0])})
    eng.push("S0", {"ts": np.array([61.0]), "k": np.array([1]), "v": np.array([1.0])})
    assert calls["signature"] == 1
    assert eng.allocator._sig == real_sig(eng.allocator)


def test_every_signature_change_moves_the_state_key():
    """Whatever changes the allocator's full signature also moves its O(1) key (else a re-plan
    would be missed); checked after each kind of change."""
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM S (g INT, v DOUBLE) TIMESTAMP ts; CREATE STREAM T (g INT, v DOUBLE) TIMESTAMP ts")
    al = eng.allocator
    q = eng.register("SELECT g, AVG(v) AS a FROM S [RANGE 10] GROUP BY g WITH ERROR 0.05 CONFIDENCE 0.95")
    q2 = eng.register("SELECT g, SUM(v) AS s FROM T [RANGE 10] GROUP BY g")
    changes = [
        lambda: q.set_knob("weight", 2.0), lambda: q.set_knob("active", False), lambda: q.set_knob("active", True),
        lambda: q.set_knob("error", 0.1), lambda: q.set_knob("confidence", 0.9), lambda: q.set_knob("on_miss", "exact"),
        lambda: q.set_knob("budget", 5), lambda: setattr(q, "weight", 0.5), lambda: setattr(q, "active", False),
        lambda: q._precision.set_knob("sample_rate", 0.3), lambda: q._precision.set_knob("sample_rate", None),
        lambda: q._precision.set_audit_share(0.2), lambda: eng.budgets.__setitem__("memory_bytes", 1e6),
        lambda: eng.set_control("cpu_units_per_s", 10.0),
        lambda: eng.register("SELECT g FROM T [RANGE 3]"), lambda: eng.deregister(q2),
        lambda: eng.execute(f"DROP QUERY q{eng.queries[-1].id}"),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ch in changes:
            sig, key = al._signature(), al._state_key()
            ch()
            assert al._signature() != sig, ch          # each change is one the signature sees
            assert al._state_key() != key, ch


def test_index_follows_register_delete_drop_and_restore():
    eng = Engine()
    eng.execute("CREATE STREAM S (k INT) TIMESTAMP ts; CREATE STREAM T (k INT) TIMESTAMP ts")
    a = eng.register("SELECT k FROM S [RANGE 5]")
    b = eng.register("SELECT S.k FROM S [RANGE 5], T [RANGE 5] WHERE S.k = T.k")
    c = eng.register("SELECT k FROM T [RANGE 5]")

    def ids(e, s):
        return [q.id for q in e._queries.on_stream(s)]
    assert ids(eng, "s") == [a.id, b.id] and ids(eng, "t") == [b.id, c.id]
    eng.deregister(a)
    assert ids(eng, "s") == [b.id]
    eng.execute(f"DROP QUERY q{b.id}")
    assert ids(eng, "s") == [] and ids(eng, "t") == [c.id]
    d = eng.register("SELECT k FROM S [RANGE 2]")
    e2 = loads(dumps(eng))
    assert ids(e2, "s") == [d.id] and ids(e2, "t") == [c.id]
    assert e2._queries.epoch == eng._queries.epoch
    e2._queries[d.id].set_knob("weight", 4.0)         # bumps the restored engine's own epoch
    assert e2._queries.epoch > eng._queries.epoch
    # a checkpoint written before the index (a plain dict, weight/active in the instance dict)
    st = dict(eng.__dict__, _queries=dict(eng._queries))
    old = F.Engine.__new__(F.Engine)
    old.__setstate__(st)
    assert ids(old, "s") == [d.id]
    qs = dict(d.__dict__)
    qs["weight"], qs["active"] = qs.pop("_weight"), qs.pop("_active")
    d2 = Query.__new__(Query)
    d2.__setstate__(qs)
    assert d2.weight == 1.0 and d2.active is True


def test_summaries_and_timeouts_follow_ddl_and_knobs():
    eng = Engine()
    eng.execute("CREATE STREAM S (k INT) TIMESTAMP ts; CREATE STREAM T (k INT) TIMESTAMP ts; "
                "CREATE SUMMARY x ON S (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)")
    for s in ("S", "T"):
        assert list(eng._summaries_on(s)) == eng.catalog.summaries_on(s)
    eng.execute("CREATE SUMMARY y ON T (k) WITH GRANULARITY 5 SECONDS AND COLLAPSE(2, 4); DROP SUMMARY x")
    for s in ("S", "T"):
        assert list(eng._summaries_on(s)) == eng.catalog.summaries_on(s)
    assert not eng._any_timeout
    eng.controls.set("stream", "T", "slack_timeout", 1.0)
    assert eng._any_timeout
    eng.controls.set("stream", "T", "slack_timeout", None)
    assert not eng._any_timeout
    eng.execute("CREATE STREAM U (k INT) TIMESTAMP ts")
    eng.controls.set("stream", "U", "slack_timeout", 1.0)
    assert eng._any_timeout
    eng.execute("DROP STREAM U")
    assert not eng._any_timeout
