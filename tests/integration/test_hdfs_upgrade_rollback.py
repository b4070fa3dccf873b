"""The lifecycle runner's upgrade -> automatic rollback with the control files and the checkpoint on
HDFS - the WebHDFS-protocol STAND-IN for a NameNode (tests/webhdfs_standin.py; no real NameNode can
run here). The output (a file sink) stays local.

Every step goes through the same code as on local files: the compatibility gate reads the checkpoint
over WebHDFS in its child process, the snapshot is a copy (HDFS has no hard links) into the stream's
HDFS control dir, the rollback restores it and the old version resumes: each window exactly once.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from airflow_streaming.lifecycle.record import Action, Probation, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner, read_history
from signals import Feeder, expected_windows
from spark_jobs.outputs import read_window_counts
from streams import wait_for
from webhdfs_standin import WebHdfsStandIn
import stream_actions

pytestmark = pytest.mark.spark

JOBS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
OPTIONS = LifecycleOptions(probation=Probation(min_batches=2, window_s=120), poll_s=0.5)


@pytest.fixture
def nn(tmp_path, monkeypatch):
    """The NameNode stand-in. Requested before ``streams`` so that it outlives the drivers' cleanup."""
    monkeypatch.setenv("AIRFLOW_STREAMING_LOG_DIR", str(tmp_path / "driver-logs"))
    with WebHdfsStandIn(str(tmp_path / "hdfs")) as server:
        yield server


def test_upgrade_rollback_with_control_and_checkpoint_on_webhdfs(nn, streams):
    inp, out = streams.path("input", "signals"), streams.path("output", "signals")
    ckpt = f"{nn.uri}/checkpoints/signals"
    common = {"checkpoint_location": ckpt, "control_location": f"{nn.uri}/control"}
    v1 = streams.spec("signals", "device_signals", ["--input", inp, "--output", out, "--window", "1 minute",
                                                    "--watermark", "30 seconds"], version="v1", **common)
    broken = streams.spec("signals", str(JOBS / "device_signals_broken.py"), [inp, out, ckpt], version="v2-broken",
                          **common)
    feeder = Feeder(inp)
    feeder.feed(40)
    hook = streams.hook(v1)
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record, timeout=240)
    feeder.start()
    wait_for(lambda: read_window_counts(out), 150, "v1 writes closed windows")

    events: list[dict] = []
    result = LifecycleRunner(broken, Action.UPGRADE, OPTIONS, notify=events.append).run()

    assert result.step == Step.ROLLED_BACK, result.error
    assert [s["step"] for s in result.steps] == ["PLANNED", "CHECKED", "STOPPING", "STOPPED", "SNAPSHOTTED",
                                                 "STARTING", "PROBATION", "ROLLING_BACK", "RESTORED",
                                                 "RESTARTING_OLD", "ROLLED_BACK"]
    assert "calibration table missing" in result.error
    assert result.snapshot["method"] == "copy" and result.snapshot["snapshot_dir"].startswith("/control/signals/")
    assert os.path.isfile(nn.local(f"{result.snapshot['snapshot_dir']}/manifest.json"))
    assert any(".rolled-back-" in p for p in os.listdir(nn.local("/checkpoints"))), "v2's checkpoint kept aside"
    assert hook.driver_record().run_id == result.rollback_run_id and hook.deployed()["spec"]["version"] == "v1"
    assert hook.health().state.value in ("HEALTHY", "IDLE")
    assert [e["kind"] for e in events] == ["UPGRADE_ROLLED_BACK"]
    assert read_history(hook)[-1]["outcome"] == "ROLLED_BACK"

    last = feeder.stop()
    expected = expected_windows(last)
    wait_for(lambda: read_window_counts(out) == expected, 180, f"every closed window of events 0..{last} once")
    report = stream_actions.stop(hook)
    assert report.graceful and report.position.clean
    assert nn.unsupported == []
