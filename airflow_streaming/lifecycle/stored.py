"""What a stream's control directory says about its lifecycle: the record, the history, the spec a
restart or rollback starts, and a summary for people. Reading only; the runner writes them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow_streaming.control.contract import (
    HISTORY_NAME,
    RECORD_NAME,
    ControlFileError,
    parse_json,
    parse_json_object,
)
from airflow_streaming.control.seal import CANDIDATE, DEPLOYABLE
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import LifecycleError, StreamingError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.record import Action, LifecycleRecord, previous_spec, unfinished_message
from airflow_streaming.lifecycle.trust import same_spec, trusted_spec
from airflow_streaming.redaction import restore_secrets
from airflow_streaming.spec import SpecError, StreamSpec

_same_spec = same_spec  # the name the runner and its steps use


def _first_batch(doc: dict[str, Any] | None) -> int | None:
    for query in (doc or {}).get("queries") or []:
        for progress in query.get("recent_progress") or []:
            if progress.get("batchId") is not None:
                return int(progress["batchId"])
    return None


def parse_record(path: str, raw: bytes) -> LifecycleRecord:
    """Parse ``lifecycle.json``; :class:`ControlFileError` naming the file and how to recover."""
    advice = ("it records the stream's last lifecycle action, so nothing will overwrite it: inspect it, and if "
              "that action is over (check the stream and history.json), move it aside "
              f"(mv {path} {path}.bad) to start over")
    doc = parse_json_object(path, raw, advice)
    try:
        return LifecycleRecord.from_dict(doc)
    except (ValueError, KeyError, TypeError) as exc:
        raise ControlFileError(f"{path} is unreadable ({type(exc).__name__}: {exc}); {advice}") from exc


def unfinished(hook: SparkStreamHook) -> LifecycleRecord | None:
    """The stream's lifecycle action that has not reached a terminal step (its task died), if any."""
    path = f"{hook.paths.root}/{RECORD_NAME}"
    raw = hook.storage.read_bytes(path)
    if raw is None:
        return None
    record = parse_record(path, raw)
    return None if record.done else record


def resume_target(hook: SparkStreamHook, *actions: Action, known: tuple[StreamSpec, ...] = ()
                  ) -> tuple[Action, StreamSpec, StreamSpec | None] | None:
    """``(action, target, current)`` to resume the stream's unfinished action if it is one of ``actions``;
    ``None`` if nothing is unfinished. The record's specs are used only if sealed by this deployment or
    equal to ``hook.spec`` or one of ``known`` (see :mod:`airflow_streaming.lifecycle.trust`).

    Raises :class:`LifecycleError` when a different action is unfinished: it must be finished first.
    """
    record = unfinished(hook)
    if record is None:
        return None
    if record.action not in actions:
        raise LifecycleError(unfinished_message(record.stream, record.action.value, record.id, record.to_version,
                                                record.step.value, "/".join(a.value for a in actions)))
    where = f"{hook.paths.root}/{RECORD_NAME}"
    current = StreamSpec.from_dict(restore_secrets(trusted_spec(record.from_spec, where, hook.spec, *known,
                                                                home=hook.spec), hook.spec)) \
        if record.action == Action.PARALLEL and record.from_spec is not None else None
    # The target may still be a candidate (its gate not passed yet): the runner resumes it and gates it again
    # (it refuses a candidate recorded past the gate, see LifecycleRunner._resume_or_create).
    target = trusted_spec(record.to_spec, where, hook.spec, *known, home=hook.spec, statuses=(DEPLOYABLE, CANDIDATE))
    return record.action, StreamSpec.from_dict(restore_secrets(target, hook.spec)), current


def restart_spec(hook: SparkStreamHook, action: Action, *known: StreamSpec) -> StreamSpec:
    """The spec a restart (the deployed one) or a rollback (the one before the last successful upgrade)
    of the stream starts; :class:`SpecError` saying why there is none. The stored spec is used only if
    sealed by this deployment or equal to ``hook.spec`` or one of ``known`` (the desired-state file's
    versions, say): :class:`ControlFileError` otherwise (see :mod:`airflow_streaming.lifecycle.trust`)."""
    deployed = (hook.deployed() or {}).get("spec")
    if deployed is None:
        raise SpecError("action", f"stream {hook.spec.name!r} was never deployed (no {hook.deployed_path}): "
                        f"deploy it before a {action.value}")
    if action == Action.ROLLBACK:
        previous = previous_spec(read_history(hook), deployed.get("version"))
        if previous is None:
            raise SpecError("action", f"stream {hook.spec.name!r} has no earlier version to roll back to: its "
                            f"history has no successful upgrade to {deployed.get('version')}")
        previous = trusted_spec(previous, f"{hook.paths.root}/{HISTORY_NAME}", hook.spec, *known, home=hook.spec)
        return StreamSpec.from_dict(restore_secrets(previous, hook.spec))
    return StreamSpec.from_dict(restore_secrets(trusted_spec(deployed, hook.deployed_path, hook.spec, *known,
                                                             home=hook.spec), hook.spec))


def read_history(hook: SparkStreamHook) -> list[dict[str, Any]]:
    """The stream's deployment history, oldest first (``[]`` if none).

    :class:`ControlFileError` naming the file if it is unreadable: it holds the rollback targets, so an
    action that would append to it refuses rather than overwrite it."""
    path = f"{hook.paths.root}/{HISTORY_NAME}"
    raw = hook.storage.read_bytes(path)
    if raw is None:
        return []
    advice = (f"it is the stream's deployment history (the rollback targets): repair it, or move it aside "
              f"(mv {path} {path}.bad) to start a new history")
    history = parse_json(path, raw, advice)
    if not isinstance(history, list) or not all(isinstance(h, dict) for h in history):
        raise ControlFileError(f"{path} is unreadable (not a list of entries); {advice}")
    return history


def describe(hook: SparkStreamHook) -> dict[str, Any]:
    """A stream's status for people: deployed version, driver, health, checkpoint, last action.

    Never raises on an unreadable file: each part says what could not be read."""
    def part(fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except (ControlFileError, StorageError, StreamingError) as exc:
            return {"error": str(exc)}

    deployed = part(hook.deployed) or {}
    last = part(hook.lifecycle_record)
    position = part(lambda: hook.batch_position().to_dict())
    return {
        "stream": hook.spec.name,
        "deployed_version": ((deployed.get("spec") or {}) if "error" not in deployed else {}).get("version"),
        "run_id": deployed.get("run_id"),
        "running": part(hook.running_driver),
        "health": hook.health().summary(),
        "checkpoint": position,
        "last_action": None if last is None else last if "error" in last else
        {k: last.get(k) for k in ("id", "action", "step", "error")},
        "history": part(lambda: read_history(hook)[-5:]),
    }
