"""k-constraints from SQL (STREAM §4.1): CREATE STREAM ... CONSTRAINT / ALTER STREAM ... ADD CONSTRAINT,
an ordinary SQL join over constrained streams planned with the constraint-aware join.

Oracles: the same query on an engine without constraints (the exact symmetric hash join) and the
brute-force equi-join of everything pushed; also after a violation of each kind."""
from collections import Counter

import numpy as np
import pytest

from sketchql.engine import Engine
from sketchql.errors import SketchQLError, SketchQLSemanticError

O_DDL = "CREATE STREAM O (id INT, x DOUBLE) TIMESTAMP ts"
F_DDL = "CREATE STREAM F (oid INT, y DOUBLE) TIMESTAMP ts"
JOIN = "SELECT O.id, O.x, F.y FROM O, F WHERE O.id = F.oid"


def _orders(n=300, delay=0, seed=0):
    """Orders (key i at time i) and 1-3 fulfillments each, 0.5 + U{0..delay} later."""
    rng = np.random.default_rng(seed)
    o = {"ts": np.arange(n, dtype=float), "id": np.arange(n), "x": np.round(rng.random(n), 3)}
    c = rng.integers(1, 4, n)
    keys = np.repeat(np.arange(n), c)
    t = keys + 0.5 + rng.integers(0, delay + 1, keys.shape[0]) + np.round(rng.random(keys.shape[0]) * 0.01, 4)
    order = np.argsort(t, kind="stable")
    f = {"ts": t[order], "oid": keys[order], "y": np.arange(keys.shape[0], dtype=float)}
    return o, f


def _push_all(eng, o, f, step=5.0):
    end = max(o["ts"].max(), f["ts"].max()) + step
    for lo in np.arange(0.0, end, step):
        for name, d in (("O", o), ("F", f)):
            m = (d["ts"] >= lo) & (d["ts"] < lo + step)
            if m.any():
                eng.push(name, {c: v[m] for c, v in d.items()})
    eng.heartbeat("O", end + 10.0)                                  # both clocks past the data
    eng.heartbeat("F", end + 10.0)


def _rows(q):
    df = q.snapshot()
    return Counter(zip(df["id"].tolist(), df["x"].tolist(), df["y"].tolist()))


def _brute(o, f):
    m = o["id"][:, None] == f["oid"][None, :]
    i, j = np.nonzero(m)
    return Counter(zip(o["id"][i].tolist(), o["x"][i].tolist(), f["y"][j].tolist()))


def _engine(constraints: str = "", alter: str = ""):
    eng = Engine(seed=1)
    eng.execute(O_DDL)
    eng.execute(F_DDL + constraints)
    if alter:
        eng.execute(alter)
    return eng


def _kc(q):
    (n,) = [n for n in q.plan.nodes if n.kind == "kc_join"]
    return n.op


@pytest.mark.parametrize("delay", [0, 3, 8])
def test_sql_join_over_constrained_streams_equals_the_exact_join(delay):
    o, f = _orders(delay=delay)
    from sketchql.operators.kconstraint import measure_clustered
    kc = measure_clustered(f["oid"])
    eng = _engine(f" CONSTRAINT REFERENTIAL (oid) REFERENCES O (id) K 0 CONSTRAINT CLUSTERED (oid) K {kc}")
    ref = _engine()
    q, qr = eng.register(JOIN), ref.register(JOIN)
    assert "KConstraintJoin ON O.id = F.oid" in eng.explain(JOIN)
    assert f"clustered F.oid k={kc}" in eng.explain(JOIN)
    assert "SymmetricHashJoin" in ref.explain(JOIN) and "KConstraint" not in ref.explain(JOIN)
    _push_all(eng, o, f)
    _push_all(ref, o, f)
    got = _rows(q)
    assert got == _rows(qr) == _brute(o, f)
    op = _kc(q)
    st = op.stats()
    assert not st["violations"]
    # the synopses shrink: far fewer rows to probe than the exact join keeps (every tuple of both)
    assert st["peak_synopsis_rows"] < 0.25 * (o["id"].shape[0] + f["oid"].shape[0])
    assert eng.constraints.report()[1]["holds"] is True


