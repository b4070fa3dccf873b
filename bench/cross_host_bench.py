#!/usr/bin/env python
"""Cross-host failover on a REAL standalone cluster vs a bare restart on the same cluster, in the same run (issue 36).

Usage (from the project root, under the machine's Spark lock)::

    flock /tmp/an/spark.lock .venv/bin/python bench/cross_host_bench.py [--runs 3] [--json bench/results/cross_host.json]

One standalone master + one worker (2 cores, 3 GiB; ``tests/standalone_cluster.py``) for the whole bench,
stopped by pid at the end with every driver and executor they ran. The stream is the bundled ``events_etl``
in client mode on that cluster (``spark.cores.max`` 1, so two drivers' executors fit), ``hot_standby`` on,
trigger 1 s, one input file per trigger, input arriving continuously (a file of ``--events-per-file``
events every ``--feed-interval`` seconds) for the whole run.

"Another host", as in ``tests/integration/test_cross_host_takeover.py``: the active driver is submitted
(``stream_actions.submit``, the product's submission) from a long-lived process in its own UTS namespace
(``unshare --uts``) named ``host-b``, its driver inherits that host name (its lease and record say
``host-b``); the hot standby is submitted from this process, on this host's name. The host-B process is
warm (Airflow and the provider imported once); each submission runs in a fork of it that exits once the
driver is submitted, so a killed driver is reaped by init, as after the test's one-shot submitter.

Per run, fresh stream directories, one cluster:

1. bare restart: host B's driver runs; a batch is seen in flight (``isTriggerActive``); its process group
   is SIGKILLed; once its processes are gone host B submits the same stream again (what a supervisor's cold
   restart on host B does - from any other host the lease, ttl 120 s, would refuse it). Time = kill -> the
   first commit file written after the kill (``<checkpoint>/commits/N``, its mtime; polled every 20 ms).
2. hot standby on another host: the restarted host-B driver runs; the standby is submitted from here
   (as the supervisor's PREPARE_STANDBY does) and waits READY; a batch in flight; host B's driver is
   SIGKILLed; the standby takes over on the master's word (``application_ended`` in its log) -> its first
   new commit file. Also recorded: kill -> the driver record names the standby (the takeover).
3. the feed stops; once the sink holds every fed event the standby is stopped gracefully, and the sink is
   checked: exactly the fed events, each once (``read_etl_output``). A run that is not exact fails the bench.

Medians over ``--runs``; ratio = standby / bare (goal < 0.3). Raw figures, the machine and its load
average at start and end go to the JSON file. The order is fixed (bare, then standby): the standby
needs a running active driver, which the bare restart leaves behind.

``--smoke`` (CI): one run, 50 events per file; the same figure lines; JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "tests", ROOT / "bench"):
    sys.path.insert(0, str(_path))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

from harness import (add_smoke_argument, smoke_results, stop_cleanly_on_sigterm, stop_processes_under,  # noqa: E402
                     wait_for)

HOST_B = "host-b"
POLL = 0.02
WAIT = 300.0

HOST_B_AGENT = """
import json, os, socket, subprocess, sys
subprocess.run(["hostname", sys.argv[1]], check=True)  # this UTS namespace only
sys.path[:0] = [sys.argv[2], sys.argv[2] + "/tests"]
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec
import stream_actions
print(json.dumps({"hostname": socket.gethostname()}), flush=True)
for line in sys.stdin:  # one spec per line: submit it, answer with the record
    spec = StreamSpec.from_dict(json.loads(line))
    r, w = os.pipe()
    child = os.fork()
    if child == 0:  # the submitter exits once the driver is submitted: the driver is init's to reap
        os.close(r)
        try:
            record = stream_actions.submit(SparkStreamHook(spec))
            answer = {"run_id": record.run_id, "pid": record.submit_pid, "host": record.host,
                      "hostname": socket.gethostname()}
        except BaseException as exc:
            answer = {"error": repr(exc)}
        os.write(w, json.dumps(answer).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(child, 0)
    print(data.decode(), flush=True)
"""


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def wait(predicate: Any, what: str, timeout: float = WAIT, interval: float = POLL) -> Any:
    return wait_for(predicate, timeout, what, interval)


class HostB:
    """The long-lived submitter in its own UTS namespace named ``host-b``; stopped by pid."""

    def __init__(self, work: Path):
        self.proc = subprocess.Popen(["unshare", "--uts", sys.executable, "-c", HOST_B_AGENT, HOST_B, str(ROOT)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
                                     stderr=open(work / "host-b.log", "w"), start_new_session=True)
        hello = json.loads(self.proc.stdout.readline() or "{}")
        if hello.get("hostname") != HOST_B:
            raise RuntimeError(f"host B did not start (see {work / 'host-b.log'}): {hello}")

    def submit(self, spec: Any) -> dict[str, Any]:
        self.proc.stdin.write(json.dumps(spec.to_dict()) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline() or '{"error": "host B exited"}')
        if "error" in answer:
            raise RuntimeError(f"host B could not submit: {answer['error']}")
        if (answer["host"], answer["hostname"]) != (HOST_B, HOST_B):
            raise RuntimeError(f"host B's driver is not on host B: {answer}")
        return answer

    def stop(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)


class Feed:
    """Input arriving continuously: one file of ``per_file`` events every ``interval`` seconds (a thread)."""

    def __init__(self, directory: str, run: str, per_file: int, interval: float):
        from spark_jobs.event_generator import generate_events

        self.generate, self.directory, self.run = generate_events, directory, run
        self.per_file, self.interval = per_file, interval
        self.event_ids: list[str] = []
        self.files = 0
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.add()  # a first file before the deploy
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def add(self) -> None:
        batch = self.generate(self.directory, count=self.per_file, files=1, run=self.run,
                              start_seq=self.files * self.per_file, file_start_index=self.files)
        self.event_ids.extend(batch.event_ids)
        self.files += 1

    def loop(self) -> None:
        try:
            while not self.stopped.wait(self.interval):
                self.add()
        except BaseException as exc:  # reported by stop()
            self.error = exc

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=30)
        if self.error is not None:
            raise RuntimeError(f"the feed failed: {self.error!r}")


def commit_files(checkpoint: str) -> dict[str, float]:
    """Every ``commits/N`` file under the checkpoint: path -> mtime."""
    found: dict[str, float] = {}
    for commits in Path(checkpoint).rglob("commits"):
        for f in commits.iterdir() if commits.is_dir() else ():
            if re.fullmatch(r"\d+", f.name):
                try:
                    found[str(f)] = f.stat().st_mtime
                except FileNotFoundError:
                    pass
    return found


def first_commit_after(checkpoint: str, before: dict[str, float], killed_wall: float) -> tuple[float, str]:
    """(seconds from the kill, file) of the first commit file written after the kill."""
    def new() -> tuple[float, str] | None:
        fresh = {p: m for p, m in commit_files(checkpoint).items() if p not in before and m > killed_wall}
        if not fresh:
            return None
        path = min(fresh, key=fresh.get)
        return fresh[path] - killed_wall, path
    return wait(new, "a commit after the kill")


def batch_in_flight(hook: Any, run_id: str) -> None:
    wait(lambda: (d := hook.status()) and d.run_id == run_id and d.queries and
         d.queries[0].status.get("isTriggerActive"), f"a batch of run {run_id} in flight", 120)


def kill_host_b_driver(hook: Any, b: dict[str, Any], checkpoint: str) -> tuple[dict[str, float], float, float]:
    """SIGKILL host B's driver (its whole process group) mid-batch: (commits before, monotonic, wall time)."""
    batch_in_flight(hook, b["run_id"])
    before = commit_files(checkpoint)
    killed, killed_wall = time.monotonic(), time.time()
    os.killpg(b["pid"], signal.SIGKILL)
    return before, killed, killed_wall


def one_run(cluster: Any, root: Path, run: int, ns: argparse.Namespace, host_b: HostB) -> dict[str, Any]:
    from airflow_streaming.control import contract
    from airflow_streaming.hooks.streaming_job import SparkStreamHook
    from airflow_streaming.spec import StreamSpec
    from spark_jobs.outputs import read_etl_output
    from standalone_cluster import class_archive_conf
    import stream_actions

    work = root / f"run{run}"
    name = f"xhost{run}"
    inp, out, ckpt = str(work / "input"), str(work / "output"), str(work / "checkpoint")
    conf = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false", "spark.cores.max": "1",
            "spark.executor.memory": "512m", **class_archive_conf()}
    spec = StreamSpec.from_dict({
        "name": name, "application": "events_etl", "checkpoint_location": ckpt,
        "control_location": str(work / "control"), "master": cluster.master, "deploy_mode": "client",
        "master_ui_url": cluster.ui, "hot_standby": True, "trigger_interval": 1, "heartbeat_interval": 1,
        "stop_timeout": 60, "startup_timeout": 180, "spark_conf": conf,
        "application_args": ["--input", inp, "--output", out, "--quarantine", str(work / "quarantine"),
                             "--max-files-per-trigger", "1"]})
    hook = SparkStreamHook(spec)
    feed = Feed(inp, f"r{run}", ns.events_per_file, ns.feed_interval)
    result: dict[str, Any] = {"run": run}
    try:
        # 1. bare restart: kill host B's driver, host B submits the stream again
        b1 = host_b.submit(spec)
        started = time.monotonic()
        wait(lambda: (d := hook.status()) and d.run_id == b1["run_id"] and d.totals["batches"] >= 1 and d.app_id,
             "host B's first driver running on the cluster", interval=0.2)
        result["first_deploy_s"] = round(time.monotonic() - started, 2)
        lease = contract.read_lease(hook.storage, hook.paths)
        assert (lease.run_id, lease.host) == (b1["run_id"], HOST_B), lease
        before, killed, killed_wall = kill_host_b_driver(hook, b1, ckpt)
        wait(lambda: not hook.processes_of_run(b1["run_id"]), "host B's killed driver gone")
        result["kill_to_gone_s"] = round(time.monotonic() - killed, 2)
        b2 = host_b.submit(spec)
        result["kill_to_resubmitted_s"] = round(time.monotonic() - killed, 2)
        seconds, path = first_commit_after(ckpt, before, killed_wall)
        result["bare_restart_s"] = round(seconds, 2)
        log(f"run {run}: bare restart (kill -> host B's new driver's first commit {Path(path).name}): "
            f"{result['bare_restart_s']:.2f} s (resubmitted {result['kill_to_resubmitted_s']:.2f} s after the kill)")

        # 2. hot standby on this host; kill host B's (restarted) driver
        wait(lambda: (d := hook.status()) and d.run_id == b2["run_id"] and d.totals["batches"] >= 1,
             "host B's second driver running", interval=0.2)
        asked = time.monotonic()
        standby = stream_actions.submit(hook, standby=True, failover=True).run_id
        wait(lambda: (hook.hot_standby_state() or {}).get("state") == "READY", "the hot standby READY", interval=0.1)
        result["standby_prepared_s"] = round(time.monotonic() - asked, 2)
        assert contract.read_lease(hook.storage, hook.paths).run_id == b2["run_id"]
        before, killed, killed_wall = kill_host_b_driver(hook, b2, ckpt)
        wait(lambda: (r := hook.driver_record()) is not None and r.run_id == standby, "the takeover", 120)
        result["takeover_s"] = round(time.monotonic() - killed, 2)
        seconds, path = first_commit_after(ckpt, before, killed_wall)
        result["failover_s"] = round(seconds, 2)
        standby_log = Path(hook.driver_log_path(standby)).read_text(errors="replace")
        result["proof"] = "application_ended" if "application_ended" in standby_log else "not the master's word"
        log(f"run {run}: hot standby (kill -> takeover {result['takeover_s']:.2f} s -> the standby's first commit "
            f"{Path(path).name}): {result['failover_s']:.2f} s; proof: {result['proof']}")

        # 3. exactly what was fed, each once
        feed.stop()
        fed = set(feed.event_ids)
        wait(lambda: set(read_etl_output(out).event_ids) >= fed, "every fed event in the sink", interval=0.5)
        result["graceful_stop"] = stream_actions.stop(hook).graceful
        output = read_etl_output(out)
        result.update(fed_events=len(feed.event_ids), sink_rows=output.rows, duplicates=len(output.duplicates),
                      exact=output.duplicates == {} and set(output.event_ids) == fed and output.rows == len(fed))
        log(f"run {run}: sink exactly the fed events: {result['exact']} ({output.rows} rows, {len(fed)} fed, "
            f"{len(output.duplicates)} duplicated)")
        return result
    finally:
        feed.stopped.set()
        for getter in (hook.standby_record, hook.driver_record):
            record = getter()
            if record is not None and record.host != HOST_B and hook.processes_of_run(record.run_id):
                stream_actions.kill(hook, record, 5, keep_marker=True)
        stop_processes_under(str(work))  # host B's drivers (this host cannot act on their records) by pid


