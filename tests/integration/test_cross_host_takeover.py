"""A hot standby takes over a crashed driver on ANOTHER host on the standalone master's word (issue 36), on a
REAL standalone master and worker (``tests/standalone_cluster.py``) with both drivers in client mode.

"Another host": the active driver is submitted (``stream_actions.submit``, the product's own submission) from
a process in its own UTS namespace (``unshare --uts``) named ``host-b``. Its spark-submit, JVM and Python
driver inherit that namespace: ``socket.gethostname()`` is ``host-b`` in the driver, so its lease and its
driver record say ``host-b``, while the hot standby (submitted from this test process, as the supervisor's
PREPARE_STANDBY does) runs on this host's name. The two share the network, PID and mount namespaces: the
standby's own check "a process of the run is alive here" still sees the active driver while it lives (the
safe side), and once it is SIGKILLed neither its pid nor its host can prove anything to the standby - only
the lease (ttl 120 s) or the master's word can. tests/integration/test_two_hosts.py separates network and
PID too; the proof asked for here needs only the lease's host to differ.

- SIGKILL of the active driver mid-batch: the standby takes over on the master's word
  (``application_ended``) in seconds, not after the ttl; its first committed batch time is printed; the
  supervisor records the takeover once (history ``failover``); the sink holds exactly what was fed.
- the master stopped, then the active driver SIGKILLed: no word, so the standby waits (the lease is within
  its ttl) - it has not taken over 25 s later, many times the positive case's takeover time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_streaming.control import contract
from airflow_streaming.lifecycle.stored import read_history
from airflow_streaming.lifecycle.supervisor import supervise
from airflow_streaming.supervision.policy import RestartPolicy
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from standalone_cluster import class_archive_conf, standalone_cluster
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
HOST_B = "host-b"
POLICY = RestartPolicy(max_attempts=3, backoff_initial_s=1, backoff_max_s=5)

SUBMIT_ON_B = """
import json, socket, subprocess, sys
subprocess.run(["hostname", sys.argv[2]], check=True)  # this UTS namespace only
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/tests"]
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec
import stream_actions
record = stream_actions.submit(SparkStreamHook(StreamSpec.from_dict(json.loads(sys.argv[1]))))
print(json.dumps({"run_id": record.run_id, "pid": record.submit_pid, "host": record.host,
                  "hostname": socket.gethostname()}), flush=True)
