"""A directory tree listed one directory at a time, for stores that list one level per request
(WebHDFS ``LISTSTATUS``, Hadoop ``FileSystem.listStatus``): :meth:`ControlStorage.list_tree` of both
HDFS backends. Pure: the standard library and :class:`~airflow_streaming.control.storage.TreeEntry`."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from airflow_streaming.control.storage import TreeEntry

#: One directory's entries: ``(name, is_dir, size)`` (size 0 for a directory), ``[]`` when it is absent.
DirectoryListing = Callable[[str], Iterable[tuple[str, bool, int]]]


def walk_tree(path: str, list_directory: DirectoryListing) -> list[TreeEntry]:
    """Every directory and file under ``path`` (relative, ``/``-separated, sorted), listing each
    directory with ``list_directory`` once."""
    entries: list[TreeEntry] = []
    pending = [""]
    while pending:
        rel_dir = pending.pop()
        for name, is_dir, size in list_directory(f"{path.rstrip('/')}/{rel_dir}" if rel_dir else path):
            rel = f"{rel_dir}/{name}" if rel_dir else name
            entries.append(TreeEntry(rel, is_dir, size))
            if is_dir:
                pending.append(rel)
    return sorted(entries)


__all__ = ["DirectoryListing", "walk_tree"]
