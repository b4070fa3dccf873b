"""Stopping a stream's driver for a recorded step (a part of the stream's hook): the graceful stop at a
micro-batch boundary, the wait for it, and the kill. The graceful stop is the run marker on the control
storage, which works from any host; the kill goes through the deploy target, and only ever signals the
recorded driver. Whether a stop that timed out ends in a kill is the lifecycle runner's step to decide
(``LifecycleOptions.kill_on_timeout``); each side effect here takes the step's permit.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from airflow_streaming.checkpoint.batches import BatchPosition
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError, DriverRecord
from airflow_streaming.control.storage import StorageError
from airflow_streaming.control.permit import StepPermit
from airflow_streaming.targets.base import Liveness

log = logging.getLogger("airflow_streaming.hooks.streaming_job")
KILL_GRACE_SECONDS = 10.0


@dataclass(frozen=True)
class StopReport:
    """How a stop went."""

    stream: str
    was_running: bool
    graceful: bool
    """The driver exited by itself after the stop request (no kill)."""
    killed: bool
    exit_code: int | None
    position: BatchPosition | None
    """The checkpoint's last planned/committed batch after the stop."""
    seconds: float
    note: str | None = None
    """What else a person should know (e.g. why nothing was signalled)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "was_running": self.was_running,
            "graceful": self.graceful,
            "killed": self.killed,
            "exit_code": self.exit_code,
            "seconds": round(self.seconds, 3),
            **(self.position.to_dict() if self.position else {"last_committed_batch": None, "clean": None}),
            **({"note": self.note} if self.note else {}),
        }


class StoppingMixin:
    """Stop and kill (mixed into ``SparkStreamHook``)."""

    def request_stop(self, permit: StepPermit) -> bool:
        """Remove the run marker: the driver stops at the next micro-batch boundary."""
        with permit.open(self.paths.root, "stop request of"):
            return contract.request_stop(self.storage, self.paths)

    def kill(self, permit: StepPermit, record: DriverRecord, grace: float = KILL_GRACE_SECONDS,
             keep_marker: bool = False) -> str:
        """Remove the marker (unless ``keep_marker``: a gate or standby driver's kill, the marker is the running
        version's) and hard-kill ``record``'s driver through its target. Signals only what the target can prove
        is that driver. Never raises but :class:`~airflow_streaming.control.permit.ActingRefused` (no permit)
        and a lost lock: nothing is done then. Returns what was done."""
        with permit.open(self.paths.root, "kill of a driver of"):
            if not keep_marker:
                try:
                    contract.request_stop(self.storage, self.paths)
                except StorageError:
                    log.exception("could not remove %s", self.paths.marker)
            try:
                outcome = self.target_of(record).kill(record, grace)
            except Exception as exc:  # noqa: BLE001 - kill paths log and never raise
                log.exception("kill of run %s failed", record.run_id)
                return f"kill of run {record.run_id} failed: {exc}"
        log.warning("kill of stream %s run %s: %s", self.spec.name, record.run_id, outcome)
        return outcome

    def wait_gone(self, record: DriverRecord, timeout: float, lock: Any = None,
                  quiesced_is_enough: bool = False) -> bool:
        """Wait up to ``timeout`` seconds for the recorded driver to be gone; return whether it is.
        ``quiesced_is_enough``: also return once the run has quiesced (see :meth:`quiesced`)."""
        deadline = time.monotonic() + timeout
        while True:
            if quiesced_is_enough and self.quiesced(record.run_id):
                return True
            liveness = self.target_of(record).state(record).liveness
            if liveness == Liveness.GONE:
                return self.target_of(record).wait_gone(record, max(1.0, deadline - time.monotonic()))
            if liveness == Liveness.UNKNOWN and self.stopped_out_of_sight(record.run_id):
                return True
            if time.monotonic() > deadline:
                return False
            if lock is not None:
                lock.ensure()
            time.sleep(0.2)

    def quiesced(self, run_id: str) -> bool:
        """Whether ``run_id`` can commit nothing more although its process may still be exiting: its status
        says it stopped gracefully (every query stopped at a batch boundary, the final status written) and
        it gave its lease back. The driver does both before its session's and JVM's shutdown, so a warm
        upgrade promotes its prepared driver here, half a second before the old process is gone. Anything
        unreadable: not quiesced (the caller waits for the process instead)."""
        try:
            doc = self.status()
            lease = contract.read_lease(self.storage, self.paths)
        except (ControlFileError, StorageError):
            return False
        return (doc is not None and doc.run_id == run_id and doc.state == contract.STOPPED
                and (doc.exit or {}).get("code") == contract.EXIT_GRACEFUL
                and (lease is None or lease.run_id != run_id))

    def stopped_out_of_sight(self, run_id: str) -> bool:
        """Whether ``run_id``, whose processes this host cannot observe (its target says UNKNOWN: another host's
        client-mode driver), has stopped by the evidence of the control files: its own status document is
        terminal and the lease is not held (given back, or stale). The driver writes both only after its
        queries stopped. A driver the target can observe (a cluster manager that says it runs) is never judged
        by this: it is stopped when its target says it is gone."""
        return self._terminal_status_of(run_id) and not self._lease_held()

    def _lease_held(self) -> bool:
        try:
            lease = contract.read_lease(self.storage, self.paths)
        except (ControlFileError, StorageError):
            return True
        return lease is not None and not lease.is_stale()

    def begin_stop(self, permit: StepPermit) -> str | None:
        """Ask the driver to stop (remove the run marker); return the run id that was running, ``None``
        when none was. :meth:`await_stop` waits, :meth:`stop_report` reports."""
        record = self.driver_record()
        liveness = self.driver_liveness()[0] if record is not None else Liveness.GONE
        if liveness == Liveness.UNKNOWN and record is not None and self.target_of(record).state(record).gone:
            liveness = Liveness.GONE
        self.request_stop(permit)
        return None if record is None or liveness == Liveness.GONE else record.run_id

    def await_stop(self, run_id: str | None, requested_at: float, timeout: float, lock: Any = None,
                   quiesced_is_enough: bool = False) -> tuple[DriverRecord | None, bool]:
        """Wait until ``requested_at + timeout`` for the run of a :meth:`begin_stop` to exit. Returns the
        recorded driver of that run (``None``: it was not running) and whether it stopped.
        ``quiesced_is_enough``: a run that has :meth:`quiesced` counts as stopped (a warm upgrade)."""
        record = self.driver_record()
        if run_id is None or record is None or record.run_id != run_id:
            log.info("stream %s is not running; nothing to stop", self.spec.name)
            return None, True
        remaining = max(0.0, requested_at + timeout - time.time())
        return record, self.wait_gone(record, remaining, lock, quiesced_is_enough)

    def stop_report(self, record: DriverRecord | None, requested_at: float, killed: bool = False,
                    note: str | None = None) -> StopReport:
        """How the stop of ``record``'s run went (``None``: nothing was running)."""
        if record is None:
            return StopReport(self.spec.name, False, False, False, None, self._position(), 0.0)
        doc = self._status_of_run(record.run_id)
        exit_code = doc.exit.get("code") if doc is not None and doc.exit else None
        report = StopReport(self.spec.name, True, not killed and exit_code == contract.EXIT_GRACEFUL, killed,
                            exit_code, self._position(), time.time() - requested_at, note)
        log.info("stream %s stopped: %s", self.spec.name, report.to_dict())
        return report

    def _position(self) -> BatchPosition | None:
        try:
            return self.batch_position()
        except OSError:
            return None
