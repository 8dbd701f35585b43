"""Synopsis compression knobs of a declared summary (STREAM §5.2.1), as its control table.

:class:`SummaryControl` wraps a :class:`~sketchql.index.StreamIndex` (the
index of one ``CREATE SUMMARY`` attribute) and exposes, next to its
statistics (``stats()``: zones, tuples, ``nbytes``, work counters), the knobs
that trade its memory and probe work for precision:

=================  =========================================================  ====  ====  =========
knob               what it does                                               mem   cpu   precision
=================  =========================================================  ====  ====  =========
``sketch_width``   count-sketch width w of every cell; lowering it folds the    +     +     +
                   sketches (``StreamIndex.compress(w_old / w_new)``, exact
                   and linear: the folded sketch is the sketch of width
                   w_new of the same data).  One way: a folded sketch cannot
                   be widened again, raising the width is refused.
``prune_sigma``    a pyramid node is pruned when its estimate is below           0     −     −
                   ``prune_sigma · √(F2 / w)``: a larger value prunes earlier
                   (fewer nodes and tuples probed, fewer matches found)
=================  =========================================================  ====  ====  =========

Precision is what a probe of the index returns: the count-sketch estimate's
error (``≈ √(F2 / w)`` per cell union) and the recall of the promising-tuple
regions (share of the matching tuples of the window that a probe finds).
Memory is ``nbytes``; CPU is the probe's work (pyramid nodes evaluated plus
tuples compared, ``Matches.visited`` / ``Matches.work``).  ``max_g1_zones``,
the index's other memory bound, is not offered: on a generated Zipf stream
fewer G1 zones saved memory with no consistent sign on recall.

>>> import numpy as np
>>> from sketchql.index import IndexConfig, StreamIndex, SummaryDeclaration
>>> ix = StreamIndex(SummaryDeclaration("s", "S", "a", granularity=10.0, rate=2, depth=2),
...                  IndexConfig(n_buckets=4, w=32))
>>> _ = ix.ingest(np.arange(100) % 5, np.linspace(0, 9.9, 100))
>>> c = SummaryControl(ix)
>>> c.set_control("sketch_width", 8)
>>> c.control_table().knobs["sketch_width"].value, ix.config.w
(8, 8)
"""
from __future__ import annotations

from ..control import ControlError, ControlTable, Knob

__all__ = ["SummaryControl", "SUMMARY_KNOBS"]

SUMMARY_KNOBS = {
    "sketch_width": Knob("sketch_width", 64, "int", lo=1,
                         doc="count-sketch width of every cell; lower it to fold the sketches "
                             "(w_old / w_new must be a whole number; folding cannot be undone)",
                         effect={"memory": 1, "cpu": 1, "precision": 1}),
    "prune_sigma": Knob("prune_sigma", 1.0, "float", lo=0.0,
                        doc="pyramid nodes whose estimate is below prune_sigma·√(F2/w) are pruned "
                            "(larger: cheaper probes, fewer matches found)",
                        effect={"memory": 0, "cpu": -1, "precision": -1}),
}


class SummaryControl:
    """The control table of one summary index (module doc): ``control_table()`` / ``set_control()``."""

    def __init__(self, index):
        self.index = index

    def _values(self) -> dict:
        cfg = self.index.config
        d = {"prune_sigma": float(cfg.prune_sigma)}
        if getattr(self.index, "_sketch", True):
            d = {"sketch_width": int(cfg.w), **d}
        return d

    def control_table(self) -> ControlTable:
        knobs = {n: SUMMARY_KNOBS[n].with_value(v) for n, v in self._values().items()}
        if "sketch_width" in knobs:
            knobs["sketch_width"].hi = int(self.index.config.w)
        st = self.index.stats()
        st["sketch_width"] = int(self.index.config.w)
        return ControlTable("summary", self.index.decl.name, st, knobs)

    def set_control(self, name: str, value):
        ix = self.index
        where = f"summary {ix.decl.name}.{ix.decl.attr if hasattr(ix.decl, 'attr') else ''}".rstrip(".")
        if name not in self._values():
            raise ControlError(f"{where} has no knob {name!r} (knobs: {', '.join(sorted(self._values()))})")
        v = SUMMARY_KNOBS[name].coerce(value, where=where)
        if name == "sketch_width":
            w = int(ix.config.w)
            if v > w:
                raise ControlError(f"{where}: sketch_width {v} > current {w}: a folded count sketch cannot "
                                   "be widened again (only narrower widths that divide it)")
            if w % v:
                raise ControlError(f"{where}: sketch_width {v} must divide the current width {w} "
                                   "(the sketch folds w/new columns into one)")
            ix.compress(w // v)
        elif name == "prune_sigma":
            ix.config.prune_sigma = float(v)          # probes read it live (query-view cache key)
        ix.config.validate(ix.decl)
