"""Wall-clock join: PT-Join desc vs SIMPLE-SHJ (Python loop) vs SIMPLE-SHJ
compiled (:class:`sketchql.operators.promising.shj_compiled.CompiledSHJ`).

    .venv/bin/python benchmarks/bench_shj_compiled.py [--quick] [--rho 0.5]

Same setting as ``bench_promising.py``'s wall-clock table (its helpers are
imported, not copied): two store streams of 30 s (``--quick``; 180 s
otherwise), one-minute window, rates 10/20/50/100 ms mean inter-arrival,
replay ticks of 0.25 s, ``TimeBudget(fraction=f, wall_clock=True)`` with
``f = rho * shj_need_s / span`` where ``shj_need_s`` is the real time the
exact *Python* SIMPLE-SHJ needs for the stream (measured first, as there:
the budget is the same for all three operators and the same as
bench_promising's).  Each SHJ gets a backlog of one tick's CPU share.  All
three run in the same replay (interleaved per tick).

Why: the Python SIMPLE-SHJ spends ~6 us per arrival in its interpreter loop,
while desc's wall-clock path is compiled and batched; charged real time, part
of desc's lead over it is implementation.  ``CompiledSHJ`` is the same join
(same pairs and drops on a work-unit budget, tests/test_pt_shj_compiled.py)
with a numba kernel per tick, so ``desc / CompiledSHJ`` is the tuple-choice
lead at equal implementation effort.

Printed: per rate the exact join size, each operator's output as % of it,
the ratios desc/SHJ and desc/CompiledSHJ, CompiledSHJ's own exact need
(``cshj_need_s``: unlimited budget, real seconds) and its measured
``processed`` share; last line
``desc_wallclock_ratio_vs_shj_min=<x> desc_wallclock_ratio_vs_compiled_shj_min=<x>``
(minimum over the rates where an operator produced something; each rate the median of ``--reps`` runs, default 3:
a wall-clock run is noisy on a shared machine).  ``--base compiled``: ``rho`` is a share of
CompiledSHJ's exact need instead (3-8x smaller), so the compiled peer is
overloaded as much as the Python one is by default.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import bench_promising as bp  # noqa: E402

from sketchql.approx import TimeBudget, WorkBudget, evaluate_join, replay  # noqa: E402
from sketchql.data import generate_stores, interleave  # noqa: E402
from sketchql.operators.promising import PTJoin, SimpleSHJ  # noqa: E402
from sketchql.operators.promising.shj_compiled import CompiledSHJ  # noqa: E402


def cshj_need_seconds(arr, window) -> float:
    """Real seconds the exact CompiledSHJ needs for ``arr`` (kernels loaded first)."""
    op = CompiledSHJ(window=window, name="cshj_exact")
    op.set_wall_clock(True)
    t0 = time.perf_counter()
    replay(arr, {"c": op}, WorkBudget.unlimited(), tick_seconds=bp.TICK)
    return time.perf_counter() - t0


def run_wall3(lam, window, duration, rho, seed=1, base="shj"):
    """bench_promising.run_join_wall with a third operator, CompiledSHJ;
    ``base="compiled"``: the budget is ``rho`` times CompiledSHJ's exact need."""
    arr = interleave(generate_stores(2, duration=duration, mean_interarrival=lam, seed=seed))
    need = bp.shj_need_seconds(arr, window)
    cneed = cshj_need_seconds(arr, window)
    fraction = rho * (cneed if base == "compiled" else need) / max(float(arr.ts[-1] - arr.ts[0]), 1e-9)
    ops = {"pt": PTJoin(window=window, preference="desc", fade=bp.FADE, name="desc", seed=seed, demand_shed=True,
                        source_options={"config": bp.wall_index_config(seed), "depth": bp.WALL_DEPTH}),
           "shj": SimpleSHJ(window=window, max_backlog=fraction * bp.TICK, name="shj"),
           "cshj": CompiledSHJ(window=window, max_backlog=fraction * bp.TICK, name="cshj")}
    t0 = time.perf_counter()
    replay(arr, ops, TimeBudget(fraction=fraction, wall_clock=True), tick_seconds=bp.TICK)
    dt = time.perf_counter() - t0
    res = {k: evaluate_join(arr, window, *op.pairs()) for k, op in ops.items()}
    for k, op in ops.items():
        if res[k]["invalid"] or res[k]["duplicates"]:
            raise AssertionError(f"{k}: invalid/duplicate join output (wall clock)")
        res[k]["stats"] = op.stats()
    res.update(_need=need, _cneed=cneed, _fraction=fraction, _seconds=dt,
               _cpu=fraction * float(arr.ts[-1] - arr.ts[0]))
    return res


