"""The storage interface behind the control location and checkpoint reads.

Everything the orchestrator and the driver exchange goes through :class:`ControlStorage`:
whole-file reads, atomic whole-file replaces, exclusive creates and deletes. There are no
appends, so a backend only needs "write a new file, then rename it over the old one" - which
both a local filesystem and HDFS/WebHDFS offer. Only the local filesystem is implemented here;
an HDFS backend plugs in by implementing the same six methods.
"""

from __future__ import annotations

import abc
import os
import tempfile
from urllib.parse import urlparse


class StorageError(OSError):
    """A control or checkpoint file could not be read or written; the message names the path."""


class ControlStorage(abc.ABC):
    """Whole-file storage with atomic replace and exclusive create. Paths are absolute strings."""

    @abc.abstractmethod
    def read_bytes(self, path: str) -> bytes | None:
        """Return the file's content, or ``None`` when it does not exist."""

    @abc.abstractmethod
    def write_atomic(self, path: str, data: bytes) -> None:
        """Replace ``path`` with ``data`` so that a reader sees the old or the new file, never a mix."""

    @abc.abstractmethod
    def create_exclusive(self, path: str, data: bytes) -> bool:
        """Create ``path`` with ``data`` only if it does not exist; return whether this call created it."""

    @abc.abstractmethod
    def delete(self, path: str) -> bool:
        """Delete ``path``; return whether it existed."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether ``path`` exists (file or directory)."""

    @abc.abstractmethod
    def list_dir(self, path: str) -> list[str]:
        """Names (not paths) of the entries of directory ``path``; empty when it does not exist."""

    def makedirs(self, path: str) -> None:  # noqa: B027 - optional for object stores
        """Create a directory and its parents (a no-op for stores without directories)."""

    def read_text(self, path: str) -> str | None:
        """Return the file decoded as UTF-8, or ``None`` when it does not exist."""
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8")


class LocalStorage(ControlStorage):
    """:class:`ControlStorage` on a local (or locally mounted) POSIX filesystem."""

    def read_bytes(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StorageError(exc.errno, f"cannot read {path}: {exc.strerror}") from exc

    def write_atomic(self, path: str, data: bytes) -> None:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        # Hidden temp name: Spark's file sources and our readers ignore dot-files.
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise

    def create_exclusive(self, path: str, data: bytes) -> bool:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        # Write the content first, then link it into place: link() fails if the target exists,
        # so a reader never sees an empty file and two creators never both win.
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            return True
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def delete(self, path: str) -> bool:
        try:
            os.unlink(path)
            return True
        except FileNotFoundError:
            return False

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def list_dir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)


def local_path(location: str) -> str:
    """Turn ``/abs/path`` or ``file:///abs/path`` into a local path; reject other schemes."""
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme == "file" else location
    raise StorageError(0, f"no storage backend for {location!r} yet (only local paths and file:// URIs)")


def storage_for(location: str) -> tuple[ControlStorage, str]:
    """The storage backend and backend-local path for a location string."""
    return LocalStorage(), local_path(location)
