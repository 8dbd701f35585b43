"""A SparkSession that works out of the box, and how to point it at a cluster.

Defaults (:func:`spark_session`):

* ``master = local[*]`` (every core of this machine);
* ``PYSPARK_PYTHON`` / ``PYSPARK_DRIVER_PYTHON`` = ``sys.executable`` unless
  already set, so workers run the same interpreter (and the same numpy /
  sketchql) as the driver;
* Arrow on (``spark.sql.execution.arrow.pyspark.enabled``), Arrow batches of
  ``maxRecordsPerBatch`` rows into ``mapInArrow``;
* the web UI and Spark's console progress bar off (we print our own line).

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
                  ship: bool | None = None, log_level: str = "ERROR"):
    """Get or create a SparkSession with sketchql's defaults (see module docstring)."""
    python_env()
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master or DEFAULT_MASTER).appName(app_name)
    for k, v in {**DEFAULT_CONF, **(conf or {})}.items():
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
