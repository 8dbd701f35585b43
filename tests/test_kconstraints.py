"""k-constraints (STREAM §4.1): constraint-aware join synopses.

Oracle: the brute-force equi-join of the whole streams (what the unconstrained
symmetric hash join outputs), for several adherence parameters k.
"""
from collections import Counter

import numpy as np
import pytest

from sketchql.operators.kconstraint import Constraint, KConstraintJoin, measure_clustered, measure_ordered


def _orders(n=400, delay=0, seed=0):
    """Orders (side 0, key i at time i) and 1-3 fulfillments each (side 1) arriving 0.5 + U{0..delay}
    later: referential integrity (parent first), B clustered / ordered with adherence ~ delay."""
    rng = np.random.default_rng(seed)
    ev_t, ev_side, ev_key = [np.arange(n, dtype=float)], [np.zeros(n, np.int64)], [np.arange(n)]
    c = rng.integers(1, 4, n)
    keys = np.repeat(np.arange(n), c)
    t = keys + 0.5 + rng.integers(0, delay + 1, keys.shape[0]) + rng.random(keys.shape[0]) * 0.01
    ev_t.append(t); ev_side.append(np.ones(keys.shape[0], np.int64)); ev_key.append(keys)
    t, side, key = (np.concatenate(x) for x in (ev_t, ev_side, ev_key))
    o = np.argsort(t, kind="stable")
    return side[o], key[o]


def _run(side, key, constraints, spill=True):
    j = KConstraintJoin(constraints, spill=spill)
    rid = np.arange(side.shape[0])
    cuts = np.flatnonzero(np.r_[True, side[1:] != side[:-1], True])
    out_a, out_b = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        pa, pb = j.push(int(side[a]), key[a:b], rid[a:b])
        out_a.append(pa); out_b.append(pb)
    return j, Counter(zip(np.concatenate(out_a).tolist(), np.concatenate(out_b).tolist()))


def _brute(side, key):
    rid = np.arange(side.shape[0])
    a, b = rid[side == 0], rid[side == 1]
    m = key[a][:, None] == key[b][None, :]
    i, jj = np.nonzero(m)
    return Counter(zip(a[i].tolist(), b[jj].tolist()))


@pytest.mark.parametrize("delay", [0, 2, 5, 12])
def test_constraint_aware_join_equals_unconstrained(delay):
    side, key = _orders(delay=delay)
    kb = key[side == 1]
    kc, ko = measure_clustered(kb), measure_ordered(kb)
    assert kc > 0 or delay == 0
    brute = _brute(side, key)
    full, got_full = _run(side, key, [])
    assert got_full == brute and full.synopsis_rows() == (400, int((side == 1).sum()))
    for cons in ([Constraint("referential", child=1, parent=0, k=0), Constraint("clustered", stream=1, k=kc)],
                 [Constraint("referential", child=1, parent=0, k=0), Constraint("ordered", stream=1, k=ko)]):
        j, got = _run(side, key, cons)
        assert got == brute and not j.violations
        assert j.peak_synopsis < 0.5 * full.peak_synopsis          # the synopses shrink
        assert j.synopsis_rows()[1] == 0                            # every child found its parent
    # a smaller k shrinks more
    if delay == 5:
        j_small, _ = _run(side, key, [Constraint("referential", child=1, parent=0, k=0),
                                      Constraint("ordered", stream=1, k=ko)])
        j_loose, _ = _run(side, key, [Constraint("referential", child=1, parent=0, k=0),
                                      Constraint("ordered", stream=1, k=ko + 50)])
        assert j_small.peak_synopsis < j_loose.peak_synopsis


