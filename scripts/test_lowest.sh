#!/usr/bin/env bash
# Run tests against the LOWEST supported versions (constraints-lowest.txt: Airflow 3.1.0, PySpark 4.0.0, the
# Spark provider 5.3.0, ...) in a throwaway virtualenv (default /tmp/airflow-streaming-lowest, reused while
# constraints-lowest.txt is unchanged). Arguments go to pytest; default: the unit tests.
#   ./scripts/test_lowest.sh                                  # tests/unit
#   ./scripts/test_lowest.sh tests/integration/test_submission.py -m spark
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${LOWEST_VENV:-/tmp/airflow-streaming-lowest}"
PY="${PYTHON:-python3}"

stamp="$VENV/.installed-$(cat "$REPO/constraints-lowest.txt" "$REPO/pyproject.toml" | sha256sum | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "setting up $VENV with the lowest supported versions ..." >&2
  if command -v uv >/dev/null 2>&1; then
    [ -x "$VENV/bin/python" ] || uv venv --quiet --python "$PY" "$VENV" >&2
    uv pip install --quiet --python "$VENV/bin/python" -r "$REPO/constraints-lowest.txt" >&2
    uv pip install --quiet --python "$VENV/bin/python" --no-deps -e "$REPO" >&2
  else
    [ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check -r "$REPO/constraints-lowest.txt" >&2
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -e "$REPO" >&2
  fi
  rm -f "$VENV"/.installed-*
  touch "$stamp"
fi

cd "$REPO"
export PATH="$VENV/bin:$PATH" PYSPARK_PYTHON="$VENV/bin/python" SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
"$VENV/bin/python" -c 'import airflow, pyspark; print(f"lowest set: Airflow {airflow.__version__}, PySpark {pyspark.__version__}")' >&2
if [ "$#" -eq 0 ]; then set -- tests/unit; fi
exec "$VENV/bin/python" -m pytest "$@"
