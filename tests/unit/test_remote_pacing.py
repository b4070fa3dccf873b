"""Pacing of the driver on remote control storage, the driver's storage choice and the local driver log
with HDFS control files (no Spark started, no NameNode needed)."""

from __future__ import annotations

import socket
import time

import pytest

from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlPaths, Lease, StatusDocument
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec
from spark_jobs.runtime.hadoop_storage import driver_storage
from spark_jobs.runtime.reporter import StatusReporter


class CountingStorage(LocalStorage):
    """Local files that count the writes of each file name."""

    def __init__(self) -> None:
        self.writes: dict[str, int] = {}

    def write_atomic(self, path: str, data: bytes) -> None:
        name = path.rsplit("/", 1)[-1]
        self.writes[name] = self.writes.get(name, 0) + 1
        super().write_atomic(path, data)


def reporter(tmp_path, remote: bool, heartbeat: float = 5.0) -> tuple[StatusReporter, CountingStorage]:
    storage = CountingStorage()
    now = time.time()
    doc = StatusDocument(stream="s", version="v1", run_id="r", state=contract.RUNNING, pid=1, host="h",
                         started_at=now, heartbeat_at=now)
    lease = Lease("r", 1, None, "h", now, now, 120.0)
    rep = StatusReporter(storage, ControlPaths(str(tmp_path)), doc, lease,
                         contract.heartbeat_seconds(heartbeat, remote), remote=remote)
    return rep, storage


def progress(batch: int) -> dict:
    return {"id": "q", "runId": "r", "name": "s", "batchId": batch, "numInputRows": 10}


@pytest.mark.parametrize("remote", [False, True])
def test_progress_is_written_at_once_locally_and_with_the_next_heartbeat_remotely(tmp_path, remote):
    rep, storage = reporter(tmp_path, remote)
    for batch in range(5):
        rep.on_progress(progress(batch))
    # Remote: only the first progress (readiness) is written at once; the rest waits for the heartbeat.
    assert storage.writes.get("status.json") == (1 if remote else 5)
    assert rep.doc.totals["batches"] == 5 and rep.doc.queries[0].last_batch_id == 4  # nothing is lost
    rep.set_state(contract.STOPPING)  # state changes are written at once everywhere
    assert storage.writes["status.json"] == (2 if remote else 6)
    assert contract.read_status(storage, rep.paths).queries[0].last_batch_id == 4


def test_remote_heartbeat_and_lease_renewal_periods():
    assert contract.heartbeat_seconds(5.0, remote=False) == 5.0
    assert contract.heartbeat_seconds(5.0, remote=True) == contract.REMOTE_MIN_HEARTBEAT_SECONDS == 10.0
    assert contract.heartbeat_seconds(30.0, remote=True) == 30.0  # a longer configured heartbeat is kept
    assert contract.lease_renew_seconds(5.0, 120.0, remote=False) == 5.0
    assert contract.lease_renew_seconds(10.0, 120.0, remote=True) == 20.0  # ttl/6, not every heartbeat
    assert contract.lease_renew_seconds(60.0, 120.0, remote=False) == 20.0
    # The lease stays renewed well within its ttl and the driver's own ttl/2 give-up point.
    assert contract.lease_renew_seconds(10.0, 120.0, True) * 3 <= 120.0 / 2


def test_driver_storage_is_local_files_for_local_paths_without_a_jvm(tmp_path):
    storage, path = driver_storage(f"file://{tmp_path}/control/s")
    assert isinstance(storage, LocalStorage) and path == f"{tmp_path}/control/s"
    storage, path = driver_storage(str(tmp_path / "c"))
    assert isinstance(storage, LocalStorage) and path == str(tmp_path / "c")


def test_a_local_target_keeps_its_driver_log_on_this_host_when_control_files_are_on_hdfs(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_STREAMING_LOG_DIR", str(tmp_path / "logs"))
    common = {"name": "etl", "application": "events_etl", "master": "local[2]"}
    with socket.socket() as sock:  # a NameNode address where nothing answers
        sock.bind(("127.0.0.1", 0))
        nn = f"webhdfs://127.0.0.1:{sock.getsockname()[1]}"
    remote = SparkStreamHook(StreamSpec.from_dict({**common, "control_location": f"{nn}/control",
                                                    "checkpoint_location": f"{nn}/ckpt/etl"}))
    local = SparkStreamHook(StreamSpec.from_dict({**common, "control_location": str(tmp_path / "control"),
                                                   "checkpoint_location": str(tmp_path / "ckpt")}))
    assert remote.remote_storage and not local.remote_storage
    assert remote.driver_log_path("r1") == str(tmp_path / "logs" / "etl" / "r1.log")
    assert local.driver_log_path("r1") == local.paths.log("r1") == str(tmp_path / "control" / "etl" / "logs" / "r1.log")
    (tmp_path / "logs" / "etl").mkdir(parents=True)
    (tmp_path / "logs" / "etl" / "r1.log").write_text("line 1\nline 2\n")
    assert remote.log_tail("r1") == "line 1\nline 2"  # no driver.json on the (unreachable) NameNode needed


class _Progress:
    def __init__(self, doc: dict) -> None:
        import json

        self.json = json.dumps(doc)


class _StoppedQuery:
    """What the runtime sees of a stopped query: its own recentProgress (no Spark here)."""

    id = "q"

    def __init__(self, docs: list[dict]) -> None:
        self.recentProgress = [_Progress(d) for d in docs]


def test_settle_applies_the_progress_the_listener_had_not_delivered_and_never_counts_a_batch_twice(tmp_path,
                                                                                                  monkeypatch):
    from airflow_streaming import faults

    hits: list[str] = []
    monkeypatch.setattr(faults, "hit", lambda point, detail="": hits.append(detail) if point == "driver.progress" else None)
    rep, _ = reporter(tmp_path, remote=False)
    batches = [{**progress(b), "timestamp": f"2026-11-23T20:00:0{b}.000Z"} for b in range(3)]
    rep.on_progress(batches[0])  # the listener delivered batch 0; batches 1 and 2 are still on the bus
    rep._queries["q"] = _StoppedQuery(batches)
    rep.settle()
    assert rep.doc.last_batch_id() == 2 and rep.doc.totals["batches"] == 3
    for late in batches[1:]:  # the listener delivers them after the exit record was written
        rep.on_progress(late)
    assert rep.doc.totals["batches"] == 3 and rep.doc.totals["input_rows"] == 30
    assert [p["batchId"] for p in rep.doc.queries[0].recent_progress] == [0, 1, 2]
    assert hits == [f"batch={b}:committed;" for b in range(3)]  # the fault point fires once per batch
    rep.on_progress({**progress(3), "runId": "r2", "timestamp": "2026-11-23T19:00:00.000Z"})  # a new run
    assert rep.doc.last_batch_id() == 3
