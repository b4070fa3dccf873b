"""Whether this driver still holds its stream's lease, checked before each batch writes.

The status reporter renews the lease every heartbeat (at most ttl/6; ttl/6 on remote storage) and stops
the driver when a renewal finds bytes it did not write. Between two renewals a forged or stale lease, or
a takeover, could let a second driver commit beside this one. :class:`LeaseCheck` closes that window for
``foreachBatch`` sinks: :mod:`spark_jobs.runtime.writer_capture` calls it before the job's function runs,
so a batch of a driver that lost its lease writes nothing and its query fails with :class:`LeaseLost`.

The rule (fail closed):

- ``lease.json`` names this holder (run id, pid, pid start time, host and acquisition time equal the lease
  this driver holds; ``renewed_at`` may differ: the reporter renews it meanwhile): the batch runs;
- it names anyone else, nobody (deleted), or is unreadable garbage: :class:`LeaseLost` - any of these lets
  another driver take the lease;
- the storage cannot be read: the batch runs only while the last successful renewal is younger than half
  the ttl, the bound after which the reporter stops the driver anyway (no other host judges the lease stale
  before a full ttl without renewal); beyond it, :class:`LeaseLost`.

One read of ``lease.json`` per batch: a local file read, or one NameNode request on Hadoop storage.
The read is **bounded by that half ttl**: it runs in the check's one worker thread and the batch waits for it
only until the last successful renewal is half a ttl old (at least :data:`MIN_WAIT_S`). A read that hangs (a
NameNode behind a dropped route: a 10 s connect and a 30 s read timeout) counts as a storage error once the
bound is passed, so the batch fails and the query can stop at once instead of when the read gives up - with a
30 s ttl that read outlasted the ttl itself (partition trial (a)). While a hung read still holds the worker,
the next check starts none and counts as a storage error at once (no second thread; a late answer is never
used: it may tell what the lease was long ago).
Pure standard library and the control contract: it runs inside the driver.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from airflow_streaming.control import contract
from airflow_streaming.control.storage import ControlStorage, StorageError

__all__ = ["LeaseCheck", "LeaseLost", "MIN_WAIT_S"]

log = logging.getLogger("airflow_streaming.runtime")

#: The least a check waits for its read (a read of a local file or a NameNode that answers takes milliseconds).
MIN_WAIT_S = 1.0


class LeaseLost(RuntimeError):
    """This driver no longer holds its stream's lease: the batch must not write."""


def _holder(lease: contract.Lease) -> tuple[object, ...]:
    """What names a lease's holder (all but ``renewed_at``)."""
    return (lease.run_id, lease.pid, lease.pid_start_time, lease.host, lease.acquired_at)


def _describe(lease: contract.Lease) -> str:
    return f"run {lease.run_id} pid {lease.pid} on {lease.host}"


class LeaseCheck:
    """``check(batch_id)`` raises :class:`LeaseLost` unless this driver still holds the lease (see the module).

    ``held`` returns the lease this driver holds now (the reporter's last renewal); ``renewed_ok_at``
    returns the ``time.monotonic()`` of its last successful renewal."""

    def __init__(self, storage: ControlStorage, paths: contract.ControlPaths, held: Callable[[], contract.Lease],
                 renewed_ok_at: Callable[[], float], clock: Callable[[], float] = time.monotonic):
        self.storage = storage
        self.paths = paths
        self.held = held
        self.renewed_ok_at = renewed_ok_at
        self.clock = clock
        self._pending: _Read | None = None  # a read that outlived its wait, maybe still hanging
        self._jobs: queue.SimpleQueue | None = None

    def _read(self, held: contract.Lease) -> contract.Lease | None:
        """``lease.json`` as :func:`contract.read_lease` reads it, waiting at most until the last renewal is half a
        ttl old (:data:`MIN_WAIT_S` at least); :class:`StorageError` if the read is not done by then."""
        if self._pending is not None and not self._pending.done.is_set():
            # Its answer, when it comes, may tell what the lease was long ago: never used (nor waited for).
            raise StorageError(110, f"{self.paths.lease}: an earlier read of it still has no answer")
        wait = max(MIN_WAIT_S, held.ttl / 2 - (self.clock() - self.renewed_ok_at()))
        read = self._pending = _Read(lambda: contract.read_lease(self.storage, self.paths))
        if self._jobs is None:  # the worker: a daemon thread (a read that hangs never holds up the driver's exit),
            # started with the first read and kept (a thread per batch cost ~1 ms on a busy machine, 40x the read)
            self._jobs = queue.SimpleQueue()
            threading.Thread(target=_work, args=(self._jobs,), name="lease-check", daemon=True).start()
        self._jobs.put(read)
        if not read.done.wait(wait):
            raise StorageError(110, f"{self.paths.lease}: no answer within {wait:.1f}s")
        self._pending = None
        if read.error is not None:
            raise read.error
        return read.result

    def check(self, batch_id: int | None = None) -> None:
        held = self.held()
        what = f"batch {batch_id}" if batch_id is not None else "a batch"
        try:
            current = self._read(held)
        except contract.ControlFileError as exc:
            raise LeaseLost(self._lost(what, held, f"it is unreadable ({exc})")) from None
        except StorageError as exc:
            unrenewed = self.clock() - self.renewed_ok_at()
            if unrenewed <= held.ttl / 2:
                return  # the lease was renewed recently: no other driver may judge it stale yet
            raise LeaseLost(self._lost(what, held, f"it cannot be read ({exc}) and was last renewed "
                                                   f"{unrenewed:.0f}s ago, more than half its ttl "
                                                   f"{held.ttl:.0f}s")) from None
        if current is None:
            raise LeaseLost(self._lost(what, held, "it was deleted"))
        if _holder(current) != _holder(held):
            raise LeaseLost(self._lost(what, held, f"it now names {_describe(current)}"))

    def _lost(self, what: str, held: contract.Lease, why: str) -> str:
        message = (f"LEASE_LOST: refusing to write {what}: this driver ({_describe(held)}) no longer holds the "
                   f"stream's lease {self.paths.lease}: {why}. Another driver may run the stream; nothing of "
                   f"this batch was written.")
        log.error("%s", message)  # with its time in the driver's log: the query fails with it, writing nothing
        return message


class _Read:
    """One read, done by its check's worker thread."""

    def __init__(self, read: Callable[[], contract.Lease | None]) -> None:
        self.done = threading.Event()
        self.result: contract.Lease | None = None
        self.error: BaseException | None = None
        self.read = read


def _work(jobs: queue.SimpleQueue) -> None:
    while True:
        job = jobs.get()
        try:
            job.result = job.read()
        except BaseException as exc:  # noqa: BLE001 - handed to the check, which raises it
            job.error = exc
        finally:
            job.done.set()
