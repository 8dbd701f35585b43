"""Window joins: symmetric hash join, MJoin (multi-way, no intermediate
state) and the join of a change stream with a static table."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ...errors import SketchQLError
from ..changes import Batch, Changes, mix_rids
from ._kernels import join_emit, join_extend
from ._keys import _NULL_FP, expand_matches, fingerprints, joint_codes, null_rows
from .base import Operator, WK, check_step_rows, step_row_cap

__all__ = ["MJoin", "SymmetricHashJoin", "StaticJoin"]


class _State:
    """One input's live rows: columns, ts, rid, lifetime [start, end)."""

    __slots__ = ("cols", "ts", "rid", "start", "end", "new", "touched", "fps", "keycols")

    def __init__(self, keycols=()):
        self.keycols = list(dict.fromkeys(keycols))   # join columns: fingerprinted once, on arrival
        self.fps = {c: (np.empty(0, np.int64), np.empty(0, bool)) for c in self.keycols}
        self.cols = None
        self.ts = np.empty(0)
        self.rid = np.empty(0, np.int64)
        self.start = np.empty(0)
        self.end = np.empty(0)

    def __len__(self):
        return len(self.ts)

    def apply(self, ch: Changes | None, where: str):
        n0 = len(self.ts)
        self.new = np.zeros(n0, bool)
        self.touched = np.zeros(n0, bool)
        if ch is None or not len(ch):
            return
        plus = ch.sign > 0
        if plus.any():
            rows = ch.rows.take(plus)
            if self.cols is None:
                self.cols = {k: v[:0] for k, v in rows.columns.items()}
            elif list(rows.columns) != list(self.cols):
                raise SketchQLError(f"{where}: columns {rows.names} differ from earlier {list(self.cols)}")
            for c in self.keycols:
                if c not in rows.columns:
                    raise SketchQLError(f"join column {c!r} not in {where} (columns {rows.names})")
                fp, null = fingerprints([rows.columns[c]])
                ofp, onull = self.fps[c]
                self.fps[c] = (np.concatenate([ofp, fp]), np.concatenate([onull, null]))
            self.cols = {k: np.concatenate([self.cols[k], rows.columns[k]]) for k in self.cols}
            self.ts = np.concatenate([self.ts, rows.ts])
            self.rid = np.concatenate([self.rid, ch.rid[plus]])
            self.start = np.concatenate([self.start, ch.at[plus]])
            k = int(plus.sum())
            self.end = np.concatenate([self.end, np.full(k, np.inf)])
            self.new = np.concatenate([self.new, np.ones(k, bool)])
            self.touched = np.concatenate([self.touched, np.ones(k, bool)])
        minus = ~plus
        if minus.any():
            mr = ch.rid[minus]
            alive = np.flatnonzero(np.isinf(self.end))
            ra = self.rid[alive]
            # rows arrive with increasing rids from a window scan: the state is then already
            # sorted by rid and an expiry is a searchsorted, not a sort
            o = alive if (len(ra) < 2 or bool(np.all(ra[1:] > ra[:-1]))) else \
                alive[np.argsort(ra, kind="stable")]
            srt = self.rid[o]
            pos = np.searchsorted(srt, mr)
            posc = np.minimum(pos, max(len(srt) - 1, 0))
            if not len(srt) or np.any(srt[posc] != mr):
                bad = mr[(pos >= len(srt)) | (srt[posc] != mr)][0] if len(srt) else mr[0]
                raise SketchQLError(f"{where}: retraction of row rid={int(bad)} that is not in the window")
            idx = o[posc]
            seen = np.zeros(len(self.ts), bool)
            seen[idx] = True
            if int(seen.sum()) != len(idx):
                raise SketchQLError(f"{where}: the same row is retracted twice in one step")
            self.end[idx] = ch.at[minus]
            self.touched[idx] = True

    def purge(self):
        keep = np.isinf(self.end)
        if not keep.all():
            self.fps = {c: (f[keep], nl[keep]) for c, (f, nl) in self.fps.items()}
            self.cols = {k: v[keep] for k, v in self.cols.items()}
            self.ts, self.rid = self.ts[keep], self.rid[keep]
            self.start, self.end = self.start[keep], self.end[keep]


