"""Shared fixtures.  One SparkSession per test session (local[2], no UI)."""
import os
import sys

import pytest

try:  # deterministic, no per-example deadlines (CI shares 2 cores)
    from hypothesis import HealthCheck, settings

    settings.register_profile("sketchql", deadline=None, derandomize=True, print_blob=True,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("sketchql")
except ImportError:  # pragma: no cover
    pass

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark():
    pyspark = pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    from sketchql.spark.jvm import session_conf  # the JVM count-sketch jar (compiled once, cached)

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("sketchql-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "2g")
    )
    for k, v in session_conf().items():
        builder = builder.config(k, v)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
