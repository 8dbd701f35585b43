"""sketchql.operators.promising -- promising-tuple operators (paper section 4)
and their baselines on the same work budget.

Operators (all driven the same way: ``op.tick(batch, allowance)`` per batch
of arrivals, ``allowance[k]`` = work units brought by arrival k; see
:func:`sketchql.approx.replay`):

``PTJoin(window=60, preference="desc"|"asc"|"weighted", fade=0.8, streams=(0, 1),
key="item", seed=0, source="index", source_options=None, weight=1.0)``
    Figure 7 JOIN-PROBE.  ``pairs()`` -> (rid_a, rid_b); ``result()`` ->
    ``{rid_a, rid_b, ts_a, ts_b, value}`` (exact pairs, production order,
    no duplicates); ``stats()``.  ``window=math.inf``: whole stream.
    ``source``: ``"index"`` builds a :class:`sketchql.index.StreamIndex` per
    stream, or pass the engine's two declared StreamIndex objects as a
    tuple; ``"mini"`` a private fixed-zone index.
``PTJoinGroup([PTJoin, ...], cpu="shared"|"separate")``
    several standing joins over the same streams sharing the index; the CPU
    is shared round robin in proportion to ``weight``.
``PTSelection(queries=[(lo, hi) | RangeQuery], attr="item", stream=0, window=inf,
domain=None, n_buckets=128, zone_seconds=2.0)``
    Figure 8; ``results()`` per query (rids), ``current(qi, now)`` after
    window expiry.
``PTAggregate(queries, func="avg"|"sum"|"count"|"median", attr="item",
value_attr="price", window=60, ...)``
    section 4.3; ``answer(qi, now) -> (estimate, error)``.
Baselines: ``SimpleSHJ``, ``SimpleSelection``, ``PerQueryAggregate``.

Input batches: any object with numpy columns ``stream`` (int stream number),
``seq`` (global arrival number, increasing; the row id of the tuple), ``ts``
(event time, non-decreasing) and the key / value columns, e.g.
:class:`sketchql.data.Arrivals` or :func:`make_batch`.

Engine entry point: :func:`build_promising_operator(plan_spec)` (below).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import SketchQLError
from .aggregates import FUNCS, PREFERENCE_OF, PTAggregate
from .baselines import PerQueryAggregate, SimpleSelection, SimpleSHJ
from .costs import COSTS
from .join import PTJoin, PTJoinGroup
from .queue import PREFERENCES
from .selection import PTSelection, RangeQuery


class _Batch:
    def __init__(self, cols):
        self.__dict__.update(cols)

    def __len__(self):
        return int(self.ts.shape[0])

    def take(self, idx):
        return _Batch({k: v[idx] for k, v in self.__dict__.items()})


def make_batch(stream, ts, seq, **columns):
    """A batch for ``op.tick``: ``stream`` (int per row), ``ts``, ``seq`` (global
    row ids, increasing) and named columns, all equal-length arrays.

    >>> b = make_batch([0, 1], [0.5, 0.7], [10, 11], item=[3, 3])
    >>> len(b), b.item.tolist()
    (2, [3, 3])
    """
    cols = {"stream": np.asarray(stream, np.int64), "ts": np.asarray(ts, np.float64),
            "seq": np.asarray(seq, np.int64)}
    cols.update({k: np.asarray(v) for k, v in columns.items()})
    n = cols["ts"].shape[0]
    bad = [k for k, v in cols.items() if v.shape[0] != n]
    if bad:
        raise SketchQLError(f"make_batch: columns {bad} do not have {n} rows")
    if n > 1 and (np.diff(cols["ts"]) < 0).any():
        raise SketchQLError("make_batch: ts must be non-decreasing (arrival order)")
    return _Batch(cols)


def _get(spec, name, default=None):
    if isinstance(spec, dict):
        return spec.get(name, default)
    return getattr(spec, name, default)


def _window(v):
    if v is None:
        return math.inf
    v = float(v)
    if not v > 0:
        raise SketchQLError(f"WINDOW must be > 0 seconds, got {v!r}")
    return v


def build_promising_operator(plan_spec):
    """Build a promising-tuple operator from a plan spec (dict or object with
    the same attributes).  ``kind`` selects the operator:

    * ``"join"``: ``window`` (seconds; None = whole stream), ``preference``
      (desc|asc|weighted, default desc), ``fade`` (FADE FACTOR, default 0.8),
      ``streams`` (pair of stream numbers as they appear in ``batch.stream``,
      default (0, 1)), ``key`` (join column, default "item"), ``seed``,
      ``weight``, ``source`` ("index" | "mini" | (StreamIndex, StreamIndex)),
      ``source_options``;
    * ``"selection"``: ``predicates`` [(lo, hi)] inclusive ranges over
      ``key``, ``stream`` (default 0), ``window`` (None = filter),
      ``domain`` (lo, hi of the attribute; default from the predicates),
      ``n_buckets``, ``zone_seconds``;
    * ``"aggregate"``: ``func`` (avg|sum|count|median), ``value`` (aggregated
      column), ``predicates``, ``key``, ``stream``, ``window`` (required),
      ``domain``; the preference is fixed by the function (paper 4.3:
      weighted for AVG/MEDIAN, desc on count x value for SUM, COUNT from the
      summaries).

    >>> op = build_promising_operator({"kind": "join", "window": 60, "preference": "weighted"})
    >>> op.preference, op.window, op.fade
    ('weighted', 60.0, 0.8)
    """
    kind = str(_get(plan_spec, "kind", "join")).lower()
    seed = int(_get(plan_spec, "seed", 0) or 0)
    if kind == "join":
        pref = str(_get(plan_spec, "preference", "desc") or "desc").lower()
        fade = _get(plan_spec, "fade", 0.8)
        return PTJoin(window=_window(_get(plan_spec, "window")), preference=pref,
                      fade=0.8 if fade is None else float(fade),
                      streams=tuple(_get(plan_spec, "streams", (0, 1))), key=_get(plan_spec, "key", "item"),
                      seed=seed, source=_get(plan_spec, "source", "index"),
                      source_options=_get(plan_spec, "source_options"),
                      weight=float(_get(plan_spec, "weight", 1.0) or 1.0))
    if kind in ("selection", "select"):
        preds = _get(plan_spec, "predicates")
        if not preds:
            raise SketchQLError("build_promising_operator: a selection needs predicates [(lo, hi), ...]")
        return PTSelection(preds, attr=_get(plan_spec, "key", "item"), stream=int(_get(plan_spec, "stream", 0)),
                           window=_window(_get(plan_spec, "window")), domain=_get(plan_spec, "domain"),
                           n_buckets=int(_get(plan_spec, "n_buckets", 128)),
                           zone_seconds=float(_get(plan_spec, "zone_seconds", 2.0)), seed=seed)
    if kind in ("aggregate", "agg"):
        preds = _get(plan_spec, "predicates")
        if not preds:
            raise SketchQLError("build_promising_operator: an aggregate needs predicates [(lo, hi), ...]")
        w = _window(_get(plan_spec, "window"))
        return PTAggregate(preds, func=str(_get(plan_spec, "func", "avg")).lower(),
                           attr=_get(plan_spec, "key", "item"), value_attr=_get(plan_spec, "value", "price"),
                           stream=int(_get(plan_spec, "stream", 0)), window=w, domain=_get(plan_spec, "domain"),
                           n_buckets=int(_get(plan_spec, "n_buckets", 128)),
                           zone_seconds=float(_get(plan_spec, "zone_seconds", 2.0)), seed=seed)
    raise SketchQLError(f"build_promising_operator: unknown kind {kind!r} (join | selection | aggregate)")


__all__ = [
    "PTJoin", "PTJoinGroup", "PTSelection", "RangeQuery", "PTAggregate",
    "SimpleSHJ", "SimpleSelection", "PerQueryAggregate",
    "build_promising_operator", "make_batch", "PREFERENCES", "FUNCS", "PREFERENCE_OF", "COSTS",
]
