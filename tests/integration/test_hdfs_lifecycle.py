"""A real stream with its control location AND its checkpoint on HDFS - here the WebHDFS-protocol
STAND-IN for a NameNode (tests/webhdfs_standin.py; no real NameNode can run on these machines).

The Airflow side reads and writes through WebHdfsStorage (HdfsCLI), the driver through the JVM's
Hadoop FileSystem (HadoopFsStorage), Spark checkpoints at ``webhdfs://``. Input and output are local
directories. Deploy -> progress -> graceful stop -> checkpoint read over WebHDFS -> snapshot -> a
second run -> restore of the snapshot -> restart from it: every event in the output exactly once.
"""

from __future__ import annotations

import os

import pytest

from airflow_streaming.checkpoint.reader import read_checkpoint
from airflow_streaming.control import contract
from airflow_streaming.control.webhdfs import WebHdfsStorage
from airflow_streaming.lifecycle.snapshot import load_manifest, restore_snapshot, take_snapshot
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import count_quarantined, read_etl_output
from streams import current_status, wait_for
from webhdfs_standin import WebHdfsStandIn
import stream_actions

pytestmark = pytest.mark.spark


@pytest.fixture
def nn(tmp_path, monkeypatch):
    """The NameNode stand-in. Requested before ``streams`` so that it outlives the drivers' cleanup."""
    monkeypatch.setenv("AIRFLOW_STREAMING_LOG_DIR", str(tmp_path / "driver-logs"))
    with WebHdfsStandIn(str(tmp_path / "hdfs")) as server:
        yield server


def first_batch(hook, run_id: str) -> int:
    return current_status(hook, run_id).queries[0].recent_progress[0]["batchId"]


def processed_all(hook, run_id: str, ids: set[str], output: str) -> bool:
    doc = hook.status()
    return doc is not None and doc.run_id == run_id and set(read_etl_output(output).event_ids) >= ids


@pytest.mark.long(covered_by="tests/integration/test_hdfs_upgrade_rollback.py::"
                           "test_upgrade_rollback_with_control_and_checkpoint_on_webhdfs")
def test_stream_with_control_files_and_checkpoint_on_webhdfs(nn, streams):
    spec = streams.etl_spec(
        control_location=f"{nn.uri}/control", checkpoint_location=f"{nn.uri}/checkpoints/etl",
        application_args=["--input", streams.path("input", "etl"), "--output", streams.path("output", "etl"),
                          "--quarantine", streams.path("quarantine", "etl"), "--max-files-per-trigger", "1"])
    hook = streams.hook(spec)
    assert isinstance(hook.storage.unguarded, WebHdfsStorage) and hook.remote_storage
    inp, out = streams.path("input", "etl"), streams.path("output", "etl")
    fed = [generate_events(inp, count=120, files=3, malformed_every=20, run="p1"),
           generate_events(inp, count=80, files=2, malformed_every=20, run="p2", file_start_index=10)]

    # ---- deploy -> progress
    record = stream_actions.submit(hook)
    assert record.log_path == hook.driver_log_path(record.run_id) and record.log_path.startswith(
        os.environ["AIRFLOW_STREAMING_LOG_DIR"])
    hook.wait_until_ready(record, timeout=240)
    assert os.path.isfile(nn.local("/control/etl/RUNNING")) and os.path.isfile(nn.local("/control/etl/lease.json"))
    assert "holds the lease" in (hook.running_driver() or "")
    ids1 = {i for batch in fed for i in batch.event_ids}
    wait_for(lambda: processed_all(hook, record.run_id, ids1, out), 180, "phase 1+2 in the output")
    doc = hook.status()
    assert doc.state == contract.RUNNING and doc.storage_errors is None
    assert doc.query_checkpoints and list(doc.query_checkpoints.values())[0] == f"{nn.uri}/checkpoints/etl"

    # ---- graceful stop at a batch boundary; the checkpoint read over WebHDFS
    report = stream_actions.stop(hook)
    assert report.graceful and not report.killed and report.exit_code == contract.EXIT_GRACEFUL, report.to_dict()
    n = report.position.last_committed
    assert report.position.clean and n is not None and n >= 4  # one file per batch: 5 files
    assert not os.path.exists(nn.local("/control/etl/lease.json")), "a graceful stop releases the lease"
    assert hook.batch_position().last_committed == n
    info = read_checkpoint(f"{nn.uri}/checkpoints/etl")
    assert (info.last_committed_batch, info.clean, info.sources[0].kind) == (n, True, "file")
    assert "driver-logs" in hook.driver_record().log_path and hook.log_tail(record.run_id, 400)
    assert not os.path.exists("/control/etl"), "the driver log went to the local log dir, not to /control"

    # ---- snapshot of the HDFS checkpoint (copy), into the HDFS control dir
    snap_dir = f"{hook.paths.root}/snapshots/t1"
    manifest = take_snapshot(f"{nn.uri}/checkpoints/etl", snap_dir, resolve=hook.storage_of,
                             snapshot_storage=hook.storage)
    assert (manifest.method, manifest.batch_id) == ("copy", n) and manifest.files > 0
    assert load_manifest(snap_dir, hook.storage) == manifest

    # ---- restart with more input: it continues at n+1
    fed.append(generate_events(inp, count=60, files=2, malformed_every=20, run="p3", file_start_index=20))
    record2 = stream_actions.submit(hook)
    hook.wait_until_ready(record2, timeout=240)
    ids = {i for batch in fed for i in batch.event_ids}
    wait_for(lambda: processed_all(hook, record2.run_id, ids, out), 180, "phase 3 in the output")
    assert first_batch(hook, record2.run_id) == n + 1
    report2 = stream_actions.stop(hook)
    assert report2.graceful and report2.position.clean and report2.position.last_committed > n
    output = read_etl_output(out)
    assert output.duplicates == {} and set(output.event_ids) == ids and output.rows == sum(b.valid for b in fed)

    # ---- roll the checkpoint back to the snapshot (n) and restart from it: batches n+1.. are replayed
    # (one file per batch, so the same files land in the same batch ids and overwrite themselves).
    restored = restore_snapshot(manifest, ".rolled-back-t1", resolve=hook.storage_of, snapshot_storage=hook.storage)
    assert restored["batch_id"] == n and restored["moved_aside"] == "/checkpoints/etl.rolled-back-t1"
    assert hook.batch_position().last_committed == n
    assert read_batch_ids(nn, "/checkpoints/etl.rolled-back-t1") == report2.position.last_committed
    record3 = stream_actions.submit(hook)
    hook.wait_until_ready(record3, timeout=240)
    assert first_batch(hook, record3.run_id) == n + 1
    wait_for(lambda: (hook.status().queries[0].last_batch_id or 0) >= report2.position.last_committed, 180,
             "the replay reached the second run's last batch")
    report3 = stream_actions.stop(hook)
    assert report3.graceful and report3.position.last_committed == report2.position.last_committed

    # ---- exactly once end to end; nothing the stand-in could not answer
    output = read_etl_output(out)
    assert output.duplicates == {} and set(output.event_ids) == ids and output.rows == sum(b.valid for b in fed)
    assert count_quarantined(streams.path("quarantine", "etl")) == sum(b.malformed for b in fed)
    assert nn.unsupported == []


def read_batch_ids(nn: WebHdfsStandIn, checkpoint: str) -> int:
    """The last committed batch of a checkpoint, read from the stand-in's files directly."""
    return max(int(name) for name in os.listdir(nn.local(f"{checkpoint}/commits")) if name.isdigit())
