"""Summaries: the paper's summary ADT and its implementations.

Knows nothing of the other rooms.
"""
from .protocol import Summary
from .countsketch import CountSketch
from .hashing import hash64, key_codes

__all__ = ["Summary", "CountSketch", "hash64", "key_codes"]