@pytest.mark.parametrize("kind", ["clustered", "ordered", "parent", "waiting"])
def test_violation_detected_and_output_still_complete(kind):
    side, key = _orders(delay=3, seed=1)
    kb = key[side == 1]
    if kind == "clustered":
        side, key = np.r_[side, 1], np.r_[key, 5]                  # a fulfillment of an old, closed order
        cons = [Constraint("clustered", stream=1, k=measure_clustered(kb))]
    elif kind == "ordered":
        side, key = np.r_[side, 1], np.r_[key, 7]
        cons = [Constraint("ordered", stream=1, k=measure_ordered(kb))]
    elif kind == "parent":
        side, key = np.r_[side, 0], np.r_[key, 9]                  # a second order 9 (not many-one)
        cons = [Constraint("referential", child=1, parent=0, k=0)]
    else:
        side, key = np.r_[side, 1, np.zeros(5, np.int64)], np.r_[key, 10_000, np.arange(10_001, 10_006)]
        cons = [Constraint("referential", child=1, parent=0, k=2)]  # an orphan child waits > 2 parents
    j, got = _run(side, key, cons)
    assert got == _brute(side, key)
    assert len(j.violations) == 1 and j.violations[0]["constraint"] == cons[0].kind
    assert not cons[0].active and j.spilled_rows() == (0, 0)


def test_without_spill_a_violation_reports_possibly_missed_results():
    side, key = _orders(delay=3, seed=1)
    kb = key[side == 1]
    side, key = np.r_[side, 1], np.r_[key, 5]
    j, got = _run(side, key, [Constraint("clustered", stream=1, k=measure_clustered(kb))], spill=False)
    assert j.violations and j.possibly_missed == 1
    assert sum(got.values()) < sum(_brute(side, key).values())     # honest: results were lost, and said so


def test_measured_adherence_is_the_smallest_k_that_holds():
    rng = np.random.default_rng(3)
    for _ in range(20):
        keys = rng.integers(0, 6, 40)
        k = measure_ordered(keys)
        # brute force: key_i >= key_j for all j <= i - k - 1, and k - 1 fails
        ok = lambda kk: all(keys[i] >= keys[: max(i - kk, 0)].max(initial=-1) for i in range(40))
        assert ok(k) and (k == 0 or not ok(k - 1))
        kc = measure_clustered(keys)
        last = {}
        gaps = []
        for i, x in enumerate(keys.tolist()):
            if x in last:
                gaps.append(i - last[x] - 1)
            last[x] = i
        assert kc == max(gaps, default=0)


def test_bad_declarations_are_rejected():
    with pytest.raises(Exception, match="kind"):
        Constraint("sorted", stream=0)
    with pytest.raises(Exception, match="adherence"):
        Constraint("clustered", stream=0, k=-1)
    with pytest.raises(Exception, match="child and parent"):
        Constraint("referential", child=0, parent=0)


def test_engine_declares_measures_and_builds_the_join():
    from sketchql.engine import Engine
    side, key = _orders(n=150, delay=2, seed=4)
    eng = Engine()
    eng.execute("CREATE STREAM O (id INT) TIMESTAMP ts; CREATE STREAM F (oid INT) TIMESTAMP ts")
    kb = key[side == 1]
    eng.declare_constraint("referential", "F", "oid", 0, parent=("O", "id"))
    eng.declare_constraint("clustered", "F", "oid", measure_clustered(kb))
    eng.declare_constraint("ordered", "F", "oid", 0)                       # declared too tight
    f = key[side == 1]
    for i in range(0, f.shape[0], 50):
        eng.push("F", {"ts": np.arange(i, min(i + 50, f.shape[0]), dtype=float), "oid": f[i:i + 50]})
    rep = eng.constraints.report()
    assert rep[1]["holds"] and rep[1]["measured_k"] == measure_clustered(kb)
    assert not rep[2]["holds"] and rep[2]["measured_k"] == measure_ordered(kb)
    j = eng.constraint_join("O", "id", "F", "oid")
    assert [c.kind for c in j.constraints] == ["referential", "clustered", "ordered"]
    j2, got = _run(side, key, j.constraints)
    assert got == _brute(side, key)                                         # the tight one is violated...
    assert [v["constraint"] for v in j2.violations] == ["ordered"]          # ...detected, output complete
    with pytest.raises(Exception, match="no column"):
        eng.declare_constraint("clustered", "F", "nope", 1)
