#!/usr/bin/env bash
# Runs the whole suite: fast unit and oracle tests, the slow ones (real servers, long streams,
# the DuckDB oracle grid), the Spark-marked tests, then the browser-marked tests (the
# dashboard in headless chromium against a real server).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
# `pytest -q` alone runs the fast unit and oracle tests (pyproject's addopts
# deselect the marked ones); the Spark tests run second, in their own session.
.venv/bin/pytest -q "$@"
.venv/bin/pytest -q -m "slow and not spark and not browser" "$@"
.venv/bin/pytest -q -m spark -n 0 "$@"  # one SparkSession: one process
.venv/bin/pytest -q -m browser -n 0 "$@"