def test_alter_stream_adds_a_constraint_and_ordered_arrival_shrinks_the_synopsis():
    o, f = _orders(delay=2, seed=3)
    from sketchql.operators.kconstraint import measure_ordered
    ko = measure_ordered(f["oid"])
    eng = _engine(alter=f"ALTER STREAM F ADD CONSTRAINT ORDERED (oid) K {ko}")
    assert [r["kind"] for r in eng.constraints.report()] == ["ordered"]
    q = eng.register(JOIN)
    _push_all(eng, o, f)
    assert _rows(q) == _brute(o, f)
    st = _kc(q).stats()
    assert not st["violations"] and st["synopsis_rows"][0] < o["id"].shape[0] // 4   # orders under the floor left


@pytest.mark.parametrize("kind", ["clustered", "ordered", "referential"])
def test_a_violation_is_reported_and_the_output_stays_complete(kind):
    o, f = _orders(delay=0, seed=5)
    # violate: a late fulfillment of order 3 long after its cluster (and its parent), key below the floor
    late = {"ts": np.array([200.25]), "oid": np.array([3]), "y": np.array([-7.0])}
    f = {c: np.concatenate([f[c], late[c]]) for c in f}
    order = np.argsort(f["ts"], kind="stable")
    f = {c: v[order] for c, v in f.items()}
    if kind == "referential":
        # a second parent for key 10 (many-one expected), arriving after its children
        o = {"ts": np.r_[o["ts"], 150.5], "id": np.r_[o["id"], 10], "x": np.r_[o["x"], 0.999]}
        order = np.argsort(o["ts"], kind="stable")
        o = {c: v[order] for c, v in o.items()}
    clause = {"clustered": " CONSTRAINT CLUSTERED (oid) K 2",
              "ordered": " CONSTRAINT ORDERED (oid) K 2",
              "referential": " CONSTRAINT REFERENTIAL (oid) REFERENCES O (id) K 0"}[kind]
    eng = _engine(clause)
    q = eng.register(JOIN)
    _push_all(eng, o, f)
    st = _kc(q).stats()
    assert st["violations"] and st["violations"][0]["constraint"] == kind
    assert kind not in st["active"]
    assert _rows(q) == _brute(o, f)          # the set-aside tuples came back: nothing lost


def test_joins_the_constraints_do_not_cover_keep_the_exact_join():
    eng = _engine(" CONSTRAINT CLUSTERED (oid) K 1")
    assert "KConstraintJoin" in eng.explain(JOIN)
    for sql in ("SELECT O.id, F.y FROM O [RANGE 10], F [RANGE 10] WHERE O.id = F.oid",   # windows expire
                "SELECT O.id, F.y FROM O, F WHERE O.id = F.oid AND O.x = F.y",            # two equalities
                "SELECT O.id, F.y FROM O, F WHERE O.x = F.y"):                            # other columns
        assert "KConstraintJoin" not in eng.explain(sql), sql
    assert "KConstraintJoin" not in _engine().explain(JOIN)


def test_constraint_clauses_parse_and_bad_ones_say_what_and_where():
    eng = _engine(" CONSTRAINT CLUSTERED (oid) CONSTRAINT REFERENTIAL (oid) REFERENCES O (id) K 4")
    rep = eng.constraints.report()
    assert [(r["kind"], r["declared_k"]) for r in rep] == [("clustered", 0), ("referential", 4)]
    assert rep[1]["parent"] == "O.id"
    bad = {
        "ALTER STREAM F ADD CONSTRAINT CLUSTERED (nope) K 1": "no column 'nope'",
        "ALTER STREAM F ADD CONSTRAINT CLUSTERED (y) K 1": "INT columns",
        "ALTER STREAM F ADD CONSTRAINT CLUSTERED (oid) K 1.5": "integer >= 0",
        "ALTER STREAM F ADD CONSTRAINT REFERENTIAL (oid) K 1": "needs REFERENCES",
        "ALTER STREAM F ADD CONSTRAINT ORDERED (oid) REFERENCES O (id)": "take no REFERENCES",
        "ALTER STREAM F ADD CONSTRAINT REFERENTIAL (oid) REFERENCES Q (id)": "unknown stream 'Q'",
        "ALTER STREAM Z ADD CONSTRAINT CLUSTERED (oid)": "unknown stream 'Z'",
    }
    for sql, msg in bad.items():
        with pytest.raises(SketchQLSemanticError, match=msg) as e:
            eng.execute(sql)
        assert e.value.line == 1, sql
    with pytest.raises(SketchQLError, match="CLUSTERED/ORDERED/REFERENTIAL"):
        eng.execute("ALTER STREAM F ADD CONSTRAINT SORTED (oid)")
    assert len(eng.constraints.report()) == 2            # nothing half-declared
