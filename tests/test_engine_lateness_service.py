"""allowed_lateness through the service: the PATCH shows the truth (it is the slack), a late batch within
the bound is accepted over HTTP and reaches the query; a server restarted from a checkpoint written while
allowed_lateness was a knob of its own, plus a logged knob change replayed, continues exactly like a run
that never stopped."""
import numpy as np

from test_service_helpers import client
from sketchql.service.durability import OpLog
from sketchql.service.state import ServiceState

DDL = "CREATE STREAM A (k INT) TIMESTAMP ts; CREATE STREAM B (k INT) TIMESTAMP ts"
JOIN = "SELECT A.k, A.ts, B.ts FROM A [RANGE 5], B [RANGE 5] WHERE A.k = B.k"


def _rows(state, qid):
    log = state.logs[qid]
    out = log.read(0, log.total)
    assert out["missed"] == 0
    return [(r["sign"], r["at"], tuple(sorted(r["row"].items()))) for r in out["rows"]]


def test_patch_allowed_lateness_shows_the_slack_and_a_late_batch_is_accepted():
    c = client()
    assert c.post("/streams", json={"sql": DDL}).status_code in (200, 201)
    qid = c.post("/queries", json={"sql": JOIN}).json()["id"]
    for s in "AB":
        r = c.patch(f"/control/stream/{s}", json={"allowed_lateness": 3.0})
        assert r.status_code == 200, r.text
        knobs = r.json()["table"]["knobs"]
        assert knobs["allowed_lateness"]["value"] == knobs["slack"]["value"] == 3.0
    for s, ts in (("A", [1.0, 4.0]), ("B", [4.0]), ("A", [2.5]), ("A", [5.0]), ("B", [5.0])):
        r = c.post(f"/streams/{s}/batches", json={"columns": {"ts": ts, "k": [1] * len(ts)}})
        assert r.status_code == 200, r.text
    for s in "AB":
        assert c.post(f"/streams/{s}/heartbeat", json={"ts": 50.0}).status_code == 200
    rows = c.get(f"/queries/{qid}/results", params={"since": 0, "limit": 100}).json()["rows"]
    pairs = sorted((r["row"]["A.ts"], r["row"]["B.ts"]) for r in rows if r["sign"] == 1)
    a_ts, b_ts = [1.0, 2.5, 4.0, 5.0], [4.0, 5.0]
    assert pairs == sorted((a, b) for a in a_ts for b in b_ts if abs(a - b) < 5)
    st = c.get("/control/stream/A").json()
    assert st["stats"]["slack_late_beyond_slack"] == 0 and st["stats"]["tuples_in"] == 4
    r = c.patch("/control/stream/A", json={"allowed_lateness": -1})
    assert r.status_code == 422 and c.get("/control/stream/A").json()["knobs"]["slack"]["value"] == 3.0


def test_restart_from_an_old_checkpoint_and_a_replayed_knob_change(tmp_path):
    """The checkpoint holds stream A as the old code kept it (allowed_lateness 6 apart from slack 0); the
    log after it sets B's allowed_lateness.  After recovery both are slack 6 and the restarted state
    continues over tuples up to 4 s out of order exactly like a reference that set the slack directly."""
    rng = np.random.default_rng(4)
    ref = ServiceState(seed=3)
    st = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    for s in (ref, st):
        s.execute_ddl(DDL)
        s.register(JOIN)
    ref.set_controls("stream", "A", {"slack": 6.0})
    st.engine.stream("A")._knobs.update({"allowed_lateness": 6.0, "slack": 0.0})
    st.checkpoint()
    for s in (ref, st):                       # logged after the checkpoint: replayed at recovery
        s.set_controls("stream", "B", {"allowed_lateness": 6.0})
    st.store.close()
    again = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    info = again.recover()
    assert not info["errors"] and info["replayed_ops"] == 1 and info["checkpoint_seq"] > 0
    for name in "AB":
        k = again.engine.stream(name).knobs()
        assert k["allowed_lateness"] == k["slack"] == 6.0
        assert again.engine.controls.get("stream", name).knobs["slack"].value == 6.0
    late, newest = 0, {"A": -np.inf, "B": -np.inf}
    for i in range(12):
        for name in "AB":
            ts = np.round(rng.uniform(i * 4.0, i * 4.0 + 8.0, 6), 2)       # up to 4 s behind the newest
            cols = {"ts": ts, "k": rng.integers(0, 3, 6)}
            late += int(np.sum(ts < newest[name]))          # older than a tuple pushed before
            newest[name] = max(newest[name], float(ts.max()))
            for s in (ref, again):
                s.push(name, dict(cols), 6)
    for s in (ref, again):
        s.heartbeat("A", 100.0)
        s.heartbeat("B", 100.0)
    assert late > 20
    assert _rows(again, 1) == _rows(ref, 1) and len(_rows(ref, 1)) > 50
    for name in "AB":
        assert len(again.engine.stream(name).late_tuples()) == 0
        assert again.engine.stream(name).stats()["tuples_in"] == 72
    again.store.close()


def test_late_policy_error_refuses_the_batch_live_and_after_recovery(tmp_path):
    """A slack stream with late_policy 'error': the batch holding a tuple later than the slack is
    refused whole (the service answers an error and logs an abort), so the live state and the state a
    restart rebuilds from the log agree (hS found live [1, 9] vs recovered [1, 5] when the engine
    applied the rest of the batch and raised)."""
    import numpy as np
    import pytest

    from sketchql.service.durability import OpLog
    from sketchql.service.errors import ApiError
    from sketchql.service.state import ServiceState

    st = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    st.execute_ddl("CREATE STREAM A (k INT) TIMESTAMP ts")
    st.register("SELECT k, ts FROM A [RANGE 100]")
    st.set_controls("stream", "A", {"slack": 1.0, "late_policy": "error"})
    st.push("A", {"ts": np.array([1.0, 5.0]), "k": np.array([1, 5])}, 2)
    with pytest.raises(ApiError, match="nothing of the batch was applied"):
        st.push("A", {"ts": np.array([2.0, 8.0, 9.0]), "k": np.array([2, 8, 9])}, 3)
    st.push("A", {"ts": np.array([8.0, 9.0]), "k": np.array([8, 9])}, 2)
    st.heartbeat("A", 50.0)
    live = sorted(r["row"]["k"] for r in st.logs[1].read(0, 100)["rows"])
    st.store.close()
    again = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    assert again.recover()["errors"] == []
    rec = sorted(r["row"]["k"] for r in again.logs[1].read(0, 100)["rows"])
    assert live == rec == [1, 5, 8, 9]
    again.store.close()
