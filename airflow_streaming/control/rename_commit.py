"""Whole-file writes on a file system with an atomic rename but no atomic replace (HDFS, WebHDFS).

Such a file system has no "write this file in one step": a file being written is visible while its
bytes are still on the way. What it has is a rename that either happens whole or not at all, with or
without replacing the target. So every write goes to a hidden temporary file beside the target
(:func:`temp_name`) and is committed by one rename:

- :meth:`~RenameCommitStorage.write_atomic`: rename with overwrite - a reader sees the old or the new
  file, never none and never a mix;
- :meth:`~RenameCommitStorage.create_exclusive`: rename without overwrite - it fails (``EEXIST``) if
  the target exists, so exactly one creator wins, and the file appears with its whole content;
- a rename that fails leaves the temporary file behind; it is deleted (quietly: the rename's error is
  the one that counts).

:class:`RenameCommitStorage` holds that algorithm once; a backend supplies the primitives (create a new
file, rename with or without overwrite, delete a temporary file). Compare-and-swap is
:meth:`ControlStorage.compare_and_swap` on top of these. Pure: the standard library and the storage
interface only, so the driver's Hadoop FileSystem backend uses it as well as the Airflow side's WebHDFS one.
"""

from __future__ import annotations

import abc
import errno
import logging
import posixpath
import uuid

from airflow_streaming import faults
from airflow_streaming.control.storage import (
    ControlStorage,
    StorageError,
    describe_os_error,
)


def temp_name(path: str) -> str:
    """A hidden, unique temporary file beside ``path``: ``<dir>/.<name>.<uuid>.tmp``."""
    directory, name = posixpath.split(path)
    return posixpath.join(directory, f".{name}.{uuid.uuid4().hex}.tmp")


class RenameCommitStorage(ControlStorage):
    """:class:`ControlStorage` writes as "temporary file, then one rename" (see the module docstring).

    A backend implements :meth:`_write_new`, :meth:`_rename` and :meth:`_remove`, and sets :attr:`_log`
    to its own logger (the one that reports a temporary file it could not remove).
    """

    _log: logging.Logger = logging.getLogger(__name__)

    @abc.abstractmethod
    def _write_new(self, path: str, data: bytes, doing: str, target: str | None = None) -> None:
        """Create the new file ``path`` with ``data``, never overwriting. Errors name ``target``, the file
        ``path`` is a temporary stand-in for, when given."""

    @abc.abstractmethod
    def _rename(self, src: str, dst: str, overwrite: bool, doing: str) -> None:
        """Rename ``src`` to ``dst`` in one step, replacing ``dst`` only when ``overwrite``;
        :class:`StorageError` (``EEXIST`` when ``dst`` exists and may not be replaced) naming ``dst``."""

    @abc.abstractmethod
    def _remove(self, path: str) -> None:
        """Delete the file ``path`` (already absent is fine); :class:`StorageError` otherwise."""

    def _fault(self, point: str, path: str, doing: str) -> None:
        """The fault point ``point`` (:mod:`airflow_streaming.faults`) as a :class:`StorageError`."""
        try:
            faults.hit(point, path)
        except OSError as exc:
            raise describe_os_error(path, exc, doing) from exc

    def _delete_quietly(self, path: str) -> None:
        try:
            self._remove(path)
        except StorageError as exc:
            self._log.warning("could not remove the temporary file %s: %s", path, exc)

    def _write_temp(self, path: str, data: bytes, doing: str) -> str:
        """Write ``data`` to a new temporary file beside ``path``; its name."""
        tmp = temp_name(path)
        self._write_new(tmp, data, doing, target=path)
        return tmp

    def _commit(self, tmp: str, path: str, overwrite: bool, doing: str) -> None:
        """Rename the temporary file ``tmp`` to ``path``; remove ``tmp`` when that fails."""
        try:
            self._rename(tmp, path, overwrite, doing)
        except StorageError:
            self._delete_quietly(tmp)
            raise

    # ------------------------------------------------------------------ ControlStorage
    def write_atomic(self, path: str, data: bytes) -> None:
        self._fault("storage.write", path, "write")
        self._commit(self._write_temp(path, data, "write"), path, True, "write")

    def create_exclusive(self, path: str, data: bytes) -> bool:
        self._fault("storage.create", path, "create")
        tmp = self._write_temp(path, data, "create")
        try:
            self._commit(tmp, path, False, "create")
        except StorageError as exc:
            if exc.errno == errno.EEXIST:
                return False
            raise
        return True

    def write_once(self, path: str, data: bytes) -> None:
        self._fault("storage.write", path, "write")
        self._write_new(path, data, "write")

    def move(self, src: str, dst: str) -> None:
        self._fault("storage.write", dst, "move")
        self._rename(src, dst, False, f"move {src} to")


__all__ = ["RenameCommitStorage", "temp_name"]
