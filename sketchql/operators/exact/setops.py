"""Set operations over windowed relations: UNION [ALL], EXCEPT [ALL], INTERSECT [ALL].

Counting semantics (SQL bag algebra, golab-ozsu update-pattern paper §2.1
for negation): with n = copies of a value v in the left input and m in the
right input at time τ, the result holds

    UNION ALL      n + m            UNION       1 if n + m > 0
    EXCEPT ALL     max(0, n − m)    EXCEPT      1 if n > 0 and m = 0
    INTERSECT ALL  min(n, m)        INTERSECT   1 if n > 0 and m > 0

copies of v (NULLs compare equal, as SQL set operations do).

Update patterns (paper §5.2): UNION ALL is a merge (rule 2: the more complex
of its inputs' patterns); UNION, INTERSECT [ALL] drop a value only when copies
expire from a window (weak, like δ and the join); EXCEPT [ALL] is strict: an
*arrival* on the right removes results before their expiration time, and only
those removals are negative tuples (``stats()["negative_tuples"]``); a value
that leaves the right side brings its copies back (once per copy owed).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import SketchQLError
from ..changes import Batch, Changes, mix_rids
from ._keys import KeyDict, fingerprints, segment_starts
from .base import Operator, STR, WK, WKS

__all__ = ["SetOp", "UnionAll", "SETOP_KINDS"]

SETOP_KINDS = ("union", "except", "intersect")


def _mult(kind: str, all_: bool, n: np.ndarray, m: np.ndarray) -> np.ndarray:
    if kind == "except":
        return np.maximum(0, n - m) if all_ else ((n > 0) & (m == 0)).astype(np.int64)
    if kind == "intersect":
        return np.minimum(n, m) if all_ else ((n > 0) & (m > 0)).astype(np.int64)
    if kind == "union":
        return n + m if all_ else ((n + m) > 0).astype(np.int64)
    raise SketchQLError(f"unknown set operation {kind!r}; use one of {SETOP_KINDS}")


class SetOp(Operator):
    """``left <kind> [ALL] right`` over two change streams (port 0 = left, port 1 = right).

    Per distinct value the operator keeps n (left copies) and m (right copies)
    in arrays indexed by a persistent key code (:class:`KeyDict`, not rebuilt
    per step).  In a step the changes of both ports are ordered by (value,
    time); a segmented cumulative sum gives n and m after every change time,
    the multiplicity function (module docstring) gives the result count, and
    each rise emits + copies, each fall − copies, all at that time.  Output
    rows: ``columns`` (the right side's ``right_columns`` are matched
    positionally), ts = the change time; all copies of a value share one rid.

    ``stats()`` counts ``negative_tuples`` (EXCEPT: falls at a time when the
    right side gained copies -- the premature removals of the update-pattern
    paper) apart from ``expirations`` (falls caused by the windows).

    >>> import numpy as np
    >>> m = SetOp("except", True, ["v"])
    >>> s = Changes.inserts(Batch({"v": np.array(["A", "B"])}, ts=np.array([1., 2.])), at=[1., 2.], rid=[0, 1])
    >>> r = Changes.inserts(Batch({"v": np.array(["A"])}, ts=np.array([3.])), at=[3.], rid=[0])
    >>> out = m.step(3, s, r)
    >>> list(zip(out.sign.tolist(), out.columns["v"].tolist())), m.stats()["negative_tuples"]
    ([(1, 'A'), (1, 'B'), (-1, 'A')], 1)
    """

    n_inputs = 2

    def __init__(self, kind: str, all: bool, columns: Sequence[str],
                 right_columns: Sequence[str] | None = None):
        super().__init__()
        kind = kind.lower()
        if kind == "minus":
            kind = "except"
        if kind not in SETOP_KINDS:
            raise SketchQLError(f"unknown set operation {kind!r}; use one of {SETOP_KINDS}")
        self.kind, self.all = kind, bool(all)
        self.columns = [columns] if isinstance(columns, str) else list(columns)
        self.right_columns = self.columns if right_columns is None else list(right_columns)
        if len(self.right_columns) != len(self.columns):
            raise SketchQLError(f"{kind.upper()} needs the same number of columns on both sides "
                                f"({len(self.columns)} vs {len(self.right_columns)})")
        self.update_pattern = STR if kind == "except" else WK
        self._dict = KeyDict()
        self._vals: list | None = None          # key column values per code
        self._n = np.empty(0, np.int64)
        self._m = np.empty(0, np.int64)
        self._id = np.empty(0, np.int64)
        self._next_id = 0
        self.negative_tuples = 0
        self.expirations = 0

    def state_size(self) -> int:
        return int(((self._n > 0) | (self._m > 0)).sum())

    def stats(self) -> dict:
        d = super().stats()
        d["negative_tuples"] = self.negative_tuples
        d["expirations"] = self.expirations
        d["distinct_values"] = self.state_size()
        return d

    def _codes(self, vals):
        fp, _ = fingerprints(vals)
        G = len(self._dict)
        c = self._dict.codes(fp)
        new = c >= G
        if new.any():
            uc, first = np.unique(c[new], return_index=True)
            pos = np.flatnonzero(new)[first]
            if self._vals is None:
                self._vals = [v[:0] for v in vals]
            self._vals = [np.concatenate([k, _same_kind(v[pos], k)]) for k, v in zip(self._vals, vals)]
            k = len(uc)
            self._n = np.concatenate([self._n, np.zeros(k, np.int64)])
            self._m = np.concatenate([self._m, np.zeros(k, np.int64)])
            self._id = np.concatenate([self._id, np.arange(self._next_id, self._next_id + k)])
            self._next_id += k
        return c

    def _step(self, now, inputs):
        parts = []
        for port, (ch, cols) in enumerate(zip(inputs, (self.columns, self.right_columns))):
            if ch is None or not len(ch):
                continue
            if isinstance(ch, Batch):
                raise SketchQLError(f"{self.kind.upper()} input {port} must be Changes (put a WindowScan first)")
            miss = [c for c in cols if c not in ch.columns]
            if miss:
                raise SketchQLError(f"{self.kind.upper()} input {port}: column(s) {miss} not in {ch.names}")
            parts.append((port, [ch.columns[c] for c in cols], ch.at, ch.sign.astype(np.int64)))
        if not parts:
            return Changes.empty(self.columns)
        vals = [np.concatenate([p[1][c] for p in parts]) if len(parts) > 1 else parts[0][1][c]
                for c in range(len(self.columns))]
        if len(parts) > 1:
            vals = [_common(v, [p[1][c] for p in parts]) for c, v in enumerate(vals)]
        g = self._codes(vals)
        at = np.concatenate([p[2] for p in parts])
        dn = np.concatenate([p[3] if p[0] == 0 else np.zeros(len(p[3]), np.int64) for p in parts])
        dm = np.concatenate([p[3] if p[0] == 1 else np.zeros(len(p[3]), np.int64) for p in parts])
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
            raise SketchQLError(f"{self.kind.upper()}: more retractions than insertions for a value")
        last = np.ones(n, bool)
        if n > 1:
            last[:-1] = (g[1:] != g[:-1]) | (at[1:] != at[:-1])
        pts = np.flatnonzero(last)
        gp = g[pts]
        mult = _mult(self.kind, self.all, na[pts], ma[pts])
        first = segment_starts(gp)
        before = np.where(first, _mult(self.kind, self.all, self._n[gp], self._m[gp]), np.roll(mult, 1))
        d = mult - before
        if self.kind == "except":
            # right-side growth at this point: the fall it causes is premature (negative tuples)
            m_before = np.where(first, self._m[gp], np.roll(ma[pts], 1))
            grow = np.maximum(0, ma[pts] - m_before)
            neg = np.minimum(np.maximum(0, -d), np.where(grow > 0, np.maximum(0, -d), 0))
            self.negative_tuples += int(neg.sum())
            self.expirations += int(np.maximum(0, -d).sum() - neg.sum())
        else:
            self.expirations += int(np.maximum(0, -d).sum())
        reps = np.abs(d)
        idx = np.repeat(np.arange(len(pts)), reps)
        sign = np.repeat(np.sign(d), reps).astype(np.int8)
        L = pts[np.r_[gp[1:] != gp[:-1], True]] if len(pts) else pts
        self._n[g[L]] = na[L]
        self._m[g[L]] = ma[L]
        gi = gp[idx]
        rows = Batch({c: self._vals[k][gi] for k, c in enumerate(self.columns)}, ts=at[pts][idx])
        out = Changes(rows, sign, at[pts][idx], self._id[gi])
        self._compact()
        return out

    def _compact(self):
        G = len(self._n)
        if G < 1024:
            return
        keep = (self._n > 0) | (self._m > 0)
        if keep.sum() * 2 > G:
            return
        self._dict.compact(keep)
        self._vals = [v[keep] for v in self._vals]
        self._n, self._m, self._id = self._n[keep], self._m[keep], self._id[keep]


def _same_kind(v, like):
    if like.dtype.kind == "O" or v.dtype.kind == "O":
        return v.astype(object) if like.dtype.kind == "O" else v
    return v


def _common(v, parts):
    if any(p.dtype.kind in "OUS" for p in parts) and v.dtype.kind != "O":
        return np.concatenate([p.astype(object) for p in parts])
    return v


class UnionAll(Operator):
    """``left UNION ALL right``: the merge of two change streams (no state).

    Rows keep their own ts; the right side's ``right_columns`` are renamed to
    ``columns``; rid = mix(port, rid) so the two sides' identities never
    collide.  Update pattern: the more complex of the inputs' (rule 2).

    >>> import numpy as np
    >>> u = UnionAll(["v"], ["w"])
    >>> a = Changes.inserts(Batch({"v": np.array([1])}, ts=np.array([1.])), at=[1.], rid=[0])
    >>> b = Changes.inserts(Batch({"w": np.array([2])}, ts=np.array([1.])), at=[1.], rid=[0])
    >>> sorted(u.step(1, a, b).columns["v"].tolist())
    [1, 2]
    """

    n_inputs = 2
    update_pattern = WKS

    def __init__(self, columns: Sequence[str], right_columns: Sequence[str] | None = None):
        super().__init__()
        self.columns = [columns] if isinstance(columns, str) else list(columns)
        self.right_columns = self.columns if right_columns is None else list(right_columns)
        if len(self.right_columns) != len(self.columns):
            raise SketchQLError(f"UNION ALL needs the same number of columns on both sides "
                                f"({len(self.columns)} vs {len(self.right_columns)})")

    def _step(self, now, inputs):
        outs = []
        for port, (ch, cols) in enumerate(zip(inputs, (self.columns, self.right_columns))):
            if ch is None or not len(ch):
                continue
            miss = [c for c in cols if c not in ch.columns]
            if miss:
                raise SketchQLError(f"UNION ALL input {port}: column(s) {miss} not in {ch.names}")
            rows = Batch({c: ch.columns[rc] for c, rc in zip(self.columns, cols)}, ts=ch.ts)
            outs.append(Changes(rows, ch.sign, ch.at, mix_rids(np.full(len(ch), port, np.int64), ch.rid),
                                sort=False))
        if not outs:
            return Changes.empty(self.columns)
        if len(outs) == 2:
            a, b = outs
            for k, c in enumerate(self.columns):
                x, y = a.columns[c], b.columns[c]
                if (x.dtype.kind == "O") != (y.dtype.kind == "O"):
                    a.rows.columns[c], b.rows.columns[c] = x.astype(object), y.astype(object)
        out = Changes.concat(outs)
        self._work += len(out)
        return Changes(out.rows, out.sign, out.at, out.rid)
