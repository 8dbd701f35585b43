"""The engine's allocator: budgets, weights, re-planning after a rate step, hysteresis, decisions."""
from __future__ import annotations

import json
import warnings

import numpy as np

from sketchql.engine import Engine

W = 40.0


def _engine():
    eng = Engine(seed=7)
    eng.execute("CREATE STREAM S (g INT, v DOUBLE, u INT) TIMESTAMP ts")
    return eng


def _push(eng, t0, t1, rate, seed):
    rng = np.random.default_rng(seed)
    n = int(round((t1 - t0) * rate))
    ts = t0 + (np.arange(n) + 0.5) * (t1 - t0) / n
    eng.push("S", {"ts": ts, "g": rng.integers(0, 4, n), "v": rng.lognormal(1.0, 0.5, n),
                   "u": rng.integers(0, 5000, n)})


def test_rate_step_replans_within_two_windows_and_precision_recovers():
    eng = _engine()
    q = eng.register(f"SELECT g, AVG(v) AS a FROM S [RANGE {W}] GROUP BY g WITH ERROR 0.05 CONFIDENCE 0.95")
    q2 = eng.register(f"SELECT g, SUM(v) AS s FROM S [RANGE {W}] GROUP BY g WITH ERROR 0.05 CONFIDENCE 0.95")
    for x in (q, q2):
        x.set_knob("audit_share", 0.0)        # audit shadows would take more than this budget
    eng.budgets["memory_bytes"] = 12_000
    step_t = 4 * W
    errs_before, errs_after = [], []
    t = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        while t < step_t + 4 * W:
            rate = 20.0 if t < step_t else 200.0
            _push(eng, t, t + 5.0, rate, int(t))
            t += 5.0
            e = q.precision()["estimated"]["rel_error"]
            if step_t - W <= t < step_t:
                errs_before.append(e)
            if t >= step_t + 3 * W:
                errs_after.append(e)
    after = [h for h in eng.allocator.history if h["t"] is not None and h["t"] > step_t]
    assert after, eng.allocator.history
    first = after[0]["t"]
    assert first - step_t <= 2 * W, (first, step_t)
    d = eng.allocator.decision()
    mem = sum(pq["memory"] for pq in d["per_query"].values())
    assert mem <= 12_000 * 1.02                         # the new plan fits the budget again
    # the same memory buys the same sample: the error comes back to what it was
    assert np.median(errs_after) <= 1.5 * np.median(errs_before) + 1e-9
    json.dumps(d)                                      # JSON-able for the service


def test_weights_shift_the_allocation_and_changes_replan():
    eng = _engine()
    a = eng.register(f"SELECT g, AVG(v) AS a FROM S [RANGE {W}] GROUP BY g WITH ERROR 0.02 CONFIDENCE 0.95")
    b = eng.register(f"SELECT g, SUM(v) AS s FROM S [RANGE {W}] GROUP BY g WITH ERROR 0.02 CONFIDENCE 0.95")
    eng.budgets["memory_bytes"] = 15_000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(12):
            _push(eng, k * 10.0, (k + 1) * 10.0, 40.0, k)
        r0 = eng.allocator.replans
        eng.controls.set("query", f"q{a.id}", "weight", 10.0)
        _push(eng, 120.0, 125.0, 40.0, 99)
        assert eng.allocator.replans == r0 + 1              # a weight change re-plans at the next push
        assert "weights" in eng.allocator.decision()["reason"]
        # on the same statistics, a higher weight never lowers the query's predicted precision
        prev = -1.0
        for w in (0.5, 1.0, 4.0, 16.0):
            a.set_knob("weight", w)
            d = eng.allocator.replan("weight sweep")
            p = d["per_query"][str(a.id)]["predicted_precision"]
            assert p >= prev - 1e-9
            prev = p
        # deactivating b gives it weight 0
        b.set_knob("active", False)
        d = eng.allocator.replan("b inactive")
        assert d["per_query"][str(b.id)]["weight"] == 0.0


def test_hysteresis_keeps_the_plan_when_nothing_changes():
    eng = _engine()
    eng.register(f"SELECT g, AVG(v) AS a FROM S [RANGE {W}] GROUP BY g WITH ERROR 0.05 CONFIDENCE 0.95")
    eng.budgets["memory_bytes"] = 40_000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k in range(10):
            _push(eng, k * 10.0, (k + 1) * 10.0, 40.0, k)
        n = eng.allocator.replans
        for k in range(10, 30):
            _push(eng, k * 10.0, (k + 1) * 10.0, 40.0, k)   # steady rate, same distribution
    assert eng.allocator.replans == n


def test_allocator_replan_and_budgets_through_controls():
    eng = _engine()
    q = eng.register(f"SELECT g, AVG(v) AS a FROM S [RANGE {W}] GROUP BY g WITH ERROR 0.05 CONFIDENCE 0.95")
    for k in range(8):
        _push(eng, k * 10.0, (k + 1) * 10.0, 40.0, k)
    assert not eng.allocator.enabled
    eng.controls.set("engine", "engine", "memory_bytes", 10**9)
    assert eng.allocator.enabled
    d = eng.allocator.replan("test")
    assert d["reason"] == "test" and str(q.id) in d["per_query"]
    assert d["per_query"][str(q.id)]["knobs"]["sample_rate"] == 1.0   # plenty of memory: exact rate


def test_rate_meter_is_unbiased_for_batches_of_any_size():
    """The measured rate of a steady stream (brute force: rows / seconds) whatever the batch size."""
    from sketchql.engine.precision import RateMeter
    for batch in (0.5, 1.0, 3.0):
        m = RateMeter(horizon=10.0)
        ts = np.arange(0, 60, 0.01) + 0.005           # 100 rows per second
        for t0 in np.arange(0, 60, batch):
            m.add(ts[(ts >= t0) & (ts < t0 + batch)])
        assert abs(m.rate() / 100.0 - 1) < 0.02, (batch, m.rate())


def test_rate_meter_running_sum_matches_a_recount_and_old_checkpoints():
    """rate() keeps a running sum of the rows in its horizon; a brute-force recount over every
    batch seen (rows of batches that ended within the horizon) must give the same rate, and a
    meter pickled before the running sum existed must restore it."""
    import pickle

    from sketchql.engine.precision import RateMeter

    def recount(first, batches, horizon):
        last = max(t1 for t1, _ in batches)
        kept = [(t1, n) for t1, n in batches if t1 > last - horizon]
        if len(kept) >= 2 and last > kept[0][0]:
            return (sum(n for _, n in kept) - kept[0][1]) / (last - kept[0][0])
        return sum(n for _, n in kept) / max(min(horizon, last - first), 1e-9)

    rng = np.random.default_rng(5)
    m, seen, t, checked = RateMeter(horizon=2.0), [], 0.0, 0
    for _ in range(400):
        n = int(rng.integers(1, 50))
        ts = t + np.sort(rng.uniform(0, rng.choice([0.01, 0.3, 3.0]), n))
        t = float(ts[-1])
        first = float(ts[0]) if not seen else first
        m.add(ts)
        seen.append((t, n))
        if t > first:
            ref = recount(first, seen, 2.0)
            assert abs(m.rate() - ref) <= 1e-9 * max(1.0, ref), (len(seen), m.rate(), ref)
            checked += 1
    assert checked > 350
    state = dict(m.__dict__)
    del state["_in_q"]                    # as written by a build without the running sum
    old = RateMeter.__new__(RateMeter)
    old.__setstate__(pickle.loads(pickle.dumps(state)))
    assert old.rate() == m.rate()
