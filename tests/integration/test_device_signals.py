"""The stateful job: windows that straddle a stop/restart keep their state and are written exactly once."""

from __future__ import annotations

import os
import signal
from datetime import timedelta

import pytest

from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_window_counts
from signals import DEVICES, START, STEP, expected_windows
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark


@pytest.mark.long(covered_by="tests/integration/test_spark_runtime_upgrade.py::"
                           "test_stateful_stream_moves_from_spark_35_to_4x_keeps_state_rolls_back_to_its_old_runtime_and_refuses_a_downgrade")
def test_stateful_job_restart_keeps_state_and_is_exactly_once(streams):
    inp, out = streams.path("input", "signals"), streams.path("output", "signals")
    spec = streams.spec("signals", "device_signals",
                        ["--input", inp, "--output", out, "--window", "1 minute", "--watermark", "30 seconds"])
    hook = streams.hook(spec)

    def feed(start_seq: int, count: int, run: str, file_start: int) -> None:
        generate_events(inp, count=count, files=2, run=run, start_seq=start_seq, devices=DEVICES,
                        event_time_start=START + timedelta(seconds=start_seq * STEP), event_time_step=STEP,
                        malformed_every=25, file_start_index=file_start)

    feed(0, 200, "sig", 0)  # event time 0..199 s
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    first = expected_windows(199, 30)
    wait_for(lambda: read_window_counts(out) == first, 120, "phase 1 windows")
    report = stream_actions.stop(hook)
    assert report.graceful and report.position.clean

    # Window [3:00, 4:00) holds events from before (180-199 s) and after (200-239 s) the restart.
    feed(200, 200, "sig", 10)  # event time 200..399 s
    record2 = stream_actions.submit(hook)
    hook.wait_until_ready(record2)
    final = expected_windows(399, 30)
    wait_for(lambda: read_window_counts(out) == final, 120, "phase 2 windows")
    assert final[("2026-01-01T00:03:00", "dev-000")] == 15  # 60 events over 4 devices, across the restart
    # This time stop through SIGTERM to the driver (what a cluster manager sends): still graceful.
    driver_pid = hook.status().pid
    os.kill(driver_pid, signal.SIGTERM)
    wait_for(lambda: not hook.alive(record2), 60, "driver exit after SIGTERM")
    doc = hook.status()
    assert doc.state == "STOPPED" and doc.exit["code"] == 0 and doc.exit["reason"] == "graceful stop"
    assert hook.batch_position().clean
    assert read_window_counts(out) == final
