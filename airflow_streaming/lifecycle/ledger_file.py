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
    advice = ("it is the supervisor's restart ledger (attempts, gave-up state): repair it, or move it aside "
              f"(mv {path} {path}.bad) to start a new ledger")
    doc = contract.parse_json_object(path, raw, advice)
    try:
        return RestartLedger.from_dict(doc)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise contract.ControlFileError(f"{path} is unreadable ({exc}); {advice}") from exc


def save_ledger(hook: Any, ledger: RestartLedger) -> None:
    hook.storage.write_atomic(ledger_path(hook), json.dumps(ledger.to_dict(), indent=1).encode())
