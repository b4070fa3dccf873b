"""The stream's hot standby, seen from Airflow (mixed into ``SparkStreamHook``).

A hot standby (``StreamSpec.hot_standby``) is a standby driver (``submit(standby=True, failover=True)``)
that never expires: it takes the stream over from a run that crashed
(:mod:`airflow_streaming.control.takeover`, decided in the driver) and exits when the stream is stopped or
moves to another version. Its record is ``standby-driver.json``, its state ``standby.json`` (``failover``
true). The supervisor prepares it (``Act.PREPARE_STANDBY``: a ``standby`` lifecycle action) and
acknowledges a takeover (``Act.RECORD_FAILOVER``: a ``failover`` action); an upgrade that prepares its own
standby retires it first (a recorded step of the upgrade). Each side effect takes the step's permit.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from airflow_streaming.control import takeover
from airflow_streaming.control.contract import DriverRecord, json_object_or_none
from airflow_streaming.control.storage import StorageError
from airflow_streaming.control.permit import StepPermit

log = logging.getLogger(__name__)

#: standby.json states of a standby that may still run.
LIVE_STATES = frozenset({"SUBMITTED", "PREPARING", "READY"})
RETIRE_GRACE_SECONDS = 10.0


class HotStandbyMixin:
    """See the module docstring."""

    def _standby_doc(self) -> dict[str, Any] | None:
        return json_object_or_none(self.storage.read_bytes(self.paths.standby))  # type: ignore[attr-defined]

    def _mark_standby_submitted(self, run_id: str, failover: bool) -> None:
        """Say in ``standby.json`` that standby ``run_id`` was submitted (its driver overwrites it once it
        runs), so that a look before the driver's first word does not take it for missing. Inside
        ``submit``'s open permit."""
        doc = {"run_id": run_id, "state": "SUBMITTED", "failover": failover, "at": time.time()}
        self.storage.write_atomic(self.paths.standby, json.dumps(doc).encode())  # type: ignore[attr-defined]

    def hot_standby_state(self) -> dict[str, Any] | None:
        """The stream's hot standby: ``standby.json`` of the recorded standby plus ``alive`` (its target says
        it is not gone), or the ``TOOK_OVER`` state of one that took over; ``None`` when there is none (no
        standby, or one of an upgrade). A file that cannot be read raises (the caller cannot tell)."""
        doc = self._standby_doc()
        record: DriverRecord | None = self.standby_record()  # type: ignore[attr-defined]
        if doc is None or not doc.get("failover"):
            return None
        if doc.get("state") == takeover.TOOK_OVER:
            return {**doc, "alive": True}
        if record is None or record.run_id != doc.get("run_id") or doc.get("state") not in LIVE_STATES:
            return {**doc, "alive": False}
        gone = self.target_of(record).state(record).gone  # type: ignore[attr-defined]
        return {**doc, "alive": not gone}

    def live_hot_standby(self) -> DriverRecord | None:
        """The record of the stream's hot standby when one runs and is still a standby (not promoted, not
        taken over); ``None`` otherwise."""
        state = self.hot_standby_state()
        if state is None or not state.get("alive") or state.get("state") == takeover.TOOK_OVER:
            return None
        record = self.standby_record()  # type: ignore[attr-defined]
        if record is None or self._is_recorded_driver(record):  # type: ignore[attr-defined]
            return None  # promoted or took over: the stream's driver, never killed from here
        return record

    def retire_hot_standby(self, permit: StepPermit, reason: str) -> str | None:
        """Stop the stream's hot standby if one runs (an upgrade prepares its own standby in its place).
        Killed through its target: it holds no lease and has touched nothing, and the stream's run marker
        stays (it is the running version's). Returns what was done, ``None`` if there was none. The target
        kills only a driver launched for this stream and control directory: a ``standby-driver.json`` naming
        another stream's run (forged or copied) gets a refusal (``"refusing to kill: ..."``), logged, and
        nothing is signalled."""
        record = self.live_hot_standby()
        if record is None:
            return None
        with permit.open(self.paths.root, "retire the hot standby of"):  # type: ignore[attr-defined]
            outcome = self.target_of(record).kill(record, RETIRE_GRACE_SECONDS)  # type: ignore[attr-defined]
        if outcome.startswith("refusing"):  # standby-driver.json names a driver that is not this stream's
            log.error("did not retire the hot standby run %s of %s (%s): %s", record.run_id,
                      self.spec.name, reason, outcome)  # type: ignore[attr-defined]
        else:
            log.warning("retired the hot standby run %s of %s (%s): %s", record.run_id,
                        self.spec.name, reason, outcome)  # type: ignore[attr-defined]
        return outcome

    def acknowledge_takeover(self, permit: StepPermit, run_id: str) -> None:
        """Free the hot standby's place after its takeover was recorded: ``standby-driver.json`` (now the
        same record as ``driver.json``) and ``standby.json`` go, so that a new standby is prepared."""
        with permit.open(self.paths.root, "acknowledge the takeover of"):  # type: ignore[attr-defined]
            for path in (self.paths.standby_driver, self.paths.standby):  # type: ignore[attr-defined]
                try:
                    raw = self.storage.read_bytes(path)  # type: ignore[attr-defined]
                    if raw is not None and run_id.encode() in raw:
                        self.storage.compare_and_swap(path, raw, None)  # type: ignore[attr-defined]
                except StorageError as exc:
                    log.warning("could not clear %s after the takeover of run %s: %s", path, run_id, exc)