def _ratio(num: float, den: float) -> float:
    """``num / den`` output ratio; ``nan`` when both produced nothing (no comparison), ``inf`` when only
    the denominator did not."""
    if den > 0:
        return num / den
    return math.inf if num > 0 else math.nan


def _nanmin(xs) -> float:
    xs = [x for x in xs if x == x]
    return min(xs) if xs else math.nan


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="30 s streams, rates 10/20/50/100 ms (< 1 minute)")
    ap.add_argument("--rho", type=float, default=0.5, help="CPU share, of the exact Python SIMPLE-SHJ's need")
    ap.add_argument("--reps", type=int, default=3, help="runs per rate (the table shows column medians)")
    ap.add_argument("--base", choices=["shj", "compiled"], default="shj",
                    help="the need rho is a share of: the Python SIMPLE-SHJ's (default, bench_promising's "
                         "budget) or CompiledSHJ's (overloads the compiled peer too)")
    args = ap.parse_args(argv)
    rates = [10, 20, 50, 100]
    duration = 30.0 if args.quick else 180.0
    rows = []
    reps = []
    for ms in rates:
        runs = []
        for rep in range(args.reps):
            r = run_wall3(ms / 1000.0, 60.0, duration, args.rho, base=args.base)
            c = r["cshj"]["stats"]
            runs.append([r["_need"], r["_cneed"], r["_cpu"], r["pt"]["n_exact"], r["shj"]["pct_output"],
                         r["cshj"]["pct_output"], r["pt"]["pct_output"],
                         100.0 * c["processed"] / max(c["tuples_in"], 1), c["charged_seconds"],
                         c["model_seconds"], r["_seconds"]])
        reps.append((ms, [(_ratio(x[6], x[4]), _ratio(x[6], x[5])) for x in runs]))
        m = np.median(np.array(runs), axis=0).tolist()   # column-wise median over the repetitions
        rows.append([ms, args.rho] + m[:7] + [_ratio(m[6], m[4]), _ratio(m[6], m[5])] + m[7:])
    bp.table("Wall-clock budget -- desc PT-Join vs SIMPLE-SHJ (Python) vs CompiledSHJ, one-minute window; "
             "cpu_s = rho * shj_need_s (the Python SHJ's exact need) for every operator; cshj_need_s = the "
             "compiled SHJ's exact need (--base compiled: cpu_s = rho * cshj_need_s); cshj_proc% = its processed arrivals; cshj_chg_s / cshj_model_s = real "
             "seconds charged to it / the kernel's modelled seconds; every column the median of --reps runs, ratios "
             "of the median outputs",
             ["ms", "rho", "shj_need_s", "cshj_need_s", "cpu_s", "exact", "shj%", "cshj%", "desc%", "desc/shj",
              "desc/cshj", "cshj_proc%", "cshj_chg_s", "cshj_model_s", "sec"], rows)
    print("# per repetition desc/SHJ, desc/CompiledSHJ: "
          + " ".join(f"{ms:g}ms=" + ",".join(f"{a:.2f}/{b:.2f}" for a, b in rr) for ms, rr in reps))
    try:
        load = " load_avg_1m=%.2f" % os.getloadavg()[0]
    except OSError:   # pragma: no cover
        load = ""
    print(f"# wall-clock desc/SHJ and desc/CompiledSHJ (budget base {args.base}, rho {args.rho:g}): "
          + " ".join(f"{r[0]:g}ms={r[9]:.3f}/{r[10]:.3f}" for r in rows) + load)
    print(f"desc_wallclock_ratio_vs_shj_min={_nanmin([r[9] for r in rows]):.3f} "
          f"desc_wallclock_ratio_vs_compiled_shj_min={_nanmin([r[10] for r in rows]):.3f}")
    return rows


if __name__ == "__main__":
    main()
