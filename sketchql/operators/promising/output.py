"""Pieces shared by the promising-tuple operators and their baselines: the
columnar log of produced join pairs, and the folding of per-arrival budget
allowances onto the arrivals of one stream."""
from __future__ import annotations

import numpy as np


class PairOutput:
    """Mixin: join pairs appended as numpy chunks to ``self._out`` (keys ``a, b,
    ta, tb, val, at``: rid and ts of each member, the join value, and the event
    time ``now`` at which the pair was found)."""

    @staticmethod
    def _new_pair_log() -> dict:
        return {"a": [], "b": [], "ta": [], "tb": [], "val": [], "at": []}

    def _cat(self, k, dtype):
        v = self._out[k]
        return np.concatenate(v) if v else np.zeros(0, dtype)

    def pairs(self):
        """(rid of the stream-a member, rid of the stream-b member), in production order."""
        return self._cat("a", np.int64), self._cat("b", np.int64)

    def result(self) -> dict:
        """Columnar output: ``rid_a, rid_b, ts_a, ts_b, value, found_at`` in
        production order (``found_at - max(ts_a, ts_b)`` is the discovery lag)."""
        return {"rid_a": self._cat("a", np.int64), "rid_b": self._cat("b", np.int64),
                "ts_a": self._cat("ta", np.float64), "ts_b": self._cat("tb", np.float64),
                "value": self._cat("val", np.int64), "found_at": self._cat("at", np.float64)}


def fold_allowance(mask: np.ndarray, share: np.ndarray):
    """Give each arrival of one stream (``mask``) its own allowance plus that of
    the other streams' arrivals up to its next one (their budget still passes).

    Returns ``(idx, lead, per)``: positions of the stream's arrivals, the
    allowance before the first of them, and the allowance per arrival
    (``inf`` everywhere, with no lead, when the budget is unlimited).

    >>> idx, lead, per = fold_allowance(np.array([False, True, False, True]), np.ones(4))
    >>> idx.tolist(), lead, per.tolist()
    ([1, 3], 1.0, [2.0, 1.0])
    """
    idx = np.flatnonzero(mask)
    if np.isinf(share).any():
        return idx, 0.0, np.full(idx.shape[0], np.inf)
    cum = np.concatenate([[0.0], np.cumsum(share)])
    ends = np.concatenate([idx[1:], [len(share)]])
    return idx, float(cum[idx[0]]), cum[ends] - cum[idx]
