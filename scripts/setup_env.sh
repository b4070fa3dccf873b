#!/usr/bin/env bash
# Create ./.venv and install the project with its test extras at the pinned, tested versions of
# constraints.txt; check Java 17; install Debian's docker-compose (the compose-file test) when missing.
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

PY="${PYTHON:-python3}"
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "ERROR: Python 3.11+ is required ($PY is $("$PY" -V 2>&1))." >&2
  exit 1
fi

stamp="$VENV/.installed-$(cat "$REPO/pyproject.toml" "$REPO/constraints.txt" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setting up $VENV (first run takes a few minutes: Airflow + PySpark) ..." >&2
  if ! command -v uv >/dev/null 2>&1; then
    "$PY" -m pip install --quiet --disable-pip-version-check uv >&2 || true
  fi
  if command -v uv >/dev/null 2>&1 || "$PY" -m uv --version >/dev/null 2>&1; then
    UV="$(command -v uv || echo "$PY -m uv")"
    [ -x "$VENV/bin/python" ] || $UV venv --quiet --python "$PY" "$VENV" >&2
    $UV pip install --quiet --python "$VENV/bin/python" -c "$REPO/constraints.txt" -e "$REPO[test]" >&2
  else
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -c "$REPO/constraints.txt" -e "$REPO[test]" >&2
  fi
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi

# Debian's docker-compose (v1) validates docker-compose.yaml without a Docker engine; its test fails
# (not skips) without it. Installed once, when missing and possible (root or passwordless sudo).
if ! command -v docker-compose >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO="$(sudo -n true 2>/dev/null && echo sudo || true)"
  if [ "$(id -u)" = 0 ] || [ -n "$SUDO" ]; then
    echo "installing docker-compose (apt-get) for the compose-file test ..." >&2
    { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq docker-compose; } >&2 \
      || echo "WARNING: could not install docker-compose: tests/unit/test_docker_compose.py will fail" >&2
  fi
fi
command -v docker-compose >/dev/null 2>&1 \
  || echo "WARNING: docker-compose is missing (sudo apt-get install -y docker-compose): its test will fail" >&2

export PATH="$VENV/bin:$PATH"
export PYSPARK_PYTHON="$VENV/bin/python"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
