"""WebHDFS control storage (placeholder until the backend lands)."""

from __future__ import annotations

import errno

from airflow_streaming.control.storage import ControlStorage, StorageError


def webhdfs_storage(location: str, conn_id: str | None = None) -> ControlStorage:
    raise StorageError(errno.ENOSYS, f"no WebHDFS backend yet for {location!r}")
