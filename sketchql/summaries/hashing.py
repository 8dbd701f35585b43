"""Seeded, vectorized, machine-independent hashing of keys.

Every key is first *canonicalized* to a uint64 "key code", then mixed with a
seed by the SplitMix64 finalizer (Steele et al.), in wrapping uint64
arithmetic:

    z = code + seed * 0x9E3779B97F4A7C15          (mod 2^64)
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
    z = (z ^ (z >> 27)) * 0x94D049BB133111EB
    h = z ^ (z >> 31)

Canonical key codes (equal keys get equal codes, whatever their dtype):

* integers in [-2^63, 2^63) (any numpy int/bool dtype): the two's-complement
  int64 value; unsigned integers in [2^63, 2^64) get ``mix(v ^ BIG_TAG)`` so
  they do not collide with negative int64 values;
* floats: integral values are coded exactly like the equal integer (so ``3``
  and ``3.0`` collide on purpose, which is what an equi-join needs); other
  values (fractions, +-inf) use ``mix(ieee754_bits ^ GOLDEN)`` with ``-0.0``
  coded as ``0``; NaN is rejected with :class:`~sketchql.errors.SummaryError`;
* strings and bytes: 64-bit FNV-1a of the UTF-8 bytes (bytes are hashed as
  they are, so ``b"abc"`` and ``"abc"`` are the same key), then
  ``mix(h ^ STR_TAG)``.  The UTF-8 encoding is computed vectorized from the
  code points, column by column, over the keys still long enough.  As in
  numpy itself, trailing NUL characters are not part of a string.

Python's ``hash()`` is never used and every step is defined on explicit
little-endian 64-bit integers, so the same key hashes to the same value in
every process and on every machine (the tests pin known values).

>>> import numpy as np
>>> h = hash64(np.array([1, 2, 3]), seed=7)
>>> bool((h == hash64(np.array([1.0, 2.0, 3.0]), seed=7)).all())
True
>>> bool(hash64(["é"], 1)[0] == hash64(np.array(["é".encode()]), 1)[0])
True
"""
from __future__ import annotations

import numbers

import numpy as np

from ..errors import SummaryError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_STR_TAG = np.uint64(0x5354520000000000)
_BIG_TAG = np.uint64(0x4249470000000000)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_MASK64 = 0xFFFFFFFFFFFFFFFF


