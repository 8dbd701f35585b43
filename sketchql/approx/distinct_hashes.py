"""Kept distinct values as (group, hash) pairs with copy counts, so that a COUNT(DISTINCT) under
universe sampling can be read at any threshold below the sampler's.

Universe sampling keeps a value iff ``hash(value) < p · 2⁶⁴``.  When the
allocator changes ``p``, the window holds values kept under different
thresholds; counting only the kept values whose hash is below
``τ = min(rates used during the window)`` gives a set that every part of the
window kept with the same rule, so ``d(τ) ~ Bin(D, τ)`` again.

>>> import numpy as np
>>> hd = HashedDistinct()
>>> hd.update(np.array([0, 0, 0]), np.array([10, 20, 10], np.uint64), np.array([1, 1, 1]))
>>> hd.count_below(np.array([0]), 15).tolist(), hd.count_below(np.array([0]), 100).tolist()
([1], [2])
>>> hd.update(np.array([0, 0]), np.array([10, 10], np.uint64), np.array([-1, -1]))
>>> hd.count_below(np.array([0]), 100).tolist()
[1]
"""
from __future__ import annotations

import numpy as np

from ..errors import SketchQLError

__all__ = ["HashedDistinct"]


class HashedDistinct:
    """Sorted (group, hash) pairs with counts; vectorized merge per step."""

    def __init__(self):
        self.g = np.empty(0, np.int64)
        self.h = np.empty(0, np.uint64)
        self.c = np.empty(0, np.int64)

    def __len__(self) -> int:
        return len(self.g)

    def update(self, g, h, sign) -> None:
        g = np.concatenate([self.g, np.asarray(g, np.int64)])
        h = np.concatenate([self.h, np.asarray(h, np.uint64)])
        c = np.concatenate([self.c, np.asarray(sign, np.int64)])
        o = np.lexsort((h, g))
        g, h, c = g[o], h[o], c[o]
        first = np.ones(len(g), bool)
        if len(g) > 1:
            first[1:] = (g[1:] != g[:-1]) | (h[1:] != h[:-1])
        starts = np.flatnonzero(first)
        cs = np.add.reduceat(c, starts) if len(starts) else c[:0]
        if (cs < 0).any():
            raise SketchQLError("COUNT(DISTINCT): retraction of a value that is not in the group")
        keep = cs > 0
        self.g, self.h, self.c = g[starts][keep], h[starts][keep], cs[keep]

    def count_below(self, groups, tau) -> np.ndarray:
        """Distinct kept values of each group whose hash is < ``tau`` (a number in [0, 2⁶⁴])."""
        groups = np.asarray(groups, np.int64)
        lo = np.searchsorted(self.g, groups, side="left")
        hi = np.searchsorted(self.g, groups, side="right")
        t = float(tau)
        if t >= 2.0 ** 64:
            return (hi - lo).astype(np.int64)
        tt = np.uint64(max(0, int(t)))
        # within a group's segment the hashes are sorted
        out = np.empty(len(groups), np.int64)
        for i, (a, b) in enumerate(zip(lo.tolist(), hi.tolist())):
            out[i] = int(np.searchsorted(self.h[a:b], tt, side="left"))
        return out
