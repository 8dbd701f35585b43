"""Summary-layer benchmark: count-sketch batch ingest/estimate vs DataSketches per item.

On one Zipf stream (10 M keys, or 2 M with --quick) at d = 5, w = 4096:

* sketchql CountSketch batch update throughput (batches of 1 M keys);
* datasketches count_min_sketch(5, 4096) fed item by item from a Python loop
  (on a subset: 200 k items, 100 k with --quick), the way a per-tuple
  integration would use it;
* datasketches frequent_items_sketch fed item by item (same subset), and
  sketchql's FrequentItems adapter (batch pre-aggregated) for reference;
* CountSketch estimate throughput on 1 M keys;
* CountSketch memory vs d * w * 8;
* accuracy on the subset's 100 most frequent keys (count sketch vs count-min).

Everything runs on one core (numpy without threads); times are the best of a
few repeats in CPU seconds of this process (the machine is shared).  The last line is

    ingest_speedup_vs_datasketches_cms=<x> estimate_keys_per_s=<n>

Usage: python benchmarks/bench_summaries.py [--quick] [--seed S]
"""
from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import datasketches as ds  # noqa: E402

from sketchql.summaries import CountSketch, FrequentItems  # noqa: E402

D, W = 5, 4096


def timed(fn, repeat: int = 1) -> float:
    """Best-of-``repeat`` CPU seconds of this (single-threaded) process.

    CPU time rather than wall time: the machine is shared, and being
    descheduled by other processes should not count against either side.
    """
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        fn()
        best = min(best, time.process_time() - t)
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="2 M keys, 100 k per-item subset (< 1 minute)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--zipf", type=float, default=1.2, help="Zipf exponent of the key stream")
    args = ap.parse_args(argv)

    n = 2_000_000 if args.quick else 10_000_000
    n_item = 100_000 if args.quick else 200_000
    batch = 1_000_000
    rng = np.random.default_rng(args.seed)
    keys = rng.zipf(args.zipf, n).astype(np.int64)
    sub = keys[:n_item]
    sub_list = sub.tolist()
    rows = []

    # 1. count sketch batch ingest over the whole stream
    def cs_ingest():
        cs = CountSketch(D, W, seed=1)
        for s in range(0, n, batch):
            cs.update(keys[s:s + batch])
        return cs
    cs_ingest()  # warm-up (page faults, caches)
    t_cs = timed(cs_ingest, repeat=5 if args.quick else 3)
    cs_rate = n / t_cs
    rows.append(("CountSketch.update (batch 1M)", n, t_cs, cs_rate))

    # 2. datasketches count-min, item by item
    def cms_loop():
        cms = ds.count_min_sketch(D, W, 9001)
        upd = cms.update
        for x in sub_list:
            upd(x)
        return cms
    t_cms = timed(cms_loop, repeat=3)
    cms_rate = n_item / t_cms
    rows.append(("datasketches count_min update (per item)", n_item, t_cms, cms_rate))

    # 3. datasketches frequent items, item by item; and the batch adapter
    def fi_loop():
        fi = ds.frequent_items_sketch(10)
        upd = fi.update
        for x in sub_list:
            upd(x)
    t_fi = timed(fi_loop, repeat=2)
    rows.append(("datasketches frequent_items update (per item)", n_item, t_fi, n_item / t_fi))
    t_fa = timed(lambda: FrequentItems(10).update(sub), repeat=2)
    rows.append(("sketchql FrequentItems.update (batch)", n_item, t_fa, n_item / t_fa))

    # 4. estimates on 1M keys
    cs = cs_ingest()
    q = keys[:batch]
    t_est = timed(lambda: cs.estimate(q), repeat=15)
    est_rate = len(q) / t_est
    rows.append(("CountSketch.estimate (1M keys)", len(q), t_est, est_rate))
    cms = cms_loop()
    q_small = q[:n_item].tolist()
    t_ce = timed(lambda: [cms.get_estimate(x) for x in q_small], repeat=1)
    rows.append(("datasketches count_min get_estimate (per item)", n_item, t_ce, n_item / t_ce))

    # 5. accuracy on the subset's top-100 keys (same data for both)
    u, c = np.unique(sub, return_counts=True)
    top = np.argsort(-c)[:100]
    cs_sub = CountSketch(D, W, seed=1).update(sub)
    err_cs = np.abs(cs_sub.estimate(u[top]) - c[top])
    err_cms = np.abs(np.array([cms.get_estimate(int(k)) for k in u[top]]) - c[top])

    print(f"sketchql summaries benchmark: {n:,} Zipf({args.zipf}) keys, d={D}, w={W}, "
          f"per-item subset {n_item:,}{' (quick)' if args.quick else ''}")
    print(f"{'operation':<50} {'items':>12} {'seconds':>9} {'items/s':>14}")
    print("-" * 88)
    for name, items, secs, rate in rows:
        print(f"{name:<50} {items:>12,} {secs:>9.3f} {rate:>14,.0f}")
    print("-" * 88)
    print(f"{'CountSketch memory (nbytes)':<50} {cs.nbytes:>12,} bytes  = d*w*8 ({D * W * 8:,}) "
          f"+ {cs.nbytes - D * W * 8} constant")
    print(f"{'datasketches count_min serialized size':<50} {cms.get_serialized_size_bytes():>12,} bytes")
    print(f"top-100 keys of the subset: mean |err| count sketch {err_cs.mean():.1f} (max {err_cs.max()}), "
          f"count-min {err_cms.mean():.1f} (max {err_cms.max():.0f}); "
          f"CS error_bound(0.95) = {cs_sub.error_bound(0.95):.1f}")
    speedup = cs_rate / cms_rate
    print(f"ingest speedup vs datasketches count-min (per item): {speedup:.1f}x; "
          f"estimate/ingest throughput ratio: {est_rate / cs_rate:.2f}")
    print(f"ingest_speedup_vs_datasketches_cms={speedup:.2f} estimate_keys_per_s={est_rate:.0f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
