#!/usr/bin/env python
"""Standalone CLUSTER mode benchmark: the provider (SparkStreamHook -> StandaloneClusterTarget -> the
master's REST server) vs a bare REST submission of the same ETL to the same cluster.

Usage (from the project root, under the machine's Spark lock)::

    flock /tmp/airflow-streaming-spark.lock .venv/bin/python bench/cluster_bench.py [--runs 3] [--json bench/results/cluster.json]

One standalone master (REST server on) + one worker (2 cores, 2 GiB) are started from pyspark's
``spark-class`` by the tests' helper (``tests/standalone_cluster.py``) for the whole benchmark and
stopped by pid at the end, with every driver and executor they ran. Per run, in fresh temp dirs,
alternating which side goes first, one driver at a time:

1. deploy -> first progress. Provider: ``stream_actions.submit(hook)`` -> the run's first progress visible in its
   ``status.json`` (``totals["batches"] >= 1``, polled every 20 ms). Bare: ``POST
   /v1/submissions/create`` of ``bench/bare_etl.py`` (PythonRunner, the same conf) -> the timestamp its
   listener prints at the first progress (read from the driver's ``stdout`` in the worker's directory).
2. restart downtime: provider: ``stream_actions.stop(hook)`` (graceful, through the run marker), new input
   arrives, ``stream_actions.submit(hook)`` -> first progress of the new run; bare: ``POST /v1/submissions/kill``
   -> the master reports KILLED -> new input -> ``create`` -> first progress. Measured from the stop/kill request.
   The input arrives once the old run is down: fed before, a run still draining its last trigger could commit
   it, leaving the new run nothing to make progress on (seen once in CI: a 300 s wait for a batch never due).
3. kill latency: provider ``stream_actions.kill(hook, record)`` (identity check on the worker + REST kill + wait for
   KILLED) -> returns; bare: REST kill -> KILLED seen (polled every 20 ms). Both also until the driver's
   Python process has exited.

Input: 3 files x 1,000 events before the deploy, 2 x 1,000 before the restart (after the stop/kill); trigger 1 s.
Medians over runs, ratios provider/bare, raw values and the machine go to the JSON file.

``--smoke`` (CI): one run, 100 events per file, no warm-up deploy; the same figure lines; JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

ROOT = Path(__file__).resolve().parents[1]
BARE_ETL = ROOT / "bench" / "bare_etl.py"
for _path in (ROOT, ROOT / "tests", ROOT / "bench"):
    sys.path.insert(0, str(_path))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")

from harness import (add_smoke_argument, smoke_results, stop_cleanly_on_sigterm, stop_processes_under,  # noqa: E402
                     wait_for)
import stream_actions  # noqa: E402 - tests/stream_actions.py (harness puts tests/ on the path)

if TYPE_CHECKING:
    from standalone_cluster import Cluster  # imported in main(), once AIRFLOW_HOME is set

SPARK_CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false", "spark.cores.max": "1",
              "spark.executor.memory": "512m", "spark.driver.memory": "512m"}
POLL = 0.02
EVENTS_PER_FILE = 1000


def log(msg: str) -> None:
    print(f"[cluster-bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def http_json(url: str, body: dict | None = None, method: str = "GET") -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as resp:  # noqa: S310 - loopback
        return json.load(resp)


def submission_state(cluster: Cluster, sid: str) -> str | None:
    """The master's state of a REST submission (RUNNING, FINISHED, KILLED, FAILED, ERROR), ``None`` if unknown."""
    from standalone_cluster import fetch_json

    return (fetch_json(f"{cluster.rest}/v1/submissions/status/{sid}") or {}).get("driverState")


def feed(directory: str, run: str, files: int, start: int) -> int:
    from spark_jobs.event_generator import generate_events

    batch = generate_events(directory, count=files * EVENTS_PER_FILE, files=files, run=run, file_start_index=start)
    return batch.valid + batch.malformed


