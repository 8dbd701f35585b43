"""One statement of the INT range (engine.batches.int_fits / INT_MIN / INT_MAX) and every INT check of
the batch path agreeing with it.  Oracle: numpy's int64 limits and exact Python integers."""
import numpy as np
import pytest

from sketchql.engine import Engine
from sketchql.engine.batches import INT_MAX, INT_MIN, int_fits
from sketchql.engine.errors import BatchError

EDGES = [INT_MIN - 2, INT_MIN - 1, INT_MIN, INT_MIN + 1, -1, 0, 1, INT_MAX - 1, INT_MAX, INT_MAX + 1,
         INT_MAX + 2, 2 ** 64 - 1, 2 ** 64, -(2 ** 64)]


def test_the_range_is_int64():
    info = np.iinfo(np.int64)
    assert (INT_MIN, INT_MAX) == (int(info.min), int(info.max))
    for v in EDGES:
        assert int_fits(v) == (int(info.min) <= v <= int(info.max)), v


@pytest.mark.parametrize("form", ["object", "str", "uint64", "float64"])
def test_every_form_of_batch_follows_the_rule(form):
    for v in EDGES:
        if form == "uint64" and not 0 <= v < 2 ** 64:
            continue
        if form == "float64" and float(v) != v:
            continue                              # not representable: no float64 input holds it
        e = Engine()
        e.execute("CREATE STREAM S (k INT) TIMESTAMP ts")
        col = {"object": lambda: np.array([v], dtype=object), "str": lambda: np.array([str(v)], dtype=object),
               "uint64": lambda: np.array([v], dtype=np.uint64), "float64": lambda: np.array([float(v)])}[form]()
        try:
            b = e.validate("S", {"ts": [0.0], "k": col})
            ok, got = True, int(b.columns["k"][0])
        except BatchError:
            ok, got = False, None
        assert ok == int_fits(v), (form, v)
        if ok:
            assert got == v, (form, v)
