"""Summaries: the paper's summary ADT and its implementations.

Knows nothing of the other rooms.

* :class:`CountSketch` -- the default, linear frequency summary (adds and
  subtracts exactly, compresses, F2 / inner products, heavy hitters);
* DataSketches adapters for what it does not do: :class:`KLLQuantiles`
  (quantiles), :class:`HLLDistinct` (distinct counts), :class:`FrequentItems`
  (heavy hitters, the peer), :class:`VarOptSample` (weighted sample).
"""
from .protocol import Summary
from .countsketch import CountSketch
from .hashing import hash64, hash_codes, key_codes
from .datasketches_adapters import FrequentItems, HLLDistinct, KLLQuantiles, VarOptSample

__all__ = ["Summary", "CountSketch", "hash64", "hash_codes", "key_codes",
           "KLLQuantiles", "HLLDistinct", "FrequentItems", "VarOptSample"]
