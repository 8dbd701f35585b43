"""Stratified weighted draws (EntryQueue._stratified_exponential) against independent ones."""
import numpy as np

from sketchql.data import generate_stores, interleave
from sketchql.approx import evaluate_join
from sketchql.operators.promising import PTJoin
from sketchql.operators.promising.queue import EntryQueue


def _per_stratum_error(stratify: bool, seed: int) -> float:
    """Squared deviation of each stratum's popped share from the cut's expectation."""
    rng = np.random.default_rng(seed)
    strata = rng.integers(0, 40, 6000).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    q = EntryQueue("weighted", seed=seed, fields=("s",))
    for part in np.array_split(np.arange(strata.shape[0]), 7):        # several pushes: counts carry over
        s = strata[part]
        q.push({"s": s}, np.ones(s.shape[0]), np.ones(s.shape[0]), part,
               weight=np.ones(s.shape[0]), stratum=s if stratify else None)
    taken = q.arrays()["s"][q.pop_many(1500)]
    uk, n = np.unique(strata, return_counts=True)
    got = np.array([(taken == k).sum() for k in uk])
    return float(((got - n * 0.25) ** 2).sum())


def test_stratified_draws_spread_each_stratum_evenly():
    for seed in range(3):
        strat, indep = _per_stratum_error(True, seed), _per_stratum_error(False, seed)
        # independent: binomial variance n p (1-p) per stratum, ~40 * 150 * 0.19 ~ 1100 in total
        assert strat < indep / 4, (seed, strat, indep)


def test_stratified_keys_are_exponential_and_deterministic():
    q1, q2 = EntryQueue("weighted"), EntryQueue("weighted")
    s = np.arange(20000, dtype=np.uint64) % np.uint64(97)
    e1, e2 = q1._stratified_exponential(s), q2._stratified_exponential(s)
    assert np.array_equal(e1, e2)
    assert abs(e1.mean() - 1.0) < 0.03 and abs(np.median(e1) - np.log(2)) < 0.03


def test_weighted_join_with_strata_is_a_valid_subset():
    arr = interleave(generate_stores(2, duration=40.0, mean_interarrival=0.02, seed=5))
    op = PTJoin(window=20.0, preference="weighted", seed=5, stratify=True)
    from sketchql.approx import WorkBudget, replay
    replay(arr, {"w": op}, WorkBudget(units_per_second=1000), tick_seconds=0.25)
    chk = evaluate_join(arr, 20.0, *op.pairs())
    assert chk["invalid"] == 0 and chk["duplicates"] == 0 and 0 < chk["pct_output"] < 100
