#!/usr/bin/env python
"""Cross-host failover when the active driver's whole host is cut off, vs a bare restart in the same run (issue 36).

Usage (from the project root, as root, under the machine's Spark lock)::

    flock /tmp/an/spark.lock .venv/bin/python bench/partition_failover_bench.py [--runs 3] \
        [--json bench/results/partition_failover.json]

The hosts are those of partition trial (c) (``tests/integration/test_partition_standby.py``, whose helpers
this bench imports), fresh for every run:

- host A is this process: the WebHDFS-protocol stand-in for a NameNode (``tests/webhdfs_standin.py``) with the
  stream's control files, on A's end of host B's veth pair;
- hosts B and C are ``tests/two_hosts_agent.py`` agents, each in its own network, UTS, PID and mount
  namespaces on its own veth pair to A; B and C reach each other only through A (``ip_forward`` on in A's
  namespace, restored after; a route in each);
- input, sink, quarantine and checkpoint are on the file system the three share (like an NFS mount).

Per run: input arrives continuously (a file of ``--events-per-file`` events every ``--feed-interval`` s, one
file per trigger). B deploys the stream (lifecycle DEPLOY): the ACTIVE driver is a local-mode driver on B.
C's supervisor pass prepares the hot standby, which runs on C, and it waits READY. Then host B is cut off from
EVERYTHING - from A (the storage) and from C - with ``iptables -j DROP`` in B's namespace: the whole driver host
lost. The standby has no proof of death (local mode: no master to ask; B's processes are in another PID
namespace), so it waits for the lease to go stale (the spec's ``lease_ttl``, ``--lease-ttl``: by default the
product's default, 120 s; on this WebHDFS storage, whose calls may hang 10 + 30 s, nothing under 81 s is
accepted) and takes over.

1. partition takeover: the cut -> the standby's first NEW commit (``<checkpoint>/commits/N`` mtime; the
   batch ids the standby's log shows it writing). Also: the cut -> the standby's lease.
2. bare restart, same run and hosts, B still cut: the now-active driver on C is SIGKILLed (all its processes,
   by pid) and host C submits the stream again (``stream_actions.submit``: a plain submission, as the
   supervisor's cold restart does) -> the first commit file written after the kill.
3. checks: the cut-off driver on B decides by itself to stop its query (its log: the reporter's half-ttl rule,
   before the ttl) and writes no commit after the standby's first (when its query stop returns is recorded, but
   B stays cut: a batch blocked on the unreachable storage may hold it); once the feed stops, the sink holds exactly the fed events, each
   once (``read_etl_output``). A run failing a check fails the bench.

Medians over ``--runs``; figure: ``(takeover - ttl) / bare`` with the goal takeover < ttl + 0.3 x bare. Each run
heals the cut and removes everything it made (hosts and their drivers by pid, veth pairs, routes, iptables rules;
``ip_forward`` restored), also on failure. The machine and its load average at start and end go to the JSON.

``--smoke`` (CI): one run, 50 events per file, a file every 3 s, a lease ttl of 90 s; the same figure lines; JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import contextlib
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
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "tests", ROOT / "tests" / "integration", ROOT / "bench"):
    sys.path.insert(0, str(_path))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")
# Every host seals stored specs with the same key, as every host of a real deployment is told to.
os.environ.setdefault("AIRFLOW__AIRFLOW_STREAMING__CONTROL_SEAL_KEY", "bench-" + os.urandom(16).hex())

from harness import add_smoke_argument, smoke_results, stop_cleanly_on_sigterm, stop_processes_under  # noqa: E402

POLICY = {"max_attempts": 3, "backoff_initial_s": 1, "backoff_max_s": 5}
GOAL = 0.3


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def commits(checkpoint: Path) -> dict[int, float]:
    """Batch id -> mtime of the checkpoint's commit file (a file renamed in between is read again)."""
    from test_partition_trials import commit_times

    for _ in range(20):
        try:
            return commit_times(checkpoint) if (checkpoint / "commits").is_dir() else {}
        except FileNotFoundError:
            time.sleep(0.01)
    return commit_times(checkpoint)


