#!/usr/bin/env bash
# Set everything up and run the lifecycle demo DAG on local Spark + Airflow (SQLite), then print its summary
# and the periods its downstream DAG's report ran for.
# Everything it writes goes under $AIRFLOW_STREAMING_DEMO_ROOT (default /tmp/airflow-streaming-demo).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The demo needs Java, Python and the venv only: not the test suite's PostgreSQL, Chromium and docker-compose
# (./scripts/test.sh installs those).
AIRFLOW_STREAMING_SETUP_TEST_PACKAGES=0
source scripts/setup_env.sh

ROOT="${AIRFLOW_STREAMING_DEMO_ROOT:-/tmp/airflow-streaming-demo}"
rm -rf "$ROOT" && mkdir -p "$ROOT"
export AIRFLOW_STREAMING_DEMO_ROOT="$ROOT"
export AIRFLOW_HOME="$ROOT/airflow-home"
export AIRFLOW__CORE__DAGS_FOLDER="$PWD/dags"
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export AIRFLOW__CORE__PARALLELISM=2

cleanup() {  # whatever happens, no driver survives the demo
  "$VENV/bin/python" -m airflow_streaming.stop_all "$ROOT/control" >&2 || true
}
trap cleanup EXIT

echo "[demo] initialising the Airflow metadata DB (SQLite) in $AIRFLOW_HOME"
airflow db migrate >"$ROOT/db-migrate.log" 2>&1 || { tail -n 30 "$ROOT/db-migrate.log"; exit 1; }
echo "[demo] running DAG streaming_lifecycle_demo with 'airflow dags test' (log: $ROOT/dags-test.log)"
if ! airflow dags test streaming_lifecycle_demo >"$ROOT/dags-test.log" 2>&1; then
  echo "[demo] the DAG failed; last lines of $ROOT/dags-test.log:" >&2
  tail -n 40 "$ROOT/dags-test.log" >&2
  exit 1
fi
for out in summary.txt periods.txt; do
  if [ ! -f "$ROOT/$out" ]; then
    echo "[demo] the DAG did not produce $out; see $ROOT/dags-test.log" >&2
    exit 1
  fi
done
cat "$ROOT/summary.txt" "$ROOT/periods.txt"
