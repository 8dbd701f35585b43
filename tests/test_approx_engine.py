"""Approximate evaluation through SQL: interval columns, exactness, audits, contracts and ON MISS.

The oracle of every test is an exact query over the same stream (no contract),
registered next to the approximate one.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from sketchql.engine import Engine
from sketchql.engine.allocator_runtime import ContractInfeasible

W = 50.0


def _engine(seed=0):
    eng = Engine(seed=seed)
    eng.execute("CREATE STREAM F (carrier INT, delay DOUBLE, user INT) TIMESTAMP ts")
    return eng


def _push(eng, t0, t1, rate=40.0, seed=0, groups=4):
    rng = np.random.default_rng(seed)
    n = int((t1 - t0) * rate)
    ts = t0 + (np.arange(n) + 0.5) / rate
    eng.push("F", {"ts": ts, "carrier": rng.integers(0, groups, n),
                   "delay": rng.lognormal(2.0, 0.6, n), "user": rng.integers(0, 3000, n)})


def _feed(eng, until, step=10.0, rate=40.0, seed=0, t0=0.0, each=None):
    t = t0
    k = 0
    while t < until:
        _push(eng, t, t + step, rate, seed * 1000 + k)
        t += step
        k += 1
        if each is not None:
            each(t)


def _merge(a, e, key="carrier"):
    return a.merge(e, on=key, suffixes=("", "_x")) if key else a.join(e, rsuffix="_x")


def test_contract_gives_interval_columns_and_the_rest_stays_exact():
    eng = _engine()
    q = eng.register(f"SELECT carrier, AVG(delay) AS d, COUNT(*) AS n FROM F [RANGE {W}] GROUP BY carrier "
                     "WITH ERROR 0.05 CONFIDENCE 0.9")
    assert q.names == ["carrier", "d", "d_lo", "d_hi", "n", "n_lo", "n_hi"]
    plain = eng.register(f"SELECT carrier, AVG(delay) AS d FROM F [RANGE {W}] GROUP BY carrier")
    exact = eng.register(f"SELECT carrier, AVG(delay) AS d FROM F [RANGE {W}] GROUP BY carrier EXACT")
    mins = eng.register(f"SELECT carrier, MIN(delay) AS m FROM F [RANGE {W}] GROUP BY carrier WITH ERROR 0.05")
    for x in (plain, exact, mins):
        assert not any(c.endswith(("_lo", "_hi")) for c in x.names)
    _feed(eng, 120)
    for x in (plain, exact):
        p = x.precision()
        assert p["exact"] and p["status"] == "exact" and p["estimated"]["rel_error"] == 0.0
    assert "MIN" in mins.precision()["reason"] and mins.precision()["exact"]
    p = q.precision()
    assert not p["exact"] and p["contract"]["error"] == 0.05 and p["estimated"]["confidence"] == 0.9
    assert "Approx" in q.explain()


def test_sampled_answers_are_scaled_and_their_intervals_cover_the_exact_ones():
    eng = _engine(seed=3)
    q = eng.register(f"SELECT carrier, SUM(delay) AS s, AVG(delay) AS a, COUNT(*) AS n, MEDIAN(delay) AS m "
                     f"FROM F [RANGE {W}] GROUP BY carrier WITH ERROR 0.2 CONFIDENCE 0.95")
    e = eng.register(f"SELECT carrier, SUM(delay) AS s, AVG(delay) AS a, COUNT(*) AS n, MEDIAN(delay) AS m "
                     f"FROM F [RANGE {W}] GROUP BY carrier")
    q.set_knob("sample_rate", 0.2)
    hits, tot, rel = 0, 0, []
    for k in range(30):
        _push(eng, k * 10.0, (k + 1) * 10.0, rate=40.0, seed=k)
        if k >= 5:
            m = _merge(q.snapshot(), e.snapshot())
            for c in ("s", "a", "n", "m"):
                hits += int(((m[c + "_lo"] <= m[c + "_x"]) & (m[c + "_x"] <= m[c + "_hi"])).sum())
                tot += len(m)
                rel.extend((np.abs(m[c] - m[c + "_x"]) / m[c + "_x"]).tolist())
    cov = hits / tot
    assert 0.85 <= cov < 1.0, cov            # honest (near 95 %) and not useless (not always 100 %)
    assert np.median(rel) < 0.1
    assert q.precision()["knobs"]["sample_rate"] == 0.2


def test_join_on_sampled_inputs_has_scaled_counts():
    eng = Engine(seed=5)
    eng.execute("CREATE STREAM A (k INT, v DOUBLE) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    q = eng.register("SELECT COUNT(*) AS n, SUM(A.v) AS s FROM A [RANGE 20], B [RANGE 20] WHERE A.k = B.k "
                     "WITH ERROR 0.2 CONFIDENCE 0.95")
    e = eng.register("SELECT COUNT(*) AS n, SUM(A.v) AS s FROM A [RANGE 20], B [RANGE 20] WHERE A.k = B.k")
    q.set_knob("sample_rate", 0.5)
    rng = np.random.default_rng(1)
    for k in range(8):
        ts = k * 10 + np.arange(400) / 40.0
        eng.push("A", {"ts": ts, "k": rng.integers(0, 50, 400), "v": rng.uniform(1, 2, 400)})
        eng.push("B", {"ts": ts, "k": rng.integers(0, 50, 400)})
    a, x = q.snapshot().iloc[0], e.snapshot().iloc[0]
    assert abs(a["n"] / x["n"] - 1) < 0.15 and abs(a["s"] / x["s"] - 1) < 0.15
    assert a["n_lo"] < a["n"] < a["n_hi"]


def test_count_distinct_uses_universe_sampling():
    eng = _engine(seed=2)
    q = eng.register(f"SELECT COUNT(DISTINCT user) AS u FROM F [RANGE {W}] WITH ERROR 0.1 CONFIDENCE 0.95")
    e = eng.register(f"SELECT COUNT(DISTINCT user) AS u FROM F [RANGE {W}]")
    q.set_knob("sample_rate", 0.3)
    _feed(eng, 150)
    a, x = q.snapshot().iloc[0], e.snapshot().iloc[0]
    assert a["u_lo"] <= x["u"] <= a["u_hi"] and abs(a["u"] / x["u"] - 1) < 0.1


def test_feasible_contract_is_met_as_measured_by_the_audit():
    eng = _engine(seed=4)
    q = eng.register(f"SELECT carrier, AVG(delay) AS d FROM F [RANGE {W}] GROUP BY carrier "
                     "WITH ERROR 0.05 CONFIDENCE 0.95")
    q.set_knob("audit_share", 1.0)
    _feed(eng, 400, rate=60.0)
    p = q.precision()
    assert p["knobs"]["sample_rate"] < 1.0                 # it did approximate
    assert p["audited"]["n_audits"] > 10
    audits = [a for a in q._precision.audits if a["t"] > 2 * W]
    met = np.mean([a["max_rel_error"] <= 0.05 for a in audits])
    assert met >= 0.9, met
    assert p["audited"]["coverage"] >= 0.9
    assert p["status"] in ("met", "missed")
    s = q.precision_series()
    assert s and {"t", "estimated_rel_error", "audited_rel_error", "sample_rate", "missed"} <= set(s[-1])
    assert len(q.precision_series(limit=3)) == 3


def test_infeasible_contract_is_reported_at_registration():
    eng = _engine(seed=6)
    _feed(eng, 100)
    eng.budgets["memory_bytes"] = 500
    with pytest.warns(UserWarning, match="infeasible"):
        q = eng.register(f"SELECT carrier, AVG(delay) AS d FROM F [RANGE {W}] GROUP BY carrier "
                         "WITH ERROR 0.01 CONFIDENCE 0.99")
    p = q.precision()
    assert p["status"] == "infeasible"
    assert p["infeasible"]["memory_bytes"] > 500 and 0 < p["infeasible"]["knobs"]["sample_rate"] <= 1
    with pytest.raises(ContractInfeasible, match="ON MISS FAIL"):
        eng.register(f"SELECT carrier, AVG(delay) AS d FROM F [RANGE {W}] GROUP BY carrier "
                     "WITH ERROR 0.01 CONFIDENCE 0.99 ON MISS FAIL")
    assert len(eng.queries) == 1                           # the refused one is not registered


def test_infeasible_contract_found_by_the_allocator_at_run_time():
    eng = _engine(seed=6)
    eng.budgets["memory_bytes"] = 2000
    q = eng.register(f"SELECT carrier, AVG(delay) AS d FROM F [RANGE {W}] GROUP BY carrier "
                     "WITH ERROR 0.01 CONFIDENCE 0.99")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _feed(eng, 150)
    assert q.precision()["status"] == "infeasible"
    d = eng.allocator.decision()
    assert d["per_query"][str(q.id)]["infeasible"]["memory_bytes"] > 2000 or \
        d["per_query"][q.id]["infeasible"]["memory_bytes"] > 2000


def _miss_setup(action):
    eng = _engine(seed=8)
    q = eng.register(f"SELECT carrier, AVG(delay) AS d FROM F [RANGE {W}] GROUP BY carrier "
                     f"WITH ERROR 0.02 CONFIDENCE 0.95 ON MISS {action}")
    e = eng.register(f"SELECT carrier, AVG(delay) AS d FROM F [RANGE {W}] GROUP BY carrier")
    q.set_knob("sample_rate", 0.05)                        # far too little for ±2 %
    _feed(eng, 200)
    return eng, q, e


def test_on_miss_return_flags_the_answer():
    eng, q, e = _miss_setup("RETURN")
    p = q.precision()
    assert p["status"] == "missed" and p["estimated"]["rel_error"] > 0.02
    assert any(s["missed"] for s in q.precision_series())
    assert len(q.snapshot()) == len(e.snapshot())          # answered as is


def test_on_miss_exact_recomputes_exactly():
    eng, q, e = _miss_setup("EXACT")
    assert q.precision()["knobs"]["mode"] == "exact"
    a = q.snapshot().sort_values("carrier").reset_index(drop=True)
    x = e.snapshot().sort_values("carrier").reset_index(drop=True)
    np.testing.assert_allclose(a["d"], x["d"], rtol=1e-12)
    assert (a["d_lo"] == a["d"]).all() and (a["d_hi"] == a["d"]).all()


def test_on_miss_fail_refuses_with_an_error_row():
    eng, q, e = _miss_setup("FAIL")
    snap = q.snapshot()
    assert len(snap) == 1 and snap["d"].isna().all()
    p = q.precision()
    assert p["status"] == "missed" and "contract WITH ERROR 0.02 missed" in p["error"]


def test_load_shedding_scales_approximate_answers_and_flags_exact_ones():
    eng = _engine(seed=9)
    q = eng.register(f"SELECT COUNT(*) AS n FROM F [RANGE {W}] WITH ERROR 0.1 CONFIDENCE 0.95")
    e = eng.register(f"SELECT COUNT(*) AS n FROM F [RANGE {W}]")
    eng.controls.set("stream", "F", "shed_rate", 0.5)
    _feed(eng, 150)
    true_n = W * 40.0
    a = q.snapshot().iloc[0]
    assert a["n_lo"] <= true_n <= a["n_hi"]
    assert abs(e.snapshot().iloc[0]["n"] / true_n - 0.5) < 0.1      # the exact plan saw half
    pe = e.precision()
    assert pe["status"] == "missed" and abs(pe["estimated"]["recall"] - 0.5) < 1e-9


def test_promising_join_reports_recall_and_audits_it():
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts")
    q = eng.register("SELECT A.k, A.ts, B.ts FROM A, B WHERE A.k = B.k WITH PREFERENCE desc A.k "
                     "WINDOW 10 SECONDS WITHIN 3 PROBES PER TUPLE")
    q.set_knob("audit_share", 1.0)
    rng = np.random.default_rng(0)
    for k in range(6):
        ts = k * 10 + np.arange(200) / 20.0
        eng.push("A", {"ts": ts, "k": rng.integers(0, 20, 200)})
        eng.push("B", {"ts": ts, "k": rng.integers(0, 20, 200)})
    p = q.precision()
    assert p["kind"] == "promising" and p["audited"]["n_audits"] > 0
    assert 0 < p["audited"]["recall"] < 1
    assert p["estimated"]["recall"] is not None


def test_audit_measures_the_same_error_as_an_exact_query():
    eng = _engine(seed=12)
    q = eng.register(f"SELECT carrier, AVG(delay) AS d, SUM(delay) AS s FROM F [RANGE {W}] GROUP BY carrier "
                     "WITH ERROR 0.05 CONFIDENCE 0.95")
    e = eng.register(f"SELECT carrier, AVG(delay) AS d, SUM(delay) AS s FROM F [RANGE {W}] GROUP BY carrier")
    q.set_knob("audit_share", 1.0)
    q.set_knob("sample_rate", 0.3)
    _feed(eng, 400)
    m = _merge(q.snapshot(), e.snapshot())
    rel = np.concatenate([np.abs(m[c] - m[c + "_x"]) / np.abs(m[c + "_x"]) for c in ("d", "s")])
    last = q.precision()["audited"]["last"]
    assert last["t"] == q.clock and last["rel_error"] == pytest.approx(float(rel.mean()), rel=1e-9)
    assert q.precision()["audited"]["coverage"] >= 0.88
