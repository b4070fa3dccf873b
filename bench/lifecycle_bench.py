#!/usr/bin/env python
"""Lifecycle benchmark: a managed ``events_etl`` stream (SparkStreamHook + driver runtime) vs. a bare
``spark-submit`` of the same ETL transformation (``bench/bare_etl.py``).

Usage (from the project root)::

    .venv/bin/python bench/lifecycle_bench.py [--runs 3] [--json bench/results/lifecycle.json]

Each run measures, for the managed stream and for the bare baseline (one driver at a time, alternating
which side goes first, in fresh temp dirs under $TMPDIR, default /tmp):

1. deploy -> first progress: managed = ``stream_actions.submit(hook)`` -> first progress event of the run visible in
   ``status.json`` (``totals["batches"] >= 1``, polled every 20 ms); bare = launch of ``spark-submit``
   -> timestamp printed by its listener at the first progress event. Input files are present before.
2. stop: managed = ``stream_actions.stop(hook)`` (graceful, at a batch boundary) -> driver exit
   (``StopReport.seconds``, which polls the pid every 0.2 s; a 10 ms pid watcher is recorded too);
   bare = SIGTERM to the spark-submit process group -> spark-submit exit (a hard stop that does not
   wait for a batch boundary). Both are stopped once all input is processed (the query is idle).
3. restart -> first progress: the same as 1 on the existing checkpoint, with new input present.
4. status reporter cost: ``batchDuration`` (ms) of every batch with data, managed from the
   ``recent_progress`` in ``status.json``, bare from its ``BENCH batch`` lines (6 files x 2000 events per
   phase with maxFilesPerTrigger=1 -> ~6 equal batches per phase, 2 phases per run).

Medians over runs (and over all data batches for 4), ratios managed/bare, the per-run raw values and
the machine are printed as a table and written as JSON. Every process started here is stopped by its
pid / process group, also on errors and on Ctrl-C / SIGTERM.

``--smoke`` (CI): one run, 2 files x 100 events per phase, no warm-up start, no waiting for other Spark
processes; the same table; JSON to a temp dir.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
BARE_ETL = ROOT / "bench" / "bare_etl.py"
VENV_BIN = ROOT / ".venv" / "bin"
DEFAULT_JSON = "bench/results/lifecycle.json"
sys.path.insert(0, str(ROOT / "bench"))

from harness import add_smoke_argument, smoke_results  # noqa: E402
import stream_actions  # noqa: E402 - tests/stream_actions.py (harness puts tests/ on the path)
from lifecycle_processes import (  # noqa: E402
    OUR_GROUPS, Cleanup, ForeignMonitor, group_alive, log, spark_processes, stop_group, wait_quiet)
from lifecycle_report import check_consistency, render, summarize  # noqa: E402

MASTER = "local[2]"
TRIGGER_SECONDS = 1.0
HEARTBEAT_SECONDS = 1.0
SPARK_CONF = {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"}
STATUS_POLL_SECONDS = 0.02
EXIT_WATCH_SECONDS = 0.01


# --------------------------------------------------------------------------- environment


def setup_environment() -> str:
    """spark-submit on PATH, driver Python, loopback Spark, an isolated throw-away AIRFLOW_HOME."""
    path = os.environ.get("PATH", "")
    if not path.startswith(str(VENV_BIN) + os.pathsep):
        os.environ["PATH"] = str(VENV_BIN) + os.pathsep + path
    os.environ.setdefault("PYSPARK_PYTHON", str(VENV_BIN / "python"))
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", os.environ["PYSPARK_PYTHON"])
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Like tests/conftest.py: Airflow (imported by the hook) gets its own temp home, no examples.
    airflow_home = tempfile.mkdtemp(prefix="bench-airflow-home-")
    os.environ["AIRFLOW_HOME"] = airflow_home
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # the hook's info lines go to stdout
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    return airflow_home


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float,
             check: Callable[[], None] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if check is not None:
            check()
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read()[-20000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


# --------------------------------------------------------------------------- input


def feed(directory: str, label: str, files: int, events_per_file: int, start_index: int) -> int:
    """Write ``files`` files of ``events_per_file`` valid events; return the number of lines written."""
    from spark_jobs.event_generator import generate_events

    batch = generate_events(directory, count=files * events_per_file, files=files, run=label,
                            file_start_index=start_index)
    return batch.valid + batch.malformed


# --------------------------------------------------------------------------- bare baseline


class BareDriver:
    """One ``spark-submit bench/bare_etl.py`` process and what it printed."""

    def __init__(self, cleanup: Cleanup, work: str, args: argparse.Namespace, tag: str):
        self.cleanup = cleanup
        self.work = work
        self.args = args
        self.tag = tag
        self.first_progress: float | None = None
        self.batches: list[tuple[int, int, int]] = []  # (batchId, batchDuration ms, numInputRows)
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.launched_at = 0.0
        self.stderr_path = os.path.join(work, f"{tag}.stderr.log")
        self.stdout_path = os.path.join(work, f"{tag}.stdout.log")

    def command(self) -> list[str]:
        w = self.work
        cmd = ["spark-submit", "--master", MASTER, "--conf", "spark.ui.showConsoleProgress=false"]
        for key, value in SPARK_CONF.items():
            cmd += ["--conf", f"{key}={value}"]
        cmd += ["--name", "bare_etl", str(BARE_ETL),
                "--input", os.path.join(w, "input"), "--output", os.path.join(w, "output"),
                "--quarantine", os.path.join(w, "quarantine"), "--checkpoint", os.path.join(w, "checkpoint"),
                "--max-files-per-trigger", str(self.args.max_files_per_trigger),
                "--trigger-seconds", str(TRIGGER_SECONDS)]
        return cmd

    def start(self) -> None:
        cmd = self.command()
        with open(self.stderr_path, "ab") as err:
            self.launched_at = time.time()
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL,
                                         start_new_session=True, close_fds=True, cwd=str(ROOT))
        self.cleanup.procs.append(self.proc)
        OUR_GROUPS.add(self.proc.pid)
        threading.Thread(target=self._read, name=f"read-{self.tag}", daemon=True).start()

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.stdout_path, "ab") as out:
            for raw in self.proc.stdout:
                out.write(raw)
                out.flush()
                parts = raw.decode("utf-8", "replace").split()
                if len(parts) < 3 or parts[0] != "BENCH":
                    continue
                with self.lock:
                    if parts[1] == "first_progress" and self.first_progress is None:
                        self.first_progress = float(parts[2])
                    elif parts[1] == "batch" and len(parts) >= 5:
                        self.batches.append((int(parts[2]), int(parts[3]), int(parts[4])))

    def check_alive(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(f"bare driver {self.tag} exited early with code {self.proc.returncode}; "
                               f"stderr tail ({self.stderr_path}):\n{tail(self.stderr_path)}")

    def rows(self) -> int:
        with self.lock:
            return sum(b[2] for b in self.batches)

    def wait_first_progress(self, timeout: float) -> float:
        """Seconds from launch to the first-progress line's timestamp."""
        ts = wait_for(lambda: self.first_progress, timeout, f"first progress of bare {self.tag}", 0.01,
                      self.check_alive)
        return ts - self.launched_at

    def wait_rows(self, rows: int, timeout: float) -> None:
        wait_for(lambda: self.rows() >= rows, timeout, f"{rows} rows processed by bare {self.tag}", 0.1,
                 self.check_alive)

    def sigterm(self, timeout: float) -> tuple[float, int | None]:
        """SIGTERM the process group; return (seconds until spark-submit exited, exit code)."""
        assert self.proc is not None
        started = time.monotonic()
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            seconds = time.monotonic() - started
            stop_group(self.proc, grace=5)
            return seconds, None
        seconds = time.monotonic() - started
        # The Python driver (child of the JVM, same group) must be gone too before the next driver starts.
        wait_for(lambda: not group_alive(self.proc.pid), 30, f"process group of bare {self.tag} to exit", 0.05)
        return seconds, code


