"""INT columns hold int64 exactly (issue 12 audit): a value outside [-2^63, 2^63) or not
integral is refused naming column and row, whatever the batch's form (floats, Python ints,
numeric strings, numpy uint64, pandas, Arrow).  It used to be stored as -2^63 (floats) or
wrapped (uint64 2^64 - 1 became -1), and numeric strings were truncated ("1.5" -> 1) or rounded
through float64 (2^53 + 1).

Oracle: Python's exact integers and fractions (``fractions.Fraction`` of the given value)."""
from fractions import Fraction

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings, strategies as st

from sketchql.engine import Engine
from sketchql.engine.errors import BatchError

LO, HI = -2 ** 63, 2 ** 63


def _engine():
    e = Engine()
    e.execute("CREATE STREAM S (k INT, x DOUBLE) TIMESTAMP ts")
    q = e.register("SELECT k FROM S [UNBOUNDED]")
    return e, q


def _expect(v):
    """The int64 the engine must store for ``v``, or None if it must refuse it."""
    f = Fraction(str(v)) if isinstance(v, str) else Fraction(v)
    return int(f) if f.denominator == 1 and LO <= f < HI else None


def _push(values, form):
    e, q = _engine()
    n = len(values)
    if form == "list":
        k = list(values)
    elif form == "float64":
        k = np.array(values, np.float64)
    elif form == "object":
        k = np.array(values, dtype=object)
    elif form == "str":
        k = np.array([repr(v) if isinstance(v, float) else str(v) for v in values], dtype=object)
    elif form == "pandas":
        data = pd.DataFrame({"ts": np.arange(n, dtype=float), "k": values, "x": np.ones(n)})
        e.push("S", data)
        return q
    elif form == "arrow":
        big = any(isinstance(v, int) and v >= 2 ** 63 for v in values)
        k = pa.array(values, pa.uint64()) if big else pa.array(values)
        e.push("S", pa.table({"ts": np.arange(n, dtype=float), "k": k, "x": np.ones(n)}))
        return q
    e.push("S", {"ts": np.arange(n, dtype=float), "k": k, "x": np.ones(n)})
    return q


BOUNDARY = [0, 1, -1, 2 ** 53 + 1, -(2 ** 53) - 1, HI - 1, LO, HI, LO - 1, 2 ** 64 - 1, 2 ** 64,
            1e30, -1e30, 9.3e18, 9.2e18, -9.3e18, float(HI), float(LO), 1.5, -0.5, 2.0, 4.5e15, 4.5e15 + 0.5,
            "7", "-12", "1e30", "1.5", "2.0", str(HI - 1), str(HI), str(2 ** 53 + 1)]


@pytest.mark.parametrize("v", BOUNDARY, ids=[repr(v) for v in BOUNDARY])
def test_int_column_boundary_values_every_form(v):
    want = _expect(v)
    forms = ["object", "str"] if isinstance(v, str) else ["list", "object", "str", "pandas"]
    if isinstance(v, float):
        forms += ["float64", "arrow"]
    elif not isinstance(v, str) and 0 <= v < 2 ** 64:
        forms += ["arrow"]          # (uint64 at and above 2^63)
    for form in forms:
        vals = [3, v, 5]        # the bad value in row 1
        if want is None:
            with pytest.raises(BatchError) as ei:
                _push(vals, form)
            msg = str(ei.value)
            assert "column 'k'" in msg and "row 1 " in msg, (form, msg)
        else:
            got = _push(vals, form).snapshot()["k"].tolist()
            assert sorted(got) == sorted([3, want, 5]), (form, got)


def test_uint64_numpy_column():
    for vals, ok in (([1, 2 ** 63 - 1], True), ([1, 2 ** 63], False), ([2 ** 64 - 1, 0], False)):
        arr = np.array(vals, np.uint64)
        if ok:
            assert sorted(_push(arr, "list").snapshot()["k"].tolist()) == sorted(vals)
        else:
            with pytest.raises(BatchError, match="does not fit in 64 bits"):
                _push(arr, "list")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.integers(min_value=-2 ** 70, max_value=2 ** 70),
                          st.floats(allow_nan=False, allow_infinity=False, width=64)),
                min_size=1, max_size=6))
def test_int_column_matches_exact_arithmetic(values):
    want = [_expect(v) for v in values]
    for form in ("list", "object"):
        if None in want:
            with pytest.raises(BatchError) as ei:
                _push(values, form)
            assert f"row {want.index(None)} " in str(ei.value)
        else:
            assert sorted(_push(values, form).snapshot()["k"].tolist()) == sorted(want)


def test_float_nan_and_inf_refused():
    for v in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(BatchError, match=r"column 'k' is INT but row 1 holds"):
            _push([1.0, v], "float64")


def test_http_answers_400_naming_column_and_row():
    """The service surfaces the engine's refusal: 400 with the column and row, for every body form."""
    import io
    import json

    from fastapi.testclient import TestClient
    from sketchql.service.app import create_app

    def arrow(k):
        t = pa.table({"ts": [1.0, 2.0], "k": pa.array(k, pa.float64()), "x": [1.0, 1.0]})
        sink = io.BytesIO()
        with pa.ipc.new_stream(sink, t.schema) as w:
            w.write_table(t)
        return sink.getvalue()

    bodies = [
        ({"json": {"rows": [{"ts": 1, "k": 1, "x": 1.0}, {"ts": 2, "k": 1e30, "x": 1.0}]}}),
        ({"json": {"columns": {"ts": [1, 2], "k": [1, -1e30], "x": [1.0, 1.0]}}}),
        ({"content": "\n".join(json.dumps(r) for r in ({"ts": 1, "k": 1, "x": 1.0}, {"ts": 2, "k": 9.3e18, "x": 1.0})),
          "headers": {"content-type": "application/x-ndjson"}}),
        ({"content": arrow([1.0, 9.3e18]), "headers": {"content-type": "application/vnd.apache.arrow.stream"}}),
        ({"content": arrow([1.0, -1e30]), "headers": {"content-type": "application/vnd.apache.arrow.stream"}}),
    ]
    with TestClient(create_app(demo=False)) as c:
        assert c.post("/streams", json={"sql": "CREATE STREAM S (k INT, x DOUBLE) TIMESTAMP ts"}).status_code == 201
        for kw in bodies:
            r = c.post("/streams/S/batches", **kw)
            assert r.status_code == 400, (kw, r.status_code, r.text)
            err = r.json()["error"]
            assert err.get("column_name") == "k" and err.get("row") == 1, err
            assert "does not fit in 64 bits" in err["message"], err
        r = c.post("/streams/S/batches", json={"rows": [{"ts": 1, "k": -2 ** 63, "x": 1.0},
                                                        {"ts": 2, "k": 2 ** 63 - 1, "x": 1.0}]})
        assert r.status_code == 200, r.text
        assert c.get("/streams/S").status_code == 200
