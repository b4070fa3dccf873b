#!/usr/bin/env bash
# Set everything up (./.venv, Java check) and run the whole test suite: ./scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
exec "$VENV/bin/python" -m pytest "$@"
