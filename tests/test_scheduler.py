"""The global scheduler: STREAM §4.2's table exactly, strategies on real plans, idle budget.

Oracles: the paper's table (section 4.2) and the inline engine (every plan run to
completion when fed) for the results.
"""
import numpy as np
import pytest

from sketchql.engine import Engine
from sketchql.engine.scheduler import ModelOperator, Scheduler, chains, paper_example, simulate

BURST = {t: 1.0 for t in range(1, 8)}


def test_paper_table_batch_to_completion():
    r = simulate(paper_example(), BURST, "fifo")
    assert r["totals"][:7] == [1, 1.2, 2, 2.2, 3, 3.2, 4]
    assert r["end"] == 15


@pytest.mark.parametrize("strategy", ["greedy", "chain"])
def test_paper_table_greedy_and_chain(strategy):
    r = simulate(paper_example(), BURST, strategy)
    assert r["totals"][:7] == [1, 1.2, 1.4, 1.6, 1.8, 2.0, 2.2]
    assert r["end"] == 15
    # after the burst the queues only decline
    tail = r["totals"][6:]
    assert all(a >= b for a, b in zip(tail, tail[1:])) and tail[-1] == 0


def test_chain_lower_envelope_merges_a_slow_selective_tail():
    # a: cheap, keeps everything; b: filters 90 %: a alone never reduces the queue, so the
    # envelope puts a and b in one chain (priority of the pair), c after it
    a, b, c = ModelOperator("a", 10.0, 1.0), ModelOperator("b", 1.0, 0.1), ModelOperator("c", 0.1, 0.0)
    segs = chains([a, b, c])
    assert [[t.name for t in s] for _, s in segs] == [["a", "b"], ["c"]]
    # chart: (0, 1) (0.1, 1) (1.1, 0.1) (2.1, 0): slopes 0.9 / 1.1 then 0.1 / 1
    assert segs[0][0] == pytest.approx(0.9 / 1.1) and segs[1][0] == pytest.approx(0.1)


def test_round_robin_peak_above_chain():
    rr = max(simulate(paper_example(), BURST, "round_robin")["totals"])
    ch = max(simulate(paper_example(), BURST, "chain")["totals"])
    assert ch < rr


def _engine(strategy, quantum=64):
    eng = Engine(seed=2)
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts; CREATE STREAM T (k INT, w DOUBLE) TIMESTAMP ts")
    if strategy != "inline":
        eng.set_control("scheduler", strategy)
        eng.set_control("quantum", quantum)
    qs = [eng.register(sql) for sql in (
        "SELECT v FROM S [RANGE 5] WHERE v > 0.8",
        "SELECT k, SUM(v) AS s FROM S [RANGE 10] GROUP BY k",
        "SELECT S.k, S.v, T.w FROM S [RANGE 3], T [RANGE 3] WHERE S.k = T.k AND T.w > 0.5",
        "SELECT COUNT(*) AS n FROM T [ROWS 20] WHERE w < 0.3",
    )]
    for q in qs:
        q.set_knob("retain_changes", None)
    return eng, qs


def _feed(eng, budget=None):
    rng = np.random.default_rng(5)
    for t0 in range(0, 30, 2):
        for name, col in (("S", "v"), ("T", "w")):
            ts = np.sort(rng.uniform(t0, t0 + 2, 40))
            eng.push(name, {"ts": ts, "k": rng.integers(0, 8, 40), col: rng.random(40)})
        if budget is not None:
            eng.run(budget)
    eng.heartbeat("S", 40.0)
    eng.heartbeat("T", 40.0)
    eng.run()


def _norm(q):
    df = q.results()
    return df.sort_values(list(df.columns)).reset_index(drop=True)


@pytest.mark.parametrize("strategy", ["round_robin", "fifo", "greedy", "chain"])
def test_scheduled_results_equal_inline(strategy):
    eng0, q0 = _engine("inline")
    _feed(eng0)
    eng, qs = _engine(strategy, quantum=16)
    eng.set_control("work_per_push", 50)          # bounded work: queues build up between pushes
    _feed(eng, budget=30)
    assert eng.scheduler.peak_queued > 0
    for a, b in zip(q0, qs):
        assert _norm(a).equals(_norm(b))
    assert eng.scheduler.queued() == 0
    t = eng.controls.get("engine", "engine")
    assert t.knobs["scheduler"].value == strategy and t.stats["scheduler"]["turns"] > 0


def test_scheduler_knob_validated_and_switchable():
    eng, qs = _engine("chain")
    with pytest.raises(Exception):
        eng.set_control("scheduler", "lottery")
    eng.set_control("scheduler", "round_robin")
    assert eng.scheduler.strategy == "round_robin"
    eng.set_control("scheduler", "inline")
    assert eng.scheduler is None and all(q._runner is None for q in qs)


def test_heartbeat_and_idle_bring_budget_to_pt_operators():
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    q = eng.register("SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k WITH PREFERENCE desc A.k "
                     "WINDOW 100 SECONDS WITHIN 3 PROBES PER TUPLE")
    q.set_knob("retain_changes", None)
    rng = np.random.default_rng(0)
    ts = np.sort(rng.uniform(0, 10, 300))
    eng.push("A", {"ts": ts, "k": rng.integers(0, 5, 300)})
    eng.push("B", {"ts": ts + 1e-6, "k": rng.integers(0, 5, 300)})
    before = q.stats()["promising"]["pt_pairs"]
    eng.heartbeat("A", 20.0)
    eng.heartbeat("B", 20.0)                     # 10 s of silence: budget of ~10 s of arrivals
    st = q.stats()["promising"]
    assert st["pt_idle_units"] > 0 and st["pt_pairs"] > before
    n1 = st["pt_pairs"]
    left = eng.idle(1e6)                         # idle time: the queue is probed to the end
    eng.heartbeat("A", 20.5); eng.heartbeat("B", 20.5)
    assert q.stats()["promising"]["pt_pairs"] > n1 and left == pytest.approx(1e6)
