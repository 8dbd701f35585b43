"""Count sketch (Charikar, Chen, Farach-Colton 2002): the default summary.

A ``d x w`` table of int64 counters.  Row ``r`` has a bucket hash
``h_r(x) in [0, w)`` and a sign hash ``s_r(x) in {-1, +1}`` (both from one
seeded 64-bit hash: low bits -> bucket, top bit -> sign).  Summarize adds
``s_r(x) * weight`` to ``C[r, h_r(x)]``; Estimate returns the median over rows
of ``s_r(x) * C[r, h_r(x)]``, an unbiased per-row estimate of the frequency
``f_x`` with variance at most ``F2 / w`` (``F2 = sum_y f_y^2``).

Linearity: the table is a linear function of the frequency vector, so
``merge``/``subtract`` are exact element-wise additions, ``a + b - b == a``,
and sketches built from any split of the data merge to identical bytes.

Error bound: by Chebyshev a row is off by more than ``k sqrt(F2/w)`` with
probability at most ``1/k^2``; the median is off only if at least ``ceil(d/2)``
rows are, so ``error_bound(c)`` returns ``k sqrt(F2_hat/w)`` for the smallest
``k`` with ``P[Binom(d, 1/k^2) >= ceil(d/2)] <= 1 - c``.  With ``w = ceil(3/eps^2)``
and ``d = 2 ceil(ln(1/delta)) + 1`` this is the classic ``eps ||f||_2`` bound.

Confidence: ``1 - min(1, sqrt(F2_hat / w) / L1)``, one minus the standard error
of a point estimate as a share of the summarized mass (1.0 when empty).

>>> import numpy as np
>>> cs = CountSketch(d=5, w=1024, seed=1)
>>> _ = cs.update(np.array([7, 7, 7, 3]))
>>> cs.estimate(np.array([7, 3, 99])).tolist()
[3, 1, 0]
>>> (cs + cs - cs).to_bytes() == cs.to_bytes()
True
"""
from __future__ import annotations

import io
import math
import struct
from functools import lru_cache

import numpy as np

from ..errors import SummaryError
from .hashing import hash_codes, key_codes, as_key_array

_MAGIC = b"SQCS"
_VERSION = 1
_HEADER = struct.Struct("<4sHHIQqqQ")  # magic, version, d, w, seed, total, total_abs, n_heavy
_SIGN_SHIFT = np.uint64(63)


@lru_cache(maxsize=256)
def _chebyshev_k(d: int, confidence: float) -> float:
    from scipy.stats import binom

    need = (d + 1) // 2
    lo, hi = 1.0, 1e6
    if binom.sf(need - 1, d, 1.0) <= 1 - confidence:
        return 1.0
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