def bare_lifecycle(cleanup: Cleanup, args: argparse.Namespace, run: int) -> dict[str, Any]:
    from airflow_streaming.checkpoint.batches import read_batch_position

    work = cleanup.mkdtemp(f"bench-lifecycle-r{run}-bare-")
    inp = os.path.join(work, "input")
    result: dict[str, Any] = {"work_dir": work}
    storage = _local_storage()

    lines1 = feed(inp, "phase1", args.files, args.events_per_file, 0)
    first = BareDriver(cleanup, work, args, "run1")
    first.start()
    result["deploy_to_first_progress_s"] = first.wait_first_progress(args.timeout)
    log(f"run {run} bare: first progress after {result['deploy_to_first_progress_s']:.2f}s")
    first.wait_rows(lines1, args.timeout)
    stop_s, code = first.sigterm(60)
    result["stop_s"] = stop_s
    result["stop_exit_code"] = code
    position = read_batch_position(storage, os.path.join(work, "checkpoint"))
    result["checkpoint_after_stop"] = position.to_dict()
    result["batches_run1"] = [list(b) for b in first.batches]
    log(f"run {run} bare: SIGTERM -> exit {stop_s:.2f}s (code {code}, checkpoint clean={position.clean})")

    lines2 = feed(inp, "phase2", args.files, args.events_per_file, 1000)
    second = BareDriver(cleanup, work, args, "run2")
    second.start()
    result["restart_to_first_progress_s"] = second.wait_first_progress(args.timeout)
    log(f"run {run} bare: restart first progress after {result['restart_to_first_progress_s']:.2f}s")
    second.wait_rows(lines2, args.timeout)
    result["restart_first_batch_id"] = second.batches[0][0] if second.batches else None
    result["restart_expected_batch_id"] = position.next_batch_id
    stop2_s, code2 = second.sigterm(60)
    result["stop_after_restart_s"] = stop2_s
    result["stop_after_restart_exit_code"] = code2
    result["batches_run2"] = [list(b) for b in second.batches]
    result["data_batch_ms"] = [b[1] for b in first.batches + second.batches if b[2] > 0]
    return result


