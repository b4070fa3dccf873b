"""One lifecycle action per stream at a time: ``<control dir>/lifecycle.lock``.

Held for the whole length of every change to a stream - deploy, stop, restart, upgrade, rollback,
parallel transition and each supervision pass - so none of them can act on a stream another one is
changing (e.g. stop a stream mid-upgrade, or restart a new version that is being rolled back).

Ownership: the holder renews the lock from a background thread (every ``ttl / 4``) while the action
runs, including while it waits for a stop, the compatibility gate or a snapshot. Renewal is a
compare-and-swap on the exact bytes the holder last wrote, so a holder whose lock was taken over
finds out at its next renewal, and :meth:`LifecycleLock.ensure` - called before every side effect -
stops the action before it touches anything else.

Takeover rule (``docs/upgrades.md``): a lock is stale, and may be taken over, when
- its holder ran on this host and that process (pid + start time) is gone, or
- its holder has not renewed it for ``ttl`` seconds, or
- it is unreadable garbage (no holder can renew bytes it did not write), or
- it was handed to a trigger by an earlier try of the Airflow task instance that a later try now runs
  (:func:`adoptable`): Airflow ended that try after its trigger fired, before the resumed try took the lock
  back (Airflow 3.3 fails a resumed task whose deferring process reported its exit late, apache/airflow
  #66374 and #72716), and a later try of the same task is the only one that can finish its action.
A takeover is logged at WARNING, returned to the caller (who records it in the action's record) and
is itself a compare-and-swap on the bytes judged stale, so two takers cannot both win.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.control.contract import json_object_or_none
from airflow_streaming.control.process import ProcessIdentity, process_start_time
from airflow_streaming.control.storage import ControlStorage, StorageError
from airflow_streaming.task_owner import parse_task_owner

log = logging.getLogger(__name__)

LOCK_NAME = "lifecycle.lock"
DEFAULT_TTL_S = 120.0
ACQUIRE_WAIT_S = 60.0


class LifecycleLockHeld(RuntimeError):
    """Another lifecycle action holds the stream's lock."""

    def __init__(self, path: str, holder: dict[str, Any]):
        self.holder = holder
        age = time.time() - _number(holder.get("renewed_at"))
        super().__init__(f"{path} is held by {holder.get('action')} (owner {holder.get('owner')}, pid "
                         f"{holder.get('pid')} on {holder.get('host')}, renewed {age:.0f}s ago); "
                         "one lifecycle action per stream at a time: wait for it to finish, or run that "
                         "action again if its task died")


class LifecycleLockLost(RuntimeError):
    """The lock no longer names this holder (it was judged stale and taken over): stop acting."""


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return 0.0


def parse_holder(raw: bytes) -> dict[str, Any] | None:
    """The holder a lock file names, ``None`` when it is not a lock at all (garbage)."""
    holder = json_object_or_none(raw)
    if holder is None or not isinstance(holder.get("pid"), int) or not isinstance(holder.get("host"), str):
        return None
    return holder


def adoptable(holder: dict[str, Any] | None, owner: str | None) -> bool:
    """Whether ``owner`` may take over ``holder`` although it is not stale: the lock was handed to a trigger
    (``deferred``, no process holds it) by an *earlier* try of the same Airflow task instance. Airflow runs
    one try of a task instance at a time, so that try is over: its trigger either fired or is cancelled,
    and the trigger's event names the old holder id, which no longer resumes anything."""
    if not holder or not holder.get("deferred"):
        return False
    mine, theirs = parse_task_owner(owner), parse_task_owner(holder.get("owner"))
    return bool(mine and theirs and mine.task_instance == theirs.task_instance and theirs.try_number < mine.try_number)


