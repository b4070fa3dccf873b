"""The simulated drivers of ``bench/health_bench.py``: a writer process that rewrites every watched stream's
``status.json`` about once per second, as the drivers' status reporters do, and flips streams to FAILED
when told to (see the bench's docstring). Run by the bench as ``health_bench.py --writer <config>``."""

from __future__ import annotations

import json
import os
import random
import select
import statistics
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "status" / "etl_dag_phase1_running.json"
TRIGGER_SECONDS = 1.0
HEARTBEAT_SECONDS = 1.0
HISTORY = 20  # contract.RECENT_PROGRESS_LIMIT


def iso_ms(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(t * 1000) % 1000:03d}Z"


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
