"""Reference cases W1, W3-W7 (shared/reference/cases.md) on the exact operators."""
import numpy as np
import pytest

from sketchql.operators.exact import (AggSpec, Aggregate, Batch, Chain, Distinct, MJoin, MinusAll,
                                      Select, SymmetricHashJoin, WindowScan, WindowSpec, istream,
                                      snapshot)


def B(_ts, **cols):
    return Batch({k: np.asarray(v) for k, v in cols.items()}, ts=np.asarray(_ts, float))


def test_w1_multiway_join_checks_every_member():
    scans = [WindowScan(WindowSpec.range(100)) for _ in range(3)]
    j = MJoin(3, [((0, "attr"), (1, "attr")), ((1, "attr"), (2, "attr"))],
              prefixes=["s1.", "s2.", "s3."], probe_orders={2: [1, 0]})   # S1 ⋈ (S2 ⋈ S3)
    # S1 holds 90, 100; S2 holds 150, 180 (pushed in time order)
    j.step(100, scans[0].step(100, B([90, 100], attr=[1, 1], ts=[90, 100])), scans[1].step(100), scans[2].step(100))
    j.step(180, scans[0].step(180), scans[1].step(180, B([150, 180], attr=[1, 1], ts=[150, 180])), scans[2].step(180))
    # S3 receives 195 and 205 in one lazy batch evaluated at 210
    out = j.step(210, scans[0].step(210), scans[1].step(210),
                 scans[2].step(210, B([195, 205], attr=[1, 1], ts=[195, 205])))
    ins = istream(out)
    got = sorted(zip(ins.columns["s1.ts"].tolist(), ins.columns["s2.ts"].tolist(), ins.columns["s3.ts"].tolist()))
    assert got == [(100, 150, 195), (100, 180, 195)]
    assert ins.at.tolist() == [195, 195]
    # they leave when S1's 100 expires (at 200)
    d = out.take(out.sign < 0)
    assert sorted(d.at.tolist()) == [200, 200]


def test_w3_no_delayed_answers():
    q = Chain(WindowScan(WindowSpec.range(10)), Select(("price", ">", 4)),
              Aggregate([], [AggSpec("sum", "price", "s")]))
    big = {1: 6, 2: 9, 6: 5, 8: 8, 15: 7}
    answers = {}
    for t in range(1, 26):
        ts, pr = [t], [big.get(t, 2)]
        if t in big and t % 2 == 0:
            ts, pr = [t, t], [big[t], 2]   # price 2 also arrives at every other tick
        elif t not in big and t % 2 == 1:
            ts, pr = [], []
        batch = B(ts, price=np.asarray(pr, float)) if ts else None
        ch = q.step(t, batch) if batch is not None else q.advance(t)
        for a, v, s in zip(ch.at, ch.columns["s"], ch.sign):
            if s > 0:
                answers[float(a)] = float(v)
    # W3's 25:0 is the empty window: SQL's SUM of no rows is NULL (COALESCE(SUM(price), 0) = 0, see the
    # SQL version in tests/test_cql_cases.py)
    nan_at_25 = answers.pop(25)
    assert np.isnan(nan_at_25)
    assert answers == {1: 6, 2: 15, 6: 20, 8: 28, 11: 22, 12: 13, 15: 20, 16: 15, 18: 7}


def test_w3_expiry_between_arrivals_in_time_order():
    q = Chain(WindowScan(WindowSpec.range(10)), Aggregate([], [AggSpec("sum", "price", "s")]))
    q.push(B([1, 2, 6], price=[6., 9., 5.]))
    ch = q.advance(30)        # one heartbeat, three expirations, in order
    plus = ch.take(ch.sign > 0)
    assert plus.at.tolist() == [11, 12, 16]
    assert plus.columns["s"].tolist()[:2] == [14, 5] and np.isnan(plus.columns["s"][2])   # empty: NULL


def test_w4_distinct_replacement():
    d = Distinct(["v"])
    q = Chain(WindowScan(WindowSpec.range(10)), d)
    out = [q.push(B([t], v=[v])) for t, v in [(1, "x"), (2, "x"), (3, "y"), (4, "y")]]
    out.append(q.advance(20))
    ev = [(float(a), int(s), v, float(ts)) for o in out
          for a, s, v, ts in zip(o.at, o.sign, o.columns["v"], o.ts)]
    assert ev == [(1, 1, "x", 1), (3, 1, "y", 3),
                  (11, -1, "x", 1), (11, 1, "x", 2), (12, -1, "x", 2),
                  (13, -1, "y", 3), (13, 1, "y", 4), (14, -1, "y", 4)]
    assert d.max_state <= 2 * 2


def test_w5_join_results_expire_out_of_arrival_order():
    L, R = WindowScan(WindowSpec.range(10)), WindowScan(WindowSpec.range(10))
    j = SymmetricHashJoin([("key", "key")], prefixes=("w1.", "w2."))
    outs = []
    for t, lb, rb in [(1, B([1], key=["k1"], name=["a"]), None), (5, B([5], key=["k2"], name=["b"]), None),
                      (6, None, B([6], key=["k2"], name=["t"])), (7, None, B([7], key=["k1"], name=["u"]))]:
        outs.append(j.step(t, L.step(t, lb), R.step(t, rb)))
    outs.append(j.step(20, L.step(20), R.step(20)))
    ev = [(float(a), int(s), l + r) for o in outs if len(o) for a, s, l, r in
          zip(o.at, o.sign, o.columns["w1.name"], o.columns["w2.name"])]
    assert ev == [(6, 1, "bt"), (7, 1, "au"), (11, -1, "au"), (15, -1, "bt")]


def test_w6_group_disappears():
    q = Chain(WindowScan(WindowSpec.range(10)), Aggregate(["g"], [AggSpec("sum", "v", "s")]))
    ch = [q.push(B([1, 2], g=[1, 1], v=[5., 3.])), q.advance(11), q.advance(12), q.advance(30)]
    ev = [(float(a), int(s), float(v)) for o in ch for a, s, v in zip(o.at, o.sign, o.columns["s"])]
    assert ev == [(1, 1, 5), (2, -1, 5), (2, 1, 8), (11, -1, 8), (11, 1, 3), (12, -1, 3)]
    allc = __import__("sketchql.operators.changes", fromlist=["Changes"]).Changes.concat(ch)
    assert snapshot(allc, 2)["s"].tolist() == [8]
    assert snapshot(allc, 11)["s"].tolist() == [3]
    assert len(snapshot(allc, 12)) == 0


def test_w7_minus_all_negative_tuples():
    S, R = WindowScan(WindowSpec.range(100)), WindowScan(WindowSpec.range(10))
    m = MinusAll(["v"])
    evs = []

    def run(t, s=None, r=None):
        o = m.step(t, S.step(t, B([t], v=[s]) if s else None), R.step(t, B([t], v=[r]) if r else None))
        evs.extend((float(a), int(g), v) for a, g, v in zip(o.at, o.sign, o.columns["v"]))

    run(1, s="B"); run(2, s="A"); run(3, s="C")
    assert evs == [(1, 1, "B"), (2, 1, "A"), (3, 1, "C")]
    run(4, r="A")
    assert evs[-1] == (4, -1, "A")
    n = len(evs)
    run(5, r="E"); run(6, s="E")
    assert len(evs) == n                      # S's E is cancelled by R's E
    run(16)                                    # R's E expires at 15 -> E+ ; R's A at 14 -> A+
    assert evs[n:] == [(14, 1, "A"), (15, 1, "E")]
