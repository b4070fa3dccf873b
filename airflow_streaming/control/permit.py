"""Who may act on a stream: the permit of a recorded lifecycle step, and the guard that asks for it.

On the Airflow side, every start, stop, kill and signal of a stream's driver, and every write of the
files that say which driver is the stream's and what was done to it (:data:`ACTING_FILES`: the driver
record, the run marker, the deployed spec, the lifecycle record and history, the standby's files, the
lease), happens inside a *step of a lifecycle action*: the lifecycle runner
(:mod:`airflow_streaming.lifecycle.runner`) records the step in ``lifecycle.json``, then issues a
:class:`StepPermit` for the stream under the lock it holds, and opens it for the length of the step.

Two guards ask for it:

- the hook's acting primitives (submit, adopt, promote, request a stop, kill, retire a standby,
  acknowledge a takeover...) take the permit as a required argument and :meth:`StepPermit.open` it
  for their stream: no permit, another stream's permit, or a lost lock is :class:`ActingRefused`;
- the hook's control storage is a :class:`GuardedStorage`: a write, compare-and-swap or delete of an
  acting file without an open permit for that stream's directory is refused, whatever code asks.

Only the runner issues permits (:func:`issue`); ``tests/unit/test_one_acting_path.py`` holds that, and
finds every call in ``airflow_streaming/`` that signals a process, submits a driver or writes an acting
file outside the allowed places. The driver side (``spark_jobs/``) writes its own files (status, lease,
standby readiness, a takeover's compare-and-swaps) through its own storage, never through this guard:
its protocol is the lease's (``docs/control-contract.md``).
"""

from __future__ import annotations

import contextlib
import contextvars
import posixpath
from collections.abc import Iterator
from typing import Any, Protocol

from airflow_streaming.control.storage import ControlStorage, TreeEntry
from airflow_streaming.exceptions import StreamingError

#: The files of a stream's control directory that only a recorded step may change (Airflow side).
ACTING_FILES = frozenset({
    "driver.json", "deployed.json", "RUNNING", "lifecycle.json", "history.json", "lease.json",
    "standby.json", "standby-driver.json", "standby-gate.json", "gate-driver.json",
})


class ActingRefused(StreamingError):
    """A side effect on a stream was attempted outside a recorded step of a lifecycle action."""


class HeldLock(Protocol):
    """What a permit needs of the lifecycle lock (:class:`~airflow_streaming.control.lifecycle_lock.LifecycleLock`)."""

    path: str

    def ensure(self) -> None: ...


class StepPermit:
    """Leave to act on one stream for one recorded step, under the stream's lifecycle lock.

    :param lock: the stream's lifecycle lock, held by the action.
    :param action: the action (``deploy``, ``stop``, ``recover``...).
    :param record_id: the id of the action's record in ``lifecycle.json``.
    :param step: the step recorded before the side effects this permit allows.
    """

    def __init__(self, lock: HeldLock, action: str, record_id: str, step: str, _by_issue: bool = False):
        if not _by_issue:
            raise ActingRefused("a step permit is issued by the lifecycle runner for a recorded step "
                                "(airflow_streaming.control.permit.issue), never made by hand")
        self.lock = lock
        self.action = action
        self.record_id = record_id
        self.step = step
        self.root = posixpath.dirname(lock.path)

    def __repr__(self) -> str:
        return f"StepPermit({self.action} {self.record_id} at {self.step}, {self.root})"

    def check(self, root: str, what: str) -> None:
        """Refuse (:class:`ActingRefused`) unless this permit is for ``root``'s stream and its lock is held."""
        if posixpath.normpath(root) != posixpath.normpath(self.root):
            raise ActingRefused(f"{what}: the permit of {self.action} {self.record_id} is for {self.root}, "
                                f"not {root}")
        self.lock.ensure()  # LifecycleLockLost when it was taken over: nothing happens

    @contextlib.contextmanager
    def open(self, root: str, what: str) -> Iterator[StepPermit]:
        """Check the permit for ``root`` and make it the open permit of this context for the block."""
        self.check(root, what)
        token = _OPEN.set(_OPEN.get() + (self,))
        try:
            yield self
        finally:
            _OPEN.reset(token)


_OPEN: contextvars.ContextVar[tuple[StepPermit, ...]] = contextvars.ContextVar("airflow_streaming_open_permits",
                                                                                default=())


def issue(lock: HeldLock, action: str, record_id: str, step: str) -> StepPermit:
    """A permit for one recorded step (the lifecycle runner's alone: see the module docstring)."""
    return StepPermit(lock, action, record_id, step, _by_issue=True)


