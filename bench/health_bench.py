#!/usr/bin/env python
"""Health-watch benchmark: one triggerer-like process watching 100 streams with ``SparkStreamHealthTrigger``.

Usage (from the project root)::

    .venv/bin/python bench/health_bench.py [--runs 3] [--streams 100] [--measure 30] \
        [--json bench/results/health.json] [--txt bench/results/health.txt]

No Spark is started. The streams are simulated on disk, in a temp dir under $TMPDIR (default /tmp):

- 100 ``StreamSpec`` (application ``events_etl``, trigger 1 s, heartbeat 1 s, absolute temp paths), each
  with a control dir holding a ``driver.json`` (``DriverRecord``, local target) whose handle is one real,
  long-lived child process started here (shared by all streams: pid and start time from
  ``contract.process_start_time``; its command line carries every stream's ``--run-id``), so the liveness
  check of ``SparkStreamHook.health()`` (the local target's pid + start time + run-id identity) reads
  /proc like for a live local driver;
- a ``status.json`` (``StatusDocument``, RUNNING, ready) with 20 progress entries shaped like the real
  Spark 4.2 progress recorded in ``tests/fixtures/status/etl_dag_phase1_running.json``;
- a *writer* process that rewrites every ``status.json`` about once per second through
  ``contract.write_status`` (atomic replace + fsync, like the driver's status reporter): new
  ``heartbeat_at``, one more progress entry (the oldest dropped beyond 20). All 100 are rewritten in
  every configuration, also the 0-stream baseline.

One *configuration* runs in a fresh worker process (clean memory numbers): one asyncio event loop
(like the triggerer's) with N ``SparkStreamHealthTrigger(mode="watch", watch_seconds=3600,
poll_interval=P)`` tasks, each consuming its ``run()`` generator. Trigger starts are spread uniformly
over the first P seconds (a triggerer's sensors defer at different times; with no spread all 100 would
poll in lock-step). Configurations: N=0 (baseline: same loop, same writer, nothing watched), N=100
with P=5 s, N=100 with P=1 s. Each worker:

1. starts the writer (its child: its CPU is not in the worker's numbers), waits until it has written
   all documents, runs one ``poll_once`` (loads lazily imported modules; checks the verdict is HEALTHY);
2. RSS before (``VmRSS``), creates the triggers, warm-up of P + 5 s;
3. measured period (``--measure`` s): process CPU time (``time.process_time``, user+sys of this process)
   and ``VmRSS`` sampled every second (median); ``poll_once`` calls are counted through a thin wrapper;
4. detection latency: 10 randomly chosen watched streams are flipped to FAILED (state FAILED, exit
   code 3) by the writer at random times over 5 s; flip time = wall clock right after the atomic
   replace returned in the writer; event time = wall clock when the trigger's ``run()`` yielded its
   TriggerEvent in the worker. Latency = event - flip.

Each configuration is repeated ``--runs`` times (order rotated per run). Reported: medians and raw
values, ratios vs the baseline, net CPU and memory per watched stream ((config - baseline) / N),
latency median and max (all flips of all runs pooled; per-run medians as raw values), the machine.
Every process started here is stopped by its pid / process group, also on errors and on SIGTERM.

``--smoke`` (what CI runs, ``tests/integration/test_bench_smoke.py``): the same three configurations and
report with 10 streams, one run, 3 s measured, 2 flips; JSON and text go to a temp dir, never to
bench/results/.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "status" / "etl_dag_phase1_running.json"
DEFAULT_JSON = "bench/results/health.json"
DEFAULT_TXT = "bench/results/health.txt"

TRIGGER_SECONDS = 1.0
HEARTBEAT_SECONDS = 1.0
WATCH_SECONDS = 3600.0
HISTORY = 20  # contract.RECENT_PROGRESS_LIMIT
FLIP_SPREAD_SECONDS = 5.0
WARMUP_SECONDS = 5.0  # after the first poll interval

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness import add_smoke_argument, smoke_results  # noqa: E402


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def vmrss_kib() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def iso_ms(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(t * 1000) % 1000:03d}Z"


# =========================================================================== writer (simulated drivers)


class SimulatedStream:
    """One stream's driver as the writer plays it: the status document and its progress history."""

    def __init__(self, spec: dict[str, Any], record: dict[str, Any], template: dict[str, Any], rng: random.Random):
        from airflow_streaming.control.contract import ControlPaths, QueryStatus, StatusDocument
        from airflow_streaming.control.locations import storage_for

        self.spec, self.rng, self.template = spec, rng, template
        self.storage, control_dir = storage_for(f"{spec['control_location']}/{spec['name']}")
        self.paths = ControlPaths(control_dir)
        now = time.time()
        self.query_id, self.query_run_id = str(uuid.uuid4()), str(uuid.uuid4())
        self.batch = -1
        self.totals = {"batches": 0, "input_rows": 0, "quarantined_rows": 0}
        self.progress: list[dict[str, Any]] = []
        for k in range(HISTORY):  # history: one batch per trigger interval up to now
            self._append(now - (HISTORY - k) * TRIGGER_SECONDS)
        self.query = QueryStatus(
            id=self.query_id, run_id=self.query_run_id, name="events_etl", active=True,
            status={"isDataAvailable": False, "isTriggerActive": False, "message": "Waiting for next trigger"},
            recent_progress=self.progress, last_batch_id=self.batch)
        self.doc = StatusDocument(
            stream=spec["name"], version=spec["version"], run_id=record["run_id"], state="RUNNING",
            pid=record["handle"]["pid"], host=record["host"], started_at=now - HISTORY * TRIGGER_SECONDS - 12.0,
            heartbeat_at=now, app_id=f"local-{int(now * 1000)}", spark_ui="http://localhost:4040",
            master=spec["master"], checkpoint_location=spec["checkpoint_location"], ready=True,
            queries=[self.query], totals=self.totals)

    def _append(self, end: float) -> None:
        """One more completed micro-batch ending at ``end`` (Spark's progress JSON shape, real template)."""
        t = self.template
        rng = self.rng
        self.batch += 1
        rows = rng.randint(250, 650)
        quarantined = rng.randint(0, max(1, rows // 40))
        duration_ms = rng.randint(550, 950)  # < trigger interval: the stream keeps up (HEALTHY)
        scale = duration_ms / t["durationMs"]["triggerExecution"]
        durations = {k: max(1, round(v * scale)) for k, v in t["durationMs"].items()}
        durations["triggerExecution"] = duration_ms
        input_rate = round(rows / TRIGGER_SECONDS * rng.uniform(0.9, 1.05), 1)
        processed_rate = round(rows / (duration_ms / 1000), 1)
        source = dict(t["sources"][0])
        source.update({
            "description": f"FileStreamSource[file:{self.spec['checkpoint_location']}-input]",
            "startOffset": {"logOffset": self.batch - 1} if self.batch else None,
            "endOffset": {"logOffset": self.batch}, "latestOffset": None, "numInputRows": rows,
            "inputRowsPerSecond": input_rate, "processedRowsPerSecond": processed_rate})
        entry = dict(t)
        entry.update({
            "id": self.query_id, "runId": self.query_run_id, "name": "events_etl", "batchId": self.batch,
            "timestamp": iso_ms(end - duration_ms / 1000), "batchDuration": duration_ms, "durationMs": durations,
            "numInputRows": rows, "inputRowsPerSecond": input_rate, "processedRowsPerSecond": processed_rate,
            "observedMetrics": {"quality": {"lines": rows, "quarantined_rows": quarantined}},
            "sources": [source], "stateOperators": [], "sink": dict(t["sink"])})
        self.progress.append(entry)
        del self.progress[:-HISTORY]
        self.totals["batches"] += 1
        self.totals["input_rows"] += rows
        self.totals["quarantined_rows"] += quarantined

    def beat(self) -> None:
        """Heartbeat + one new progress entry, written atomically (what the live driver does)."""
        from airflow_streaming.control.contract import write_status

        now = time.time()
        self._append(now)
        self.query.last_batch_id = self.batch
        self.doc.heartbeat_at = now
        write_status(self.storage, self.paths, self.doc)

    def fail(self) -> float:
        """The query failed: state FAILED, exit code 3. Returns the wall clock right after the write."""
        from airflow_streaming.control.contract import EXIT_QUERY_FAILED, FAILED, write_status

        now = time.time()
        self.query.active = False
        self.query.status = {"isDataAvailable": False, "isTriggerActive": False, "message": "Terminated with exception"}
        self.doc.state = FAILED
        self.doc.heartbeat_at = now
        self.doc.last_exception = {
            "error_class": "STREAM_FAILED",
            "message": f"[STREAM_FAILED] Query [id = {self.query_id}, runId = {self.query_run_id}] terminated with "
                       "exception: bench: simulated failure"}
        self.doc.exit = {"code": EXIT_QUERY_FAILED, "reason": "query failed", "last_committed_batch": self.batch}
        write_status(self.storage, self.paths, self.doc)
        return time.time()


def writer_main(config_path: str) -> int:
    """Rewrite every stream's status.json ~once per second; flip streams to FAILED on 'flip NAME' on stdin.

    Prints 'ready' once all documents are written; on stdin EOF prints a JSON report and exits.
    Exits too if its parent (the worker) is gone.
    """
    cfg = json.loads(Path(config_path).read_text())
    specs = json.loads(Path(cfg["specs_path"]).read_text())
    records = json.loads(Path(cfg["records_path"]).read_text())
    template = json.loads(FIXTURE.read_text())["queries"][0]["recent_progress"][-1]
    rng = random.Random(cfg["seed"] + 7)
    streams = {s["name"]: SimulatedStream(s, records[s["name"]], template, rng) for s in specs}
    names = list(streams)
    for st in streams.values():
        st.beat()
    sys.stdout.write("ready\n")
    sys.stdout.flush()

    parent = os.getppid()
    slot = HEARTBEAT_SECONDS / len(names)
    flips: dict[str, float] = {}
    writes, cycle_started, cycles = 0, time.monotonic(), []
    buf = b""
    fd = sys.stdin.fileno()
    i = 0
    next_t = time.monotonic()
    while True:
        timeout = max(0.0, next_t - time.monotonic())
        ready, _, _ = select.select([fd], [], [], timeout)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                cmd, _, name = line.decode().strip().partition(" ")
                if cmd == "flip" and name in streams and name not in flips:
                    flips[name] = streams[name].fail()
            continue
        name = names[i % len(names)]
        i += 1
        if name not in flips:
            streams[name].beat()
            writes += 1
        if i % len(names) == 0:
            now = time.monotonic()
            cycles.append(now - cycle_started)
            cycle_started = now
            if os.getppid() != parent:
                return 1
        next_t += slot
        if next_t < time.monotonic() - 1.0:  # fell behind (slow fsync): do not burst to catch up
            next_t = time.monotonic()
    cycles = cycles[1:] or cycles
    report = {"flips": flips, "writes": writes,
              "cycle_s_median": statistics.median(cycles) if cycles else None,
              "cycle_s_max": max(cycles) if cycles else None}
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()
    return 0


# =========================================================================== worker (the triggerer)


def worker_main(config_path: str) -> int:
    """One configuration in this fresh process; writes its result JSON to cfg['result_path']."""
    import asyncio
    import gc
    import itertools
    import threading

    from airflow_streaming.triggers import health as trig
    from airflow_streaming.triggers.health import SparkStreamHealthTrigger

    # Modules poll_once imports lazily: imported before the "before" RSS (one-off, not per stream).
    import airflow_streaming.health.thresholds  # noqa: F401
    import airflow_streaming.health.verdict  # noqa: F401
    import airflow_streaming.hooks.streaming_job  # noqa: F401
    import airflow_streaming.spec  # noqa: F401

    cfg = json.loads(Path(config_path).read_text())
    specs = json.loads(Path(cfg["specs_path"]).read_text())
    n, poll, flips_wanted = cfg["streams"], cfg["poll_interval"], cfg["flips"]
    warmup, measure = cfg["warmup"], cfg["measure"]
    rng = random.Random(cfg["seed"])

    writer = subprocess.Popen([sys.executable, __file__, "--writer", config_path],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    result: dict[str, Any] = {"streams": n, "poll_interval": poll}
    try:
        line = writer.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"writer did not start (said {line!r}, exit {writer.poll()})")
        check = trig.poll_once(specs[0])
        if check["state"] != "HEALTHY":
            raise RuntimeError(f"simulated stream is not HEALTHY before the run: {check['state']} {check['reasons']}")
        gc.collect()
        rss_before = vmrss_kib()

        calls = itertools.count()
        poll_times: list[tuple[float, float]] = []
        original = trig.poll_once

        def counted_poll_once(spec_dict: dict[str, Any]) -> dict[str, Any]:
            next(calls)
            t0 = time.perf_counter()
            try:
                return original(spec_dict)
            finally:
                poll_times.append((t0, time.perf_counter() - t0))

        trig.poll_once = counted_poll_once  # run() looks poll_once up in the module at each poll

        async def main() -> dict[str, Any]:
            events: dict[str, tuple[float, dict[str, Any]]] = {}
            flipped: set[str] = set()
            all_detected = asyncio.Event()

            async def consume(trigger: SparkStreamHealthTrigger, delay: float) -> None:
                await asyncio.sleep(delay)
                async for event in trigger.run():
                    name = trigger.spec["name"]
                    events[name] = (time.time(), event.payload)
                    if flipped and flipped <= events.keys():
                        all_detected.set()

            triggers = [SparkStreamHealthTrigger(s, "watch", poll, watch_seconds=WATCH_SECONDS) for s in specs[:n]]
            tasks = [asyncio.create_task(consume(t, rng.uniform(0, poll))) for t in triggers]
            await asyncio.sleep(warmup)

            # ---- measured period
            rss: list[int] = []
            calls0 = next(calls)
            cpu0, wall0 = time.process_time(), time.monotonic()
            pc0 = time.perf_counter()
            end = wall0 + measure
            while True:
                rss.append(vmrss_kib())
                left = end - time.monotonic()
                if left <= 0:
                    break
                await asyncio.sleep(min(1.0, left))
            cpu1, wall1 = time.process_time(), time.monotonic()
            pc1 = time.perf_counter()
            calls1 = next(calls)
            out: dict[str, Any] = {
                "cpu_s": cpu1 - cpu0, "wall_s": wall1 - wall0, "polls": calls1 - calls0 - 1,
                "rss_before_kib": rss_before, "rss_median_kib": statistics.median(rss), "rss_max_kib": max(rss),
                "threads": threading.active_count(), "events_before_flips": len(events),
                "poll_wall_ms_median": (statistics.median(d for t0, d in poll_times if pc0 <= t0 <= pc1) * 1000
                                        if any(pc0 <= t0 <= pc1 for t0, _ in poll_times) else None),
            }
            if events:
                out["unexpected_events"] = {k: v[1].get("status") for k, v in events.items()}

            # ---- detection latency
            flip_sent: dict[str, float] = {}
            if n and flips_wanted:
                candidates = [s["name"] for s in specs[:n] if s["name"] not in events]
                chosen = rng.sample(candidates, min(flips_wanted, len(candidates)))
                offsets = sorted(rng.uniform(0, cfg["flip_spread"]) for _ in chosen)
                flipped.update(chosen)
                start = time.monotonic()
                for name, off in zip(chosen, offsets):
                    await asyncio.sleep(max(0.0, start + off - time.monotonic()))
                    flip_sent[name] = time.time()
                    writer.stdin.write(f"flip {name}\n".encode())
                    writer.stdin.flush()
                try:
                    await asyncio.wait_for(all_detected.wait(), timeout=poll + 15.0)
                except asyncio.TimeoutError:
                    pass
            out["events"] = {k: {"t": t, "status": p.get("status"), "state": (p.get("verdict") or {}).get("state")}
                             for k, (t, p) in events.items()}
            out["flip_sent"] = flip_sent
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            return out

        result.update(asyncio.run(main()))
        trig.poll_once = original
        stdout, _ = writer.communicate(timeout=30)  # closes the writer's stdin: it reports and exits
        wreport = json.loads(stdout.decode().strip().splitlines()[-1])
        result["writer"] = {k: v for k, v in wreport.items() if k != "flips"}
        flips = wreport["flips"]
        result["latencies"] = {
            name: (result["events"][name]["t"] - t) if name in result["events"] else None for name, t in flips.items()}
        result["flip_states"] = {name: result["events"].get(name, {}).get("state") for name in flips}
        result["ok"] = True
    except Exception:  # noqa: BLE001 - report to the orchestrator
        result["ok"] = False
        result["error"] = traceback.format_exc()
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(timeout=10)
    Path(cfg["result_path"]).write_text(json.dumps(result))
    return 0 if result["ok"] else 1


# =========================================================================== orchestrator


def machine_info() -> dict[str, Any]:
    import airflow

    info: dict[str, Any] = {"nproc": len(os.sched_getaffinity(0)), "cpu_count": os.cpu_count(),
                            "python": platform.python_version(), "airflow": airflow.__version__,
                            "platform": platform.platform(), "loadavg_start": os.getloadavg()}
    model = None
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["cpu_model"] = model
    try:
        with open("/proc/meminfo") as fh:
            info["mem_total_gib"] = round(int(fh.readline().split()[1]) / 1024 / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return info


def simulated_driver_command(run_ids: list[str]) -> list[str]:
    """One long-lived process that stands for the drivers of every stream: a local driver is identified by
    its pid, its start time AND ``--run-id <id>`` on its command line (``airflow_streaming.control.process``),
    so it carries every stream's run id, as each real spark-submit carries its own."""
    command = [sys.executable, "-c", "import time; time.sleep(1800)"]
    for run_id in run_ids:
        command += ["--run-id", run_id]
    return command


def build_streams(base: str, run_ids: list[str], driver_pid: int) -> tuple[str, str]:
    """Specs and driver records of ``len(run_ids)`` streams under ``base``; returns the two JSON paths."""
    from airflow_streaming.control import contract
    from airflow_streaming.control.contract import ControlPaths, DriverRecord
    from airflow_streaming.control.locations import storage_for
    from airflow_streaming.spec import StreamSpec

    start_time = contract.process_start_time(driver_pid)
    if start_time is None:
        raise RuntimeError(f"simulated driver pid {driver_pid} is not alive")
    host = socket.gethostname()
    specs, records = [], {}
    for i, run_id in enumerate(run_ids):
        spec = StreamSpec(name=f"etl-{i:03d}", application="events_etl",
                          checkpoint_location=f"{base}/checkpoints/etl-{i:03d}", control_location=f"{base}/control",
                          master="local[2]", trigger_interval=TRIGGER_SECONDS, heartbeat_interval=HEARTBEAT_SECONDS)
        storage, control_dir = storage_for(spec.control_dir)
        paths = ControlPaths(control_dir)
        record = DriverRecord(
            run_id=run_id, stream=spec.name, version=spec.version, application=spec.application, host=host,
            command=(f"spark-submit --master local[2] --conf spark.ui.showConsoleProgress=false --name {spec.name}:v1 "
                     f"spark_jobs/launch.py --stream {spec.name} --run-id {run_id} --job events_etl"),
            log_path=paths.log(run_id), submitted_at=time.time(), checkpoint_location=spec.checkpoint_location,
            target="local", handle={"pid": driver_pid, "start_time": start_time})
        storage.write_atomic(paths.driver, record.to_json())
        specs.append(spec.to_dict())
        records[spec.name] = json.loads(record.to_json())
    specs_path, records_path = f"{base}/specs.json", f"{base}/records.json"
    Path(specs_path).write_text(json.dumps(specs))
    Path(records_path).write_text(json.dumps(records))
    return specs_path, records_path


def stop_group(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """SIGTERM the process group of ``proc`` (started with start_new_session), SIGKILL after ``grace``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            try:
                os.killpg(proc.pid, 0)
            except (ProcessLookupError, PermissionError):
                return
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.05)
    proc.wait(timeout=5)


def run_config(base: str, label: str, streams: int, poll: float, args: argparse.Namespace, seed: int,
               specs_path: str, records_path: str, procs: list[subprocess.Popen]) -> dict[str, Any]:
    tag = f"{label.replace(' ', '_').replace('=', '')}_{seed}"
    cfg = {"streams": streams, "poll_interval": poll, "flips": args.flips if streams else 0,
           "warmup": poll + args.warmup, "measure": args.measure, "flip_spread": args.flip_spread, "seed": seed,
           "specs_path": specs_path,
           "records_path": records_path, "result_path": f"{base}/result_{tag}.json"}
    cfg_path = f"{base}/config_{tag}.json"
    Path(cfg_path).write_text(json.dumps(cfg))
    budget = cfg["warmup"] + args.measure + args.flip_spread + poll + 15 + 90
    load = os.getloadavg()[0]
    with open(f"{base}/worker_{tag}.log", "wb") as out:
        proc = subprocess.Popen([sys.executable, __file__, "--worker", cfg_path], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=str(ROOT))
        procs.append(proc)
        try:
            proc.wait(timeout=budget)
        except subprocess.TimeoutExpired:
            log(f"{label}: worker pid {proc.pid} exceeded {budget:.0f}s, stopping it")
        finally:
            stop_group(proc)
            procs.remove(proc)
    try:
        result = json.loads(Path(cfg["result_path"]).read_text())
    except (OSError, ValueError):
        tail = Path(f"{base}/worker_{tag}.log").read_text(errors="replace")[-3000:]
        raise RuntimeError(f"{label}: worker wrote no result; log tail:\n{tail}")
    if not result.get("ok"):
        raise RuntimeError(f"{label}: worker failed:\n{result.get('error')}")
    result["label"], result["seed"], result["loadavg_1m_at_start"] = label, seed, load
    return result


def med(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def summarize(results: dict[str, list[dict[str, Any]]], streams: int) -> dict[str, Any]:
    base = results["baseline"]
    base_cpu = med([r["cpu_s"] / r["wall_s"] for r in base])
    base_drss = med([r["rss_median_kib"] - r["rss_before_kib"] for r in base])
    summary: dict[str, Any] = {}
    for label, runs in results.items():
        cpu_rate = [r["cpu_s"] / r["wall_s"] for r in runs]
        drss = [r["rss_median_kib"] - r["rss_before_kib"] for r in runs]
        lat = [v for r in runs for v in r.get("latencies", {}).values() if v is not None]
        missed = sum(1 for r in runs for v in r.get("latencies", {}).values() if v is None)
        s: dict[str, Any] = {
            "cpu_cores_median": med(cpu_rate), "cpu_cores_raw": cpu_rate,
            "cpu_ratio_vs_baseline": med(cpu_rate) / base_cpu if base_cpu else None,
            "rss_before_mib_median": med([r["rss_before_kib"] / 1024 for r in runs]),
            "rss_during_mib_median": med([r["rss_median_kib"] / 1024 for r in runs]),
            "rss_during_mib_raw": [r["rss_median_kib"] / 1024 for r in runs],
            "rss_growth_mib_median": med(drss) / 1024, "rss_growth_mib_raw": [d / 1024 for d in drss],
            "rss_ratio_vs_baseline": (med([r["rss_median_kib"] for r in runs])
                                      / med([r["rss_median_kib"] for r in base])),
            "polls_per_s_median": med([r["polls"] / r["wall_s"] for r in runs]),
            "poll_wall_ms_median": med([r["poll_wall_ms_median"] for r in runs]),
            "threads_median": med([r["threads"] for r in runs]),
            "writer_cycle_s_median": med([r["writer"]["cycle_s_median"] for r in runs]),
            "writer_cycle_s_max": max((r["writer"]["cycle_s_max"] or 0) for r in runs),
            "unexpected_events": sum(r["events_before_flips"] for r in runs),
        }
        if label != "baseline":
            n = runs[0]["streams"]
            net_cpu = [c - base_cpu for c in cpu_rate]
            s.update({
                "net_cpu_s_per_stream_per_min_median": med(net_cpu) * 60 / n,
                "net_cpu_s_per_stream_per_min_raw": [c * 60 / n for c in net_cpu],
                "net_cpu_pct_per_stream_median": med(net_cpu) * 100 / n,
                "net_rss_kib_per_stream_median": (med(drss) - base_drss) / n,
                "net_rss_kib_per_stream_raw": [(d - base_drss) / n for d in drss],
                "net_cpu_ms_per_poll_median": med([(r["cpu_s"] / r["wall_s"] - base_cpu) / (r["polls"] / r["wall_s"]) * 1000
                                                   for r in runs if r["polls"]]),
                "latency_s_median": med(lat), "latency_s_max": max(lat) if lat else None,
                "latency_s_min": min(lat) if lat else None,
                "latency_s_run_medians": [med(list(r["latencies"].values())) for r in runs],
                "latency_s_all": sorted(lat), "flips_missed": missed,
            })
        summary[label] = s
    return summary


def fmt(v: Any, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def render(meta: dict[str, Any], summary: dict[str, Any]) -> str:
    m = meta["machine"]
    labels = list(summary)
    out = [f"Health watch benchmark: one asyncio loop (triggerer-like), {meta['streams']} watched streams, "
           f"{meta['runs']} runs per configuration, medians [raw per run]",
           f"machine : nproc={m['nproc']}, CPU {m['cpu_model']}, RAM {m.get('mem_total_gib')} GiB, "
           f"Python {m['python']}, Airflow {m['airflow']}, load at start {m['loadavg_start'][0]:.2f}",
           f"setup   : status.json rewritten ~1/s per stream for all {meta['streams']} streams by a separate writer "
           f"process (20 progress entries, ~{meta['status_bytes'] // 1024} KiB each); measured window "
           f"{meta['measure']:.0f} s after a warm-up of P+{meta['warmup']:g} s; {meta['flips']} flips to FAILED per run", ""]

    def row(name: str, key: str, spec: str = ".3f", raw: str | None = None) -> None:
        cells = []
        for label in labels:
            v = summary[label].get(key)
            cell = fmt(v, spec)
            if raw and summary[label].get(raw) is not None:
                cell += " [" + ", ".join(fmt(x, spec) for x in summary[label][raw]) + "]"
            cells.append(cell)
        out.append(f"| {name} | " + " | ".join(cells) + " |")

    out.append("| metric | " + " | ".join(labels) + " |")
    out.append("|---|" + "---|" * len(labels))
    row("process CPU, cores (CPU s per s)", "cpu_cores_median", ".4f", "cpu_cores_raw")
    row("CPU ratio vs baseline", "cpu_ratio_vs_baseline", ".2f")
    row("net CPU per stream, CPU s per min", "net_cpu_s_per_stream_per_min_median", ".4f",
        "net_cpu_s_per_stream_per_min_raw")
    row("net CPU per stream, % of one core", "net_cpu_pct_per_stream_median", ".4f")
    row("polls per s", "polls_per_s_median", ".1f")
    row("net CPU per poll, ms", "net_cpu_ms_per_poll_median", ".2f")
    row("poll wall time in thread, ms", "poll_wall_ms_median", ".2f")
    row("threads", "threads_median", ".0f")
    row("RSS before triggers, MiB", "rss_before_mib_median", ".1f")
    row("RSS during, MiB", "rss_during_mib_median", ".1f", "rss_during_mib_raw")
    row("RSS ratio vs baseline", "rss_ratio_vs_baseline", ".3f")
    row("RSS growth (during - before), MiB", "rss_growth_mib_median", ".2f", "rss_growth_mib_raw")
    row("net RSS per stream, KiB", "net_rss_kib_per_stream_median", ".1f", "net_rss_kib_per_stream_raw")
    row("detection latency median, s", "latency_s_median", ".2f", "latency_s_run_medians")
    row("detection latency min, s", "latency_s_min", ".2f")
    row("detection latency max, s", "latency_s_max", ".2f")
    row("flips not detected", "flips_missed", "d")
    row("events before flips (must be 0)", "unexpected_events", "d")
    row("writer: s per full rewrite cycle, median", "writer_cycle_s_median", ".2f")
    row("writer: s per full rewrite cycle, max", "writer_cycle_s_max", ".2f")
    out.append("")
    out.append("net = (configuration - baseline median) / streams. Latency median/min/max over all flips of all runs "
               "pooled; raw = per-run medians.")
    for label in labels:
        if "latency_s_all" in summary[label]:
            out.append(f"latencies {label} (s, sorted): " + ", ".join(f"{x:.2f}" for x in summary[label]["latency_s_all"]))
    return "\n".join(out) + "\n"


def orchestrate(args: argparse.Namespace) -> int:
    # Like tests/conftest.py: Airflow gets its own throw-away home (removed at the end), no examples.
    own_home = tempfile.mkdtemp(prefix="bench-airflow-home-")
    os.environ["AIRFLOW_HOME"] = own_home
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    base = tempfile.mkdtemp(prefix="health-bench-")
    procs: list[subprocess.Popen] = []

    def on_term(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    started = time.monotonic()
    try:
        mach = machine_info()
        configs = [("baseline", 0, 1.0), (f"{args.streams} streams P=5s", args.streams, 5.0),
                   (f"{args.streams} streams P=1s", args.streams, 1.0)]
        from airflow_streaming.control.contract import new_run_id

        run_ids = [new_run_id() for _ in range(args.streams)]
        driver = subprocess.Popen(simulated_driver_command(run_ids), start_new_session=True)
        procs.append(driver)
        specs_path, records_path = build_streams(base, run_ids, driver.pid)
        log(f"{args.streams} streams under {base}; simulated driver pid {driver.pid}; "
            f"{args.runs} runs x {len(configs)} configurations")
        results: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in configs}
        for run in range(args.runs):
            order = configs[run % len(configs):] + configs[:run % len(configs)]
            for label, streams, poll in order:
                seed = args.seed + 100 * run + int(poll) + streams
                res = run_config(base, label, streams, poll, args, seed, specs_path, records_path, procs)
                results[label].append(res)
                lat = [v for v in res.get("latencies", {}).values() if v is not None]
                log(f"run {run + 1} {label}: CPU {res['cpu_s'] / res['wall_s']:.4f} cores, RSS "
                    f"{res['rss_before_kib'] / 1024:.1f} -> {res['rss_median_kib'] / 1024:.1f} MiB, "
                    f"polls {res['polls']}, latency median {fmt(med(lat), '.2f')} s "
                    f"({len(lat)}/{len(res.get('latencies', {}))} detected), load {res['loadavg_1m_at_start']:.2f}")
        status_bytes = os.path.getsize(f"{base}/control/etl-000/status.json")
        summary = summarize(results, args.streams)
        meta = {"streams": args.streams, "runs": args.runs, "measure": args.measure, "flips": args.flips,
                "status_bytes": status_bytes, "machine": mach, "trigger_interval": TRIGGER_SECONDS,
                "heartbeat_interval": HEARTBEAT_SECONDS, "flip_spread_s": args.flip_spread, "warmup": args.warmup,
                "total_seconds": round(time.monotonic() - started, 1), "loadavg_end": os.getloadavg()}
        text = render(meta, summary)
        print(text, end="")
        for r in (r for runs in results.values() for r in runs):  # keep the JSON readable
            r.pop("events", None)
        payload = {"meta": meta, "summary": summary, "runs": results}
        for path, data in ((args.json, json.dumps(payload, indent=1, default=str) + "\n"), (args.txt, text)):
            if path:
                path = Path(path) if os.path.isabs(path) else ROOT / path
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                Path(path).write_text(data)
        log(f"done in {time.monotonic() - started:.0f}s; wrote {args.json} and {args.txt}")
        return 0
    except KeyboardInterrupt as exc:
        log(f"interrupted ({exc})")
        return 130
    finally:
        for proc in list(procs):
            stop_group(proc)
        shutil.rmtree(own_home, ignore_errors=True)
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
        else:
            log(f"kept {base}")


def main() -> int:
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        return worker_main(sys.argv[2])
    if len(sys.argv) == 3 and sys.argv[1] == "--writer":
        return writer_main(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--measure", type=float, default=30.0, help="measured seconds per configuration run")
    parser.add_argument("--flips", type=int, default=10, help="streams flipped to FAILED per run")
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--json", default=DEFAULT_JSON)
    parser.add_argument("--txt", default=DEFAULT_TXT)
    parser.add_argument("--warmup", type=float, default=WARMUP_SECONDS, help="warm-up seconds after one poll interval")
    parser.add_argument("--flip-spread", type=float, default=FLIP_SPREAD_SECONDS,
                        help="seconds over which the flips to FAILED are spread")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (status docs, worker logs)")
    add_smoke_argument(parser)
    args = parser.parse_args()
    if args.smoke:  # the three configurations at 10 streams, one run, 3 s measured, 2 flips
        out = smoke_results("health")
        args.runs, args.streams, args.measure, args.flips, args.warmup, args.flip_spread = 1, 10, 3.0, 2, 1.0, 1.0
        args.json, args.txt = f"{out}/health.json", f"{out}/health.txt"
    return orchestrate(args)


if __name__ == "__main__":
    sys.exit(main())