def python_driver_pid(cluster: Cluster, sid: str, script: str) -> int | None:
    import psutil

    for proc in psutil.process_iter(["pid", "cmdline", "ppid"]):
        cmd = proc.info["cmdline"] or []
        if any(script in a for a in cmd) and "python" in (cmd[0] if cmd else ""):
            try:
                parent = psutil.Process(proc.info["ppid"]).cmdline()
            except psutil.Error:
                continue
            if any(sid in a for a in parent):
                return proc.info["pid"]
    return None


def pid_gone_after(pid: int | None, started: float, timeout: float = 60.0) -> float | None:
    import psutil

    if pid is None:
        return None
    wait_for(lambda: not psutil.pid_exists(pid), timeout, f"pid {pid} to exit")
    return time.monotonic() - started


# --------------------------------------------------------------------------- provider


def provider_run(cluster: Cluster, work: Path, run: int) -> dict[str, Any]:
    from airflow_streaming.hooks.streaming_job import SparkStreamHook
    from airflow_streaming.spec import StreamSpec

    inp, out = str(work / "input"), str(work / "output")
    spec = StreamSpec(name=f"bench{run}", application="events_etl", checkpoint_location=str(work / "ckpt"),
                      control_location=str(work / "control"), master=cluster.master, deploy_mode="cluster",
                      master_ui_url=cluster.ui, trigger_interval=1, heartbeat_interval=1, stop_timeout=60,
                      startup_timeout=240, spark_conf=SPARK_CONF, cluster={"rest_url": cluster.rest},
                      application_args=["--input", inp, "--output", out, "--quarantine", str(work / "quarantine")])
    hook = SparkStreamHook(spec)
    rows = feed(inp, f"p{run}a", 3, 0)

    def first_progress(run_id: str) -> float:
        def seen() -> float | None:
            doc = hook.status()
            if doc is not None and doc.run_id == run_id and doc.is_terminal:
                raise RuntimeError(f"run {run_id} ended: {doc.exit} {doc.last_exception}\n{hook.log_tail(run_id)}")
            return time.monotonic() if doc is not None and doc.run_id == run_id and doc.totals.get("batches", 0) >= 1 \
                else None
        try:
            return wait_for(seen, 300, f"first progress of {run_id}")
        except TimeoutError as exc:  # say what the run was doing, so a failure in CI can be read
            doc = hook.status()
            raise TimeoutError(f"{exc}; status: {doc.to_json().decode() if doc is not None else None}\n"
                               f"{hook.log_tail(run_id)}") from None

    def processed(run_id: str, n: int) -> None:
        wait_for(lambda: ((d := hook.status()) is not None and d.run_id == run_id
                          and d.totals.get("input_rows", 0) >= n), 300, f"{n} rows in {run_id}", 0.2)

    result: dict[str, Any] = {}
    records = []
    try:
        t0 = time.monotonic()
        record = stream_actions.submit(hook)
        records.append(record)
        result["deploy_to_first_progress_s"] = first_progress(record.run_id) - t0
        processed(record.run_id, rows)
        t0 = time.monotonic()
        report = stream_actions.stop(hook)
        assert report.graceful, report.to_dict()
        rows2 = feed(inp, f"p{run}b", 2, 10)
        record2 = stream_actions.submit(hook)
        records.append(record2)
        result["restart_downtime_s"] = first_progress(record2.run_id) - t0
        result["stop_s"] = report.seconds
        processed(record2.run_id, rows2)
        doc = hook.status()
        pid = doc.pid if doc is not None else None
        t0 = time.monotonic()
        outcome = stream_actions.kill(hook, record2)
        result["kill_to_killed_s"] = time.monotonic() - t0
        assert "KILLED" in outcome, outcome
        result["kill_to_python_exit_s"] = pid_gone_after(pid, t0)
    finally:
        for rec in records:
            if not hook.target_of(rec).state(rec).gone:
                stream_actions.kill(hook, rec, grace=5)
    return result


# --------------------------------------------------------------------------- bare REST submission


