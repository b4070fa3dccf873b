"""Many streams on disk, as their drivers and deployments leave them, for scale tests and benchmarks (no JVM).

Each stream's control directory holds what a real run writes, through the real writers of
:mod:`airflow_streaming.control.contract`:

- ``deployed.json``: the spec as deployed (sealed like the deploy operator seals it) and its sealed
  ``deployed_by`` owner, bound by the same seal (``<dag_id>.<task_id> run ... try 1``: the Streams page shows a stream to users who
  may read that DAG);
- ``RUNNING`` (the run marker), ``driver.json`` (:class:`DriverRecord` of the local target: pid and start
  time of a live process whose command line carries ``--run-id <run id>``), ``lease.json`` (held by the
  same process) and ``status.json`` (:class:`StatusDocument`, RUNNING and ready, with 20 progress entries
  shaped like Spark 4.2's real progress of ``tests/fixtures/status/etl_dag_phase1_running.json``);
- optionally (``watermark_step_ms``) the stream's checkpoint as Spark writes it, one batch per progress
  entry: ``metadata`` (the query id), ``offsets/<N>`` (``v1``, the batch metadata line with
  ``batchWatermarkMs``, the source's offset line) and ``commits/<N>`` (``v1``,
  ``{"nextBatchWatermarkMs":...}``), each with its ``.<N>.crc`` and written through a temp file and a
  rename; the watermark advances ``watermark_step_ms`` per batch and the newest 100 batches are kept
  (Spark's ``minBatchesToRetain``);
- optionally ``supervisor.json`` (a restart ledger) for some streams.

The "drivers" are :class:`StandInDrivers`: a few real, long-lived ``sh -c 'read x'`` processes (named as
stand-ins for spark-submit) whose command line carries ``--run-id <id>``; many streams share one, so a
thousand streams cost a handful of processes. They are stopped by pid (and exit by themselves when the
creating process goes away: their stdin is a pipe held by it).
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from airflow_streaming.completeness import iso_ms as event_iso_ms
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlPaths, DriverRecord, Lease, QueryStatus, StatusDocument
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.sealing import sealed
from airflow_streaming.spec import StreamSpec

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "status" / "etl_dag_phase1_running.json"
HISTORY = contract.RECENT_PROGRESS_LIMIT
#: Batches a synthetic checkpoint keeps (``spark.sql.streaming.minBatchesToRetain``'s default).
RETAIN = 100
#: Where a fleet's watermarks start: this many ms before the minute of its build. After the history a build
#: writes (20 batches) a stream's watermark trails the wall clock by a few minutes, as with a watermark delay:
#: under the health verdict's watermark-lag limit, so the verdicts stay HEALTHY with no warning, as a real
#: stream's do (its progress reports carry the watermark since the gate reads it there).
WATERMARK_BEHIND_MS = 300_000


def iso_ms(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + f"{int(t * 1000) % 1000:03d}Z"


class StandInDrivers:
    """``count`` live local processes standing in for spark-submit: ``sh -c 'read x' --run-id <id>``.

    ``launches``: one ``(stream, control directory)`` per process, added to its command line as
    ``--stream <name> --control-dir <dir>``: the local target then knows it as that stream's driver from
    the recorded pid alone (``LocalTarget.state``), as it knows a real driver; without them (shared
    stand-ins) every liveness check falls back to a scan of all processes (``run_processes``)."""

    def __init__(self, count: int, prefix: str = "fleet", launches: list[tuple[str, str]] | None = None):
        self.procs: list[subprocess.Popen[bytes]] = []
        self.run_ids: list[str] = []
        tag = uuid.uuid4().hex[:6]
        try:
            for k in range(count):
                run_id = f"{prefix}-{tag}-{k:03d}"
                # $0 is "--run-id", $1 the run id: the command line carries "--run-id <id>" like a driver's.
                extra = ["--stream", launches[k][0], "--control-dir", launches[k][1]] if launches else []
                self.procs.append(subprocess.Popen(["sh", "-c", "read x", "--run-id", run_id, *extra],
                                                   stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL))
                self.run_ids.append(run_id)
            for proc in self.procs:
                deadline = time.monotonic() + 10
                while contract.process_start_time(proc.pid) is None and time.monotonic() < deadline:
                    time.sleep(0.01)
        except BaseException:
            self.stop()
            raise

    def identity(self, i: int) -> tuple[str, int, float]:
        """The ``(run id, pid, start time)`` stream ``i`` is run by (streams share the stand-ins round-robin)."""
        proc = self.procs[i % len(self.procs)]
        start = contract.process_start_time(proc.pid)
        if start is None:
            raise RuntimeError(f"stand-in driver pid {proc.pid} is gone")
        return self.run_ids[i % len(self.procs)], proc.pid, start

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)
            if proc.stdin is not None:
                proc.stdin.close()
        self.procs.clear()

    def __enter__(self) -> StandInDrivers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class FleetStream:
    """One stream of the fleet and the status its driver last wrote (kept to write the next one)."""

    spec: StreamSpec
    paths: ControlPaths
    doc: StatusDocument
    rng: random.Random
    template: dict[str, Any]
    batch: int = -1
    progress: list[dict[str, Any]] = field(default_factory=list)
    watermark_step_ms: int = 0
    """With a checkpoint: how far the watermark advances per batch (0: no checkpoint is written)."""
    watermark_ms: int = 0
    """The watermark of the newest batch (``batchWatermarkMs`` of its offsets file)."""

    def _checkpoint_write(self, name: str, data: bytes) -> None:
        # Spark's CheckpointFileManager on a local file system: a temp file renamed into place, and a .crc.
        directory = os.path.join(self.spec.checkpoint_location, os.path.dirname(name))
        base = os.path.basename(name)
        tmp = os.path.join(directory, f".{base}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, os.path.join(directory, base))
        with open(os.path.join(directory, f".{base}.crc"), "wb") as fh:
            fh.write(b"crc\x00" + len(data).to_bytes(4, "big"))

    def _checkpoint_batch(self, end: float) -> None:
        """Plan and commit batch ``self.batch`` (offsets, then the commit), pruning what Spark would."""
        root = self.spec.checkpoint_location
        if self.batch == 0:
            for sub in ("offsets", "commits"):
                os.makedirs(os.path.join(root, sub), exist_ok=True)
            query = self.doc.queries[0].id if self.doc.queries else "q"
            with open(os.path.join(root, "metadata"), "w") as fh:
                fh.write(json.dumps({"id": query}))
        self.watermark_ms += self.watermark_step_ms
        meta = {"batchWatermarkMs": self.watermark_ms, "batchTimestampMs": int(end * 1000),
                "conf": {"spark.sql.shuffle.partitions": "2"}}
        self._checkpoint_write(f"offsets/{self.batch}",
                               f"v1\n{json.dumps(meta)}\n{json.dumps({'logOffset': self.batch})}".encode())
        self._checkpoint_write(f"commits/{self.batch}",
                               f'v1\n{{"nextBatchWatermarkMs":{self.watermark_ms}}}'.encode())
        old = self.batch - RETAIN
        if old >= 0:
            for sub in ("offsets", "commits"):
                for name in (str(old), f".{old}.crc"):
                    try:
                        os.unlink(os.path.join(root, sub, name))
                    except FileNotFoundError:
                        pass

    def _append(self, end: float) -> None:
        t, rng = self.template, self.rng
        self.batch += 1
        rows = rng.randint(250, 650)
        trigger_ms = self.spec.trigger_interval * 1000
        duration = rng.randint(int(trigger_ms * 0.1), int(trigger_ms * 0.3))  # keeps up: HEALTHY
        scale = duration / t["durationMs"]["triggerExecution"]
        durations = {k: max(1, round(v * scale)) for k, v in t["durationMs"].items()}
        durations["triggerExecution"] = duration
        source = {**t["sources"][0], "description": f"FileStreamSource[file:/data/{self.spec.name}/in]",
                  "startOffset": {"logOffset": self.batch - 1} if self.batch else None,
                  "endOffset": {"logOffset": self.batch}, "numInputRows": rows,
                  "inputRowsPerSecond": round(rows / self.spec.trigger_interval, 1),
                  "processedRowsPerSecond": round(rows / (duration / 1000), 1)}
        self.progress.append({**t, "id": self.doc.queries[0].id if self.doc.queries else "q",
                              "name": self.spec.name, "batchId": self.batch, "timestamp": iso_ms(end - duration / 1000),
                              "batchDuration": duration, "durationMs": durations, "numInputRows": rows,
                              "inputRowsPerSecond": source["inputRowsPerSecond"],
                              "processedRowsPerSecond": source["processedRowsPerSecond"],
                              "observedMetrics": {"quality": {"lines": rows, "quarantined_rows": 0}},
                              "sources": [source], "stateOperators": []})
        if self.watermark_step_ms:  # the batch's report carries the watermark it ran with (its offsets file's)
            self.progress[-1]["eventTime"] = {**(t.get("eventTime") or {}),
                                              "watermark": event_iso_ms(self.watermark_ms + self.watermark_step_ms)}
        del self.progress[:-HISTORY]
        self.doc.totals["batches"] += 1
        self.doc.totals["input_rows"] += rows
        if self.watermark_step_ms:
            self._checkpoint_batch(end)

    def beat(self, storage: LocalStorage, now: float | None = None) -> None:
        """What the driver's reporter does every heartbeat: one more batch, a fresh heartbeat, an atomic replace."""
        now = time.time() if now is None else now
        self._append(now)
        self.doc.queries[0].recent_progress = self.progress
        self.doc.queries[0].last_batch_id = self.batch
        self.doc.heartbeat_at = now
        contract.write_status(storage, self.paths, self.doc)

    def fail(self, storage: LocalStorage) -> float:
        """The query failed (state FAILED, exit code 3), as the driver reports it; the wall clock after the write."""
        now = time.time()
        self.doc.queries[0].active = False
        self.doc.state = contract.FAILED
        self.doc.heartbeat_at = now
        self.doc.last_exception = {"error_class": "STREAM_FAILED", "message": "[STREAM_FAILED] fleet: simulated failure"}
        self.doc.exit = {"code": contract.EXIT_QUERY_FAILED, "reason": "query failed", "last_committed_batch": self.batch}
        contract.write_status(storage, self.paths, self.doc)
        return time.time()


