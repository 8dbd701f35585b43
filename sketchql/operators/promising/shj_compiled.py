"""SIMPLE-SHJ compiled: the same symmetric hash join as
:class:`.baselines.SimpleSHJ`, run by one numba kernel per tick.

Why: on a wall-clock budget (real time charged) the Python SIMPLE-SHJ spends
~6 us per arrival in its interpreter loop, while PT-Join desc's wall-clock
path is compiled and batched; part of desc's lead was then implementation,
not tuple choice.  This peer has the same semantics with a compiled inner
loop, so a wall-clock comparison against it measures the choice of tuples.
"""
from __future__ import annotations

import math
import time

import numpy as np

from ...summaries.hashing import hash64
from .baselines import init_shj
from .costs import COSTS
from .output import PairOutput

try:   # pragma: no cover - numba is a hard dependency of the package
    import numba

    _njit = numba.njit(cache=True, nogil=True)
except Exception:   # pragma: no cover
    numba = None

    def _njit(f):
        return f

_MODE_UNITS, _MODE_UNLIMITED, _MODE_WALL = 0, 1, 2
_HMUL = np.uint64(0x9E3779B97F4A7C15)


@_njit
def _slot(tkeys, tused, s, key, mask):
    """Open-addressing lookup: slot of ``key`` in side ``s``'s table, or
    ``-1 - slot`` of the empty slot where it would go."""
    h = (np.uint64(key) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(29)
    i = np.int64(h & np.uint64(mask))
    while tused[s, i]:
        if tkeys[s, i] == key:
            return i
        i = (i + 1) & mask
    return -1 - i


@_njit
def _tick_kernel(bk, val, stream, s0, s1, ts, rid, al, k0, mode, cost0, cost_cmp, max_backlog, w, busy,
                 tkeys, tused, thead, tcnt, e_rid, e_ts, e_val, e_next, pool_n, nkeys,
                 out_a, out_b, out_ta, out_tb, out_v, out_at, n_out0, cnt, model):
    """Process arrivals ``k0..`` in order (module/class doc); stops before an
    arrival whose hits might not fit in the output arrays.  Returns ``(next k,
    output fill)``; pairs are written from ``n_out0`` on.  ``busy = [clock, busy_until]``; ``cnt = [processed,
    dropped, compares, tuples_in]``; ``model[0]`` += modelled cost."""
    mask = tkeys.shape[1] - 1
    cap = out_a.shape[0]
    n_out = n_out0
    clock = busy[0]
    busy_until = busy[1]
    n = bk.shape[0]
    k = k0
    while k < n:
        sk = stream[k]
        s = 0 if sk == s0 else (1 if sk == s1 else -1)
        if s < 0:
            clock += al[k]
            k += 1
            continue
        o = 1 - s
        key = bk[k]
        j = _slot(tkeys, tused, o, key, mask)
        if j >= 0 and n_out + tcnt[o, j] > cap:
            break   # the output arrays may overflow: the caller flushes and resumes here
        cnt[3] += 1
        if mode != 1 and not (busy_until - clock <= max_backlog):
            cnt[1] += 1
            clock += al[k]
            k += 1
            continue
        v = val[k]
        t = ts[k]
        r = rid[k]
        n_cmp = 0
        if j >= 0:
            lim = t - w
            e = thead[o, j]
            prev = -1
            while e >= 0:
                yt = e_ts[o, e]
                if yt <= lim:
                    break
                n_cmp += 1
                if e_val[o, e] == v:
                    y = e_rid[o, e]
                    if s == 0:
                        out_a[n_out] = r
                        out_b[n_out] = y
                        out_ta[n_out] = t
                        out_tb[n_out] = yt
                    else:
                        out_a[n_out] = y
                        out_b[n_out] = r
                        out_ta[n_out] = yt
                        out_tb[n_out] = t
                    out_v[n_out] = v
                    out_at[n_out] = t
                    n_out += 1
                prev = e
                e = e_next[o, e]
            if e >= 0:   # cut the expired tail (ts non-decreasing along the chain's age)
                if prev >= 0:
                    e_next[o, prev] = -1
                else:
                    thead[o, j] = -1
                tcnt[o, j] = n_cmp
        # insert into the own side's table
        i = _slot(tkeys, tused, s, key, mask)
        if i < 0:
            i = -1 - i
            tused[s, i] = True
            tkeys[s, i] = key
            thead[s, i] = -1
            tcnt[s, i] = 0
            nkeys[s] += 1
        e = pool_n[s]
        pool_n[s] = e + 1
        e_rid[s, e] = r
        e_ts[s, e] = t
        e_val[s, e] = v
        e_next[s, e] = thead[s, i]
        thead[s, i] = e
        tcnt[s, i] += 1
        cnt[0] += 1
        cnt[2] += n_cmp
        if mode != 1:
            cost = cost0 + cost_cmp * n_cmp
            busy_until = max(busy_until, clock) + cost
            model[0] += cost
        clock += al[k]
        k += 1
    busy[0] = clock
    busy[1] = busy_until
    return k, n_out


@_njit
def _live_counts(tused, thead, e_ts, e_next, horizon):
    """Per side: live entries (``ts > horizon``) and keys holding one."""
    out = np.zeros((2, 2), np.int64)
    for s in range(2):
        for i in range(tused.shape[1]):
            if tused[s, i]:
                e = thead[s, i]
                c = 0
                while e >= 0 and e_ts[s, e] > horizon:
                    c += 1
                    e = e_next[s, e]
                if c:
                    out[s, 0] += c
                    out[s, 1] += 1
    return out


@_njit
def _rebuild(tkeys, tused, thead, e_rid, e_ts, e_val, e_next, horizon,
             nkeys_t, nused, nhead, ncnt, n_rid, n_ts, n_val, n_next, pool_n, nkeys):
    """Copy the live entries into new (larger) tables and pools; a key's chain
    stays newest-first."""
    mask = nkeys_t.shape[1] - 1
    tmp = np.empty(e_ts.shape[1], np.int64)
    for s in range(2):
        p = 0
        nk = 0
        for i in range(tused.shape[1]):
            if not tused[s, i]:
                continue
            e = thead[s, i]
            c = 0
            while e >= 0 and e_ts[s, e] > horizon:
                tmp[c] = e
                c += 1
                e = e_next[s, e]
            if c == 0:
                continue
            key = tkeys[s, i]
            j = -1 - _slot(nkeys_t, nused, s, key, mask)
            nused[s, j] = True
            nkeys_t[s, j] = key
            nk += 1
            prev = -1
            for q in range(c - 1, -1, -1):   # oldest first
                src = tmp[q]
                n_rid[s, p] = e_rid[s, src]
                n_ts[s, p] = e_ts[s, src]
                n_val[s, p] = e_val[s, src]
                n_next[s, p] = prev
                prev = p
                p += 1
            nhead[s, j] = prev
            ncnt[s, j] = c
        pool_n[s] = p
        nkeys[s] = nk


def _arg(x, dtype, n: int) -> np.ndarray:
    """``x`` as a C-contiguous writable 1-d array of ``dtype`` and length ``n``
    (broadcast if scalar); no copy when it already is one."""
    if type(x) is np.ndarray and x.shape == (n,):
        if x.dtype == dtype and x.flags.c_contiguous and x.flags.writeable:
            return x
        return x.astype(dtype)
    return np.array(np.broadcast_to(np.asarray(x, dtype), (n,)), dtype)


class CompiledSHJ(PairOutput):
    """SIMPLE-SHJ (symmetric hash join over a time window, Wilschut & Apers)
    with a compiled inner loop; same constructor shape, ``tick``,
    ``set_wall_clock``, ``pairs`` / ``result`` / ``stats`` as
    :class:`.baselines.SimpleSHJ`.

    Semantics (as SimpleSHJ): arrivals are processed in order (FIFO) on a
    processor with a bounded backlog; time is the cumulative allowance of the
    arrivals; arrival k is processed iff ``busy_until - T_k <= max_backlog``,
    then ``busy_until = max(busy_until, T_k) + cost_k``; a dropped arrival is
    neither inserted nor probed.  A processed arrival of side ``s`` probes the
    other side's live tuples of its hash key (``ts > t - window``; every live
    tuple of the key is one compare, a pair when the stored value equals its
    value), emits the pairs (found by the later member: no duplicates) and is
    inserted into its own side's table.  ``n_buckets=None``: the key is the
    value; else the value hashed into ``n_buckets`` buckets (SimpleSHJ's seeded
    hash).

    Costs: on a work-unit budget ``insert + probe + compare * compares`` (the
    same drops and pairs as SimpleSHJ); unlimited budget: everything is
    processed.  Wall clock (:meth:`set_wall_clock`): inside the kernel an
    arrival is admitted on a *modelled* cost ``a + b * compares`` seconds
    (real time cannot be read per arrival in numba cheaply), ``(a, b)`` fitted
    online (decayed least squares) from the measured seconds of the previous
    kernel calls; at the end of the tick the measured real seconds of the
    whole call replace the modelled ones in ``busy_until`` (the processor is
    charged what it actually spent, kernel and Python around it).

    State per side: an open-addressing table key -> newest entry, entries
    ``(rid, ts, value, next older)`` in a pool; expired entries are cut from
    a chain when a probe meets them and dropped when the pool is rebuilt.
    """

    def __init__(self, window: float = 60.0, streams=(0, 1), key: str = "item", n_buckets: int | None = None,
                 seed: int = 0, max_backlog: float = 0.0, name: str = "compiled_shj"):
        init_shj(self, "CompiledSHJ", window, streams, key, n_buckets, seed, name)
        self.max_backlog = float(max_backlog)
        self.busy = np.zeros(2, np.float64)        # [clock, busy_until]
        self.wall = False
        self._alloc(1 << 10, 1 << 10)
        self._obuf(1 << 15)
        self._fill = 0                             # pairs in the output buffer, not yet in the log
        self._out = self._new_pair_log()
        self._cnt = np.zeros(4, np.int64)
        self._model = np.zeros(1, np.float64)
        # wall clock cost model: seconds = a * processed + b * compares (decayed least squares)
        self.cost_a = 2e-7
        self.cost_b = 5e-9
        self._fit = (0.0, 0.0, 0.0, 0.0, 0.0)     # decayed Snn, Snc, Scc, Snt, Sct
        self._stats = {"work": 0.0, "insert_work": 0.0, "outputs": 0, "charged_seconds": 0.0,
                       "overhead_seconds": 0.0, "kernel_seconds": 0.0, "model_seconds": 0.0, "rebuilds": 0}

    # ------------------------------------------------------------------ state
    def _alloc(self, tcap: int, pcap: int) -> None:
        self.tkeys = np.zeros((2, tcap), np.int64)
        self.tused = np.zeros((2, tcap), np.bool_)
        self.thead = np.full((2, tcap), -1, np.int64)
        self.tcnt = np.zeros((2, tcap), np.int64)
        self.e_rid = np.zeros((2, pcap), np.int64)
        self.e_ts = np.zeros((2, pcap), np.float64)
        self.e_val = np.zeros((2, pcap), np.int64)
        self.e_next = np.full((2, pcap), -1, np.int64)
        self.pool_n = np.zeros(2, np.int64)
        self.nkeys = np.zeros(2, np.int64)
        self._tcap, self._pcap, self._hi = tcap, pcap, 0

    def _obuf(self, cap: int) -> None:
        self._ob = (np.empty(cap, np.int64), np.empty(cap, np.int64), np.empty(cap, np.float64),
                    np.empty(cap, np.float64), np.empty(cap, np.int64), np.empty(cap, np.float64))

    def _reserve(self, n_new: int, horizon: float) -> None:
        """Room for ``n_new`` inserts per side (pool and table at most half full),
        else rebuild with only the live entries (``ts > horizon``).  ``_hi``: an
        upper bound of the entries (= of the keys) of either side since the last
        rebuild, kept in Python (no numpy call per tick)."""
        if self._hi + n_new <= self._pcap and 2 * (self._hi + n_new) <= self._tcap:
            self._hi += n_new
            return
        live = _live_counts(self.tused, self.thead, self.e_ts, self.e_next, horizon)
        need_p = int(live[:, 0].max()) + n_new
        new_p = max(1 << 10, 1 << int(math.ceil(math.log2(2 * need_p))))
        new_t = max(1 << 10, 1 << int(math.ceil(math.log2(4 * need_p))))
        old = (self.tkeys, self.tused, self.thead, self.e_rid, self.e_ts, self.e_val, self.e_next)
        self._alloc(new_t, new_p)
        _rebuild(*old, horizon, self.tkeys, self.tused, self.thead, self.tcnt, self.e_rid, self.e_ts, self.e_val,
                 self.e_next, self.pool_n, self.nkeys)
        self._hi = need_p
        self._stats["rebuilds"] += 1

    # ------------------------------------------------------------------ driver
    def set_wall_clock(self, on: bool = True) -> None:
        """Wall-clock budget: allowances (and ``max_backlog``) are seconds and
        the real time of every call is charged (class doc).  Loads the kernels
        (numba cache / compile) here, outside any timed tick, and measures a
        prior for the cost model on scratch data (once per operator)."""
        self.wall = bool(on)
        if self.wall and not self._warm:
            self._prior()
            self._warm = True

    _warm = False

    def _prior(self) -> None:
        scratch = CompiledSHJ(window=1e9, n_buckets=self.n_buckets, seed=self.seed)
        rng = np.random.default_rng(0)
        obs = []
        for n_keys in (4096, 16, 4096, 16):   # first pair loads the kernels; the second is measured
            n = 2048
            bk = rng.integers(0, n_keys, n).astype(np.int64)
            side = (rng.random(n) < 0.5).astype(np.int64) + np.int64(self.streams[0])
            side[side != self.streams[0]] = self.streams[1]
            ts = np.sort(rng.random(n))
            rid = np.arange(n, dtype=np.int64) + scratch._cnt[3]
            al = np.full(n, np.inf)
            scratch._reserve(n, -np.inf)
            c0 = scratch._cnt.copy()
            t = time.perf_counter()
            scratch._run(bk, bk, side, ts, rid, al, _MODE_UNLIMITED, 0.0, 0.0)
            dt = time.perf_counter() - t
            d = scratch._cnt - c0
            obs.append((float(d[0]), float(d[2]), dt))
        scratch._hi = scratch._pcap   # force a rebuild: its kernels are loaded here too
        scratch._reserve(1, 0.5)
        (n1, c1, t1), (n2, c2, t2) = obs[2], obs[3]
        # solve a*n + b*c = t for the two measured runs (the many-key run is nearly compare-free)
        det = n1 * c2 - n2 * c1
        if det != 0:
            a = (t1 * c2 - t2 * c1) / det
            b = (n1 * t2 - n2 * t1) / det
            if a > 0 and b > 0:
                self.cost_a, self.cost_b = a, b

    def _run(self, bk, val, stream, ts, rid, al, mode, cost0, cost_cmp) -> None:
        k = 0
        n = bk.shape[0]
        s0, s1 = self.streams
        while True:
            ob = self._ob
            fill = self._fill
            k, self._fill = _tick_kernel(bk, val, stream, s0, s1, ts, rid, al, k, mode, cost0, cost_cmp,
                                         self.max_backlog, self.window, self.busy, self.tkeys, self.tused,
                                         self.thead, self.tcnt, self.e_rid, self.e_ts, self.e_val, self.e_next,
                                         self.pool_n, self.nkeys, *ob, fill, self._cnt, self._model)
            self._stats["outputs"] += self._fill - fill
            if k >= n:
                return
            if self._fill == 0:   # one arrival's hits do not fit in the empty buffer
                self._obuf(2 * ob[0].shape[0])
            else:
                self._flush()

    def _flush(self) -> None:
        """Hand the output buffer's pairs to the pair log (views, no copy: a
        copy of a full buffer is ~1 ms in one tick, a spike that made the next
        tick drop its arrivals) and start a fresh buffer (its pages are touched
        by the kernel as it writes)."""
        m = self._fill
        if m:
            out = self._out
            for name, arr in zip(("a", "b", "ta", "tb", "val", "at"), self._ob):
                out[name].append(arr[:m])
            self._fill = 0
            self._obuf(self._ob[0].shape[0])

    def _cat(self, k, dtype):
        self._flush()
        return super()._cat(k, dtype)

    def tick(self, batch, allowance) -> None:
        t_in = time.perf_counter()
        n = len(batch)
        if n == 0:
            if self.wall:
                self._charge_rest(t_in, 0.0, 0.0)
            return
        # the kernel's argument types stay fixed (C-contiguous, writable int64/float64: a readonly or
        # other-typed array would make numba compile or load another specialization inside a timed tick)
        al = _arg(allowance, np.float64, n)
        kv = _arg(getattr(batch, self.key), np.int64, n)
        if self.n_buckets is None:
            bk = kv
        else:
            bk = (hash64(kv, self.seed ^ 0xB0C3) % np.uint64(self.n_buckets)).astype(np.int64)
        stream = _arg(batch.stream, np.int64, n)
        ts = _arg(batch.ts, np.float64, n)
        rid = _arg(batch.seq, np.int64, n)
        unlimited = al[0] == math.inf
        self._reserve(n, float(ts[0]) - self.window)
        if unlimited:
            mode, c0, c1 = _MODE_UNLIMITED, 0.0, 0.0
        elif self.wall:
            mode, c0, c1 = _MODE_WALL, self.cost_a, self.cost_b
        else:
            mode, c0, c1 = _MODE_UNITS, COSTS["insert"] + COSTS["probe"], COSTS["compare"]
        proc0, _, cmp0, _ = self._cnt.tolist()
        m0 = self._model[0]
        t_k = time.perf_counter()
        self._run(bk, kv, stream, ts, rid, al, mode, c0, c1)
        dt_k = time.perf_counter() - t_k
        proc1, _, cmp1, _ = self._cnt.tolist()
        dp = proc1 - proc0
        dc = cmp1 - cmp0
        st = self._stats
        st["work"] += dp * (COSTS["insert"] + COSTS["probe"]) + dc * COSTS["compare"]
        st["insert_work"] += dp * COSTS["insert"]
        st["kernel_seconds"] += dt_k
        if self.wall and not unlimited:
            modelled = float(self._model[0] - m0)
            st["model_seconds"] += modelled
            self._learn(float(dp), float(dc), dt_k)
            self._charge_rest(t_in, modelled, dt_k)

    def _charge_rest(self, t_in: float, modelled: float, kernel: float) -> None:
        """Replace the modelled seconds already in ``busy_until`` by the call's
        real seconds (``charged_seconds``; ``overhead_seconds``: outside the kernel)."""
        spent = time.perf_counter() - t_in
        self.busy[1] += spent - modelled
        st = self._stats
        st["charged_seconds"] += spent
        st["overhead_seconds"] += spent - kernel

    def _learn(self, n: float, c: float, dt: float) -> None:
        if n <= 0:
            return
        snn, snc, scc, snt, sct = self._fit
        d = 0.95
        snn = d * snn + n * n
        snc = d * snc + n * c
        scc = d * scc + c * c
        snt = d * snt + n * dt
        sct = d * sct + c * dt
        self._fit = (snn, snc, scc, snt, sct)
        det = snn * scc - snc * snc
        if det > 1e-9 * snn * max(scc, 1.0):
            a = (snt * scc - sct * snc) / det
            b = (snn * sct - snc * snt) / det
            if a > 0 and b > 0:
                self.cost_a, self.cost_b = a, b
                return
        # ill-conditioned (compares proportional to arrivals) or a negative fit: rescale the current model
        pred = self.cost_a * n + self.cost_b * c
        if pred > 0:
            g = min(max(dt / pred, 0.25), 4.0) ** 0.3
            self.cost_a *= g
            self.cost_b *= g

    def finish(self) -> None:
        pass

    def stats(self) -> dict:
        st = dict(self._stats)
        st.update(processed=int(self._cnt[0]), dropped=int(self._cnt[1]), compares=int(self._cnt[2]),
                  tuples_in=int(self._cnt[3]), cost_a=self.cost_a, cost_b=self.cost_b)
        return st
