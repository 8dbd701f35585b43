"""Hash a key batch once for the index: value bucket + count-sketch cells.

The index needs, per key x, its value bucket ``b(x) = hash64(x, seed ^ SALT)
mod B`` and its count-sketch position in each of the d rows (flat counter
index ``r w + h_r(x)`` and sign ``s_r(x)``), exactly what
``hash64`` and ``CountSketch.locate`` return.  Both start from the same
canonical key code c(x) and the SplitMix64 finalizer:

    bucket hash  = mix(c + seed_offset(seed ^ SALT))
    sketch hash  h = mix(c + seed_offset(cs_seed))
    row hash     z_r = a_r h mod 2^64  (top bit: sign, next log2 w bits: column)

so one pass computes both finalizers on a (2, n) array and all d rows with
one broadcast multiply (instead of two separate calls and a loop over rows).
The fused path is used only when the count sketch uses a power-of-two width
and it reproduces ``CountSketch.locate`` bit for bit on a self-test batch
at construction; otherwise it falls back to ``locate`` (same results).

>>> import numpy as np
>>> from sketchql.summaries.countsketch import CountSketch
>>> cs = CountSketch(5, 64, 0)
>>> h = CellHasher(cs, n_buckets=8, bucket_seed=123)
>>> b, idx, sgn = h(np.array([1, 2, 3]))
>>> ref_idx, ref_sgn = cs.locate(np.array([1, 2, 3]))
>>> bool((idx == ref_idx).all() and (sgn == ref_sgn).all())
True
"""
from __future__ import annotations

import numpy as np

from ..summaries.hashing import hash64, key_codes, mix_inplace, seed_offset


_SIGN = np.array([1, -1], dtype=np.int64)


class CellHasher:
    """Callable ``keys -> (bucket (n,), idx (d, n), sgn (d, n))``, all int64.

    ``sketch`` is the template :class:`CountSketch` (or None: no sketch, idx/sgn
    are None); ``n_buckets`` B (1: every bucket is 0); ``bucket_seed`` seeds the
    bucket hash ``hash64(x, bucket_seed) mod B``.
    """

    def __init__(self, sketch, n_buckets: int, bucket_seed: int):
        self.cs = sketch
        self.B = int(n_buckets)
        self.bucket_seed = int(bucket_seed)
        self._offs = np.array([seed_offset(self.bucket_seed), 0], dtype=np.uint64)
        self.fused = False
        if sketch is not None:
            try:
                mult = np.array([int(m) for m in sketch._mult], dtype=np.uint64)
                self._offs[1] = np.uint64(sketch._base_off)
                self._mult = mult[:, None]
                self._shift = np.uint64(64 - (sketch.w.bit_length()))      # keep 1 + log2 w top bits
                self._logw = sketch.w.bit_length() - 1
                self._roww = (np.arange(sketch.d, dtype=np.int64) * sketch.w)[:, None]
                self.fused = bool(sketch._pow2) and sketch.w >= 1
            except (AttributeError, TypeError, ValueError):
                self.fused = False
            if self.fused:
                probe = np.concatenate([np.arange(-50, 200, dtype=np.int64),
                                        np.random.default_rng(7).integers(-2**62, 2**62, 200)])
                ref = sketch.locate(probe)
                got = self._fused(probe)[1:]
                self.fused = all(np.array_equal(a, b) for a, b in zip(got, ref))
                ref_b = (hash64(probe, self.bucket_seed) % np.uint64(max(self.B, 1))).astype(np.int64)
                self.fused = self.fused and (self.B == 1 or np.array_equal(self._fused(probe)[0], ref_b))

    def _fused(self, keys):
        codes = key_codes(keys, "index hash")
        n = len(codes)
        H = np.empty((2, n), dtype=np.uint64)
        np.add(codes[None, :], self._offs[:, None], out=H)
        mix_inplace(H, np.empty_like(H))
        B = self.B
        if B > 1 and B & (B - 1) == 0:
            bucket = np.bitwise_and(H[0], np.uint64(B - 1)).view(np.int64)
        elif B > 1:
            bucket = (H[0] % np.uint64(B)).astype(np.int64)
        else:
            bucket = np.zeros(n, dtype=np.int64)
        z = H[1][None, :] * self._mult                       # (d, n) row hashes
        z >>= self._shift                                    # [sign | column]
        b = z.view(np.int64)
        sgn = _SIGN.take(b >> self._logw)                    # top bit set: -1
        idx = np.bitwise_and(b, self.cs.w - 1, out=b)
        idx += self._roww
        return bucket, idx, sgn

    def __call__(self, keys):
        if self.cs is not None and self.fused:
            return self._fused(keys)
        n = len(keys)
        if self.B > 1:
            bucket = (hash64(keys, self.bucket_seed) % np.uint64(self.B)).astype(np.int64)
        else:
            bucket = np.zeros(n, dtype=np.int64)
        if self.cs is None:
            return bucket, None, None
        idx, sgn = self.cs.locate(keys)
        return bucket, idx, sgn
