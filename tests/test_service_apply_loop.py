"""Batches applied on the event loop (``--apply-on loop``, :mod:`sketchql.service.applier`): one engine
push per loop iteration, in log order, an item counted applied after its last step, a ``with state.lock``
elsewhere finishing an item the loop has started, and the same results as the in-process engine."""
import asyncio
import threading
import time

import numpy as np
from fastapi.testclient import TestClient

from sketchql.engine import Engine
from sketchql.service.app import create_app
from sketchql.service.applier import ApplyQueue

ARROW = "application/vnd.apache.arrow.stream"


def _steps(log, name, k):
    """An apply function whose items run in ``k`` steps, each recorded in ``log``."""
    def apply(item):
        for i in range(k):
            if i:
                yield
            log.append((item, i))
    return apply


def test_loop_mode_applies_one_step_per_iteration_in_order():
    log = []
    lock = threading.RLock()
    q = ApplyQueue(lock, _steps(log, "x", 3), max_pending=4)

    async def main():
        loop = asyncio.get_running_loop()
        assert q.attach_loop(loop) and q.mode == "loop"
        ticks = []

        def tick(n):                      # another callback, rescheduled every iteration
            ticks.append(len(log))
            if n:
                loop.call_soon(tick, n - 1)

        q.put("a")
        q.put("b")
        fut = q.when_applied(loop, 2)
        loop.call_soon(tick, 12)
        await asyncio.wait_for(fut, 5)
        return ticks

    ticks = asyncio.run(main())
    assert log == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1), ("b", 2)]
    assert q.applied == 2 and q.pending == 0 and q.error_count == 0
    # between two ticks at most one step ran: the loop served other callbacks between the steps
    assert all(b - a <= 1 for a, b in zip(ticks, ticks[1:])) and ticks[-1] == 6
    assert q._thread is None                  # no apply thread in loop mode


def test_a_lock_holder_finishes_the_started_item_then_the_queue():
    log = []
    lock = threading.RLock()
    q = ApplyQueue(lock, _steps(log, "x", 4), max_pending=4)

    async def main():
        loop = asyncio.get_running_loop()
        q.attach_loop(loop)
        q.put("a")
        q.put("b")
        while len(log) < 2:                   # the loop has run two steps of "a"
            await asyncio.sleep(0)
        # another thread takes the engine lock and applies what is left, as ExclusiveLock does; the loop
        # is held (synchronously) until that thread has the lock, so the started item is not finished here
        started = len(log)
        got_lock, done = threading.Event(), []

        def holder():
            with lock:
                got_lock.set()
                time.sleep(0.02)              # meanwhile the loop's steps find the lock taken and retry
                done.append(q.apply_pending())

        th = threading.Thread(target=holder)
        th.start()
        assert got_lock.wait(5)
        assert q._current is not None and started == 2
        while th.is_alive():
            await asyncio.sleep(0.001)
        assert done == [2]                    # the rest of "a", then "b"
        for _ in range(5):
            await asyncio.sleep(0.002)        # later steps find nothing left

    asyncio.run(main())
    assert log == [("a", i) for i in range(4)] + [("b", i) for i in range(4)]
    assert q.applied == 2 and q.pending == 0 and q._current is None


def test_a_failing_step_is_reported_and_the_next_item_applies():
    log = []

    def apply(item):
        log.append((item, 0))
        yield
        if item == "bad":
            raise RuntimeError("boom")
        log.append((item, 1))

    errors = []
    q = ApplyQueue(threading.RLock(), apply, max_pending=4, on_error=lambda item, exc: errors.append((item, str(exc))))

    async def main():
        loop = asyncio.get_running_loop()
        q.attach_loop(loop)
        q.put("bad")
        q.put("good")
        await asyncio.wait_for(q.when_applied(loop, 2), 5)

    asyncio.run(main())
    assert log == [("bad", 0), ("good", 0), ("good", 1)] and errors == [("bad", "boom")]
    assert q.applied == 2 and q.error_count == 1


def _arrow_each(batches) -> bytes:
    import pyarrow as pa

    rbs = [pa.RecordBatch.from_pydict({k: pa.array(v) for k, v in b.items()}) for b in batches]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rbs[0].schema) as w:
        for rb in rbs:
            w.write_batch(rb)
    return sink.getvalue().to_pybytes()


def test_loop_mode_results_equal_the_in_process_engine():
    """Oracle: the in-process engine pushed the same batches one by one, its changes collected after every
    push into a result buffer as the service does; the rows read over HTTP are the same, in order."""
    from sketchql.service.results import ResultLog

    rng = np.random.default_rng(5)
    data, t = [], 0.0
    for _ in range(12):
        n = int(rng.integers(50, 400))
        data.append({"k": rng.integers(0, 20, n).astype(np.int64), "v": np.round(rng.random(n), 3),
                     "ts": np.sort(rng.uniform(t, t + 1.0, n))})
        t += 1.0
    ddl = "CREATE STREAM S (k INT, v DOUBLE) TIMESTAMP ts"
    sql = "SELECT k, COUNT(*) AS n, SUM(v) AS sv FROM S [RANGE 3 SECONDS SLIDE 1 SECONDS] GROUP BY k"
    ref = Engine(seed=7)
    ref.execute(ddl)
    rq = ref.register(sql)
    rlog = ResultLog(rq.names, 10 ** 6)
    for b in data:
        ref.push("S", b)
        for ch in rq.poll():
            rlog.append(ch)
    expected = rlog.read(0, 10 ** 6)["rows"]
    assert expected

    app = create_app(demo=False, seed=7, apply_on="loop")
    st = app.state.sketchql
    with TestClient(app) as c:
        assert st.applier.mode == "loop"
        c.post("/streams", json={"sql": ddl}).raise_for_status()
        qid = c.post("/queries", json={"sql": sql}).json()["id"]
        for i in range(0, len(data), 4):            # 4 record batches per request, each its own push
            r = c.post("/streams/S/batches", content=_arrow_each(data[i:i + 4]),
                       headers={"content-type": ARROW, "x-arrow-batches": "each"})
            assert r.status_code == 200, r.text
        got = c.get(f"/queries/{qid}/results", params={"since": 0, "limit": 10000}).json()
        assert c.get("/streams/S").json()["stats"]["tuples_in"] == sum(len(b["ts"]) for b in data)
    assert got["rows"] == expected