def machine() -> dict[str, Any]:
    import pyspark

    return {"nproc": os.cpu_count(), "python": platform.python_version(), "pyspark": pyspark.__version__,
            "platform": platform.platform(), "loadavg_start": os.getloadavg()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default="bench/results/cross_host.json")
    parser.add_argument("--events-per-file", type=int, default=200)
    parser.add_argument("--feed-interval", type=float, default=1.5, help="seconds between input files")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (cluster and driver logs)")
    add_smoke_argument(parser)
    ns = parser.parse_args()
    if ns.smoke:
        ns.runs, ns.events_per_file = 1, 50
        ns.json = str(Path(smoke_results("cross_host")) / "cross_host.json")
    if subprocess.run(["unshare", "--uts", "true"], capture_output=True).returncode != 0:
        print("skipped: cannot create a UTS namespace here (unshare --uts)")
        return 0
    stop_cleanly_on_sigterm()
    root = Path(tempfile.mkdtemp(prefix="cross-host-bench-"))
    os.environ["AIRFLOW_HOME"] = str(root / "airflow-home")  # before anything imports Airflow (the hook does)
    from standalone_cluster import standalone_cluster

    info = machine()
    log(f"load average at start: {info['loadavg_start']}")
    runs: list[dict[str, Any]] = []
    host_b = None
    try:
        (root / "cluster").mkdir()
        with standalone_cluster(root / "cluster", cores=2, memory="3g") as cluster:
            log(f"cluster up: {cluster.master}")
            host_b = HostB(root)
            for run in range(1, ns.runs + 1):
                runs.append(one_run(cluster, root, run, ns, host_b))
    finally:
        if host_b is not None:
            host_b.stop()
        stop_processes_under(str(root))
        if not ns.keep:
            shutil.rmtree(root, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("bare_restart_s", "failover_s", "takeover_s", "standby_prepared_s", "kill_to_resubmitted_s",
                     "first_deploy_s")}
    ratio = round(med["failover_s"] / med["bare_restart_s"], 3)
    exact = all(r["exact"] for r in runs)
    doc = {"benchmark": "cross-host failover on a standalone cluster (issue 36)", "machine": info,
           "config": {"runs": ns.runs, "events_per_file": ns.events_per_file, "feed_interval_s": ns.feed_interval,
                      "worker": "2 cores, 3g", "deploy_mode": "client", "trigger_seconds": 1,
                      "max_files_per_trigger": 1},
           "median": med, "ratio_standby_bare": ratio, "exact_every_run": exact, "runs": runs,
           "loadavg_end": os.getloadavg()}
    print(f"bare restart on host B (kill -> first new commit): {med['bare_restart_s']:.2f} s "
          f"(resubmitted {med['kill_to_resubmitted_s']:.2f} s after the kill)")
    print(f"hot standby on another host (kill -> first new commit): {med['failover_s']:.2f} s "
          f"(takeover {med['takeover_s']:.2f} s; standby prepared in {med['standby_prepared_s']:.2f} s)")
    print(f"ratio standby / bare: {ratio:.3f} (goal < 0.3)")
    print(f"sink holds exactly the fed events in every run: {exact}; raw {runs}")
    log(f"load average at end: {doc['loadavg_end']}")
    Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
    Path(ns.json).write_text(json.dumps(doc, indent=1))
    log(f"wrote {ns.json}")
    return 0 if exact else 1


if __name__ == "__main__":
    sys.exit(main())