def build_fleet(base: str | Path, count: int, drivers: StandInDrivers, *, owner_dags: list[str] | None = None,
                versions: tuple[str, ...] = ("v1", "v2", "v3"), trigger_interval: float = 5.0,
                heartbeat_interval: float = 5.0, failed_every: int = 0, ledger_every: int = 0,
                hot_standby_every: int = 0, seed: int = 1, watermark_step_ms: int = 0) -> list[FleetStream]:
    """``count`` streams ``fleet-0000``... under ``<base>/control`` (see the module docstring).

    ``owner_dags``: the DAG ids whose tasks deployed the streams (round-robin; default ``fleet_dag``).
    ``failed_every``: every n-th stream's status is FAILED (its driver still alive: a query that failed);
    ``ledger_every``: every n-th stream has a restart ledger with one restart (the supervisor column);
    ``hot_standby_every``: every n-th stream (from the n-th) wants a hot standby and has none prepared;
    ``watermark_step_ms``: write each stream's checkpoint, its watermark advancing this much per batch from
    :data:`WATERMARK_BEHIND_MS` before the build's minute, plus a per-stream offset below one minute (so that period ends fall at different
    batches of different streams)."""
    storage = LocalStorage()
    template = json.loads(FIXTURE.read_text())["queries"][0]["recent_progress"][-1]
    rng = random.Random(seed)
    owners = owner_dags or ["fleet_dag"]
    host = socket.gethostname()
    now = time.time()
    t0_ms = int(now * 1000) // 60_000 * 60_000 - WATERMARK_BEHIND_MS
    fleet = []
    for i in range(count):
        name = f"fleet-{i:04d}"
        spec = StreamSpec(name=name, application="events_etl", control_location=f"{base}/control",
                          checkpoint_location=f"{base}/checkpoints/{name}", master="local[2]",
                          version=versions[i % len(versions)], trigger_interval=trigger_interval,
                          heartbeat_interval=heartbeat_interval,
                          hot_standby=bool(hot_standby_every and i % hot_standby_every == hot_standby_every - 1))
        paths = ControlPaths(spec.control_dir)
        storage.makedirs(paths.root)
        run_id, pid, start = drivers.identity(i)
        owner = f"{owners[i % len(owners)]}.deploy run manual__2026-11-25 try 1"
        deployed = {"run_id": run_id, "at": now - 3600, "spec": sealed(spec.to_dict(), deployed_by=owner)}
        storage.write_atomic(f"{paths.root}/deployed.json", json.dumps(deployed).encode())
        contract.write_marker(storage, paths, run_id, spec.version)
        record = DriverRecord(run_id=run_id, stream=name, version=spec.version, application=spec.application,
                              host=host, command=f"spark-submit --name {name} spark_jobs/launch.py --run-id {run_id}",
                              log_path=paths.log(run_id), submitted_at=now - 3600,
                              checkpoint_location=spec.checkpoint_location, handle={"pid": pid, "start_time": start})
        storage.write_atomic(paths.driver, record.to_json())
        storage.write_atomic(paths.lease, Lease(run_id, pid, start, host, now - 3600, now, 60.0).to_json())
        query = QueryStatus(id=str(uuid.UUID(int=rng.getrandbits(128))), run_id=str(uuid.UUID(int=i)), name=name,
                            active=True, status={"message": "Waiting for next trigger", "isDataAvailable": False,
                                                 "isTriggerActive": False})
        doc = StatusDocument(stream=name, version=spec.version, run_id=run_id, state=contract.RUNNING, pid=pid,
                             host=host, started_at=now - 3600, heartbeat_at=now, app_id=f"local-{i}",
                             spark_ui="http://localhost:4040", master="local[2]",
                             checkpoint_location=spec.checkpoint_location, ready=True, queries=[query])
        stream = FleetStream(spec, paths, doc, random.Random(seed * 100_003 + i), template,
                             watermark_step_ms=watermark_step_ms,
                             watermark_ms=t0_ms + rng.randrange(60_000) if watermark_step_ms else 0)
        for k in range(HISTORY):
            stream._append(now - (HISTORY - k) * trigger_interval)
        stream.beat(storage, now)
        if failed_every and i % failed_every == failed_every - 1:
            stream.fail(storage)
        if ledger_every and i % ledger_every == 0:
            ledger = {"failures": [now - 600], "error_classes": ["STREAM_FAILED"], "healthy_since": now - 300,
                      "gave_up": False, "handled_run_ids": ["earlier-run"]}
            storage.write_atomic(f"{paths.root}/supervisor.json", json.dumps(ledger).encode())
        fleet.append(stream)
    return fleet


def dir_size_kib(path: str | Path) -> float:
    total = 0
    for dirpath, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total / 1024
