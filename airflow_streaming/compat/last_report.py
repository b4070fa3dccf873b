"""The last compatibility report of a stream, kept in its control directory as ``compat.json``.

The lifecycle runner's gate and :class:`~airflow_streaming.operators.compat.SparkStreamCompatibilityCheckOperator`
both run the full check (every finding with both sides, Spark's own dry run) but an action's record
only keeps the verdict. Saving the whole report beside the stream lets a person see *why* the last
upgrade was refused or allowed with warnings (the UI shows it) without digging in task logs.

Writing is best effort (a report that cannot be saved never fails a gate); reading raises
:class:`~airflow_streaming.control.contract.ControlFileError` on garbage, like every control-file reader.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from airflow_streaming.control.contract import ControlFileError, parse_json_object
from airflow_streaming.control.storage import ControlStorage, StorageError

log = logging.getLogger(__name__)

REPORT_NAME = "compat.json"


def report_path(control_dir: str) -> str:
    """Where a stream's last compatibility report lives."""
    return f"{control_dir.rstrip('/')}/{REPORT_NAME}"


def write_last_report(storage: ControlStorage, control_dir: str, report: dict[str, Any], *,
                      candidate_version: str | None, candidate_application: str | None,
                      action_id: str | None = None, owner: str | None = None, now: float | None = None) -> bool:
    """Save ``report`` (the check's JSON report) as the stream's last one; return whether it was saved.

    :param candidate_version: the version that was checked.
    :param candidate_application: the application that was checked.
    :param action_id: the lifecycle action whose gate ran the check (``None`` for a standalone check).
    :param owner: who ran it (``dag.task run R try N``), for the link back to the DAG run.
    """
    doc = {"at": time.time() if now is None else now, "action_id": action_id, "owner": owner,
           "candidate_version": candidate_version, "candidate_application": candidate_application,
           "report": report}
    try:
        storage.write_atomic(report_path(control_dir), json.dumps(doc, indent=1, default=str).encode())
        return True
    except (StorageError, OSError, TypeError, ValueError) as exc:
        log.warning("could not save the compatibility report in %s: %s", control_dir, exc)
        return False


def read_last_report(storage: ControlStorage, control_dir: str) -> dict[str, Any] | None:
    """The stream's last compatibility report (``None`` if no check was recorded).

    :class:`ControlFileError` naming the file when it is not a report; :class:`StorageError` when it
    cannot be read."""
    path = report_path(control_dir)
    raw = storage.read_bytes(path)
    if raw is None:
        return None
    doc = parse_json_object(path, raw, "it only records the last compatibility report: move it aside "
                                       f"(mv {path} {path}.bad)")
    if not isinstance(doc.get("report"), dict):
        raise ControlFileError(f"{path}: expected {{'at', 'report', ...}}, got {str(doc)[:100]}; move it aside "
                               f"(mv {path} {path}.bad)")
    return doc
