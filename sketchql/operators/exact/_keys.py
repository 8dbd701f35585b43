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


def segment_starts(sorted_codes: np.ndarray) -> np.ndarray:
    """Boolean mask: first element of each run of equal codes."""
    m = np.ones(len(sorted_codes), dtype=bool)
    if len(sorted_codes) > 1:
        m[1:] = sorted_codes[1:] != sorted_codes[:-1]
    return m


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
