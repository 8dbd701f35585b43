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
    numpy; ``mode="count"`` keeps a Python list of copies per value.

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
        self._rep: dict = {}      # value -> (rid, ts, row tuple)
        self._aux: dict = {}      # replace: value -> youngest (rid, ts, row); count: value -> list
        self._names = None
        self.max_state = 0
        self._dict = KeyDict()                 # replace mode: value fingerprint -> code
        self._rrep = None                      # per code: representative (slot / −(input row+1) / NONE)
        self._raux = None                      # per code: youngest duplicate
        self._scols = self._sts = self._srid = None   # stored rows referenced by _rrep / _raux

    def state_size(self) -> int:
        if self.mode == "replace":
            return self.output_size() + int((self._raux != _NONE).sum()) if self._rrep is not None else 0
        return len(self._rep) + sum(len(v) for v in self._aux.values())

    def output_size(self) -> int:
        """Distinct values currently in the output."""
        if self.mode == "replace":
            return int((self._rrep != _NONE).sum()) if self._rrep is not None else 0
        return len(self._rep)

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
        colv = [ch.columns[c].tolist() for c in names]
        rows = list(zip(*colv)) if names else [()] * len(ch)
        tsl, ridl, sl, atl = ch.ts.tolist(), ch.rid.tolist(), ch.sign.tolist(), ch.at.tolist()
        o_rows, o_ts, o_sign, o_at, o_rid = [], [], [], [], []
        out, aux, replace = self._rep, self._aux, self.mode == "replace"

        def emit(entry, sign, at):
            o_rid.append(entry[0]); o_ts.append(entry[1]); o_rows.append(entry[2])
            o_sign.append(sign); o_at.append(at)

        for r in range(len(rows)):
            v = rows[r]
            e = (ridl[r], tsl[r], v)
            if sl[r] > 0:
                if v not in out:
                    out[v] = e
                    emit(e, 1, atl[r])
                elif replace:
                    aux[v] = e
                else:
                    aux.setdefault(v, []).append(e)
            else:
                rep = out.get(v)
                if rep is not None and rep[0] == e[0]:
                    emit(rep, -1, atl[r])
                    if replace:
                        y = aux.pop(v, None)
                    else:
                        lst = aux.get(v)
                        y = lst.pop() if lst else None
                        if lst is not None and not lst:
                            del aux[v]
                    if y is None:
                        del out[v]
                    else:
                        out[v] = y
                        emit(y, 1, atl[r])
                elif replace:
                    y = aux.get(v)
                    if y is not None and y[0] == e[0]:
                        raise SketchQLError(
                            "Distinct(mode='replace'): a younger duplicate left before the "
                            "representative -- the input does not expire in FIFO order; use mode='count'")
                else:
                    lst = aux.get(v, [])
                    for k in range(len(lst)):
                        if lst[k][0] == e[0]:
                            del lst[k]
                            break
                    else:
                        raise SketchQLError("Distinct: retraction of a row that never arrived")
                    if not lst:
                        aux.pop(v, None)
            self.max_state = max(self.max_state, self.state_size()) if replace else self.max_state
        self._work += len(rows)
        if not replace:
            self.max_state = max(self.max_state, self.state_size())
        if not o_rows:
            return Changes.empty(names)
        cols = {c: np.asarray([row[k] for row in o_rows]) for k, c in enumerate(names)}
        for k, c in enumerate(names):
            if len(cols[c]) and ch.columns[c].dtype.kind != "O":
                cols[c] = cols[c].astype(ch.columns[c].dtype, copy=False)
        return Changes(Batch(cols, ts=np.asarray(o_ts, np.float64)), o_sign, o_at, o_rid)


_NONE = np.iinfo(np.int64).min


def _cat(a, b):
    if a.dtype.kind == "O" or b.dtype.kind == "O":
        if a.dtype.kind != b.dtype.kind:
            return np.concatenate([a.astype(object), b.astype(object)])
    return np.concatenate([a, b])
