"""The driver's status reporter and its lease across a network cut that heals (no Spark started): a driver that
gave its lease up never renews it again, even when the storage answers again before a new driver took it."""

from __future__ import annotations

import errno
import threading
import time

from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlPaths, Lease, StatusDocument
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import StorageError
from spark_jobs.runtime.reporter import StatusReporter


class CuttableStorage(LocalStorage):
    """Local files that time out on every read and write while ``cut`` (a host cut from the storage)."""

    cut = False

    def _reachable(self, path: str) -> None:
        if self.cut:
            raise StorageError(errno.ETIMEDOUT, f"{path}: connect timed out")

    def read_bytes(self, path: str) -> bytes | None:
        self._reachable(path)
        return super().read_bytes(path)

    def write_atomic(self, path: str, data: bytes) -> None:
        self._reachable(path)
        super().write_atomic(path, data)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        self._reachable(path)
        return super().create_exclusive(path, data)

    def delete(self, path: str) -> bool:
        self._reachable(path)
        return super().delete(path)


def test_a_driver_that_gave_its_lease_up_never_renews_it_after_the_storage_comes_back(tmp_path):
    storage, paths = CuttableStorage(), ControlPaths(str(tmp_path))
    now = time.time()
    lease = Lease("old", 1, None, "host-b", now, now, ttl=2.0)  # half the ttl: 1 s without renewal
    storage.write_atomic(paths.lease, lease.to_json())
    doc = StatusDocument(stream="s", version="v1", run_id="old", state=contract.RUNNING, pid=1, host="host-b",
                         started_at=now, heartbeat_at=now)
    reporter = StatusReporter(storage, paths, doc, lease, heartbeat_seconds=0.1)
    gave_up = threading.Event()
    reporter.on_lease_lost = gave_up.set
    thread = threading.Thread(target=reporter._run, name="status-reporter", daemon=True)  # attach() without Spark
    reporter._thread = thread
    thread.start()
    try:
        deadline = time.monotonic() + 10
        while contract.read_lease(storage, paths).renewed_at == now and time.monotonic() < deadline:
            time.sleep(0.05)
        assert contract.read_lease(storage, paths).renewed_at > now  # it renews while it can
        storage.cut = True
        assert gave_up.wait(10), "the reporter did not give the lease up after half its ttl without renewal"
        assert "could not be renewed" in reporter.doc.last_exception["message"]
        storage.cut = False  # the cut heals; no new driver has taken the (now stale) lease yet
        given_up = storage.read_bytes(paths.lease)
        time.sleep(2.5)  # several heartbeats and renewal periods
        assert storage.read_bytes(paths.lease) == given_up, "the driver renewed the lease it had given up"
        assert contract.read_lease(storage, paths).is_stale()  # another host may take the stream over now
    finally:
        reporter.close()
