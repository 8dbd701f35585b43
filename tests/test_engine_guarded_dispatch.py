"""An error while one query is stepped fails that registered query, loudly, and nothing else.

Review findings (hU) on the per-query guard: (1) two queries sharing a join operator -- the
operator stepped, then raised; the first query failed and the second stepped the half-updated
operator again at the same instant and silently read duplicated rows (154 vs 126); (2) an error in an
approximate query's hidden exact shadow failed the *shadow* (id 2**30 + id) while the registered
query stayed 'active' on a corrupted audit.  Oracle: an engine fed the same tuples without the fault.
"""
import numpy as np

from sketchql.engine import Engine
from sketchql.engine.sharing import SharedConsumer

J = "SELECT S.k, S.ts, T.ts AS tts FROM S [RANGE 5], T [RANGE 5] WHERE S.k = T.k"
C = "SELECT COUNT(*) AS n FROM S [RANGE 5]"


def _engine():
    e = Engine()
    e.execute("CREATE STREAM S (k INT) TIMESTAMP ts; CREATE STREAM T (k INT) TIMESTAMP ts")
    return e


def _sorted(df):
    return sorted(map(tuple, df.values.tolist()))


def test_a_shared_operator_that_fails_after_stepping_fails_every_sharer():
    e, ref = _engine(), _engine()
    qa, qb, qc = e.register(J), e.register(J), e.register(C)
    rc = ref.register(C)
    shared = [n.op for n in qa.plan.nodes if isinstance(n.op, SharedConsumer) and n.kind == "join"][0].shared
    real, raised = shared.op.step, []

    def step_then_raise(now, *inputs):
        out = real(now, *inputs)              # the operator's state moves on, then it raises
        if now >= 5 and not raised:
            raised.append(now)
            raise RuntimeError("after stepping")
        return out

    shared.op.step = step_then_raise
    rng = np.random.default_rng(2)
    for t in range(1, 30):
        for s in "ST":
            b = {"ts": [float(t)], "k": [int(rng.integers(0, 2))]}
            e.push(s, b)
            ref.push(s, b)
    assert raised == [5.0]
    assert qa.state == "failed" and qb.state == "failed"
    assert "after stepping" in qa.failed and "shared operator" in qb.failed
    assert qc.state == "active" and _sorted(qc.results()) == _sorted(rc.results())


def test_an_error_in_the_audit_shadow_fails_the_registered_query():
    e, ref = Engine(), Engine()
    for x in (e, ref):
        x.execute("CREATE STREAM S (k INT) TIMESTAMP ts")
    q = e.register("SELECT AVG(k) AS a FROM S [RANGE 5] WITH ERROR 0.1 CONFIDENCE 0.9 ON MISS EXACT")
    c, rc = e.register(C), ref.register(C)
    rng = np.random.default_rng(0)
    t = 0
    while q._precision.shadow is None:
        t += 1
        assert t < 500, "no audit shadow came up"
        b = {"ts": [t * 0.1], "k": [int(rng.integers(0, 100))]}
        e.push("S", b)
        ref.push("S", b)
    op = q._precision.shadow.plan.root.op

    def boom(now, *a):
        raise RuntimeError("shadow broke")

    op.step = boom
    for k in range(1, 6):
        b = {"ts": [t * 0.1 + 0.01 * k], "k": [5]}
        e.push("S", b)
        ref.push("S", b)
    assert q.state == "failed" and "shadow broke" in q.failed and f"query {q.id} " in q.failed
    assert c.state == "active" and _sorted(c.results()) == _sorted(rc.results())


def test_a_query_failing_at_its_first_step_says_it_had_no_results():
    e = _engine()
    qc, qa = e.register(C), e.register(J)
    join = [n.op for n in qa.plan.nodes if n.kind == "join"][0]
    op = join.shared.op if isinstance(join, SharedConsumer) else join

    def boom(now, *inputs):
        raise RuntimeError("at once")
    op.step = boom
    e.push("S", {"ts": [1.0], "k": [1]})
    e.push("T", {"ts": [1.0], "k": [1]})
    assert qa.state == "failed" and "at once" in qa.failed
    assert "-inf" not in qa.failed and "no results yet" in qa.failed
    assert qc.state == "active" and qc.snapshot()["n"].tolist() == [1]
