"""Every operation from any host (issue 12): the host that deploys a stream and the host that operates
it afterwards are different, and the second cannot see the driver's processes.

- Host A is this test process (the root namespaces). It starts a REAL Spark standalone master and
  worker (pyspark's ``spark-class``, REST submission server on; ``tests/standalone_cluster.py``) and the
  WebHDFS-protocol STAND-IN for a NameNode (``tests/webhdfs_standin.py``; no real NameNode can run on
  these machines), all listening on A's end of a veth pair, and deploys the stream through the
  lifecycle in standalone CLUSTER mode: the driver runs on the worker.
- Host B is a long-lived process (``tests/two_hosts_agent.py``) in its own network, UTS, PID and mount
  namespaces (``unshare --net --uts --pid --fork --mount-proc``): its own hostname, its own ``/proc``
  (the driver's pids do not exist there), its own loopback and ``/etc/hosts``; it reaches A only at
  A's veth address. From B, in order: watch (health verdict, status), graceful stop (the run marker),
  restart (lifecycle RESTART), upgrade to v2 through the compatibility gate (which runs as a short
  driver on the cluster - where the checkpoint and the job are - submitted from B, reading the
  checkpoint through the driver's Hadoop FileSystem), hard kill through the cluster manager, deploy
  again, graceful stop. The worker has 4 cores: the stream's driver and executor, and the gate's.

The control files and the checkpoint live on the stand-in (``webhdfs://``). The stream's input,
output and quarantine are local directories: the file system is shared by both "hosts", like an NFS
mount (B's mount namespace only replaces ``/proc`` and ``/etc/hosts``). Input is fed in phases around
every operation; at the end the sink's output is exactly what was fed - nothing lost, nothing
duplicated. Stop and kill latencies (request -> driver gone) are measured from B and printed.

Everything the test starts (master, worker, stand-in, host B, the veth pair) is stopped or removed
by pid/name at the end, also on failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from airflow_streaming.control.process import process_start_time
from airflow_streaming.lifecycle.operations import deploy_stream
from airflow_streaming.lifecycle.runner import LifecycleOptions
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import count_quarantined, read_etl_output
from standalone_cluster import Cluster, class_archive_conf, free_port, standalone_cluster
from streams import wait_for
from webhdfs_standin import WebHdfsStandIn

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
AGENT = REPO / "tests" / "two_hosts_agent.py"
HOST_B = "stream-ops-b"
RESULT = "@@RESULT "


# --------------------------------------------------------------------------- host B
class HostB:
    """The agent process in B's namespaces: one JSON command per line in, one result line out."""

    def __init__(self, proc: subprocess.Popen, log: Path):
        self.proc, self.log = proc, log
        self.answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self.pending: str | None = None
        self.seconds = 0.0
        threading.Thread(target=self._read, name="host-b-reader", daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            if line.startswith(RESULT):
                self.answers.put(json.loads(line[len(RESULT):]))

    def send(self, op: str, **args: Any) -> None:
        assert self.pending is None, f"host B is still busy with {self.pending}"
        self.pending = op
        self.proc.stdin.write(json.dumps({"op": op, "args": args}) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def ready(self) -> bool:
        return not self.answers.empty()

    def result(self, timeout: float) -> Any:
        op, self.pending = self.pending, None
        try:
            answer = self.answers.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"host B did not answer {op} within {timeout:.0f}s; its log:\n{self.tail()}") from None
        if not answer["ok"]:
            raise AssertionError(f"host B: {op} failed: {answer['error']}\n{answer['traceback']}\n"
                                 f"its log:\n{self.tail()}")
        self.seconds = float(answer["seconds"])  # how long the last operation took on B
        return answer["value"]

    def call(self, op: str, timeout: float = 60, **args: Any) -> Any:
        self.send(op, **args)
        return self.result(timeout)

    def tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # unshare --kill-child takes B's pid namespace with it
        self.proc.wait(timeout=30)


@dataclass
class TwoHosts:
    a_ip: str
    b_ip: str
    b: HostB
    cluster: Cluster
    nn: WebHdfsStandIn


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def _nsenter_ip(pid: int, *args: str) -> None:
    done = subprocess.run(["nsenter", "-t", str(pid), "-n", "ip", *args], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"ip {' '.join(args)} in host B: {done.stderr}"


def _free_subnet() -> int:
    used = _ip("-o", "-4", "addr").stdout
    return next(x for x in range(256) if f" 10.213.{x}." not in used)


@contextlib.contextmanager
def _host_b(tmp_path: Path) -> Any:
    """Host B's process and the veth pair between it and this host; (a_ip, b_ip, HostB). Skips the test
    when namespaces or veth pairs cannot be made here."""
    if os.geteuid() != 0:
        pytest.skip("two hosts need network/UTS/PID namespaces and a veth pair: run as root")
    missing = [tool for tool in ("unshare", "nsenter", "ip", "mount") if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"two hosts need {', '.join(missing)} (util-linux, iproute2)")
    subnet = _free_subnet()
    a_ip, b_ip = f"10.213.{subnet}.1", f"10.213.{subnet}.2"
    veth_a, veth_b = f"th{os.getpid() % 100000}a", f"th{os.getpid() % 100000}b"
    hosts = tmp_path / "host-b.hosts"
    hosts.write_text(f"127.0.0.1 localhost {HOST_B}\n{a_ip} {socket.gethostname()}\n")
    log = tmp_path / "host-b.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), str(REPO / "tests"), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])}
    proc = subprocess.Popen(
        ["unshare", "--net", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child",
         sys.executable, "-u", str(AGENT), HOST_B, str(hosts)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log, "wb"), env=env, text=True,
        start_new_session=True)
    b = HostB(proc, log)
    veth_made = False
    try:
        own_net = os.readlink("/proc/self/ns/net")

        def in_own_namespace() -> bool:
            try:
                return proc.poll() is not None or os.readlink(f"/proc/{proc.pid}/ns/net") != own_net
            except OSError:
                return False

        wait_for(in_own_namespace, 15, "host B's network namespace")
        if proc.poll() is not None:
            pytest.skip(f"cannot create namespaces here (unshare exited {proc.returncode}): {b.tail(5)}")
        _ip("link", "del", veth_a)  # a leftover of a crashed run with this pid's names
        made = _ip("link", "add", veth_a, "type", "veth", "peer", "name", veth_b)
        if made.returncode != 0:
            pytest.skip(f"cannot create a veth pair here: {made.stderr.strip()}")
        veth_made = True
        for args in (("addr", "add", f"{a_ip}/24", "dev", veth_a), ("link", "set", veth_a, "up"),
                     ("link", "set", veth_b, "netns", str(proc.pid))):
            done = _ip(*args)
            assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}"
        _nsenter_ip(proc.pid, "addr", "add", f"{b_ip}/24", "dev", veth_b)
        _nsenter_ip(proc.pid, "link", "set", veth_b, "up")
        _nsenter_ip(proc.pid, "link", "set", "lo", "up")
        yield a_ip, b_ip, b
    finally:
        b.close()
        if veth_made:
            _ip("link", "del", veth_a)  # gone already if B's namespace took its peer with it


@pytest.fixture
def two_hosts(tmp_path, monkeypatch):
    """Host B, then the master + worker and the stand-in on host A's veth address (requested before
    ``streams``, so that they outlive the drivers' cleanup)."""
    monkeypatch.setenv("AIRFLOW_STREAMING_LOG_DIR", str(tmp_path / "driver-logs"))
    with contextlib.ExitStack() as stack:
        a_ip, b_ip, b = stack.enter_context(_host_b(tmp_path))
        cluster = stack.enter_context(standalone_cluster(tmp_path, host=a_ip, cores=4, memory="3g"))
        nn = stack.enter_context(WebHdfsStandIn(str(tmp_path / "hdfs"), host=a_ip))
        yield TwoHosts(a_ip, b_ip, b, cluster, nn)


# --------------------------------------------------------------------------- the test
def exited(pid: int, started: float | None) -> bool:
    """The process that had start time ``started`` is gone or a zombie. The killed driver JVM's Python child
    is orphaned, and this machine's pid 1 reaps orphans only now and then: a zombie has exited, though its pid
    still exists. With ``pid_max`` 32768 and the suite's JVMs starting hundreds of threads (thread ids share
    the pid space, and ``/proc/<tid>/stat`` opens), a pid can name another process or thread within a minute:
    only the same start time is the same process."""
    now = process_start_time(pid)
    return now is None or now != started


def describe_process(pid: int, started: float | None, role: str) -> str:
    """What a process that should have exited is doing: its state, parent, threads, kernel wait channel, and
    the names of its threads (a Python process's watchdog, a JVM's shutdown hooks)."""
    if exited(pid, started):
        return f"{role} {pid}: exited"
    try:
        with open(f"/proc/{pid}/status") as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
        with open(f"/proc/{pid}/wchan") as fh:
            wchan = fh.read().strip()
        threads = []
        for tid in sorted(os.listdir(f"/proc/{pid}/task"))[:40]:
            with open(f"/proc/{pid}/task/{tid}/stat") as fh:
                stat = fh.read()
            threads.append(f"{stat[stat.index('(') + 1:stat.rindex(')')]}:{stat[stat.rindex(')') + 2]}")
        return (f"{role} {pid} alive: state {fields.get('State', '?').strip()}, ppid {fields.get('PPid', '?').strip()}, "
                f"{fields.get('Threads', '?').strip()} threads, wchan {wchan}, threads {threads}")
    except OSError as exc:
        return f"{role} {pid}: {exc}"


def test_every_operation_from_a_host_that_cannot_see_the_driver(two_hosts, streams):
    began = time.monotonic()
    env = two_hosts
    b, cluster, nn = env.b, env.cluster, env.nn
    host_a = socket.gethostname()
    inp, out, quarantine = (streams.path("input", "etl"), streams.path("output", "etl"),
                            streams.path("quarantine", "etl"))
    spec = streams.etl_spec(
        control_location=f"{nn.uri}/control", checkpoint_location=f"{nn.uri}/checkpoints/etl",
        master=cluster.master, deploy_mode="cluster", master_ui_url=cluster.ui,
        cluster={"rest_url": cluster.rest, "driver_memory": "512m", "driver_cores": 1},
        spark_conf={"spark.sql.shuffle.partitions": 2, "spark.ui.port": str(free_port(env.a_ip)),
                    "spark.cores.max": "1", "spark.executor.memory": "512m", **class_archive_conf()})
    v2 = spec.with_version("v2", application="events_etl_v2")
    hook = streams.hook(spec)
    streams.hook(v2)  # for the cleanup
    fed = []

    def feed(tag: str, count: int = 120, files: int = 2) -> None:
        fed.append(generate_events(inp, count=count, files=files, malformed_every=20, run=tag,
                                   file_start_index=10 * len(fed)))

    def all_ids() -> set[str]:
        return {i for batch in fed for i in batch.event_ids}

    def processed(timeout: float, what: str) -> None:
        wait_for(lambda: set(read_etl_output(out).event_ids) >= all_ids(), timeout, what)

    def lifecycle_step() -> str | None:
        try:
            return json.loads(Path(nn.local("/control/etl/lifecycle.json")).read_text()).get("step")
        except (OSError, ValueError):
            return None

    def feeding_in_probation(tag: str, timeout: float) -> Any:
        """Wait for B's lifecycle action; feed ``tag`` once the new run is in probation (or when it ended)."""
        deadline = time.monotonic() + timeout
        fed_now = False
        while not b.ready() and time.monotonic() < deadline:
            if not fed_now and lifecycle_step() == "PROBATION":
                feed(tag)
                fed_now = True
            time.sleep(0.5)
        if not fed_now:
            feed(tag)
        return b.result(max(1.0, deadline - time.monotonic()))

    def submission_state(submission_id: str) -> str | None:
        doc = cluster.master_json() or {}
        for driver in (doc.get("activedrivers") or []) + (doc.get("completeddrivers") or []):
            if driver.get("id") == submission_id:
                return driver.get("state")
        return None

    # ---- host B is another host: own hostname, own namespaces, reaches A only at A's veth address
    me = b.call("whoami")
    assert me["hostname"] == HOST_B != host_a
    for kind in ("net", "uts", "pid", "mnt"):
        assert me["ns"][kind] != os.readlink(f"/proc/self/ns/{kind}"), kind
    assert me["pid"] == 1 and env.b_ip in me["addresses"] and env.a_ip not in me["addresses"]
    reach = b.call("reach", urls=[f"{cluster.ui}/json/", f"{nn.url}/webhdfs/v1/?op=GETFILESTATUS"])
    assert set(reach.values()) == {200}, reach

    # ---- host A deploys (lifecycle DEPLOY); the driver runs on the worker
    feed("p1-before-deploy", 200)
    started = time.monotonic()
    identity = deploy_stream(spec, LifecycleOptions(poll_s=0.5))
    deploy_a_s = time.monotonic() - started
    record = hook.driver_record()
    assert identity["run_id"] == record.run_id and identity["target"] == "standalone-cluster"
    assert record.host == host_a and record.submit_pid is None
    processed(180, "phase 1 in the output")
    doc = hook.status()
    driver = psutil.Process(doc.pid)  # host A sees the Python driver and its JVM (DriverWrapper on the worker)
    jvm = driver.parent()
    assert "org.apache.spark.deploy.worker.DriverWrapper" in jvm.cmdline()
    doc_started = process_start_time(doc.pid)

    # ---- (1) B watches: health verdict and status, without seeing any process of the driver
    feed("p2-after-deploy")
    processed(120, "phase 2 in the output")
    probe = b.call("probe", pids=[doc.pid, jvm.pid], run_id=record.run_id)
    assert probe["pids"] == {str(doc.pid): None, str(jvm.pid): None}, probe
    assert not any(probe["psutil_exists"].values()) and probe["processes_with_run_id"] == [], probe
    assert probe["process_count"] < 10, probe  # B's /proc: B's own processes only
    # On remote storage the status document is written with the next heartbeat, not on every progress
    # event: it may lag the sink by a heartbeat.
    fed_rows = sum(f.valid + f.malformed for f in fed)
    wait_for(lambda: (d := hook.status()) is not None and d.totals["input_rows"] >= fed_rows, 60,
             "the status document counting every fed row")
    watch = b.call("watch", spec=spec.to_dict())
    assert watch["health"] in ("HEALTHY", "IDLE"), watch
    assert watch["status"]["run_id"] == record.run_id and watch["status"]["state"] == "RUNNING", watch
    assert watch["status"]["pid"] == doc.pid and watch["status"]["app_id"] == doc.app_id
    assert watch["status"]["totals"]["input_rows"] >= fed_rows, watch
    assert watch["liveness"] == "ALIVE" and watch["record"]["run_id"] == record.run_id, watch
    lease = watch["lease"]
    assert lease["host"] == host_a != HOST_B and lease["pid"] == doc.pid and not lease["stale_here"], lease

    # ---- (2) B stops it gracefully (the run marker) while input arrives
    feed("p3-before-stop")
    stop = b.call("stop", spec=spec.to_dict(), timeout=180)
    assert stop["was_running"] and stop["graceful"] and not stop["killed"] and stop["clean"], stop
    stop_latencies = [stop["seconds"]]
    assert submission_state(record.handle["submission_id"]) == "FINISHED"
    wait_for(lambda: exited(doc.pid, doc_started), 60, "the stopped Python driver to exit (seen from A)")

    # ---- (3) B restarts it (lifecycle RESTART); more input while stopped and during probation
    feed("p4-while-stopped")
    b.send("lifecycle", spec=spec.to_dict(), action="restart")
    restart = feeding_in_probation("p5-restart-probation", 300)
    restart_s = b.seconds
    assert restart["outcome"] == "SUCCEEDED", restart
    assert [s for s, _ in restart["step_times"]] == ["PLANNED", "CHECKED", "STOPPING", "STOPPED", "SNAPSHOTTED",
                                                     "STARTING", "PROBATION", "SUCCEEDED"], restart["steps"]
    record2 = hook.driver_record()
    assert record2.run_id == restart["new_run_id"] != record.run_id and record2.host == HOST_B
    processed(180, "phases 3-5 after the restart")

    # ---- (4) B upgrades to v2: the compatibility gate (a gate driver on the cluster), stop, snapshot, probation
    feed("p6-before-upgrade")
    b.send("lifecycle", spec=v2.to_dict(), action="upgrade")
    upgrade = feeding_in_probation("p7-upgrade-probation", 420)
    upgrade_s = b.seconds
    assert upgrade["outcome"] == "SUCCEEDED" and upgrade["verdict"] == "COMPATIBLE", upgrade
    steps = dict(upgrade["step_times"])
    assert list(steps) == ["PLANNED", "CHECKED", "STOPPING", "STOPPED", "SNAPSHOTTED", "STARTING", "PROBATION",
                           "SUCCEEDED"], upgrade["steps"]
    assert upgrade["stop_report"]["graceful"], upgrade["stop_report"]
    stop_latencies.append(upgrade["stop_report"]["seconds"])
    # The gate ran as a driver on the cluster (on A's worker), not on B, and it is gone.
    gate = hook.gate_driver_record()
    answer = json.loads(hook.storage.read_bytes(hook.paths.gate_report))
    assert gate.target == "standalone-cluster" and gate.run_id.startswith("gate-") and gate.host == HOST_B, gate
    assert answer["id"] == gate.run_id and answer["report"]["verdict"] == "COMPATIBLE", answer
    assert answer["host"] != HOST_B and hook.target_of(gate).state(gate).gone, answer
    assert hook.deployed()["spec"]["version"] == "v2"
    processed(240, "phases 6-7 in v2's output")
    record3 = hook.driver_record()
    doc3 = hook.status()
    assert record3.run_id == upgrade["new_run_id"] and doc3.run_id == record3.run_id and doc3.version == "v2"
    jvm3 = psutil.Process(doc3.pid).parent()
    doc3_started, jvm3_started = process_start_time(doc3.pid), process_start_time(jvm3.pid)
    assert doc3_started is not None and jvm3_started is not None

    # ---- (5) B hard-kills it through the cluster manager (no pid of it exists on B), input in flight
    probe = b.call("probe", pids=[doc3.pid, jvm3.pid], run_id=record3.run_id)
    assert probe["pids"] == {str(doc3.pid): None, str(jvm3.pid): None} and probe["processes_with_run_id"] == []
    feed("p8-before-kill")
    kill = b.call("kill", spec=v2.to_dict(), timeout=120)
    sid = record3.handle["submission_id"]
    assert f"kill of {sid}" in kill["outcome"] and "KILLED" in kill["outcome"], kill
    assert "launch command on the worker carries the run id" in kill["outcome"], kill  # checked over HTTP from B
    assert kill["cluster_state"] == "KILLED" and kill["exited"] and kill["liveness_after"] == "GONE", kill
    # Not running, as seen from B - although the lease the killed driver held is fresh (ttl >= 120 s).
    assert kill["running_driver"] is None and kill["driver_liveness"] == "GONE", kill
    assert kill["health"] != "HEALTHY", kill
    try:
        wait_for(lambda: exited(doc3.pid, doc3_started) and exited(jvm3.pid, jvm3_started), 60,
                 "the killed driver's processes to exit (seen from A)", interval=0.1)
    except AssertionError as exc:  # seen once (2026-11-29, cause not found): say which process stayed, and how
        raise AssertionError(f"{exc}: {describe_process(doc3.pid, doc3_started, 'driver (Python)')}; "
                             f"{describe_process(jvm3.pid, jvm3_started, 'driver JVM')}") from None
    kill_gone_s = time.time() - kill["requested_at"]
    kill_killed_s = kill["returned_at"] - kill["requested_at"]
    master = cluster.master_json() or {}
    assert submission_state(sid) == "KILLED" and sid not in [d.get("id") for d in master.get("activedrivers") or []]

    # ---- (6) B deploys again (the lease left by the killed driver is taken over); then (7) a graceful stop
    feed("p9-after-kill")
    again = b.call("deploy", spec=v2.to_dict(), timeout=300)
    again_s = b.seconds
    assert again["state"] == "RUNNING" and again["run_id"] != record3.run_id, again
    processed(240, "phases 8-9 after the kill and the new deploy")
    final = b.call("stop", spec=v2.to_dict(), timeout=180)
    assert final["graceful"] and final["clean"], final
    stop_latencies.append(final["seconds"])

    # ---- nothing lost, nothing duplicated; every malformed line quarantined once
    output = read_etl_output(out)
    assert output.duplicates == {}
    assert set(output.event_ids) == all_ids() and output.rows == sum(f.valid for f in fed)
    assert count_quarantined(quarantine) == sum(f.malformed for f in fed)
    assert nn.unsupported == []

    runtime = time.monotonic() - began
    figures = {
        "stop_s": [round(s, 2) for s in stop_latencies], "stop_median_s": round(statistics.median(stop_latencies), 2),
        "kill_to_master_killed_s": round(kill_killed_s, 2), "kill_to_driver_processes_gone_s": round(kill_gone_s, 2),
        "deploy_from_a_s": round(deploy_a_s, 1), "deploy_from_b_after_kill_s": again_s,
        "restart_from_b_s": restart_s, "upgrade_from_b_s": upgrade_s,
        "test_runtime_s": round(runtime, 1), "events": sum(f.valid for f in fed)}
    print(f"\nTWO-HOST FIGURES {json.dumps(figures)}")
