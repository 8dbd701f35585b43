"""Vectorized key factorization shared by the exact operators."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd


def _codes1(a: np.ndarray) -> tuple[np.ndarray, int]:
    codes, uniq = pd.factorize(a, use_na_sentinel=False)
    return codes.astype(np.int64, copy=False), max(len(uniq), 1)


def group_codes(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Dense int64 codes, equal iff the rows of ``arrays`` (columns) are equal.

    NaN equals NaN here (grouping semantics); joins remove NaN keys first.
    """
    if not arrays:
        raise ValueError("group_codes needs at least one column")
    n = len(arrays[0])
    if n == 0:
        return np.empty(0, np.int64)
    code, card = _codes1(arrays[0])
    for a in arrays[1:]:
        c, k = _codes1(a)
        if card * k >= 2 ** 62:
            code, card = _codes1(code)
        code = code * k + c
        card *= k
    if len(arrays) > 1:
        code, _ = _codes1(code)
    return code


def joint_codes(parts: Sequence[Sequence[np.ndarray]]) -> list[np.ndarray]:
    """Codes for several row sets (each a list of key columns) in one code space."""
    lens = [len(p[0]) for p in parts]
    ncol = len(parts[0])
    cols = []
    for c in range(ncol):
        arrs = [np.asarray(p[c]) for p in parts]
        if any(a.dtype.kind in "OUS" for a in arrs) and not all(a.dtype.kind in "OUS" for a in arrs):
            arrs = [a.astype(object) for a in arrs]
        cols.append(np.concatenate(arrs) if arrs else np.empty(0))
    codes = group_codes(cols)
    out, o = [], 0
    for n in lens:
        out.append(codes[o:o + n])
        o += n
    return out


def null_rows(arrays: Sequence[np.ndarray]) -> np.ndarray:
    """True where any of the key ``arrays`` is NULL (NaN / None): such a key equals nothing in a
    join (SQL), though :func:`group_codes` groups NULLs together.

    >>> null_rows([np.array([1.0, np.nan]), np.array(["a", None], dtype=object)]).tolist()
    [False, True]
    """
    null = np.zeros(len(arrays[0]) if len(arrays) else 0, bool)
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind == "f":
            null |= np.isnan(a)
        elif a.dtype.kind in "OU":
            null |= pd.isna(a.astype(object))
    return null


def segment_starts(sorted_codes: np.ndarray) -> np.ndarray:
    """Boolean mask: first element of each run of equal codes."""
    m = np.ones(len(sorted_codes), dtype=bool)
    if len(sorted_codes) > 1:
        m[1:] = sorted_codes[1:] != sorted_codes[:-1]
    return m


def stable_order(keys: np.ndarray, bound: int) -> np.ndarray:
    """``np.argsort(keys, kind="stable")`` for integer keys in ``[0, bound)``, on the narrowest
    dtype: numpy radix-sorts 16-bit keys (O(n)), the same permutation as any stable sort."""
    if bound <= np.iinfo(np.int16).max:
        return np.argsort(keys.astype(np.int16), kind="stable")
    return np.argsort(keys, kind="stable")


def time_ranks(at: np.ndarray) -> np.ndarray | None:
    """Dense rank of each time of a non-decreasing ``at`` (equal times, equal ranks); None if
    ``at`` is not sorted."""
    if len(at) < 2:
        return np.zeros(len(at), np.int64)
    d = at[1:] != at[:-1]
    if np.any(at[1:] < at[:-1]):
        return None
    r = np.empty(len(at), np.int64)
    r[0] = 0
    np.cumsum(d, out=r[1:])
    return r


def expand_matches(probe_codes: np.ndarray, build_codes_sorted: np.ndarray):
    """Equi-join by codes: (probe_idx, build_pos) pairs, build side pre-sorted.

    Vectorized: searchsorted gives each probe key's run in the sorted build
    codes; np.repeat expands the runs.
    """
    lo = np.searchsorted(build_codes_sorted, probe_codes, side="left")
    hi = np.searchsorted(build_codes_sorted, probe_codes, side="right")
    cnt = hi - lo
    total = int(cnt.sum())
    if total == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    pi = np.repeat(np.arange(len(probe_codes), dtype=np.int64), cnt)
    # position within each run
    offs = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    bi = np.repeat(lo, cnt) + offs
    return pi, bi


_NULL_FP = np.int64(-0x61C8864680B583EB)     # the fingerprint every NULL / NaN key gets


