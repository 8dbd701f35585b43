"""Count sketch (Charikar, Chen, Farach-Colton 2002): the default summary.

A ``d x w`` table ``C`` of int64 counters.  A key ``x`` is hashed once,
``h = splitmix64(code(x) + seed * GOLDEN)`` (see :mod:`.hashing`), and row
``r`` derives its own hash by multiply-shift (Dietzfelbinger et al.) with a
seeded odd multiplier ``a_r``: ``z_r = a_r h mod 2^64``.  The top bit of
``z_r`` is the sign ``s_r(x)`` (+1 for 0, -1 for 1) and the next 32 bits
``u`` give the bucket ``h_r(x) = floor(u w / 2^32)`` (for a power-of-two
``w`` simply the next ``log2 w`` bits).  Summarize adds ``s_r(x) * weight``
to ``C[r, h_r(x)]``; Estimate returns the median over rows of
``s_r(x) * C[r, h_r(x)]``, an unbiased per-row estimate of the frequency
``f_x`` with variance at most ``F2 / w`` (``F2 = sum_y f_y^2``).

Internally a key's (bucket, sign) pair in row ``r`` is one "signed bin"
``2 w r + w [s_r(x) < 0] + h_r(x)`` (for a power-of-two ``w`` that is just
``z_r >> (63 - log2 w)`` plus the row offset): ingest is one integer
``bincount`` over signed bins (positive minus negative halves), estimation
one gather from the table laid out next to its negation, followed by a
min/max median network.  Both run over cache-sized chunks of the batch.

Linearity: the table is a linear function of the frequency vector (in
wrapping int64 arithmetic), so ``merge``/``subtract`` are exact element-wise
additions, ``a + b - b == a``, and sketches built from any split of the data
merge to identical bytes (the optional heavy-hitter candidate list is a
heuristic and may differ between splits; the counters never do).

Error bound: by Chebyshev a row is off by more than ``k sqrt(F2/w)`` with
probability at most ``1/k^2``; the median is off only if at least ``ceil(d/2)``
rows are, so ``error_bound(c)`` returns ``k sqrt(F2_hat/w)`` for the smallest
``k`` with ``P[Binom(d, 1/k^2) >= ceil(d/2)] <= 1 - c``.  With ``w = ceil(3/eps^2)``
and ``d = 2 ceil(ln(1/delta) / 2) + 1`` this is the classic ``eps ||f||_2`` bound.

Confidence: ``1 - min(1, sqrt(F2_hat / w) / L1)``, one minus the standard error
of a point estimate as a share of the summarized mass (1.0 when empty).

Memory: ``nbytes == d * w * 8 + CountSketch.OVERHEAD`` (plus the candidate
keys when heavy hitters are tracked), which is also ``len(to_bytes())``.

>>> import numpy as np
>>> cs = CountSketch(d=5, w=1024, seed=1)
>>> _ = cs.update(np.array([7, 7, 7, 3]))
>>> cs.estimate(np.array([7, 3, 99])).tolist()
[3, 1, 0]
>>> (cs + cs - cs).to_bytes() == cs.to_bytes()
True
>>> cs.nbytes == 5 * 1024 * 8 + CountSketch.OVERHEAD
True
"""
from __future__ import annotations

import io
import math
import struct
from functools import lru_cache

import numpy as np

from ..errors import SummaryError
from .hashing import as_key_array, hash_codes, key_codes, mix_inplace, seed_offset

_MAGIC = b"SQCS"
_VERSION = 3          # 3: hash once, multiply-shift rows (sign = top bit, bucket = next bits)
_HEADER = struct.Struct("<4sHHIQqQQI")  # magic, version, d, w, seed, total, total_abs, n_heavy, track_heavy
_CHUNK = 1 << 14      # keys per chunk: d * 16k * 8 B stays in L2
_EST_CHUNK = 1 << 14
_EXACT_FLOAT = 2.0**53
_S31, _S32, _S63 = np.uint64(31), np.uint64(32), np.uint64(63)
_LOW32 = np.uint64(0xFFFFFFFF)
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


