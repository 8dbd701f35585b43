"""The embedded demo: two store streams, a summary on each, demo queries and a background feeder.

On start it declares::

    CREATE STREAM Store1 (ItemID INT, Price DOUBLE) TIMESTAMP ts
    CREATE STREAM Store2 (ItemID INT, Price DOUBLE) TIMESTAMP ts
    CREATE SUMMARY s1 ON Store1 (ItemID) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)
    CREATE SUMMARY s2 ON Store2 (ItemID) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)

and registers :data:`DEMO_QUERIES`: a windowed equi-join, evaluated EXACT, a
grouped aggregate, a sliding count/sum, and the three standing queries the
dashboard leads with (:data:`DASHBOARD_QUERIES`) -- the paper's Figure 6
query, a ``WITH PREFERENCE desc`` promising-tuple join over a one-minute
window on a budget of 50 probes per tuple, whose pairs are exact matches
found most frequent first; the same join ``WITH PREFERENCE asc`` (the
outliers: rarest join values first); and ``AVG(Price)`` over a sliding
minute ``WITH ERROR 0.05 CONFIDENCE 0.95``.  The data is the seeded retail
generator of :mod:`sketchql.data` (Zipf item popularity with drift,
exponential inter-arrival times, mean 100 ms per store), generated once up
front for ``max_tuples`` tuples in total: memory is bounded by that and by
the windows, which expire query state.  Each ``tick`` seconds of wall time
the feeder pushes the next ``speed * tick`` seconds of *event* time to both
streams and heartbeats them to the end of that slice (time comes from the
data, never from the wall clock).  When the data is used up the feeder
stops (``status()["finished"]``).

>>> from sketchql.service.state import ServiceState
>>> st = ServiceState()
>>> demo = DemoFeeder(st, seed=1, max_tuples=400)
>>> demo.setup(); demo.step() > 0
True
>>> demo.status()["clock"]
10.0
"""
from __future__ import annotations

import numpy as np

from ..errors import SketchQLError
from .background import BackgroundLoop

DEMO_DDL = """
CREATE STREAM Store1 (ItemID INT, Price DOUBLE) TIMESTAMP ts;
CREATE STREAM Store2 (ItemID INT, Price DOUBLE) TIMESTAMP ts;
CREATE SUMMARY s1 ON Store1 (ItemID) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4);
CREATE SUMMARY s2 ON Store2 (ItemID) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)
"""

DEMO_QUERIES = [
    "SELECT S1.ItemID, S1.Price AS p1, S2.Price AS p2, S1.ts AS t1, S2.ts AS t2 "
    "FROM Store1 [RANGE 2 SECONDS] S1, Store2 [RANGE 2 SECONDS] S2 WHERE S1.ItemID = S2.ItemID EXACT",
    "SELECT ItemID, COUNT(*) AS n, AVG(Price) AS avg_price FROM Store1 [RANGE 1 MINUTE] GROUP BY ItemID",
    "SELECT COUNT(*) AS n, SUM(Price) AS revenue FROM Store2 [RANGE 1 MINUTE SLIDE 10 SECONDS]",
    "SELECT S1.ItemID, S1.ts AS t1, S2.ts AS t2 FROM Store1 S1, Store2 S2 WHERE S1.ItemID = S2.ItemID "
    "WITH PREFERENCE desc SUMMARY.Estimate.Count(S1.ItemID), SUMMARY.Estimate.Count(S2.ItemID) "
    "FADE FACTOR 0.8 WINDOW 1 MINUTE WITHIN 50 PROBES PER TUPLE",
    # the outliers: the same join, rarest join values first
    "SELECT S1.ItemID, S1.ts AS t1, S2.ts AS t2 FROM Store1 S1, Store2 S2 WHERE S1.ItemID = S2.ItemID "
    "WITH PREFERENCE asc SUMMARY.Estimate.Count(S1.ItemID), SUMMARY.Estimate.Count(S2.ItemID) "
    "FADE FACTOR 0.8 WINDOW 1 MINUTE WITHIN 50 PROBES PER TUPLE",
    # an aggregate under an error contract (relative error 5 % at 95 % confidence)
    "SELECT AVG(Price) AS avg_price FROM Store1 [RANGE 1 MINUTE SLIDE 10 SECONDS] "
    "WITH ERROR 0.05 CONFIDENCE 0.95",
]

#: knobs set on demo queries after registration (by position in DEMO_QUERIES): the contract query
#: audits every other window and the two PT joins every fourth against a shadow exact plan, so the
#: dashboard shows audited error and recall next to the estimated ones
DEMO_KNOBS = {3: {"audit_share": 0.25}, 4: {"audit_share": 0.25}, 5: {"audit_share": 0.5}}

#: the ids (1-based, in registration order) of the three standing queries the dashboard leads with:
#: the desc PT-Join, the asc (outlier) PT-Join and the AVG with an error contract
DASHBOARD_QUERIES = (4, 5, 6)


