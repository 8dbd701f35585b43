"""Duplicate elimination with replacement (δ*, golab-ozsu update patterns)."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import SketchQLError
from ..changes import Batch, Changes
from ._keys import KeyDict, fingerprints
from .base import Operator, WK, STR

__all__ = ["Distinct"]


class Distinct(Operator):
    """DISTINCT on ``columns`` over a change stream, with replacement.

    The output holds one row per distinct value present in the input: the
    *representative*.  When the representative leaves while other copies are
    alive, the youngest alive copy replaces it at that instant (− old, + new,
    same ``at``; W4).  ``mode="replace"`` is δ*: besides the output it stores
    only the youngest duplicate per value, so state ≤ 2 × output; it is exact
    when the input's rows leave in arrival order (update pattern weakest or
    weak with FIFO expiry) and raises if a stored youngest duplicate leaves
    before its representative.  ``mode="count"`` stores every copy (for
    strict inputs: negative tuples, PARTITION BY windows).  Output columns are
    ``columns`` (default: all), row ts and rid are the representative's.

    Implementation: values get persistent integer codes (key fingerprints
    and a :class:`KeyDict`); ``mode="replace"`` resolves a step's changes in
    one compiled loop (:func:`~sketchql.operators.exact._kernels.distinct_replace`)
    over per-code row references, and the output columns are gathered with
    numpy; ``mode="count"`` keeps every live copy in one array sorted by
    (value, arrival) and resolves the step in another compiled loop
    (:func:`~sketchql.operators.exact._kernels.distinct_count`).

    >>> import numpy as np
    >>> from sketchql.operators.exact import WindowScan, WindowSpec, Chain
    >>> q = Chain(WindowScan(WindowSpec.range(10)), Distinct(["v"]))
    >>> ch = q.push(Batch({"v": np.array(["x", "x"])}, ts=np.array([1., 2.])))
    >>> ch = q.advance(11)
    >>> list(zip(ch.sign.tolist(), ch.ts.tolist()))
    [(-1, 1.0), (1, 2.0)]
    """

    def __init__(self, columns: Sequence[str] | None = None, mode: str = "replace"):
        super().__init__()
        if mode not in ("replace", "count"):
            raise SketchQLError(f"Distinct mode must be 'replace' or 'count', got {mode!r}")
        self.columns = None if columns is None else ([columns] if isinstance(columns, str) else list(columns))
        self.mode = mode
        self.update_pattern = WK if mode == "replace" else STR
        self._names = None
        self.max_state = 0
        self._dict = KeyDict()                 # replace mode: value fingerprint -> code
        self._rrep = None                      # per code: representative (slot / −(input row+1) / NONE)
        self._raux = None                      # per code: youngest duplicate
        self._scols = self._sts = self._srid = None   # stored rows referenced by _rrep / _raux
        self._cc = None                        # count mode: every live copy, sorted by (code, arrival)
        self._next_seq = 0

    def state_size(self) -> int:
        if self.mode == "replace":
            return self.output_size() + int((self._raux != _NONE).sum()) if self._rrep is not None else 0
        return self.output_size() + (len(self._cc) if self._cc is not None else 0)

    def output_size(self) -> int:
        """Distinct values currently in the output."""
        if self.mode == "replace":
            return int((self._rrep != _NONE).sum()) if self._rrep is not None else 0
        return int(self._isrep.sum()) if self._cc is not None else 0

    # -- every copy kept (strict inputs), compiled ---------------------------
    def _step_count(self, ch, names):
        from ._kernels import distinct_count
        fp, _ = fingerprints([ch.columns[c] for c in names]) if names else \
            (np.zeros(len(ch), np.int64), None)
        codes = self._dict.codes(fp)
        G = len(self._dict)
        if self._cc is None:
            self._cc = np.empty(0, np.int64)
            self._cseq = np.empty(0, np.int64)
            self._crid = np.empty(0, np.int64)
            self._cts = np.empty(0)
            self._ccols = {c: ch.columns[c][:0] for c in names}
            self._isrep = np.empty(0, bool)
        plus = np.flatnonzero(ch.sign > 0)
        nO, nP = len(self._cc), len(plus)
        cc = np.concatenate([self._cc, codes[plus]])
        cseq = np.concatenate([self._cseq, self._next_seq + np.arange(nP)])
        self._next_seq += nP
        o = np.lexsort((cseq, cc))
        inv = np.empty(len(o), np.int64)
        inv[o] = np.arange(len(o))
        cc, cseq = cc[o], cseq[o]
        crid = np.concatenate([self._crid, ch.rid[plus]])[o]
        cts = np.concatenate([self._cts, ch.ts[plus]])[o]
        ccols = {c: _cat(self._ccols[c], ch.columns[c][plus])[o] for c in names}
        alive = np.concatenate([np.ones(nO, bool), np.zeros(nP, bool)])[o]
        isrep = np.concatenate([self._isrep, np.zeros(nP, bool)])[o]
        pos_plus = np.full(len(ch), -1, np.int64)
        pos_plus[plus] = inv[nO:]
        rid_order = np.argsort(crid, kind="stable")
        srid = crid[rid_order]
        rid_lo = np.searchsorted(srid, ch.rid, side="left")
        rid_hi = np.searchsorted(srid, ch.rid, side="right")
        seg_lo = np.searchsorted(cc, np.arange(G), side="left")
        seg_hi = np.searchsorted(cc, np.arange(G), side="right")
        rep_pos = np.full(G, -1, np.int64)
        rp = np.flatnonzero(isrep)
        rep_pos[cc[rp]] = rp
        pos, sign, at, err = distinct_count(codes, ch.sign, ch.at, pos_plus, rid_lo, rid_hi, rid_order,
                                            alive, seg_lo, seg_hi, rep_pos)
        if err:
            raise SketchQLError("Distinct: retraction of a row that never arrived")
        out = Changes(Batch({c: v[pos] for c, v in ccols.items()}, ts=cts[pos]), sign, at, crid[pos])
        isrep = np.zeros(len(cc), bool)
        isrep[rep_pos[rep_pos >= 0]] = True
        keep = alive
        self._cc, self._cseq, self._crid, self._cts = cc[keep], cseq[keep], crid[keep], cts[keep]
        self._ccols = {c: v[keep] for c, v in ccols.items()}
        self._isrep = isrep[keep]
        self.max_state = max(self.max_state, self.state_size())
        self._work += len(ch)
        return out

    # -- δ*, compiled --------------------------------------------------------
    def _step_replace(self, ch, names):
        from ._kernels import distinct_replace
        fp, _ = fingerprints([ch.columns[c] for c in names]) if names else \
            (np.zeros(len(ch), np.int64), None)
        codes = self._dict.codes(fp)
        G = len(self._dict)
        if self._rrep is None:
            self._rrep = np.full(0, _NONE, np.int64)
            self._raux = np.full(0, _NONE, np.int64)
            self._scols = {c: ch.columns[c][:0] for c in names}
            self._sts = np.empty(0)
            self._srid = np.empty(0, np.int64)
        if G > len(self._rrep):
            k = G - len(self._rrep)
            self._rrep = np.concatenate([self._rrep, np.full(k, _NONE, np.int64)])
            self._raux = np.concatenate([self._raux, np.full(k, _NONE, np.int64)])
        scratch = np.full(G, -1, np.int64)
        ref, sign, at, err = distinct_replace(codes, ch.sign, ch.rid, ch.at, self._rrep, self._raux,
                                              self._srid, scratch)
        if err:
            raise SketchQLError(
                "Distinct(mode='replace'): a younger duplicate left before the "
                "representative -- the input does not expire in FIFO order; use mode='count'")
        keep = sign != 0
        ref, sign, at = ref[keep], sign[keep], at[keep]
        nS = len(self._sts)
        src = {c: _cat(self._scols[c], ch.columns[c]) for c in names}
        src_ts = np.concatenate([self._sts, ch.ts])
        src_rid = np.concatenate([self._srid, ch.rid])
        gi = np.where(ref >= 0, ref, nS + (-ref - 1))
        out = Changes(Batch({c: v[gi] for c, v in src.items()}, ts=src_ts[gi]), sign, at, src_rid[gi])
        # the state now refers to input rows: move them into the store; drop unreferenced slots
        refs = np.concatenate([self._rrep, self._raux])
        used = refs != _NONE
        if used.any():
            live = np.where(refs[used] >= 0, refs[used], nS + (-refs[used] - 1))
            uniq, inv = np.unique(live, return_inverse=True)
            self._scols = {c: v[uniq] for c, v in src.items()}
            self._sts, self._srid = src_ts[uniq], src_rid[uniq]
            new = np.full(len(refs), _NONE, np.int64)
            new[used] = inv
            self._rrep, self._raux = new[:G], new[G:]
        else:
            self._scols = {c: v[:0] for c, v in src.items()}
            self._sts, self._srid = src_ts[:0], src_rid[:0]
        self.max_state = max(self.max_state, self.state_size())
        self._work += len(ch)
        return out

    def _step(self, now, inputs):
        ch = inputs[0]
        if ch is None or not len(ch):
            return Changes.empty(self._names or self.columns or [])
        if isinstance(ch, Batch):
            raise SketchQLError("Distinct input must be Changes (put a WindowScan before it)")
        names = self.columns if self.columns is not None else ch.names
        miss = [c for c in names if c not in ch.columns]
        if miss:
            raise SketchQLError(f"DISTINCT column(s) {miss} not in the input {ch.names}")
        self._names = names
        if self.mode == "replace":
            return self._step_replace(ch, names)
        return self._step_count(ch, names)


_NONE = np.iinfo(np.int64).min


def _cat(a, b):
    if a.dtype.kind == "O" or b.dtype.kind == "O":
        if a.dtype.kind != b.dtype.kind:
            return np.concatenate([a.astype(object), b.astype(object)])
    return np.concatenate([a, b])
