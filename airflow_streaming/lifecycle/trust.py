"""Which stored spec may run (Airflow side).

A file on shared storage that a driver can write never chooses the code, conf or cluster a stream
runs with. The Airflow side seals every spec it stores (:func:`airflow_streaming.sealing.sealed`); a stored spec read back to
start a driver, to rebuild the stream's target or to resume an action (:func:`trusted_spec`) is used
only when its seal is this deployment's, or when it is exactly the spec the caller passed (a DAG's,
the desired-state file's) - records written before seals existed keep resuming that way. Anything
else is a named error and nothing is run, sent or deleted.
"""

from __future__ import annotations

from typing import Any

from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.control.seal import is_sealed_by, without_seal
from airflow_streaming.redaction import mask_spec
from airflow_streaming.sealing import seal_key, sealed
from airflow_streaming.spec import SpecError, StreamSpec

__all__ = ["same_spec", "sealed", "trusted_spec"]


def same_spec(spec_dict: dict[str, Any] | None, spec: StreamSpec | None) -> bool:
    """Whether a stored (masked) spec is ``spec``."""
    if spec_dict is None or spec is None:
        return False
    try:
        return StreamSpec.from_dict(mask_spec(without_seal(spec_dict))) == StreamSpec.from_dict(mask_spec(spec.to_dict()))
    except (SpecError, TypeError):
        return False


def trusted_spec(stored: dict[str, Any], where: str, *callers: StreamSpec | None) -> dict[str, Any]:
    """``stored`` (without its seal) if this deployment sealed it or it is one of ``callers``' specs;
    :class:`ControlFileError` naming ``where`` otherwise."""
    if is_sealed_by(stored, seal_key()) or any(same_spec(stored, c) for c in callers):
        return without_seal(stored)
    version = stored.get("version") if isinstance(stored, dict) else None
    raise ControlFileError(
        f"{where}: the spec stored for version {version!r} is not sealed by this Airflow deployment and is not the "
        "spec this task was given, so it is not used: a file a driver can write never chooses the application, "
        "conf or cluster a stream runs with. Run the action with the spec from its DAG or desired-state file; if "
        "several Airflow hosts act on this stream, give them the same [airflow_streaming] control_seal_key")
