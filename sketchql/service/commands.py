"""``sketchql serve``: run the service (uvicorn, one process, embedded demo by default).

    sketchql serve [--host 127.0.0.1] [--port 8000] [--no-demo] [--seed 7]
                   [--demo-speed 10] [--demo-tuples 200000] [--log-level info]

FastAPI and uvicorn are imported only when the command runs.
"""
from __future__ import annotations

import sys


def _cmd_serve(args) -> int:
    try:
        import uvicorn
    except ImportError:
        print("sketchql serve: needs the service extras (pip install 'sketchql[service]')", file=sys.stderr)
        return 2
    from .app import create_app
    from .limits import Limits

    if not 0 <= args.port <= 65535:
        print(f"sketchql serve: --port must be 0..65535, got {args.port}", file=sys.stderr)
        return 2
    if not args.demo_speed > 0 or args.demo_tuples < 2:
        print("sketchql serve: --demo-speed must be > 0 and --demo-tuples >= 2", file=sys.stderr)
        return 2
    opts = {"speed": args.demo_speed, "max_tuples": args.demo_tuples}
    app = create_app(demo=not args.no_demo, limits=Limits(), seed=args.seed, demo_options=opts)
    where = f"http://{args.host}:{args.port}"
    demo = "with the demo streams Store1/Store2 (try GET /queries/1/results)" if not args.no_demo else "no demo"
    print(f"sketchql serve: {where}  ({demo}); Ctrl-C stops", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="run the HTTP service (embedded default with a demo stream)",
                              description="Run the sketchql HTTP service in one process. By default it "
                                          "creates the demo streams Store1/Store2, summaries s1/s2 and demo "
                                          "queries, and feeds generated data in the background.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--no-demo", action="store_true", help="start empty: no demo streams, queries or feeder")
    p.add_argument("--seed", type=int, default=7, help="seed of the engine and the demo data")
    p.add_argument("--demo-speed", type=float, default=10.0,
                   help="seconds of demo event time fed per second of wall time (default 10)")
    p.add_argument("--demo-tuples", type=int, default=200_000,
                   help="total demo tuples; the feeder stops after them (default 200000)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.set_defaults(func=_cmd_serve)
