"""Private per-user directories under the temp directory (plain Python: the driver side imports it).

A fixed name under ``/tmp`` is shared by every user of the host: whoever creates it first owns it. A
directory another user made (or a symlink to one) would let that user read the secrets written there
(the 0600 properties files), or swap in the runtime zip or conf that spark-submit reads later. So every
such directory of this provider is

- **per user**: ``<tmp>/<name>-<uid>``;
- **created private**: ``mkdir`` with mode 0700, which either creates it (atomically: it fails if the
  name exists) or leaves what is there;
- **verified before use**: what is there must be a real directory (``lstat``: a symlink is refused, not
  followed), owned by this user, with no access for group or others. Anything else is
  :class:`UnsafeDirectoryError`, naming the path and the fix; nothing is written into it or read from it.

Once verified, nobody else can swap it: the temp directory's sticky bit stops other users from
renaming or deleting an entry they do not own, and 0700 stops them from writing inside it. A parent
that is writable by others *without* the sticky bit is refused too (anyone could rename the directory
away and put their own in its place between the check and the use).
"""

from __future__ import annotations

import os
import stat
import tempfile

from airflow_streaming.exceptions import UnsafeDirectoryError

__all__ = ["UnsafeDirectoryError", "check_private_dir", "private_dir"]


def _uid() -> int:
    return os.geteuid()


def private_dir(name: str, parent: str | None = None) -> str:
    """``<parent or tmp>/<name>-<uid>``, created with mode 0700 if missing, verified private
    (:func:`check_private_dir`); returns its path. :class:`UnsafeDirectoryError` if it is not."""
    base = os.path.abspath(parent or tempfile.gettempdir())
    path = os.path.join(base, f"{name}-{_uid()}")
    try:
        os.mkdir(path, 0o700)  # atomic: creates it, or fails because the name is taken (then verify that)
    except FileExistsError:
        pass
    except OSError as exc:
        raise UnsafeDirectoryError(path, f"it cannot be created ({exc.strerror})") from exc
    check_private_dir(path)
    return path


def check_private_dir(path: str) -> None:
    """Raise :class:`UnsafeDirectoryError` unless ``path`` is a real directory (not a symlink) owned by
    this user with no group/other access, in a parent nobody else can rename it out of."""
    try:
        st = os.lstat(path)
    except OSError as exc:
        raise UnsafeDirectoryError(path, f"it cannot be inspected ({exc.strerror})") from exc
    if stat.S_ISLNK(st.st_mode):
        raise UnsafeDirectoryError(path, f"it is a symlink (to {os.readlink(path)!r}), not a directory")
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectoryError(path, "it is not a directory")
    if st.st_uid != _uid():
        raise UnsafeDirectoryError(path, f"it belongs to uid {st.st_uid}, not to this user (uid {_uid()})")
    if st.st_mode & 0o077:
        raise UnsafeDirectoryError(path, f"its mode is {stat.S_IMODE(st.st_mode):04o}: group or others may use it")
    parent = os.path.dirname(os.path.abspath(path))
    pst = os.stat(parent)
    if pst.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not pst.st_mode & stat.S_ISVTX:
        raise UnsafeDirectoryError(path, f"its parent {parent} is writable by others without the sticky bit, so "
                                         "the directory could be swapped after this check")
