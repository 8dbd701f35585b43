"""The approximation knobs and their documented effect on memory, CPU and precision.

Each :class:`~sketchql.control.Knob` carries ``effect``: the sign of the change
of memory, CPU and precision when the knob's value *grows* (tested in
``tests/test_approx_knobs.py`` and ``tests/test_approx_knobs_more.py`` on a
generated stream).

=====================  ========  =========================================================  ====  ====  =========
knob                   entity    what it does                                               mem   cpu   precision
=====================  ========  =========================================================  ====  ====  =========
``sample_rate``        query     Bernoulli / universe sampling at the query's inputs         +     +     +
``outlier_share``      query     share of rows always kept (largest SUM/AVG arguments)       +     +     +
``audit_share``        query     share of windows recomputed by a shadow exact plan          +     +     0
``sampler``            query     bernoulli → reservoir → varopt at the same sample_rate (1)  0     0     +
``budget``             query     probes per tuple of a promising-tuple join                  0     +     +
``window_scale``       query     RANGE windows run at scale·w (window reduction; refused     +     +     +
                                 under DISTINCT / right of EXCEPT, NOT IN, NOT EXISTS)
``shed_rate``          stream    random drops at the input queue (all queries)               −     −     −
``shed_key``           stream    drop whole values (keeps COUNT(DISTINCT) unbiased)          0     0     0
``sample_rate``        stream    Bernoulli sampling before indexes and queries               +     +     +
``memory_bytes``       engine    memory budget the allocator shares out                      +     0     +
``cpu_units_per_s``    engine    CPU budget (work units per second of data time)             0     +     +
``sketch_width``       summary   count-sketch width (lower folds the sketches, one way)      +     +     +
``prune_sigma``        summary   pyramid pruning threshold of probes                         0     −     −
=====================  ========  =========================================================  ====  ====  =========

(1) ``sampler`` is a choice; its effect is read along the order of the
choices.  At one ``sample_rate`` the three keep the same number of rows
(reservoir and VarOpt exactly ``round(rate · n)`` per batch), so memory and
the work of everything downstream are unchanged; ``reservoir`` removes the
sample-size noise, ``varopt`` also keeps the large SUM / AVG arguments with
certainty: on skewed data the error falls from bernoulli to reservoir to
varopt (:mod:`sketchql.approx.sampling`).

Window reduction: :mod:`sketchql.approx.window_reduction` (scaled estimates
``1 / s`` per row for aggregates with a contract, expected recall ``s^k`` for
set-valued plans).  Synopsis compression of the declared summaries is on the
summary control tables (:mod:`sketchql.approx.synopsis`).  The allocator drives
``window_scale`` and ``sampler`` where they pay unless set by hand, not the summary
knobs (see the README's "Precision and budgets").

>>> QUERY_KNOBS["sample_rate"].effect
{'memory': 1, 'cpu': 1, 'precision': 1}
"""
from __future__ import annotations

from ..control import Knob

__all__ = ["QUERY_KNOBS"]

QUERY_KNOBS = {
    "sample_rate": Knob("sample_rate", None, "float", lo=0.0, hi=1.0, lo_open=True, nullable=True,
                        doc="sampling rate at the query's inputs (approximate plans and PT joins); "
                            "a value pins it, null hands it back to the allocator / the contract's need",
                        effect={"memory": 1, "cpu": 1, "precision": 1}),
    "outlier_share": Knob("outlier_share", 0.01, "float", lo=0.0, hi=0.5,
                          doc="share of each batch's largest SUM/AVG arguments kept with probability 1 "
                              "(outlier index: intervals stay honest on skewed data)",
                          effect={"memory": 1, "cpu": 1, "precision": 1}),
    "audit_share": Knob("audit_share", 0.1, "float", lo=0.0, hi=1.0,
                        doc="share of windows recomputed by a shadow exact plan to measure the error",
                        effect={"memory": 1, "cpu": 1, "precision": 0}),
    "sampler": Knob("sampler", "bernoulli", "choice", choices=("bernoulli", "reservoir", "varopt"),
                    doc="how the query's inputs are sampled at sample_rate: bernoulli (independent coins + "
                        "outlier index), reservoir (a uniform sample of exactly rate·n rows per batch) or "
                        "varopt (priority sampling ∝ |x| + mean|x| of the SUM/AVG argument); all give "
                        "Horvitz–Thompson estimates with unbiased variance (sketchql.approx.sampling)",
                    effect={"memory": 0, "cpu": 0, "precision": 1}),
    "window_scale": Knob("window_scale", 1.0, "float", lo=0.0, hi=1.0, lo_open=True,
                         doc="window reduction: every RANGE w window of the query runs as RANGE "
                             "window_scale·w (COUNT/SUM rows weigh 1/window_scale, set-valued answers "
                             "keep an expected window_scale^k of the rows); refused under DISTINCT and "
                             "on the right side of EXCEPT / NOT IN / NOT EXISTS",
                         effect={"memory": 1, "cpu": 1, "precision": 1}),
}