def _local_storage() -> Any:
    from airflow_streaming.control.locations import storage_for

    storage, _ = storage_for("/tmp")
    return storage


def bare_warmup(cleanup: Cleanup, args: argparse.Namespace) -> float:
    """One unmeasured bare start (JVM, jars, Python imports into the page cache)."""
    work = cleanup.mkdtemp("bench-lifecycle-warmup-")
    feed(os.path.join(work, "input"), "warmup", 1, 200, 0)
    driver = BareDriver(cleanup, work, args, "warmup")
    driver.start()
    try:
        return driver.wait_first_progress(args.timeout)
    finally:
        driver.sigterm(60)


# --------------------------------------------------------------------------- managed stream


def managed_spec(work: str, args: argparse.Namespace) -> Any:
    from airflow_streaming.spec import StreamSpec

    return StreamSpec.from_dict({
        "name": "etl",
        "application": "events_etl",
        "checkpoint_location": os.path.join(work, "checkpoints", "etl"),
        "control_location": os.path.join(work, "control"),
        "master": MASTER,
        "trigger_interval": TRIGGER_SECONDS,
        "heartbeat_interval": HEARTBEAT_SECONDS,
        "stop_timeout": 60,
        "startup_timeout": args.timeout,
        "application_args": [
            "--input", os.path.join(work, "input", "etl"), "--output", os.path.join(work, "output", "etl"),
            "--quarantine", os.path.join(work, "quarantine", "etl"),
            "--max-files-per-trigger", str(args.max_files_per_trigger),
        ],
        "spark_conf": dict(SPARK_CONF),
    })


def status_of(hook: Any, run_id: str) -> Any:
    from airflow_streaming.control import contract

    try:
        doc = hook.status()
    except contract.ControlFileError:
        return None
    return doc if doc is not None and doc.run_id == run_id else None


def managed_check(hook: Any, record: Any) -> Callable[[], None]:
    def check() -> None:
        doc = status_of(hook, record.run_id)
        if (doc is not None and doc.is_terminal) or not hook.alive(record):
            raise RuntimeError(f"managed driver (run {record.run_id}) ended early: "
                               f"state={doc.state if doc else None} exit={doc.exit if doc else None} "
                               f"error={doc.last_exception if doc else None}\n{hook.log_tail(record.run_id)}")
    return check


