"""Single faults injected into real drivers and real lifecycle actions; output compared with input.

- storage errors on the control directory (failpoints inside the driver's own LocalStorage calls):
  the stream keeps running, counts them, and still stops gracefully when asked;
- concurrent deploys (threads and processes): exactly one driver;
- a snapshot on a really full file system (a 256 KiB tmpfs mounted on the snapshots directory): the
  old version restarts from its untouched checkpoint, people are notified, the task fails saying
  what happened and what is left to do;
- a user script whose query could never be resumed is refused with the fix.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from airflow_streaming import faults
from airflow_streaming.control import contract
from airflow_streaming.exceptions import DriverStartError, StreamAlreadyRunningError
from airflow_streaming.control.lifecycle_lock import LifecycleLockHeld
from airflow_streaming.lifecycle.operations import LifecycleOutcomeError, deploy_stream, stop_stream
from airflow_streaming.lifecycle.record import Action, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner, read_history
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from streams import totals, wait_for
import stream_actions

pytestmark = pytest.mark.spark
PROJECT = str(Path(__file__).resolve().parents[2])


def write_faults(path: Path, entries: list[dict]) -> None:
    path.write_text(json.dumps(entries))
    now = time.time_ns()
    os.utime(path, ns=(now, now))


def assert_exactly_once(streams, name: str, fed: list) -> None:
    all_ids = {i for batch in fed for i in batch.event_ids}
    output = read_etl_output(streams.path("output", name))
    assert output.duplicates == {}, f"duplicated events: {list(output.duplicates)[:5]}"
    assert set(output.event_ids) == all_ids, f"missing {len(all_ids - set(output.event_ids))} events"


def test_storage_errors_on_the_control_directory_never_stop_the_stream(streams, tmp_path, monkeypatch):
    fault_file = tmp_path / "faults.json"
    write_faults(fault_file, [])
    monkeypatch.setenv(faults.ENV, str(fault_file))  # inherited by the driver
    spec = streams.etl_spec()
    hook = streams.hook(spec)
    inp = streams.path("input", "etl")
    fed = [generate_events(inp, count=200, files=2, run="before")]
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    wait_for(lambda: (totals(hook, record.run_id) or {}).get("input_rows", 0) >= 200, 90, "first input processed")

    # EIO on every check of the run marker (~20 a second) and ENOSPC on every status write, for 8 seconds,
    # while new input arrives. Before the fix, the first EIO read as "marker gone": a graceful stop.
    write_faults(fault_file, [
        {"point": "storage.exists", "match": "/RUNNING", "action": "error", "errno": "EIO"},
        {"point": "storage.write", "match": "status.json", "action": "error", "errno": "ENOSPC"},
    ])
    fed.append(generate_events(inp, count=200, files=2, run="during", file_start_index=10))
    time.sleep(8)
    assert hook.alive(record), "the driver stopped on a storage error"
    assert os.path.exists(hook.paths.marker)  # (this test process has the failpoints too)
    write_faults(fault_file, [])

    # The stream went on: it counted the errors, and processed what arrived during the fault.
    wait_for(lambda: (totals(hook, record.run_id) or {}).get("input_rows", 0) >= 400, 90, "input during the fault")
    doc = hook.status()
    assert doc.state == contract.RUNNING and doc.storage_errors and doc.storage_errors["count"] >= 10
    assert "Input/output error" in doc.storage_errors["last"] or "No space left" in doc.storage_errors["last"]
    log_text = Path(record.log_path).read_text()
    assert "cannot check the run marker" in log_text and "not a stop request" in log_text

    report = stop_stream(spec)
    assert report["graceful"] and report["clean"], report
    assert_exactly_once(streams, "etl", fed)


def test_concurrent_deploys_of_one_stream_start_exactly_one_driver(streams, tmp_path):
    spec = streams.etl_spec()
    hook = streams.hook(spec)
    generate_events(streams.path("input", "etl"), count=50, files=1, run="x")
    outcomes: list[str] = []
    barrier = threading.Barrier(5)

    def deploy_in_thread() -> None:
        barrier.wait()
        try:
            hook_copy = type(hook)(spec)
            outcomes.append(f"submitted {stream_actions.submit(hook_copy).run_id}")
        except (LifecycleLockHeld, StreamAlreadyRunningError) as exc:
            outcomes.append(f"refused: {type(exc).__name__}")

    script = textwrap.dedent(f"""
        import json, sys, time
        sys.path.insert(0, {PROJECT!r})
        from airflow_streaming.lifecycle.operations import deploy_stream
        from airflow_streaming.spec import StreamSpec
        spec = StreamSpec.from_dict(json.loads(sys.argv[1]))
        while time.time() < float(sys.argv[2]):
            time.sleep(0.001)
        try:
            print("deployed", deploy_stream(spec)["run_id"], flush=True)
        except Exception as exc:
            print("refused", type(exc).__name__, flush=True)
    """)
    start_at = time.time() + 6
    procs = [subprocess.Popen([sys.executable, "-c", script, json.dumps(spec.to_dict()), str(start_at)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(5)]
    time.sleep(max(0.0, start_at - time.time() - 0.01))
    threads = [threading.Thread(target=deploy_in_thread) for _ in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    lines = [(p.communicate(timeout=400)[0].strip().splitlines() or [""])[-1] for p in procs]  # its verdict
    started = [o for o in outcomes if o.startswith("submitted")] + [line for line in lines if line.startswith("deployed")]
    assert len(started) == 1, (outcomes, lines)
    assert all(o.startswith("refused") for o in outcomes + lines if o not in started), (outcomes, lines)
    runs = {p for p in os.listdir(hook.paths.root + "/logs")}
    assert len(runs) == 1, runs  # one submission, one driver log
    record = hook.driver_record()
    wait_for(lambda: hook.status() is not None and hook.status().run_id == record.run_id, 120, "the one driver runs")
    assert len({pid for pid in hook.processes_of_run(record.run_id)}) >= 1
    stop_stream(spec)


@pytest.fixture
def full_snapshots_dir(streams):
    """A 256 KiB tmpfs mounted where the stream's snapshots go: the snapshot really runs out of space."""
    target = Path(streams.path("control", "etl", "snapshots"))
    target.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(target)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({mounted.stderr.decode().strip()}); needs root")
    try:
        # Fill it so that the snapshot's first copies fail with ENOSPC.
        with open(target / "filler", "wb") as fh:
            try:
                fh.write(b"\0" * 1024 * 1024)
            except OSError:
                pass
        yield target
    finally:
        subprocess.run(["umount", "-l", str(target)], check=False)


