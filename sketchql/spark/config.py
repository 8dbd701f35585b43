"""A SparkSession that works out of the box, and how to point it at a cluster.

Defaults (:func:`spark_session`):

* ``master = local[*]`` (every core of this machine);
* ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` = ``sys.executable`` unless
  already set, so workers run the same interpreter (and the same numpy /
  sketchql) as the driver;
* Arrow on (``spark.sql.execution.arrow.pyspark.enabled``), Arrow batches of
  ``maxRecordsPerBatch`` rows into ``mapInArrow``;
* the web UI and Spark's console progress bar off (we print our own line);
* the JVM count-sketch jar (:mod:`sketchql.spark.jvm`) on the driver and
  executor classpaths (``spark.jars`` + ``spark.driver.extraClassPath``): plain
  count sketches are then hashed inside the executors, with no Python transfer.

Running on a real cluster
-------------------------
``sketchql spark-build --master spark://host:7077 ...`` (standalone) or
``--master yarn`` (with ``HADOOP_CONF_DIR`` set) or ``k8s://...``.  Then:

* every executor needs Python with numpy and pyarrow; sketchql itself is
  shipped automatically as a zip via ``SparkContext.addPyFile`` when the
  master is not ``local`` (:func:`ship_package`), or install it on the nodes
  (then pass ``--no-ship``); set ``PYSPARK_PYTHON`` to the executors'
  interpreter path if it differs from the driver's;
* inputs are any URI Spark reads (``hdfs://``, ``s3a://``, ``abfs://``...);
* outputs (``--out``, the streaming summary store) are written only by the
  driver, through :mod:`sketchql.spark.store`: a local path (must be a shared
  mount if other machines read it) or, with the ``fsspec`` package and its
  filesystem driver installed, ``s3://``, ``hdfs://``, ``gs://`` URIs.  The
  streaming checkpoint (``checkpointLocation``) must be on a fault-tolerant
  shared file system (HDFS/S3) -- that is Spark's own requirement;
* the JVM count-sketch jar is compiled on the driver (needs ``javac``; else
  plain sketches use the mapInArrow path) and shipped to the executors by
  ``spark.jars``; with ``--deploy-mode cluster`` the driver runs elsewhere, so
  put the jar (``sketchql.spark.jvm.ensure_jar()``) on shared storage and pass
  it with ``--conf spark.jars=...`` / ``spark.driver.extraClassPath``;
* useful settings: ``--conf spark.executor.memory=4g``,
  ``--conf spark.executor.cores=4``, ``--conf spark.sql.execution.arrow.maxRecordsPerBatch=65536``.
"""
from __future__ import annotations

import os
import sys
import tempfile
import zipfile

DEFAULT_MASTER = "local[*]"

DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
    "spark.python.worker.reuse": "true",
    "spark.sql.shuffle.partitions": "8",
}


def python_env() -> None:
    """Make workers use this interpreter unless the user chose one."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


def spark_session(master: str | None = None, app_name: str = "sketchql", conf: dict | None = None,
                  ship: bool | None = None, log_level: str = "ERROR", jvm_engine: bool = True):
    """Get or create a SparkSession with sketchql's defaults (see module docstring).

    ``jvm_engine``: put the JVM count-sketch jar on the classpath
    (:mod:`sketchql.spark.jvm`; compiled with ``javac`` on first use and
    cached; skipped silently when no JDK is installed).
    """
    python_env()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master or DEFAULT_MASTER).appName(app_name)
    settings = {**DEFAULT_CONF, **(conf or {})}
    if jvm_engine:  # the JVM count-sketch jar on the classpath (compiled once, cached)
        from .jvm import session_conf

        settings = session_conf(settings)
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    if ship is None:
        ship = not spark.sparkContext.master.startswith("local")
    if ship:
        ship_package(spark)
    return spark


def ship_package(spark) -> str:
    """Zip the sketchql package and add it to the executors' Python path."""
    import sketchql

    pkg_dir = os.path.dirname(os.path.abspath(sketchql.__file__))
    fd, path = tempfile.mkstemp(prefix="sketchql-", suffix=".zip")
    os.close(fd)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for root, _dirs, files in os.walk(pkg_dir):
            if "__pycache__" in root:
                continue
            for f in files:
                if f.endswith(".py"):
                    full = os.path.join(root, f)
                    zf.write(full, os.path.relpath(full, os.path.dirname(pkg_dir)))
    spark.sparkContext.addPyFile(path)
    return path
