"""The paper's summary ADT (Ali, Aref, ElTabakh, section 3.2) as a Protocol.

| paper           | method                         |
|-----------------|--------------------------------|
| Summarize(x)    | ``update(values, weights=None)`` (numpy batch) |
| Estimate(x)     | ``estimate(values)`` (vectorized)               |
| Confidence()    | ``confidence()``                                |
| Add(r1, r2)     | ``merge(other)`` / ``+``                         |
| Subtract(r1,r2) | ``subtract(other)`` / ``-``                      |

plus ``to_bytes()``/``from_bytes()``, ``nbytes``, ``error_bound(confidence)``
and, where it applies, ``compress(factor)``.  A summary that cannot do an
operation raises :class:`sketchql.errors.UnsupportedOperation` naming the
alternative.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class Summary(Protocol):
    def update(self, values, weights=None) -> "Summary": ...

    def estimate(self, values) -> np.ndarray: ...

    def confidence(self) -> float: ...

    def merge(self, other: "Summary") -> "Summary": ...

    def subtract(self, other: "Summary") -> "Summary": ...

    def to_bytes(self) -> bytes: ...

    @classmethod
    def from_bytes(cls, data: bytes) -> "Summary": ...

    @property
    def nbytes(self) -> int: ...

    def error_bound(self, confidence: float = 0.95) -> float: ...
