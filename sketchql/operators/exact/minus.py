"""Multiset difference (EXCEPT ALL) with negative tuples."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import SketchQLError
from ..changes import Batch, Changes
from ._keys import joint_codes, segment_starts
from .base import Operator, STR

__all__ = ["MinusAll"]


class MinusAll(Operator):
    """S MINUS ALL R over two change streams (port 0 = S, port 1 = R).

    For each value v of ``columns`` the result holds max(0, n_S(v) − m_R(v))
    copies.  Both counts are maintained per value; in a step the changes of
    both inputs are merged in time order and a vectorized cumulative sum per
    value gives the multiplicity after each change time; each rise emits
    + copies, each fall emits negative tuples (− copies) -- also when the fall
    is caused by an *arrival* in R, which is why the operator is strict
    non-monotonic (W7).  ``right_columns`` names R's columns if they differ.
    Output rows: ``columns``, ts = change time; all copies of a value share
    one rid.

    >>> import numpy as np
    >>> m = MinusAll(["v"])
    >>> s = Changes.inserts(Batch({"v": np.array(["A", "B"])}, ts=np.array([1., 2.])), at=[1., 2.], rid=[0, 1])
    >>> r = Changes.inserts(Batch({"v": np.array(["A"])}, ts=np.array([3.])), at=[3.], rid=[0])
    >>> out = m.step(3, s, r)
    >>> list(zip(out.sign.tolist(), out.columns["v"].tolist()))
    [(1, 'A'), (1, 'B'), (-1, 'A')]
    """

    n_inputs = 2
    update_pattern = STR

    def __init__(self, columns: Sequence[str], right_columns: Sequence[str] | None = None):
        super().__init__()
        self.columns = [columns] if isinstance(columns, str) else list(columns)
        self.right_columns = self.columns if right_columns is None else list(right_columns)
        if len(self.right_columns) != len(self.columns):
            raise SketchQLError("MINUS needs the same number of columns on both sides")
        self._keys = None
        self._n = np.empty(0, np.int64)
        self._m = np.empty(0, np.int64)
        self._id = np.empty(0, np.int64)
        self._next_id = 0

    def state_size(self) -> int:
        return int(((self._n > 0) | (self._m > 0)).sum())

    def _step(self, now, inputs):
        S, R = inputs
        parts = []
        for port, (ch, cols) in enumerate(((S, self.columns), (R, self.right_columns))):
            if ch is None or not len(ch):
                continue
            miss = [c for c in cols if c not in ch.columns]
            if miss:
                raise SketchQLError(f"MINUS input {port}: column(s) {miss} not in {ch.names}")
            parts.append((port, [ch.columns[c] for c in cols], ch.at, ch.sign.astype(np.int64)))
        if not parts:
            return Changes.empty(self.columns)
        if self._keys is None:
            self._keys = [p[:0] for p in parts[0][1]]
        allcodes = joint_codes([self._keys] + [p[1] for p in parts])
        old = allcodes[0]
        G = len(self._n)
        newc = np.concatenate(allcodes[1:])
        vals = [np.concatenate([p[1][c] for p in parts]) for c in range(len(self.columns))]
        at = np.concatenate([p[2] for p in parts])
        dn = np.concatenate([p[3] if p[0] == 0 else np.zeros(len(p[3]), np.int64) for p in parts])
        dm = np.concatenate([p[3] if p[0] == 1 else np.zeros(len(p[3]), np.int64) for p in parts])
        lut = np.full(int(max(old.max(initial=-1), newc.max(initial=-1))) + 1, -1, np.int64)
        lut[old] = np.arange(G)
        g = lut[newc]
        if (g < 0).any():
            uc, first = np.unique(newc[g < 0], return_index=True)
            pos = np.flatnonzero(g < 0)[first]
            lut[uc] = np.arange(G, G + len(uc))
            g = lut[newc]
            self._keys = [np.concatenate([k, v[pos]]) for k, v in zip(self._keys, vals)]
            k = len(uc)
            self._n = np.concatenate([self._n, np.zeros(k, np.int64)])
            self._m = np.concatenate([self._m, np.zeros(k, np.int64)])
            self._id = np.concatenate([self._id, np.arange(self._next_id, self._next_id + k)])
            self._next_id += k
        o = np.lexsort((at, g))
        g, at, dn, dm = g[o], at[o], dn[o], dm[o]
        n = len(g)
        self._work += n
        st = segment_starts(g)
        seg = np.cumsum(st) - 1
        fs = np.flatnonzero(st)

        def segsum(x, base):
            c = np.cumsum(x)
            return c - (c - x)[fs][seg] + base[g]

        na, ma = segsum(dn, self._n), segsum(dm, self._m)
        if (na < 0).any() or (ma < 0).any():
            raise SketchQLError("MINUS: more retractions than insertions for a value")
        last = np.ones(n, bool)
        if n > 1:
            last[:-1] = (g[1:] != g[:-1]) | (at[1:] != at[:-1])
        pts = np.flatnonzero(last)
        mult = np.maximum(0, na[pts] - ma[pts])
        gp = g[pts]
        first = segment_starts(gp)
        before = np.where(first, np.maximum(0, self._n[gp] - self._m[gp]), np.roll(mult, 1))
        d = mult - before
        reps = np.abs(d)
        idx = np.repeat(np.arange(len(pts)), reps)
        sign = np.repeat(np.sign(d), reps).astype(np.int8)
        L = pts[np.r_[gp[1:] != gp[:-1], True]] if len(pts) else pts
        self._n[g[L]] = na[L]
        self._m[g[L]] = ma[L]
        gi = gp[idx]
        rows = Batch({c: self._keys[k][gi] for k, c in enumerate(self.columns)}, ts=at[pts][idx])
        return Changes(rows, sign, at[pts][idx], self._id[gi])
