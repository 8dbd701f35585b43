"""k-constraint-aware equi-join synopses (STREAM section 4.1; Babu & Widom's k-constraints).

A symmetric hash join of two streams A and B on ``A.key = B.key`` over the
whole streams must keep every tuple of both (its synopses grow without bound).
When the streams are known (declared or measured) to satisfy constraints with
an *adherence parameter* k, tuples that can no longer join are moved out of
the synopses, while the output stays the unconstrained join's:

* ``clustered(S, k)`` -- S arrives clustered by key: between two S tuples
  with the same key come at most k tuples with other keys.  Once more than k
  S tuples with other keys followed the last S tuple of key x, x is *closed*
  on S: no S tuple of key x will come, so the *other* stream's x tuples leave
  its synopsis.
* ``ordered(S, k)`` -- S's keys arrive in nondecreasing order up to k
  positions: a tuple's key is >= every key more than k positions before it.
  The *floor* (max key of all but the last k S tuples) bounds every future S
  key from below: the other stream's tuples with a smaller key leave.
* ``referential(child=C, parent=P, k)`` -- every C tuple's parent (the unique
  P tuple with its key: many-one) arrives before it or at most k P tuples
  after it.  A C tuple whose parent has arrived is joined and leaves (C's
  synopsis holds only the children still waiting for their parent).

Violations are detected as the tuples arrive (a closed key reappears, a key
under the floor, a second parent, a child that waited more than k parents)
and reported (``violations``).  The join then falls back to full synopses for
that constraint: the tuples it had moved out are kept in a *spill* (not
probed while the constraint holds) and come back, so no result is lost.
``spill=False`` frees them instead (then a violation reports
``possibly_missed``).  ``synopsis_rows()`` is what the join keeps in memory to
probe; ``spilled_rows()`` what waits for a possible violation.

Batches: ``push(side, keys, rids)`` with ``side`` 0 (A) or 1 (B); pushes are
in arrival order; returns the new pairs ``(rid_a, rid_b)``.  Vectorized per
batch (constraint checks with prefix maxima and sorted key arrays).

>>> j = KConstraintJoin([Constraint("referential", child=1, parent=0, k=0),
...                      Constraint("clustered", stream=1, k=0)])
>>> j.push(0, [1, 2], [10, 11])                    # orders 1, 2
(array([], dtype=int64), array([], dtype=int64))
>>> j.push(1, [1, 1], [20, 21])                    # fulfillments of order 1
(array([10, 10]), array([20, 21]))
>>> j.push(1, [2], [22])                           # 1 is closed on B: order 1 leaves A's synopsis
(array([11]), array([22]))
>>> j.synopsis_rows(), j.violations
((1, 0), [])
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import SketchQLError

__all__ = ["Constraint", "KConstraintJoin", "KConstraintJoinOp", "measure_clustered", "measure_ordered"]

KINDS = ("clustered", "ordered", "referential")


@dataclass
class Constraint:
    """``kind`` in clustered | ordered (on ``stream`` 0/1) | referential (``child``, ``parent``)."""

    kind: str
    stream: Optional[int] = None
    k: int = 0
    child: Optional[int] = None
    parent: Optional[int] = None
    active: bool = True

    def __post_init__(self):
        if self.kind not in KINDS:
            raise SketchQLError(f"k-constraint: kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if int(self.k) != self.k or self.k < 0:
            raise SketchQLError(f"k-constraint {self.kind}: adherence k must be an integer >= 0, got {self.k!r}")
        self.k = int(self.k)
        if self.kind == "referential":
            if {self.child, self.parent} != {0, 1}:
                raise SketchQLError("k-constraint referential: child and parent must be the two sides 0 and 1")
        elif self.stream not in (0, 1):
            raise SketchQLError(f"k-constraint {self.kind}: stream must be side 0 or 1, got {self.stream!r}")


def measure_clustered(keys) -> int:
    """The smallest k for which ``keys`` (one stream, arrival order) is clustered: the largest
    number of tuples between two consecutive occurrences of a key (all with other keys).

    >>> measure_clustered([1, 1, 2, 1, 3, 3])
    1
    """
    keys = np.asarray(keys)
    if keys.shape[0] < 2:
        return 0
    o = np.argsort(keys, kind="stable")
    same = keys[o][1:] == keys[o][:-1]
    gaps = np.diff(o)[same] - 1
    return int(gaps.max()) if gaps.shape[0] else 0


def measure_ordered(keys) -> int:
    """The smallest k for which ``keys`` arrives ordered with adherence k: for every tuple i,
    ``key_i >= key_j`` for all j <= i - k - 1.

    >>> measure_ordered([1, 3, 2, 4, 5]), measure_ordered([1, 2, 3])
    (1, 0)
    """
    keys = np.asarray(keys)
    n = keys.shape[0]
    if n < 2:
        return 0
    pm = np.maximum.accumulate(keys)
    # for each i, the earliest j whose key exceeds key_i: k >= i - j
    need = 0
    bad = np.flatnonzero(keys < pm)
    if bad.shape[0]:
        first_above = np.searchsorted(pm, keys[bad], side="right")   # pm is nondecreasing
        need = int((bad - first_above).max())
    return max(need, 0)


class _Side:
    def __init__(self):
        self.keys = np.zeros(0, np.int64)
        self.rids = np.zeros(0, np.int64)
        self.sp_keys = np.zeros(0, np.int64)    # spilled: moved out of the synopsis
        self.sp_rids = np.zeros(0, np.int64)
        self.n = 0                              # tuples seen (arrival positions)
        # clustered state: distinct keys and their last position; closed keys
        self.last_k = np.zeros(0, np.int64)
        self.last_p = np.zeros(0, np.int64)
        # ordered state: max key of positions <= n - k - 1, and the last k keys
        self.floor = None
        self.tail = np.zeros(0, np.int64)
        self.parents = np.zeros(0, np.int64)    # sorted distinct keys seen (for referential)
        self.parent_dup = np.zeros(0, np.int64)


class KConstraintJoin:
    """Constraint-aware symmetric hash join of sides 0 and 1 on their key (module doc)."""

    def __init__(self, constraints=(), spill: bool = True):
        self.constraints = [c if isinstance(c, Constraint) else Constraint(**c) for c in constraints]
        self.spill = bool(spill)
        self.sides = (_Side(), _Side())
        self.violations: list = []
        self.possibly_missed = 0
        self.pairs_out = 0
        self.peak_synopsis = 0
        self._parent_arrivals = 0

    # -- helpers --------------------------------------------------------------------
    def synopsis_rows(self) -> tuple:
        return tuple(int(s.keys.shape[0]) for s in self.sides)

    def spilled_rows(self) -> tuple:
        return tuple(int(s.sp_keys.shape[0]) for s in self.sides)

    def _move_out(self, side: int, mask) -> None:
        s = self.sides[side]
        if not mask.any():
            return
        if self.spill:
            s.sp_keys = np.concatenate([s.sp_keys, s.keys[mask]])
            s.sp_rids = np.concatenate([s.sp_rids, s.rids[mask]])
        s.keys, s.rids = s.keys[~mask], s.rids[~mask]

    def _restore(self, side: int, what: str) -> None:
        s = self.sides[side]
        if not self.spill:
            return
        s.keys = np.concatenate([s.keys, s.sp_keys])
        s.rids = np.concatenate([s.rids, s.sp_rids])
        s.sp_keys, s.sp_rids = np.zeros(0, np.int64), np.zeros(0, np.int64)

    def _violate(self, c: Constraint, detail: str, n: int, restore_side: int) -> None:
        self.violations.append({"constraint": c.kind, "stream": c.stream if c.kind != "referential" else c.parent,
                                "k": c.k, "tuples": int(n), "detail": detail})
        c.active = False
        if not self.spill:
            self.possibly_missed += int(n)
        self._restore(restore_side, c.kind)

    # -- the join ----------------------------------------------------------------------
    def push(self, side: int, keys, rids):
        if side not in (0, 1):
            raise SketchQLError(f"KConstraintJoin.push: side must be 0 or 1, got {side!r}")
        keys = np.asarray(keys, np.int64)
        rids = np.asarray(rids, np.int64)
        if keys.shape != rids.shape:
            raise SketchQLError("KConstraintJoin.push: keys and rids differ in length")
        me, other = self.sides[side], self.sides[1 - side]
        self._check(side, keys)
        # probe the other side's synopsis
        ok = np.argsort(other.keys, kind="stable")
        sk = other.keys[ok]
        lo = np.searchsorted(sk, keys, "left")
        hi = np.searchsorted(sk, keys, "right")
        cnt = hi - lo
        tot = int(cnt.sum())
        rep = np.repeat(np.arange(keys.shape[0]), cnt)
        pos = np.arange(tot) - np.repeat(np.cumsum(cnt) - cnt, cnt) + lo[rep]
        mine, theirs = rids[rep], other.rids[ok[pos]]
        self.pairs_out += tot
        # insert, then update the constraints' state and move out what can no longer join
        me.keys = np.concatenate([me.keys, keys])
        me.rids = np.concatenate([me.rids, rids])
        self._update(side, keys)
        self._prune()
        self.peak_synopsis = max(self.peak_synopsis, sum(self.synopsis_rows()))
        return (mine, theirs) if side == 0 else (theirs, mine)

    def _check(self, side: int, keys) -> None:
        """Detect violations by the arriving tuples of ``side`` (before they are joined)."""
        s = self.sides[side]
        m = keys.shape[0]
        for c in self.constraints:
            if not c.active or not m:
                continue
            if c.kind == "clustered" and c.stream == side:
                pos = s.n + np.arange(m)
                o = np.lexsort((pos, keys))
                ks, ps = keys[o], pos[o]
                prev = np.full(m, -1, np.int64)
                same = np.r_[False, ks[1:] == ks[:-1]]
                prev[same] = ps[:-1][same[1:]]
                first = ~same
                if s.last_k.shape[0] and first.any():
                    i = np.searchsorted(s.last_k, ks[first])
                    i = np.minimum(i, s.last_k.shape[0] - 1)
                    hit = s.last_k[i] == ks[first]
                    pf = np.full(int(first.sum()), -1, np.int64)
                    pf[hit] = s.last_p[i[hit]]
                    prev[first] = pf
                bad = (prev >= 0) & (ps - prev - 1 > c.k)
                if bad.any():
                    self._violate(c, f"key {int(ks[bad][0])} reappeared after {int((ps - prev - 1)[bad][0])} "
                                     f"other tuples (k = {c.k})", int(bad.sum()), 1 - side)
            elif c.kind == "ordered" and c.stream == side:
                full = np.concatenate([s.tail, keys])
                pm = np.maximum.accumulate(full) if full.shape[0] else full
                base = -np.inf if s.floor is None else s.floor
                t = s.tail.shape[0]
                # bound of batch tuple j = max(floor, keys at positions <= its position - k - 1)
                idx = np.arange(m) + t - c.k - 1
                bound = np.where(idx >= 0, pm[np.maximum(idx, 0)], -np.inf)
                bound = np.maximum(bound, base)
                bad = keys < bound
                if bad.any():
                    self._violate(c, f"key {int(keys[bad][0])} below the floor {bound[bad][0]:g} (k = {c.k})",
                                  int(bad.sum()), 1 - side)
            elif c.kind == "referential" and c.parent == side:
                u, cnt = np.unique(keys, return_counts=True)
                dup = (cnt > 1) | np.isin(u, s.parents)
                if dup.any():
                    self._violate(c, f"second parent for key {int(u[dup][0])} (many-one expected)",
                                  int(dup.sum()), c.child)

    def _update(self, side: int, keys) -> None:
        s = self.sides[side]
        m = keys.shape[0]
        if not m:
            return
        pos = s.n + np.arange(m)
        s.n += m
        for c in self.constraints:
            if c.kind == "clustered" and c.stream == side:
                allk = np.concatenate([s.last_k, keys])
                allp = np.concatenate([s.last_p, pos])
                o = np.lexsort((allp, allk))
                allk, allp = allk[o], allp[o]
                last = np.r_[allk[1:] != allk[:-1], True]
                s.last_k, s.last_p = allk[last], allp[last]
                break
        for c in self.constraints:
            if c.kind == "ordered" and c.stream == side:
                full = np.concatenate([s.tail, keys])
                cut = max(full.shape[0] - c.k, 0)
                if cut:
                    f = int(full[:cut].max())
                    s.floor = f if s.floor is None else max(s.floor, f)
                s.tail = full[cut:]
                break
        if any(c.kind == "referential" and c.parent == side for c in self.constraints):
            s.parents = np.union1d(s.parents, keys)
            self._parent_arrivals += m

    def _prune(self) -> None:
        for c in self.constraints:
            if not c.active:
                continue
            if c.kind == "clustered":
                s, o = self.sides[c.stream], 1 - c.stream
                closed = s.last_k[(s.n - 1 - s.last_p) > c.k]
                if closed.shape[0] and self.sides[o].keys.shape[0]:
                    self._move_out(o, np.isin(self.sides[o].keys, closed))
            elif c.kind == "ordered":
                s, o = self.sides[c.stream], 1 - c.stream
                if s.floor is not None and self.sides[o].keys.shape[0]:
                    self._move_out(o, self.sides[o].keys < s.floor)
            else:
                ch, pa = self.sides[c.child], self.sides[c.parent]
                if ch.keys.shape[0] and pa.parents.shape[0]:
                    self._move_out(c.child, np.isin(ch.keys, pa.parents))   # joined with their parent
                # adherence: a child waiting longer than k parent arrivals
                self._check_waiting(c)

    def _check_waiting(self, c: Constraint) -> None:
        ch = self.sides[c.child]
        if not ch.keys.shape[0]:
            self._waiting = None
            return
        # parent arrivals since each waiting child arrived: tracked per child rid
        w = getattr(self, "_wait", None)
        if w is None:
            w = self._wait = {"rid": np.zeros(0, np.int64), "at": np.zeros(0, np.int64)}
        new = ~np.isin(ch.rids, w["rid"])
        keep = np.isin(w["rid"], ch.rids)
        w["rid"] = np.concatenate([w["rid"][keep], ch.rids[new]])
        w["at"] = np.concatenate([w["at"][keep], np.full(int(new.sum()), self._parent_arrivals, np.int64)])
        late = self._parent_arrivals - w["at"] > c.k
        if late.any():
            self._violate(c, f"{int(late.sum())} child tuple(s) waited more than {c.k} parent arrivals",
                          int(late.sum()), c.child)

    def stats(self) -> dict:
        return {"synopsis_rows": self.synopsis_rows(), "spilled_rows": self.spilled_rows(),
                "peak_synopsis_rows": self.peak_synopsis, "pairs_out": self.pairs_out,
                "violations": list(self.violations), "possibly_missed": self.possibly_missed,
                "active": [c.kind for c in self.constraints if c.active]}


class KConstraintJoinOp:
    """The exact-operator protocol around :class:`KConstraintJoin`: the planner's
    equi-join of two append-only (UNBOUNDED window) stream scans, ``step(now,
    in_a, in_b) -> Changes``, with the columns, ``at``, ``ts`` and rids of the
    exact :class:`~sketchql.operators.exact.SymmetricHashJoin` -- a pair is
    emitted once, when its later member arrives (``at = max`` of the members'
    ``at``, ``ts = max`` of their ts, ``rid = mix_rids(rid_a, rid_b)``), columns
    ``prefixes[i] + col``.  The two inputs of a step are interleaved in time
    order (``at``, then side 0 first) and pushed into the constraint-aware join
    run by run (one vectorized push per run of one side).  Each side keeps the
    columns of the tuples still in its synopsis or its spill (what a violation
    may bring back); the rest are freed with them.

    >>> import numpy as np
    >>> from sketchql.operators.changes import Batch, Changes
    >>> op = KConstraintJoinOp([Constraint("referential", child=1, parent=0, k=0)], ("id", "oid"), ("O.", "F."))
    >>> o = Batch({"id": np.array([1, 2])}, ts=np.array([1.0, 2.0]))
    >>> f = Batch({"oid": np.array([1])}, ts=np.array([3.0]))
    >>> _ = op.step(2.0, Changes.inserts(o, o.ts, [0, 1]), None)
    >>> out = op.step(3.0, None, Changes.inserts(f, f.ts, [0]))
    >>> out.columns["O.id"].tolist(), out.columns["F.oid"].tolist(), out.at.tolist(), op.synopsis_rows()
    ([1], [1], [3.0], (2, 0))
    """

    def __init__(self, constraints, keys, prefixes=("", ""), spill: bool = True):
        self.join = KConstraintJoin(constraints, spill=spill)
        self.keys = tuple(keys)
        self.prefixes = tuple(prefixes)
        # per side: the kept tuples' rids (ascending), at, ts and columns
        self._rid = [np.zeros(0, np.int64), np.zeros(0, np.int64)]
        self._at = [np.zeros(0), np.zeros(0)]
        self._ts = [np.zeros(0), np.zeros(0)]
        self._cols: list = [None, None]

    @property
    def constraints(self):
        return self.join.constraints

    def synopsis_rows(self) -> tuple:
        return self.join.synopsis_rows()

    def state_size(self) -> int:
        """Rows kept to probe (the synopses), as the exact operators report it."""
        return int(sum(self.join.synopsis_rows()))

    def stored_rows(self) -> tuple:
        """Rows whose columns are kept per side (synopsis + spill)."""
        return tuple(int(r.shape[0]) for r in self._rid)

    def stats(self) -> dict:
        return dict(self.join.stats(), stored_rows=self.stored_rows())

    def _append(self, side: int, ch) -> None:
        rows = ch.rows
        self._rid[side] = np.concatenate([self._rid[side], np.asarray(ch.rid, np.int64)])
        self._at[side] = np.concatenate([self._at[side], np.asarray(ch.at, np.float64)])
        self._ts[side] = np.concatenate([self._ts[side], np.asarray(rows.ts, np.float64)])
        cur = self._cols[side]
        self._cols[side] = dict(rows.columns) if cur is None else {
            c: np.concatenate([cur[c], rows.columns[c]]) for c in cur}

    def _names(self):
        return [self.prefixes[s] + c for s in (0, 1) for c in (self._cols[s] or {})]

    def step(self, now, in_a=None, in_b=None):
        from .changes import Batch, Changes, mix_rids

        runs = []
        for side, ch in enumerate((in_a, in_b)):
            if ch is None or not len(ch):
                continue
            if (np.asarray(ch.sign) < 0).any():
                raise SketchQLError("constraint-aware join: its inputs must be append-only "
                                    "(UNBOUNDED windows); got a retraction")
            key = ch.rows.columns.get(self.keys[side])
            if key is None:
                raise SketchQLError(f"constraint-aware join: input {side} has no column {self.keys[side]!r}")
            self._append(side, ch)
            runs.append((np.asarray(ch.at, np.float64), np.full(len(ch), side, np.int8),
                         np.asarray(key).astype(np.int64), np.asarray(ch.rid, np.int64)))
        if not runs:
            return Changes.empty(self._names()) if all(c is not None for c in self._cols) else None
        at = np.concatenate([r[0] for r in runs])
        side = np.concatenate([r[1] for r in runs])
        key = np.concatenate([r[2] for r in runs])
        rid = np.concatenate([r[3] for r in runs])
        o = np.lexsort((side, at))
        side, key, rid = side[o], key[o], rid[o]
        cuts = np.flatnonzero(np.r_[True, side[1:] != side[:-1], True])
        ra, rb = [], []
        for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist()):   # one push per run of one side
            pa, pb = self.join.push(int(side[a]), key[a:b], rid[a:b])
            ra.append(pa)
            rb.append(pb)
        ra, rb = np.concatenate(ra), np.concatenate(rb)
        out = None
        if ra.shape[0] and all(c is not None for c in self._cols):
            ia = np.searchsorted(self._rid[0], ra)
            ib = np.searchsorted(self._rid[1], rb)
            cols = {}
            for s, ix in ((0, ia), (1, ib)):
                for c, v in self._cols[s].items():
                    cols[self.prefixes[s] + c] = v[ix]
            out = Changes(Batch(cols, ts=np.maximum(self._ts[0][ia], self._ts[1][ib])),
                          np.ones(ra.shape[0], np.int8), np.maximum(self._at[0][ia], self._at[1][ib]),
                          mix_rids(ra, rb))
        self._free()
        if out is None:
            return Changes.empty(self._names()) if all(c is not None for c in self._cols) else None
        return out

    def _free(self) -> None:
        """Drop the columns of tuples that left both the synopsis and the spill."""
        for s in (0, 1):
            sd = self.join.sides[s]
            keep = np.isin(self._rid[s], np.concatenate([sd.rids, sd.sp_rids]))
            if not keep.all():
                self._rid[s], self._at[s], self._ts[s] = self._rid[s][keep], self._at[s][keep], self._ts[s][keep]
                if self._cols[s] is not None:
                    self._cols[s] = {c: v[keep] for c, v in self._cols[s].items()}
