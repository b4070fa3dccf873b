"""A STATEFUL stream's checkpoint and file sink on HDFS - the WebHDFS-protocol STAND-IN for a NameNode
(tests/webhdfs_standin.py; no real NameNode can run here) - snapshotted by copying only what a restart
reads, then rolled back to it and restarted: the windows come out exactly once.

State store maintenance is made eager (a ``.snapshot`` every 2 deltas, every second) so that the
snapshot really leaves out the deltas a restart does not read; the restart then proves that what was
kept is enough: windows open across the snapshot point are completed with the right counts.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from datetime import timedelta

import pyarrow.dataset as ds
import pytest

from airflow_streaming.control.local import LocalStorage
from airflow_streaming.lifecycle.snapshot import restore_snapshot, take_snapshot
from signals import DEVICES, START, STEP, expected_windows
from spark_jobs.event_generator import generate_events
from streams import wait_for
from webhdfs_standin import WebHdfsStandIn
import stream_actions

pytestmark = pytest.mark.spark
_DATA = re.compile(r"^\d+\.(delta|snapshot)$")


@pytest.fixture
def nn(tmp_path):
    """The NameNode stand-in. Requested before ``streams`` so that it outlives the drivers' cleanup."""
    with WebHdfsStandIn(str(tmp_path / "hdfs")) as server:
        yield server


def window_counts(nn: WebHdfsStandIn, sink: str) -> dict[tuple[str, str], int]:
    """``{(window start, device): events}`` from the files the sink's ``_spark_metadata`` commits (summed:
    a window written twice shows a doubled count)."""
    log_dir = nn.local(f"{sink}/_spark_metadata")
    if not os.path.isdir(log_dir):
        return {}
    files: set[str] = set()
    for name in sorted(os.listdir(log_dir), key=lambda n: int(n.split(".")[0]) if n[0].isdigit() else -1):
        if not name[0].isdigit():
            continue
        with open(os.path.join(log_dir, name)) as fh:
            for line in fh.read().splitlines()[1:]:
                entry = json.loads(line)
                local = nn.local(re.sub(r"^[a-z]+://[^/]+", "", entry["path"]))
                (files.discard if entry.get("action", "add") == "delete" else files.add)(local)
    if not files:
        return {}
    table = ds.dataset(sorted(files), format="parquet").to_table(columns=["window_start", "device_id", "events"])
    out: Counter = Counter()
    for start, device, events in zip(*(table.column(c).to_pylist() for c in ("window_start", "device_id", "events"))):
        out[(start.isoformat(), device)] += events
    return dict(out)


def state_files(root: str) -> set[str]:
    return {os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(os.path.join(root, "state"))
            for f in fs if _DATA.match(f)}


@pytest.mark.long(covered_by="tests/integration/test_hdfs_upgrade_rollback.py::test_upgrade_rollback_with_control_and_checkpoint_on_webhdfs")
def test_stateful_hdfs_checkpoint_snapshot_rollback_and_restart(nn, streams, tmp_path):
    inp, sink = streams.path("input", "signals"), "/out/signals"
    spec = streams.spec(
        "signals", "device_signals",
        ["--input", inp, "--output", f"{nn.uri}{sink}", "--window", "1 minute", "--watermark", "30 seconds",
         "--max-files-per-trigger", "1"],
        checkpoint_location=f"{nn.uri}/checkpoints/signals",
        spark_conf={"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false",
                    "spark.sql.streaming.stateStore.minDeltasForSnapshot": 2,
                    "spark.sql.streaming.stateStore.maintenanceInterval": "1s"})
    hook = streams.hook(spec)

    def feed(start_seq: int, count: int, files: int, file_start: int) -> None:
        per_file = count // files
        for i in range(files):
            seq = start_seq + i * per_file
            generate_events(inp, count=per_file, files=1, run="sig", start_seq=seq, devices=DEVICES,
                            event_time_start=START + timedelta(seconds=seq * STEP), event_time_step=STEP,
                            file_start_index=file_start + i)

    # ---- v1 on HDFS: 8 batches, then a graceful stop at batch n
    feed(0, 200, 8, 0)
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record, timeout=240)
    first = expected_windows(199, 30)
    wait_for(lambda: window_counts(nn, sink) == first, 180, "phase 1 windows")
    live = nn.local("/checkpoints/signals")
    wait_for(lambda: any(f.endswith(".snapshot") for f in state_files(live)), 60, "a state store .snapshot file")
    report = stream_actions.stop(hook)
    assert report.graceful and report.position.clean
    n = report.position.last_committed

    # ---- snapshot: HDFS checkpoint + HDFS sink log -> a local snapshot dir, only what a restart reads
    snap_dir = str(tmp_path / "snapshot")
    manifest = take_snapshot(f"{nn.uri}/checkpoints/signals", snap_dir, f"{nn.uri}{sink}", resolve=hook.storage_of,
                             snapshot_storage=LocalStorage())
    assert manifest.method == "copy" and manifest.batch_id == n
    assert manifest.sink_metadata == f"{nn.uri}{sink}/_spark_metadata"
    kept, there = state_files(os.path.join(snap_dir, "checkpoint")), state_files(live)
    assert kept < there, "older deltas (before a .snapshot) are left out"
    assert all(int(f.rsplit("/", 1)[1].split(".")[0]) <= n + 1 for f in kept)

    # ---- a second run moves the checkpoint and the sink on (what a new version would do)
    feed(200, 200, 8, 10)
    record2 = stream_actions.submit(hook)
    hook.wait_until_ready(record2, timeout=240)
    final = expected_windows(399, 30)
    wait_for(lambda: window_counts(nn, sink) == final, 180, "phase 2 windows")
    report2 = stream_actions.stop(hook)
    assert report2.graceful and report2.position.last_committed > n

    # ---- roll back to the snapshot: the sink log forgets the second run's batches
    restored = restore_snapshot(manifest, ".rolled-back-s1", resolve=hook.storage_of, snapshot_storage=LocalStorage())
    assert restored["batch_id"] == n and restored["sink_metadata_restored"] is True
    assert hook.batch_position().last_committed == n
    assert window_counts(nn, sink) == first

    # ---- restart from the restored checkpoint: state at n was enough, every window exactly once
    record3 = stream_actions.submit(hook)
    hook.wait_until_ready(record3, timeout=240)
    assert hook.status().queries[0].recent_progress[0]["batchId"] == n + 1
    wait_for(lambda: window_counts(nn, sink) == final, 180, "phase 2 windows after the rollback")
    assert final[("2026-01-01T00:03:00", "dev-000")] == 15  # a window open across the snapshot point
    report3 = stream_actions.stop(hook)
    assert report3.graceful and window_counts(nn, sink) == final
    assert nn.unsupported == []
