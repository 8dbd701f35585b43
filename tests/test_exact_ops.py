"""Unit checks of the exact operators' edges (errors, stats, knobs)."""
import numpy as np
import pytest

from sketchql.errors import LateTupleError, SketchQLError
from sketchql.operators.exact import (AggSpec, Aggregate, Batch, Chain, Distinct, MJoin, Select,
                                      SymmetricHashJoin, WindowScan, WindowSpec, as_batch, snapshot)


def test_late_tuple_and_bad_input_raise():
    ws = WindowScan(WindowSpec.range(5))
    ws.push(Batch({"x": np.array([1])}, ts=np.array([10.0])))
    with pytest.raises(LateTupleError):
        ws.push(Batch({"x": np.array([1])}, ts=np.array([9.0])))
    with pytest.raises(SketchQLError):
        WindowSpec.range(0)
    with pytest.raises(SketchQLError):
        as_batch({"x": [1, 2]})                       # no ts column
    with pytest.raises(SketchQLError):
        Select(("x", "~", 1))
    with pytest.raises(SketchQLError):
        AggSpec("mode", "x")
    with pytest.raises(SketchQLError):
        MJoin(2, [((0, "a"), (0, "a"))])


def test_minmax_rescans_only_when_extreme_leaves():
    agg = Aggregate([], [AggSpec("max", "v", "m")])
    q = Chain(WindowScan(WindowSpec.range(10)), agg)
    q.push(Batch({"v": np.array([9., 1., 2., 3.])}, ts=np.array([1., 2., 3., 4.])))
    ch = q.advance(12.5)          # 9 leaves at 11 (rescan), 1 at 12 (no rescan)
    assert agg.stats()["rescans"] == 1
    plus = ch.take(ch.sign > 0)
    assert plus.columns["m"].tolist() == [3.0]


def test_stats_and_probe_order_knob():
    j = SymmetricHashJoin("k")
    assert j.stats()["state_rows"] == 0
    m = MJoin(3, [((0, "k"), (1, "k")), ((1, "k"), (2, "k"))], prefixes=["a", "b", "c"])
    m.set_probe_order(0, [2, 1])
    with pytest.raises(SketchQLError):
        m.set_probe_order(0, [1])


def test_distinct_replace_rejects_non_fifo_input():
    d = Distinct(["k"], mode="replace")
    q = Chain(WindowScan(WindowSpec.partitioned(["p"], 1)), d)
    q.push(Batch({"k": np.array([1, 1]), "p": np.array([0, 1])}, ts=np.array([1., 2.])))
    with pytest.raises(SketchQLError):     # partition 1's newer copy is pushed out first
        q.push(Batch({"k": np.array([2]), "p": np.array([1])}, ts=np.array([3.])))


def test_tuple_based_window_ties():
    q = WindowScan(WindowSpec.rows(2))
    ch = q.push(Batch({"x": np.array([1, 2, 3])}, ts=np.array([5., 5., 5.])))
    assert sorted(snapshot(ch, 5)["x"].tolist()) == [2, 3]
    assert len(ch) == 2                      # x=1 never visible: not emitted
