"""The JVM engine for plain count sketches: hash and count inside Spark's executors.

``mapInArrow`` pays a JVM -> Arrow -> Python transfer for every row; for a
plain count sketch that transfer alone costs more than Spark's native
``count_min_sketch`` aggregate.  :class:`CountSketchJvm` (Java source shipped
in ``sketchql/spark/java/``) reproduces :mod:`sketchql.summaries.hashing` and
the :class:`~sketchql.summaries.CountSketch` row hashes bit for bit, counts
each partition's rows into a ``long[d*w]`` in a tight loop over Spark's
internal rows, and adds the partials with ``treeAggregate``.  Python receives
the summed table and builds a ``CountSketch`` from it: ``to_bytes()`` is
byte-identical to one ``update`` over all keys in one process.

The same jar holds every source of ``sketchql/spark/java/`` (also
``IndexRowsJvm``, the index build's row selection: :mod:`sketchql.spark.index_jvm`).

Key types hashed in the JVM: byte/short/int/long, boolean, float/double
(NaN skipped as null, as on the Arrow path), string and binary (FNV-1a of the
UTF-8 bytes).  Anything else (decimal, date, timestamp) falls back to the
``mapInArrow`` path when the engine is ``"auto"``.

The jar is compiled lazily with ``javac`` against pyspark's own jars (no
network, no build tool) and cached under ``$SKETCHQL_CACHE`` (default
``~/.cache/sketchql``) keyed by the source and the Spark version; it must be
on the session's classpath *when the session starts*:
:func:`sketchql.spark.config.spark_session` adds it (``spark.jars`` for the
executors, ``spark.driver.extraClassPath`` for the driver).  A session created
without it (or Spark Connect) simply uses the Arrow path in ``"auto"`` mode.

>>> # doctest: +SKIP
>>> spark = spark_session()                     # jar compiled/cached and on the classpath
>>> sk, rows, nulls, parts = build_countsketch_jvm(df, "item", d=5, w=4096, seed=0)
"""
from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile

import numpy as np

from ..summaries import CountSketch
from .partition import SparkInputError

CLASS_NAME = "sketchql.spark.CountSketchJvm"
INDEX_CLASS_NAME = "sketchql.spark.IndexRowsJvm"   # the index build's row selection (index_jvm.py)
JAVA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "java")
SOURCE = os.path.join(JAVA_DIR, "CountSketchJvm.java")


def sources() -> list[str]:
    """Every Java source compiled into the jar (sorted: stable jar key)."""
    return sorted(glob.glob(os.path.join(JAVA_DIR, "*.java")))
ENGINES = ("auto", "jvm", "arrow")
# Spark type names (type(field.dataType).__name__) hashed in the JVM
JVM_KEY_TYPES = {"ByteType", "ShortType", "IntegerType", "LongType", "BooleanType", "FloatType",
                 "DoubleType", "StringType", "BinaryType"}

_last_error: str | None = None


def last_error() -> str | None:
    """Why the last :func:`ensure_jar` returned None (no javac, compile error...)."""
    return _last_error


def spark_jars_dir() -> str | None:
    """Directory of the Spark jars to compile against ($SPARK_HOME/jars or pyspark's)."""
    home = os.environ.get("SPARK_HOME")
    if home and os.path.isdir(os.path.join(home, "jars")):
        return os.path.join(home, "jars")
    try:
        import pyspark
    except ImportError:
        return None
    d = os.path.join(os.path.dirname(os.path.abspath(pyspark.__file__)), "jars")
    return d if os.path.isdir(d) else None


