"""The restart ledger on the stream's control storage (``supervisor.json``): read and write."""

from __future__ import annotations

import json
from typing import Any

from airflow_streaming.control import contract
from airflow_streaming.supervision.policy import RestartLedger

LEDGER_NAME = "supervisor.json"


def ledger_path(hook: Any) -> str:
    return f"{hook.paths.root}/{LEDGER_NAME}"


def load_ledger(hook: Any) -> RestartLedger:
    """The stream's restart ledger; :class:`ControlFileError` if unreadable (never silently reset: it
    holds the attempts in the window and the gave-up state)."""
    path = ledger_path(hook)
    raw = hook.storage.read_bytes(path)
    if raw is None:
        return RestartLedger()
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise TypeError(f"expected a JSON object, got {type(doc).__name__}")
        return RestartLedger.from_dict(doc)
    except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as exc:
        raise contract.ControlFileError(
            f"{path} is unreadable ({exc}); it is the supervisor's restart ledger (attempts, gave-up state): "
            f"repair it, or move it aside (mv {path} {path}.bad) to start a new ledger") from exc


def save_ledger(hook: Any, ledger: RestartLedger) -> None:
    hook.storage.write_atomic(ledger_path(hook), json.dumps(ledger.to_dict(), indent=1).encode())
