"""Load shedding (stream knob ``shed_rate``) with every kind of operator (issue 12 audit).

Shedding adds the inclusion-probability column ``__pi`` to the batches it reduces, only while
it drops anything; a query whose window had already stored batches without it failed on every
later push (``WindowScan: batch columns [..., '__pi'] differ from earlier [...]``; the shared
window store silently kept the first schema).  The contract of shedding: each query sees the
kept tuples, exactly -- an exact query answers as if only the kept tuples had been pushed, a
promising-tuple query a subset of that (all of it with a huge budget), an approximate one
scales by the keep probability.

Oracle: the kept tuples K (unique ids, counted against the stream's ``tuples_kept``) pushed
into a second engine without shedding: every exact query's snapshots equal row for row."""
import numpy as np
import pandas as pd
import pytest

from sketchql.engine import Engine

DDL = ("CREATE STREAM W (i INT, k INT, v DOUBLE) TIMESTAMP ts; CREATE STREAM V (j INT, k INT) TIMESTAMP ts; "
       "CREATE SUMMARY sw ON W (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3); "
       "CREATE SUMMARY sv ON V (k) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 3)")
PT_SEL = "SELECT W.i, W.k FROM W [RANGE 10] WHERE W.k BETWEEN 1 AND 3 WITH PREFERENCE desc W.k "
EXACT = {
    "sel": "SELECT W.i, W.k FROM W [RANGE 10] WHERE W.k BETWEEN 1 AND 3",
    "agg": "SELECT W.k, COUNT(*) AS n, SUM(W.v) AS s FROM W [RANGE 10] GROUP BY W.k",
    "unbounded": "SELECT W.i FROM W [UNBOUNDED]",
    "rows": "SELECT W.i FROM W [ROWS 7]",
    "join": "SELECT W.i, V.j FROM W [RANGE 5], V [RANGE 5] WHERE W.k = V.k",
    "pt_sel_huge": PT_SEL + "WITHIN 100000 PROBES PER TUPLE",
}
OTHER = {
    "pt_sel_small": PT_SEL + "WITHIN 2 PROBES PER TUPLE",
    "pt_agg": "SELECT COUNT(*) AS n FROM W [RANGE 10] WHERE W.k BETWEEN 1 AND 3 WITH PREFERENCE desc W.k "
              "WITHIN 3 PROBES PER TUPLE",
    "pt_join": "SELECT W.i, V.j FROM W, V WHERE W.k = V.k WITH PREFERENCE desc W.k WINDOW 10 SECONDS "
               "WITHIN 2 PROBES PER TUPLE",
    "approx": "SELECT COUNT(*) AS n FROM W [RANGE 10] WITH ERROR 0.2 CONFIDENCE 0.95",
}
RATES = [0.0, 0.0, 0.0, 0.5, 0.5, 0.5, 0.5, 0.0, 0.0, 0.0]     # off -> on -> off again


def _batches(seed=2):
    rng = np.random.default_rng(seed)
    out, i0 = [], 0
    for t in range(len(RATES)):
        n = 60
        w = {"ts": np.sort(rng.uniform(2 * t, 2 * t + 2, n)), "i": np.arange(i0, i0 + n), "k": rng.integers(0, 6, n),
             "v": np.round(rng.random(n), 3)}
        v = {"ts": np.sort(rng.uniform(2 * t, 2 * t + 2, 20)), "j": np.arange(i0, i0 + 20), "k": rng.integers(0, 6, 20)}
        out.append((w, v))
        i0 += n
    return out


def _norm(df):
    df = df[[c for c in df.columns if not c.startswith("__")]]
    return df.sort_values(list(df.columns)).reset_index(drop=True)


def _engine(queries, share=True):
    e = Engine(seed=1)
    e.set_control("share_plans", share)
    e.execute(DDL)
    qs = {}
    for name, sql in queries.items():
        qs[name] = e.register(sql)
        qs[name].set_knob("retain_changes", None)
    return e, qs


