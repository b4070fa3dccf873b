"""The compatibility gate, run inside a prepared (standby) driver.

A warm-start upgrade prepares the new version's driver beside the running one: its JVM, Spark session
and planned query are up. The gate needs exactly that - the candidate's code, its dependencies and a
session - so the lifecycle runner asks the standby to run it (``standby-gate.json``: ``{"id",
"run_id", "checkpoint", "dry_run"}``, see ``ControlPaths.standby_gate``) instead of starting a local Spark session of its own (~17 s on
these machines; ~0.5 s in the standby's session). The standby answers in ``standby-gate-report.json``
(``{"id", "report"}`` or ``{"id", "error"}``). Nothing here touches the checkpoint: the check reads
it and plans the candidate against a scratch copy of its metadata.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import Any

from airflow_streaming.control.contract import ControlPaths, parse_json_object
from airflow_streaming.control.storage import ControlStorage, StorageError

log = logging.getLogger("airflow_streaming.runtime")

class StandbyGate:
    """Answers gate requests addressed to one standby run (polled from the standby's wait loop)."""

    def __init__(self, storage: ControlStorage, paths: ControlPaths, run_id: str, every_s: float = 0.25):
        self.storage, self.paths, self.run_id, self.every_s = storage, paths, run_id, every_s
        self.answered: set[str] = set()
        self._next = 0.0

    def _request(self) -> dict[str, Any] | None:
        """The gate request addressed to this run and not answered yet, if there is one."""
        try:
            raw = self.storage.read_bytes(self.paths.standby_gate)
            request = parse_json_object(self.paths.standby_gate, raw) if raw else None
        except (StorageError, ValueError) as exc:  # ControlFileError is a ValueError
            log.warning("standby: cannot read the gate request (retrying): %s", exc)
            return None
        if request is None or request.get("run_id") != self.run_id or request.get("id") in self.answered:
            return None
        return request

    def warm_up(self, spark: Any, ns: Any) -> float | None:
        """While the standby prepares: if a gate request for this run is waiting, run the check once and
        discard its result - the classes and the code paths of the check are then loaded and compiled, and
        the answer, a fresh check once the standby is READY, takes a fraction of the time. Returns the
        seconds it took (``None``: nothing asked); never raises. Reads only: the checkpoint is untouched."""
        request = self._request()
        if request is None:
            return None
        started = time.monotonic()
        try:
            self._check(spark, ns, request)
        except Exception as exc:  # noqa: BLE001 - only a warm-up: the real check reports its own errors
            log.info("standby: the warm-up check failed (the gate request is answered by a fresh check): %s",
                     type(exc).__name__)
        seconds = time.monotonic() - started
        log.info("standby: warm-up check for gate request %s in %.2fs (result discarded)", request.get("id"), seconds)
        return seconds

    @staticmethod
    def _check(spark: Any, ns: Any, request: dict[str, Any]) -> Any:
        return run_check_in_driver(spark, ns, str(request.get("checkpoint") or ns.checkpoint),
                                   bool(request.get("dry_run", True)))

    def poll(self, spark: Any, ns: Any) -> None:
        """Run the check once per new request for this run; never raises (errors go into the report)."""
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.every_s
        request = self._request()
        if request is None:
            return
        self.answered.add(str(request.get("id")))
        answer = answer_of(request.get("id"), lambda: self._check(spark, ns, request))
        try:
            self.storage.write_atomic(self.paths.standby_gate_report, json.dumps(answer, default=str).encode())
            log.info("standby: gate request %s answered in %.2fs", request.get("id"), answer["seconds"])
        except StorageError as exc:
            self.answered.discard(str(request.get("id")))  # try again at the next poll
            log.error("standby: cannot write the gate report (will retry): %s", exc)


def run_check_in_driver(spark: Any, ns: Any, checkpoint: str, dry_run: bool) -> Any:
    """The compatibility check of this driver's application (``ns``: the launcher's arguments) against
    ``checkpoint``, in this driver's session, reading through the driver's own storage (the JVM's
    Hadoop FileSystem for ``hdfs://``: no Airflow connection here)."""
    from airflow_streaming.compat.check import check_compatibility
    from spark_jobs.runtime.hadoop_storage import driver_storage

    return check_compatibility(spark, checkpoint, ns.job or ns.script, list(ns.app_args), stream=ns.stream,
                               trigger_seconds=ns.trigger_seconds, dry_run=dry_run, resolve=driver_storage)


def answer_of(answer_id: Any, check: Callable[[], Any]) -> dict[str, Any]:
    """``{"id", "report" | "error", "seconds"}`` of one run of ``check`` (returning a report), as the
    standby and the gate driver write it to shared storage: the report and the error redacted. Never
    raises: an error refuses the upgrade, the runner decides."""
    from airflow_streaming.redaction import redact, redact_text

    started = time.monotonic()
    answer: dict[str, Any] = {"id": answer_id}
    try:
        answer["report"] = redact(check().to_dict())
    except Exception as exc:  # noqa: BLE001 - reported, never raised
        log.exception("the compatibility check failed")
        answer["error"] = redact_text(f"{type(exc).__name__}: {exc}")
    answer["seconds"] = round(time.monotonic() - started, 3)
    return answer
