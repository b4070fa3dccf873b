"""The driver side on another Spark line: deploy, health, graceful stop, checkpoint reading and the gate.

For each release in ``AIRFLOW_STREAMING_TEST_SPARK_LINES`` (comma-separated; none by default; each a
runtime built once on this host, ``airflow_streaming.spark_runtime``), one stateful stream runs the bundled
``device_signals`` on that release and the provider's Airflow side (on the installed Spark) watches it:

- the driver's status document is judged HEALTHY by the health rules (that line's progress format);
- a graceful stop ends at a batch boundary and the checkpoint reader (no Spark) finds it clean;
- the compatibility gate, run in that release's Python (``compat/run.py``), answers for its own checkpoint
  with Spark's dry run and names that release;
- a restart on the same release continues from the next batch, and the sink holds every closed window
  exactly once.

The suite's two lines are checked elsewhere (3.5 and the installed 4.x: ``test_spark_runtime_upgrade.py``,
``test_spark_runtimes.py``); this module is how the support matrix's other lines (4.0, 4.1) are checked, by
hand (docs/spark-runtimes.md): ``AIRFLOW_STREAMING_TEST_SPARK_LINES=4.0.1,4.1.1 ./scripts/test.sh
tests/integration/test_spark_lines.py``. Not in every run since 2026-11-28: a third line cost the suite ~3
minutes and a runtime build, and the suite no longer fitted CI's time limit.
"""

from __future__ import annotations

import os

import pytest

from airflow_streaming.compat.run import run_check
from airflow_streaming.health.verdict import HealthState
from spark_jobs.outputs import read_window_counts
from signals import Feeder, expected_windows
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark

#: The lines to check besides the suite's two (3.5 and the installed 4.x), by hand: any of 4.0.1,4.1.1,3.5.7.
LINES = [v.strip() for v in os.environ.get("AIRFLOW_STREAMING_TEST_SPARK_LINES", "").split(",") if v.strip()]


@pytest.mark.parametrize("release", LINES or [pytest.param(None, marks=pytest.mark.skip(
    reason="by hand: AIRFLOW_STREAMING_TEST_SPARK_LINES=4.0.1,4.1.1 (docs/spark-runtimes.md)"))])
def test_a_stateful_stream_on_this_line_is_watched_stopped_read_and_gated(streams, release):
    from airflow_streaming.spark_runtime import line_of, resolve_runtime

    assert resolve_runtime({"version": release}) is not None or release == _installed()
    feeder = Feeder(streams.path("input", "signals"))
    feeder.feed(40)
    out = streams.path("output", "signals")
    args = ["--input", streams.path("input", "signals"), "--output", out, "--window", "1 minute",
            "--watermark", "30 seconds"]
    # The check is that the rules read this line's progress, not the machine's speed: a batch may take up to 3
    # triggers (under the suite's load a 1 s trigger's batches took ~1.2 s: FALLING_BEHIND, a correct reading).
    spec = streams.spec("signals", "device_signals", args, spark_runtime=release,
                        health={"batch_duration_factor": 3.0})
    hook = streams.hook(spec)
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    feeder.start()
    wait_for(lambda: read_window_counts(out), 150, f"Spark {release} writes closed windows")
    wait_for(lambda: hook.health().state == HealthState.HEALTHY, 60, f"a HEALTHY verdict of the Spark {release} driver")

    report = stream_actions.stop(hook)
    assert report.graceful and hook.batch_position().clean, report.to_dict()
    stopped_at = hook.batch_position().last_committed
    gate = run_check(spec.with_version("v1-again"), allow_warnings=False)
    assert gate["candidate"]["spark_version"] == release, gate["candidate"]
    if line_of(release) >= (4, 0):
        assert gate["verdict"] == "COMPATIBLE", gate["findings"]
        assert (gate["dry_run"] or {}).get("status") == "passed", gate["dry_run"]
    else:  # 3.5 checks state only when a batch runs: its dry run is partial, a WARNING (docs/spark-runtimes.md)
        assert gate["verdict"] == "COMPATIBLE_WITH_WARNINGS", gate["findings"]
        assert (gate["dry_run"] or {}).get("status") == "partial", gate["dry_run"]

    again = stream_actions.submit(hook)
    hook.wait_until_ready(again)
    wait_for(lambda: (hook.batch_position().last_committed or 0) > stopped_at, 120, "the restart commits a batch")
    last = feeder.stop()
    expected = expected_windows(last)
    wait_for(lambda: read_window_counts(out) == expected, 150,
             f"every closed window of events 0..{last} written exactly once on Spark {release}")
    stream_actions.stop(hook)


def _installed() -> str | None:
    from airflow_streaming.spark_runtime import installed_version

    return installed_version()
