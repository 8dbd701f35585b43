"""``sketchql serve``: run the service (uvicorn, one process, embedded demo by default, durable).

    sketchql serve [--host 127.0.0.1] [--port 8000] [--data-dir .sketchql-data | --in-memory] [--fresh]
                   [--token T ...] [--tokens-file F] [--public-read] [--insecure]
                   [--summary-root DIR ...] [--max-time-jump S] [--body-read-timeout S] [--result-buffer-rows N]
                   [--checkpoint-every-tuples N] [--checkpoint-interval S]
                   [--checkpoint-replay-s S]
                   [--no-demo] [--seed 7] [--demo-speed 10] [--demo-tuples 200000] [--log-level info]

State lives in ``--data-dir`` (default ``$SKETCHQL_DATA_DIR`` or
``.sketchql-data`` in the working directory): a restart, even after ``kill -9``,
continues where the last acknowledged request left it; ``--fresh`` wipes it
first, ``--in-memory`` keeps nothing.  Without tokens the server refuses to
listen on a non-loopback address unless ``--insecure`` (then it warns loudly).
FastAPI and uvicorn are imported only when the command runs.
"""
from __future__ import annotations

import ipaddress
import os
import sys

DEFAULT_DATA_DIR = ".sketchql-data"


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1).

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0"), is_loopback("::1")
    (True, True, False, True)
    """
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _cmd_serve(args) -> int:
    try:
        import uvicorn
    except ImportError:
        print("sketchql serve: needs the service extras (pip install 'sketchql[service]')", file=sys.stderr)
        return 2
    from .app import create_app
    from .auth import Auth, TokenConfigError, load_tokens
    from . import gcpolicy
    from .durability import DataDirError
    from .limits import Limits

    def fail(msg):
        print(f"sketchql serve: {msg}", file=sys.stderr)
        return 2

    if not 0 <= args.port <= 65535:
        return fail(f"--port must be 0..65535, got {args.port}")
    if not args.demo_speed > 0 or args.demo_tuples < 2:
        return fail("--demo-speed must be > 0 and --demo-tuples >= 2")
    if args.result_buffer_rows < 1:
        return fail(f"--result-buffer-rows must be >= 1, got {args.result_buffer_rows}")
    if args.body_read_timeout is not None and not args.body_read_timeout > 0:
        return fail(f"--body-read-timeout must be > 0 seconds (or 'none'), got {args.body_read_timeout}")
    if args.max_time_jump is not None and not args.max_time_jump > 0:
        return fail(f"--max-time-jump must be > 0 seconds (or 'none'), got {args.max_time_jump}")
    try:
        tokens = load_tokens(args.tokens_file, admin_tokens=args.token or ())
    except TokenConfigError as exc:
        return fail(str(exc))
    auth = Auth(tokens, public_read=args.public_read) if tokens else None
    if not tokens and not is_loopback(args.host):
        if not args.insecure:
            return fail(f"refusing to listen on {args.host} (not a loopback address) without authentication: "
                        f"configure tokens (--token, --tokens-file or SKETCHQL_TOKENS), or pass --insecure "
                        f"to accept that anyone who reaches the port can change and delete everything")
        bar = "!" * 78
        print(f"{bar}\nWARNING: sketchql serve is listening on {args.host} WITHOUT AUTHENTICATION (--insecure).\n"
              f"Anyone who can reach port {args.port} can create and drop streams, push data and delete queries.\n"
              f"{bar}", file=sys.stderr, flush=True)
    data_dir = None if args.in_memory else (args.data_dir or os.environ.get("SKETCHQL_DATA_DIR") or DEFAULT_DATA_DIR)
    roots = tuple(os.path.abspath(r) for r in (args.summary_root or ())) or None
    if not args.max_sequence_wait > 0:
        return fail(f"--max-sequence-wait must be > 0 seconds, got {args.max_sequence_wait}")
    for flag, v in (("--producer-window", args.producer_window), ("--max-producers", args.max_producers),
                    ("--max-batches-per-request", args.max_batches_per_request),
                    ("--max-forgotten-producers", args.max_forgotten_producers),
                    ("--max-summaries", args.max_summaries), ("--max-header-bytes", args.max_header_bytes),
                    ("--max-connections", args.max_connections), ("--max-sse-clients", args.max_sse_clients)):
        if v < 1:
            return fail(f"{flag} must be >= 1, got {v}")
    if args.header_read_timeout is not None and not args.header_read_timeout > 0:
        return fail(f"--header-read-timeout must be > 0 seconds (or 'none'), got {args.header_read_timeout}")
    limits = Limits(max_retained_rows=args.result_buffer_rows, max_time_jump=args.max_time_jump,
                    summary_roots=roots, max_sequence_wait_s=args.max_sequence_wait,
                    producer_window=args.producer_window, max_producers=args.max_producers,
                    max_forgotten_producers=args.max_forgotten_producers,
                    max_batches_per_request=args.max_batches_per_request,
                    body_read_timeout_s=args.body_read_timeout, max_summaries=args.max_summaries,
                    max_header_bytes=args.max_header_bytes, header_read_timeout_s=args.header_read_timeout,
                    max_connections=args.max_connections, max_sse_clients=args.max_sse_clients)
    opts = {"speed": args.demo_speed, "max_tuples": args.demo_tuples}
    if not 0 <= args.heap_reserve_mb <= 48:
        return fail(f"--heap-reserve-mb must be 0..48, got {args.heap_reserve_mb}")
    if args.heap_reserve_mb > 0:
        # before any thread allocates: the apply thread's reserve must live in the main arena (engine.heap)
        from ..engine.heap import one_arena
        one_arena()
    try:
        app = create_app(demo=not args.no_demo, limits=limits, seed=args.seed, demo_options=opts,
                         data_dir=data_dir, fresh=args.fresh, auth=auth,
                         checkpoint_every_tuples=args.checkpoint_every_tuples,
                         checkpoint_interval_s=args.checkpoint_interval,
                         checkpoint_max_replay_s=args.checkpoint_replay_s, heap_reserve_mb=args.heap_reserve_mb)
    except DataDirError as exc:
        return fail(str(exc))
    where = f"http://{args.host}:{args.port}"
    demo = "with the demo streams Store1/Store2 (try GET /queries/1/results)" if not args.no_demo else "no demo"
    keep = f"state in {os.path.abspath(data_dir)}" if data_dir else "in memory: nothing survives a restart"
    sec = f"{len(tokens)} token(s)" if tokens else "no authentication"
    print(f"sketchql serve: {where}  ({demo}; {keep}; {sec}); Ctrl-C stops", file=sys.stderr, flush=True)
    # a push is a long GIL-holding computation; a shorter switch interval (default 5 ms) lets result
    # reads and SSE on the event loop in sooner while one runs (measured in benchmarks/bench_service.py)
    sys.setswitchinterval(args.switch_interval)
    # full collections stalled every thread for 20-100 ms (the p99 of result reads): see gcpolicy
    gcpolicy.install()
    try:                         # bounded request heads (431, 408) on uvicorn's httptools parser (not h11)
        from .httpproto import protocol_class
        http = protocol_class(limits.max_header_bytes, limits.header_read_timeout_s)
    except ImportError:          # pragma: no cover (httptools missing)
        http = "auto"
        print("sketchql serve: httptools is not installed: request headers are not bounded "
              "(--max-header-bytes, --header-read-timeout)", file=sys.stderr, flush=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, access_log=args.access_log,
                http=http, limit_concurrency=limits.max_connections)
    return 0


def _seconds_or_none(text: str):
    """A seconds flag's value; 'none' / 'off' / 'inf': no bound."""
    if text.lower() in ("none", "off", "inf"):
        return None
    return float(text)