def is_stale(holder: dict[str, Any] | None, now: float | None = None) -> bool:
    """Whether a holder may be taken over (see the module docstring); garbage (``None``) is stale. A
    holder handed to a trigger (``deferred``) has no process: only its renewals keep it."""
    if holder is None:
        return True
    now = time.time() if now is None else now
    if holder.get("host") == socket.gethostname() and not holder.get("deferred"):
        start = holder.get("pid_start_time")
        identity = ProcessIdentity(holder["pid"], start if isinstance(start, (int, float)) else None, holder["host"])
        if not identity.alive():
            return True
    return now - _number(holder.get("renewed_at")) > _number(holder.get("ttl"))


@dataclass
class LifecycleLock:
    """A held lock. ``took_over`` is the stale holder this lock replaced, if any."""

    storage: ControlStorage
    path: str
    holder: dict[str, Any]
    took_over: dict[str, Any] | None = None
    _written: bytes = b""
    _lost: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _keeper: threading.Thread | None = None
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def acquire(cls, storage: ControlStorage, control_dir: str, action: str, owner: str | None = None,
                ttl: float = DEFAULT_TTL_S, keep_alive: bool = True) -> LifecycleLock:
        """Take the lock or raise :class:`LifecycleLockHeld`; with ``keep_alive`` a background thread
        renews it until :meth:`release`."""
        path = f"{control_dir}/{LOCK_NAME}"
        storage.makedirs(control_dir)
        took_over = None
        deadline = time.monotonic() + ACQUIRE_WAIT_S
        while time.monotonic() < deadline:
            now = time.time()
            pid = os.getpid()
            holder = {"action": action, "owner": owner, "pid": pid, "pid_start_time": process_start_time(pid),
                      "host": socket.gethostname(), "acquired_at": now, "renewed_at": now, "ttl": ttl,
                      "id": uuid.uuid4().hex[:12]}
            body = json.dumps(holder).encode()
            if storage.create_exclusive(path, body):
                lock = cls(storage, path, holder, took_over, body)
                if keep_alive:
                    lock._start_keeper()
                return lock
            raw = storage.read_bytes(path)
            if raw is None:
                continue
            current = parse_holder(raw)
            if adoptable(current, owner):
                log.warning("taking over the lifecycle lock %s that an earlier try of this task handed to its "
                            "trigger: %s", path, current)
            elif not is_stale(current):
                raise LifecycleLockHeld(path, current)  # type: ignore[arg-type]
            else:
                log.warning("taking over the stale lifecycle lock %s held by %s", path, current or raw[:200])
            took_over = current if current is not None else {"unreadable": raw[:200].decode(errors="replace")}
            storage.compare_and_swap(path, raw, None)
        raise StorageError(None, f"could not acquire {path} within {ACQUIRE_WAIT_S:.0f}s: it kept changing")

    # ------------------------------------------------------------------ ownership
    def renew(self) -> None:
        """Refresh ``renewed_at`` by compare-and-swap; :class:`LifecycleLockLost` if someone else holds it."""
        with self._mutex:
            if self._lost:
                raise LifecycleLockLost(self._lost)
            holder = {**self.holder, "renewed_at": time.time()}
            body = json.dumps(holder).encode()
            if not self.storage.compare_and_swap(self.path, self._written, body):
                try:
                    current = self.storage.read_bytes(self.path)
                except StorageError:
                    current = b"(unreadable)"
                self._lost = (f"{self.path} was taken over: it now holds {(current or b'nothing')[:300]!r}, not this "
                              f"{self.holder.get('action')} (pid {self.holder['pid']}, id {self.holder.get('id')})")
                raise LifecycleLockLost(self._lost)
            self.holder, self._written = holder, body

    def ensure(self) -> None:
        """Raise :class:`LifecycleLockLost` unless this holder still holds the lock (checked on storage)."""
        if self._lost:
            raise LifecycleLockLost(self._lost)
        if self.storage.read_bytes(self.path) != self._written:
            with self._mutex:  # the keeper may have renewed in between: look again while it cannot
                current = self.storage.read_bytes(self.path)
                if current != self._written:
                    self._lost = (f"{self.path} no longer names this {self.holder.get('action')} (pid "
                                  f"{self.holder['pid']}): it holds {(current or b'nothing')[:300]!r}")
            if self._lost:
                raise LifecycleLockLost(self._lost)

    @property
    def lost(self) -> str | None:
        return self._lost

    def _start_keeper(self) -> None:
        period = max(0.5, min(30.0, float(self.holder["ttl"]) / 4))

        def keep() -> None:
            while not self._stop.wait(period):
                try:
                    self.renew()
                except LifecycleLockLost as exc:
                    log.error("lifecycle lock lost: %s", exc)
                    return
                except StorageError as exc:  # retried at the next period; the ttl leaves room for several
                    log.warning("could not renew %s (will retry): %s", self.path, exc)

        self._keeper = threading.Thread(target=keep, name=f"lock-keeper-{self.holder.get('id')}", daemon=True)
        self._keeper.start()

    def release(self) -> None:
        """Stop renewing and delete the lock if it still holds what this holder wrote. Never raises."""
        self._stop.set()
        if self._keeper is not None and self._keeper is not threading.current_thread():
            self._keeper.join(timeout=5)
        try:
            with self._mutex:
                self.storage.compare_and_swap(self.path, self._written, None)
        except StorageError as exc:
            log.warning("could not release %s (it expires after %ss): %s", self.path, self.holder.get("ttl"), exc)

    # ------------------------------------------------------------------ deferral
    def defer(self) -> str:
        """Hand the lock to a trigger while the task waits in the triggerer: the holder no longer names
        this process (which is about to exit) but keeps its id; :func:`renew_deferred` renews it by id and
        :meth:`resume` takes it back. Returns the holder id. Raises :class:`LifecycleLockLost`."""
        self._stop.set()
        if self._keeper is not None and self._keeper is not threading.current_thread():
            self._keeper.join(timeout=5)
        with self._mutex:
            if self._lost:
                raise LifecycleLockLost(self._lost)
            holder = {**self.holder, "deferred": True, "pid": 0, "pid_start_time": None, "renewed_at": time.time()}
            body = json.dumps(holder).encode()
            if not self.storage.compare_and_swap(self.path, self._written, body):
                self._lost = f"{self.path} was taken over before the action could defer"
                raise LifecycleLockLost(self._lost)
            self.holder, self._written = holder, body
        return str(holder["id"])

    @classmethod
    def resume(cls, storage: ControlStorage, control_dir: str, holder_id: str) -> LifecycleLock:
        """Take back a lock handed to a trigger (:meth:`defer`) from this process; :class:`LifecycleLockLost`
        if it no longer names ``holder_id`` (it expired while nobody renewed it and was taken over)."""
        path = f"{control_dir}/{LOCK_NAME}"
        with storage.mutex(path + ".cas"):
            raw = storage.read_bytes(path)
            current = parse_holder(raw) if raw is not None else None
            if current is None or current.get("id") != holder_id:
                raise LifecycleLockLost(f"{path} no longer names the deferred action {holder_id}: it holds "
                                        f"{(raw or b'nothing')[:300]!r}")
            pid = os.getpid()
            holder = {**current, "deferred": False, "pid": pid, "pid_start_time": process_start_time(pid),
                      "host": socket.gethostname(), "renewed_at": time.time()}
            body = json.dumps(holder).encode()
            storage.write_atomic(path, body)
        lock = cls(storage, path, holder, None, body)
        lock._start_keeper()
        return lock

    def __enter__(self) -> LifecycleLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def renew_deferred(storage: ControlStorage, control_dir: str, holder_id: str) -> bool:
    """Renew a lock handed to a trigger, by its holder id (a trigger recreated after a triggerer restart
    knows the id, not the bytes); ``False`` when the lock no longer names it."""
    path = f"{control_dir}/{LOCK_NAME}"
    with storage.mutex(path + ".cas"):
        raw = storage.read_bytes(path)
        current = parse_holder(raw) if raw is not None else None
        if current is None or current.get("id") != holder_id or not current.get("deferred"):
            return False
        storage.write_atomic(path, json.dumps({**current, "renewed_at": time.time()}).encode())
        return True