def _mix(z: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer (returns a new array)."""
    z = z ^ (z >> _S30)
    z = z * _M1
    z = z ^ (z >> _S27)
    z = z * _M2
    return z ^ (z >> _S31)


def mix_inplace(z: np.ndarray, tmp: np.ndarray) -> np.ndarray:
    """SplitMix64 finalizer applied to the uint64 array ``z`` in place.

    ``tmp`` is scratch space of the same shape.  Same values as :func:`_mix`,
    without allocating (the count sketch runs it on cache-sized chunks).
    """
    np.right_shift(z, _S30, out=tmp)
    z ^= tmp
    z *= _M1
    np.right_shift(z, _S27, out=tmp)
    z ^= tmp
    z *= _M2
    np.right_shift(z, _S31, out=tmp)
    z ^= tmp
    return z


def seed_offset(seed: int) -> np.uint64:
    """``seed * GOLDEN mod 2^64``: what :func:`hash_codes` adds to each code."""
    return np.uint64((int(seed) * 0x9E3779B97F4A7C15) & _MASK64)


def _object_to_array(arr: np.ndarray, where: str) -> np.ndarray:
    """Turn a 1-D object array into a typed one (strings, ints or floats)."""
    items = arr.tolist()
    if not items:
        return np.zeros(0, dtype=np.int64)
    kinds = set()
    for i, v in enumerate(items):
        if isinstance(v, str):
            kinds.add("str")
        elif isinstance(v, (bytes, bytearray, memoryview)):
            kinds.add("bytes")
        elif isinstance(v, (bool, np.bool_)) or isinstance(v, numbers.Integral):
            kinds.add("int")
        elif isinstance(v, numbers.Real):
            kinds.add("float")
        else:
            what = "None" if v is None else f"a {type(v).__name__}"
            raise SummaryError(f"{where}: key at position {i} is {what}; keys must be ints, floats or strings")
    if kinds <= {"str", "bytes"}:
        if kinds == {"bytes"}:
            return np.array([bytes(v) for v in items], dtype=np.bytes_)
        try:
            return np.array([v if isinstance(v, str) else bytes(v).decode("utf-8") for v in items], dtype=np.str_)
        except UnicodeDecodeError as exc:
            raise SummaryError(f"{where}: bytes key mixed with strings is not valid UTF-8 ({exc})") from None
    if kinds & {"str", "bytes"}:
        raise SummaryError(f"{where}: keys mix strings with numbers ({sorted(kinds)}); use one key type per batch")
    if kinds == {"int"}:
        ints = [int(v) for v in items]
        if min(ints) >= -(2**63) and max(ints) < 2**63:
            return np.array(ints, dtype=np.int64)
        if min(ints) >= 0 and max(ints) < 2**64:
            return np.array(ints, dtype=np.uint64)
        raise SummaryError(f"{where}: integer key out of the 64-bit range (min {min(ints)}, max {max(ints)})")
    # floats, possibly mixed with ints: ints beyond 2^53 would lose precision
    if any(isinstance(v, numbers.Integral) and abs(int(v)) > 2**53 for v in items):
        raise SummaryError(f"{where}: keys mix floats with integers beyond 2^53 (they would be rounded)")
    return np.array([float(v) for v in items], dtype=np.float64)


def as_key_array(values, where: str = "values") -> np.ndarray:
    """Return ``values`` as a 1-D numpy array of a hashable kind, or raise.

    Accepts numpy arrays, lists, pandas/pyarrow columns (anything
    ``np.asarray`` understands); object arrays are typed by their contents.
    """
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError) as exc:
        raise SummaryError(f"{where}: cannot read keys as an array ({exc})") from None
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if (isinstance(values, (list, tuple)) and arr.dtype.kind in "US" and arr.ndim == 1
            and not all(isinstance(v, (str, bytes)) for v in values)):
        arr = np.array(values, dtype=object)  # numpy would silently turn 1 into "1"
    if arr.ndim != 1:
        raise SummaryError(f"{where}: expected a 1-D batch of keys, got an array of shape {arr.shape}")
    if arr.dtype == object:
        arr = _object_to_array(arr, where)
    if arr.dtype.kind not in "biufUS":
        raise SummaryError(f"{where}: unsupported key dtype {arr.dtype} (use ints, floats or strings)")
    return arr


def _big_unsigned_codes(u: np.ndarray) -> np.ndarray:
    return _mix(u ^ _BIG_TAG)


def _float_codes(f: np.ndarray, where: str) -> np.ndarray:
    nan = np.isnan(f)
    if nan.any():
        raise SummaryError(f"{where}: NaN key at position {int(np.flatnonzero(nan)[0])} (NaN equals nothing)")
    integral = np.isfinite(f) & (f == np.floor(f))
    small = integral & (f >= -(2.0**63)) & (f < 2.0**63)
    out = np.where(small, f, 0.0).astype(np.int64).view(np.uint64)
    if small.all():
        return out
    big = integral & (f >= 2.0**63) & (f < 2.0**64)
    if big.any():
        out = np.where(big, _big_unsigned_codes(np.where(big, f, 0.0).astype(np.uint64)), out)
    other = ~(small | big)
    if other.any():
        bits = (f + 0.0).view(np.uint64)            # +0.0 turns -0.0 into 0.0
        out = np.where(other, _mix(bits ^ _GOLDEN), out)
    return out


def _utf8_fnv(arr: np.ndarray) -> np.ndarray:
    """FNV-1a (64-bit) of the UTF-8 encoding of each string or bytes key."""
    n = len(arr)
    h = np.full(n, _FNV_OFFSET, dtype=np.uint64)
    if n == 0 or arr.dtype.itemsize == 0:
        return h
    if arr.dtype.kind == "U":
        width = arr.dtype.itemsize // 4
        mat = np.ascontiguousarray(arr).view(np.uint32).reshape(n, width)
    else:
        width = arr.dtype.itemsize
        mat = np.ascontiguousarray(arr).view(np.uint8).reshape(n, width)
    lengths = np.char.str_len(arr)
    # process keys longest first so that the keys still alive at column j are a prefix
    order = np.argsort(-lengths, kind="stable")
    lens_sorted = lengths[order]
    hs = h  # all equal initially, no need to permute
    alive_counts = np.searchsorted(-lens_sorted, -np.arange(1, width + 1), side="right")
    # alive_counts[j] = number of keys with length > j
    for j in range(width):
        m = int(alive_counts[j])
        if m == 0:
            break
        c = mat[order[:m], j].astype(np.uint64)
        hm = hs[:m]
        if arr.dtype.kind == "S" or bool((c < 0x80).all()):
            hm ^= c
            hm *= _FNV_PRIME
            continue
        nb = (1 + (c >= 0x80).astype(np.uint64) + (c >= 0x800).astype(np.uint64)
              + (c >= 0x10000).astype(np.uint64))
        lead = np.where(nb == 1, c,
               np.where(nb == 2, np.uint64(0xC0) | (c >> np.uint64(6)),
               np.where(nb == 3, np.uint64(0xE0) | (c >> np.uint64(12)),
                        np.uint64(0xF0) | (c >> np.uint64(18)))))
        hm ^= lead
        hm *= _FNV_PRIME
        for k in (1, 2, 3):  # continuation byte k exists iff nb > k
            live = nb > k
            if not live.any():
                break
            shift = (nb - np.uint64(1) - np.uint64(k)) * np.uint64(6)
            shift = np.where(live, shift, 0)
            cont = np.uint64(0x80) | ((c >> shift) & np.uint64(0x3F))
            hm[:] = np.where(live, (hm ^ cont) * _FNV_PRIME, hm)
    out = np.empty_like(hs)
    out[order] = hs
    return out


def key_codes(values, where: str = "values") -> np.ndarray:
    """Canonical uint64 code of each key (see module docstring)."""
    arr = as_key_array(values, where)
    kind = arr.dtype.kind
    if kind in "bi":
        return arr.astype(np.int64, copy=False).view(np.uint64)
    if kind == "u":
        u = arr.astype(np.uint64, copy=False)
        big = u >= np.uint64(2**63)
        if big.any():
            return np.where(big, _big_unsigned_codes(u), u)
        return u
    if kind == "f":
        return _float_codes(arr.astype(np.float64, copy=False), where)
    return _mix(_utf8_fnv(arr) ^ _STR_TAG)


def hash64(values, seed: int, where: str = "values") -> np.ndarray:
    """Seeded 64-bit hash of each key (uint64 array)."""
    return hash_codes(key_codes(values, where), seed)


def hash_codes(codes: np.ndarray, seed: int) -> np.ndarray:
    """Seeded hash of already-canonical key codes (skip canonicalization)."""
    return _mix(np.asarray(codes, dtype=np.uint64) + seed_offset(seed))