@pytest.mark.long(covered_by="tests/integration/test_faults.py::"
                           "test_storage_errors_on_the_control_directory_never_stop_the_stream")
def test_a_snapshot_on_a_full_disk_restarts_the_old_version_and_says_what_happened(streams, full_snapshots_dir):
    spec = streams.etl_spec()
    hook = streams.hook(spec)
    inp = streams.path("input", "etl")
    fed = [generate_events(inp, count=300, files=3, run="v1")]
    deploy_stream(spec)
    wait_for(lambda: (totals(hook, hook.driver_record().run_id) or {}).get("input_rows", 0) >= 300, 90, "v1 ran")
    events: list[dict] = []
    v2 = spec.with_version("v2", application="events_etl_v2")
    streams.hook(v2)
    runner = LifecycleRunner(v2, Action.UPGRADE, LifecycleOptions(poll_s=0.5), notify=events.append)
    record = runner.run()

    assert record.step == Step.ROLLED_BACK, (record.step, record.error)
    steps = [s["step"] for s in record.steps]
    assert steps[:5] == ["PLANNED", "CHECKED", "STOPPING", "STOPPED", "ROLLING_BACK"] and "SNAPSHOTTED" not in steps
    assert "No space left on device" in record.error and "free space" in record.error
    assert "the snapshot failed" in record.error and "v1 restarts from its checkpoint" in record.error
    assert "What is left to do: fix the cause, then run the upgrade again" in record.error
    assert [e["kind"] for e in events] == ["UPGRADE_ROLLED_BACK"] and "No space left" in events[0]["error_first_line"]
    # The old version runs again, from its untouched checkpoint, and carries on exactly once.
    assert hook.deployed()["spec"]["version"] == "v1" and hook.running_driver()
    assert not list(Path(full_snapshots_dir).glob(f"{record.id}*")), "a partial snapshot was left behind"
    fed.append(generate_events(inp, count=200, files=2, run="after", file_start_index=10))
    wait_for(lambda: set(read_etl_output(streams.path("output", "etl")).event_ids) >=
             {i for b in fed for i in b.event_ids}, 120, "v1 processes the new input")
    history = read_history(hook)
    assert history[-1]["outcome"] == "ROLLED_BACK" and history[-1]["running_version"] == "v1"
    # Through the operations API the same outcome fails the task with the whole story.
    with pytest.raises(LifecycleOutcomeError, match="upgrade of etl to v2 ended ROLLED_BACK: .*No space left"):
        from airflow_streaming.lifecycle.operations import _run

        _run(LifecycleRunner(v2, Action.UPGRADE, LifecycleOptions(poll_s=0.5)))
    stop_stream(spec)
    assert_exactly_once(streams, "etl", fed)


def test_a_user_script_whose_query_could_never_resume_is_refused_with_the_fix(streams, tmp_path):
    script = tmp_path / "no_checkpoint.py"
    out = tmp_path / "out"
    script.write_text(textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.getOrCreate()
        q = (spark.readStream.format("rate").option("rowsPerSecond", 5).load()
             .writeStream.format("parquet").option("path", {str(out)!r}).start())
        q.awaitTermination()
    """))
    spec = streams.spec("script", str(script), [])
    with pytest.raises(DriverStartError) as info:
        deploy_stream(spec)
    message = str(info.value)
    assert "neither a checkpointLocation nor a queryName" in message
    assert f".option('checkpointLocation', '{spec.checkpoint_location}')" in message and ".queryName(" in message
    hook = streams.hook(spec)
    assert hook.status().last_exception["error_class"] == "CHECKPOINT_NOT_RESUMABLE"
    assert not hook.storage.exists(hook.paths.marker), "a failed start leaves no run marker behind"
    assert hook.running_driver() is None
    assert read_history(hook)[-1]["action"] == "deploy" and read_history(hook)[-1]["outcome"] == "FAILED"