"""


def submit_on_host_b(spec) -> dict:
    """Submit the stream's active driver from ``host-b`` (a UTS namespace): its record, as B printed it."""
    if subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot create a UTS namespace here (unshare --uts)")
    done = subprocess.run(["unshare", "--uts", sys.executable, "-c", SUBMIT_ON_B, json.dumps(spec.to_dict()), HOST_B,
                           str(REPO)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def cluster_dir(tmp_path: Path) -> Path:
    (tmp_path / "cluster").mkdir()
    return tmp_path / "cluster"


def kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def active_and_standby(streams, cluster, name: str):
    """A client-mode stream on ``cluster`` whose active driver runs on host B, and its hot standby READY on
    this host. Returns the hook, the fed events, the output path, B's record and the standby's run id."""
    inp, out = streams.path("input", name), streams.path("output", name)
    conf = {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false", "spark.cores.max": "1",
            "spark.executor.memory": "512m", **class_archive_conf()}
    spec = streams.spec(name, "events_etl", ["--input", inp, "--output", out, "--quarantine",
                                             streams.path("quarantine", name), "--max-files-per-trigger", "1"],
                        hot_standby=True, master=cluster.master, deploy_mode="client", master_ui_url=cluster.ui,
                        spark_conf=conf)
    hook = streams.hook(spec)
    fed = generate_events(inp, count=3000, files=30, run=name)
    b = submit_on_host_b(spec)
    assert (b["host"], b["hostname"]) == (HOST_B, HOST_B), b
    return hook, fed, out, b


def wait_active_running(hook, b) -> None:
    wait_for(lambda: (d := hook.status()) and d.run_id == b["run_id"] and d.totals["batches"] >= 1 and d.app_id,
             240, "host B's driver running on the cluster", interval=0.5)
    lease = contract.read_lease(hook.storage, hook.paths)
    assert (lease.run_id, lease.host) == (b["run_id"], HOST_B)


def prepare_standby(hook) -> str:
    """The standby as PREPARE_STANDBY submits it (its launch plan names the master), READY."""
    standby = stream_actions.submit(hook, standby=True, failover=True)
    assert "--master-ui-url" in standby.command  # the master of the stream's own spec
    wait_for(lambda: (hook.hot_standby_state() or {}).get("state") == "READY", 240, "the hot standby READY")
    return standby.run_id


@pytest.mark.long(covered_by="bench/cross_host_bench.py --smoke")
def test_a_client_driver_on_another_host_killed_is_taken_over_on_the_masters_word(streams, tmp_path):
    with standalone_cluster(cluster_dir(tmp_path), cores=2, memory="3g") as cluster:
        hook, fed, out, b = active_and_standby(streams, cluster, "xhost")
        try:
            wait_active_running(hook, b)
            standby = prepare_standby(hook)
            assert contract.read_lease(hook.storage, hook.paths).run_id == b["run_id"]  # it touched nothing

            wait_for(lambda: (d := hook.status()) and d.run_id == b["run_id"] and d.queries and
                     d.queries[0].status.get("isTriggerActive"), 60, "a batch in flight", interval=0.05)
            killed = time.monotonic()
            kill_group(b["pid"])  # host B's driver: spark-submit, its JVM and Python, no goodbye
            wait_for(lambda: hook.driver_record().run_id == standby, 60, "the takeover", interval=0.05)
            took_over = time.monotonic() - killed
            wait_for(lambda: (d := hook.status()) and d.run_id == standby and d.totals["batches"] >= 1, 60,
                     "the standby's first committed batch", interval=0.05)
            first_batch = time.monotonic() - killed
            print(f"cross-host crash -> takeover on the master's word: {took_over:.2f} s; -> first batch committed "
                  f"by the hot standby: {first_batch:.2f} s (lease ttl {contract.read_lease(hook.storage, hook.paths).ttl:.0f} s)")
            assert took_over < 30, took_over  # the lease alone: at least its 120 s ttl
            marker = contract.read_marker(hook.storage, hook.paths)
            assert marker["run_id"] == standby and marker["took_over_from"] == b["run_id"]
            log = Path(hook.driver_log_path(standby)).read_text(errors="replace")
            assert "application_ended" in log, log[-3000:]  # the proof was the master's word, not the lease

            events: list[dict] = []
            recorded = supervise(hook, POLICY, events.append)
            assert recorded.action == "FAILED_OVER" and events[-1]["kind"] == "FAILED_OVER", recorded
            failovers = [e for e in read_history(hook) if e["action"] == "failover"]
            assert [(e["old_run_id"], e["new_run_id"]) for e in failovers] == [(b["run_id"], standby)]

            wait_for(lambda: set(read_etl_output(out).event_ids) >= set(fed.event_ids), 240, "all input processed")
            assert stream_actions.stop(hook).graceful
            assert [e for e in read_history(hook) if e["action"] == "failover"] == failovers  # recorded once
            output = read_etl_output(out)
            assert output.duplicates == {} and output.rows == fed.valid  # nothing lost, nothing duplicated
        finally:
            kill_group(b["pid"])


@pytest.mark.long(covered_by="tests/integration/test_partition_standby.py::"
                           "test_c_a_standby_cut_from_the_active_drivers_host_never_takes_over")
def test_without_the_masters_word_a_standby_waits_for_the_lease(streams, tmp_path):
    with standalone_cluster(cluster_dir(tmp_path), cores=2, memory="3g") as cluster:
        hook, fed, out, b = active_and_standby(streams, cluster, "xhostnw")
        try:
            wait_active_running(hook, b)
            standby = prepare_standby(hook)
            cluster.stop_master()  # the master unreachable: no word at all
            kill_group(b["pid"])
            killed = time.monotonic()
            wait_for(lambda: not hook.processes_of_run(b["run_id"]), 30, "host B's driver gone")
            while time.monotonic() - killed < 25:
                assert hook.driver_record().run_id == b["run_id"], "taken over without proof"
                assert contract.read_lease(hook.storage, hook.paths).run_id == b["run_id"]
                time.sleep(0.2)
            assert hook.hot_standby_state()["state"] == "READY"
            lease = contract.read_lease(hook.storage, hook.paths)
            assert time.time() - lease.renewed_at < lease.ttl  # the ttl would decide; it has not passed
            log = Path(hook.driver_log_path(standby)).read_text(errors="replace")
            assert "application_ended" not in log and "took over" not in log
        finally:
            kill_group(b["pid"])
            record = hook.standby_record()
            if record is not None:  # by its pids on this host
                stream_actions.kill(hook, record, 5, keep_marker=True)
            raw = hook.storage.read_bytes(hook.paths.driver)  # B's record: this host cannot kill it (UNKNOWN)
            if raw is not None and b["run_id"].encode() in raw and not hook.processes_of_run(b["run_id"]):
                hook.storage.unguarded.compare_and_swap(hook.paths.driver, raw, None)
