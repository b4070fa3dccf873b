"""``python -m airflow_streaming.checkpoint inspect PATH [--json]``: report what a checkpoint records.

Exit status 0 with the report on stdout, or 2 with the error message on stderr. Read-only.
"""

from __future__ import annotations

import argparse
import sys

from airflow_streaming.checkpoint.reader import CheckpointError, read_checkpoint
from airflow_streaming.control.storage import ControlStorage, StorageError
from airflow_streaming.control.locations import storage_for


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_streaming.checkpoint")
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="print what a Structured Streaming checkpoint records (read-only)")
    inspect.add_argument("path", help="checkpoint directory: a local path, file://, webhdfs://nn:9870/... or "
                                      "hdfs://... (through an Airflow webhdfs connection)")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    inspect.add_argument("--storage-conn-id", default=None,
                         help="Airflow webhdfs connection for hdfs:// (default webhdfs_default)")
    args = parser.parse_args(argv)

    try:
        info = read_checkpoint(*_located(args.path, args.storage_conn_id))
    except (CheckpointError, StorageError) as exc:
        message = exc.strerror if isinstance(exc, StorageError) and exc.strerror else str(exc)
        print(f"error: {message}", file=sys.stderr)
        return 2
    print(info.to_json() if args.json else info.render_text())
    return 0


def _located(path: str, conn_id: str | None) -> tuple[str, ControlStorage]:
    """The checkpoint's path inside its storage, and the storage."""
    storage, root = storage_for(path, conn_id)
    return root, storage


if __name__ == "__main__":
    sys.exit(main())