@pytest.mark.parametrize("share", [True, False])
def test_shedding_mid_stream_every_operator(share):
    batches = _batches()
    e, qs = _engine({**EXACT, **OTHER}, share)
    snaps = []
    for (w, v), rate in zip(batches, RATES):
        e.stream("W").set_knob("shed_rate", rate)
        e.push("W", dict(w))           # used to raise from the first shed batch on
        e.push("V", dict(v))
        t = float(min(w["ts"][-1], v["ts"][-1]))
        snaps.append((t, {n: _norm(q.snapshot(t)) for n, q in qs.items()}))
    # the kept tuples: the UNBOUNDED scan's rows, counted by the stream's own counter
    kept = set(snaps[-1][1]["unbounded"]["i"].tolist())
    h = e.stream("W")
    n_in = sum(len(w["i"]) for w, _ in batches)
    assert h.tuples_in == n_in and len(kept) == h.tuples_kept
    for (w, _), rate in zip(batches, RATES):
        share_kept = np.isin(w["i"], list(kept)).mean()
        if rate == 0.0:
            assert share_kept == 1.0
        else:
            assert 0.3 < share_kept < 0.7          # binomial(60, 0.5): 4+ sigma
    # oracle: the kept tuples into an engine that does not shed
    ref, rq = _engine(EXACT, share)
    for (w, v), (t, snap) in zip(batches, snaps):
        m = np.isin(w["i"], list(kept))
        ref.push("W", {c: a[m] for c, a in w.items()})
        ref.heartbeat("W", float(w["ts"][-1]))     # the shed tuples still moved W's clock
        ref.push("V", dict(v))
        for name, q in rq.items():
            want = _norm(q.snapshot(t))
            pd.testing.assert_frame_equal(snap[name], want, check_dtype=False, obj=f"{name} at {t:g}")
        # a small budget: a subset of the exact answer over the kept tuples
        small = snap["pt_sel_small"].merge(snap["sel"], how="left", indicator=True)
        assert (small["_merge"] == "both").all() and len(small) <= len(snap["sel"])
        assert all(i in kept for i in snap["pt_join"]["i"])
    pairs = qs["pt_join"].results()
    pairs = pairs[pairs["__sign"] == 1] if "__sign" in pairs else pairs
    wk = {int(i): int(k) for w, _ in batches for i, k in zip(w["i"], w["k"])}
    vk = {int(j): int(k) for _, v in batches for j, k in zip(v["j"], v["k"])}
    assert len(pairs) and all(wk[int(a)] == vk[int(b)] and int(a) in kept for a, b in zip(pairs["i"], pairs["j"]))
    # approximate: scaled by the keep probability, its interval covers the count of every pushed
    # tuple in the window (fixed seeds: deterministic), while fewer than that were kept
    allts = np.concatenate([w["ts"] for w, _ in batches])
    keptts = np.concatenate([w["ts"][np.isin(w["i"], list(kept))] for w, _ in batches])
    for t, snap in snaps:
        a = snap["approx"].iloc[0]
        true, nkept = [int(((x > t - 10) & (x <= t)).sum()) for x in (allts, keptts)]
        assert a["n_lo"] <= true <= a["n_hi"], (t, dict(a), true)
        if nkept < true:
            assert a["n"] > nkept


def test_http_patch_shed_rate_then_push_with_a_preference_selection():
    """The audit's repro over HTTP: PATCH /control/stream/W {"shed_rate": 0.5}, then pushes to a
    stream with a PREFERENCE selection: every push 200 and applied (each was acknowledged, then
    failed in the apply thread: rejected_rows counted as apply_error), and the selection's rows
    are distinct pushed qualifying ones, also from the shed batches."""
    from fastapi.testclient import TestClient
    from sketchql.service.app import create_app

    rng = np.random.default_rng(4)
    with TestClient(create_app(demo=False)) as c:
        assert c.post("/streams", json={"sql": "CREATE STREAM W (i INT, k INT) TIMESTAMP ts"}).status_code == 201
        assert c.post("/streams", json={"sql": "CREATE SUMMARY sw ON W (k) WITH GRANULARITY 10 SECONDS "
                                               "AND COLLAPSE(2, 3)"}).status_code == 201
        r = c.post("/queries", json={"sql": "SELECT W.i FROM W [RANGE 10] WHERE W.k BETWEEN 1 AND 3 "
                                            "WITH PREFERENCE desc W.k WITHIN 50 PROBES PER TUPLE"})
        assert r.status_code == 201, r.text
        qid = r.json()["id"]
        pushed = {}
        for t in range(6):
            if t == 1:
                r = c.patch("/control/stream/W", json={"shed_rate": 0.5})
                assert r.status_code == 200, r.text
            rows = [{"ts": t + j / 20, "i": 20 * t + j, "k": int(rng.integers(0, 5))} for j in range(20)]
            pushed.update({x["i"]: x["k"] for x in rows})
            r = c.post("/streams/W/batches", json={"rows": rows})
            assert r.status_code == 200, r.text
        got = c.get(f"/queries/{qid}/results", params={"since": 0, "limit": 10_000}).json()
        ids = [x["row"]["i"] for x in got["rows"] if x["sign"] == 1]
        assert ids and all(1 <= pushed[i] <= 3 for i in ids)
        assert len(set(ids)) == len(ids)
        assert any(i >= 20 for i in ids)              # rows of the batches pushed while shedding
        stats = c.get("/streams/W").json()["stats"]     # acknowledged and applied (not apply_error)
        assert stats["rejected_rows"] == 0 and stats["tuples_in"] == 120, stats
        assert 20 + 30 <= stats["tuples_kept"] < 120
