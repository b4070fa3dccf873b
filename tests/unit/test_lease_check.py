"""The per-batch lease check (spark_jobs/runtime/lease_check.py) and its place before a foreachBatch
function (spark_jobs/runtime/writer_capture.py): a driver writes a batch only while lease.json names it."""

from __future__ import annotations

import os
import socket
import time

import pytest

from airflow_streaming.control import contract
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import StorageError
from spark_jobs.runtime import writer_capture
from spark_jobs.runtime.lease_check import LeaseCheck, LeaseLost


class FailingStorage(LocalStorage):
    """Local files whose reads fail (an unreachable NameNode)."""

    def read_bytes(self, path: str) -> bytes | None:
        raise StorageError(111, f"{path}: connection refused")


@pytest.fixture
def held(tmp_path):
    storage, paths = LocalStorage(), contract.ControlPaths(str(tmp_path / "s"))
    lease = contract.acquire_lease(storage, paths, "run-ours", 120.0)
    return storage, paths, lease


def check_of(storage, paths, lease, renewed_ago=0.0):
    now = 1000.0
    return LeaseCheck(storage, paths, lambda: lease, lambda: now - renewed_ago, clock=lambda: now)


def test_a_lease_naming_this_driver_lets_the_batch_run(held):
    storage, paths, lease = held
    check_of(storage, paths, lease).check(7)
    renewed = contract.renew_lease(storage, paths, lease)  # renewed_at moved on: still ours
    check_of(storage, paths, lease).check(8)
    check_of(storage, paths, renewed).check(9)


def forge(storage, paths, lease):
    storage.write_atomic(paths.lease, lease.to_json())


def test_a_lease_naming_another_run_refuses_the_batch_and_names_the_holder(held):
    storage, paths, lease = held
    forge(storage, paths, contract.Lease("run-other", 4242, 1.0, "elsewhere", time.time(), time.time(), 120.0))
    with pytest.raises(LeaseLost, match=r"LEASE_LOST: refusing to write batch 3: .*names run run-other pid 4242 "
                                        r"on elsewhere"):
        check_of(storage, paths, lease).check(3)


def test_a_lease_naming_this_run_but_another_process_refuses_the_batch(held):
    """The forgery of issue 35: this run's id with a dead pid - not this driver's lease."""
    storage, paths, lease = held
    forge(storage, paths, contract.Lease(lease.run_id, 1, None, socket.gethostname(), 0.0, 0.0, 120.0))
    with pytest.raises(LeaseLost, match="names run run-ours pid 1 "):
        check_of(storage, paths, lease).check(3)


def test_garbage_or_a_deleted_lease_refuses_the_batch(held):
    storage, paths, lease = held
    storage.write_atomic(paths.lease, b"{not json")
    with pytest.raises(LeaseLost, match="unreadable"):
        check_of(storage, paths, lease).check(1)
    os.unlink(paths.lease)
    with pytest.raises(LeaseLost, match="deleted"):
        check_of(storage, paths, lease).check(1)


def test_a_storage_error_is_allowed_only_within_half_the_ttl_of_the_last_renewal(held):
    _, paths, lease = held
    failing = FailingStorage()
    check_of(failing, paths, lease, renewed_ago=10.0).check(5)  # renewed 10 s ago: ttl 120, bound 60
    check_of(failing, paths, lease, renewed_ago=60.0).check(5)
    with pytest.raises(LeaseLost, match=r"cannot be read .*connection refused.* last renewed 61s ago"):
        check_of(failing, paths, lease, renewed_ago=61.0).check(5)


def test_the_foreach_batch_function_runs_only_after_the_check():
    seen: list[object] = []

    class Writer:
        def foreachBatch(self, func):  # noqa: N802 - PySpark's name
            self.func = func
            return self

    Writer.foreachBatch = writer_capture._checking_batches(Writer.foreachBatch)

    def job(df, batch_id):
        seen.append(("wrote", batch_id))

    writer = Writer().foreachBatch(job)
    try:
        writer_capture.check_batches(None)
        writer.func("df", 0)  # no lease held yet (a standby's warm-up): no check
        writer_capture.check_batches(lambda batch_id: seen.append(("checked", batch_id)))
        writer.func("df", 1)

        def lost(batch_id):
            raise LeaseLost(f"batch {batch_id}")

        writer_capture.check_batches(lost)
        with pytest.raises(LeaseLost, match="batch 2"):
            writer.func("df", 2)
    finally:
        writer_capture.check_batches(None)
    assert seen == [("wrote", 0), ("checked", 1), ("wrote", 1)]


def test_install_wraps_pyspark_foreach_batch():
    pytest.importorskip("pyspark")
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    writer_capture.install()
    assert getattr(DataStreamWriter.foreachBatch, "_airflow_streaming_wrapped", False)


class HangingStorage(LocalStorage):
    """Local files whose reads hang until released (a NameNode behind a dropped route)."""

    def __init__(self) -> None:
        import threading

        self.release = threading.Event()
        self.reads = 0

    def read_bytes(self, path: str) -> bytes | None:
        self.reads += 1
        self.release.wait(30)
        return super().read_bytes(path)


def test_a_hanging_read_is_waited_for_only_until_half_the_ttl_then_the_batch_is_refused(tmp_path):
    """Partition trial (a) with a 30 s ttl: the check's read of an unreachable NameNode hung for its HTTP timeouts,
    longer than the ttl, and the cut-off driver's query could not stop until it gave up. Now the batch waits
    only while the last renewal is younger than half the ttl, and a read still hanging is not waited for again."""
    storage, paths = HangingStorage(), contract.ControlPaths(str(tmp_path / "s"))
    lease = contract.acquire_lease(LocalStorage(), paths, "run-ours", 30.0)
    renewed = time.monotonic() - 14.0  # half the ttl is 15 s: one second left
    check = LeaseCheck(storage, paths, lambda: lease, lambda: renewed)
    began = time.monotonic()
    with pytest.raises(LeaseLost, match=r"cannot be read \(.*no answer within 1\.0s\).*more than half its ttl 30s"):
        check.check(4)
    assert 0.9 < time.monotonic() - began < 5
    began = time.monotonic()
    with pytest.raises(LeaseLost, match="an earlier read of it still has no answer"):
        check.check(5)
    assert time.monotonic() - began < 0.5 and storage.reads == 1  # no second read, no second thread
    storage.release.set()
    time.sleep(0.2)
    check.check(6)  # the storage answers again, and names this driver: the batch runs (a fresh read)
    assert storage.reads == 2