def managed_submit_to_first_progress(cleanup: Cleanup, hook: Any, args: argparse.Namespace) -> tuple[Any, float, float]:
    """Submit; return (record, seconds to the first progress visible in status.json, seconds in submit())."""
    t0 = time.time()
    record = stream_actions.submit(hook)
    submit_s = time.time() - t0
    cleanup.managed.append((hook, record))
    OUR_GROUPS.add(record.submit_pid)

    def first() -> float | None:
        doc = status_of(hook, record.run_id)
        return time.time() if doc is not None and doc.totals.get("batches", 0) >= 1 else None

    seen = wait_for(first, args.timeout, f"first progress of managed run {record.run_id}", STATUS_POLL_SECONDS,
                    managed_check(hook, record))
    return record, seen - t0, submit_s


def managed_wait_rows(hook: Any, record: Any, rows: int, timeout: float) -> Any:
    wait_for(lambda: (getattr(status_of(hook, record.run_id), "totals", None) or {}).get("input_rows", 0) >= rows,
             timeout, f"{rows} rows processed by managed run {record.run_id}", 0.1, managed_check(hook, record))
    return status_of(hook, record.run_id)


def progress_of(doc: Any) -> list[dict[str, Any]]:
    return [p for q in doc.queries for p in q.recent_progress]


def managed_stop(hook: Any, record: Any) -> tuple[Any, float | None]:
    """stream_actions.stop(hook), with a 10 ms pid watcher alongside; return (StopReport, watcher seconds)."""
    from airflow_streaming.control.contract import process_alive

    exited: dict[str, float] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            if not process_alive(record.submit_pid, record.submit_pid_start_time):
                exited["at"] = time.monotonic()
                return
            time.sleep(EXIT_WATCH_SECONDS)

    watcher = threading.Thread(target=watch, name="exit-watch", daemon=True)
    started = time.monotonic()
    watcher.start()
    try:
        report = stream_actions.stop(hook)
    finally:
        watcher.join(timeout=1)  # the driver is gone (or killed): the watcher has seen it within 10 ms
        done.set()
        watcher.join(timeout=1)
    if hook.alive(record):  # never leave it running before the next driver starts
        stream_actions.kill(hook, record, grace=5)
    return report, (exited["at"] - started) if "at" in exited else None


def managed_lifecycle(cleanup: Cleanup, args: argparse.Namespace, run: int) -> dict[str, Any]:
    from airflow_streaming.hooks.streaming_job import SparkStreamHook

    work = cleanup.mkdtemp(f"bench-lifecycle-r{run}-managed-")
    spec = managed_spec(work, args)
    hook = SparkStreamHook(spec)
    cleanup.hooks.append(hook)
    inp = os.path.join(work, "input", "etl")
    result: dict[str, Any] = {"work_dir": work}

    lines1 = feed(inp, "phase1", args.files, args.events_per_file, 0)
    record, first_s, submit_s = managed_submit_to_first_progress(cleanup, hook, args)
    result.update(deploy_to_first_progress_s=first_s, submit_call_s=submit_s, run_id_1=record.run_id)
    log(f"run {run} managed: first progress after {first_s:.2f}s (submit() {submit_s:.2f}s)")
    doc = managed_wait_rows(hook, record, lines1, args.timeout)
    progress1 = progress_of(doc)
    report, watched = managed_stop(hook, record)
    rep = report.to_dict()
    result.update(
        stop_s=report.seconds, stop_exit_watch_s=watched, stop_graceful=report.graceful, stop_killed=report.killed,
        stop_exit_code=report.exit_code, stop_position_clean=report.position.clean if report.position else None,
        stop_last_committed_batch=rep.get("last_committed_batch"), stop_last_planned_batch=rep.get("last_planned_batch"),
        stop_report=rep,
    )
    log(f"run {run} managed: stop {report.seconds:.2f}s (pid watcher {watched if watched is None else round(watched, 2)}s)"
        f" graceful={report.graceful} clean={result['stop_position_clean']} last_committed={rep.get('last_committed_batch')}")

    lines2 = feed(inp, "phase2", args.files, args.events_per_file, 1000)
    record2, restart_s, submit2_s = managed_submit_to_first_progress(cleanup, hook, args)
    result.update(restart_to_first_progress_s=restart_s, restart_submit_call_s=submit2_s, run_id_2=record2.run_id)
    log(f"run {run} managed: restart first progress after {restart_s:.2f}s (submit() {submit2_s:.2f}s)")
    doc2 = managed_wait_rows(hook, record2, lines2, args.timeout)
    progress2 = progress_of(doc2)
    result["restart_first_batch_id"] = min((p["batchId"] for p in progress2), default=None)
    last = report.position.last_committed if report.position else None
    result["restart_expected_batch_id"] = None if last is None else last + 1
    report2, watched2 = managed_stop(hook, record2)
    result.update(stop_after_restart_s=report2.seconds, stop_after_restart_exit_watch_s=watched2,
                  stop_after_restart_graceful=report2.graceful,
                  stop_after_restart_clean=report2.position.clean if report2.position else None)
    summarize = lambda ps: [[p["batchId"], p.get("batchDuration"), p.get("numInputRows")] for p in ps]  # noqa: E731
    result["batches_run1"] = summarize(progress1)
    result["batches_run2"] = summarize(progress2)
    result["recent_progress_complete"] = (sum(p.get("numInputRows") or 0 for p in progress1) == lines1
                                          and sum(p.get("numInputRows") or 0 for p in progress2) == lines2)
    result["data_batch_ms"] = [p["batchDuration"] for p in progress1 + progress2 if (p.get("numInputRows") or 0) > 0]
    return result


