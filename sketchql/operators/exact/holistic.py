"""Per-group sorted multisets for the holistic aggregates (MIN, MAX, COUNT(DISTINCT),
MEDIAN, QUANTILE), maintained per step without a Python loop per change."""
from __future__ import annotations

import numpy as np

from ...errors import SketchQLError
from . import _kernels as K
from ._keys import fingerprints

__all__ = ["SortedPairs"]

_KIND = {"min": K.KIND_MIN, "max": K.KIND_MAX, "count_distinct": K.KIND_COUNT_DISTINCT,
         "median": K.KIND_QUANTILE, "quantile": K.KIND_QUANTILE}


def _order_key(v: np.ndarray) -> np.ndarray:
    """int64 keys whose order is the float order (IEEE-754 bits, sign-flipped)."""
    b = (np.asarray(v, np.float64) + 0.0).view(np.int64)
    return np.where(b < 0, b ^ np.int64(0x7FFFFFFFFFFFFFFF), b)


class SortedPairs:
    """One holistic aggregate's state: (group, value) pairs sorted by group then value, with counts.

    ``step(g, values, sign, last)`` takes a step's changes grouped by group (time order
    inside a group) and returns the aggregate after every change flagged in ``last``:
    the new pairs are sorted and merged in by one linear merge that also gives each change
    its pair, and the per-change sequence runs in one compiled loop
    (:func:`~sketchql.operators.exact._kernels.holistic`) -- the whole step is one compiled
    call, :func:`~sketchql.operators.exact._kernels.holistic_step`; empty pairs are dropped after
    the step, so the state is the window's distinct (group, value) pairs.
    QUANTILE is continuous (linear interpolation, like DuckDB's ``quantile_cont``).

    >>> sp = SortedPairs("median")
    >>> float(sp.step(np.array([0, 0, 0]), np.array([5., 1., 3.]), np.array([1, 1, 1]), np.array([False, False, True]))[2])
    3.0
    """

    def __init__(self, func: str, q: float | None = None):
        self.func = func
        self.kind = _KIND[func]
        self.q = 0.5 if func == "median" else (float(q) if q is not None else 0.5)
        self.pg = np.empty(0, np.int64)      # group
        self.pk = np.empty(0, np.int64)      # order key of the value
        self.pf = np.empty(0, np.float64)    # the value (for the output)
        self.pc = np.empty(0, np.int64)      # copies in the window
        self.rescans = 0
        self.funcs = [(func, self.kind, self.q)]   # the aggregates reading this state

    def share(self, func: str, q: float | None = None) -> int:
        """Let another aggregate of the same column read this state (``step_all``'s next row)."""
        qq = 0.5 if func == "median" else (float(q) if q is not None else 0.5)
        self.funcs.append((func, _KIND[func], qq))
        return len(self.funcs) - 1

    def __len__(self) -> int:
        return len(self.pg)

    def _keys(self, values):
        v = np.asarray(values)
        if v.dtype.kind in "iufb":
            f = v.astype(np.float64)
            null = np.isnan(f)
            return _order_key(np.where(null, 0.0, f)), f, null
        for func, kind, _ in self.funcs:
            if kind != K.KIND_COUNT_DISTINCT:
                raise SketchQLError(f"{func.upper()} needs numbers, got {v.dtype} values")
        fp, null = fingerprints([v])
        return fp, np.zeros(len(v)), null

    def step(self, g, values, sign, last) -> np.ndarray:
        return self.step_all(g, values, sign, last)[0]

    def step_all(self, g, values, sign, last) -> list[np.ndarray]:
        """``step`` for every aggregate reading this state (see ``share``), in order."""
        g = np.asarray(g, np.int64)
        key, fval, null = self._keys(values)
        res, rs, pg, pk, pf, pc, err = K.holistic_step(
            np.array([k for _, k, _ in self.funcs], np.int64), np.array([q for _, _, q in self.funcs]),
            g, key, fval, null, np.asarray(sign, np.int64), np.asarray(last, bool),
            self.pg, self.pk, self.pf, self.pc)
        self.rescans += int(rs)
        if err:
            raise SketchQLError("aggregate: retraction of a value that is not in the group")
        self.pg, self.pk, self.pf, self.pc = pg, pk, pf, pc
        return list(res)

    def remap(self, newidx: np.ndarray, keep_group: np.ndarray):
        """Renumber groups after the aggregate forgot some (``newidx[old]``, kept iff ``keep_group``)."""
        m = keep_group[self.pg]
        self.pg, self.pk, self.pf, self.pc = newidx[self.pg[m]], self.pk[m], self.pf[m], self.pc[m]

    def drop_groups(self, gs: np.ndarray):
        if len(gs) and len(self.pg):
            m = ~np.isin(self.pg, gs)
            self.pg, self.pk, self.pf, self.pc = self.pg[m], self.pk[m], self.pf[m], self.pc[m]
