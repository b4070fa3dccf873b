"""The storage interface behind the control location and checkpoint reads.

Everything the orchestrator and the driver exchange goes through :class:`ControlStorage`:
whole-file reads, atomic whole-file replaces, exclusive creates, deletes and compare-and-swap.
There are no appends, so a backend only needs "write a new file, then rename it over the old one"
and "create only if absent" - which a local filesystem, HDFS and WebHDFS all offer.

The error rule every backend keeps: **only a confirmed absence is "absent"**. A file that does not
exist reads as ``None``, ``exists`` is ``False``, a missing directory lists as ``[]``; any other
failure (EIO, ESTALE, EACCES, a NameNode that does not answer...) raises :class:`StorageError`
naming the path. A caller never mistakes an unreadable run marker for a stop request, or an
unreadable lease for a free stream.

Backends: :class:`~airflow_streaming.control.local.LocalStorage` (local or mounted POSIX paths) and
:class:`~airflow_streaming.control.webhdfs.WebHdfsStorage` (``hdfs://`` and ``webhdfs://`` through
WebHDFS); :func:`airflow_streaming.control.locations.storage_for` picks one from a location's scheme.
"""

from __future__ import annotations

import abc
import errno
import json
import logging
import os
import socket
import time
from collections.abc import Hashable
from typing import NamedTuple
from urllib.parse import urlparse

log = logging.getLogger(__name__)

#: A compare-and-swap mutex (``<path>.cas``) older than this is left over from a crashed holder.
CAS_MUTEX_STALE_SECONDS = 30.0
CAS_WAIT_SECONDS = 10.0


class StorageError(OSError):
    """A control or checkpoint file could not be read or written; the message names the path.

    ``errno`` is the underlying error number (0 when there is none); ``str()`` is the message alone.
    """

    def __init__(self, code: int | None, message: str):
        super().__init__(code or 0, message)

    def __str__(self) -> str:
        return str(self.strerror)


def describe_os_error(path: str, exc: OSError, doing: str) -> StorageError:
    """A :class:`StorageError` for ``exc`` raised while ``doing`` ``path``, with what to check."""
    reason = exc.strerror or str(exc)
    hint = ""
    if exc.errno in (errno.EACCES, errno.EPERM):
        hint = f"; check the permissions of {path} and its parents for user {_user()}"
    elif exc.errno == errno.ENOSPC:
        hint = "; the file system is full: free space and try again"
    elif exc.errno in (errno.EIO, errno.ESTALE):
        hint = "; the storage is failing or was remounted: check its mount and health"
    elif exc.errno == errno.ENOTDIR:
        hint = "; a parent of this path is a file, not a directory: check the configured location"
    elif exc.errno == errno.EROFS:
        hint = "; the file system is mounted read-only"
    return StorageError(exc.errno, f"cannot {doing} {path}: {reason}{hint}")


def _user() -> str:
    try:
        import pwd

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError):
        return str(os.getuid()) if hasattr(os, "getuid") else "?"


class TreeEntry(NamedTuple):
    """One entry under a directory, as :meth:`ControlStorage.list_tree` reports it."""

    path: str
    """Relative to the listed directory, ``/``-separated."""
    is_dir: bool
    size: int
    """Bytes (0 for a directory)."""


