"""Stream handles: a declared stream's clock, counters, planner statistics and knobs."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..control import ControlError, ControlTable, Knob
from ..operators.changes import Batch
from ..planner.catalog import Schema
from ..planner.plan import StreamStats


class StreamHandle:
    """A declared stream: its clock, counters, statistics for the planner and knobs.

    Knobs (``knobs()`` / ``set_knob``): ``sample_rate`` (Bernoulli sampling
    of every pushed batch, seeded; 1.0 = keep all), load shedding, and the
    out-of-order knobs ``slack`` / ``slack_timeout`` / ``late_policy``
    (:mod:`sketchql.engine.ordering`).

    ``allowed_lateness`` is a second name of ``slack`` (one value; writing
    either sets both): a tuple up to that many seconds older than the newest
    one is held back in the slack buffer and released in timestamp order, so
    every query and index sees the stream in time order.  The operators cannot
    take a tuple older than their clock, so admitting one directly (what the
    knob did before) broke the queries reading the stream; an engine restored
    from a checkpoint written then gets ``slack = max(slack, allowed_lateness)``
    (:meth:`__setstate__`).
    """

    #: knobs that are one value under two names (``name -> the name it shares a value with``)
    SYNONYMS = {"allowed_lateness": "slack", "slack": "allowed_lateness"}

    def __init__(self, schema: Schema, seed: int = 0):
        self.schema = schema
        self.clock = -np.inf
        self.first_ts = None
        self.tuples_in = 0
        self.tuples_kept = 0
        self.batches = 0
        self.rejected_batches = 0
        self.heartbeats = 0
        self._knobs = {"sample_rate": 1.0, "allowed_lateness": 0.0, "shed_rate": 0.0, "shed_key": None}
        # out-of-order input (sketchql.engine.ordering)
        self._knobs.update({"slack": 0.0, "slack_timeout": None, "late_policy": "report"})
        self._slack = None               # SlackBuffer once a slack was set
        self.late_log_max = 10_000
        self._late: list = []            # the newest tuples later than the slack (never dropped silently)
        self._rng = np.random.default_rng(seed)
        self._distinct_sample: dict = {}

    @property
    def name(self) -> str:
        return self.schema.name

    #: the stream's knobs: domain, documentation and effect (see :mod:`sketchql.control`)
    KNOB_SPECS = {
        "sample_rate": Knob("sample_rate", 1.0, "float", lo=0.0, hi=1.0, lo_open=True,
                            doc="Bernoulli sampling of every pushed batch before any index or query sees it "
                                "(seeded); 1 keeps all",
                            effect={"memory": 1, "cpu": 1, "precision": 1}),
        "allowed_lateness": Knob("allowed_lateness", 0.0, "float", lo=0.0,
                                 doc="the slack under another name (one value: setting either sets both): "
                                     "tuples up to this many seconds older than the newest are buffered and "
                                     "released in timestamp order; later ones follow late_policy",
                                 effect={"memory": 1, "cpu": 0, "precision": 1}),
        # load shedding at the input queue (applied by sketchql.engine.precision; see sketchql.approx.sampling)
        "shed_rate": Knob("shed_rate", 0.0, "float", lo=0.0, hi=1.0, hi_open=True,
                          doc="share of pushed tuples dropped at the input (seeded; outliers of approximate "
                              "SUM/AVG columns are kept); approximate queries scale by the keep probability",
                          effect={"memory": -1, "cpu": -1, "precision": -1}),
        "shed_key": Knob("shed_key", None, "str", nullable=True,
                         doc="shed whole values of this column (hash), so COUNT(DISTINCT) over it stays "
                             "unbiased; null = drop random tuples",
                         effect={"memory": 0, "cpu": 0, "precision": 0}),
        # out-of-order input (sketchql.engine.ordering)
        "slack": Knob("slack", 0.0, "float", lo=0.0,
                      doc="seconds tuples may arrive out of order: they are buffered and released in "
                          "timestamp order when the slack or a heartbeat allows (also named allowed_lateness)",
                      effect={"memory": 1, "cpu": 0, "precision": 1}),
        "slack_timeout": Knob("slack_timeout", None, "float", lo=0.0, nullable=True,
                              doc="release buffered tuples once the engine's data clock is this many seconds "
                                  "past them, marking the results possibly imprecise; null = never",
                              effect={"memory": 1, "cpu": 0, "precision": 1}),
        "late_policy": Knob("late_policy", "report", "choice", choices=("report", "error"),
                            doc="tuples later than the slack: counted and kept in the late log (report) or "
                                "the push raises LateTupleError and refuses the whole batch (error); never "
                                "dropped silently",
                            effect={}),
    }

    def _note_late(self, late: Batch) -> None:
        self._late.append(late)
        while sum(len(b) for b in self._late) > self.late_log_max and len(self._late) > 1:
            self._late.pop(0)

    def late_tuples(self):
        """The newest tuples that came later than the slack (a DataFrame with their ts), oldest first."""
        import pandas as pd
        if not self._late:
            return pd.DataFrame(columns=list(self.schema.columns))
        b = Batch.concat(self._late)
        return pd.DataFrame(dict(b.columns))

    def knobs(self) -> dict:
        return dict(self._knobs)

    def knob_spec(self, name: str) -> Knob:
        """The domain of knob ``name`` on this stream: :attr:`KNOB_SPECS`, with the knobs that name a
        column (``shed_key``) narrowed to a choice among the stream's columns, so a write that would
        make a later push fail (``shed_key`` 'nope' is not a column) is refused when it is made."""
        spec = self.KNOB_SPECS.get(name)
        if spec is None or name not in self._knobs:
            raise ControlError(f"stream {self.name} has no knob {name!r} (knobs: {sorted(self._knobs)})")
        if name in self.COLUMN_KNOBS:
            spec = replace(spec, kind="choice", choices=tuple(self.schema.columns),
                           doc=spec.doc + f" (columns of {self.name}: {', '.join(self.schema.columns)})")
        return spec

    #: knobs whose value names one of the stream's columns
    COLUMN_KNOBS = ("shed_key",)

    def set_knob(self, name: str, value):
        v = self.knob_spec(name).coerce(value, where=f"stream {self.name}")
        self._knobs[name] = v
        if name in self.SYNONYMS:
            self._knobs[self.SYNONYMS[name]] = v
        ep = self.__dict__.get("_epoch")          # the engine's stream epoch (Engine._any_timeout)
        if ep is not None:
            ep[0] += 1

    def __setstate__(self, state: dict) -> None:
        """Restore from a checkpoint.  One written while ``allowed_lateness`` was a knob of its own
        (admitting late tuples straight to the operators) holds it apart from ``slack``: both become
        ``max(slack, allowed_lateness)``, so the tuples it admitted are admitted still, through the
        slack buffer (from the stream's clock on: nothing older than that can reach the queries)."""
        self.__dict__.update(state)
        k = self.__dict__.get("_knobs")
        if isinstance(k, dict) and "slack" in k:
            v = max(float(k.get("slack") or 0.0), float(k.get("allowed_lateness") or 0.0))
            k["slack"] = k["allowed_lateness"] = v

    def control_table(self) -> ControlTable:
        st = self.stats()
        st.pop("knobs", None)
        knobs = {n: self.knob_spec(n).with_value(v) for n, v in self._knobs.items()}
        return ControlTable("stream", self.name, st, knobs)

    def set_control(self, name: str, value):
        self.set_knob(name, value)

    def planner_stats(self) -> StreamStats:
        rate = 1.0
        if self.first_ts is not None and np.isfinite(self.clock) and self.clock > self.first_ts:
            rate = self.tuples_in / (self.clock - self.first_ts)
        return StreamStats(rate, {c: float(len(v)) for c, v in self._distinct_sample.items()})

    def _observe(self, b: Batch):
        if len(b):
            if self.first_ts is None:
                self.first_ts = float(b.ts[0])
            for c, v in b.columns.items():
                s = self._distinct_sample.setdefault(c, set())
                if len(s) < 10_000:
                    s.update(v[:2_000].tolist())

    def stats(self) -> dict:
        st = self.planner_stats()
        return {"stream": self.name, "clock": self.clock, "tuples_in": self.tuples_in,
                "tuples_kept": self.tuples_kept, "batches": self.batches,
                "rejected_batches": self.rejected_batches, "heartbeats": self.heartbeats,
                "rate_per_s": st.rate, "knobs": self.knobs(),
                **({"slack_" + k: v for k, v in self._slack.stats().items() if k != "slack"}
                   if self._slack is not None else {})}
