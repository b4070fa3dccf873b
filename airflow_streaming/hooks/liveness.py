"""Whether a stream's driver runs, and how healthy it is (a part of the stream's hook).

Liveness comes with its proof: the lease and the deploy target (:class:`~airflow_streaming.targets.base.DriverTarget`)
say ALIVE, GONE or UNKNOWN, and UNKNOWN is never taken for "not running". The health verdict applies
the pure rules of :mod:`airflow_streaming.health.verdict` to the status document and that liveness.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import time
from typing import Any

from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError, DriverRecord, check_view
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import StreamStateUnknownError
from airflow_streaming.health.verdict import HealthState, HealthVerdict, Reason, evaluate
from airflow_streaming.health.view import view_of
from airflow_streaming.hooks.spark_master import app_state, master_ui_url
from airflow_streaming.targets.base import Liveness
from airflow_streaming.targets.local import reap_children

log = logging.getLogger("airflow_streaming.hooks.streaming_job")


#: ``health(status=...)``'s default: read the status document.
_READ_IT = object()


def hostname() -> str:
    """This host's name, as leases and driver records carry it."""
    return socket.gethostname()


class LivenessMixin:
    """Liveness and health of the stream (mixed into ``SparkStreamHook``)."""

    def driver_liveness(self) -> tuple[Liveness, str]:
        """Whether a driver of this stream runs: from the lease and the deploy target, with why.

        UNKNOWN when it cannot be told (a lease or record that cannot be read, a cluster that does not
        answer): callers never treat it as "not running"."""
        reap_children()
        try:
            lease = self._read("lease.json", lambda: contract.read_lease(self.storage, self.paths))
        except StorageError as exc:
            return Liveness.UNKNOWN, f"the lease cannot be read: {exc}"
        except ControlFileError as exc:
            log.warning("ignoring an unreadable lease (no driver can renew it): %s", exc)
            lease = None
        if lease is not None and not lease.is_stale():
            exited = self._lease_holder_exited(lease)
            if exited is None:
                return Liveness.ALIVE, f"driver pid {lease.pid} on {lease.host} holds the lease (run {lease.run_id})"
            return Liveness.GONE, exited
        try:
            record = self.driver_record()
        except StorageError as exc:
            return Liveness.UNKNOWN, f"the driver record cannot be read: {exc}"
        except ControlFileError as exc:
            return Liveness.UNKNOWN, f"the driver record is unreadable: {exc}"
        if record is None:
            return Liveness.GONE, "never submitted"
        state = self.target_of(record).state(record)
        if state.liveness == Liveness.UNKNOWN and (lease is None or lease.is_stale()):
            # Another host's client-mode driver: its lease is the evidence (renewed, or it stopped itself).
            if lease is not None or self._terminal_status_of(record.run_id):
                return Liveness.GONE, f"{state.detail}; its lease is {'stale' if lease else 'released'}"
        return state.liveness, state.detail

    def _lease_holder_exited(self, lease: contract.Lease) -> str | None:
        """Why the driver holding a fresh ``lease`` is known to have exited, ``None`` if it is not.

        On the lease's own host a lease is stale as soon as its pid is gone; any other host has to wait
        for its ttl (it cannot see that pid). A driver killed through its cluster manager leaves its
        lease behind, so without this, only the host the driver ran on would see at once that it is
        gone; every other host (another Airflow worker, a triggerer) would call the stream running - and
        refuse a restart - for up to the lease's ttl. The cluster manager's word counts only when it
        reports that the recorded driver of the lease's very run *exited* (``DriverState.exited``: the
        node confirmed the process ended), never when it merely lost track of it."""
        if lease.host == hostname():
            return None  # Lease.is_stale already checked the pid
        try:
            record = self.driver_record()
        except (ControlFileError, StorageError):
            return None
        if record is None or record.run_id != lease.run_id:
            return None
        state = self.target_of(record).state(record)
        if not (state.gone and state.exited):
            return None
        age = max(0.0, time.time() - lease.renewed_at)
        return (f"{state.detail}; the lease it held (pid {lease.pid} on {lease.host}, renewed {age:.0f}s ago) is "
                f"left over: a next driver on {lease.host} takes it over at once, one on another host after its ttl "
                f"({lease.ttl:.0f}s)")

    def _terminal_status_of(self, run_id: str) -> bool:
        try:
            doc = self.status()
        except (ControlFileError, StorageError):
            return False
        return doc is not None and doc.run_id == run_id and doc.is_terminal

    def alive(self, record: DriverRecord) -> bool:
        """Whether the driver of ``record`` is alive (per its target; UNKNOWN counts as alive)."""
        return not self.target_of(record).state(record).gone

    def running_driver(self) -> str | None:
        """A description of the live driver of this stream, ``None`` if none runs.

        Raises :class:`StreamStateUnknownError` when that cannot be told (see :meth:`driver_liveness`)."""
        liveness, detail = self.driver_liveness()
        if liveness == Liveness.UNKNOWN:
            raise StreamStateUnknownError(f"cannot tell whether stream {self.spec.name!r} runs: {detail}")
        return detail if liveness == Liveness.ALIVE else None

    def processes_of_run(self, run_id: str) -> list[str]:
        """Drivers (processes, applications, pods) of ``run_id`` that exist now: tells whether a
        submission happened even if its record was never written."""
        return self.target.find(run_id)

    def health(self, thresholds: Any = None, now: float | None = None, status: Any = _READ_IT,
               details: bool = True) -> Any:
        """The stream's :class:`~airflow_streaming.health.verdict.HealthVerdict` right now.

        Anything that cannot be read (status, record, lease, the cluster) gives UNKNOWN with the reason,
        never FAILED or STOPPED; garbage in the status document likewise. ``status``: the status document
        as the caller has just read and parsed it (a dict, or ``None`` when there is none), so that a
        caller that needs it too does not read and parse ~30 KB twice per poll; by default it is read here.
        ``details=False``: without the warnings and the metrics (:func:`~airflow_streaming.health.verdict.evaluate`)."""
        reap_children()
        unreadable = None
        doc = None
        try:
            if status is _READ_IT:
                doc = self.status_view(round_read=True)  # once a poll round, and only what a verdict reads
            elif status is not None:
                try:
                    doc = check_view(self.paths.status, view_of(status))  # validates
                except TypeError as exc:
                    raise ControlFileError(f"{self.paths.status}: {exc}") from None
        except (ControlFileError, StorageError) as exc:
            unreadable = str(exc)
        alive: bool | None = None
        liveness_note = None
        try:
            record = self._polled_driver_record()
        except (ControlFileError, StorageError) as exc:
            record = None
            unreadable = unreadable or f"driver record: {exc}"
        if record is not None:
            state = self.target_of(record).state(record)
            alive = None if state.liveness == Liveness.UNKNOWN else state.alive
            if state.cluster_state is not None or state.gone:
                liveness_note = state.detail
        if doc is not None and record is not None and doc.run_id != record.run_id:
            doc = None  # a status of a previous run says nothing about the current submission
        cluster = self.cluster_app_state(doc.app_id if doc is not None else None)
        if cluster is not None:
            liveness_note = f"standalone master reports app {cluster.app_id} {cluster.state or 'unknown'}"
            if cluster.active is False:
                alive = False  # the cluster ended the application, whatever the local process does
            elif cluster.active and alive is None:
                alive = True
        try:
            verdict = evaluate(
                doc, now=time.time() if now is None else now,
                driver_alive=alive, trigger_interval=self.spec.trigger_interval,
                heartbeat_interval=contract.heartbeat_seconds(self.spec.heartbeat_interval, self.remote_storage),
                thresholds=thresholds or self._health_thresholds(), unreadable=unreadable,
                liveness_note=liveness_note, details=details)
        except (TypeError, ValueError, KeyError, AttributeError) as exc:  # garbage that passed validation
            verdict = HealthVerdict(self.spec.name, HealthState.UNKNOWN, (Reason(
                "STATUS_UNREADABLE", f"{self.paths.status} has unexpected content ({type(exc).__name__}: {exc})"),))
        if verdict.stream is None:
            verdict = dataclasses.replace(verdict, stream=self.spec.name)
        return verdict

    def _health_thresholds(self) -> Any:
        """The spec's :class:`~airflow_streaming.health.thresholds.HealthThresholds` (made once per hook: a
        watched stream's hook is reused across its polls, and its spec does not change)."""
        from airflow_streaming.health.thresholds import HealthThresholds

        kept = self.__dict__.get("_thresholds")
        if kept is None:
            kept = self.__dict__["_thresholds"] = HealthThresholds.from_mapping(self.spec.health)
        return kept

    def _polled_driver_record(self) -> DriverRecord | None:
        """``driver.json`` for a health poll: read at every poll, parsed again only when its bytes changed (the
        hook of a watched stream is reused across its polls, :func:`~airflow_streaming.spec_hooks.hook_for`,
        and a record changes once a run). Errors as for :meth:`driver_record`."""
        path = self.paths.driver
        raw = self._read("driver.json", lambda: self.storage.read_bytes(path))
        if raw is None:
            return None
        kept = self.__dict__.get("_polled_record")
        if kept is not None and kept[0] == path and kept[1] == raw:
            return kept[2]
        record = DriverRecord.from_json(path, raw)
        self.__dict__["_polled_record"] = (path, raw, record)
        return record

    def cluster_app_state(self, app_id: str | None) -> Any:
        """The standalone master's view of the stream's application (``None`` if not applicable/reachable)."""
        ui = master_ui_url(self.spec.master or "", self.spec.master_ui_url)
        if ui is None or not app_id:
            return None
        try:
            return app_state(ui, app_id)
        except (OSError, ValueError) as exc:
            log.warning("Spark master %s not reachable for liveness of %s: %s", ui, app_id, exc)
            return None