class ControlStorage(abc.ABC):
    """Whole-file storage with atomic replace, exclusive create and compare-and-swap.

    Paths are absolute, backend-local strings (see :func:`storage_for`).
    """

    @abc.abstractmethod
    def read_bytes(self, path: str) -> bytes | None:
        """The file's content; ``None`` only when it does not exist; :class:`StorageError` otherwise."""

    @abc.abstractmethod
    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` so that a reader sees the old or the new file, never a mix."""

    @abc.abstractmethod
    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` only if it does not exist; return whether this call created it."""

    @abc.abstractmethod
    def delete(self, path: str) -> bool:
        """Delete the file ``path``; return whether it existed."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (file or directory); :class:`StorageError` when that cannot be told."""

    @abc.abstractmethod
    def list_dir(self, path: str) -> list[str]:
        """Sorted names (not paths) of the entries of directory ``path``; ``[]`` when it does not exist or
        is a file (a file has no entries)."""

    #: Whether ``exists`` of one path costs a small fraction of a listing (a local file system: one ``stat``
    #: against reading and sorting a directory), so that a reader that knows which name comes next may ask
    #: for it rather than list (a remote store answers each with a request: there a listing is cheaper).
    cheap_exists: bool = False

    def file_identity(self, path: str) -> Hashable | None:
        """A value that is different for every file ever written at ``path`` (a rewrite, a replace, a delete and
        a new file of the same name), so that what was parsed from the file can be kept while the identity
        stays the same; ``None`` when the storage cannot vouch for that cheaply (no such file, a file too fresh
        to tell, a backend without identities): the caller then reads the file. Never raises."""
        return None

    def directory_identity(self, path: str) -> Hashable | None:
        """A value that changes whenever an entry of directory ``path`` is added, removed or renamed, so that a
        reader that listed it may know nothing was added since; ``None`` when the storage cannot vouch for that
        cheaply (no such directory, one changed too recently to tell, a backend without it): the caller then
        lists. Never raises."""
        return None

    def write_in_place(self, path: str, offset: int, data: bytes) -> bool:
        """Write ``data`` at ``offset`` of the file ``path`` that is there, in place (no new file; durable when
        it returns ``True``); ``False`` when this storage does not write in place or there is no such file (the
        caller then writes the whole file with :meth:`write_atomic`). A reader may see the write half done: for a
        file that keeps two copies of what it holds, each with its checksum (the completeness cursor).
        :class:`StorageError` when the write fails."""
        return False

    def makedirs(self, path: str) -> None:  # noqa: B027 - optional for object stores
        """Create a directory and its parents (a no-op for stores without directories)."""

    def delete_tree(self, path: str) -> None:
        """Delete a directory and everything under it (a no-op when absent)."""
        for name in self.list_dir(path):
            child = f"{path}/{name}"
            if not self.delete(child):
                self.delete_tree(child)
        self.delete(path)

    def list_tree(self, path: str) -> list[TreeEntry]:
        """Every directory and file under directory ``path`` (recursively, sorted by path); ``[]`` when
        it does not exist. Used to copy checkpoints (snapshots); optional for a backend."""
        raise StorageError(errno.ENOSYS, f"cannot list the tree {path}: {self.describe()} does not list trees")

    def move(self, src: str, dst: str) -> None:
        """Rename the file or directory ``src`` to ``dst`` in one step; ``dst`` must not exist
        (:class:`StorageError` with ``EEXIST`` otherwise). Optional for a backend."""
        raise StorageError(errno.ENOSYS, f"cannot move {src} to {dst}: {self.describe()} cannot rename")

    def write_once(self, path: str, data: bytes) -> None:
        """Create ``path`` with ``data``; :class:`StorageError` (``EEXIST``) if it exists.

        Unlike :meth:`create_exclusive`, a reader may see the file before all of ``data`` is in it: for
        bulk copies whose completeness is recorded elsewhere (a snapshot's manifest, written last).
        Backends where this is cheaper than an exclusive create (one request less on WebHDFS) override it.
        """
        if not self.create_exclusive(path, data):
            raise StorageError(errno.EEXIST, f"cannot create {path}: it already exists")

    def read_text(self, path: str) -> str | None:
        """The file decoded as UTF-8, ``None`` when it does not exist."""
        data = self.read_bytes(path)
        if data is None:
            return None
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise StorageError(errno.EILSEQ, f"{path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from exc

    def describe(self) -> str:
        """Where this storage is, for messages (e.g. ``local file system``)."""
        return type(self).__name__

    # ------------------------------------------------------------------ compare-and-swap
    def compare_and_swap(self, path: str, expected: bytes | None, new: bytes | None) -> bool:
        """Replace ``path`` with ``new`` (delete it when ``new`` is ``None``) only if it holds ``expected``
        (``None``: only if it does not exist); return whether it did.

        Writers that change a shared file this way never lose each other's updates: the read-compare-
        write runs under an exclusive ``<path>.cas`` mutex (exclusive create), so two renewals, a renewal
        and a takeover, or two takeovers of the same lease or lock cannot interleave. A mutex left by a
        crashed holder is removed after ``CAS_MUTEX_STALE_SECONDS``.
        """
        with self.mutex(path + ".cas"):
            current = self.read_bytes(path)
            if current != expected:
                return False
            if new is None:
                if expected is not None:
                    self.delete(path)
            else:
                self.write_atomic(path, new)
            return True

    def mutex(self, path: str, wait: float = CAS_WAIT_SECONDS) -> _Mutex:
        """An exclusive-create mutex at ``path`` (context manager)."""
        return _Mutex(self, path, wait)


class _Mutex:
    def __init__(self, storage: ControlStorage, path: str, wait: float):
        self.storage, self.path, self.wait = storage, path, wait

    def __enter__(self) -> _Mutex:
        from airflow_streaming.control.process import process_start_time

        deadline = time.monotonic() + self.wait
        body = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "at": time.time(),
                           "start": process_start_time(os.getpid())}).encode()
        while not self.storage.create_exclusive(self.path, body):
            raw = self.storage.read_bytes(self.path)
            try:
                holder = json.loads(raw or b"{}")
                held_since = float(holder.get("at", 0))
            except (ValueError, AttributeError, TypeError):
                holder, held_since = {}, 0.0
            if raw is not None and (time.time() - held_since > CAS_MUTEX_STALE_SECONDS or _holder_gone(holder)):
                log.warning("removing the stale mutex %s left by %s", self.path, raw[:200])
                if self.storage.read_bytes(self.path) == raw:  # best effort: its holder is gone
                    self.storage.delete(self.path)
                continue
            if time.monotonic() > deadline:
                raise StorageError(errno.EBUSY, f"{self.path} stayed held for {self.wait:.0f}s: another process "
                                                "is changing the same file; try again")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.storage.delete(self.path)
        except StorageError:
            log.warning("could not remove the mutex %s (it expires after %.0fs)", self.path, CAS_MUTEX_STALE_SECONDS)