def warm_hook(args: argparse.Namespace, cleanup: Cleanup) -> None:
    """Import Airflow and resolve the Spark connection once, outside the measurements (no side effects)."""
    from airflow_streaming.hooks.streaming_job import SparkStreamHook

    work = cleanup.mkdtemp("bench-lifecycle-warmhook-")
    SparkStreamHook(managed_spec(work, args)).command_for("warmup")


# --------------------------------------------------------------------------- machine


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {"nproc": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count()}
    try:
        with open("/proc/meminfo") as fh:
            kb = next(int(line.split()[1]) for line in fh if line.startswith("MemTotal:"))
        info["mem_total_gib"] = round(kb / 1024 / 1024, 2)
    except (OSError, StopIteration, ValueError):
        info["mem_total_gib"] = None
    info["cpu_model"] = None
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Hardware", "cpu model", "uarch") and value.strip():
                    info["cpu_model"] = value.strip()
                    break
    except OSError:
        pass
    info["python"] = f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})"
    try:
        out = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=60)
        info["java_version"] = (out.stderr or out.stdout).strip().splitlines()
    except (OSError, subprocess.SubprocessError) as exc:
        info["java_version"] = [f"unavailable: {exc}"]
    try:
        import pyspark

        info["pyspark"] = pyspark.__version__
    except ImportError:
        info["pyspark"] = None
    info["platform"] = platform.platform()
    info["loadavg_start"] = list(os.getloadavg())
    info["foreign_spark_processes_at_start"] = spark_processes(foreign_only=True)
    return info


# --------------------------------------------------------------------------- main


