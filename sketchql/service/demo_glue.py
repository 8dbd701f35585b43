"""The embedded demo on a durable service: its writes go through the operation log, and a
restarted server resumes the feed where the data directory left it.

:class:`~sketchql.service.demo.DemoFeeder` writes through ``state.engine.push`` /
``.heartbeat`` and declares through ``state.execute_ddl`` / ``state.register``.
:func:`make_feeder` hands it a :class:`FeederState` whose ``engine`` routes
``push`` and ``heartbeat`` to :meth:`ServiceState.push` / ``heartbeat`` (so they
are logged, collected into the result buffers and replayed after a crash)
and passes everything else through.

On a data directory that already holds the demo (meta key ``demo``), the
feeder is not set up again: its data is regenerated from the recorded seed
and size (deterministic), its position put at the streams' clock (the feeder
heartbeats both streams to the end of every slice, so that clock is where
it stopped), and its query ids taken from the record (deleted ones stay
deleted).

>>> from sketchql.service.state import ServiceState
>>> st = ServiceState()
>>> f = make_feeder(st, seed=1, options={"max_tuples": 200})
>>> f.step() > 0 and st.engine.stream("Store1").tuples_in > 0
True
"""
from __future__ import annotations

import logging

import numpy as np

from .demo import DemoFeeder, demo_data

log = logging.getLogger("sketchql.service")
DEMO_STREAMS = ("Store1", "Store2")


class _LoggedEngine:
    def __init__(self, state):
        self._state = state

    def push(self, name, batch):
        n = len(next(iter(batch.values()))) if isinstance(batch, dict) and batch else 0
        cols = {k: np.asarray(v) for k, v in batch.items()}
        self._state.push(name, cols, n, wait=False)

    def heartbeat(self, name, ts):
        self._state.heartbeat(name, float(ts), wait=False)

    def __getattr__(self, item):
        return getattr(self._state.engine, item)


class FeederState:
    """What the demo feeder sees of the service state (writes logged, see module docstring)."""

    def __init__(self, state):
        self._state = state
        self.engine = _LoggedEngine(state)

    @property
    def lock(self):
        return self._state.lock

    def execute_ddl(self, sql):
        return self._state.execute_ddl(sql)

    def register(self, sql):
        return self._state.register(sql)

    def set_controls(self, kind, name, values):
        return self._state.set_controls(kind, name, values)

    @property
    def demo(self):
        return self._state.demo

    @demo.setter
    def demo(self, value):
        self._state.demo = value


def _batches_before(feeder) -> int:
    """The batches the feeder pushed to reach its position: it pushes each stream's tuples of every
    slice ``(k w, (k+1) w]`` (``w = speed * tick``; the first slice includes 0) as one batch, so that is
    the number of distinct slices among the tuples before the position (with the current speed)."""
    w = feeder.speed * feeder.tick
    n = 0
    for pos, d in zip(feeder._pos, feeder._data):
        t = np.asarray(d[0][:pos], dtype=np.float64)
        if len(t) and w > 0:
            n += len(np.unique(np.maximum(np.ceil(t / w) - 1, 0)))
    return int(n)


def make_feeder(state, seed: int = 7, options: dict | None = None) -> DemoFeeder:
    """A set-up feeder: new (declares the demo) or resumed from the data directory."""
    options = dict(options or {})
    store = state.store
    rec = store.get_meta("demo") if store is not None else None
    have = all(state.engine.catalog.get(s) is not None for s in DEMO_STREAMS)
    if rec is None and have:          # declared, but the record was not written (crash in between)
        rec = {"seed": seed, "max_tuples": options.get("max_tuples", 200_000),
               "query_ids": [q.id for q in state.engine.queries]}
    if rec is not None and have:
        if rec.get("seed") != seed or rec.get("max_tuples") != options.get("max_tuples", rec.get("max_tuples")):
            log.warning("the data directory holds a demo with seed=%s max_tuples=%s; resuming that one",
                        rec.get("seed"), rec.get("max_tuples"))
        options["max_tuples"] = rec["max_tuples"]
        feeder = DemoFeeder(FeederState(state), seed=rec["seed"], **options)
        feeder._data = demo_data(feeder.max_tuples, feeder.seed, feeder.mean_interarrival)
        feeder.query_ids = list(rec.get("query_ids", []))
        clocks = [state.engine.stream(s).clock for s in DEMO_STREAMS]
        clock = float(min(clocks)) if all(np.isfinite(clocks)) else 0.0
        feeder.clock = clock
        feeder._pos = [int(np.searchsorted(d[0], clock, side="right")) for d in feeder._data]
        feeder.pushed = int(sum(state.engine.stream(s).tuples_in for s in DEMO_STREAMS))
        feeder.batches = _batches_before(feeder)
        state.demo = feeder
        return feeder
    feeder = DemoFeeder(FeederState(state), seed=seed, **options)
    feeder.setup()
    if store is not None:
        store.set_meta("demo", {"seed": feeder.seed, "max_tuples": feeder.max_tuples,
                                "query_ids": list(feeder.query_ids)})
    return feeder
