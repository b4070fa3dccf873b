#!/usr/bin/env bash
# The long soak (RELIABILITY.md), on real Spark: 20 driver kills under supervision, the upgrade task killed
# at every named step, and kill -9 at a random moment of every phase (56 trials: deploy start, a
# supervisor's restart, the supervising process mid-pass, a standby's preparation, the gate, probation,
# a rollback, the upgrade task). Results: ./soak-results/*.json. About 60 minutes on 2 cores.
#   ./scripts/soak.sh [driver-kill trials, default 20] [phase trials, default 56] [seed, default 11]
# Only the every-phase part: ./scripts/soak.sh 0 56 -k every_phase
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export AIRFLOW_STREAMING_SOAK_TRIALS="${1:-20}"
export AIRFLOW_STREAMING_PHASE_TRIALS="${2:-56}"
export AIRFLOW_STREAMING_SOAK_SEED="${3:-11}"
export AIRFLOW_STREAMING_SOAK_STEPS=all
export AIRFLOW_STREAMING_SOAK_RESULTS="$PWD/soak-results"
exec ./scripts/test.sh tests/integration/test_soak.py -s -p no:randomly "${@:4}"
