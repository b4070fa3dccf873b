"""Which stored spec may run (Airflow side).

A file on shared storage that a driver can write never chooses the code, conf or cluster a stream
runs with. The Airflow side seals every spec it stores (:func:`airflow_streaming.sealing.sealed`) for the
stream and control directory that store it, with its version and whether it may run (``deployable``: it
passed its gate or a DAG deployed it; ``candidate``: an upgrade's target before its gate). A stored spec
read back to start a driver, to rebuild the stream's target or to resume an action (:func:`trusted_spec`)
is used only when its seal verifies for THIS stream, THIS control directory and a status the use allows,
or when it is exactly the spec the caller passed (a DAG's, the desired-state file's). Anything else is a
:class:`~airflow_streaming.exceptions.SealError` and nothing is run, sent or deleted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow_streaming.control.seal import DEPLOYABLE, LEGACY, seal_problem, without_seal
from airflow_streaming.exceptions import SealError
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


def _names(stored: dict[str, Any], home: StreamSpec) -> bool:
    """Whether the spec ``stored`` is itself one of ``home``'s stream, in ``home``'s control location."""
    try:
        spec = StreamSpec.from_dict(mask_spec(without_seal(stored)))
    except (SpecError, TypeError, ValueError):
        return False
    return spec.name == home.name and spec.control_dir == home.control_dir


def trusted_spec(stored: dict[str, Any], where: str, *callers: StreamSpec | None, home: StreamSpec,
                 statuses: Iterable[str] = (DEPLOYABLE,), legacy_rollback: bool = False) -> dict[str, Any]:
    """``stored`` (without its seal) if it is one of ``callers``' specs, or this deployment sealed it for the
    stream ``home`` (whose control directory ``where`` is in) with one of ``statuses``;
    :class:`SealError` naming ``where`` and what is wrong otherwise.

    ``legacy_rollback``: ``stored`` is the old version an in-flight action rolls back to (``from_spec``):
    a seal of the previous format is accepted when its MAC verifies and the spec itself names ``home``'s
    stream and control directory, so that an upgrade started before the provider was upgraded can still
    roll back (the provider's upgrade window)."""
    if any(same_spec(stored, c) for c in callers):
        return without_seal(stored)
    problem = seal_problem(stored, seal_key(), stream=home.name, control=home.control_dir, statuses=statuses)
    if problem is None or (problem == LEGACY and legacy_rollback and _names(stored, home)):
        return without_seal(stored)
    version = stored.get("version") if isinstance(stored, dict) else None
    head = (f"{where}: the spec stored for version {version!r} of stream {home.name!r} is not used, it is not the "
            "spec this task was given and ")
    if problem == LEGACY:
        raise SealError(head + "its seal was made by an earlier version of airflow-streaming, which did not bind the "
                        "stream, control directory and gate verdict. Deploy the stream again (its deploy or upgrade "
                        "task, or the desired-state deploy) to seal it anew")
    raise SealError(head + f"its seal does not vouch for it: {problem}. A file a driver can write never chooses the "
                    "application, conf or cluster a stream runs with, and an upgrade's target runs only after its "
                    "gate passed. Run the action with the spec from its DAG or desired-state file; if several "
                    "Airflow hosts act on this stream, give them the same [airflow_streaming] control_seal_key")