def open_permit(root: str) -> StepPermit | None:
    """The open permit of this context for the stream at ``root``, if any."""
    wanted = posixpath.normpath(root)
    for permit in reversed(_OPEN.get()):
        if posixpath.normpath(permit.root) == wanted:
            return permit
    return None


def require(path: str, what: str) -> StepPermit:
    """The open permit for the stream whose control directory holds ``path``; :class:`ActingRefused` if none."""
    return _require(posixpath.dirname(path), what, path)


def require_for_stream(root: str, what: str) -> StepPermit:
    """The open permit for the stream whose control directory is ``root``; :class:`ActingRefused` if none."""
    return _require(root, what, root)


def _require(root: str, what: str, where: str) -> StepPermit:
    permit = open_permit(root)
    if permit is None:
        raise ActingRefused(f"{what} {where} outside a recorded lifecycle step: every change to a stream is a step "
                            "of a lifecycle action under its lock. Change a stream through the operators or "
                            "airflow_streaming.lifecycle.operations (deploy_stream, stop_stream, operate), never "
                            "through the hook, a target or its control files")
    permit.check(root, what)
    return permit


def guards(storage: ControlStorage) -> bool:
    """Whether ``storage`` is a guarded one (the Airflow side's: the hook's)."""
    return isinstance(storage, GuardedStorage)


def is_acting_file(path: str) -> bool:
    return posixpath.basename(path) in ACTING_FILES


class GuardedStorage(ControlStorage):
    """A control storage whose writes of :data:`ACTING_FILES` need an open :class:`StepPermit`; everything
    else (reads, other files: snapshots, reports, logs, the lifecycle lock itself) passes through."""

    def __init__(self, inner: ControlStorage):
        self.inner = inner

    @property
    def unguarded(self) -> ControlStorage:
        return self.inner

    def _guard(self, path: str, what: str) -> None:
        if is_acting_file(path):
            require(path, what)

    # reads
    def read_bytes(self, path: str) -> bytes | None:
        return self.inner.read_bytes(path)

    def read_text(self, path: str) -> str | None:
        return self.inner.read_text(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def list_dir(self, path: str) -> list[str]:
        return self.inner.list_dir(path)

    @property
    def cheap_exists(self) -> bool:  # type: ignore[override]
        return self.inner.cheap_exists

    def file_identity(self, path: str) -> Any:
        return self.inner.file_identity(path)

    def directory_identity(self, path: str) -> Any:
        return self.inner.directory_identity(path)

    def list_tree(self, path: str) -> list[TreeEntry]:
        return self.inner.list_tree(path)

    def describe(self) -> str:
        return self.inner.describe()

    # writes
    def makedirs(self, path: str) -> None:
        self.inner.makedirs(path)

    def write_atomic(self, path: str, data: bytes) -> None:
        self._guard(path, "write of")
        self.inner.write_atomic(path, data)

    def write_in_place(self, path: str, offset: int, data: bytes) -> bool:
        self._guard(path, "write of")
        return self.inner.write_in_place(path, offset, data)

    def write_once(self, path: str, data: bytes) -> None:
        self._guard(path, "write of")
        self.inner.write_once(path, data)

    def create_exclusive(self, path: str, data: bytes) -> bool:
        self._guard(path, "creation of")
        return self.inner.create_exclusive(path, data)

    def compare_and_swap(self, path: str, expected: bytes | None, new: bytes | None) -> bool:
        self._guard(path, "compare-and-swap of")
        return self.inner.compare_and_swap(path, expected, new)

    def delete(self, path: str) -> bool:
        self._guard(path, "delete of")
        return self.inner.delete(path)

    def delete_tree(self, path: str) -> None:
        self._guard(path, "delete of")
        self.inner.delete_tree(path)

    def move(self, src: str, dst: str) -> None:
        self._guard(src, "move of")
        self._guard(dst, "move onto")
        self.inner.move(src, dst)

    def mutex(self, path: str, wait: float | None = None) -> Any:
        return self.inner.mutex(path) if wait is None else self.inner.mutex(path, wait)

    def __getattr__(self, name: str) -> Any:  # backend extras (copy_tree, open_append, ...): delegated
        return getattr(self.inner, name)


__all__ = ["ACTING_FILES", "ActingRefused", "GuardedStorage", "StepPermit", "guards", "is_acting_file", "issue",
           "open_permit", "require", "require_for_stream"]