class Interrupted(KeyboardInterrupt):
    pass


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise Interrupted(f"signal {signal.Signals(signum).name}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="repetitions of every measurement (default 3)")
    parser.add_argument("--json", default=DEFAULT_JSON, help=f"JSON output path (default {DEFAULT_JSON})")
    parser.add_argument("--files", type=int, default=6, help="input files per phase (default 6)")
    parser.add_argument("--events-per-file", type=int, default=2000, help="events per input file (default 2000)")
    parser.add_argument("--max-files-per-trigger", type=int, default=1, help="maxFilesPerTrigger (default 1)")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for any one step (default 300)")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false",
                        help="skip the unmeasured bare warm-up start")
    parser.add_argument("--wait-quiet", type=float, default=900,
                        help="before each measured side, wait up to this many seconds for other Spark "
                             "processes on the machine to finish (default 900)")
    parser.add_argument("--keep-tmp", action="store_true", help="keep the temp dirs (logs, checkpoints) for inspection")
    add_smoke_argument(parser)
    ns = parser.parse_args(argv)
    if ns.smoke:
        ns.runs, ns.files, ns.events_per_file, ns.warmup, ns.wait_quiet = 1, 2, 100, False, 0.0
        ns.json = os.path.join(smoke_results("lifecycle"), "lifecycle.json")
    if ns.runs < 1:
        parser.error("--runs must be >= 1")
    return ns


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    airflow_home = setup_environment()
    cleanup = Cleanup()
    cleanup.dirs.append(airflow_home)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_interrupt)
    real_stdout, sys.stdout = sys.stdout, sys.stderr  # anything chatty goes to stderr; the report to stdout
    monitor = ForeignMonitor()

    started = time.time()
    result: dict[str, Any] = {
        "benchmark": "lifecycle", "started_at": started,
        "machine": machine_info(),
        "config": {"runs": args.runs, "files": args.files, "events_per_file": args.events_per_file,
                   "max_files_per_trigger": args.max_files_per_trigger, "trigger_seconds": TRIGGER_SECONDS,
                   "heartbeat_seconds": HEARTBEAT_SECONDS, "master": MASTER, "spark_conf": SPARK_CONF,
                   "warmup": args.warmup, "status_poll_seconds": STATUS_POLL_SECONDS},
        "runs": [],
    }
    code = 0
    result["waited_for_quiet_s"] = []
    result["foreign_spark_during"] = {}

    def quiet(what: str) -> None:
        waited, still = wait_quiet(args.wait_quiet)
        result["waited_for_quiet_s"].append(round(waited, 1))
        if still:
            log(f"WARNING: other Spark processes still running before {what}; measuring anyway")
        monitor.take()

    try:
        warm_hook(args, cleanup)
        monitor.start()
        if args.warmup:
            quiet("warm-up")
            log("warm-up: one unmeasured bare start")
            result["warmup_first_progress_s"] = bare_warmup(cleanup, args)
        for i in range(1, args.runs + 1):
            order = ["managed", "bare"] if i % 2 == 1 else ["bare", "managed"]
            entry: dict[str, Any] = {"run": i, "order": order, "files": args.files,
                                     "max_files_per_trigger": args.max_files_per_trigger}
            result["runs"].append(entry)
            for side in order:
                quiet(f"run {i} {side}")
                log(f"run {i}/{args.runs}: {side}")
                entry[side] = (managed_lifecycle if side == "managed" else bare_lifecycle)(cleanup, args, i)
                foreign = monitor.take()
                if foreign:
                    result["foreign_spark_during"][f"run {i} {side}"] = foreign
                leftovers = cleanup.kill_all()  # nothing may survive into the next side's driver
                if leftovers:
                    raise RuntimeError(f"drivers were still running after the {side} lifecycle: {leftovers}")
    except KeyboardInterrupt as exc:
        result["error"] = f"interrupted ({exc or 'Ctrl-C'})"
        code = 130
        log(result["error"])
    except Exception:  # noqa: BLE001 - report, clean up, keep the partial results
        result["error"] = traceback.format_exc()
        code = 1
        log(result["error"])
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the cleanup must not be interrupted
        monitor.stop()
        leftovers = cleanup.kill_all()
        if leftovers:
            log(f"stopped leftover drivers: {leftovers}")
            result["leftovers_stopped"] = leftovers
        if args.keep_tmp:
            log(f"kept temp dirs: {cleanup.dirs}")
        else:
            cleanup.remove_dirs()
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)

    result["finished_at"] = time.time()
    result["wall_seconds"] = result["finished_at"] - started
    result["loadavg_end"] = list(os.getloadavg())
    result["summary"] = summarize([r for r in result["runs"] if r.get("managed") or r.get("bare")])
    result["warnings"] = check_consistency(result)
    for what, foreign in result["foreign_spark_during"].items():
        drivers = [f for f in foreign if "launch.py" in f or "bare_etl" in f] or foreign
        result["warnings"].append(f"{what}: {len(foreign)} other Spark process(es) ran meanwhile, numbers disturbed "
                                  f"(e.g. {drivers[0][:150]})")
    result["our_spark_processes_at_end"] = [p for p in spark_processes() if p not in spark_processes(foreign_only=True)]
    if result["our_spark_processes_at_end"]:
        result["warnings"].append(f"our Spark processes alive at the end: {result['our_spark_processes_at_end']}")
    sys.stdout = real_stdout
    print(render(result), flush=True)
    json_path = Path(args.json)
    if not json_path.is_absolute():
        json_path = ROOT / json_path
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"\nJSON written to {json_path} (wall time {result['wall_seconds']:.0f}s)", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