def register(subparsers) -> None:
    p = subparsers.add_parser("serve", help="run the HTTP service (embedded default with a demo stream)",
                              description="Run the sketchql HTTP service in one process. By default it "
                                          "creates the demo streams Store1/Store2, summaries s1/s2 and demo "
                                          "queries, feeds generated data in the background, and keeps its "
                                          "state in a data directory across restarts.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    p.add_argument("--data-dir", default=None,
                   help=f"directory of the durable state (default $SKETCHQL_DATA_DIR or {DEFAULT_DATA_DIR})")
    p.add_argument("--in-memory", action="store_true", help="keep no state on disk (nothing survives a restart)")
    p.add_argument("--fresh", action="store_true", help="wipe the data directory's state first and start empty")
    p.add_argument("--token", action="append", metavar="TOKEN",
                   help="an admin bearer token (repeatable); see also --tokens-file and SKETCHQL_TOKENS")
    p.add_argument("--tokens-file", metavar="FILE", help="file of '<role> <token>' lines (roles: read, admin)")
    p.add_argument("--public-read", action="store_true", help="with tokens: let reads through without one")
    p.add_argument("--insecure", action="store_true",
                   help="allow a non-loopback --host without tokens (prints a warning)")
    p.add_argument("--summary-root", action="append", metavar="DIR",
                   help="directory POST /summaries/load may read below (repeatable; none: loading is off)")
    p.add_argument("--max-time-jump", type=_seconds_or_none, default=86_400.0, metavar="SECONDS",
                   help="refuse tuples more than this far ahead of their stream's clock (default 86400; 'none')")
    p.add_argument("--body-read-timeout", type=_seconds_or_none, default=30.0, metavar="SECONDS",
                   help="answer 408 and close the connection when a request body stalls this long with no "
                        "bytes arriving (default 30; 'none')")
    p.add_argument("--max-sequence-wait", type=float, default=10.0, metavar="SECONDS",
                   help="pipelined ingest: how long a producer's batch waits for the ones before it before a 409 "
                        "sequence_gap (default 10)")
    p.add_argument("--producer-window", type=int, default=64, metavar="N",
                   help="pipelined ingest: how far ahead of its producer's next expected number a batch may be "
                        "(further: 409 at once; default 64)")
    p.add_argument("--max-producers", type=int, default=10_000, metavar="N",
                   help="pipelined ingest: producer ids remembered; past it the least recently used idle one is "
                        "forgotten (default 10000)")
    p.add_argument("--max-forgotten-producers", type=int, default=100_000, metavar="N",
                   help="pipelined ingest: forgotten producer ids remembered (their batches: 409 unknown_producer; "
                        "default 100000)")
    p.add_argument("--max-summaries", type=int, default=16, metavar="N",
                   help="summaries, CREATE SUMMARY and /summaries/load together (default 16); the engine's "
                        "own _auto_<stream>_<col> indexes for PREFERENCE joins are not counted: one per "
                        "(stream, column) such queries need, more only for windows longer than their history "
                        "(see README)")
    p.add_argument("--max-header-bytes", type=int, default=65_536, metavar="BYTES",
                   help="bytes of a request's URL and headers (431 past it; default 65536)")
    p.add_argument("--header-read-timeout", type=_seconds_or_none, default=10.0, metavar="SECONDS",
                   help="close a connection whose request headers take longer than this (default 10; 'none')")
    p.add_argument("--max-connections", type=int, default=1_024, metavar="N",
                   help="concurrent connections + requests in flight (503 past it; default 1024)")
    p.add_argument("--max-sse-clients", type=int, default=256, metavar="N",
                   help="concurrent SSE subscribers over all queries (503 past it; default 256)")
    p.add_argument("--max-batches-per-request", type=int, default=64, metavar="N",
                   help="record batches of one X-Arrow-Batches: each request (default 64)")
    p.add_argument("--result-buffer-rows", type=int, default=200_000,
                   help="result rows kept per query for cursor reads and SSE (default 200000)")
    p.add_argument("--checkpoint-every-tuples", type=int, default=1_000_000,
                   help="checkpoint after this many logged tuples (default 1000000)")
    p.add_argument("--checkpoint-interval", type=float, default=60.0,
                   help="or after this many seconds with anything logged (default 60)")
    p.add_argument("--checkpoint-replay-s", type=float, default=2.0, metavar="SECONDS",
                   help="or once replaying the log since the last checkpoint would take about this long "
                        "(engine time spent on it; default 2, 0: off)")
    p.add_argument("--no-demo", action="store_true", help="start empty: no demo streams, queries or feeder")
    p.add_argument("--seed", type=int, default=7, help="seed of the engine and the demo data")
    p.add_argument("--demo-speed", type=float, default=10.0,
                   help="seconds of demo event time fed per second of wall time (default 10)")
    p.add_argument("--demo-tuples", type=int, default=200_000,
                   help="total demo tuples; the feeder stops after them (default 200000)")
    p.add_argument("--heap-reserve-mb", type=float, default=48.0, metavar="MB",
                   help="heap the apply thread keeps pre-touched while idle, so that the next batches' new "
                        "engine state is not page-faulted in on the ingest path (0: off; at most 48; default 48)")
    p.add_argument("--switch-interval", type=float, default=0.001,
                   help="Python's thread switch interval in seconds while serving (default 0.001; Python's is 0.005)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.add_argument("--access-log", action="store_true", help="log every request")
    p.set_defaults(func=_cmd_serve)
