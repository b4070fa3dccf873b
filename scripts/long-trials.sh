#!/usr/bin/env bash
# The long tier: the tests marked `long` - each a second trial of a kind that ./scripts/test.sh runs once
# (its marker names the test or bench smoke of the suite that covers the kind; tests/unit/test_long_tier.py
# checks that name). Real Spark, one test after another, about 80 minutes on 2 cores. With the long soak
# (./scripts/soak.sh) it is what RELIABILITY.md's long-run rows record.
#   ./scripts/long-trials.sh [pytest args]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
exec ./scripts/test.sh -m long "$@"
