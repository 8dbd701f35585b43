"""CLI: ``sketchql spark-build`` and ``sketchql load-summary``.

    sketchql spark-build --input events/ --format parquet \\
        --summary "CREATE SUMMARY s1 ON events (item) WITH GRANULARITY 10 SECONDS AND COLLAPSE(2, 4)" \\
        --timestamp-col ts --out summaries/ [--master local[2]]
    sketchql load-summary summaries/ --estimate 42 [--from 0 --to 100]

pyspark is imported inside the command functions only, so ``sketchql --help``
stays fast and works without Java.  Errors (missing column, non-numeric
timestamps, unreadable input, bad declaration) print one clear line and exit 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from ..errors import SketchQLError


def _err(cmd: str, msg: str) -> int:
    print(f"sketchql {cmd}: error: {msg}", file=sys.stderr)
    return 2


def _parse_conf(items) -> dict:
    conf = {}
    for item in items or []:
        if "=" not in item:
            raise SketchQLError(f"--conf expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        conf[k.strip()] = v.strip()
    return conf


def _spark_error_line(exc: Exception) -> str:
    """One readable line out of a (possibly Java) Spark exception."""
    text = str(exc).strip()
    causes = [ln.split("Caused by:", 1)[1].strip() for ln in text.splitlines() if "Caused by:" in ln]
    line = causes[-1] if causes else (text.splitlines()[0] if text else type(exc).__name__)
    line = line.replace("java.lang.RuntimeException: ", "").replace("org.apache.spark.SparkException: ", "")
    return line[:400]


def _read_input(spark, paths, fmt: str):
    reader = spark.read
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", "true")
    return getattr(reader, fmt)(*paths)


def _cmd_spark_build(args) -> int:
    from .declaration import parse_summary_declaration

    try:
        spec = parse_summary_declaration(args.summary)
    except SketchQLError as exc:
        return _err("spark-build", f"--summary: {exc}")
    for p in args.input:
        if "://" not in p and not os.path.exists(p):
            return _err("spark-build", f"input path {p!r} does not exist")
        if "://" not in p and not os.access(p, os.R_OK):
            return _err("spark-build", f"input path {p!r} is not readable")
    try:
        conf = _parse_conf(args.conf)
    except SketchQLError as exc:
        return _err("spark-build", str(exc))

    from .build import CountSketchJob, build
    from .config import spark_session
    from .progress import SparkProgress

    # the job first: bad sketch/index parameters fail before a JVM starts
    if not args.sketch_only and not args.timestamp_col:
        return _err("spark-build", "--timestamp-col is required to build the index "
                                   "(or pass --sketch-only for a plain count sketch)")
    try:
        if args.sketch_only:
            job = CountSketchJob(spec.attr, 5 if args.d is None else args.d, 4096 if args.w is None else args.w,
                                 0 if args.seed is None else args.seed, name=spec.name,
                                 preaggregate=args.preaggregate, engine=args.engine)
        else:
            from .index_job import IndexJob

            job = IndexJob(spec, args.timestamp_col, row_id_col=args.row_id_col, structure=args.structure,
                           d=args.d, w=args.w, seed=args.seed, n_buckets=args.buckets, engine=args.engine)
    except SketchQLError as exc:
        return _err("spark-build", str(exc))

    spark = None
    if args.keep_session:  # reuse a caller's session (tests, notebooks) and leave it running
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
    if spark is None:
        spark = spark_session(args.master, app_name=f"sketchql-build-{spec.name}", conf=conf,
                              ship=False if args.no_ship else None)
    try:
        try:
            df = _read_input(spark, args.input, args.format)
        except Exception as exc:  # AnalysisException, or a Java error while inferring the schema
            return _err("spark-build", f"cannot read {args.format} input {args.input}: {_spark_error_line(exc)}")
        if args.partitions:
            df = df.repartition(args.partitions)
        try:
            job.prepare(df)  # schema errors before any task runs
            with SparkProgress(spark, f"spark-build {spec.name}", enabled=not args.no_progress):
                res = build(df, job, args.tree_depth)
            res.meta["declaration"] = spec.to_dict()
            res.meta["input"] = list(args.input)
            name = res.save(args.out, spec.name)
        except SketchQLError as exc:
            return _err("spark-build", str(exc))
        except Exception as exc:  # a Spark/Java failure while reading or building
            return _err("spark-build", f"Spark failed on {args.format} input {args.input}: {_spark_error_line(exc)}")
        stats = res.stats()
        print(f"built {job.kind} {name!r}: {stats['rows']} rows, {stats['null_keys']} null keys skipped"
              + (f", {stats['null_ts']} null timestamps skipped" if stats.get("null_ts") else "")
              + f", {res.partitions} partitions"
              + f", {res.engine} engine"
              + (f", {job.last_pruned} rows older than the declared history skipped in the JVM"
                 if getattr(job, "last_pruned", 0) else "") + f" -> {args.out}")
        return 0
    finally:
        if not args.keep_session:
            spark.stop()


def _value(text: str):
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _cmd_load_summary(args) -> int:
    from .load import read_summary

    try:
        loaded = read_summary(args.path, args.name)
    except SketchQLError as exc:
        return _err("load-summary", str(exc))
    obj, meta = loaded.summary, loaded.meta
    show = {k: v for k, v in meta.items() if k not in ("declaration",)}
    if isinstance(meta.get("declaration"), dict):
        show["declaration"] = meta["declaration"].get("text") or meta["declaration"]
    if args.json and not args.estimate:
        print(json.dumps(show, indent=1, sort_keys=True, default=str))
    elif not args.json:
        print(f"summary {meta.get('name')!r} ({meta.get('kind')}) from {loaded.source}")
        for k in sorted(show):
            print(f"  {k}: {show[k]}")
        print(f"  object: {obj!r}")
        for k, v in _object_stats(obj).items():
            print(f"  {k}: {v}")
    if args.estimate:
        values = [_value(v) for v in args.estimate]
        try:
            rows = estimate(obj, values, args.time_from, args.time_to)
        except SketchQLError as exc:
            return _err("load-summary", str(exc))
        if args.json:
            print(json.dumps(rows))
        else:
            for r in rows:
                print(f"estimate({r['value']!r}) = {r['estimate']}" + (f"  +/- {r['bound']:.1f} (95%)"
                                                                    if r.get("bound") is not None else ""))
    return 0


def _object_stats(obj) -> dict:
    from ..summaries import CountSketch

    if isinstance(obj, CountSketch):
        return {"sketch": f"d={obj.d} w={obj.w} seed={obj.seed} total={obj.total} nbytes={obj.nbytes}",
                "error_bound_95": round(obj.error_bound(0.95), 3)}
    if hasattr(obj, "stats"):
        st = obj.stats()
        return {"index": f"structure={st.get('structure')} zones={st.get('zones')} cells={st.get('cells')} "
                         f"tuples={st.get('tuples')} nbytes={st.get('nbytes')} clock={st.get('clock')}"}
    return {}


def estimate(obj, values, t_from=None, t_to=None) -> list[dict]:
    """Frequency estimates of ``values`` from a loaded summary (optionally in (t_from, t_to])."""
    import numpy as np

    from ..summaries import CountSketch

    if isinstance(obj, CountSketch):
        if t_from is not None or t_to is not None:
            raise SketchQLError("--from/--to need an index summary; a plain count sketch has no time")
        bound = obj.error_bound(0.95)
        # one value at a time: a mix of numbers and strings must not become all strings
        return [{"value": v, "estimate": int(obj.estimate(np.asarray([v]))[0]), "bound": bound} for v in values]
    from .index_job import index_estimate

    return index_estimate(obj, values, t_from, t_to)


def register(subparsers) -> None:
    b = subparsers.add_parser(
        "spark-build", help="build a summary from files with Spark (per partition, merged)",
        description="Build the index of a CREATE SUMMARY declaration (or, with --sketch-only, a count "
                    "sketch of its attribute) from Parquet/CSV/JSON input with Spark, and publish it "
                    "into a summary store directory.")
    b.add_argument("--input", required=True, nargs="+", help="input path(s) or URI(s) Spark can read")
    b.add_argument("--format", default="parquet", choices=["parquet", "csv", "json", "orc"])
    b.add_argument("--summary", required=True, help='"CREATE SUMMARY s ON stream (attr) WITH GRANULARITY '
                                                    '10 SECONDS AND COLLAPSE(2, 4)"')
    b.add_argument("--out", required=True, help="summary store: directory (or URI with fsspec)")
    b.add_argument("--master", default=None, help="Spark master (default local[*]; spark://host:7077, yarn)")
    b.add_argument("--timestamp-col", default=None, help="event-time column (numeric seconds or TIMESTAMP)")
    b.add_argument("--row-id-col", default=None, help="row id column for the index (default: generated)")
    b.add_argument("--sketch-only", action="store_true", help="build only a count sketch of the attribute")
    b.add_argument("--d", type=int, default=None, help="count sketch depth (default 5)")
    b.add_argument("--w", type=int, default=None,
                   help="count sketch width (default 4096 with --sketch-only, else the index's per-cell width)")
    b.add_argument("--seed", type=int, default=None, help="hash seed (default 0)")
    b.add_argument("--buckets", type=int, default=None, help="index value buckets (IndexConfig.n_buckets)")
    b.add_argument("--structure", default="T3", choices=["T1", "T2", "T3", "T4"],
                   help="index structure (default T3: fixed zones, exact merge)")
    b.add_argument("--preaggregate", action="store_true",
                   help="with --sketch-only: count keys in Spark first, sketch (key, count) pairs (same bytes)")
    b.add_argument("--engine", default="auto", choices=["auto", "jvm", "arrow"],
                   help="jvm = hash (--sketch-only) or select the rows to ingest (index) in the executors "
                        "(jar on the classpath), arrow = mapInArrow + numpy per partition, auto (default) = "
                        "jvm when possible (same bytes either way)")
    b.add_argument("--partitions", type=int, default=0, help="repartition the input first (0: keep)")
    b.add_argument("--tree-depth", type=int, default=2, help="depth of the merge tree")
    b.add_argument("--conf", action="append", help="extra Spark setting key=value (repeatable)")
    b.add_argument("--no-progress", action="store_true")
    b.add_argument("--no-ship", action="store_true", help="do not ship sketchql to a cluster's executors")
    b.add_argument("--keep-session", action="store_true", help=argparse.SUPPRESS)
    b.set_defaults(func=_cmd_spark_build)

    ld = subparsers.add_parser("load-summary", help="print a Spark-built summary's stats and estimates",
                               description="Load a summary store (or a .sqs file) and print its stats; "
                                           "--estimate answers frequency estimates.")
    ld.add_argument("path", help="summary store directory/URI or .sqs file")
    ld.add_argument("--name", default=None, help="summary name when the store holds several")
    ld.add_argument("--estimate", nargs="+", metavar="VALUE", help="value(s) to estimate")
    ld.add_argument("--from", dest="time_from", type=float, default=None, help="time range start (exclusive)")
    ld.add_argument("--to", dest="time_to", type=float, default=None, help="time range end (inclusive)")
    ld.add_argument("--json", action="store_true", help="machine-readable output")
    ld.set_defaults(func=_cmd_load_summary)
