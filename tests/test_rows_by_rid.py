"""RowsByRid against the per-change dict it replaced (the oracle): same live rows, errors and order-free content."""
import numpy as np
from hypothesis import given, settings, strategies as st

from sketchql.engine import rows_by_rid
from sketchql.engine.rows_by_rid import RowsByRid
from sketchql.operators.changes import Batch, Changes


def _oracle(batches):
    store, err = {}, {}
    for ch, ev in batches:
        for i, (s, r) in enumerate(zip(ch.sign.tolist(), ch.rid.tolist())):
            if s > 0:
                store[r] = (ch.columns["k"][i].item(), ch.columns["name"][i])
                err[r] = float(ev[i])
            else:
                store.pop(r, None)
                err.pop(r, None)
    return store, err


change = st.tuples(st.integers(0, 30), st.sampled_from([1, -1]), st.integers(-5, 5),
                   st.floats(0, 1, allow_nan=False))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(change, min_size=1, max_size=40), min_size=1, max_size=12),
       st.sampled_from([1, 3, 4096]))
def test_same_live_rows_as_the_dict_oracle(batches, fold_min):
    old = rows_by_rid.FOLD_MIN
    rows_by_rid.FOLD_MIN = fold_min          # fold after every batch, every few, or only on read
    try:
        s = RowsByRid()
        made = []
        for b in batches:
            rid = np.array([c[0] for c in b], np.int64)
            sign = np.array([c[1] for c in b], np.int8)
            k = np.array([c[2] for c in b], np.int64)
            name = np.array([f"n{c[2]}" if c[2] % 3 else None for c in b], dtype=object)
            ev = np.array([c[3] for c in b])
            ch = Changes(Batch({"k": k, "name": name}, ts=np.zeros(len(b))), sign, np.zeros(len(b)), rid,
                         sort=False)
            made.append((ch, ev))
            s.apply(ch, errv=ev)
        want, want_err = _oracle(made)
        assert s.as_dict() == want
        assert len(s) == len(want)
        assert dict(zip(s.rid.tolist(), s.err.tolist())) == want_err
        assert s.max_err() == (max(want_err.values()) if want_err else None)
        f = s.frame(["a", "b"])
        assert sorted(zip(f["a"].tolist(), [str(x) for x in f["b"]])) == \
            sorted((a, str(b)) for a, b in want.values())
    finally:
        rows_by_rid.FOLD_MIN = old


def test_rid_offset_and_empty():
    s = RowsByRid()
    assert not s and s.max_err() is None and s.first_row() is None and len(s.frame(["x"])) == 0
    b = Batch({"x": np.array([1.5, 2.5])}, ts=np.zeros(2))
    s.apply(Changes(b, [1, 1], [0, 0], [1, 2]), rid_offset=100)
    assert s.as_dict() == {101: (1.5,), 102: (2.5,)}
    assert s.max_err() is None          # no errv: no error values


def test_checkpoint_from_before_columnar_rows_still_loads():
    """A QueryPrecision pickled with dict live rows (older checkpoints) loads into RowsByRid."""
    from sketchql.engine import Engine
    eng = Engine(seed=1)
    eng.execute("CREATE STREAM S (g INT, v DOUBLE) TIMESTAMP ts")
    q = eng.register("SELECT g, SUM(v) AS s FROM S [RANGE 100] GROUP BY g WITH ERROR 0.1 CONFIDENCE 0.9")
    eng.push("S", {"ts": np.arange(1000) * 0.1, "g": np.arange(1000) % 2, "v": np.ones(1000)})
    qp = q._precision
    want = qp._live.as_dict()
    want_err = qp._live.max_err()
    old = dict(qp.__dict__)
    old["_live"] = want
    old["_relerr"] = dict(zip(qp._live.rid.tolist(), qp._live.err.tolist()))
    old["_shadow_live"] = qp._shadow_live.as_dict()
    fresh = object.__new__(type(qp))
    fresh.__setstate__(old)
    assert fresh._live.as_dict() == want and fresh._live.max_err() == want_err
    assert fresh._shadow_live.as_dict() == qp._shadow_live.as_dict()
