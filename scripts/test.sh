#!/usr/bin/env bash
# Set everything up (./.venv, Java check) and run the whole test suite: ./scripts/test.sh [pytest args]
# The whole suite (no arguments) runs on two pytest-xdist workers: every test that starts Spark on one,
# in order (one Spark driver at a time, tests/conftest.py), and the tests that start none on the other.
# AIRFLOW_STREAMING_TEST_WORKERS=1 runs it in one process; with arguments, pytest runs them as given.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
if [ "$#" -eq 0 ] && [ "${AIRFLOW_STREAMING_TEST_WORKERS:-2}" != 1 ]; then
  set -- -n "${AIRFLOW_STREAMING_TEST_WORKERS:-2}" --dist loadgroup
fi
exec "$VENV/bin/python" -m pytest "$@"
