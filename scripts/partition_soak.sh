#!/usr/bin/env bash
# The partition long run (issue 36; RELIABILITY.md "Partitions"): the partition trials of the suite, run
# again and again on real Spark in network namespaces - (a) the driver's host cut from the control storage
# for more than the lease ttl, (b) Airflow's host cut from the driver's host and from the standalone master,
# (c) the hot standby's host cut from the active driver's host, (d) the cut healed in the middle of the
# takeover - each trial's figures (its `PARTITION TRIAL (x) {json}` line) and outcome appended to
# ./soak-results/partition_trials.jsonl. A round of the four takes ~9 minutes on 2 cores;
# 20 trials: ./scripts/partition_soak.sh 5 (four trials a round, 20 in all).
#   ./scripts/partition_soak.sh [rounds, default 5] [pytest args...]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
rounds="${1:-5}"
shift || true
mkdir -p soak-results
results="$PWD/soak-results/partition_trials.jsonl"
trials=(tests/integration/test_partition_trials.py tests/integration/test_partition_airflow_host.py
        tests/integration/test_partition_standby.py)
failed=0
for round in $(seq 1 "$rounds"); do
  log="$(mktemp -t partition-round.XXXXXX)"
  ./scripts/test.sh "${trials[@]}" -s -p no:randomly "$@" >"$log" 2>&1
  rc=$?
  # One line per trial: its figures as printed, with the round and the round's pytest exit status.
  grep -o 'PARTITION TRIAL ([a-z]) {.*}' "$log" | while read -r _ _ kind figures; do
    printf '{"round": %d, "trial": "%s", "pytest_exit": %d, "figures": %s}\n' "$round" "${kind//[()]/}" "$rc" "$figures"
  done >>"$results"
  grep -E '^(FAILED|ERROR) ' "$log" | sed "s/^/round $round: /"
  echo "round $round/$rounds: pytest exit $rc ($(grep -c 'PARTITION TRIAL' "$log") trials reported)"
  [ "$rc" = 0 ] || { failed=$((failed + 1)); cp "$log" "soak-results/partition_round_${round}.log"; }
  rm -f "$log"
done
echo "partition long run: $rounds rounds, $failed failed; figures in $results"
[ "$failed" = 0 ]