class MJoin(Operator):
    """Multi-way windowed hash join with no intermediate state (MJoin).

    Every input keeps only its own live rows (a lifetime [start, end): start
    = the +1's ``at``, end = the −1's ``at``, ∞ while alive).  A composite
    (r_1, ..., r_k) satisfying all equality ``conditions`` lives on
    [max start, min end) and exists iff that interval is non-empty -- i.e.
    every member is alive when the youngest arrives (golab-ozsu multi-join
    paper, Tables 2-3, reference case W1).  In a step, each input i whose rows
    were inserted or retracted probes the other inputs in ``probe_orders[i]``:
    partial composites are extended by a hash (sort + searchsorted) lookup on
    a condition linking the next input to an already bound one, and pruned at
    once when their lifetime becomes empty.  A composite is built by its
    lowest-index touched member only (no duplicates).  Emits + at
    max start when a member is new, − at min end when a member left.  Output
    columns: input i's columns prefixed with ``prefixes[i]``; ts = max of the
    members' ts; rid = mix of the members' rids.  Update pattern: weak.

    >>> import numpy as np
    >>> j = MJoin(3, [((0, "a"), (1, "a")), ((1, "a"), (2, "a"))], prefixes=["s1.", "s2.", "s3."])
    >>> j.n_inputs
    3
    """

    update_pattern = WK

    def __init__(self, n_inputs: int, conditions, prefixes: Sequence[str] | None = None,
                 probe_orders: Mapping[int, Sequence[int]] | None = None):
        super().__init__()
        if n_inputs < 2:
            raise SketchQLError("a join needs at least two inputs")
        self.n_inputs = int(n_inputs)
        self.conditions = []
        for c in conditions:
            (i, ci), (j, cj) = c
            for k in (i, j):
                if not 0 <= k < n_inputs:
                    raise SketchQLError(f"join condition {c!r} names input {k}, but there are {n_inputs}")
            if i == j:
                raise SketchQLError(f"join condition {c!r} compares an input with itself")
            self.conditions.append(((int(i), str(ci)), (int(j), str(cj))))
        self.prefixes = list(prefixes) if prefixes is not None else [""] * n_inputs
        if len(self.prefixes) != n_inputs:
            raise SketchQLError(f"need {n_inputs} prefixes, got {len(self.prefixes)}")
        self.probe_orders = {i: [j for j in range(n_inputs) if j != i] for i in range(n_inputs)}
        for i, o in (probe_orders or {}).items():
            self.set_probe_order(i, o)
        keycols = {i: [] for i in range(n_inputs)}
        for (i, ci), (j, cj) in self.conditions:
            keycols[i].append(ci)
            keycols[j].append(cj)
        self._states = [_State(keycols[i]) for i in range(n_inputs)]
        self._out_names = None

    def set_probe_order(self, i: int, order: Sequence[int]):
        """Order in which a new tuple of input ``i`` probes the other inputs."""
        order = [int(x) for x in order]
        if sorted(order) != sorted(j for j in range(self.n_inputs) if j != i):
            raise SketchQLError(f"probe order for input {i} must list every other input once, got {order}")
        self.probe_orders[int(i)] = order

    def state_size(self) -> int:
        return sum(len(s) for s in self._states)

    def _names(self):
        names = []
        for p, s in zip(self.prefixes, self._states):
            names += [p + c for c in s.cols]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})
            raise SketchQLError(f"join output has duplicate column names {dup}; give prefixes")
        return names

    def _step(self, now, inputs):
        S = self._states
        for i, (st, ch) in enumerate(zip(S, inputs)):
            if ch is not None and isinstance(ch, Batch):
                raise SketchQLError("join inputs must be Changes (put a WindowScan before the join)")
            st.apply(ch, f"{type(self).__name__} input {i}")
        if not any(s.touched.any() for s in S) or any(s.cols is None for s in S):
            for s in S:
                if s.cols is not None:
                    s.purge()
            return Changes.empty()
        if self._out_names is None:
            self._out_names = self._names()
        # key fingerprints per condition, kept in the states (computed once per row on arrival);
        # a NULL/NaN key gets a sentinel of its side, so it never equals anything (SQL)
        ccodes = []
        for (a, ca), (b, cb) in self.conditions:
            fa, na = S[a].fps[ca]
            fb, nb = S[b].fps[cb]
            ccodes.append({a: np.where(na, _NULL_FP ^ 1, fa) if na.any() else fa,
                           b: np.where(nb, _NULL_FP ^ 2, fb) if nb.any() else fb})
        sorted_cache = {}
        parts = []
        for i in range(self.n_inputs):
            seed = np.flatnonzero(S[i].touched)
            if not len(seed):
                continue
            idx = {i: seed}
            s_ = S[i].start[seed]
            e_ = S[i].end[seed]
            nw_ = S[i].new[seed]
            bound = [i]
            for j in self.probe_orders[i]:
                if not len(s_):
                    break
                link = [(ci, c) for ci, c in enumerate(self.conditions)
                        if (c[0][0] == j and c[1][0] in bound) or (c[1][0] == j and c[0][0] in bound)]
                if link:
                    # every condition linking j at once: one key per row (the conditions' key
                    # fingerprints chained), so the runs hold the true matches, not those of the
                    # first condition only; ``rest`` re-checks each condition (64-bit collisions)
                    cis = tuple(ci for ci, _ in link)
                    others = [c[0][0] if c[1][0] == j else c[1][0] for _, c in link]
                    key = (cis, j)
                    if key not in sorted_cache:
                        kj = ccodes[cis[0]][j] if len(cis) == 1 else mix_rids(*[ccodes[ci][j] for ci in cis])
                        o = np.argsort(kj, kind="stable")
                        sorted_cache[key] = (o, kj[o])
                    o, srt = sorted_cache[key]
                    pcs = [ccodes[ci][other][idx[other]] for ci, other in zip(cis, others)]
                    pc = pcs[0] if len(pcs) == 1 else mix_rids(*pcs)
                    lo = np.searchsorted(srt, pc, side="left")
                    hi = np.searchsorted(srt, pc, side="right")
                    rest = link[1:]
                else:                                   # no condition links j yet: every pair
                    n = len(S[j])
                    o = np.arange(n, dtype=np.int64)
                    lo = np.zeros(len(s_), np.int64)
                    hi = np.full(len(s_), n, np.int64)
                    rest = []
                total = int((hi - lo).sum())
                if step_row_cap() is not None:
                    # the new rows are counted before join_extend builds them (bounded memory)
                    check_step_rows(_new_pairs(lo, hi, o, nw_, S[j].new, S[j].touched if j < i else None),
                                    f"{type(self).__name__} (input {i} probing input {j})")
                self._work += total
                # one compiled pass: expand the key runs, drop pairs built by another touched
                # member, prune at once a partial composite whose members' lifetimes do not
                # overlap (unless it was emitted earlier -- no new member -- and must now be
                # retracted)
                pi, bj, s_, e_, nw_ = join_extend(lo, hi, total, o, s_, e_, nw_, S[j].start, S[j].end,
                                                  S[j].new, S[j].touched, j < i)
                if rest:
                    ok = np.ones(len(pi), bool)
                    for ci, c in rest:
                        other = c[0][0] if c[1][0] == j else c[1][0]
                        ok &= ccodes[ci][other][idx[other][pi]] == ccodes[ci][j][bj]
                    pi, bj, s_, e_, nw_ = pi[ok], bj[ok], s_[ok], e_[ok], nw_[ok]
                idx = {k: v[pi] for k, v in idx.items()}
                idx[j] = bj
                bound.append(j)
            if len(s_) and len(bound) == self.n_inputs:
                parts.append((idx, s_, e_, nw_))
        out = self._emit(parts) if parts else None
        for st in S:
            st.purge()
        if out is None:
            return Changes.empty(self._out_names)
        return out

    def _emit(self, parts):
        """+ at max start for composites with a new member, − at min end for retracted ones,
        in (at, sign) order, built by one compiled pass (:func:`._kernels.join_emit`: a
        counting sort on the rank of the time among the step's start / end times, member
        rows, ts and mixed rids), then one fancy index per output column."""
        S = self._states
        K = self.n_inputs
        if len(parts) == 1:
            idx, s_, e_, nw = parts[0]
        else:
            idx = {k: np.concatenate([p[0][k] for p in parts]) for k in range(K)}
            s_ = np.concatenate([p[1] for p in parts])
            e_ = np.concatenate([p[2] for p in parts])
            nw = np.concatenate([p[3] for p in parts])
        # every emitted time is the start of a new row or the end of a row retracted now;
        # each row's rank among those times is computed once here (vectorized)
        ev = np.unique(np.concatenate([x for st in S for x in (st.start[st.new], st.end[st.touched])]))
        lens = np.array([len(st) for st in S], np.int64)
        off = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
        start_all = np.concatenate([st.start for st in S]).astype(np.float64, copy=False)
        end_all = np.concatenate([st.end for st in S]).astype(np.float64, copy=False)
        idx2 = np.stack([idx[k] for k in range(K)])
        comp, sign, at, ts, rid = join_emit(
            idx2, s_, e_, nw, ev, off, start_all, end_all,
            _ranks(ev, start_all), _ranks(ev, end_all),
            np.concatenate([st.ts for st in S]).astype(np.float64, copy=False),
            np.concatenate([st.rid for st in S]).astype(np.int64, copy=False).view(np.uint64))
        if not len(sign):
            return None
        cols = {}
        for k in range(K):
            v = idx2[k].take(comp)
            for c, arr in S[k].cols.items():
                cols[self.prefixes[k] + c] = arr.take(v)
        return Changes(Batch(cols, ts=ts), sign, at, rid.view(np.int64), sort=False)


