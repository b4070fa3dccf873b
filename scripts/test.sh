#!/usr/bin/env bash
# Set everything up (./.venv, Java check) and run the whole test suite: ./scripts/test.sh [pytest args]
#
# The whole suite (no arguments) runs as two pytest sessions at once: the tests that start Spark
# (marker `spark`), one after another - one Spark driver at a time - and, beside them, the tests that
# start none (unit tests, notifiers, command building), at a lower CPU priority. The second session's output is printed when
# both are done; the exit status is non-zero if either failed. AIRFLOW_STREAMING_TEST_SPLIT=0 runs the
# whole suite as one session; with arguments, pytest runs them as given. The suite holds one trial of each
# kind; the tests marked `long` (a second trial of a kind the suite runs once, e.g. another kill point or
# target) run with ./scripts/long-trials.sh (README, RELIABILITY.md).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup_env.sh
if [ "$#" -gt 0 ]; then
  exec "$VENV/bin/python" -m pytest "$@"
fi
if [ "${AIRFLOW_STREAMING_TEST_SPLIT:-1}" = 0 ]; then
  exec "$VENV/bin/python" -m pytest -m "not long"
fi
others_log="$(mktemp -t airflow-streaming-tests-without-spark.XXXXXX)"
progress="$(mktemp -t airflow-streaming-spark-progress.XXXXXX)"
started=$SECONDS
# At a lower CPU priority: the Spark session is the run's critical path (a driver's batches, JVM starts and the
# waits on them), and on 2 cores the session beside it made its steps 2-6x slower than alone (a smoke of 33 s
# took 197 s); the tests without Spark fill the CPU the Spark session leaves idle.
nice -n 10 "$VENV/bin/python" -m pytest -m "not spark and not long" >"$others_log" 2>&1 &
others=$!
trap 'kill -INT "$others" 2>/dev/null || true' INT TERM
set +e
AIRFLOW_STREAMING_TEST_PROGRESS="$progress" "$VENV/bin/python" -m pytest -m "spark and not long"
spark_rc=$?
wait "$others"
others_rc=$?
set -e
echo
echo "=============== the tests that start no Spark (run beside the Spark tests) ==============="
cat "$others_log"
rm -f "$others_log"
# Last, where a CI excerpt of the output's end shows it: the Spark session's own account, which survives a run
# stopped at the time limit (pytest then prints no durations): its slowest tests and the one still running.
echo
echo "=============== the Spark session, from its progress file ($(grep -c '^end ' "$progress") tests ended) ==============="
# (never failing the script: an account of nothing, or head closing the pipe early, is no test failure)
{ grep '^end ' "$progress" | sort -k2,2 -g -r | head -25 | awk '{printf "%8.1fs %s\n", $2, $3}'; } || true
awk '$1 == "start" {running[$3] = $2} $1 == "end" {delete running[$3]} END {for (t in running) print "still running (started " running[t] "): " t}' "$progress" || true
rm -f "$progress"
echo "Spark tests: exit $spark_rc; tests without Spark: exit $others_rc; $(( (SECONDS - started) / 60 )) min"
[ "$spark_rc" = 0 ] && [ "$others_rc" = 0 ]