@lru_cache(maxsize=256)
def _chebyshev_k(d: int, confidence: float) -> float:
    from scipy.stats import binom

    need = (d + 1) // 2
    lo, hi = 1.0, 1e6
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if binom.sf(need - 1, d, min(1.0, 1.0 / mid**2)) <= 1 - confidence:
            hi = mid
        else:
            lo = mid
    return hi


def _row_seeds(seed: int, d: int) -> list[int]:
    base = hash_codes(np.arange(d, dtype=np.uint64), seed ^ 0x51ED5EED)
    return [int(s) for s in base]


def _median_rows(vals: np.ndarray, out: np.ndarray | None = None,
                 scratch: np.ndarray | None = None) -> np.ndarray:
    """Median over axis 0 of a (d, m) array; exact ints for odd d (min/max networks).

    ``out`` (length m) receives the result when given; ``scratch`` (at least
    (4, m), same dtype) avoids temporaries in the d = 3 and d = 5 networks.
    """
    d, m = vals.shape
    if d == 1:
        if out is None:
            return vals[0].copy()
        out[...] = vals[0]
        return out
    if d in (3, 5):
        sc = np.empty((4, m), dtype=vals.dtype) if scratch is None else scratch[:, :m]
        if out is None:
            out = np.empty(m, dtype=vals.dtype)
        if d == 3:
            a, b, c = vals
            lo, hi = sc[0], sc[1]
            np.minimum(a, b, out=lo)
            np.maximum(a, b, out=hi)
            np.minimum(hi, c, out=hi)
            return np.maximum(lo, hi, out=out)
        # median5 = median3(e, max(min(a,b), min(c,d)), min(max(a,b), max(c,d)))
        a, b, c, dd, e = vals
        lo1, hi1, lo2, hi2 = sc
        np.minimum(a, b, out=lo1)
        np.maximum(a, b, out=hi1)
        np.minimum(c, dd, out=lo2)
        np.maximum(c, dd, out=hi2)
        np.maximum(lo1, lo2, out=lo1)      # f
        np.minimum(hi1, hi2, out=hi1)      # g
        np.minimum(lo1, hi1, out=lo2)      # min(f, g)
        np.maximum(lo1, hi1, out=hi2)      # max(f, g)
        np.minimum(hi2, e, out=hi2)
        return np.maximum(lo2, hi2, out=out)
    res = np.partition(vals, d // 2, axis=0)[d // 2] if d % 2 else np.median(vals, axis=0)
    if out is None:
        return res
    out[...] = res
    return out


class CountSketch:
    """Linear frequency summary (count sketch); see the module docstring for the math.

    ``CountSketch(d, w, seed, track_heavy)``: ``d`` rows of ``w`` int64
    counters; ``track_heavy=k`` keeps the top-k candidate keys.  Or size it
    from the error you want with :meth:`from_error`.

    >>> import numpy as np
    >>> a = CountSketch(5, 256, seed=3).update(np.arange(100))
    >>> b = CountSketch(5, 256, seed=3).update(np.arange(100, 150))
    >>> (a + b).to_bytes() == CountSketch(5, 256, seed=3).update(np.arange(150)).to_bytes()
    True
    """

    kind = "countsketch"
    OVERHEAD = _HEADER.size   # bytes besides the d*w*8 counters

    def __init__(self, d: int = 5, w: int = 4096, seed: int = 0, track_heavy: int = 0):
        for name, v, lo, hi in (("depth d", d, 1, 2**16 - 1), ("width w", w, 1, 2**31 - 1),
                                ("seed", seed, 0, 2**64 - 1), ("track_heavy", track_heavy, 0, 2**31 - 1)):
            if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)) or not lo <= v <= hi:
                raise SummaryError(f"CountSketch: {name} must be an integer in [{lo}, {hi}], got {v!r}")
        self.d, self.w, self.seed = int(d), int(w), int(seed)
        self.table = np.zeros((self.d, self.w), dtype=np.int64)
        self.total = 0          # signed sum of weights (net count)
        self.total_abs = 0      # sum of |weight| ever merged in (for confidence)
        self.track_heavy = int(track_heavy)
        self._heavy: np.ndarray | None = None
        self._seeds = _row_seeds(self.seed, self.d)          # row r multiplier a_r = seeds[r] | 1
        self._mult = [np.uint64(x | 1) for x in self._seeds]
        self._base_off = seed_offset(self.seed)
        self._pow2 = self.w & (self.w - 1) == 0
        self._shift = np.uint64(63 - (self.w.bit_length() - 1))  # pow2: z >> shift = [sign | bucket]

    # -- construction ------------------------------------------------------
    @classmethod
    def from_error(cls, eps: float, delta: float, seed: int = 0, track_heavy: int = 0) -> "CountSketch":
        """Size for ``|est - f| <= eps ||f||_2`` with probability ``>= 1 - delta``."""
        if not (0 < eps < 1) or not (0 < delta < 1):
            raise SummaryError(f"CountSketch.from_error: need 0 < eps, delta < 1, got eps={eps}, delta={delta}")
        w = math.ceil(3.0 / eps**2)
        d = 2 * math.ceil(math.log(1.0 / delta) / 2) + 1
        return cls(d=d, w=w, seed=seed, track_heavy=track_heavy)

    def empty_like(self) -> "CountSketch":
        return CountSketch(self.d, self.w, self.seed, self.track_heavy)

    def copy(self) -> "CountSketch":
        out = self.empty_like()
        out.table[...] = self.table
        out.total, out.total_abs = self.total, self.total_abs
        out._heavy = None if self._heavy is None else self._heavy.copy()
        return out

    # -- hashing -----------------------------------------------------------
    def _bins_chunks(self, codes: np.ndarray, chunk: int = 0):
        """Yield ``(start, bins)`` with ``bins`` (d, m) uint64 signed bins of ``codes[start:start+m]``.

        Row-local signed bin: ``w [s_r < 0] + h_r`` in ``[0, 2 w)``.  ``bins``
        is a reused scratch buffer: consume it before the next step.
        """
        n = len(codes)
        chunk = chunk or _CHUNK
        size = min(n, chunk)
        buf = np.empty((self.d, size), dtype=np.uint64)
        hbuf = np.empty(size, dtype=np.uint64)
        tmp = np.empty(size, dtype=np.uint64)
        w = np.uint64(self.w)
        for s in range(0, n, chunk):
            c = codes[s:s + chunk]
            m = len(c)
            t, h = tmp[:m], hbuf[:m]
            np.add(c, self._base_off, out=h)
            mix_inplace(h, t)                               # one strong 64-bit hash per key
            for r in range(self.d):
                z = buf[r, :m]
                np.multiply(h, self._mult[r], out=z)        # row hash z_r = a_r h mod 2^64
                if self._pow2:
                    z >>= self._shift                       # top bits: sign, then bucket
                else:
                    np.right_shift(z, _S63, out=t)          # sign bit
                    t *= w
                    z >>= _S31
                    z &= _LOW32                             # x: the 32 bits below the sign
                    z *= w
                    z >>= _S32                              # bucket = floor(x w / 2^32)
                    z += t
            yield s, buf[:, :m]

    def locate(self, values) -> tuple[np.ndarray, np.ndarray]:
        """Flat counter index ``r w + h_r(x)`` (d, n) int64 and sign (d, n) int64 of every key.

        Lets callers that update many sketches of the same shape (the index's
        cells) hash a batch once and reuse it with :meth:`update_located` /
        :meth:`estimate_located`.
        """
        codes = key_codes(values, "CountSketch.locate values")
        n = len(codes)
        idx = np.empty((self.d, n), dtype=np.int64)
        sgn = np.empty((self.d, n), dtype=np.int64)
        row_w = (np.arange(self.d, dtype=np.int64) * self.w)[:, None]
        neg = np.empty((self.d, min(n, _CHUNK)), dtype=bool)
        for s, bins in self._bins_chunks(codes):
            m = bins.shape[1]
            b = bins.view(np.int64)                      # w [s < 0] + bucket
            ng = neg[:, :m]
            np.greater_equal(b, self.w, out=ng)
            sg, ix = sgn[:, s:s + m], idx[:, s:s + m]
            np.multiply(ng, -2, out=sg)
            sg += 1
            np.multiply(ng, self.w, out=ix)
            np.subtract(b, ix, out=ix)
            ix += row_w
        return idx, sgn

    # -- Summarize / Estimate --------------------------------------------------
    @staticmethod
    def _check_weights(weights, n: int, where: str = "CountSketch.update") -> np.ndarray | None:
        if weights is None:
            return None
        w = np.asarray(weights)
        if w.ndim == 0:
            w = np.full(n, w)
        if w.shape != (n,):
            raise SummaryError(f"{where}: weights shape {w.shape} does not match {n} values")
        if w.dtype == object:
            try:
                w = w.astype(np.float64)
            except (TypeError, ValueError):
                raise SummaryError(f"{where}: weights must be numbers") from None
        if w.dtype.kind == "f":
            bad = ~np.isfinite(w) | (w != np.rint(w)) | (np.abs(w) >= 2.0**63)
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise SummaryError(f"{where}: weights must be finite integers (counters are int64); "
                                   f"weight at position {i} is {w[i]!r}")
        elif w.dtype.kind == "u":
            if len(w) and int(w.max()) > _I64_MAX:
                raise SummaryError(f"{where}: weight {int(w.max())} does not fit an int64 counter")
        elif w.dtype.kind not in "bi":
            raise SummaryError(f"{where}: unsupported weight dtype {w.dtype} (use integers)")
        return w.astype(np.int64, copy=False)

    def _add_totals(self, n: int, weights: np.ndarray | None) -> None:
        if weights is None:
            self.total += n
            self.total_abs += n
            return
        absw = np.abs(weights.astype(np.float64))
        if float(absw.sum()) < 2.0**62:
            self.total += int(weights.sum())
            self.total_abs += int(np.abs(weights).sum())
        else:  # exact Python-int sums (rare, large weights)
            self.total += sum(int(x) for x in weights)
            self.total_abs += sum(abs(int(x)) for x in weights)

    def _weights_exact_in_float(self, weights: np.ndarray) -> bool:
        return float(np.abs(weights.astype(np.float64)).sum()) < _EXACT_FLOAT

    def update(self, values, weights=None) -> "CountSketch":
        """Summarize a batch: add each key's (integer) weight, default 1. Returns self."""
        keys = as_key_array(values, "CountSketch.update values")
        wts = self._check_weights(weights, len(keys))
        codes = key_codes(keys, "CountSketch.update values")
        flat = self.table.reshape(-1)
        w2 = 2 * self.w
        if wts is None:
            acc = np.zeros((self.d, w2), dtype=np.int64)
            for _, bins in self._bins_chunks(codes):
                b = bins.view(np.int64)
                for r in range(self.d):
                    acc[r] += np.bincount(b[r], minlength=w2)
            self._fold_signed(acc)
        elif self._weights_exact_in_float(wts):
            wf = wts.astype(np.float64)
            acc = np.zeros((self.d, w2), dtype=np.float64)
            for s, bins in self._bins_chunks(codes):
                ws = wf[s:s + bins.shape[1]]
                b = bins.view(np.int64)
                for r in range(self.d):
                    acc[r] += np.bincount(b[r], weights=ws, minlength=w2)
            self._fold_signed(np.rint(acc).astype(np.int64))
        else:  # sum |w| >= 2^53: exact wrapping int64 scatter-add
            for s, bins in self._bins_chunks(codes):
                idx, neg = self._unsign(bins)
                ws = wts[s:s + bins.shape[1]]
                contrib = np.where(neg, -ws[None, :], ws[None, :])
                np.add.at(flat, idx.reshape(-1), contrib.reshape(-1))
        self._add_totals(len(codes), wts)
        if self.track_heavy and len(keys):
            self._refresh_heavy(np.unique(keys))
        return self

    def _fold_signed(self, acc: np.ndarray) -> None:
        """Add per-signed-bin sums (length 2 d w) to the table: positive half minus negative half."""
        a = acc.reshape(self.d, 2, self.w)
        self.table += a[:, 0, :]
        self.table -= a[:, 1, :]

    def _unsign(self, bins: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Signed bins (d, m) -> flat counter index r w + bucket (int64) and negative-sign mask."""
        row_w = (np.arange(self.d, dtype=np.int64) * self.w)[:, None]
        local = bins.view(np.int64)                            # w [s < 0] + bucket
        neg = local >= self.w
        idx = local - self.w * neg
        idx += row_w
        return idx, neg

    def _check_located(self, idx, sgn, where: str) -> tuple[np.ndarray, np.ndarray]:
        idx, sgn = np.asarray(idx), np.asarray(sgn)
        if idx.ndim != 2 or idx.shape[0] != self.d or sgn.shape != idx.shape:
            raise SummaryError(f"{where}: expected idx and sgn of shape ({self.d}, n) from locate(), "
                               f"got {idx.shape} and {sgn.shape}")
        return idx, sgn

    def update_located(self, idx: np.ndarray, sgn: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Add a batch already hashed with :meth:`locate` (same d, w, seed)."""
        idx, sgn = self._check_located(idx, sgn, "CountSketch.update_located")
        n = idx.shape[1]
        wts = self._check_weights(weights, n, "CountSketch.update_located")
        if n == 0:
            return
        nb = self.d * self.w
        flat = self.table.reshape(-1)
        if wts is None:
            signed = idx + (np.arange(self.d, dtype=np.int64) * self.w)[:, None]   # 2 w r + bucket
            signed += (sgn < 0) * self.w
            self._fold_signed(np.bincount(signed.reshape(-1), minlength=2 * nb))
        elif self._weights_exact_in_float(wts):
            wf = wts.astype(np.float64)
            acc = np.zeros(nb, dtype=np.float64)
            for r in range(self.d):
                acc += np.bincount(idx[r], weights=sgn[r] * wf, minlength=nb)
            flat += np.rint(acc).astype(np.int64)
        else:
            np.add.at(flat, idx.reshape(-1), (sgn * wts[None, :]).reshape(-1))
        self._add_totals(n, wts)

    def estimate(self, values) -> np.ndarray:
        """Median-of-rows frequency estimate of each key (int64 for odd d, float64 for even d)."""
        codes = key_codes(values, "CountSketch.estimate values")
        n = len(codes)
        flat = self.table.reshape(-1)
        # per row [C_r, -C_r] so that one gather by signed bin applies the sign;
        # int32 when the counters allow it (half the cache traffic, faster median)
        small = flat.size == 0 or (int(flat.min()) > -(2**31) and int(flat.max()) < 2**31)
        dt = np.int32 if small else np.int64
        signed = np.empty((self.d, 2, self.w), dtype=dt)
        signed[:, 0, :] = self.table
        np.negative(self.table, out=signed[:, 1, :], casting="unsafe")
        signed = signed.reshape(self.d, 2 * self.w)
        out = np.empty(n, dtype=np.int64 if self.d % 2 else np.float64)
        size = min(n, _EST_CHUNK)
        vals = np.empty((self.d, size), dtype=dt)
        med = np.empty(size, dtype=dt if self.d % 2 else np.float64)
        scratch = np.empty((4, size), dtype=dt)
        for s, bins in self._bins_chunks(codes, _EST_CHUNK):
            m = bins.shape[1]
            v = vals[:, :m]
            b = bins.view(np.int64)
            for r in range(self.d):   # bins are in [0, 2w) by construction: no bounds check needed
                np.take(signed[r], b[r], out=v[r], mode="wrap")
            out[s:s + m] = _median_rows(v, out=med[:m], scratch=scratch)
        return out

    def estimate_located(self, idx: np.ndarray, sgn: np.ndarray) -> np.ndarray:
        """Estimate for a batch already hashed with :meth:`locate`."""
        idx, sgn = self._check_located(idx, sgn, "CountSketch.estimate_located")
        rows = np.take(self.table.reshape(-1), idx)
        rows *= sgn
        return _median_rows(rows)

    # -- moments ---------------------------------------------------------------
    def f2(self) -> float:
        """Estimate of F2 = sum_x f_x^2 (median over rows of the row's squared norm)."""
        t = self.table.astype(np.float64)
        return float(np.median(np.einsum("ij,ij->i", t, t)))

    def inner_product(self, other: "CountSketch") -> float:
        """Estimate of sum_x f_x g_x (the equi-join size of the two streams)."""
        self._check_compatible(other, "inner_product")
        return float(np.median(np.einsum("ij,ij->i", self.table.astype(np.float64),
                                         other.table.astype(np.float64))))

    def confidence(self) -> float:
        """``1 - min(1, sqrt(F2_hat / w) / L1)`` in [0, 1]; 1.0 for an empty sketch."""
        if self.total_abs == 0:
            return 1.0
        return 1.0 - min(1.0, math.sqrt(self.f2() / self.w) / self.total_abs)

    def error_bound(self, confidence: float = 0.95) -> float:
        """Additive bound on |estimate - f| holding with probability ``confidence``."""
        if not isinstance(confidence, (int, float, np.floating)) or not (0 < confidence < 1):
            raise SummaryError(f"error_bound: confidence must be in (0, 1), got {confidence!r}")
        return _chebyshev_k(self.d, float(confidence)) * math.sqrt(self.f2() / self.w)

    # -- heavy hitters ---------------------------------------------------------
    def _refresh_heavy(self, candidates: np.ndarray) -> None:
        if self._heavy is not None and len(self._heavy):
            if (self._heavy.dtype.kind in "US") != (candidates.dtype.kind in "US"):
                raise SummaryError("CountSketch heavy hitters: key types of batches differ "
                                   f"({self._heavy.dtype} vs {candidates.dtype})")
            candidates = np.unique(np.concatenate([self._heavy, candidates]))
        est = self.estimate(candidates)
        keep = np.argsort(-est, kind="stable")[: self.track_heavy]
        keep = keep[est[keep] > 0]
        self._heavy = candidates[keep]

    def heavy_hitters(self, k: int | None = None) -> list[tuple[object, int]]:
        """Top-k tracked candidates with their current estimates, largest first."""
        if not self.track_heavy:
            raise SummaryError("heavy_hitters: construct the sketch with track_heavy=k to track candidates")
        if self._heavy is None or not len(self._heavy):
            return []
        est = self.estimate(self._heavy)
        order = np.argsort(-est, kind="stable")[: k or self.track_heavy]
        return [(self._heavy[i].item(), int(est[i])) for i in order if est[i] > 0]

    # -- Add / Subtract --------------------------------------------------------
    def _check_compatible(self, other, op: str) -> None:
        if not isinstance(other, CountSketch):
            raise SummaryError(f"CountSketch.{op}: other is a {type(other).__name__}, not a CountSketch")
        bad = [f"{n}={getattr(self, n)} vs {getattr(other, n)}" for n in ("d", "w", "seed")
               if getattr(self, n) != getattr(other, n)]
        if bad:
            raise SummaryError(f"CountSketch.{op}: sketches differ in " + ", ".join(bad))

    def merge(self, other: "CountSketch") -> "CountSketch":
        """Add(self, other) in place: counters add exactly. Returns self."""
        self._check_compatible(other, "merge")
        self.table += other.table
        self.total += other.total
        self.total_abs += other.total_abs
        if self.track_heavy and other._heavy is not None and len(other._heavy):
            self._refresh_heavy(other._heavy)
        return self

    def subtract(self, other: "CountSketch") -> "CountSketch":
        """Subtract(self, other) in place: removes an expired region exactly. Returns self."""
        self._check_compatible(other, "subtract")
        self.table -= other.table
        self.total -= other.total
        self.total_abs -= other.total_abs
        if self.track_heavy and self._heavy is not None and len(self._heavy):
            self._refresh_heavy(self._heavy[:0])
        return self

    def __add__(self, other):
        return self.copy().merge(other)

    def __sub__(self, other):
        return self.copy().subtract(other)

    def __eq__(self, other):
        return (isinstance(other, CountSketch) and (self.d, self.w, self.seed, self.total) ==
                (other.d, other.w, other.seed, other.total) and np.array_equal(self.table, other.table))

    __hash__ = None

    # -- compression -------------------------------------------------------------
    def compress(self, factor: int = 2) -> "CountSketch":
        """Fold width w into w/factor (bucket b -> b // factor); returns a new sketch.

        Exact: equals the sketch of the same data built directly at width
        w/factor, because ``floor(x (w/f) / 2^32) == floor(floor(x w / 2^32) / f)``
        when f divides w (and the sign bit does not depend on w).
        """
        if (isinstance(factor, bool) or not isinstance(factor, (int, np.integer))
                or factor < 1 or self.w % factor):
            raise SummaryError(f"compress: factor must be a positive divisor of w={self.w}, got {factor!r}")
        out = CountSketch(self.d, self.w // int(factor), self.seed, self.track_heavy)
        out.table[...] = self.table.reshape(self.d, out.w, int(factor)).sum(axis=2)
        out.total, out.total_abs = self.total, self.total_abs
        out._heavy = None if self._heavy is None else self._heavy.copy()
        return out

    # -- serialization -------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Memory of the summary: d*w*8 counter bytes plus a constant header (plus heavy candidates)."""
        heavy = 0 if self._heavy is None else self._heavy.nbytes
        return self.table.nbytes + self.OVERHEAD + heavy

    def to_bytes(self) -> bytes:
        """Little-endian, machine-independent bytes (header, counters, optional candidates)."""
        heavy = b""
        n_heavy = 0
        if self._heavy is not None and len(self._heavy):
            buf = io.BytesIO()
            h = self._heavy
            np.save(buf, h.astype(h.dtype.newbyteorder("<")), allow_pickle=False)
            heavy, n_heavy = buf.getvalue(), len(h)
        if not _I64_MIN <= self.total <= _I64_MAX or not 0 <= self.total_abs < 2**64:
            raise SummaryError(f"CountSketch.to_bytes: total={self.total} / total_abs={self.total_abs} "
                               "do not fit the 64-bit header")
        head = _HEADER.pack(_MAGIC, _VERSION, self.d, self.w, self.seed, self.total, self.total_abs,
                            n_heavy, self.track_heavy)
        return head + self.table.astype("<i8", copy=False).tobytes() + heavy

    @classmethod
    def from_bytes(cls, data) -> "CountSketch":
        """Inverse of :meth:`to_bytes`; raises SummaryError on anything else."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise SummaryError(f"CountSketch.from_bytes: expected bytes, got {type(data).__name__}")
        data = bytes(data)
        if len(data) < _HEADER.size:
            raise SummaryError(f"CountSketch.from_bytes: {len(data)} bytes is too short for a "
                               f"{_HEADER.size}-byte header")
        magic, ver, d, w, seed, total, total_abs, n_heavy, track = _HEADER.unpack_from(data)
        if magic != _MAGIC:
            raise SummaryError(f"CountSketch.from_bytes: not a count sketch (magic {magic!r}, expected {_MAGIC!r})")
        if ver != _VERSION:
            raise SummaryError(f"CountSketch.from_bytes: unsupported format version {ver} (expected {_VERSION})")
        if d < 1 or w < 1 or w > 2**31 - 1 or track > 2**31 - 1 or n_heavy > track:
            raise SummaryError(f"CountSketch.from_bytes: corrupt header (d={d}, w={w}, total_abs={total_abs}, "
                               f"n_heavy={n_heavy}, track_heavy={track})")
        off = _HEADER.size
        end = off + d * w * 8
        if len(data) < end:
            raise SummaryError(f"CountSketch.from_bytes: truncated table ({len(data)} < {end} bytes)")
        if n_heavy == 0 and len(data) != end:
            raise SummaryError(f"CountSketch.from_bytes: {len(data) - end} unexpected trailing bytes")
        out = cls(d, w, seed, track)
        out.table[...] = np.frombuffer(data, dtype="<i8", count=d * w, offset=off).reshape(d, w)
        out.total, out.total_abs = total, total_abs
        if n_heavy:
            try:
                heavy = np.load(io.BytesIO(data[end:]), allow_pickle=False)
            except Exception as exc:  # numpy raises several kinds on garbage
                raise SummaryError(f"CountSketch.from_bytes: corrupt heavy-hitter block ({exc})") from None
            if heavy.ndim != 1 or len(heavy) != n_heavy or heavy.dtype.kind not in "biufUS":
                raise SummaryError(f"CountSketch.from_bytes: heavy-hitter block holds {heavy.shape} "
                                   f"{heavy.dtype}, expected {n_heavy} keys")
            out._heavy = heavy
        return out

    def __repr__(self) -> str:
        return f"CountSketch(d={self.d}, w={self.w}, seed={self.seed}, total={self.total})"