def fingerprints(arrays: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(fp, null): a deterministic int64 fingerprint per row of the key ``arrays`` and a NULL mask.

    Numbers (int, float, bool) are read as float64 (so 1 and 1.0 are the same key; -0.0 = 0.0)
    and fingerprinted by their bits; strings/objects by pandas' seeded ``hash_array``.  Several
    columns are chained with SplitMix64 (:func:`~sketchql.operators.changes.mix_rids`).  ``null``
    is True where any key column is NULL/NaN: such a key never equals anything in a join or a
    semi-join (SQL), while grouping and set operations may still treat NULLs as one value (the
    fingerprint of a NULL column is a fixed constant).  Two different keys collide with chance
    ~n²/2^64.

    >>> fp, null = fingerprints([np.array([1, 2, 1])])
    >>> bool(fp[0] == fp[2]), bool(fp[0] == fp[1]), null.tolist()
    (True, False, [False, False, False])
    """
    from ..changes import mix_rids
    n = len(arrays[0])
    null = np.zeros(n, bool)
    hs = []
    for a in arrays:
        a = np.asarray(a)
        if a.dtype.kind in "iufb":
            f = a.astype(np.float64) + 0.0
            nn = np.isnan(f)
            h = f.view(np.int64).copy()
            if nn.any():
                h[nn] = _NULL_FP
                null |= nn
        else:
            o = a.astype(object)
            nn = pd.isna(o)
            if nn.any():
                o = o.copy()
                o[nn] = None
                null |= nn
            h = pd.util.hash_array(o).view(np.int64)
            if nn.any():
                h[nn] = _NULL_FP
        hs.append(h)
    fp = hs[0] if len(hs) == 1 else mix_rids(*hs)
    return fp, null


class KeyDict:
    """Dense int64 codes for key fingerprints, kept across steps (no rebuild per step).

    ``codes(fp)`` returns one code per fingerprint, giving new fingerprints the next free codes
    (in order of first appearance).  The known fingerprints live in an open-addressing hash
    table (linear probing, Fibonacci hashing, load <= 1/2) probed by one compiled loop per call
    (:func:`~sketchql.operators.exact._kernels.keydict_codes`): O(1) per key, no sort.

    >>> d = KeyDict()
    >>> d.codes(np.array([7, 3, 7])).tolist(), d.codes(np.array([3, 9])).tolist(), len(d)
    ([0, 1, 0], [1, 2], 3)
    """

    def __init__(self):
        self._fps = np.empty(16, np.int64)     # fingerprint of each code (capacity >= n)
        self._n = 0
        self._bits = 5
        self._table = np.full(1 << self._bits, -1, np.int64)

    def __len__(self) -> int:
        return self._n

    def _reserve(self, k: int):
        need = self._n + k
        if need > len(self._fps):
            fps = np.empty(max(need, 2 * len(self._fps)), np.int64)
            fps[:self._n] = self._fps[:self._n]
            self._fps = fps
        if 2 * need > len(self._table):
            bits = self._bits
            while (1 << bits) < 2 * need:
                bits += 1
            self._rebuild(bits)

    def _rebuild(self, bits: int):
        from ._kernels import keydict_build
        self._bits = bits
        self._table = keydict_build(self._fps, self._n, bits)

    def lookup(self, fp: np.ndarray) -> np.ndarray:
        """Codes of known fingerprints, −1 for unknown ones."""
        from ._kernels import keydict_codes
        fp = np.ascontiguousarray(fp, np.int64)
        return keydict_codes(fp, self._table, self._fps, self._n, self._bits, False)[0]

    def codes(self, fp: np.ndarray) -> np.ndarray:
        from ._kernels import keydict_codes
        fp = np.ascontiguousarray(fp, np.int64)
        self._reserve(len(fp))
        c, self._n = keydict_codes(fp, self._table, self._fps, self._n, self._bits, True)
        return c

    def compact(self, keep: np.ndarray) -> np.ndarray:
        """Forget the codes where ``keep`` is False; renumber the rest densely (order kept).

        Returns the old-code -> new-code map (−1 for forgotten codes).
        """
        keep = np.asarray(keep, bool)
        remap = np.full(self._n, -1, np.int64)
        remap[keep] = np.arange(int(keep.sum()))
        self._fps = np.ascontiguousarray(self._fps[:self._n][keep])
        self._n = len(self._fps)
        bits = 5
        while (1 << bits) < 2 * self._n:
            bits += 1
        # keep the table's size unless it is far too big (codes come and go: no grow/shrink churn)
        self._rebuild(self._bits if self._bits <= bits + 3 else bits)
        return remap
