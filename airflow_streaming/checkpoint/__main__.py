"""``python -m airflow_streaming.checkpoint inspect PATH [--json]``: report what a checkpoint records.

Exit status 0 with the report on stdout, or 2 with the error message on stderr. Read-only.
"""

from __future__ import annotations

import argparse
import sys

from airflow_streaming.checkpoint.reader import CheckpointError, read_checkpoint
from airflow_streaming.control.storage import StorageError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m airflow_streaming.checkpoint")
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="print what a Structured Streaming checkpoint records (read-only)")
    inspect.add_argument("path", help="checkpoint directory (a local path or file:// URI)")
    inspect.add_argument("--json", action="store_true", help="print JSON instead of text")
    args = parser.parse_args(argv)

    try:
        info = read_checkpoint(args.path)
    except (CheckpointError, StorageError) as exc:
        message = exc.strerror if isinstance(exc, StorageError) and exc.strerror else str(exc)
        print(f"error: {message}", file=sys.stderr)
        return 2
    print(info.to_json() if args.json else info.render_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
