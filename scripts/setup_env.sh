#!/usr/bin/env bash
# Create ./.venv and install the project with its `pyspark` extra and its `test` dependency group at the
# pinned, tested versions of constraints.txt; check Java 17; install PostgreSQL, Chromium and docker-compose
# (end-to-end tests) when missing - unless AIRFLOW_STREAMING_SETUP_TEST_PACKAGES=0 (demo.sh: the demo needs none).
# Sourced by demo.sh and test.sh (idempotent: re-installs only when pyproject.toml or constraints.txt changed).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$REPO/.venv"

java_bin="${JAVA_HOME:+$JAVA_HOME/bin/}java"
if ! command -v "$java_bin" >/dev/null 2>&1; then
  echo "ERROR: Java 17 is required by Spark and was not found (no '$java_bin')." >&2
  echo "       Install it: sudo apt-get install -y openjdk-17-jre-headless   (or set JAVA_HOME)" >&2
  exit 1
fi
java_version="$("$java_bin" -version 2>&1 | sed -n 's/.*version "\([0-9][0-9._]*\).*/\1/p' | head -n1)"
case "$java_version" in 1.*) java_major="$(echo "$java_version" | cut -d. -f2)" ;; *) java_major="${java_version%%.*}" ;; esac
if [ -z "$java_major" ] || [ "$java_major" -lt 17 ]; then
  echo "ERROR: Spark 4 needs Java 17 or newer; '$java_bin' is version '${java_version:-unknown}'." >&2
  echo "       Install it: sudo apt-get install -y openjdk-17-jre-headless   (or set JAVA_HOME)" >&2
  exit 1
fi

# System packages of the end-to-end tests: PostgreSQL (the real-Airflow stack, tests/airflow_stack.py),
# Chromium (the UI test drives it headless) and docker-compose (v1: validates docker-compose.yaml without a
# Docker engine). Installed once, when missing and possible (root or passwordless sudo); otherwise the
# PostgreSQL/Chromium tests are skipped with the reason and the compose-file test fails.
need=()
if [ "${AIRFLOW_STREAMING_SETUP_TEST_PACKAGES:-1}" != 0 ]; then
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || need+=(chromium)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
fi
if [ "${#need[@]}" -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="$(command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null && echo sudo || true)"
  if command -v apt-get >/dev/null 2>&1 && { [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; }; then
    echo "installing ${need[*]} for the end-to-end tests (apt-get) ..." >&2
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}"; } >&2 \
      || echo "WARNING: could not install ${need[*]}: the tests that need them will be skipped" >&2
  else
    echo "NOTE: ${need[*]} not installed and no apt-get/root: the tests that need them will be skipped" \
         "(install: sudo apt-get install -y ${need[*]})" >&2
  fi
fi

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "ERROR: Python 3.11+ is required ($PY is $("$PY" -V 2>&1))." >&2
  exit 1
fi

# What is installed: the project (editable) with its `pyspark` extra (full PySpark: spark-submit and Spark's
# jars, which the tests start) and the `test` dependency group (PEP 735, not published with the package),
# at the versions of constraints.txt. `--group` needs uv 0.6.7+ or pip 25.1+; an older uv is not used, and
# the venv's own pip is upgraded first when older. AIRFLOW_STREAMING_SETUP_WITH=pip takes the pip path.
stamp="$VENV/.installed-$(cat "$REPO/pyproject.toml" "$REPO/constraints.txt" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setting up $VENV (first run takes a few minutes: Airflow + PySpark) ..." >&2
  if ! command -v uv >/dev/null 2>&1 && [ "${AIRFLOW_STREAMING_SETUP_WITH:-uv}" != pip ]; then
    "$PY" -m pip install --quiet --disable-pip-version-check uv >&2 || true
  fi
  UV=""
  if [ "${AIRFLOW_STREAMING_SETUP_WITH:-uv}" = pip ]; then
    :
  elif command -v uv >/dev/null 2>&1 || "$PY" -m uv --version >/dev/null 2>&1; then
    UV="$(command -v uv || echo "$PY -m uv")"
    if ! $UV pip install --help 2>/dev/null | grep -q -- '--group'; then
      echo "NOTE: $($UV --version) has no 'uv pip install --group' (uv 0.6.7+): installing with pip" >&2
      UV=""
    fi
  fi
  if [ -n "$UV" ]; then
    [ -x "$VENV/bin/python" ] || $UV venv --quiet --python "$PY" "$VENV" >&2
    $UV pip install --quiet --python "$VENV/bin/python" -c "$REPO/constraints.txt" \
      -e "$REPO[pyspark]" --group "$REPO/pyproject.toml:test" >&2
    # pyspark ships only an sdist, and uv keeps each new build of it (~1 GB) as a cache revision: prune.
    $UV cache prune --quiet >&2 || true
  else
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "pip>=25.1" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -c "$REPO/constraints.txt" \
      -e "$REPO[pyspark]" --group "$REPO/pyproject.toml:test" >&2
  fi
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi

[ "${AIRFLOW_STREAMING_SETUP_TEST_PACKAGES:-1}" = 0 ] || command -v docker-compose >/dev/null 2>&1 \
  || echo "WARNING: docker-compose is missing (sudo apt-get install -y docker-compose): its test will fail" >&2

export PATH="$VENV/bin:$PATH"
export PYSPARK_PYTHON="$VENV/bin/python"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
