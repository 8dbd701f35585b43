"""Semi-join and anti-join of a change stream with a windowed relation:
``[NOT] IN (subquery)`` and ``[NOT] EXISTS (correlated subquery)``."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import SketchQLError
from ..changes import Batch, Changes
from ._keys import KeyDict, fingerprints, segment_starts
from .base import Operator, STR, WK

__all__ = ["SemiJoin"]


class SemiJoin(Operator):
    """Left rows that have (``anti=False``) or lack (``anti=True``) a match on the right.

    Port 0 carries the left change stream (the rows of the outer query), port
    1 the right one (the subquery's rows); ``on = [(left_col, right_col), ...]``
    are the equalities (empty: the uncorrelated ``EXISTS``: match iff the
    right side is not empty).  With m_k(τ) the number of right rows with key
    k at τ, a live left row with key k is in the result at τ iff

    * semi (IN / EXISTS): m_k(τ) > 0;
    * anti (NOT EXISTS): m_k(τ) = 0 -- a NULL key matches nothing;
    * anti with ``null_aware=True`` (SQL ``NOT IN``): the right side is empty,
      or the key is not NULL, m_k(τ) = 0 and the right side holds no NULL.

    A left row is emitted (+) when it arrives passing, retracted (−) when it
    leaves its window, and -- the strict, non-monotonic part (golab-ozsu
    update-pattern paper §2.1, §3) -- retracted by a *negative tuple* when a
    right arrival makes it fail, and re-emitted exactly once when the last
    matching right row leaves (same rid; − sorts before + at one instant).
    ``stats()`` counts ``negative_tuples`` and ``reappearances``.

    Vectorized: the right side's counts per key after each change time come
    from one segmented cumulative sum; every left row is checked at its
    arrival and at the change points of its own key inside its lifetime
    (searchsorted on (key, time) ranks), and transitions are emitted.

    >>> import numpy as np
    >>> aj = SemiJoin([("k", "k")], anti=True)
    >>> l = Changes.inserts(Batch({"k": np.array([1, 2])}, ts=np.array([1., 1.])), at=[1., 1.], rid=[0, 1])
    >>> r = Changes.inserts(Batch({"k": np.array([2])}, ts=np.array([2.])), at=[2.], rid=[0])
    >>> out = aj.step(2, l, r)
    >>> list(zip(out.at.tolist(), out.sign.tolist(), out.columns["k"].tolist()))
    [(1.0, 1, 1), (1.0, 1, 2), (2.0, -1, 2)]
    """

    n_inputs = 2

    def __init__(self, on: Sequence, anti: bool = False, null_aware: bool = False):
        super().__init__()
        on = [(c, c) if isinstance(c, str) else tuple(c) for c in ([on] if isinstance(on, str) else on)]
        self.on = on
        self.anti, self.null_aware = bool(anti), bool(null_aware) and bool(anti)
        self.update_pattern = STR if anti else WK
        self._dict = KeyDict()
        self._m = np.empty(0, np.int64)
        self._mtot = 0
        self._mnull = 0
        self._cols = None
        self._ts = np.empty(0)
        self._rid = np.empty(0, np.int64)
        self._code = np.empty(0, np.int64)     # right-dictionary code of the key (−1 unknown so far)
        self._fp = np.empty(0, np.int64)
        self._lnull = np.empty(0, bool)
        self._shown = np.empty(0, bool)
        self.negative_tuples = 0
        self.reappearances = 0

    def state_size(self) -> int:
        return len(self._ts) + int((self._m > 0).sum())

    def stats(self) -> dict:
        d = super().stats()
        d["negative_tuples"] = self.negative_tuples
        d["reappearances"] = self.reappearances
        return d

    # -- helpers -------------------------------------------------------------
    def _passes(self, m, mtot, mnull, lnull):
        if not self.on:
            match = mtot > 0
        else:
            match = (m > 0) & ~lnull
        if not self.anti:
            return match
        if self.null_aware:
            return (mtot == 0) | (~lnull & (m == 0) & (mnull == 0))
        return ~match

    def _step(self, now, inputs):
        L, R = inputs
        clock = self.clock
        for p, x in enumerate(inputs):
            if x is not None and isinstance(x, Batch):
                raise SketchQLError(f"semi-join input {p} must be Changes (put a WindowScan first)")
        # ---- right side: counts per key after each change point
        g_t = np.empty(0)
        g_tot = np.empty(0, np.int64)
        g_null = np.empty(0, np.int64)
        pc = np.empty(0, np.int64)
        pt = np.empty(0)
        pm = np.empty(0, np.int64)
        base_tot, base_null = self._mtot, self._mnull
        m_start = self._m
        if R is not None and len(R):
            miss = [rc for _, rc in self.on if rc not in R.columns]
            if miss:
                raise SketchQLError(f"semi-join right input lacks column(s) {miss} (has {R.names})")
            s = R.sign.astype(np.int64)
            if self.on:
                fp, rnull = fingerprints([R.columns[rc] for _, rc in self.on])
            else:
                fp, rnull = np.zeros(len(R), np.int64), np.zeros(len(R), bool)
            G = len(self._dict)
            code = self._dict.codes(np.where(rnull, 0, fp)) if len(R) else np.empty(0, np.int64)
            if len(self._dict) > G:
                self._m = np.concatenate([self._m, np.zeros(len(self._dict) - G, np.int64)])
                # left rows whose key just became known
                unk = self._code < 0
                if unk.any():
                    self._code[unk] = np.where(self._lnull[unk], -1, self._dict.lookup(self._fp[unk]))
            code = np.where(rnull, -1, code)
            m_start = self._m.copy()
            # global counts (total rows, NULL-key rows) after each time
            o = np.argsort(R.at, kind="stable")
            at_o = R.at[o]
            tot = base_tot + np.cumsum(s[o])
            nul = base_null + np.cumsum(np.where(rnull[o], s[o], 0))
            lastt = np.r_[at_o[1:] != at_o[:-1], True]
            g_t, g_tot, g_null = at_o[lastt], tot[lastt], nul[lastt]
            self._mtot, self._mnull = int(tot[-1]), int(nul[-1])
            k = code >= 0
            if k.any():
                c, t, d = code[k], R.at[k], s[k]
                o = np.lexsort((t, c))
                c, t, d = c[o], t[o], d[o]
                st = segment_starts(c)
                seg = np.cumsum(st) - 1
                cs = np.cumsum(d)
                m_after = cs - (cs - d)[np.flatnonzero(st)][seg] + self._m[c]
                if (m_after < 0).any():
                    raise SketchQLError("semi-join: more retractions than insertions on the right side")
                last = np.r_[(c[1:] != c[:-1]) | (t[1:] != t[:-1]), True]
                pc, pt, pm = c[last], t[last], m_after[last]
                lastc = np.r_[c[1:] != c[:-1], True]
                self._m[c[lastc]] = m_after[lastc]
        # ---- left side: new rows and ends
        n_old = len(self._ts)
        start = np.full(n_old, -np.inf)
        end = np.full(n_old, np.inf)
        if L is not None and len(L):
            miss = [lc for lc, _ in self.on if lc not in L.columns]
            if miss:
                raise SketchQLError(f"semi-join left input lacks column(s) {miss} (has {L.names})")
            plus = L.sign > 0
            if plus.any():
                rows = L.rows.take(plus)
                if self._cols is None:
                    self._cols = {c: v[:0] for c, v in rows.columns.items()}
                if self.on:
                    fp, ln = fingerprints([rows.columns[lc] for lc, _ in self.on])
                else:
                    fp, ln = np.zeros(len(rows), np.int64), np.zeros(len(rows), bool)
                code = np.where(ln, -1, self._dict.lookup(fp))
                self._cols = {c: np.concatenate([self._cols[c], rows.columns[c]]) for c in self._cols}
                self._ts = np.concatenate([self._ts, rows.ts])
                self._rid = np.concatenate([self._rid, L.rid[plus]])
                self._fp = np.concatenate([self._fp, fp])
                self._code = np.concatenate([self._code, code])
                self._lnull = np.concatenate([self._lnull, ln])
                self._shown = np.concatenate([self._shown, np.zeros(len(rows), bool)])
                start = np.concatenate([start, L.at[plus]])
                end = np.concatenate([end, np.full(len(rows), np.inf)])
            if (~plus).any():
                mr, ma = L.rid[~plus], L.at[~plus]
                alive = np.flatnonzero(np.isinf(end))
                o = alive[np.argsort(self._rid[alive], kind="stable")]
                srt = self._rid[o]
                pos = np.searchsorted(srt, mr)
                posc = np.minimum(pos, max(len(srt) - 1, 0))
                if not len(srt) or np.any(srt[posc] != mr):
                    raise SketchQLError("semi-join: retraction of a left row that is not in the window")
                end[o[posc]] = ma
        n = len(self._ts)
        if n == 0:
            return Changes.empty(list(self._cols or []))
        self._work += n + len(pt)
        new = np.isfinite(start)
        # ---- check points per row: its key's change points inside [lo, end)
        lo = np.where(new, start, clock)
        # every time a count is looked up at must have its own rank (also the global change points)
        times = np.unique(np.concatenate([pt, g_t, lo[np.isfinite(lo)], end[np.isfinite(end)], [now]]))
        R_ = len(times) + 2

        def rank(t, side="left"):
            r = np.searchsorted(times, t, side=side) + 1
            return np.where(np.isneginf(t), 0, np.where(np.isposinf(t), R_ - 1, r))

        comp_p = pc * R_ + rank(pt)
        key = np.maximum(self._code, 0)
        has_key = self._code >= 0
        # events strictly after a new row's start (its start is checked on its own); at/after clock for old rows
        a = np.where(new, np.searchsorted(comp_p, key * R_ + rank(lo), side="right"),
                     np.searchsorted(comp_p, key * R_ + rank(lo), side="left"))
        b = np.searchsorted(comp_p, key * R_ + rank(end), side="left")
        cnt = np.where(has_key, np.maximum(b - a, 0), 0)
        ev_row = np.repeat(np.arange(n), cnt)
        offs = np.arange(int(cnt.sum())) - np.repeat(np.cumsum(cnt) - cnt, cnt)
        ev_pos = np.repeat(a, cnt) + offs
        chk_row = [ev_row]
        chk_t = [pt[ev_pos]]
        chk_m = [pm[ev_pos]]
        chk_kind = [np.ones(len(ev_row), np.int8)]            # 1: right change point
        # the start check of new rows: the key's count after every change <= start
        nr = np.flatnonzero(new)
        if len(nr):
            p = np.searchsorted(comp_p, key[nr] * R_ + rank(start[nr]), side="right") - 1
            pc_ok = (p >= 0) & (pc[np.maximum(p, 0)] == key[nr]) if len(pc) else np.zeros(len(nr), bool)
            m0 = np.where(pc_ok, pm[np.maximum(p, 0)] if len(pm) else 0,
                          m_start[key[nr]] if len(m_start) else 0)
            m0 = np.where(has_key[nr], m0, 0)
            chk_row.append(nr)
            chk_t.append(start[nr])
            chk_m.append(m0)
            chk_kind.append(np.zeros(len(nr), np.int8))          # 0: arrival
        glob = (not self.on) or self.null_aware
        if glob and len(g_t):
            # every row is also checked where the total / NULL counts change
            ga = np.where(new, np.searchsorted(g_t, lo, side="right"), np.searchsorted(g_t, lo, side="left"))
            gb = np.searchsorted(g_t, end, side="left")
            gc = np.maximum(gb - ga, 0)
            gr = np.repeat(np.arange(n), gc)
            goff = np.arange(int(gc.sum())) - np.repeat(np.cumsum(gc) - gc, gc)
            gt = g_t[np.repeat(ga, gc) + goff]
            p = np.searchsorted(comp_p, key[gr] * R_ + rank(gt), side="right") - 1
            ok = (p >= 0) & (pc[np.maximum(p, 0)] == key[gr]) if len(pc) else np.zeros(len(gr), bool)
            gm = np.where(ok, pm[np.maximum(p, 0)] if len(pm) else 0, m_start[key[gr]] if len(m_start) else 0)
            chk_row.append(gr)
            chk_t.append(gt)
            chk_m.append(np.where(has_key[gr], gm, 0))
            chk_kind.append(np.full(len(gr), 2, np.int8))
        cr = np.concatenate(chk_row)
        ct = np.concatenate(chk_t)
        cm = np.concatenate(chk_m)
        ck = np.concatenate(chk_kind)
        o = np.lexsort((ck, ct, cr))
        cr, ct, cm, ck = cr[o], ct[o], cm[o], ck[o]
        # global counts at each check time
        gi = np.searchsorted(g_t, ct, side="right") - 1
        mtot = np.where(gi >= 0, g_tot[np.maximum(gi, 0)] if len(g_tot) else base_tot, base_tot)
        mnull = np.where(gi >= 0, g_null[np.maximum(gi, 0)] if len(g_null) else base_null, base_null)
        ok = self._passes(cm, mtot, mnull, self._lnull[cr])
        first = segment_starts(cr)
        prev = np.where(first, self._shown[cr] & ~new[cr], np.roll(ok, 1))
        up = ok & ~prev
        down = ~ok & prev
        # final state per row
        state = self._shown & ~new
        lastc = np.r_[cr[1:] != cr[:-1], True] if len(cr) else np.zeros(0, bool)
        state[cr[lastc]] = ok[lastc]
        ended = end <= now
        exp_rows = np.flatnonzero(ended & state)
        self.negative_tuples += int(down.sum())
        self.reappearances += int((up & (ck != 0)).sum())
        out_rows = np.concatenate([cr[up], cr[down], exp_rows])
        out_sign = np.concatenate([np.ones(int(up.sum()), np.int8), -np.ones(int(down.sum()), np.int8),
                                   -np.ones(len(exp_rows), np.int8)])
        out_at = np.concatenate([ct[up], ct[down], end[exp_rows]])
        rows = Batch({c: v[out_rows] for c, v in self._cols.items()}, ts=self._ts[out_rows])
        out = Changes(rows, out_sign, out_at, self._rid[out_rows])
        # commit
        keep = ~ended
        self._shown = state
        if not keep.all():
            self._cols = {c: v[keep] for c, v in self._cols.items()}
            self._ts, self._rid, self._fp = self._ts[keep], self._rid[keep], self._fp[keep]
            self._code, self._lnull, self._shown = self._code[keep], self._lnull[keep], self._shown[keep]
        return out
