#!/usr/bin/env bash
# The long soak (RELIABILITY.md): 20 driver kills under supervision and the upgrade task killed at every
# named step, on real Spark. Results: ./soak-results/*.json. About 20 minutes on 2 cores.
#   ./scripts/soak.sh [driver-kill trials, default 20]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export AIRFLOW_STREAMING_SOAK_TRIALS="${1:-20}"
export AIRFLOW_STREAMING_SOAK_STEPS=all
export AIRFLOW_STREAMING_SOAK_RESULTS="$PWD/soak-results"
exec ./scripts/test.sh tests/integration/test_soak.py -s -p no:randomly "${@:2}"
