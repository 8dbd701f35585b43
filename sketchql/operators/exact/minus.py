"""Multiset difference (EXCEPT ALL / MINUS ALL) with negative tuples: a
:class:`~sketchql.operators.exact.setops.SetOp` of kind ``except``, ALL."""
from __future__ import annotations

from typing import Sequence

from .setops import SetOp

__all__ = ["MinusAll"]


class MinusAll(SetOp):
    """S MINUS ALL R over two change streams (port 0 = S, port 1 = R).

    For each value v of ``columns`` the result holds max(0, n_S(v) − m_R(v))
    copies; each rise emits + copies, each fall negative tuples (− copies) --
    also when the fall is caused by an *arrival* in R, which is why the
    operator is strict non-monotonic (W7).  ``right_columns`` names R's
    columns if they differ.  Output rows: ``columns``, ts = change time; all
    copies of a value share one rid.  See :class:`SetOp`.

    >>> import numpy as np
    >>> from sketchql.operators.changes import Batch, Changes
    >>> m = MinusAll(["v"])
    >>> s = Changes.inserts(Batch({"v": np.array(["A", "B"])}, ts=np.array([1., 2.])), at=[1., 2.], rid=[0, 1])
    >>> r = Changes.inserts(Batch({"v": np.array(["A"])}, ts=np.array([3.])), at=[3.], rid=[0])
    >>> out = m.step(3, s, r)
    >>> list(zip(out.sign.tolist(), out.columns["v"].tolist()))
    [(1, 'A'), (1, 'B'), (-1, 'A')]
    """

    def __init__(self, columns: Sequence[str], right_columns: Sequence[str] | None = None):
        super().__init__("except", True, columns, right_columns)
