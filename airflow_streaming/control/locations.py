"""Which storage backend a location lives on: the one factory of :class:`ControlStorage` backends.

It lives apart from :mod:`airflow_streaming.control.storage` (the interface) so that the backends
import the interface and this module imports the backends, with no circle. The WebHDFS backend
(HTTP clients, Airflow connections) is imported only when a location asks for it: the Spark driver
imports this module but reads ``hdfs://`` through the JVM's Hadoop FileSystem, never through it.
"""

from __future__ import annotations

import errno
from urllib.parse import urlparse

from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import ControlStorage, StorageError, local_path

__all__ = ["storage_for"]


def storage_for(location: str, conn_id: str | None = None) -> tuple[ControlStorage, str]:
    """The storage backend for a location and the location's path inside it.

    ``/abs`` and ``file:///abs``: the local file system. ``hdfs://nn:port/abs`` and
    ``webhdfs://nn:port/abs``: WebHDFS (the Airflow connection ``conn_id``, default
    ``webhdfs_default``, or the NameNode named in the URI; see ``airflow_streaming.control.webhdfs``).
    """
    parsed = urlparse(location)
    if parsed.scheme in ("", "file"):
        return LocalStorage(), local_path(location)
    if parsed.scheme in ("hdfs", "webhdfs"):
        from airflow_streaming.control.webhdfs import webhdfs_storage  # HTTP clients: loaded only when asked

        return webhdfs_storage(location, conn_id), parsed.path or "/"
    raise StorageError(errno.EINVAL, f"no storage backend for {location!r}: use an absolute path, file://, "
                                     "hdfs:// or webhdfs://")