def _numpy_stores(n_per_store: int, mean_ia: float, seed: int):
    """Fallback generator: two stores, Zipf items, exponential gaps (if sketchql.data is unusable)."""
    out = []
    for s in range(2):
        rng = np.random.default_rng([seed, s])
        ts = np.cumsum(rng.exponential(mean_ia, n_per_store))
        item = (rng.zipf(1.3, n_per_store) - 1) % 2000 + 1
        price = np.round(rng.lognormal(np.log(10.0), 0.8, n_per_store), 2)
        out.append((ts, item.astype(np.int64), price))
    return out


def demo_data(max_tuples: int, seed: int, mean_interarrival: float = 0.1):
    """``[(ts, item, price)] * 2``: about ``max_tuples`` tuples in total over the two stores."""
    duration = max(max_tuples / 2.0 * mean_interarrival, 1.0)
    try:
        from ..data import generate_stores
        stores = generate_stores(2, duration=duration, mean_interarrival=mean_interarrival, seed=seed)
        return [(s.ts, s.item, s.price) for s in stores]
    except (ImportError, AttributeError, TypeError, SketchQLError):
        return _numpy_stores(max_tuples // 2, mean_interarrival, seed)


class DemoFeeder(BackgroundLoop):
    """Declares the demo schema and queries, then feeds generated batches (see module docstring).

    ``speed``: seconds of event time per ``tick`` seconds of wall time divided
    by ``tick`` (default 10: ten seconds of stream every second);
    ``max_tuples``: total tuples generated (both stores).
    """

    def __init__(self, state, seed: int = 7, speed: float = 10.0, tick: float = 1.0,
                 max_tuples: int = 200_000, mean_interarrival: float = 0.1):
        self.state = state
        self.seed = int(seed)
        self.speed = float(speed)
        self.tick = float(tick)
        self.max_tuples = int(max_tuples)
        self.mean_interarrival = float(mean_interarrival)
        self.streams = ("Store1", "Store2")
        self.query_ids: list[int] = []
        self.pushed = 0
        self.skipped = 0
        self.batches = 0
        self.clock = 0.0
        self.error = None
        self._data = None
        self._pos = [0, 0]
        self._init_loop()

    # -- set-up ------------------------------------------------------------------
    def setup(self):
        st = self.state
        st.execute_ddl(DEMO_DDL)
        for i, sql in enumerate(DEMO_QUERIES):
            qid = st.register(sql)["id"]
            self.query_ids.append(qid)
            if i in DEMO_KNOBS:
                st.set_controls("query", f"q{qid}", DEMO_KNOBS[i])
        self._data = demo_data(self.max_tuples, self.seed, self.mean_interarrival)
        st.demo = self

    @property
    def end(self) -> float:
        return float(max(d[0][-1] if len(d[0]) else 0.0 for d in self._data))

    @property
    def finished(self) -> bool:
        return self._data is not None and all(p >= len(d[0]) for p, d in zip(self._pos, self._data))

    # -- feeding -------------------------------------------------------------------
    def step(self) -> int:
        """Push the next ``speed * tick`` seconds of both stores; returns tuples pushed."""
        if self._data is None:
            raise RuntimeError("DemoFeeder.setup() first")
        if self.finished:
            return 0
        hi = self.clock + self.speed * self.tick
        n_total = 0
        st = self.state
        with st.lock:
            for i, (name, (ts, item, price)) in enumerate(zip(self.streams, self._data)):
                lo_i = self._pos[i]
                hi_i = int(np.searchsorted(ts, hi, side="right"))
                self._pos[i] = hi_i
                if hi_i <= lo_i:
                    continue
                sl = slice(lo_i, hi_i)
                t = ts[sl]
                try:
                    h = st.engine.stream(name)
                    keep = t >= h.clock            # someone else may have pushed ahead of the demo
                    self.skipped += int((~keep).sum())
                    if keep.any():
                        st.engine.push(name, {"ItemID": item[sl][keep], "Price": price[sl][keep], "ts": t[keep]})
                        n_total += int(keep.sum())
                        self.batches += 1
                except SketchQLError as exc:   # e.g. the stream was dropped: stop the demo, say why
                    self.error = f"{type(exc).__name__}: {exc}"
                    self._stop.set()
                    return n_total
            for name in self.streams:
                try:
                    st.engine.heartbeat(name, hi)
                except SketchQLError as exc:
                    self.error = f"{type(exc).__name__}: {exc}"
                    self._stop.set()
            self.clock = hi
            self.pushed += n_total
        return n_total

    def _run(self):
        while not self._stop.wait(self.tick):
            if self.finished:
                break
            try:
                self.step()
            except Exception as exc:  # never kill the server; report in /health and /demo
                self.error = f"{type(exc).__name__}: {exc}"
                break

    THREAD_NAME = "sketchql-demo"

    def start(self):
        if self._data is None:
            self.setup()
        super().start()

    def status(self) -> dict:
        # under the state lock: a step in progress has already advanced its positions
        # ("finished") but not yet counted what it pushed
        with self.state.lock:
            return self._status()

    def _status(self) -> dict:
        return {"running": self.running, "finished": self.finished,
                "streams": list(self.streams), "queries": list(self.query_ids), "clock": self.clock,
                "end": self.end if self._data is not None else None, "pushed": self.pushed,
                "skipped": self.skipped, "batches": self.batches, "max_tuples": self.max_tuples,
                "speed": self.speed, "tick": self.tick, "seed": self.seed, "error": self.error}
