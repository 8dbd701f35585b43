"""CLI sub-commands of the planner room: ``sketchql query`` and ``sketchql explain``.

``sketchql query --sql-file q.sql --input Sales=sales.csv [--input B=b.csv]
[--heartbeat Sales=100] [--snapshot]`` runs the DDL of the file, registers
its SELECT statements, pushes the CSV files (all inputs merged in timestamp
order, in chunks, so joins progress together), sends the heartbeats, and
prints each query's answer: the change stream in the query's view (columns
plus ``__sign`` and ``__at``), or with ``--snapshot`` the relation at the final
time.  A query that failed on the way (e.g. past ``max_rows_per_step``) is
marked ``FAILED`` in its header, its results stop where it failed, the
reason goes to stderr and the exit status is 1 (2: bad SQL or input).

``sketchql explain "<statements>"`` prints the plan of the last statement (a
SELECT, with or without EXPLAIN) after running the DDL statements before it
(and those of ``--sql-file``).
"""
from __future__ import annotations

import sys

__all__ = ["register"]


def _pairs(items, what):
    out = []
    for it in items or []:
        if "=" not in it:
            raise SystemExit(f"--{what} expects NAME=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out.append((k.strip(), v.strip()))
    return out


def _cmd_query(args) -> int:
    import numpy as np
    import pandas as pd

    from .engine import Engine
    from .errors import SketchQLError
    from .planner import ast as A
    from .planner.parser import parse

    eng = Engine(seed=args.seed)
    try:
        text = open(args.sql_file, encoding="utf-8").read() if args.sql_file else args.sql
        if not text:
            raise SystemExit("give --sql-file FILE or --sql 'statements'")
        queries = []
        for stmt in parse(text):
            if isinstance(stmt, A.Query):
                queries.append(eng._register(stmt, text))
            else:
                r = eng._execute_stmt(stmt, text)
                if isinstance(r, str):
                    print(r)
        frames = []
        for name, path in _pairs(args.input, "input"):
            df = pd.read_csv(path)
            rel = eng.catalog.get(name)
            if rel is None:
                raise SystemExit(f"--input {name}: no such stream or table (declare it in the SQL)")
            if rel.is_table:
                eng.push(name, df)
                continue
            frames.append((name, df, df[rel.timestamp].to_numpy(dtype=np.float64)))
        # merge all streams in time order and push in chunks
        events = []
        for k, (name, df, ts) in enumerate(frames):
            events.append(np.stack([ts, np.full(len(ts), k), np.arange(len(ts))], axis=1))
        if events:
            ev = np.concatenate(events)
            ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]
            for start in range(0, len(ev), args.chunk):
                part = ev[start:start + args.chunk]
                for k in np.unique(part[:, 1]).astype(int):
                    name, df, _ = frames[k]
                    rows = part[part[:, 1] == k][:, 2].astype(int)
                    eng.push(name, df.iloc[rows].reset_index(drop=True))
        for name, ts in _pairs(args.heartbeat, "heartbeat"):
            eng.heartbeat(name, float(ts))
        failed = 0
        for q in queries:
            print(f"-- query {q.id}: {' '.join(q.bound.query.text.split())} (view {q.view}, clock {q.clock:g})"
                  + (" FAILED" if q.failed is not None else ""))
            out = q.snapshot() if args.snapshot else q.results()
            out.to_csv(sys.stdout, index=False)
            if q.failed is not None:         # its results stop where it failed: say so, and exit 1
                print(f"error: {q.failed}", file=sys.stderr)
                failed += 1
        sys.stdout.flush()
    except SketchQLError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:                  # `sketchql query ... | head`: the reader left, not an error
        _quiet_stdout()
        return 0
    return 1 if failed else 0


def _quiet_stdout() -> None:
    """After a broken pipe, point stdout at /dev/null so the interpreter's final flush does not
    raise again (the Python docs' recipe for SIGPIPE)."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _cmd_explain(args) -> int:
    from .engine import Engine
    from .errors import SketchQLError
    from .planner import ast as A
    from .planner.explain import explain_plan
    from .planner.parser import parse

    eng = Engine()
    try:
        if args.sql_file:
            eng.execute(open(args.sql_file, encoding="utf-8").read())
        stmts = parse(args.sql)
        *ddl, last = stmts
        for s in ddl:
            eng._execute_stmt(s, args.sql)
        if isinstance(last, A.Explain):
            last = last.query
        if not isinstance(last, A.Query):
            raise SystemExit("the last statement given to explain must be a SELECT query")
        print(explain_plan(eng._plan(last)))
    except SketchQLError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def register(subparsers) -> None:
    q = subparsers.add_parser("query", help="run DDL + continuous queries over CSV inputs and print results")
    q.add_argument("--sql-file", help="file with CREATE ... statements and SELECT queries")
    q.add_argument("--sql", help="the statements inline (instead of --sql-file)")
    q.add_argument("--input", action="append", metavar="STREAM=CSV", help="CSV file for a stream or table")
    q.add_argument("--heartbeat", action="append", metavar="STREAM=TS", help="heartbeat sent after the inputs")
    q.add_argument("--snapshot", action="store_true", help="print the result relation at the end instead of changes")
    q.add_argument("--chunk", type=int, default=10_000, help="tuples per pushed batch")
    q.add_argument("--seed", type=int, default=0)
    q.set_defaults(func=_cmd_query)
    e = subparsers.add_parser("explain", help="print the plan of a query (DDL may precede it)")
    e.add_argument("sql", help="'CREATE STREAM ...; SELECT ...' (the last statement is explained)")
    e.add_argument("--sql-file", help="DDL to run first")
    e.set_defaults(func=_cmd_explain)
