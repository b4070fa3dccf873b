"""The stream's hot standby, seen from Airflow (mixed into ``SparkStreamHook``).

A hot standby (``StreamSpec.hot_standby``) is a standby driver (``submit(standby=True, failover=True)``)
that never expires: it takes the stream over from a run that crashed
(:mod:`airflow_streaming.control.takeover`, decided in the driver) and exits when the stream is stopped or
moves to another version. Its record is ``standby-driver.json``, its state ``standby.json`` (``failover``
true). The supervisor prepares it (``Act.PREPARE_STANDBY``) and acknowledges a takeover
(``Act.RECORD_FAILOVER``); an upgrade that prepares its own standby retires it first.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from airflow_streaming.control import takeover
from airflow_streaming.control.contract import DriverRecord
from airflow_streaming.control.storage import StorageError
from airflow_streaming.control.lifecycle_lock import LifecycleLock

log = logging.getLogger(__name__)

#: standby.json states of a standby that may still run.
LIVE_STATES = frozenset({"SUBMITTED", "PREPARING", "READY"})
RETIRE_GRACE_SECONDS = 10.0


class HotStandbyMixin:
    """See the module docstring."""

    def _standby_doc(self) -> dict[str, Any] | None:
        raw = self.storage.read_bytes(self.paths.standby)  # type: ignore[attr-defined]
        try:
            doc = json.loads(raw) if raw is not None else None
        except (ValueError, UnicodeDecodeError):
            return None
        return doc if isinstance(doc, dict) else None

    def mark_standby_submitted(self, run_id: str, failover: bool) -> None:
        """Say in ``standby.json`` that standby ``run_id`` was submitted (its driver overwrites it once it
        runs), so that a look before the driver's first word does not take it for missing."""
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

    def prepare_hot_standby(self, lock: LifecycleLock) -> DriverRecord:
        """Submit the stream's hot standby (the supervisor's ``PREPARE_STANDBY``), under ``lock``."""
        return self.submit(standby=True, failover=True, lock=lock)  # type: ignore[attr-defined]

    def retire_hot_standby(self, reason: str) -> str | None:
        """Stop the stream's hot standby if one runs (an upgrade prepares its own standby in its place).
        Killed through its target: it holds no lease and has touched nothing, and the stream's run marker
        stays (it is the running version's). Returns what was done, ``None`` if there was none."""
        state = self.hot_standby_state()
        if state is None or not state.get("alive") or state.get("state") == takeover.TOOK_OVER:
            return None
        record = self.standby_record()  # type: ignore[attr-defined]
        if record is None or self._is_recorded_driver(record):  # type: ignore[attr-defined]
            return None  # promoted or took over: the stream's driver, never killed from here
        outcome = self.target_of(record).kill(record, RETIRE_GRACE_SECONDS)  # type: ignore[attr-defined]
        log.warning("retired the hot standby run %s of %s (%s): %s", record.run_id,
                    self.spec.name, reason, outcome)  # type: ignore[attr-defined]
        return outcome

    def acknowledge_takeover(self, run_id: str) -> None:
        """Free the hot standby's place after its takeover was recorded: ``standby-driver.json`` (now the
        same record as ``driver.json``) and ``standby.json`` go, so that a new standby is prepared."""
        for path in (self.paths.standby_driver, self.paths.standby):  # type: ignore[attr-defined]
            try:
                raw = self.storage.read_bytes(path)  # type: ignore[attr-defined]
                if raw is not None and run_id.encode() in raw:
                    self.storage.compare_and_swap(path, raw, None)  # type: ignore[attr-defined]
            except StorageError as exc:
                log.warning("could not clear %s after the takeover of run %s: %s", path, run_id, exc)