#: The cut-off driver's reporter deciding to stop its query (half the ttl without renewal).
STOP_DECIDED = "stopping so that no second driver can start beside this one"


def logged_at(log_text: str, text: str) -> float | None:
    """When the driver's log last shows a line containing ``text``, as ``time.time()``."""
    found = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*" + re.escape(text), log_text, re.M)
    if not found:
        return None
    stamp, ms = found[-1]
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000


def kill_processes(procs: list[Any]) -> None:
    import psutil

    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGKILL)


def one_run(root: Path, run: int, ns: argparse.Namespace) -> dict[str, Any]:
    from airflow_streaming.control import contract
    from airflow_streaming.hooks.streaming_job import SparkStreamHook
    from airflow_streaming.spec import StreamSpec
    from cross_host_bench import Feed
    from spark_jobs.outputs import read_etl_output
    from streams import wait_for
    from test_partition_standby import HOST_C, _host_c, _listener, _routed_through_a
    from test_partition_trials import Cut, committed_by, processes_of, query_stopped_at
    from test_two_hosts import HOST_B, _host_b
    from webhdfs_standin import WebHdfsStandIn

    work = root / f"run{run}"
    work.mkdir()
    os.environ["AIRFLOW_STREAMING_LOG_DIR"] = str(work / "driver-logs")  # B's and C's agents inherit it
    inp, out, checkpoint = work / "input", work / "output", work / "checkpoint"
    result: dict[str, Any] = {"run": run}
    feed = None
    with contextlib.ExitStack() as stack:
        stack.callback(stop_processes_under, str(work))  # last: whatever is left under the run's dir, by pid
        a_ip_b, b_ip, b = stack.enter_context(_host_b(work))
        nn = stack.enter_context(WebHdfsStandIn(str(work / "hdfs"), host=a_ip_b))
        a_ip_c, c_ip, c = stack.enter_context(_host_c(work))
        stack.enter_context(_routed_through_a(b.proc.pid, b_ip, a_ip_b, c.proc.pid, c_ip, a_ip_c))
        b_url = stack.enter_context(_listener(b.proc.pid, b_ip, work / "listen-b"))
        c_url = stack.enter_context(_listener(c.proc.pid, c_ip, work / "listen-c"))
        cuts = [Cut(b.proc.pid, a_ip_b), Cut(b.proc.pid, c_ip)]  # B from A (the storage) and from C
        for cut in cuts:
            stack.callback(cut.heal)  # before the hosts go; a no-op once healed
        storage_url = f"{nn.url}/webhdfs/v1/?op=GETFILESTATUS"

        def reach() -> dict[str, Any]:
            from_b = b.call("reach", urls=[c_url, storage_url], timeout=60)
            from_c = c.call("reach", urls=[b_url, storage_url], timeout=60)
            return {"b->c": from_b[c_url], "b->storage": from_b[storage_url],
                    "c->b": from_c[b_url], "c->storage": from_c[storage_url]}

        wait_for(lambda: set(reach().values()) == {200}, 30, "B and C reaching each other and the stand-in")
        spec = StreamSpec.from_dict({
            "name": "etl", "application": "events_etl", "checkpoint_location": str(checkpoint),
            "control_location": f"{nn.uri}/control", "master": "local[1]", "hot_standby": True,
            "trigger_interval": 1, "heartbeat_interval": 1, "stop_timeout": 60, "startup_timeout": 180,
            # Batches of ~1.2 s on a busy 2-core machine against a 1 s trigger read as FALLING_BEHIND (median
            # duration > trigger), and C's passes then never prepare the standby: allow 3 triggers a batch.
            "health": {"batch_duration_factor": 3.0},
            **({"lease_ttl": ns.lease_ttl} if ns.lease_ttl is not None else {}),
            "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false"},
            "application_args": ["--input", str(inp), "--output", str(out), "--quarantine", str(work / "quarantine"),
                                 "--max-files-per-trigger", "1"]})
        hook = SparkStreamHook(spec)
        try:
            # ---- B deploys: the active driver on B; C's pass prepares the hot standby on C
            feed = Feed(str(inp), f"r{run}", ns.events_per_file, ns.feed_interval)
            started = time.monotonic()
            active = b.call("deploy", spec=spec.to_dict(), timeout=300)["run_id"]
            result["deploy_s"] = round(time.monotonic() - started, 1)
            lease = contract.read_lease(hook.storage, hook.paths)
            assert (lease.run_id, lease.host) == (active, HOST_B), lease
            ttl = result["lease_ttl_s"] = lease.ttl
            started = time.monotonic()
            passes = []
            while True:  # a pass may first notify the stream falling behind (the backlog of the deploy)
                prepared = c.call("supervise", spec=spec.to_dict(), policy=POLICY, timeout=300)
                passes.append(prepared["action"])
                if prepared["action"] == "STANDBY_PREPARED" or time.monotonic() - started > 240:
                    break
                time.sleep(2)
            assert prepared["action"] == "STANDBY_PREPARED", (passes, prepared)
            result["passes_before_standby"] = passes
            standby = prepared["new_run_id"]
            record = hook.standby_record()
            assert record is not None and (record.run_id, record.host) == (standby, HOST_C), record
            wait_for(lambda: (hook.hot_standby_state() or {}).get("state") == "READY", 240, "the hot standby READY")
            result["standby_ready_s"] = round(time.monotonic() - started, 1)
            assert c.call("probe", pids=[], run_id=active)["processes_with_run_id"] == []  # C cannot see B's driver
            wait_for(lambda: len(committed_by(Path(hook.driver_log_path(active)).read_text(errors="replace"),
                                              checkpoint)) >= 2, 120, "the active driver committing")
            log(f"run {run}: active {active} on B (deployed in {result['deploy_s']} s), standby {standby} READY on C "
                f"({result['standby_ready_s']} s); lease ttl {ttl:.0f} s")

            # ---- the whole driver host cut off: B from A and from C
            cut_at = time.time()
            for cut in cuts:
                cut.cut()
            result["cut"] = cuts[0].how
            assert all(cut.how == "iptables DROP" for cut in cuts), [cut.how for cut in cuts]
            during = reach()
            assert during["c->storage"] == 200 and all(during[k] != 200 for k in ("b->c", "b->storage", "c->b")), during
            result["reach_during_cut"] = during

            def standby_commits() -> set[int]:
                return committed_by(Path(hook.driver_log_path(standby)).read_text(errors="replace"), checkpoint)

            wait_for(standby_commits, ttl + 180, "the standby's first commit", interval=0.2)
            first_standby = min(standby_commits())  # its log names the file before the file is in place

            def with_first_standby() -> dict[int, float] | None:
                found = commits(checkpoint)
                return found if first_standby in found else None

            done = wait_for(with_first_standby, 60, f"the standby's commit file {first_standby}", interval=0.02)
            takeover = result["takeover_s"] = round(done[first_standby] - cut_at, 2)
            lease = contract.read_lease(hook.storage, hook.paths)
            assert (lease.run_id, lease.host) == (standby, HOST_C), lease
            result["cut_to_lease_s"] = round(lease.acquired_at - cut_at, 2)
            result["takeover_minus_ttl_s"] = round(takeover - ttl, 2)
            log(f"run {run}: cut -> the standby's lease {result['cut_to_lease_s']:.2f} s -> its first commit "
                f"{first_standby}: {takeover:.2f} s (ttl {ttl:.0f} s)")

            # ---- the cut-off driver on B: stopped by itself, no commit after the standby's first
            active_log = Path(hook.driver_log_path(active)).read_text(errors="replace")
            decided = logged_at(active_log, STOP_DECIDED)  # the reporter's half-ttl rule
            result["old_stop_decided_after_cut_s"] = None if decided is None else round(decided - cut_at, 1)
            result["old_stopped_itself"] = decided is not None and decided - cut_at < ttl
            by_active = committed_by(active_log, checkpoint)
            last_old = max(done[i] for i in by_active if i in done)
            result["old_last_commit_after_cut_s"] = round(last_old - cut_at, 1)
            result["old_no_commit_after_takeover"] = last_old < done[first_standby] and not (
                by_active & standby_commits())

            # ---- bare restart on C (B still cut): SIGKILL the active driver on C, C submits the stream again
            wait_for(lambda: len(standby_commits()) >= 2, 120, "the standby committing as the active driver")
            victims = processes_of(standby)
            assert victims, "the active driver on C has no processes"
            before = commits(checkpoint)
            killed_at = time.time()
            kill_processes(victims)
            wait_for(lambda: not processes_of(standby), 60, "the killed driver's processes gone", interval=0.05)
            restarted = c.call("submit", spec=spec.to_dict(), timeout=300)
            assert restarted["host"] == HOST_C, restarted
            result["kill_to_resubmitted_s"] = round(time.time() - killed_at, 2)

            def new_commit() -> float | None:
                fresh = [m for i, m in commits(checkpoint).items() if i not in before and m > killed_at]
                return min(fresh) if fresh else None

            first_new = wait_for(new_commit, 300, "a commit after the kill", interval=0.05)
            bare = result["bare_restart_s"] = round(first_new - killed_at, 2)
            result["ratio_over_bare"] = round((takeover - ttl) / bare, 3)
            log(f"run {run}: bare restart on C (kill -> first new commit): {bare:.2f} s (resubmitted "
                f"{result['kill_to_resubmitted_s']:.2f} s after the kill); (takeover - ttl) / bare "
                f"{result['ratio_over_bare']:.3f}")

            # ---- exactly what was fed, each once
            feed.stop()
            fed = set(feed.event_ids)
            wait_for(lambda: set(read_etl_output(str(out)).event_ids) >= fed, 180, "every fed event in the sink")
            output = read_etl_output(str(out))
            result.update(fed_events=len(fed), sink_rows=output.rows, duplicates=len(output.duplicates),
                          exact=output.duplicates == {} and set(output.event_ids) == fed and output.rows == len(fed))
            stopped = query_stopped_at(Path(hook.driver_log_path(active)).read_text(errors="replace"))
            result["old_query_stopped_after_cut_s"] = None if stopped is None else round(stopped - cut_at, 1)
            result["old_commits_after_takeover_at_end"] = sorted(
                i for i in committed_by(Path(hook.driver_log_path(active)).read_text(errors="replace"), checkpoint)
                if commits(checkpoint).get(i, 0.0) >= done[first_standby])
            result["ok"] = (result["exact"] and result["old_stopped_itself"] and result["old_no_commit_after_takeover"]
                            and not result["old_commits_after_takeover_at_end"])
            log(f"run {run}: old driver decided to stop {result['old_stop_decided_after_cut_s']} s after the cut "
                f"(its query stopped: {result['old_query_stopped_after_cut_s']} s), its last commit {result['old_last_commit_after_cut_s']} s; sink exact: {result['exact']} "
                f"({output.rows} rows, {len(fed)} fed, {len(output.duplicates)} duplicated)")
            return result
        finally:
            if feed is not None:
                feed.stopped.set()
            for getter in (hook.driver_record, hook.standby_record):  # every driver of the run, by pid (from A)
                with contextlib.suppress(Exception):
                    record = getter()
                    if record is not None:
                        kill_processes(processes_of(record.run_id))