def bare_submit(cluster: Cluster, work: Path) -> str:
    args = ["--input", str(work / "input"), "--output", str(work / "output"), "--quarantine",
            str(work / "quarantine"), "--checkpoint", str(work / "ckpt"), "--trigger-seconds", "1"]
    body = {"action": "CreateSubmissionRequest", "appResource": f"file:{BARE_ETL}",
            "mainClass": "org.apache.spark.deploy.PythonRunner", "appArgs": [str(BARE_ETL), "", *args],
            "clientSparkVersion": "4.2.0", "environmentVariables": {"PYSPARK_PYTHON": sys.executable},
            "sparkProperties": {**SPARK_CONF, "spark.master": cluster.master, "spark.submit.deployMode": "cluster",
                                "spark.app.name": "bare_etl", "spark.driver.supervise": "false"}}
    reply = http_json(f"{cluster.rest}/v1/submissions/create", body, "POST")
    assert reply.get("success"), reply
    return reply["submissionId"]


def bare_lines(cluster: Cluster, sid: str) -> list[list[str]]:
    path = cluster.work_dir / sid / "stdout"
    text = path.read_text(errors="replace") if path.exists() else ""
    return [line.split() for line in text.splitlines() if line.startswith("BENCH ")]


def bare_first_progress(cluster: Cluster, sid: str) -> float:
    def seen() -> float | None:
        if submission_state(cluster, sid) in ("FAILED", "ERROR", "FINISHED", "KILLED"):
            raise RuntimeError(f"bare driver {sid} ended {submission_state(cluster, sid)}")
        stamps = [float(p[2]) for p in bare_lines(cluster, sid) if p[1] == "first_progress"]
        return stamps[0] if stamps else None
    return wait_for(seen, 300, f"first progress of bare {sid}", 0.1)


def bare_processed(cluster: Cluster, sid: str, rows: int) -> None:
    wait_for(lambda: sum(int(p[4]) for p in bare_lines(cluster, sid) if p[1] == "batch") >= rows, 300,
             f"{rows} rows in bare {sid}", 0.2)


def bare_kill(cluster: Cluster, sid: str) -> float:
    t0 = time.monotonic()
    http_json(f"{cluster.rest}/v1/submissions/kill/{sid}", {}, "POST")
    wait_for(lambda: submission_state(cluster, sid) == "KILLED", 60, f"bare {sid} KILLED")
    return t0


