"""A hot standby takes over a CLUSTER-MODE driver that crashed on another worker host, on the standalone master's
word (issue 36), on a REAL standalone master and two workers (``tests/standalone_cluster.py``).

"Another host": worker B runs in a UTS namespace of its own named ``host-b`` (``unshare --uts``), so the
cluster-mode driver it starts (its DriverWrapper JVM and Python driver) says ``host-b`` in its lease; worker C
runs on this host's name. Placement by cores: B has one core, so the active driver (``driver_cores`` 1) is
placed there while B is the only worker; C (3 cores) joins after, and takes the active driver's executor, then
the hot standby's driver and its executor - B has no core left. Both drivers are submitted by the product
(``stream_actions.submit``: the master's REST API), the standby exactly as PREPARE_STANDBY submits it: its
launch plan names the master's REST server, whose word about the ACTIVE run's recorded submission is the
proof. The workers share the network and PID namespaces with this process (their host names differ only).

The active driver's host crashes: its DriverWrapper JVM and Python driver are SIGKILLed mid-batch. The worker
reports the submission FAILED to the master; the standby takes over at once on that word
(``submission_ended``), long before the lease's 120 s ttl; the supervisor records the failover once; the sink
holds exactly what was fed.
"""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from airflow_streaming.control import contract
from airflow_streaming.lifecycle.stored import read_history
from airflow_streaming.lifecycle.supervisor import supervise
from airflow_streaming.supervision.policy import RestartPolicy
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from standalone_cluster import class_archive_conf, free_port, standalone_cluster
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark

HOST_B = "host-b"
POLICY = RestartPolicy(max_attempts=3, backoff_initial_s=1, backoff_max_s=5)


def crash(pid: int) -> list[int]:
    """SIGKILL the cluster-mode driver whose Python process is ``pid``: its DriverWrapper JVM (the parent) and
    everything under it - what a crash of its host leaves of it. The pids killed."""
    python = psutil.Process(pid)
    jvm = python.parent()
    assert "org.apache.spark.deploy.worker.DriverWrapper" in " ".join(jvm.cmdline())
    doomed = [jvm, *jvm.children(recursive=True)]
    for proc in doomed:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(doomed, timeout=30)
    return [p.pid for p in doomed]


@pytest.fixture
def cluster_with_worker_b(tmp_path):
    """A master and worker B (1 core, in its UTS namespace ``host-b``). A fixture named before ``streams``, so
    that pytest stops it last: the streams' cleanup still reaches the master."""
    if subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot create a UTS namespace here (unshare --uts)")
    (tmp_path / "cluster").mkdir()
    with standalone_cluster(tmp_path / "cluster", cores=1, memory="1g", worker_host_name=HOST_B) as cluster:
        yield cluster


def driver_output(cluster_dir: Path, submission_id: str) -> str:
    """What a cluster-mode driver printed (its worker keeps it in ``<work dir>/<submission id>/stdout``)."""
    return "".join(p.read_text(errors="replace") for p in cluster_dir.glob(f"work*/{submission_id}/stdout"))


def test_a_cluster_mode_driver_on_another_worker_killed_is_taken_over_on_the_masters_word(cluster_with_worker_b,
                                                                                          streams, tmp_path):
    cluster = cluster_with_worker_b
    name = "xworker"
    inp, out = streams.path("input", name), streams.path("output", name)
    spec = streams.spec(
        name, "events_etl", ["--input", inp, "--output", out, "--quarantine", streams.path("quarantine", name),
                             "--max-files-per-trigger", "1"],
        hot_standby=True, master=cluster.master, deploy_mode="cluster", master_ui_url=cluster.ui,
        cluster={"rest_url": cluster.rest, "driver_memory": "512m", "driver_cores": 1},
        spark_conf={"spark.sql.shuffle.partitions": 2, "spark.ui.port": str(free_port()), "spark.cores.max": "1",
                    "spark.executor.memory": "512m", **class_archive_conf()})
    hook = streams.hook(spec)
    fed = generate_events(inp, count=3000, files=30, run=name)

    active = stream_actions.submit(hook)  # B is the only worker: the driver is placed there
    submission = active.handle["submission_id"]
    wait_for(lambda: any(d.get("id") == submission and d.get("state") == "RUNNING"
                         for d in (cluster.master_json() or {}).get("activedrivers", [])), 120,
             "the active driver RUNNING on worker B")
    cluster.add_worker(cores=3, memory="3g")  # C: the executors and the standby's driver
    doc = hook.wait_until_ready(active)
    wait_for(lambda: (d := hook.status()) and d.run_id == active.run_id and d.totals["batches"] >= 1, 240,
             "the active driver's first batch", interval=0.5)
    lease = contract.read_lease(hook.storage, hook.paths)
    assert (lease.run_id, lease.host) == (active.run_id, HOST_B), lease

    standby = stream_actions.prepare_hot_standby(hook)
    assert "--master-rest-url" in standby.command and standby.handle["submission_id"] != submission
    wait_for(lambda: (hook.hot_standby_state() or {}).get("state") == "READY", 240, "the hot standby READY")
    assert contract.read_lease(hook.storage, hook.paths).run_id == active.run_id  # it touched nothing

    # More input now: the first may all be processed while the standby prepared (slower on a busy machine).
    fed2 = generate_events(inp, count=1000, files=10, run=f"{name}-2")
    wait_for(lambda: (d := hook.status()) and d.run_id == active.run_id and d.queries and
             d.queries[0].status.get("isTriggerActive"), 60, "a batch in flight", interval=0.05)
    killed = time.monotonic()
    crash(doc.pid)
    wait_for(lambda: hook.driver_record().run_id == standby.run_id, 60, "the takeover", interval=0.05)
    took_over = time.monotonic() - killed
    wait_for(lambda: (d := hook.status()) and d.run_id == standby.run_id and d.totals["batches"] >= 1, 120,
             "the standby's first committed batch", interval=0.05)
    first_batch = time.monotonic() - killed
    lease = contract.read_lease(hook.storage, hook.paths)
    print(f"cluster-mode crash on worker B -> takeover on worker C on the master's word: {took_over:.2f} s; "
          f"-> the standby's first committed batch: {first_batch:.2f} s (lease ttl {lease.ttl:.0f} s)")
    assert took_over < 30, took_over  # the lease alone: at least its 120 s ttl
    assert (lease.run_id, lease.host) == (standby.run_id, socket.gethostname()), lease
    marker = contract.read_marker(hook.storage, hook.paths)
    assert marker["run_id"] == standby.run_id and marker["took_over_from"] == active.run_id
    log = driver_output(tmp_path / "cluster", standby.handle["submission_id"])
    assert f"submission_ended: the master says submission {submission} is FAILED" in log, log[-3000:]

    events: list[dict] = []
    recorded = supervise(hook, POLICY, events.append)
    assert recorded.action == "FAILED_OVER" and events[-1]["kind"] == "FAILED_OVER", recorded
    failovers = [e for e in read_history(hook) if e["action"] == "failover"]
    assert [(e["old_run_id"], e["new_run_id"]) for e in failovers] == [(active.run_id, standby.run_id)]

    wait_for(lambda: set(read_etl_output(out).event_ids) >= set(fed.event_ids) | set(fed2.event_ids), 300,
             "all input processed")
    assert stream_actions.stop(hook).graceful
    assert [e for e in read_history(hook) if e["action"] == "failover"] == failovers  # recorded once
    output = read_etl_output(out)
    assert output.duplicates == {} and output.rows == fed.valid + fed2.valid  # nothing lost, nothing duplicated
