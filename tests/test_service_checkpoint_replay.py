"""The replay-time checkpoint trigger: a checkpoint is due once the engine time spent on logged
operations since the last one reaches ``max_replay_s``, and a restart then replays about that much."""
import time

from service_server import make_batches
from sketchql.service.app import Checkpointer
from sketchql.service.durability import OpLog
from sketchql.service.state import ServiceState

DDL = "CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts"
QUERIES = ["SELECT k, COUNT(*) AS n FROM S [RANGE 10 SECONDS] GROUP BY k",
           "SELECT k, v FROM S [RANGE 5 SECONDS] WHERE v > 0.5"]


def _state(path):
    st = ServiceState(seed=3, store=OpLog(str(path), sync=False))
    st.execute_ddl(DDL)
    for sql in QUERIES:
        st.register(sql)
    return st


def test_replay_cost_counts_engine_time_of_logged_ops_and_triggers_a_checkpoint(tmp_path):
    st = _state(tmp_path)
    ck = Checkpointer(st, every_tuples=10**12, interval_s=1e9, max_replay_s=0.0)
    batches = make_batches(12, 400, seed=2)
    for cols in batches[:6]:
        st.push("S", dict(cols), len(cols["ts"]))
    st.heartbeat("S", float(batches[5]["ts"].max()))
    spent = st.replay_cost_s
    assert spent > 0
    assert not ck.due()                              # 0: the trigger is off
    ck.max_replay_s = spent * 2
    assert not ck.due()                              # below the bound
    ck.max_replay_s = spent / 2
    assert ck.due()
    ck.run_once()
    assert ck.error is None and st.replay_cost_s == 0.0 and not ck.due()
    t0 = time.perf_counter()
    for cols in batches[6:]:
        st.push("S", dict(cols), len(cols["ts"]))
    tail_cost = st.replay_cost_s
    assert 0 < tail_cost <= time.perf_counter() - t0
    st.store.close()

    again = ServiceState(seed=3, store=OpLog(str(tmp_path), sync=False))
    info = again.recover()
    assert info["checkpoint_seq"] > 0 and info["replayed_ops"] == 6 and not info["errors"]
    # the replayed tail is still not in a checkpoint: it still counts
    assert again.replay_cost_s > 0
    again.store.close()


def test_durability_reports_the_trigger(tmp_path):
    from fastapi.testclient import TestClient
    from sketchql.service.app import create_app

    app = create_app(demo=False, data_dir=str(tmp_path), sync=False, checkpoint_max_replay_s=1.5)
    with TestClient(app) as c:
        d = c.get("/durability").json()
        assert d["checkpoint_max_replay_s"] == 1.5 and d["replay_estimate_s"] == 0.0
