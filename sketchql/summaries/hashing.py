"""Seeded, vectorized, machine-independent hashing of keys.

Every key is first *canonicalized* to a uint64 "key code", then mixed with a
seed by the SplitMix64 finalizer (Steele et al.):

    z = code + seed * 0x9E3779B97F4A7C15
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    h = z ^ (z >> 31)

Canonical key codes:

* integers (any numpy int/bool dtype): the two's-complement int64 value;
* floats: integral values are coded exactly like the equal integer (so
  ``3`` and ``3.0`` collide on purpose, which is what an equi-join needs);
  other values use their IEEE-754 bits (``-0.0`` is ``0``); NaN is rejected;
* strings/bytes: a 64-bit FNV-1a of the UTF-8 bytes, computed column by
  column over a fixed-width byte matrix (vectorized across keys), then mixed.

Python's ``hash()`` is never used, so the same key hashes to the same value in
every process and on every machine.

>>> import numpy as np
>>> h = hash64(np.array([1, 2, 3]), seed=7)
>>> bool((h == hash64(np.array([1.0, 2.0, 3.0]), seed=7)).all())
True
"""
from __future__ import annotations

import numpy as np

from ..errors import SummaryError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_STR_TAG = np.uint64(0x5354520000000000)


def _mix(z: np.ndarray) -> np.ndarray:
    z = z ^ (z >> np.uint64(30))
    z = z * _M1
    z = z ^ (z >> np.uint64(27))
    z = z * _M2
    return z ^ (z >> np.uint64(31))


def as_key_array(values, where: str = "values") -> np.ndarray:
    """Return ``values`` as a 1-D numpy array of a hashable kind, or raise."""
    arr = np.asarray(values)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise SummaryError(f"{where}: expected a 1-D batch of keys, got shape {arr.shape}")
    if arr.dtype == object:
        if len(arr) and all(isinstance(v, (bytes, str)) for v in arr):
            arr = arr.astype(str)
        else:
            try:
                arr = arr.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise SummaryError(f"{where}: keys must be ints, floats or strings ({exc})") from None
    if arr.dtype.kind not in "biufUS":
        raise SummaryError(f"{where}: unsupported key dtype {arr.dtype}")
    return arr


def key_codes(values, where: str = "values") -> np.ndarray:
    """Canonical uint64 code of each key (see module docstring)."""
    arr = as_key_array(values, where)
    kind = arr.dtype.kind
    if kind in "biu":
        return arr.astype(np.int64, copy=False).view(np.uint64)
    if kind == "f":
        f = arr.astype(np.float64, copy=False)
        nan = np.isnan(f)
        if nan.any():
            raise SummaryError(f"{where}: NaN key at position {int(np.flatnonzero(nan)[0])}")
        integral = (f == np.floor(f)) & (np.abs(f) < 2.0**63)
        out = np.where(integral, f, 0).astype(np.int64).view(np.uint64)
        if not integral.all():
            bits = (f + 0.0).view(np.uint64)  # +0.0 turns -0.0 into 0.0
            out = np.where(integral, out, _mix(bits ^ _GOLDEN))
        return out
    # strings / bytes: FNV-1a over a fixed-width byte matrix, vectorized over keys
    if kind == "U":
        arr = np.char.encode(arr, "utf-8")
    width = max(arr.dtype.itemsize, 1)
    mat = np.frombuffer(np.ascontiguousarray(arr).tobytes(), dtype=np.uint8)
    mat = mat.reshape(len(arr), width) if len(arr) else mat.reshape(0, width)
    lengths = np.char.str_len(arr) if len(arr) else np.zeros(0, dtype=np.int64)
    h = np.full(len(arr), _FNV_OFFSET, dtype=np.uint64)
    for j in range(width):
        live = lengths > j
        nxt = (h ^ mat[:, j].astype(np.uint64)) * _FNV_PRIME
        h = np.where(live, nxt, h)
    return _mix(h ^ _STR_TAG)


def hash64(values, seed: int, where: str = "values") -> np.ndarray:
    """Seeded 64-bit hash of each key (uint64 array)."""
    return hash_codes(key_codes(values, where), seed)


def hash_codes(codes: np.ndarray, seed: int) -> np.ndarray:
    """Seeded hash of already-canonical key codes (skip canonicalization)."""
    offset = np.uint64((int(seed) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)
    return _mix(codes + offset)