def cache_dir() -> str:
    return os.environ.get("SKETCHQL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "sketchql")


def _jar_key(jars: str) -> str:
    h = hashlib.sha256()
    for src in sources():
        with open(src, "rb") as f:
            h.update(os.path.basename(src).encode() + b"\0" + f.read())
    spark_jars = sorted(os.path.basename(p) for p in glob.glob(os.path.join(jars, "spark-*.jar")))
    h.update("\n".join(spark_jars).encode())
    return h.hexdigest()[:16]


def ensure_jar(compile: bool = True) -> str | None:
    """Path of the compiled jar (compiling it once if needed), or None if impossible."""
    global _last_error
    jars = spark_jars_dir()
    if jars is None:
        _last_error = "pyspark (or $SPARK_HOME/jars) not found"
        return None
    out = os.path.join(cache_dir(), f"sketchql-jvm-{_jar_key(jars)}.jar")
    if os.path.exists(out):
        return out
    if not compile:
        _last_error = f"{out} not built yet"
        return None
    javac = shutil.which("javac")
    if javac is None and os.environ.get("JAVA_HOME"):
        cand = os.path.join(os.environ["JAVA_HOME"], "bin", "javac")
        javac = cand if os.path.exists(cand) else None
    if javac is None:
        _last_error = "javac not found (install a JDK, e.g. openjdk-17-jdk-headless)"
        return None
    try:
        return _compile(javac, jars, out)
    except OSError as exc:  # unwritable cache dir, javac vanished...
        _last_error = f"cannot build {out}: {exc}"
        return None


def _compile(javac: str, jars: str, out: str) -> str | None:
    global _last_error
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="sketchql-javac-") as tmp:
        proc = subprocess.run([javac, "-nowarn", "--release", "17", "-cp",
                               os.path.join(jars, "*"), "-d", tmp, *sources()],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            _last_error = f"javac failed: {proc.stderr.strip()[-2000:]}"
            return None
        fd, part = tempfile.mkstemp(prefix=".sketchql-jvm-", suffix=".jar", dir=os.path.dirname(out))
        os.close(fd)
        with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\nCreated-By: sketchql\n\n")
            for root, _dirs, files in os.walk(tmp):
                for f in sorted(files):
                    full = os.path.join(root, f)
                    zf.write(full, os.path.relpath(full, tmp))
        os.replace(part, out)  # atomic: concurrent builders write the same bytes
    _last_error = None
    return out


def _append(conf: dict, key: str, value: str, sep: str) -> None:
    old = conf.get(key)
    if not old:
        conf[key] = value
    elif value not in old.split(sep):
        conf[key] = old + sep + value


def session_conf(conf: dict | None = None, compile: bool = True) -> dict:
    """``conf`` plus the settings that put the jar on the driver and executor classpaths."""
    conf = dict(conf or {})
    jar = ensure_jar(compile)
    if jar is not None:
        _append(conf, "spark.jars", jar, ",")
        _append(conf, "spark.driver.extraClassPath", jar, os.pathsep)
    return conf


def _jvm_class(spark):
    """The py4j handle of CountSketchJvm, or None (not on the classpath, Spark Connect)."""
    return java_class(spark, CLASS_NAME)


def java_class(spark, name: str):
    """The py4j handle of the jar's class ``name``, or None (not on the classpath, Spark Connect)."""
    try:
        from py4j.java_gateway import JavaClass

        jvm = spark._jvm  # classic sessions only
        if jvm is None:
            return None
        cls = jvm
        for part in name.split("."):
            cls = getattr(cls, part)
        return cls if isinstance(cls, JavaClass) else None
    except Exception:
        return None


def jvm_available(spark) -> bool:
    """True when this session can run the JVM engine."""
    return _jvm_class(spark) is not None


def supports_type(df, column: str) -> bool:
    fields = {f.name: f for f in df.schema.fields}
    return column in fields and type(fields[column].dataType).__name__ in JVM_KEY_TYPES


def resolve_engine(df, column: str, engine: str, weighted: bool = False) -> str:
    """``"jvm"`` or ``"arrow"`` for this DataFrame/column; ``"jvm"`` asked but impossible raises."""
    if engine not in ENGINES:
        raise SparkInputError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "arrow":
        return "arrow"
    why = None
    if weighted:
        why = "pre-aggregated (weighted) input is sketched by the Arrow path"
    elif not supports_type(df, column):
        t = next((f.dataType.simpleString() for f in df.schema.fields if f.name == column), "?")
        why = f"key column {column!r} of type {t} is not hashed in the JVM"
    elif not jvm_available(df.sparkSession):
        why = (f"{CLASS_NAME} is not on this session's classpath (create the session with "
               "sketchql.spark.config.spark_session(), or add jvm.session_conf() settings; "
               + (last_error() or "jar available") + ")")
    if why is None:
        return "jvm"
    if engine == "jvm":
        raise SparkInputError(f"engine='jvm' unavailable: {why}")
    return "arrow"


def build_countsketch_jvm(df, column: str, d: int, w: int, seed: int, tree_depth: int = 2):
    """``(CountSketch, rows, null_keys, partitions)`` of ``df[column]`` built in the JVM."""
    cls = _jvm_class(df.sparkSession)
    if cls is None:
        raise SparkInputError(f"{CLASS_NAME} is not on this session's classpath")
    sk = CountSketch(d, w, seed)  # validates
    signed_seed = sk.seed - (1 << 64) if sk.seed >= 1 << 63 else sk.seed
    raw = bytes(cls.build(df.select(column)._jdf, sk.d, sk.w, signed_seed, max(1, int(tree_depth))))
    vals = np.frombuffer(raw, dtype="<i8")
    if len(vals) != 3 + sk.d * sk.w:
        raise SparkInputError(f"JVM count sketch returned {len(raw)} bytes, expected {8 * (3 + sk.d * sk.w)}")
    rows, nulls, parts = (int(x) for x in vals[:3])
    sk.table[...] = vals[3:].reshape(sk.d, sk.w)
    sk.total = sk.total_abs = rows
    return sk, rows, nulls, parts