def _new_pairs(lo, hi, o, nw, newj, skipj) -> int:
    """How many candidate pairs (p, o[q]), lo[p] <= q < hi[p], that ``join_extend`` keeps past its
    ownership test have a new member: p's rows of j not in ``skipj`` (the touched rows of j, which
    another member builds, when j has the lower index; None: none) when p has a new member
    (``nw[p]``), else those that are also new (``newj``).  An upper bound of the + rows this probe
    level can lead to (the lifetime test may prune more); pairs of old rows only (retractions)
    are never counted, nor refused.  O(|j|) (one prefix sum over the run order) when a mask is
    needed."""

    def in_runs(mask, sel) -> int:          # rows of j with ``mask`` in the runs of partials ``sel``
        if not sel.any() or (mask is not None and not mask.any()):
            return 0
        if mask is None or mask.all():
            return int((hi[sel] - lo[sel]).sum())
        cum = np.concatenate([[0], np.cumsum(mask[o], dtype=np.int64)])
        return int((cum[hi[sel]] - cum[lo[sel]]).sum())

    keep = None if skipj is None else ~skipj
    return in_runs(keep, nw) + in_runs(newj if keep is None else newj & keep, ~nw)


def _ranks(ev: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Position of each time of ``t`` in the sorted array ``ev`` (−1 where absent)."""
    r = np.searchsorted(ev, t)
    rc = np.minimum(r, max(len(ev) - 1, 0))
    hit = (ev[rc] == t) if len(ev) else np.zeros(len(t), bool)
    return np.where(hit, r, -1).astype(np.int64)


class SymmetricHashJoin(MJoin):
    """Two-way symmetric hash join of two windowed change streams.

    ``on = [(left_col, right_col), ...]`` (equalities).  Each side's live rows
    are hashed (sorted codes); a new row on either side probes the other's
    live rows; a pair exists on [max start, min end), so it expires when the
    first of the pair expires, not in arrival order (W5).

    >>> import numpy as np
    >>> from sketchql.operators.exact import WindowScan, WindowSpec
    >>> L, R = WindowScan(WindowSpec.range(10)), WindowScan(WindowSpec.range(10))
    >>> j = SymmetricHashJoin([("k", "k")], prefixes=("l.", "r."))
    >>> a = L.step(7, Batch({"k": np.array([1, 2])}, ts=np.array([1., 5.])))
    >>> b = R.step(7, Batch({"k": np.array([2, 1])}, ts=np.array([6., 7.])))
    >>> out = j.step(7, a, b)
    >>> out.at.tolist(), out.columns["l.k"].tolist()
    ([6.0, 7.0], [2, 1])
    """

    def __init__(self, on, prefixes: Sequence[str] = ("", "")):
        if isinstance(on, str):
            on = [(on, on)]
        on = [(c, c) if isinstance(c, str) else tuple(c) for c in on]
        if not on:
            raise SketchQLError("SymmetricHashJoin needs at least one equality in `on`")
        super().__init__(2, [((0, l), (1, r)) for l, r in on], prefixes=prefixes)
        self.on = on


class StaticJoin(Operator):
    """Join a change stream with a static (non-retroactive) relation.

    Every +/− row of the stream is joined with the table rows having equal
    keys (``on = [(stream_col, table_col), ...]``); the output carries the
    stream row's sign and time and rid = mix(stream rid, table row id).
    ``set_table(new)`` affects only stream rows that arrive afterwards (NRR
    semantics, update-pattern paper §4): a retraction is joined with the
    table version its insertion saw, so the output stays consistent.  The
    update pattern is the input's.

    >>> import numpy as np
    >>> sj = StaticJoin({"k": np.array([1, 2]), "name": np.array(["a", "b"])}, on=[("k", "k")], prefix="t.")
    >>> ch = Changes.inserts(Batch({"k": np.array([2])}, ts=np.array([1.])), at=[1.], rid=[0])
    >>> sj.push(ch).columns["t.name"].tolist()
    ['b']
    """

    def __init__(self, table, on, prefix: str = ""):
        super().__init__()
        on = [(c, c) if isinstance(c, str) else tuple(c) for c in ([on] if isinstance(on, str) else on)]
        self.on = on
        self.prefix = prefix
        self._tables: dict[int, Batch] = {}
        self._version = -1
        self._live_rid = np.empty(0, np.int64)
        self._live_ver = np.empty(0, np.int64)
        self.set_table(table)

    def set_table(self, table):
        tb = table if isinstance(table, Batch) else _table_batch(table)
        for _, tc in self.on:
            if tc not in tb.columns:
                raise SketchQLError(f"static table has no join column {tc!r} (columns {tb.names})")
        self._version += 1
        self._tables[self._version] = tb

    def state_size(self) -> int:
        return len(self._live_rid) + sum(len(t) for t in self._tables.values())

    def _join(self, ch: Changes, tb: Batch) -> Changes:
        for sc, _ in self.on:
            if sc not in ch.columns:
                raise SketchQLError(f"stream has no join column {sc!r} (columns {ch.names})")
        # one code per row over every join column (equal iff all columns are): the runs of the
        # sorted table codes are the true matches, counted before they are built
        skeys, tkeys = [ch.columns[sc] for sc, _ in self.on], [tb.columns[tc] for _, tc in self.on]
        cs, ct = joint_codes([skeys, tkeys])
        # a NULL key equals nothing (SQL), though the codes group NULLs: codes are >= 0, so -1 / -2
        cs, ct = np.where(null_rows(skeys), -1, cs), np.where(null_rows(tkeys), -2, ct)
        o = np.argsort(ct, kind="stable")
        srt = ct[o]
        if step_row_cap() is not None:             # only the + rows' matches count (new rows)
            plus = cs[ch.sign > 0]
            check_step_rows(int((np.searchsorted(srt, plus, side="right")
                                 - np.searchsorted(srt, plus, side="left")).sum()), "StaticJoin")
        pi, bpos = expand_matches(cs, srt)
        ti = o[bpos]
        self._work += len(ch) + len(pi)
        cols = {c: v[pi] for c, v in ch.columns.items()}
        for c, v in tb.columns.items():
            name = self.prefix + c
            if name in cols:
                raise SketchQLError(f"static join output has duplicate column {name!r}; give a prefix")
            cols[name] = v[ti]
        return Changes(Batch(cols, ts=ch.ts[pi]), ch.sign[pi], ch.at[pi],
                       mix_rids(ch.rid[pi], ti), sort=False)

    def _step(self, now, inputs):
        ch = inputs[0]
        if ch is None or not len(ch):
            return Changes.empty()
        plus = ch.sign > 0
        # versions: + rows see the current table; − rows the version their + saw
        ver = np.full(len(ch), self._version, np.int64)
        self._live_rid = np.concatenate([self._live_rid, ch.rid[plus]])
        self._live_ver = np.concatenate([self._live_ver, ver[plus]])
        if (~plus).any():
            o = np.argsort(self._live_rid, kind="stable")
            srt = self._live_rid[o]
            pos = np.searchsorted(srt, ch.rid[~plus])
            posc = np.minimum(pos, max(len(srt) - 1, 0))
            if not len(srt) or np.any(srt[posc] != ch.rid[~plus]):
                raise SketchQLError("StaticJoin: retraction of a row that never arrived")
            ver[~plus] = self._live_ver[o[posc]]
            keep = np.ones(len(self._live_rid), bool)
            keep[o[posc]] = False
            self._live_rid, self._live_ver = self._live_rid[keep], self._live_ver[keep]
        outs = [self._join(ch.take(ver == v), tb) for v, tb in self._tables.items() if (ver == v).any()]
        used = set(np.unique(self._live_ver).tolist()) | {self._version}
        self._tables = {v: t for v, t in self._tables.items() if v in used}
        out = Changes.concat(outs)
        return Changes(out.rows, out.sign, out.at, out.rid)


def _table_batch(table) -> Batch:
    mod = type(table).__module__
    if mod.startswith("pandas"):
        cols = {str(c): table[c].to_numpy() for c in table.columns}
    elif mod.startswith("pyarrow"):
        cols = {str(n): table.column(i).to_numpy(zero_copy_only=False) for i, n in enumerate(table.schema.names)}
    elif isinstance(table, Mapping):
        cols = {str(k): np.asarray(v) for k, v in table.items()}
    else:
        raise SketchQLError(f"cannot read a static table from {type(table).__name__}")
    n = len(next(iter(cols.values()))) if cols else 0
    return Batch(cols, ts=np.zeros(n))
