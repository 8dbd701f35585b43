"""sketchql.data -- seeded generators of the paper's retail streams.

``generate_stores`` emits two or more store streams of
``(StoreID, TransactionID, TimeStamp, ItemID, Price)`` with Zipf item
popularity that drifts over time and exponential inter-arrival times
(ali-aref-eltabakh-promising-tuples, section 5); ``interleave`` merges them
into one arrival sequence; ``window_match_counts`` / ``join_selectivity`` are
the brute-force (vectorized) oracles for window joins over the generated data.

>>> from sketchql.data import generate_stores, interleave, join_selectivity
>>> s1, s2 = generate_stores(2, duration=120.0, seed=1)
>>> arr = interleave([s1, s2])
>>> 0.04 < join_selectivity(arr, window=60.0) < 0.10
True
"""
from .generator import (
    Arrivals,
    StoreStream,
    generate_stores,
    interleave,
    expected_selectivity,
    make_range_queries,
)
from .oracle import window_match_counts, window_value_counts, join_selectivity, exact_join_pairs

__all__ = [
    "StoreStream", "Arrivals", "generate_stores", "interleave", "expected_selectivity", "make_range_queries",
    "window_match_counts", "window_value_counts", "join_selectivity", "exact_join_pairs",
]
