#!/usr/bin/env bash
# Creates .venv and installs sketchql with every extra; installs Java 17 (for
# PySpark 4.x) with apt-get when no suitable java is on the PATH.
#
# scripts/setup.sh --service: only what the HTTP server needs (`make serve`): the venv and the
# package with its service extra -- no Java, no chromium, no apt-get, no root.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}

if [ "${1:-}" = "--service" ]; then
  if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
  fi
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e ".[service]"
  echo "setup (service only): ok ($(.venv/bin/python --version))"
  exit 0
fi

need_java=1
if command -v java >/dev/null 2>&1; then
  ver=$(java -version 2>&1 | awk -F'"' '/version/ {print $2}' | cut -d. -f1)
  if [ "${ver:-0}" -ge 17 ] 2>/dev/null; then need_java=0; fi
fi
if [ "$need_java" = 1 ]; then
  echo "setup: installing Java 17 (needed by PySpark 4.x)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jre-headless
fi
if ! command -v javac >/dev/null 2>&1; then  # compiles sketchql's JVM count sketch (sketchql/spark/java)
  echo "setup: installing a JDK (javac) for the JVM count-sketch engine"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq openjdk-17-jdk-headless
fi

# the browser tests (pytest -m browser) drive Debian's chromium through playwright's Python
# package; playwright never downloads a browser of its own here
if ! command -v chromium >/dev/null 2>&1; then
  echo "setup: installing chromium (browser tests of the dashboard)"
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium
fi
export PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[spark,service,dev]"
echo "setup: ok ($(.venv/bin/python --version), java $(java -version 2>&1 | head -1))"