class CountSketch:
    """Linear frequency summary: see the module docstring for the math."""

    kind = "countsketch"

    def __init__(self, d: int = 5, w: int = 4096, seed: int = 0, track_heavy: int = 0):
        if int(d) != d or d < 1:
            raise SummaryError(f"CountSketch: depth d must be a positive integer, got {d!r}")
        if int(w) != w or w < 1:
            raise SummaryError(f"CountSketch: width w must be a positive integer, got {w!r}")
        if int(seed) != seed or seed < 0 or seed >= 2**64:
            raise SummaryError(f"CountSketch: seed must be an integer in [0, 2^64), got {seed!r}")
        self.d, self.w, self.seed = int(d), int(w), int(seed)
        self.table = np.zeros((self.d, self.w), dtype=np.int64)
        self.total = 0          # signed sum of weights (net count)
        self.total_abs = 0      # sum of |weight| ever merged in (for confidence)
        self.track_heavy = int(track_heavy)
        self._heavy: np.ndarray | None = None
        self._seeds = _row_seeds(self.seed, self.d)
        self._offsets = (np.arange(self.d, dtype=np.int64) * self.w)[:, None]

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
    def locate(self, values) -> tuple[np.ndarray, np.ndarray]:
        """Flat counter index (d, n) and sign (d, n) of every key.

        Lets callers that update many sketches of the same shape (the index's
        cells) hash a batch once and reuse it.
        """
        codes = key_codes(values)
        idx = np.empty((self.d, len(codes)), dtype=np.int64)
        sgn = np.empty((self.d, len(codes)), dtype=np.int64)
        for r, s in enumerate(self._seeds):
            h = hash_codes(codes, s)
            idx[r] = (h % np.uint64(self.w)).astype(np.int64)
            sgn[r] = 1 - 2 * (h >> _SIGN_SHIFT).astype(np.int64)
        idx += self._offsets
        return idx, sgn

    # -- Summarize / Estimate --------------------------------------------------
    def _check_weights(self, weights, n: int) -> np.ndarray | None:
        if weights is None:
            return None
        w = np.asarray(weights)
        if w.ndim == 0:
            w = np.full(n, w)
        if w.shape != (n,):
            raise SummaryError(f"CountSketch.update: weights shape {w.shape} does not match {n} values")
        if w.dtype.kind == "f":
            if not np.isfinite(w).all() or (w != np.rint(w)).any():
                raise SummaryError("CountSketch.update: weights must be finite integers (counters are int64)")
        elif w.dtype.kind not in "biu":
            raise SummaryError(f"CountSketch.update: unsupported weight dtype {w.dtype}")
        return w.astype(np.int64)

    def update(self, values, weights=None) -> "CountSketch":
        """Summarize a batch: add each key's (integer) weight, default 1."""
        keys = as_key_array(values, "CountSketch.update values")
        wts = self._check_weights(weights, len(keys))
        idx, sgn = self.locate(keys)
        self.update_located(idx, sgn, wts)
        if self.track_heavy and len(keys):
            self._refresh_heavy(np.unique(keys))
        return self

    def update_located(self, idx: np.ndarray, sgn: np.ndarray, weights: np.ndarray | None = None) -> None:
        """Add a batch already hashed with :meth:`locate` (same d, w, seed)."""
        if idx.shape[1] == 0:
            return
        contrib = sgn if weights is None else sgn * weights[None, :]
        acc = np.bincount(idx.ravel(), weights=contrib.ravel(), minlength=self.d * self.w)
        self.table += np.rint(acc).astype(np.int64).reshape(self.d, self.w)
        tot = idx.shape[1] if weights is None else int(weights.sum())
        self.total += tot
        self.total_abs += idx.shape[1] if weights is None else int(np.abs(weights).sum())

    def estimate(self, values) -> np.ndarray:
        """Median-of-rows frequency estimate of each key (int64 for odd d)."""
        idx, sgn = self.locate(as_key_array(values, "CountSketch.estimate values"))
        return self.estimate_located(idx, sgn)

    def estimate_located(self, idx: np.ndarray, sgn: np.ndarray) -> np.ndarray:
        rows = self.table.ravel()[idx] * sgn
        if self.d == 1:
            return rows[0]
        if self.d % 2:
            return np.sort(rows, axis=0)[self.d // 2]
        return np.median(rows, axis=0)

    # -- moments ---------------------------------------------------------------
    def f2(self) -> float:
        """Estimate of F2 = sum_x f_x^2 (median over rows of the row's squared norm)."""
        return float(np.median((self.table.astype(np.float64) ** 2).sum(axis=1)))

    def inner_product(self, other: "CountSketch") -> float:
        """Estimate of sum_x f_x g_x (the equi-join size of the two streams)."""
        self._check_compatible(other, "inner_product")
        return float(np.median((self.table.astype(np.float64) * other.table).sum(axis=1)))

    def confidence(self) -> float:
        if self.total_abs == 0:
            return 1.0
        return 1.0 - min(1.0, math.sqrt(self.f2() / self.w) / self.total_abs)

    def error_bound(self, confidence: float = 0.95) -> float:
        """Additive bound on |estimate - f| holding with probability ``confidence``."""
        if not (0 < confidence < 1):
            raise SummaryError(f"error_bound: confidence must be in (0, 1), got {confidence}")
        return _chebyshev_k(self.d, float(confidence)) * math.sqrt(self.f2() / self.w)

    # -- heavy hitters ---------------------------------------------------------
    def _refresh_heavy(self, candidates: np.ndarray) -> None:
        if self._heavy is not None and len(self._heavy):
            try:
                candidates = np.unique(np.concatenate([self._heavy, candidates]))
            except (TypeError, ValueError, np.exceptions.DTypePromotionError):
                raise SummaryError("CountSketch heavy hitters: key types of batches differ") from None
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
        """Add(self, other) in place: counters add exactly."""
        self._check_compatible(other, "merge")
        self.table += other.table
        self.total += other.total
        self.total_abs += other.total_abs
        if self.track_heavy and other._heavy is not None and len(other._heavy):
            self._refresh_heavy(other._heavy)
        return self

    def subtract(self, other: "CountSketch") -> "CountSketch":
        """Subtract(self, other) in place: removes an expired region exactly."""
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
        """Fold width w into w/factor (bucket b -> b mod w/factor); returns a new sketch.

        Exact: equals the sketch of the same data built directly at width
        w/factor, because ``h mod (w/f) == (h mod w) mod (w/f)`` when f divides w.
        """
        if int(factor) != factor or factor < 1 or self.w % factor:
            raise SummaryError(f"compress: factor must be a positive divisor of w={self.w}, got {factor!r}")
        out = CountSketch(self.d, self.w // int(factor), self.seed, self.track_heavy)
        out.table[...] = self.table.reshape(self.d, int(factor), out.w).sum(axis=1)
        out.total, out.total_abs = self.total, self.total_abs
        out._heavy = None if self._heavy is None else self._heavy.copy()
        return out

    # -- serialization -------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Memory of the summary: d*w*8 counter bytes plus a constant header."""
        return self.table.nbytes + _HEADER.size

    def to_bytes(self) -> bytes:
        heavy = b""
        n_heavy = 0
        if self._heavy is not None and len(self._heavy):
            buf = io.BytesIO()
            np.save(buf, self._heavy, allow_pickle=False)
            heavy, n_heavy = buf.getvalue(), len(self._heavy)
        head = _HEADER.pack(_MAGIC, _VERSION, self.d, self.w, self.seed, self.total, self.total_abs, n_heavy)
        return head + struct.pack("<I", self.track_heavy) + self.table.astype("<i8").tobytes() + heavy

    @classmethod
    def from_bytes(cls, data: bytes) -> "CountSketch":
        if len(data) < _HEADER.size + 4:
            raise SummaryError(f"CountSketch.from_bytes: {len(data)} bytes is too short for a header")
        magic, ver, d, w, seed, total, total_abs, n_heavy = _HEADER.unpack_from(data)
        if magic != _MAGIC or ver != _VERSION:
            raise SummaryError(f"CountSketch.from_bytes: not a count sketch (magic {magic!r}, version {ver})")
        (track,) = struct.unpack_from("<I", data, _HEADER.size)
        off = _HEADER.size + 4
        end = off + d * w * 8
        if len(data) < end:
            raise SummaryError(f"CountSketch.from_bytes: truncated table ({len(data)} < {end} bytes)")
        out = cls(d, w, seed, track)
        out.table[...] = np.frombuffer(data, dtype="<i8", count=d * w, offset=off).reshape(d, w)
        out.total, out.total_abs = total, total_abs
        if n_heavy:
            out._heavy = np.load(io.BytesIO(data[end:]), allow_pickle=False)
        return out

    def __repr__(self) -> str:
        return f"CountSketch(d={self.d}, w={self.w}, seed={self.seed}, total={self.total})"
