"""Submitting a stream's driver for a recorded step (a part of the stream's hook): spark-submit through the
deploy target, the run marker and the driver record, a standby and its promotion, a gate driver, adopting
a driver whose submitter died, and the readiness of a new run. Every side effect here takes the step's
:class:`~airflow_streaming.control.permit.StepPermit` (see :mod:`airflow_streaming.control.permit`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import time
from typing import Any

from airflow_streaming import faults
from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError, DriverRecord, StatusDocument
from airflow_streaming.control.permit import StepPermit
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import DriverStartError, StreamAlreadyRunningError
from airflow_streaming.hooks.liveness import hostname
from airflow_streaming.hooks.planning import (  # noqa: F401 - re-exported: the names importers use
    DEFAULT_SPARK_CONF,
    DRIVER_EXIT_GRACE_SECONDS,
    DRIVER_LOG4J2,
    JAVA_HINT,
    JOBS_DIR,
    LAUNCHER,
    check_java,
    lease_ttl,
    redacting_log_options,
)
from airflow_streaming.sealing import deployer_of, sealed

log = logging.getLogger("airflow_streaming.hooks.streaming_job")


class SubmissionMixin:
    """Submit, adopt, promote, wait until ready (mixed into ``SparkStreamHook``)."""

    def submit(self, permit: StepPermit, run_id: str | None = None, standby: bool = False,
               failover: bool = False) -> DriverRecord:
        """Start the stream's driver detached for the recorded step ``permit`` allows, and return its record.

        Refuses (before anything is submitted) when a driver already runs the stream or that cannot be
        told, when the application is missing, or when Java is not usable. ``run_id`` lets the resumable
        caller choose (and record) the run id before submitting, so that it can later tell whether the
        submission happened (:meth:`processes_of_run`) instead of submitting twice.

        ``standby=True`` starts a *prepared* driver beside the running one: it builds its session and
        query, then waits - without touching the checkpoint, the lease or the status document - until
        :meth:`promote` names it in the run marker. Its record goes to ``standby-driver.json``. With
        ``failover`` it is the stream's hot standby (:mod:`airflow_streaming.hooks.hot_standby`).
        """
        self.preflight()
        with permit.open(self.paths.root, "submit"):
            if not standby:
                running = self.running_driver()
                if running:
                    raise StreamAlreadyRunningError(
                        f"stream {self.spec.name!r} is already running: {running}. Stop it before deploying again.")
            else:
                other = self.standby_record()
                if other is not None and other.run_id != run_id and not self._is_recorded_driver(other) \
                        and self.processes_of_run(other.run_id):
                    raise StreamAlreadyRunningError(f"stream {self.spec.name!r} already has a standby driver "
                                                    f"(run {other.run_id})")
            run_id = run_id or contract.new_run_id()
            plan = self.launch_plan(run_id, standby=standby, failover=failover)
            plan = dataclasses.replace(plan, env={**self._environment(), **plan.env})
            self.storage.makedirs(self.paths.root)
            self.ready_for_run_as_user(plan)
            if not self.remote_storage:
                self.storage.makedirs(os.path.dirname(self.paths.log(run_id)))
            permit.check(self.paths.root, "submit")
            if not standby:
                contract.write_marker(self.storage, self.paths, run_id, self.spec.version)
            else:
                self._mark_standby_submitted(run_id, failover)
            try:
                handle = self.target.submit(plan)
            except BaseException:
                if not standby:
                    self._remove_marker_of(run_id)
                raise
            faults.hit("hook.submitted", run_id)  # e.g. the task killed before the record: see adopt()
            record = DriverRecord(
                run_id=run_id, stream=self.spec.name, version=self.spec.version, application=self.spec.application,
                host=hostname(), command=self.target.describe_command(plan), log_path=plan.log_path,
                submitted_at=time.time(), checkpoint_location=self.spec.checkpoint_location, target=self.target.kind,
                handle=handle)
            if standby:
                self.storage.write_atomic(self.paths.standby_driver, record.to_json())
            else:
                self._record_deployment(record, permit)
            log.info("submitted stream %s %s%s to %s: run %s, %s, log %s", self.spec.name, self.spec.version,
                     " (standby)" if standby else "", self.target.kind, run_id, handle, plan.log_path)
            return record

    def _is_recorded_driver(self, standby: DriverRecord) -> bool:
        """Whether a standby record names the stream's recorded driver: it was promoted (a warm upgrade) or
        took over (the hot standby), so it is no standby any more and never blocks a new one."""
        current = self.driver_record()
        return current is not None and current.run_id == standby.run_id

    def unrecorded_record(self, run_id: str, standby: bool = False) -> DriverRecord | None:
        """A driver record for the one driver of ``run_id`` that runs although no record names it (its
        submitter was killed between the submission and the record), as the target identifies it;
        ``None`` when the target cannot tell which driver it is. Written by nobody: see :meth:`adopt`."""
        handle = self.target.adopt(run_id)
        if handle is None:
            return None
        # Nothing here may fail or take long (no launch plan: it could resolve a runtime): a rollback's
        # kill depends on this record.
        return DriverRecord(
            run_id=run_id, stream=self.spec.name, version=self.spec.version, application=self.spec.application,
            host=hostname(), command=f"(adopted {'standby ' if standby else ''}driver: submitted by a task killed "
                                     f"before it wrote this record)",
            log_path=self.driver_log_path(run_id), submitted_at=time.time(),
            checkpoint_location=self.spec.checkpoint_location, target=self.target.kind, handle=handle)

    def adopt(self, permit: StepPermit, run_id: str, standby: bool = False) -> DriverRecord:
        """Record the driver of ``run_id`` that a killed submitter started but never recorded, so that
        everything after (the wait for its progress, probation, a promotion, a stop, a rollback's kill)
        acts on it. Refuses (:class:`DriverStartError`) when the target cannot tell which driver it is,
        or (not for a ``standby``) when another driver of the stream still runs: the caller must
        neither submit again nor go on as if it were recorded."""
        with permit.open(self.paths.root, "adopt"):
            previous = self.driver_record()
            lease = contract.read_lease(self.storage, self.paths)
            other = (not standby and previous is not None and previous.run_id != run_id
                     and not self.target_of(previous).state(previous).gone)
            standby_now = self.standby_record() if standby else None
            if standby and standby_now is not None and standby_now.run_id != run_id and \
                    not self._is_recorded_driver(standby_now) and self.processes_of_run(standby_now.run_id):
                raise StreamAlreadyRunningError(f"stream {self.spec.name!r} already has a standby driver (run "
                                                f"{standby_now.run_id}): not adopting run {run_id} beside it")
            if not standby and (other or (lease is not None and not lease.is_stale() and lease.run_id != run_id)):
                raise StreamAlreadyRunningError(
                    f"stream {self.spec.name!r} runs another driver (recorded run "
                    f"{previous.run_id if previous else None}, lease of run {lease.run_id if lease else None}): not "
                    f"adopting the unrecorded driver of run {run_id} beside it")
            record = self.unrecorded_record(run_id, standby)
            if record is None:
                raise DriverStartError(f"run {run_id} of {self.spec.name} was submitted but never recorded, and "
                                       f"the {self.target.kind} target cannot tell which driver it is: "
                                       f"{self.processes_of_run(run_id)}. Stop these (each carries --run-id {run_id}: "
                                       f"on its host, or through the cluster manager), then run the action again: "
                                       f"it will submit the run afresh")
            permit.check(self.paths.root, "adopt")
            if standby:
                self.storage.write_atomic(self.paths.standby_driver, record.to_json())
            else:
                self._record_deployment(record, permit)
            log.warning("run %s of %s was submitted by a task killed before it recorded the driver: adopted %s",
                        run_id, self.spec.name, record.handle)
            return record

    def ready_for_run_as_user(self, plan: Any) -> None:
        """For a spec with ``run_as_user``: refuse (``RunAsUserError``) a user that could read the Airflow side's
        secrets or cannot run the driver, then share the stream's control directory with it
        (:mod:`airflow_streaming.run_as`). Nothing to do without one."""
        if not plan.run_as_user:
            return
        import shutil
        import sys

        from airflow_streaming import run_as
        from airflow_streaming.sealing import secret_files

        user = run_as.lookup(plan.run_as_user)
        binary = self.target.binary(plan)
        spark_submit = shutil.which(binary, path=plan.env.get("PATH", os.environ.get("PATH"))) or binary
        pythons = [plan.env.get(name) or sys.executable for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")]
        run_as.preflight(user, run=[spark_submit, *dict.fromkeys(pythons)], read=[plan.launcher],
                         secret=secret_files())
        run_as.share_control_dir(self.paths.root, user)

    def submit_gate(self, permit: StepPermit, run_id: str, dry_run: bool = True) -> DriverRecord:
        """Start a *gate driver* on the stream's own target: a short driver that runs the compatibility gate
        of this spec (the candidate) against its checkpoint where the checkpoint and the job's dependencies
        are, writes ``{"id": run_id, "report" | "error"}`` to ``gate-report.json`` and exits
        (``spark_jobs/launch.py --gate-only``). It touches neither the checkpoint, the lease, the run marker
        nor the status document; its record goes to ``gate-driver.json`` (logs, kill). For the step ``permit``
        allows."""
        self.preflight()
        with permit.open(self.paths.root, "submit the gate of"):
            plan = self.launch_plan(run_id, gate=dry_run)
            plan = dataclasses.replace(plan, name=f"{plan.name} gate",
                                       env={**self._environment(), **plan.env})
            self.storage.makedirs(self.paths.root)
            self.ready_for_run_as_user(plan)
            if not self.remote_storage:
                self.storage.makedirs(os.path.dirname(self.paths.log(run_id)))
            permit.check(self.paths.root, "submit the gate of")
            handle = self.target.submit(plan)
            record = DriverRecord(
                run_id=run_id, stream=self.spec.name, version=self.spec.version, application=self.spec.application,
                host=hostname(), command=self.target.describe_command(plan), log_path=plan.log_path,
                submitted_at=time.time(), checkpoint_location=self.spec.checkpoint_location, target=self.target.kind,
                handle=handle)
            self.storage.write_atomic(self.paths.gate_driver, record.to_json())
            log.info("submitted the compatibility gate of %s %s to %s: run %s, %s, log %s", self.spec.name,
                     self.spec.version, self.target.kind, run_id, handle, plan.log_path)
            return record

    def gate_driver_record(self) -> DriverRecord | None:
        """The record of the last gate driver (:meth:`submit_gate`), if any."""
        data = self.storage.read_bytes(self.paths.gate_driver)
        return None if data is None else DriverRecord.from_json(self.paths.gate_driver, data)

    def _remove_marker_of(self, run_id: str) -> None:
        """Remove the run marker if it names ``run_id`` (a failed start must leave no marker behind)."""
        try:
            marker = contract.read_marker(self.storage, self.paths)
            if marker is not None and marker.get("run_id") == run_id:
                contract.request_stop(self.storage, self.paths)
        except StorageError as exc:
            log.error("could not remove the run marker of the failed run %s: %s", run_id, exc)

    def _record_deployment(self, record: DriverRecord, permit: StepPermit) -> None:
        self.storage.write_atomic(self.paths.driver, record.to_json())
        # One seal binds the spec, this stream and control directory, its version, that it may run (only a
        # deployed spec is recorded here: a DAG's deploy, or a target after its gate) and who deployed it.
        doc: dict[str, Any] = {"run_id": record.run_id, "at": record.submitted_at,
                               "spec": sealed(self.spec.to_dict(), self.spec, deployed_by=self._deployer(permit))}
        self.storage.write_atomic(self.deployed_path, json.dumps(doc, indent=1).encode())

    def _deployer(self, permit: StepPermit) -> str | None:
        """Which task deployed the stream (the Streams page shows it to who may read that task's DAG): the
        lock owner of a ``deploy`` action (or ``parallel``: the stream under its new name) run by a task;
        for any other action (restart, upgrade, rollback, the supervisor's recovery) the deployer recorded
        before, so a shared supervisor or operations DAG does not take the stream over."""
        holder = getattr(permit.lock, "holder", None) or {}
        owner = holder.get("owner")
        by_task = isinstance(owner, str) and re.match(r"^\S+\.\S+ run .+ try \d+$", owner) is not None
        if holder.get("action") in ("deploy", "parallel") and by_task:
            return owner
        try:
            raw = self.storage.read_bytes(self.deployed_path)
            return deployer_of(contract.json_object_or_none(raw), self.spec.name, self.spec.control_dir)
        except (StorageError, ValueError):
            return None

    def standby_record(self) -> DriverRecord | None:
        data = self.storage.read_bytes(self.paths.standby_driver)
        return None if data is None else DriverRecord.from_json(self.paths.standby_driver, data)

    def standby_state(self, run_id: str) -> dict[str, Any] | None:
        """The standby driver's readiness (``state`` PREPARING / READY / FAILED / PROMOTED / EXPIRED)."""
        doc = self._standby_doc()
        return doc if doc is not None and doc.get("run_id") == run_id else None

    def promote(self, permit: StepPermit, run_id: str) -> DriverRecord:
        """Hand the stream to the prepared standby ``run_id``: it becomes the recorded driver and the run
        marker names it, which is its signal to take the lease and start. Only call this once no other
        driver runs (the lease would make it wait otherwise). Idempotent."""
        with permit.open(self.paths.root, "promote"):
            record = self.standby_record()
            if record is None or record.run_id != run_id:
                raise DriverStartError(f"no standby driver record for run {run_id} in {self.paths.standby_driver}")
            self._record_deployment(record, permit)
            contract.write_marker(self.storage, self.paths, run_id, self.spec.version)
        log.info("promoted standby run %s of %s %s", run_id, self.spec.name, self.spec.version)
        return record

    def wait_until_ready(self, record: DriverRecord, timeout: float | None = None, poll: float = 0.5,
                         lock: Any = None) -> StatusDocument:
        """Wait until the run's query reports progress (or idles); raise :class:`DriverStartError` with the
        driver's own error if it dies first, or ``timed_out`` when it has not reported within ``timeout``.
        Reads only: what becomes of a failed start (its marker, a kill) is the caller's step to decide."""
        timeout = self.spec.startup_timeout if timeout is None else timeout
        deadline = time.monotonic() + timeout
        while True:
            readiness = self.readiness(record)
            if readiness in ("ready", "finished"):
                return self._status_of_run(record.run_id)  # type: ignore[return-value]
            if readiness == "ended":
                # Let the driver exit and flush its last lines before its output is read.
                self.wait_gone(record, DRIVER_EXIT_GRACE_SECONDS)
                final = self._status_of_run(record.run_id)
                raise DriverStartError(self._failure_message(record, final),
                                       error_class=(final.last_exception or {}).get("error_class") if final else None,
                                       exit_code=(final.exit or {}).get("code") if final else None)
            if time.monotonic() > deadline:
                raise DriverStartError(
                    f"stream {record.stream!r} did not report progress within {timeout:.0f}s; the driver is "
                    f"stopped. Last driver output:\n{self.log_tail(record.run_id)}", timed_out=True
                )
            if lock is not None:
                lock.ensure()
            time.sleep(poll)

    def readiness(self, record: DriverRecord) -> str:
        """``ready`` (the run reported progress or idles), ``finished`` (its job ended by itself, exit 0: an
        ``availableNow``/``once`` trigger that processed what was there - a start that did its work), ``ended``
        (it failed or exited first) or ``waiting`` - checked once, without waiting."""
        doc = self._status_of_run(record.run_id)
        if doc is not None and doc.ready and doc.state == contract.RUNNING:
            return "ready"
        if doc is not None and doc.state == contract.STOPPED and doc.exit and doc.exit.get("finished") \
                and doc.exit.get("code") == contract.EXIT_GRACEFUL:
            return "finished"
        if (doc is not None and doc.is_terminal) or self.target_of(record).state(record).gone:
            return "ended"
        return "waiting"

    def _status_of_run(self, run_id: str) -> StatusDocument | None:
        try:
            doc = self.status()
        except (ControlFileError, StorageError) as exc:
            log.warning("status of %s not readable (treated as not yet written): %s", self.spec.name, exc)
            return None
        return doc if doc is not None and doc.run_id == run_id else None

    def _failure_message(self, record: DriverRecord, doc: StatusDocument | None) -> str:
        head = f"driver of stream {record.stream!r} (run {record.run_id}) failed while starting"
        if doc is not None and doc.last_exception:
            err = doc.last_exception
            head += f": [{err.get('error_class')}] {self.redact(str(err.get('message')))}"
        if doc is not None and doc.exit:
            head += f" (exit code {doc.exit.get('code')}: {doc.exit.get('reason')})"
        return f"{head}\nLast driver output ({record.log_path}):\n{self.log_tail(record.run_id)}"
