""":class:`ControlStorage` on a local (or locally mounted) POSIX file system."""

from __future__ import annotations

import errno
import os
import stat
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

from airflow_streaming import faults
from airflow_streaming.control.storage import ControlStorage, StorageError, TreeEntry, describe_os_error

#: errnos that mean "this path does not exist" - and nothing else does.
_ABSENT = (errno.ENOENT,)


class LocalStorage(ControlStorage):
    """Local files: atomic replace by rename, exclusive create by ``link()``.

    Every error other than "no such file" raises :class:`StorageError` naming the path (see the
    error rule in :mod:`airflow_streaming.control.storage`).
    """

    cheap_exists = True

    def describe(self) -> str:
        return "the local file system"

    def read_bytes(self, path: str) -> bytes | None:
        try:
            faults.hit("storage.read", path)
            with open(path, "rb") as fh:
                return fh.read()
        except OSError as exc:
            if exc.errno in _ABSENT:
                return None
            raise describe_os_error(path, exc, "read") from exc

    #: A file whose inode changed (``st_ctime``) less than this many seconds ago has no identity yet: the
    #: kernel stamps times with a coarse clock (a few ms), so two writes in one tick could leave the same
    #: size and times behind (git's "racy" files). Spark's checkpoint files are read again long after that.
    SETTLED_S = 2.0

    def _settled_stat(self, path: str, is_type: Callable[[int], bool]) -> os.stat_result | None:
        """``os.stat(path)`` when ``is_type(st_mode)`` (``stat.S_ISREG``, ``stat.S_ISDIR``), its inode changed at
        least :attr:`SETTLED_S` ago, and its file system answers ``stat`` with current attributes
        (:func:`attributes_current`); ``None`` otherwise (absent, unreadable too)."""
        try:
            st = os.stat(path)
        except (OSError, ValueError):
            return None
        if not is_type(st.st_mode) or time.time() - st.st_ctime < self.SETTLED_S or not attributes_current(st.st_dev):
            return None
        return st

    def file_identity(self, path: str) -> tuple[int, int, int, int, int] | None:
        """``(st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns)``: a write changes the times, a rename into
        place the inode's ctime, a new file its inode or ctime (an inode number freed and used again comes
        back with a new ctime). ``None`` when absent, unreadable, changed less than :attr:`SETTLED_S` ago, or
        on a file system not known to answer ``stat`` with the file's current attributes
        (:func:`attributes_current`: a network file system may answer from an attribute cache for seconds
        after a rename over the file, while a read revalidates)."""
        st = self._settled_stat(path, stat.S_ISREG)
        return None if st is None else (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def directory_identity(self, path: str) -> tuple[int, int, int, int] | None:
        """``(st_dev, st_ino, st_mtime_ns, st_ctime_ns)`` of a directory: an entry added, removed or renamed
        changes its times. ``None`` as for :meth:`file_identity` (absent, not a directory, changed less than
        :attr:`SETTLED_S` ago, a file system not known to answer ``stat`` with current attributes)."""
        st = self._settled_stat(path, stat.S_ISDIR)
        return None if st is None else (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)

    def _temp(self, path: str, data: bytes) -> str:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        # Hidden temp name: Spark's file sources and our readers ignore dot-files.
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        try:
            if _shared(directory):  # a driver of another user (run_as_user) and the worker read each other's files
                os.fchmod(fd, 0o640)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
        except BaseException:
            _unlink_quietly(tmp)
            raise
        return tmp

    def write_atomic(self, path: str, data: bytes) -> None:
        tmp = None
        try:
            faults.hit("storage.write", path)
            tmp = self._temp(path, data)
            os.replace(tmp, path)
        except OSError as exc:
            if tmp is not None:
                _unlink_quietly(tmp)
            raise describe_os_error(path, exc, "write") from exc

    def write_in_place(self, path: str, offset: int, data: bytes) -> bool:
        # Creating a file (the temp file of write_atomic) costs ~260 us of CPU on this kind of file system; a
        # write into one that is there, ~90 us with its fsync (measured: 2026-11-29).
        try:
            faults.hit("storage.write", path)
            fd = os.open(path, os.O_WRONLY)  # no O_CREAT: only a file that is there
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise describe_os_error(path, exc, "write") from exc
        try:
            if os.pwrite(fd, data, offset) != len(data):
                raise OSError(errno.EIO, "short write")
            os.fsync(fd)
        except OSError as exc:
            raise describe_os_error(path, exc, "write") from exc
        finally:
            os.close(fd)
        return True

    def create_exclusive(self, path: str, data: bytes) -> bool:
        # Write the content first, then link it into place: link() fails if the target exists,
        # so a reader never sees an empty file and two creators never both win.
        tmp = None
        try:
            faults.hit("storage.create", path)
            tmp = self._temp(path, data)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            return True
        except OSError as exc:
            raise describe_os_error(path, exc, "create") from exc
        finally:
            if tmp is not None:
                _unlink_quietly(tmp)

    def delete(self, path: str) -> bool:
        try:
            faults.hit("storage.delete", path)
            os.unlink(path)
            return True
        except OSError as exc:
            if exc.errno in _ABSENT:
                return False
            if exc.errno in (errno.EISDIR, errno.EPERM) and os.path.isdir(path):
                return False  # a directory is not a file: see delete_tree
            raise describe_os_error(path, exc, "delete") from exc

    def delete_tree(self, path: str) -> None:
        try:
            faults.hit("storage.delete", path)
            shutil.rmtree(path)
        except OSError as exc:
            if exc.errno in _ABSENT:
                return
            raise describe_os_error(path, exc, "delete") from exc

    def exists(self, path: str) -> bool:
        try:
            faults.hit("storage.exists", path)
            os.stat(path)
            return True
        except OSError as exc:
            if exc.errno in _ABSENT:
                return False
            raise describe_os_error(path, exc, "check") from exc

    def list_dir(self, path: str) -> list[str]:
        try:
            faults.hit("storage.list", path)
            return sorted(os.listdir(path))
        except OSError as exc:
            if exc.errno in _ABSENT:
                return []
            if exc.errno == errno.ENOTDIR and os.path.isfile(path):
                return []  # a file has no entries (a parent that is a file is an error, below)
            raise describe_os_error(path, exc, "list") from exc

    def list_tree(self, path: str) -> list[TreeEntry]:
        entries: list[TreeEntry] = []

        def fail(exc: OSError) -> None:
            raise exc

        try:
            faults.hit("storage.list", path)
            if not os.path.lexists(path):
                return []
            if not os.path.isdir(path):
                raise NotADirectoryError(errno.ENOTDIR, "Not a directory", path)
            for dirpath, dirnames, filenames in os.walk(path, onerror=fail):
                rel_dir = os.path.relpath(dirpath, path)
                for name in (*dirnames, *filenames):  # a copy of the tree would follow it out of the tree
                    if os.path.islink(os.path.join(dirpath, name)):
                        link = os.path.join(dirpath, name)
                        raise OSError(errno.ELOOP, f"a symbolic link inside the tree, not followed: {link} (a "
                                                   "checkpoint or control tree written by Spark holds none: remove it)",
                                      link)
                for name in dirnames:
                    entries.append(TreeEntry(_rel(rel_dir, name), True, 0))
                for name in filenames:
                    entries.append(TreeEntry(_rel(rel_dir, name), False, os.path.getsize(os.path.join(dirpath, name))))
        except OSError as exc:
            raise describe_os_error(path, exc, "list the tree") from exc
        return sorted(entries)

    def move(self, src: str, dst: str) -> None:
        try:
            faults.hit("storage.write", dst)
            if os.path.lexists(dst):
                raise FileExistsError(errno.EEXIST, "File exists", dst)
            os.rename(src, dst)
        except OSError as exc:
            raise describe_os_error(f"{src} -> {dst}", exc, "move") from exc

    def makedirs(self, path: str) -> None:
        try:
            faults.hit("storage.write", path)
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise describe_os_error(path, exc, "create the directory") from exc


def _rel(rel_dir: str, name: str) -> str:
    return name if rel_dir == "." else f"{rel_dir.replace(os.sep, '/')}/{name}"


def _shared(directory: str) -> bool:
    """A control directory shared with a driver of another Unix user (``airflow_streaming.run_as``: set-group-id,
    group-writable, sticky): files written there are 0640, so that each side reads the other's."""
    try:
        mode = os.stat(directory).st_mode
    except OSError:
        return False
    return bool(mode & stat.S_ISGID and mode & stat.S_IWGRP and mode & stat.S_ISVTX)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


__all__ = ["LocalStorage", "StorageError"]


#: File systems whose ``stat`` answers with the file's current attributes (disk and memory file systems of
#: this kernel); any other (nfs, cifs, fuse, 9p, ...) is not known to, and gets no file identities.
LOCAL_FILE_SYSTEMS = frozenset({"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "overlay", "zfs", "f2fs", "ramfs"})
_FS_TYPES: dict[int, str | None] = {}


def mount_types(mountinfo: str) -> dict[int, str]:
    """Device number (``st_dev``) -> file system type, from the text of ``/proc/self/mountinfo``. Pure."""
    types: dict[int, str] = {}
    for line in mountinfo.splitlines():
        fields = line.split()
        try:
            major, minor = (int(n) for n in fields[2].split(":"))
            types[os.makedev(major, minor)] = fields[fields.index("-", 6) + 1]
        except (IndexError, ValueError):
            continue
    return types


def attributes_current(device: int) -> bool:
    """Whether the file system of ``device`` is one of :data:`LOCAL_FILE_SYSTEMS` (``/proc/self/mountinfo``,
    read once per device; not known: ``False``)."""
    if device not in _FS_TYPES:
        try:
            with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
                _FS_TYPES[device] = mount_types(fh.read()).get(device)
        except OSError:
            _FS_TYPES[device] = None
    return _FS_TYPES[device] in LOCAL_FILE_SYSTEMS
