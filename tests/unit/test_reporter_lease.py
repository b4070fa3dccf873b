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


def reporter_of(storage, paths, ttl: float, heartbeat: float):
    """``(now, reporter, gave_up)``: a reporter of run ``old`` on ``host-b`` holding a lease of ``ttl`` written now,
    its snapshot loop's thread made (not started: ``attach()`` without Spark), ``gave_up`` set when it stops."""
    now = time.time()
    lease = Lease("old", 1, None, "host-b", now, now, ttl=ttl)
    storage.write_atomic(paths.lease, lease.to_json())
    doc = StatusDocument(stream="s", version="v1", run_id="old", state=contract.RUNNING, pid=1, host="host-b",
                         started_at=now, heartbeat_at=now)
    reporter = StatusReporter(storage, paths, doc, lease, heartbeat_seconds=heartbeat)
    gave_up = threading.Event()
    reporter.on_lease_lost = gave_up.set
    reporter._thread = threading.Thread(target=reporter._run, name="status-reporter", daemon=True)
    return now, reporter, gave_up


def test_a_driver_that_gave_its_lease_up_never_renews_it_after_the_storage_comes_back(tmp_path):
    storage, paths = CuttableStorage(), ControlPaths(str(tmp_path))
    now, reporter, gave_up = reporter_of(storage, paths, ttl=2.0, heartbeat=0.1)  # half the ttl: 1 s unrenewed
    reporter._thread.start()
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


class HangingStorage(LocalStorage):
    """Local files whose writes hang while ``hang`` is set (a route that drops packets: the call waits for its
    timeouts instead of failing at once)."""

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.released = threading.Event()

    def write_atomic(self, path: str, data: bytes) -> None:
        if self.hang.is_set():
            self.released.wait(60)
            raise StorageError(errno.ETIMEDOUT, f"{path}: read timed out")
        super().write_atomic(path, data)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        if self.hang.is_set():
            self.released.wait(60)
            raise StorageError(errno.ETIMEDOUT, f"{path}: read timed out")
        return super().create_exclusive(path, data)


def test_a_renewal_that_hangs_does_not_delay_the_half_ttl_stop(tmp_path):
    """Partition trial (a) with a 30 s ttl: the renewal's call to the unreachable NameNode hung 38 s, longer than
    the ttl, and the reporter judged the half-ttl rule only after it returned. The watchdog judges it on its own
    clock: the driver stops within half the ttl (+ the watchdog's tick) while the renewal still hangs."""
    storage, paths = HangingStorage(), ControlPaths(str(tmp_path))
    _, reporter, gave_up = reporter_of(storage, paths, ttl=3.0, heartbeat=0.2)  # half the ttl: 1.5 s unrenewed
    loop = reporter._thread
    watchdog = threading.Thread(target=reporter._watch_lease, name="lease-watchdog", daemon=True)
    try:
        loop.start()
        watchdog.start()
        time.sleep(0.5)
        assert not gave_up.is_set()  # renewing fine
        storage.hang.set()
        hung_at = time.monotonic()
        assert gave_up.wait(10), "the half-ttl stop waited for the hung renewal"
        took = time.monotonic() - hung_at
        assert took < 1.5 + 0.2 + 1.0, took  # half the ttl after the last renewal, the watchdog's tick, slack
        assert not storage.released.is_set()  # the renewal call still hangs: the loop did not decide this
        assert reporter.doc.last_exception["error_class"] == "LEASE_EXPIRED"
        assert "watchdog" in reporter.doc.last_exception["message"]
    finally:
        storage.released.set()
        reporter.close()
        watchdog.join(5)


def test_a_driver_whose_session_started_slowly_is_not_stopped_by_the_watchdog(tmp_path):
    """The lease is taken before the Spark session starts (a minute on a busy machine). Starting the reporter
    renews it first, so the watchdog judges half the ttl from there, not from the lease's acquisition."""
    storage, paths = CuttableStorage(), ControlPaths(str(tmp_path))
    _, reporter, gave_up = reporter_of(storage, paths, ttl=6.0, heartbeat=0.1)  # renewed every 1 s, half: 3 s
    reporter._lease_ok_at -= 10.0  # the session took longer than the whole ttl to start
    slow = [1.5]

    def first_snapshot_slow() -> bool:  # the loop's first look at the queries (py4j calls) on a busy JVM
        time.sleep(slow.pop() if slow else 0)
        return False

    reporter._snapshot = first_snapshot_slow
    try:
        reporter.start()
        time.sleep(4.0)
        assert not gave_up.is_set(), reporter.doc.last_exception
        assert contract.read_lease(storage, paths).renewed_at > reporter.doc.started_at
    finally:
        reporter.close()