def bare_run(cluster: Cluster, work: Path, run: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    inp = str(work / "input")
    rows = feed(inp, f"b{run}a", 3, 0)
    sids: list[str] = []
    try:
        t0_wall = time.time()
        sids.append(bare_submit(cluster, work))
        result["deploy_to_first_progress_s"] = bare_first_progress(cluster, sids[-1]) - t0_wall
        bare_processed(cluster, sids[-1], rows)
        t0 = bare_kill(cluster, sids[-1])
        t0_wall = time.time() - (time.monotonic() - t0)
        rows2 = feed(inp, f"b{run}b", 2, 10)
        sids.append(bare_submit(cluster, work))
        result["restart_downtime_s"] = bare_first_progress(cluster, sids[-1]) - t0_wall
        bare_processed(cluster, sids[-1], rows2)
        pid = python_driver_pid(cluster, sids[-1], str(BARE_ETL))
        t0 = bare_kill(cluster, sids[-1])
        result["kill_to_killed_s"] = time.monotonic() - t0
        result["kill_to_python_exit_s"] = pid_gone_after(pid, t0)
    finally:
        for sid in sids:
            if submission_state(cluster, sid) not in ("KILLED", "FINISHED", "FAILED", "ERROR"):
                http_json(f"{cluster.rest}/v1/submissions/kill/{sid}", {}, "POST")
    return result


# --------------------------------------------------------------------------- main


def median(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def machine() -> dict[str, Any]:
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60).stderr.splitlines()
    with open("/proc/meminfo") as fh:
        mem = int(fh.readline().split()[1]) / 1024 / 1024
    return {"nproc": os.cpu_count(), "mem_total_gib": round(mem, 2), "python": platform.python_version(),
            "java": java[0] if java else None, "pyspark": pyspark.__version__, "platform": platform.platform(),
            "loadavg_start": os.getloadavg()}


def main() -> int:
    global EVENTS_PER_FILE
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", default="bench/results/cluster.json")
    parser.add_argument("--events-per-file", type=int, default=EVENTS_PER_FILE)
    parser.add_argument("--no-warmup", dest="warmup", action="store_false", help="skip the discarded bare deploy")
    parser.add_argument("--keep", action="store_true", help="keep the work dir (cluster and driver logs)")
    add_smoke_argument(parser)
    args = parser.parse_args()
    if args.smoke:
        args.runs, args.events_per_file, args.warmup = 1, 100, False
        args.json = str(Path(smoke_results("cluster")) / "cluster.json")
    EVENTS_PER_FILE = args.events_per_file
    stop_cleanly_on_sigterm()
    root = Path(tempfile.mkdtemp(prefix="cluster-bench-"))
    os.environ["AIRFLOW_HOME"] = str(root / "airflow-home")  # before anything imports Airflow (the hook does)
    from standalone_cluster import class_archive_conf, standalone_cluster

    # Both sides get the same conf; with a class-data-sharing archive in SPARK_SUBMIT_OPTS (the test suite's),
    # the worker's driver and executor JVMs map it too, else nothing is added.
    SPARK_CONF.update(class_archive_conf())
    info = machine()
    started = time.monotonic()
    runs: list[dict[str, Any]] = []
    try:
        # tests/standalone_cluster.py: master (REST on) + one 2-core/2 GiB worker, stopped by pid on exit
        # together with every process (drivers, executors) whose command line mentions the work dir.
        with standalone_cluster(root) as cluster:
            log(f"cluster up in {time.monotonic() - started:.1f}s: {cluster.master}, REST {cluster.rest}")
            if args.warmup:
                log("warm-up: one bare deploy (discarded)")
                warm = root / "warmup"
                feed(str(warm / "input"), "warm", 1, 0)
                sid = bare_submit(cluster, warm)
                bare_first_progress(cluster, sid)
                bare_kill(cluster, sid)
            for run in range(1, args.runs + 1):
                order = ["provider", "bare"] if run % 2 else ["bare", "provider"]
                entry: dict[str, Any] = {"run": run, "order": order}
                for side in order:
                    work = root / f"r{run}-{side}"
                    entry[side] = (provider_run if side == "provider" else bare_run)(cluster, work, run)
                    log(f"run {run} {side}: {json.dumps({k: round(v, 2) for k, v in entry[side].items() if v})}")
                runs.append(entry)
    finally:
        stop_processes_under(str(root))  # the Python drivers outlive their killed JVMs by a few seconds
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    metrics = ["deploy_to_first_progress_s", "restart_downtime_s", "kill_to_killed_s", "kill_to_python_exit_s"]
    summary = {}
    for metric in metrics:
        p = median([r["provider"].get(metric) for r in runs])
        b = median([r["bare"].get(metric) for r in runs])
        summary[metric] = {"provider": p, "bare": b, "ratio": (p / b) if p and b else None,
                           "raw_provider": [r["provider"].get(metric) for r in runs],
                           "raw_bare": [r["bare"].get(metric) for r in runs]}
        log(f"{metric}: provider {p} bare {b} ratio {summary[metric]['ratio']}")
    doc = {"benchmark": "cluster (standalone cluster mode via the REST submission server)", "machine": info,
           "config": {"runs": args.runs, "spark_conf": SPARK_CONF, "trigger_seconds": 1, "worker": "2 cores, 2g",
                      "input": f"3 x {EVENTS_PER_FILE} events before deploy, 2 x {EVENTS_PER_FILE} before restart"},
           "summary": summary, "runs": runs, "loadavg_end": os.getloadavg()}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(doc, indent=1))
    log(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