def machine() -> dict[str, Any]:
    import pyspark

    return {"nproc": os.cpu_count(), "python": platform.python_version(), "pyspark": pyspark.__version__,
            "platform": platform.platform(), "loadavg_start": os.getloadavg()}


def can_make_hosts() -> str | None:
    """Why the hosts cannot be made here, or None."""
    if os.geteuid() != 0:
        return "the hosts need network/UTS/PID namespaces, veth pairs and iptables: run as root"
    missing = [t for t in ("unshare", "nsenter", "ip", "iptables", "mount") if shutil.which(t) is None]
    if missing:
        return f"missing {', '.join(missing)}"
    if subprocess.run(["unshare", "--net", "--uts", "true"], capture_output=True).returncode != 0:
        return "cannot create network/UTS namespaces here"
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default="bench/results/partition_failover.json")
    parser.add_argument("--events-per-file", type=int, default=200)
    parser.add_argument("--feed-interval", type=float, default=1.5, help="seconds between input files")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (driver and host logs)")
    parser.add_argument("--lease-ttl", type=float, default=None,
                        help="the spec's lease_ttl in seconds (default: the product's default, 120 s)")
    add_smoke_argument(parser)
    ns = parser.parse_args()
    if ns.smoke:
        # A file every 3 s: with one file a batch, the files fed through the cut and the bare restart are a
        # backlog the stream drains after the feed stops; at 1.5 s on a busy machine that took over 180 s.
        ns.runs, ns.events_per_file, ns.feed_interval = 1, 50, 3.0
        if ns.lease_ttl is None:  # the shortest ttl this storage accepts (in 30 s steps): the smoke waits it out
            ns.lease_ttl = 90.0
        ns.json = str(Path(smoke_results("partition_failover")) / "partition_failover.json")
    why = can_make_hosts()
    if why:
        print(f"skipped: {why}")
        return 0
    stop_cleanly_on_sigterm()
    root = Path(tempfile.mkdtemp(prefix="partition-failover-bench-"))
    os.environ["AIRFLOW_HOME"] = str(root / "airflow-home")  # before anything imports Airflow (the hook does)
    info = machine()
    log(f"load average at start: {info['loadavg_start']}")
    runs: list[dict[str, Any]] = []
    try:
        for run in range(1, ns.runs + 1):
            runs.append(one_run(root, run, ns))
            doc = summary(runs, ns, info)
            Path(ns.json).parent.mkdir(parents=True, exist_ok=True)
            Path(ns.json).write_text(json.dumps(doc, indent=1))  # after every run: the runs done so far
    finally:
        stop_processes_under(str(root))
        if not ns.keep:
            shutil.rmtree(root, ignore_errors=True)
    med, ratio = doc["median"], doc["ratio_takeover_minus_ttl_over_bare"]
    met, ok = doc["goal_met"], doc["checks_every_run"]
    print(f"partition takeover (cut -> the standby's first new commit): {med['takeover_s']:.2f} s "
          f"(lease ttl {med['lease_ttl_s']:.0f} s; cut -> the standby's lease {med['cut_to_lease_s']:.2f} s)")
    print(f"bare restart on host C (kill -> first new commit): {med['bare_restart_s']:.2f} s "
          f"(resubmitted {med['kill_to_resubmitted_s']:.2f} s after the kill)")
    print(f"(takeover - ttl) / bare: {ratio:.3f} (goal < {GOAL}): {'met' if met else 'not met'}")
    print(f"old driver on B stopped itself and never committed after the takeover, sink holds exactly the fed "
          f"events in every run: {ok}; raw {runs}")
    log(f"load average at end: {doc['loadavg_end']}")
    log(f"wrote {ns.json}")
    return 0 if ok else 1


