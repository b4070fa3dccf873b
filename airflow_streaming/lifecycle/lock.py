"""One lifecycle action per stream at a time: ``<control dir>/lifecycle.lock``.

Held by upgrades, restarts, rollbacks, parallel transitions and supervision passes, so none of them
can act on a stream another one is changing (e.g. restart a new version that is being rolled back).

Takeover rule (documented in ``docs/upgrades.md``): a lock is stale, and may be taken over, when
- its holder ran on this host and that process (pid + start time) is gone, or
- its holder has not renewed it for ``ttl`` seconds (holders renew while they wait).
A takeover is logged at WARNING, returned to the caller (who records it in the action's record) and
serialized with :func:`~airflow_streaming.control.contract.take_over_stale`, so two takers cannot
both win.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from dataclasses import dataclass
from typing import Any

from airflow_streaming.control import contract
from airflow_streaming.control.storage import ControlStorage

log = logging.getLogger(__name__)

LOCK_NAME = "lifecycle.lock"
DEFAULT_TTL_S = 600.0


class LifecycleLockHeld(RuntimeError):
    """Another lifecycle action holds the stream's lock."""

    def __init__(self, path: str, holder: dict[str, Any]):
        self.holder = holder
        age = time.time() - float(holder.get("renewed_at", 0) or 0)
        super().__init__(f"{path} is held by {holder.get('action')} (owner {holder.get('owner')}, pid "
                         f"{holder.get('pid')} on {holder.get('host')}, renewed {age:.0f}s ago); "
                         "one lifecycle action per stream at a time")


class LifecycleLockLost(RuntimeError):
    """The lock no longer names this holder (it was judged stale and taken over)."""


def is_stale(holder: dict[str, Any], now: float | None = None) -> bool:
    now = time.time() if now is None else now
    if holder.get("host") == socket.gethostname() and not contract.process_alive(
            holder.get("pid"), holder.get("pid_start_time")):
        return True
    return now - float(holder.get("renewed_at", 0) or 0) > float(holder.get("ttl", DEFAULT_TTL_S))


@dataclass
class LifecycleLock:
    """A held lock. ``took_over`` is the stale holder this lock replaced, if any."""

    storage: ControlStorage
    path: str
    holder: dict[str, Any]
    took_over: dict[str, Any] | None = None

    @classmethod
    def acquire(cls, storage: ControlStorage, control_dir: str, action: str, owner: str | None = None,
                ttl: float = DEFAULT_TTL_S) -> LifecycleLock:
        """Take the lock or raise :class:`LifecycleLockHeld`."""
        path = f"{control_dir}/{LOCK_NAME}"
        storage.makedirs(control_dir)
        took_over = None
        deadline = time.monotonic() + 2 * contract.TAKEOVER_LOCK_STALE_SECONDS
        while time.monotonic() < deadline:
            now = time.time()
            pid = os.getpid()
            holder = {"action": action, "owner": owner, "pid": pid, "pid_start_time": contract.process_start_time(pid),
                      "host": socket.gethostname(), "acquired_at": now, "renewed_at": now, "ttl": ttl}
            if storage.create_exclusive(path, json.dumps(holder).encode()):
                return cls(storage, path, holder, took_over)
            raw = storage.read_bytes(path)
            if raw is None:
                continue
            try:
                current = json.loads(raw)
            except ValueError:
                current = {"unreadable": raw[:200].decode(errors="replace")}
            if not is_stale(current):
                raise LifecycleLockHeld(path, current)
            log.warning("taking over the stale lifecycle lock %s held by %s", path, current)
            took_over = current
            contract.take_over_stale(storage, path, raw)
        raise RuntimeError(f"could not acquire {path}: its takeover lock stayed held")

    def _current(self) -> tuple[dict[str, Any] | None, bool]:
        """The lock file's holder and whether it is this one."""
        raw = self.storage.read_bytes(self.path)
        try:
            current = json.loads(raw) if raw is not None else None
        except ValueError:
            current = None
        mine = bool(current) and current.get("pid") == self.holder["pid"] and \
            current.get("acquired_at") == self.holder["acquired_at"]
        return current, mine

    def renew(self) -> None:
        """Refresh ``renewed_at``; :class:`LifecycleLockLost` if someone else holds the lock now."""
        current, mine = self._current()
        if not mine:
            raise LifecycleLockLost(f"{self.path} now names {current}, not this holder {self.holder}")
        self.holder = {**self.holder, "renewed_at": time.time()}
        self.storage.write_atomic(self.path, json.dumps(self.holder).encode())

    def release(self) -> None:
        """Delete the lock if this holder still owns it."""
        if self._current()[1]:
            self.storage.delete(self.path)

    def __enter__(self) -> LifecycleLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
