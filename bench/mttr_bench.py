"""Mean time to recovery under supervision vs a bare restart of the same job, in the same run.

    .venv/bin/python bench/mttr_bench.py [--runs 3] [--json bench/results/mttr.json]

Managed: the bundled events_etl runs with input arriving; its driver is SIGKILLed mid-batch; one
supervisor pass (backoff 0) notices the FAILED verdict and redeploys; MTTR = kill -> the new run's
first committed batch (a progress event in status.json). Baseline: the same job stopped gracefully and
submitted again by hand; time = submit -> first committed batch. Hot standby (``hot_standby=True``):
the same job deployed with one, a supervisor pass prepares it, the driver is SIGKILLed mid-batch, and
failover = kill -> the standby's first committed batch (no supervisor pass: it takes over by itself).
Medians of --runs; the ratios are against the bare restart of the same run. ``--job script``: the same with
``bench/team_job.py``, a team's own stateful script (the standby runs it up to its start() and replays its plan).

``--smoke`` (CI): one run, 40 files of 50 events (2,000 instead of 20,000); JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

import psutil  # noqa: E402

from airflow_streaming.hooks.streaming_job import SparkStreamHook  # noqa: E402
from airflow_streaming.spec import StreamSpec  # noqa: E402
from airflow_streaming.supervision.policy import RestartPolicy  # noqa: E402
from airflow_streaming.lifecycle.supervisor import supervise  # noqa: E402
from airflow_streaming.targets.local import run_processes  # noqa: E402
from harness import add_smoke_argument, smoke_results, stop_cleanly_on_sigterm, stop_processes_under  # noqa: E402
import stream_actions  # noqa: E402 - tests/stream_actions.py (harness puts tests/ on the path)
from spark_jobs.event_generator import generate_events  # noqa: E402


TEAM_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "team_job.py")
JOB = "events_etl"
"""``--job``: ``events_etl`` (the bundled job) or ``script`` (``bench/team_job.py``, a team's own stateful script)."""


def spec_for(root: str) -> StreamSpec:
    if JOB == "script":
        application, args = TEAM_JOB, ("--input", f"{root}/in", "--output", f"{root}/out", "--checkpoint",
                                       f"{root}/ckpt", "--max-files-per-trigger", "1")
    else:
        application, args = "events_etl", ("--input", f"{root}/in", "--output", f"{root}/out", "--quarantine",
                                           f"{root}/q", "--max-files-per-trigger", "1")
    return StreamSpec(name="mttr", application=application, checkpoint_location=f"{root}/ckpt",
                      control_location=f"{root}/ctl", master="local[2]", trigger_interval=1, heartbeat_interval=1,
                      application_args=args,
                      spark_conf={"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"})


def first_commit_after(hook: SparkStreamHook, run_id: str, timeout: float = 300) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        doc = hook.status()
        if doc is not None and doc.run_id == run_id and doc.totals["batches"] >= 1:
            return time.monotonic()
        time.sleep(0.05)
    raise TimeoutError(f"run {run_id} committed no batch in {timeout}s")


def one_run(run: int, events: int) -> dict[str, float]:
    root = tempfile.mkdtemp(prefix=f"mttr-{run}-")
    hook = SparkStreamHook(spec_for(root))
    try:
        generate_events(f"{root}/in", count=events, files=40, run=f"r{run}")
        record = stream_actions.submit(hook)
        hook.wait_until_ready(record)
        deadline = time.monotonic() + 300
        while not ((d := hook.status()) and d.queries and d.queries[0].status.get("isTriggerActive")):
            if time.monotonic() > deadline or (d is not None and d.totals["input_rows"] >= events):
                raise RuntimeError("no batch in flight was seen to kill: all input was processed (more --events)")
            time.sleep(0.02)
        killed_at = time.monotonic()
        os.killpg(record.submit_pid, signal.SIGKILL)
        result = None
        while result is None or result.action != "RESTARTED":
            result = supervise(hook, RestartPolicy(backoff_initial_s=0), lambda e: None)
            if result.action in ("RESTART_FAILED", "GAVE_UP") or time.monotonic() - killed_at > 300:
                raise RuntimeError(f"the supervisor did not restart the stream: {result}")
            if result.action != "RESTARTED":
                time.sleep(0.2)
        mttr = first_commit_after(hook, result.new_run_id) - killed_at
        stream_actions.stop(hook)
        submitted = time.monotonic()
        bare = stream_actions.submit(hook)
        bare_s = first_commit_after(hook, bare.run_id) - submitted
        stream_actions.stop(hook)
        failover_s, standby_s, memory = hot_standby_failover(root, run, events)
        return {"mttr_s": round(mttr, 2), "bare_restart_s": round(bare_s, 2), "failover_s": round(failover_s, 2),
                "standby_prepared_s": round(standby_s, 2), **memory}
    finally:
        for h in (hook, SparkStreamHook(dataclasses.replace(hook.spec, hot_standby=True))):
            record = h.driver_record()
            if record is not None and h.processes_of_run(record.run_id):
                stream_actions.kill(h, record, grace=5)
        stop_processes_under(root)
        shutil.rmtree(root, ignore_errors=True)


def hot_standby_failover(root: str, run: int, events: int) -> tuple[float, float]:
    """The same stream deployed again with a hot standby (fresh input): kill -> the standby's first committed
    batch, and how long the standby took to prepare (submit -> READY)."""
    hook = SparkStreamHook(dataclasses.replace(spec_for(root), hot_standby=True))
    generate_events(f"{root}/in", count=events, files=40, run=f"f{run}", file_start_index=1000)
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    asked = time.monotonic()
    result = None
    while result is None or result.action != "STANDBY_PREPARED":
        result = supervise(hook, RestartPolicy(backoff_initial_s=0), lambda e: None)
        if time.monotonic() - asked > 300:
            raise RuntimeError(f"the supervisor did not prepare the hot standby: {result}")
        if result.action != "STANDBY_PREPARED":
            time.sleep(0.5)
    standby = result.new_run_id
    while (hook.hot_standby_state() or {}).get("state") != "READY":
        if time.monotonic() - asked > 300:
            raise RuntimeError(f"the hot standby did not get ready: {hook.hot_standby_state()}")
        time.sleep(0.05)
    prepared_s = time.monotonic() - asked
    memory = {"standby_rss_mib": rss_mib(standby), "active_rss_mib": rss_mib(record.run_id)}
    deadline = time.monotonic() + 300
    while not ((d := hook.status()) and d.queries and d.queries[0].status.get("isTriggerActive")):
        if time.monotonic() > deadline:
            raise RuntimeError("no batch in flight was seen to kill")
        time.sleep(0.02)
    killed_at = time.monotonic()
    os.killpg(record.submit_pid, signal.SIGKILL)
    failover = first_commit_after(hook, standby) - killed_at
    stream_actions.stop(hook)
    return failover, prepared_s, memory


def rss_mib(run_id: str) -> float:
    """Resident memory of a run's processes (spark-submit, JVM, Python driver and its workers), MiB."""
    total = 0
    for proc in run_processes(run_id):
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            pass
    return round(total / 2**20, 1)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default="bench/results/mttr.json")
    parser.add_argument("--events", type=int, default=20000, help="input events (40 files, 1 file per batch)")
    parser.add_argument("--job", choices=("events_etl", "script"), default="events_etl",
                        help="the bundled events_etl, or bench/team_job.py (a team's own stateful script)")
    add_smoke_argument(parser)
    ns = parser.parse_args()
    global JOB
    JOB = ns.job
    if ns.job == "script" and ns.json == "bench/results/mttr.json":
        ns.json = "bench/results/mttr-script.json"
    if ns.smoke:
        ns.runs, ns.events = 1, 2000
        ns.json = os.path.join(smoke_results("mttr"), "mttr.json")
    stop_cleanly_on_sigterm()
    runs = [one_run(i, ns.events) for i in range(ns.runs)]
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("mttr_s", "bare_restart_s", "failover_s", "standby_prepared_s", "standby_rss_mib",
                     "active_rss_mib")}
    result = {"machine": {"nproc": os.cpu_count(), "python": platform.python_version()}, "job": ns.job, "runs": runs,
              "median": med, "ratio": round(med["mttr_s"] / med["bare_restart_s"], 3),
              "failover_ratio": round(med["failover_s"] / med["bare_restart_s"], 3)}
    print(f"job: {ns.job}")
    print(f"MTTR (kill -> supervisor redeploy -> first committed batch): {med['mttr_s']:.2f} s")
    print(f"bare restart (submit -> first committed batch):               {med['bare_restart_s']:.2f} s")
    print(f"hot standby failover (kill -> standby's first committed batch): {med['failover_s']:.2f} s "
          f"(standby prepared in {med['standby_prepared_s']:.2f} s)")
    print(f"hot standby memory while it waits: {med['standby_rss_mib']:.0f} MiB resident (the active driver: "
          f"{med['active_rss_mib']:.0f} MiB)")
    print(f"ratio {result['ratio']:.2f}; raw {runs}")
    print(f"failover ratio {result['failover_ratio']:.3f} (goal < 0.3)")
    os.makedirs(os.path.dirname(ns.json), exist_ok=True)
    with open(ns.json, "w") as fh:
        json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