def summary(runs: list[dict[str, Any]], ns: argparse.Namespace, info: dict[str, Any]) -> dict[str, Any]:
    """The JSON document of the runs so far: medians, the ratio, whether the goal is met, the raw runs."""
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("takeover_s", "cut_to_lease_s", "bare_restart_s", "kill_to_resubmitted_s", "lease_ttl_s",
                     "takeover_minus_ttl_s", "old_last_commit_after_cut_s")}
    return {"benchmark": "cross-host failover when the driver's host is cut off (issue 36)", "machine": info,
            "config": {"runs": ns.runs, "runs_done": len(runs), "events_per_file": ns.events_per_file,
                       "feed_interval_s": ns.feed_interval, "master": "local[1]", "trigger_seconds": 1,
                       "max_files_per_trigger": 1, "cut": "iptables DROP in B's namespace, B <-> A and B <-> C"},
            "median": med,
            "ratio_takeover_minus_ttl_over_bare": round(med["takeover_minus_ttl_s"] / med["bare_restart_s"], 3),
            "goal_met": med["takeover_s"] < med["lease_ttl_s"] + GOAL * med["bare_restart_s"],
            "checks_every_run": all(r["ok"] for r in runs), "runs": runs, "loadavg_end": os.getloadavg()}


if __name__ == "__main__":
    sys.exit(main())
