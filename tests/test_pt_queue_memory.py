"""The PT entry queue's memory: the sorted-run order (RunHeap) against Python's heapq, and the
compaction of the entry table (entries whose probe tuple left the window), checked on a PT join
against brute force."""
import heapq

import numpy as np
import pytest

from sketchql.approx import WorkBudget, evaluate_join, replay
from sketchql.data import generate_stores, interleave
from sketchql.operators.promising import PTJoin
from sketchql.operators.promising.queue import EntryQueue
from sketchql.operators.promising.runheap import RunHeap


def test_runheap_pops_in_heapq_order_through_pushes_unpops_and_filters():
    rng = np.random.default_rng(7)
    h, ref, nid = RunHeap(), [], 0
    for step in range(300):
        op = rng.integers(0, 4)
        if op == 0 or not ref:                                   # push a batch (ties on purpose)
            k = int(rng.integers(1, 80))
            key = np.round(rng.uniform(0, 20, k))
            tie = rng.integers(-5, 0, k)
            ids = np.arange(nid, nid + k)
            nid += k
            h.push(key, tie, ids)
            for it in zip(key.tolist(), tie.tolist(), ids.tolist()):
                heapq.heappush(ref, it)
        elif op == 1:                                            # pop a batch, put some back
            k = int(rng.integers(1, 50))
            key, tie, ids = h.pop_many(k)
            exp = [heapq.heappop(ref) for _ in range(min(k, len(ref)))]
            assert list(zip(key.tolist(), tie.tolist(), ids.tolist())) == exp
            back = rng.random(ids.shape[0]) < 0.3
            h.push_sorted(key[back], tie[back], ids[back])
            for it, b in zip(exp, back.tolist()):
                if b:
                    heapq.heappush(ref, it)
        elif op == 2:                                            # drop the ids divisible by 7
            h.filter(lambda ids: ids % 7 != 0)
            ref = [it for it in ref if it[2] % 7 != 0]
            heapq.heapify(ref)
        assert len(h) == len(ref)
    key, tie, ids = h.pop_many(len(ref) + 5)
    assert list(zip(key.tolist(), tie.tolist(), ids.tolist())) == sorted(ref)
    assert len(h) == 0 and not h.runs


def test_compaction_keeps_the_queued_entries_and_shifts_their_ids():
    q = EntryQueue("desc", fields=("t", "x"))
    t = np.arange(100.0)
    q.push({"t": t, "x": t * 10}, np.arange(100.0), np.ones(100), np.arange(100))
    q.pop_many(10)                                   # the 10 best (t = 99..90) are gone
    cut = q.prune(lambda ids: q.arrays()["t"][ids] >= 60, compact=True)
    assert cut == 60 and q.n == 40 and len(q) == 30
    E = q.arrays()
    got = q.pop_many(100)
    assert E["t"][got].tolist() == list(np.arange(89.0, 59.0, -1))   # same order, shifted ids
    assert (E["x"][got] == E["t"][got] * 10).all()
    assert q.stats()["compacted"] == 60 and q.nbytes > 0


@pytest.mark.parametrize("pref", ["desc", "weighted", "asc"])
def test_pt_join_table_spans_about_a_window_and_stays_exact(pref):
    arr = interleave(generate_stores(2, duration=120.0, mean_interarrival=0.02, seed=11))
    w = 10.0
    op = PTJoin(window=w, preference=pref, seed=3)
    peak = 0

    class Probe:                       # replay wrapper: record the table size after every tick
        def tick(self, batch, allowance):
            nonlocal peak
            op.tick(batch, allowance)
            peak = max(peak, op.queue.n)

        def __getattr__(self, name):
            return getattr(op, name)

    replay(arr, {"j": Probe()}, WorkBudget(units_per_arrival=30), tick_seconds=0.5)
    chk = evaluate_join(arr, w, *op.pairs())
    assert chk["invalid"] == 0 and chk["duplicates"] == 0 and chk["pct_output"] > 0
    st = op.queue.stats()
    assert st["compactions"] > 0
    # entries of ~1.25 windows of arrivals at most (pruned every quarter window), not all 120 s
    per_sec = st["pushed"] / 120.0
    assert peak < 1.5 * w * per_sec + 2048, (peak, st)
