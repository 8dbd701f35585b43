"""Issue 16 / audit defect 10: ``ON MISS FAIL`` on a single-stream PT aggregate replaces the
answer with an error row (NaN aggregate and error, the message in the node's stats) while the
contract is missed, as the exact aggregates' ``ON MISS FAIL`` does -- before, it returned the
estimate like ``ON MISS RETURN``.  Oracle: the contract test ``error <= e * |estimate|`` on the
RETURN query's answers, step by step, and the exact AVG in numpy."""
import math

import numpy as np

from sketchql.engine import Engine

W = 10.0


def _data():
    rng = np.random.default_rng(4)
    n = 6000
    return np.sort(rng.uniform(0, 60, n)), rng.integers(0, 500, n), rng.gamma(2, 3, n)


def _run(tail, units, error):
    ts, k, v = _data()
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts")
    q = eng.register(f"SELECT AVG(S.v) AS a FROM S [RANGE {W}] WHERE S.k BETWEEN 2 AND 400 "
                     f"WITH PREFERENCE weighted S.k WITHIN {units} PROBES PER TUPLE "
                     f"WITH ERROR {error} CONFIDENCE 0.95 {tail}")
    out = []
    for t0 in np.arange(0, 60, 1.0):
        m = (ts >= t0) & (ts < t0 + 1)
        eng.push("S", {"ts": ts[m], "k": k[m], "v": v[m]})
        s = q.snapshot()
        now = ts[m][-1]
        live = (ts > now - W) & (ts <= now) & (k >= 2) & (k <= 400)
        out.append((now, float(s["a"].iloc[0]), float(s["a_error"].iloc[0]), float(v[live].mean())))
    node = next(nd for nd in q.plan.nodes if nd.kind == "pt_aggregate")
    return out, node.stats()


def test_on_miss_fail_gives_an_error_row_while_missed():
    ret, _ = _run("ON MISS RETURN", 1, 0.001)
    fail, st = _run("ON MISS FAIL", 1, 0.001)
    missed = [not (e <= 0.001 * abs(a)) for _, a, e, _ in ret]
    assert any(missed)
    first = missed.index(True)
    for i, ((t, a, e, _), (_, fa, fe, _)) in enumerate(zip(ret, fail)):
        if i < first:
            assert fa == a and fe == e                  # before any miss: the answer
        elif all(missed[first:i + 1]):
            assert math.isnan(fa) and math.isnan(fe)   # the error row while missed
    assert st["pt_contract_failed"] and "missed" in st["pt_contract_error"]
    assert st["pt_contract_misses"] == sum(missed)


def test_on_miss_fail_returns_when_the_contract_holds():
    """A contract the full budget holds (exact answers, error 0): FAIL is never triggered."""
    out, st = _run("ON MISS FAIL", 10 ** 6, 0.05)
    for _, a, e, want in out:
        assert e == 0.0 and abs(a - want) <= 1e-9 * abs(want)
    assert not st["pt_contract_failed"] and st["pt_contract_failures"] == 0
