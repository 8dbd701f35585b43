"""Grouped aggregates over a change stream."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ...errors import SketchQLError
from ..changes import Batch, Changes
from ._keys import KeyDict, fingerprints, segment_starts, stable_order, time_ranks
from .base import Operator, STR
from .holistic import SortedPairs

__all__ = ["AggSpec", "Aggregate"]

_SUBTRACTABLE = {"count", "sum", "avg"}
_HOLISTIC = {"min", "max", "count_distinct", "median", "quantile"}


@dataclass(frozen=True)
class AggSpec:
    """One aggregate: ``func`` in count / sum / avg / min / max /
    count_distinct / median / quantile; ``column`` (None = COUNT(*));
    ``name`` of the output column; ``q`` in [0, 1] for quantile
    (continuous: linear interpolation, like DuckDB's quantile_cont).

    >>> AggSpec("sum", "price").out_name
    'sum_price'
    """

    func: str
    column: str | None = None
    name: str | None = None
    q: float | None = None

    def __post_init__(self):
        f = self.func.lower()
        object.__setattr__(self, "func", f)
        if f not in _SUBTRACTABLE | _HOLISTIC:
            raise SketchQLError(f"unknown aggregate {self.func!r}; use one of {sorted(_SUBTRACTABLE | _HOLISTIC)}")
        if self.column is None and f != "count":
            raise SketchQLError(f"{f.upper()} needs a column")
        if f == "quantile" and (self.q is None or not 0 <= self.q <= 1):
            raise SketchQLError(f"QUANTILE needs q in [0, 1], got {self.q}")

    @property
    def out_name(self) -> str:
        return self.name or (f"{self.func}_{self.column}" if self.column else "count")


class Aggregate(Operator):
    """Grouped aggregation maintained incrementally from + / − changes.

    For each group the operator holds the row count and, per aggregate, either
    running sums (COUNT, SUM, AVG: subtractable, updated in one vectorized
    cumulative sum per step) or a per-group structure (MIN/MAX: current
    extreme, rescanned only when the extreme's last copy leaves;
    COUNT(DISTINCT): distinct count; MEDIAN/QUANTILE: k-th value by a Fenwick
    tree -- all over one sorted (group, value, count) array per aggregate,
    :class:`~sketchql.operators.exact.holistic.SortedPairs`, stepped by a
    compiled loop).
    At every time at which a group changes value it emits −(old row) and
    +(new row) (nothing when the value is unchanged); a group that loses its
    last tuple emits only the − -- it disappears (W6).  With no ``group_by``
    there is exactly one row from the operator's first step on (SQL: an
    aggregate over an empty window has a row): COUNT reads 0 and every other
    aggregate -- SUM included -- NULL (NaN) on an empty window.  NaN inputs are
    ignored (SQL NULL).  Output: group columns + one column per aggregate;
    row ts = the change time.  Update pattern: strict (values change at
    arbitrary times).

    >>> import numpy as np
    >>> from sketchql.operators.exact import WindowScan, WindowSpec, Chain
    >>> q = Chain(WindowScan(WindowSpec.range(10)), Aggregate(["g"], [AggSpec("sum", "v", "s")]))
    >>> ch = q.push(Batch({"g": np.array([1, 1]), "v": np.array([5., 3.])}, ts=np.array([1., 2.])))
    >>> ch = q.advance(12)
    >>> list(zip(ch.at.tolist(), ch.sign.tolist(), ch.columns["s"].tolist()))
    [(11.0, -1, 8.0), (11.0, 1, 3.0), (12.0, -1, 3.0)]
    >>> g = Aggregate([], [AggSpec("count", None, "n"), AggSpec("sum", "v", "s")])
    >>> r = g.advance(0.0)          # a global aggregate has its row before any input
    >>> r.columns["n"].tolist(), r.columns["s"].tolist()
    ([0], [nan])
    """

    update_pattern = STR

    def __init__(self, group_by: Sequence[str], aggs: Sequence[AggSpec]):
        super().__init__()
        self.group_by = [group_by] if isinstance(group_by, str) else list(group_by)
        self.aggs = [a if isinstance(a, AggSpec) else AggSpec(*a) for a in aggs]
        if not self.aggs:
            raise SketchQLError("Aggregate needs at least one aggregate")
        names = self.group_by + [a.out_name for a in self.aggs]
        if len(set(names)) != len(names):
            raise SketchQLError(f"aggregate output has duplicate column names {names}")
        self._gkeys = None                    # dict col -> array, one entry per known group
        self._gdict = KeyDict()               # group-key fingerprint -> group index
        self._cnt = np.empty(0, np.int64)      # rows per group
        self._n = [np.empty(0, np.int64) for _ in self.aggs]     # non-null count per agg
        self._s = [np.empty(0) for _ in self.aggs]               # running sum per agg
        # one sorted (group, value, count) state per column: MIN(x), MAX(x), MEDIAN(x), ... of one
        # column share it (one merge per step, then one compiled pass per aggregate)
        self._hol: list = [None] * len(self.aggs)          # the state aggregate k reads
        self._hol_lead: dict = {}                          # first aggregate of a state -> its readers
        first = {}
        for k, a in enumerate(self.aggs):
            if a.func in _HOLISTIC:
                if a.column in first:
                    k0 = first[a.column]
                    self._hol[k] = self._hol[k0]
                    self._hol[k0].share(a.func, a.q)
                    self._hol_lead[k0].append(k)
                else:
                    first[a.column] = k
                    self._hol[k] = SortedPairs(a.func, a.q)
                    self._hol_lead[k] = [k]
        self._hval = [np.empty(0) for _ in self.aggs]            # last holistic value per group
        self._rid = np.empty(0, np.int64)      # current output rid per group (-1: none)
        self._exists = np.empty(0, bool)
        self._next_rid = 0

    def state_size(self) -> int:
        n = int(self._exists.sum())
        for h in self._hol:
            if h is not None:
                n += len(h)      # a shared state counts once per aggregate reading it
        return n

    def stats(self) -> dict:
        d = super().stats()
        d["groups"] = int(self._exists.sum())
        d["rescans"] = sum(self._hol[k].rescans for k in self._hol_lead)
        return d

    # -- group bookkeeping ------------------------------------------------
    def _group_index(self, rows: Batch) -> np.ndarray:
        n = len(rows)
        if not self.group_by:
            if self._gkeys is None:
                self._gkeys = {}
                self._grow(1)
            return np.zeros(n, np.int64)
        miss = [c for c in self.group_by if c not in rows.columns]
        if miss:
            raise SketchQLError(f"GROUP BY column(s) {miss} not in the input {rows.names}")
        if self._gkeys is None:
            self._gkeys = {c: rows.columns[c][:0] for c in self.group_by}
        G = len(self._cnt)
        # persistent codes of the group keys' fingerprints (no re-coding of the known groups)
        fp, _ = fingerprints([rows.columns[c] for c in self.group_by])
        g = self._gdict.codes(fp)
        if len(self._gdict) > G:
            new = g >= G
            uc, first = np.unique(g[new], return_index=True)
            pos = np.flatnonzero(new)[first]
            self._gkeys = {c: _cat(self._gkeys[c], rows.columns[c][pos]) for c in self.group_by}
            self._grow(len(uc))
        return g

    def _grow(self, k):
        self._cnt = np.concatenate([self._cnt, np.zeros(k, np.int64)])
        self._n = [np.concatenate([a, np.zeros(k, np.int64)]) for a in self._n]
        self._s = [np.concatenate([a, np.zeros(k)]) for a in self._s]
        self._hval = [np.concatenate([a, np.full(k, np.nan)]) for a in self._hval]
        self._rid = np.concatenate([self._rid, -np.ones(k, np.int64)])
        self._exists = np.concatenate([self._exists, np.zeros(k, bool)])

    def _compact(self):
        """Forget groups that disappeared (keeps state proportional to live groups)."""
        if not self.group_by or len(self._cnt) < 64:
            return
        dead = ~self._exists & (self._cnt == 0)
        if dead.sum() * 2 < len(dead):
            return
        keep = ~dead
        newidx = np.cumsum(keep) - 1
        self._gdict.compact(keep)
        self._gkeys = {c: v[keep] for c, v in self._gkeys.items()}
        self._cnt = self._cnt[keep]
        self._n = [a[keep] for a in self._n]
        self._s = [a[keep] for a in self._s]
        self._hval = [a[keep] for a in self._hval]
        self._rid, self._exists = self._rid[keep], self._exists[keep]
        for k in self._hol_lead:
            self._hol[k].remap(newidx, keep)

    def _values_from_state(self, gi: np.ndarray, cnt, ns, ss, hol_vals):
        out = []
        for k, a in enumerate(self.aggs):
            if a.func == "count":
                out.append(cnt.astype(np.int64) if a.column is None else ns[k].astype(np.int64))
            elif a.func == "sum":
                v = ss[k].copy()
                v[ns[k] == 0] = np.nan          # SQL: the SUM of no values is NULL
                out.append(v)
            elif a.func == "avg":
                with np.errstate(invalid="ignore", divide="ignore"):
                    out.append(np.where(ns[k] > 0, ss[k] / np.maximum(ns[k], 1), np.nan))
            elif a.func == "count_distinct":     # a count: 0 (not NULL) over an empty window, an integer
                v = np.asarray(hol_vals[k], np.float64)
                out.append(np.where(np.isnan(v), 0.0, v).astype(np.int64))
            else:
                out.append(hol_vals[k])
        return out

    # -- the step ---------------------------------------------------------
    def _initial_row(self, now, ch) -> Changes | None:
        """A global aggregate exists from the first instant (SQL: COUNT = 0, SUM NULL)."""
        if self.group_by or self._gkeys is not None:
            return None
        self._gkeys = {}
        self._grow(1)
        if ch is not None and len(ch) and float(ch.at.min()) <= now:
            return None                  # the first input's point creates the row at its time
        self._exists[0] = True
        self._rid[0] = self._next_rid
        self._next_rid += 1
        vals = self._stored_values(np.zeros(1, np.int64))
        rows = Batch({a.out_name: np.asarray(v) for a, v in zip(self.aggs, vals)}, ts=np.array([now]))
        return Changes.inserts(rows, at=[now], rid=[self._rid[0]])

    def _step(self, now, inputs):
        ch = inputs[0]
        init = self._initial_row(now, ch)
        if init is not None:
            return init
        if ch is None or not len(ch):
            return Changes.empty(self.group_by + [a.out_name for a in self.aggs])
        if isinstance(ch, Batch):
            raise SketchQLError("Aggregate input must be Changes (put a WindowScan before it)")
        for a in self.aggs:
            if a.column is not None and a.column not in ch.columns:
                raise SketchQLError(f"aggregate column {a.column!r} not in the input {ch.names}")
        g = self._group_index(ch.rows)
        o = stable_order(g, len(self._cnt))           # input is sorted by (at, sign)
        g, at, s = g[o], ch.at[o], ch.sign[o].astype(np.int64)
        rank = time_ranks(ch.at)                      # dense rank of each change time
        rank = rank[o] if rank is not None else None
        n = len(g)
        self._work += n
        gstart = segment_starts(g)
        seg_id = np.cumsum(gstart) - 1
        first_of_seg = np.flatnonzero(gstart)

        def seg_cumsum(x, base):
            c = np.cumsum(x)
            off = (c - x)[first_of_seg]               # cumsum before each segment
            return c - off[seg_id] + base[g]

        # emission points: last row of each (group, at) run
        last = np.ones(n, bool)
        if n > 1:
            last[:-1] = (g[1:] != g[:-1]) | (at[1:] != at[:-1])
        cnt_after = seg_cumsum(s, self._cnt)
        if np.any(cnt_after < 0):
            raise SketchQLError("aggregate: more retractions than insertions in a group")
        ns_after, ss_after = [], []
        vals = {}
        for k, a in enumerate(self.aggs):
            if a.column is None:
                ns_after.append(cnt_after)
                ss_after.append(np.zeros(n))
                continue
            v = ch.columns[a.column][o]
            if a.func in _SUBTRACTABLE:
                vf = v.astype(np.float64)
                nn = ~np.isnan(vf)
                ns_after.append(seg_cumsum(s * nn, self._n[k]))
                ss_after.append(seg_cumsum(np.where(nn, vf * s, 0.0), self._s[k]))
            else:
                ns_after.append(np.zeros(n, np.int64))
                ss_after.append(np.zeros(n))
                if k in self._hol_lead:                   # readers of a shared state: filled here
                    for kk, r in zip(self._hol_lead[k], self._hol[k].step_all(g, v, s, last)):
                        vals[kk] = r
        pts = np.flatnonzero(last)
        gp = g[pts]
        cnt_p = cnt_after[pts]
        # exact zero for empty sums (no float residue)
        for k in range(len(self.aggs)):
            ss_after[k][ns_after[k] == 0] = 0.0
        new_vals = self._values_from_state(
            gp, cnt_p, [x[pts] for x in ns_after], [x[pts] for x in ss_after],
            {k: v[pts] for k, v in vals.items()})
        # values before each point: previous point of the group, else the stored row
        first_pt = segment_starts(gp)
        prev = np.arange(len(pts)) - 1
        exists_after = (cnt_p > 0) if self.group_by else np.ones(len(pts), bool)
        exists_before = np.where(first_pt, self._exists[gp], np.roll(exists_after, 1))
        old_vals = []
        stored = self._stored_values(gp)
        for k, nv in enumerate(new_vals):
            ov = np.where(first_pt, stored[k], nv[prev] if len(nv) else nv)
            old_vals.append(ov)
        changed = exists_after != exists_before
        for nv, ov in zip(new_vals, old_vals):
            same = (nv == ov) | (_isnan(nv) & _isnan(ov))
            changed |= exists_after & exists_before & ~same
        emit_plus = changed & exists_after
        emit_minus = changed & exists_before
        # rids: + gets a fresh id; − carries the group's current id (forward-filled)
        new_ids = np.full(len(pts), -1, np.int64)
        k_plus = int(emit_plus.sum())
        new_ids[emit_plus] = np.arange(self._next_rid, self._next_rid + k_plus)
        self._next_rid += k_plus
        defined = changed | first_pt
        cur = np.where(changed, new_ids, np.where(first_pt, self._rid[gp], -1))
        fill = np.maximum.accumulate(np.where(defined, np.arange(len(pts)), 0))
        cur_ff = cur[fill]                            # rid shown after each point
        before_rid = np.where(first_pt, self._rid[gp], np.roll(cur_ff, 1))
        # outputs, built once in (at, sign) order: retractions first, then a stable sort on
        # the time (the order np.lexsort((sign, at)) gives; no re-sort in Changes)
        im, ip = np.flatnonzero(emit_minus), np.flatnonzero(emit_plus)
        at_p = at[pts]
        t_out = np.concatenate([at_p[im], at_p[ip]])
        if rank is not None:                          # the same order, sorting small integer ranks
            r_p = rank[pts]
            o_out = stable_order(np.concatenate([r_p[im], r_p[ip]]), int(rank.max(initial=0)) + 1)
        else:
            o_out = np.argsort(t_out, kind="stable")
        t_out = t_out[o_out]
        sel = np.concatenate([im, ip])[o_out]
        cols = {c: self._gkeys[c][gp[sel]] for c in self.group_by}
        for a, ov, nv in zip(self.aggs, old_vals, new_vals):
            v = nv[ip] if not len(im) else (ov[im] if not len(ip) else np.concatenate([ov[im], nv[ip]]))
            cols[a.out_name] = v[o_out]
        sign_out = np.where(o_out < len(im), -1, 1).astype(np.int8)
        out = Changes(Batch(cols, ts=t_out), sign_out, t_out,
                      np.concatenate([before_rid[im], new_ids[ip]])[o_out], sort=False)
        # commit state: last point of each group
        lastpt = np.ones(len(pts), bool)
        if len(pts) > 1:
            lastpt[:-1] = gp[1:] != gp[:-1]
        L = pts[lastpt]
        gl_ = g[L]
        self._cnt[gl_] = cnt_after[L]
        for k in range(len(self.aggs)):
            self._n[k][gl_] = ns_after[k][L]
            self._s[k][gl_] = ss_after[k][L]
        self._exists[gl_] = exists_after[lastpt]
        self._rid[gl_] = cur_ff[lastpt]
        for k, a in enumerate(self.aggs):
            if a.func in _HOLISTIC:
                self._hval[k][gl_] = vals[k][L]
        self._compact()
        return out

    def _stored_values(self, gp):
        hol = {k: self._hval[k][gp] for k, a in enumerate(self.aggs) if a.func in _HOLISTIC}
        return self._values_from_state(gp, self._cnt[gp], [x[gp] for x in self._n],
                                       [x[gp] for x in self._s], hol)


def _isnan(x):
    x = np.asarray(x)
    return np.isnan(x) if x.dtype.kind == "f" else np.zeros(x.shape, bool)


def _cat(a, b):
    if (a.dtype.kind == "O") != (b.dtype.kind == "O"):
        return np.concatenate([a.astype(object), b.astype(object)])
    return np.concatenate([a, b])
