"""Standalone CLUSTER mode on a real Spark standalone master + worker (started from pyspark's
``spark-class``; the master's REST submission server on): the driver runs on the worker, submitted,
found, checked and killed through the REST API, stopped gracefully through the run marker.

Everything here is real Spark 4.2; nothing is a stand-in. Every process is stopped by pid at the end.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import psutil
import pytest

from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlPaths, DriverRecord
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.exceptions import StreamStateUnknownError
from airflow_streaming.targets.base import LaunchPlan, Liveness
from airflow_streaming.targets.standalone import StandaloneClusterTarget
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import count_quarantined, read_etl_output
from standalone_cluster import class_archive_conf
from standalone_cluster import fetch_json as _json
from standalone_cluster import free_port
from standalone_cluster import standalone_cluster as running_cluster
from streams import current_status, totals, wait_for
import stream_actions

pytestmark = pytest.mark.spark

SECRET = "cl-s3cr3t-7a1c9e"
SLEEPER = '''
import sys, time
print("sleeper", sys.argv[1:], flush=True)
time.sleep(600)
'''


@pytest.fixture
def standalone_cluster(tmp_path):
    """A master with its REST server and a worker with 2 cores / 2 GiB (a driver and an executor fit)."""
    with running_cluster(tmp_path) as cluster:
        yield cluster


def _launch_commands(work: Path) -> str:
    return "".join(p.read_text(errors="replace").split("\n", 1)[0] for p in work.glob("driver-*/stderr"))


@pytest.mark.long(covered_by="tests/integration/test_two_hosts.py::"
                           "test_every_operation_from_a_host_that_cannot_see_the_driver")
def test_cluster_mode_deploy_stop_restart_kill_find_is_exactly_once(standalone_cluster, streams, tmp_path):
    # standalone_cluster first: pytest tears it down last, after the streams fixture has cleaned up.
    cluster = standalone_cluster
    inp = streams.path("input", "etl")
    fed = [generate_events(inp, count=300, files=3, malformed_every=20, run="c1")]
    spec = streams.etl_spec(
        master=cluster.master, deploy_mode="cluster", master_ui_url=cluster.ui,
        cluster={"rest_url": cluster.rest, "driver_memory": "512m", "driver_cores": 1},
        spark_conf={"spark.sql.shuffle.partitions": 2, "spark.ui.port": str(free_port()), "spark.cores.max": "1",
                    "spark.executor.memory": "512m", **class_archive_conf(), "spark.hadoop.airflow.streaming.test.password": SECRET})
    hook = streams.hook(spec)

    record = stream_actions.submit(hook)
    assert record.target == "standalone-cluster" and record.submit_pid is None
    assert record.handle["submission_id"].startswith("driver-") and record.handle["rest_url"] == cluster.rest
    doc = hook.wait_until_ready(record)
    assert doc.app_id.startswith("app-")
    # The driver runs on the worker: its Python process is the child of the worker's DriverWrapper JVM.
    assert "org.apache.spark.deploy.worker.DriverWrapper" in psutil.Process(doc.pid).parent().cmdline()
    # The secret reached the driver's SparkConf (Spark's UI shows it redacted) and no command line.
    assert doc.spark_ui, doc  # a loaded machine can take seconds to answer the UI's first REST call
    env = wait_for(lambda: _json(f"{doc.spark_ui}/api/v1/applications/{doc.app_id}/environment", timeout=10), 60,
                   "the driver's Spark UI REST API")
    assert ["spark.hadoop.airflow.streaming.test.password", "*********(redacted)"] in env.get("sparkProperties", [])
    assert all(SECRET not in " ".join(p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"]))
    assert f'"--run-id" "{record.run_id}"' in _launch_commands(cluster.work_dir)
    assert SECRET not in _launch_commands(cluster.work_dir) and SECRET not in record.command

    # find: through the record, and from the master alone (adopt: as if the record had never been written). A
    # driver counts only as this stream's: the target serves the stream's own control directory (issue 35).
    assert hook.processes_of_run(record.run_id)
    blind = StandaloneClusterTarget(LocalStorage(), ControlPaths(hook.paths.root),
                                    {"rest_url": cluster.rest, "master_ui_url": cluster.ui}, master=cluster.master)
    assert any(record.handle["submission_id"] in d for d in blind.find(record.run_id)), blind.find(record.run_id)
    assert blind.find("20990101T000000Z-00000000") == []
    # adopt: the one submission of the run, as the master and its worker identify it (a record never written).
    adopted = blind.adopt(record.run_id)
    assert adopted is not None and adopted["submission_id"] == record.handle["submission_id"], adopted
    assert blind.adopt("20990101T000000Z-00000000") is None
    links = hook.target_of(record).urls(record)
    assert links["driver_log"].endswith(f"driverId={record.handle['submission_id']}&logType=stdout")

    lines1 = fed[0].valid + fed[0].malformed
    wait_for(lambda: (totals(hook, record.run_id) or {}).get("input_rows", 0) >= lines1, 120, "phase 1 processed")

    # Graceful stop through the run marker (never through the target), while more input arrives.
    fed.append(generate_events(inp, count=200, files=4, malformed_every=20, run="c2", file_start_index=10))
    report = stream_actions.stop(hook)
    assert report.graceful and not report.killed and report.exit_code == contract.EXIT_GRACEFUL, report.to_dict()
    assert report.position.clean
    assert hook.target_of(record).state(record).cluster_state == "FINISHED"
    last_committed = report.position.last_committed

    # Restart from the checkpoint: it continues with the next batch id.
    fed.append(generate_events(inp, count=250, files=2, malformed_every=20, run="c3", file_start_index=20))
    record2 = stream_actions.submit(hook)
    doc2 = hook.wait_until_ready(record2)
    all_ids = {i for batch in fed for i in batch.event_ids}
    wait_for(lambda: set(read_etl_output(streams.path("output", "etl")).event_ids) >= all_ids, 180,
             "phases 2-3 in the output")
    assert current_status(hook, record2.run_id).queries[0].recent_progress[0]["batchId"] == last_committed + 1

    # Hard kill through the REST API: the driver is KILLED and its Python process goes too.
    started = time.monotonic()
    outcome = stream_actions.kill(hook, record2)
    assert f"kill of {record2.handle['submission_id']}" in outcome and "KILLED" in outcome, outcome
    assert "launch command on the worker carries the run id" in outcome
    assert hook.target_of(record2).state(record2).liveness == Liveness.GONE
    wait_for(lambda: not psutil.pid_exists(doc2.pid), 60, "the killed run's Python driver to exit")
    print(f"kill -> KILLED and the Python driver gone in {time.monotonic() - started:.1f}s")

    # Restart after the kill: the lease came free, the stream resumes; more input, then a graceful stop.
    fed.append(generate_events(inp, count=150, files=2, malformed_every=20, run="c4", file_start_index=30))
    record3 = stream_actions.submit(hook)
    hook.wait_until_ready(record3)
    all_ids = {i for batch in fed for i in batch.event_ids}
    wait_for(lambda: set(read_etl_output(streams.path("output", "etl")).event_ids) >= all_ids, 180,
             "phase 4 in the output")
    report3 = stream_actions.stop(hook)
    assert report3.graceful and report3.position.clean, report3.to_dict()

    # Nothing lost, nothing duplicated; every malformed line quarantined once.
    output = read_etl_output(streams.path("output", "etl"))
    assert output.duplicates == {}
    assert set(output.event_ids) == all_ids and output.rows == len(all_ids) == sum(b.valid for b in fed)
    assert count_quarantined(streams.path("quarantine", "etl")) == sum(b.malformed for b in fed)


def _sleeper_plan(tmp_path: Path, run_id: str) -> LaunchPlan:
    """A driver of stream ``sleeper`` (control directory ``<tmp>/sleeper``): its launch command carries the run
    id, the stream and the control directory, as the launcher's does - what a kill checks (issue 35)."""
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    return LaunchPlan(run_id=run_id, name=f"sleeper:{run_id}", master="", deploy_mode="cluster",
                      launcher=str(script), conf={"spark.driver.memory": "512m"},
                      runtime_args=["--stream", "sleeper", "--run-id", run_id, "--control-dir", str(tmp_path / "sleeper")],
                      env={"PYSPARK_PYTHON": sys.executable}, log_path="")