def _holder_gone(holder: object) -> bool:
    """Whether a mutex's holder is a process of THIS host that has ended (its pid gone, or now another
    process: the start time differs). A driver killed inside a compare-and-swap left its mutex behind, and
    the next driver's lease renewal and release waited out CAS_MUTEX_STALE_SECONDS (a graceful stop with a
    short stop_timeout became a kill). A holder on another host, or without a pid, is never judged here."""
    from airflow_streaming.control.process import process_start_time

    if not isinstance(holder, dict) or holder.get("host") != socket.gethostname():
        return False
    pid, start = holder.get("pid"), holder.get("start")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    actual = process_start_time(pid)
    if actual is None:
        return True
    return isinstance(start, (int, float)) and not isinstance(start, bool) and abs(actual - float(start)) > 0.5


#: Errors a retry cannot fix (a wrong path, missing permissions, bytes that are not text). The Airflow side's
#: bounded retries (``airflow_streaming.hooks.storage_retry``) raise them at once.
PERMANENT_ERRNOS = frozenset({errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.EILSEQ, errno.EINVAL,
                              errno.ENOSYS, errno.EROFS})


def local_path(location: str) -> str:
    """Turn ``/abs/path`` or ``file:///abs/path`` into a local path; :class:`StorageError` for other schemes."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme == "file" else location
    raise StorageError(errno.EINVAL, f"{location!r} is not a local path (file:// or /absolute)")
