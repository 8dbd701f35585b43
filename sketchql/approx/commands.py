"""``sketchql replay``: replay a generated two-store stream through the
promising-tuple join (desc / asc / weighted) and SIMPLE-SHJ on the same work
budget, and print the paper's metrics for each against the exact join.

The budget is ``--units-per-second`` work units per second of inter-arrival
gap (default :data:`sketchql.approx.BENCH_UNITS_PER_SECOND`, the constant the
benchmarks use), so a faster stream (smaller ``--interarrival``) leaves less
work per tuple.
"""
from __future__ import annotations

import math


def _cmd_replay(args) -> int:
    import numpy as np

    from ..data import generate_stores, interleave
    from ..operators.promising import PTJoin, SimpleSHJ
    from . import BENCH_UNITS_PER_SECOND, WorkBudget, evaluate_join, replay

    window = math.inf if args.window <= 0 else args.window
    arr = interleave(generate_stores(2, duration=args.duration, mean_interarrival=args.interarrival / 1000.0,
                                     seed=args.seed))
    budget = WorkBudget(units_per_second=args.units_per_second or BENCH_UNITS_PER_SECOND)
    ops = {"SIMPLE-SHJ": SimpleSHJ(window=window)}
    for pref in args.preference:
        ops[f"PT-Join {pref}"] = PTJoin(window=window, preference=pref, fade=args.fade, seed=args.seed)
    replay(arr, ops, budget, tick_seconds=args.tick)
    wlabel = "whole stream" if math.isinf(window) else f"{window:g} s"
    print(f"replay: {len(arr)} tuples, 2 stores, mean inter-arrival {args.interarrival:g} ms, window {wlabel}, "
          f"fade {args.fade:g}, budget {budget.units_per_second:g} units/s")
    print(f"{'operator':<20} {'pairs':>9} {'% exact':>8} {'fresh s':>8} {'hist-mse':>10} {'outliers':>9} {'invalid':>8}")
    for name, op in ops.items():
        a, b = op.pairs()
        m = evaluate_join(arr, window, a, b)
        print(f"{name:<20} {m['n_produced']:>9} {m['pct_output']:>8.2f} {m['freshness']:>8.2f} "
              f"{m['hist_mse']:>10.3g} {m['outlier_precision']:>9.3f} {m['invalid']:>8}")
    print(f"exact join: {m['n_exact']} pairs; outliers = pairs whose item is in the lowest 5% of window "
          f"frequencies (base rate {m['outlier_base_rate']:.3f})")
    return 0 if all(evaluate_join(arr, window, *op.pairs())["invalid"] == 0 for op in ops.values()) else 1


def register(subparsers) -> None:
    p = subparsers.add_parser("replay", help="replay a generated stream: PT-Join vs SIMPLE-SHJ on one budget")
    p.add_argument("--interarrival", type=float, default=20.0, help="mean inter-arrival in ms (default 20)")
    p.add_argument("--duration", type=float, default=120.0, help="seconds of event time (default 120)")
    p.add_argument("--window", type=float, default=60.0, help="window seconds; 0 = whole stream (default 60)")
    p.add_argument("--fade", type=float, default=0.8)
    p.add_argument("--preference", nargs="+", default=["desc", "weighted", "asc"],
                   choices=["desc", "weighted", "asc"])
    p.add_argument("--units-per-second", type=float, default=None)
    p.add_argument("--tick", type=float, default=0.25, help="seconds of event time per scheduling tick")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=_cmd_replay)
