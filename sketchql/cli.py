"""Command line: ``sketchql serve | query | replay | spark-build | bench``.

Each sub-command lives in the room that implements it; this module only parses
arguments and dispatches (imports are lazy so ``--help`` stays fast).
"""
from __future__ import annotations

import argparse
import importlib
import sys

# Each room adds its own sub-commands: a module with ``register(subparsers)``
# that imports its heavy dependencies lazily (inside the command function).
_COMMAND_MODULES = [
    "sketchql.query_commands",       # query, explain (sits on the engine)
    "sketchql.operators.commands",   # replay
    "sketchql.spark.commands",       # spark-build, load-summary
    "sketchql.approx.commands",      # bench helpers
    "sketchql.service.commands",     # serve
]


def _cmd_demo(args) -> int:
    """Ingest a generated Zipf stream and print sketch estimates beside exact counts."""
    import numpy as np

    from .summaries import CountSketch

    rng = np.random.default_rng(args.seed)
    keys = rng.zipf(1.3, args.tuples) % 100_000
    cs = CountSketch(d=5, w=4096, seed=args.seed)
    for start in range(0, len(keys), 100_000):
        cs.update(keys[start:start + 100_000])
    exact = np.bincount(keys)
    top = np.argsort(-exact)[:10]
    est = cs.estimate(top)
    bound = cs.error_bound(0.95)
    print(f"demo stream: {args.tuples} Zipf(1.3) keys, count sketch d=5 w=4096 ({cs.nbytes} bytes)")
    print(f"{'key':>8} {'exact':>10} {'estimate':>10}   (95% bound +/- {bound:.0f})")
    for k, e in zip(top, est):
        print(f"{k:>8} {exact[k]:>10} {int(e):>10}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sketchql", description="Approximate continuous queries over data streams.")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="ingest a generated stream and print estimates next to exact counts")
    d.add_argument("--tuples", type=int, default=1_000_000)
    d.add_argument("--seed", type=int, default=7)
    d.set_defaults(func=_cmd_demo)
    for modname in _COMMAND_MODULES:
        try:
            mod = importlib.import_module(modname)
        except ModuleNotFoundError as exc:
            if exc.name != modname:
                raise
            continue
        mod.register(sub)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
