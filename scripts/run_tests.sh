#!/usr/bin/env bash
# Runs the whole suite: fast unit tests, then the Spark-marked tests.
set -euo pipefail
cd "$(dirname "$0")/.."
export PYSPARK_PYTHON="$PWD/.venv/bin/python"
.venv/bin/pytest -q "$@"