def _record(run_id: str, handle: dict) -> DriverRecord:
    return DriverRecord(run_id=run_id, stream="sleeper", version="v1", application="sleeper", host="h", command="",
                        log_path="", submitted_at=time.time(), checkpoint_location="/x", target="standalone-cluster",
                        handle=handle)


def test_kill_refuses_another_submission_and_an_unreachable_master_is_unknown(standalone_cluster, tmp_path):
    cluster = standalone_cluster
    target = StandaloneClusterTarget(LocalStorage(), ControlPaths(str(tmp_path / "sleeper")),
                                     {"rest_url": cluster.rest, "master_ui_url": cluster.ui}, master=cluster.master)
    run_a, run_b = "20261123T000000Z-aaaaaaaa", "20261123T000000Z-bbbbbbbb"
    record_a = _record(run_a, target.submit(_sleeper_plan(tmp_path, run_a)))
    record_b = _record(run_b, target.submit(_sleeper_plan(tmp_path, run_b)))
    for rec in (record_a, record_b):
        wait_for(lambda rec=rec: target.state(rec).cluster_state == "RUNNING", 90, f"{rec.run_id} RUNNING")
    wait_for(lambda: f'"--run-id" "{run_b}"' in _launch_commands(cluster.work_dir), 30, "B's launch command")

    # A record of run A that points at B's submission: refused, B keeps running.
    forged = dataclasses.replace(record_a, handle={**record_a.handle, "submission_id": record_b.handle["submission_id"]})
    outcome = target.kill(forged, grace=3)
    assert outcome.startswith(f"refusing to kill {record_b.handle['submission_id']}"), outcome
    assert f"carries run {run_b}" in outcome
    time.sleep(2)
    assert target.state(record_b).cluster_state == "RUNNING"
    # find tells them apart (no records: from the master and the launch commands).
    assert [d for d in target.find(run_b) if record_b.handle["submission_id"] in d]
    assert not [d for d in target.find(run_a) if record_b.handle["submission_id"] in d]

    # The right record kills B only.
    assert "KILLED" in target.kill(record_b, grace=10)
    assert target.state(record_b).cluster_state == "KILLED" and target.state(record_a).cluster_state == "RUNNING"

    # The master goes away: A's state is UNKNOWN (never GONE), kill says so without raising, find raises.
    cluster.stop_master()
    state = target.state(record_a)
    assert state.liveness == Liveness.UNKNOWN and cluster.rest in state.detail, state
    assert "spark.master.rest.enabled" in state.detail
    assert target.kill(record_a, grace=1).startswith("cannot kill")
    with pytest.raises(StreamStateUnknownError):
        target.find(run_a)
