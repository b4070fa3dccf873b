"""Compatibility check from the command line, outside Airflow.

    python -m airflow_streaming.compat --checkpoint PATH --application APP [--conf KEY=VALUE ...]
        [--stream NAME] [--trigger-seconds S] [--master local[1]] [--no-dry-run] [--json]
        [--allow-warnings] [--storage-conn-id CONN] [-- APP ARGS...]

Exit codes: 0 compatible (or compatible with warnings and --allow-warnings), 1 incompatible,
2 compatible with warnings (not allowed), 3 the check itself failed (bad checkpoint, bad app...).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from airflow_streaming.compat.model import Verdict

EXIT_OK, EXIT_INCOMPATIBLE, EXIT_WARNINGS, EXIT_ERROR = 0, 1, 2, 3


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m airflow_streaming.compat", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--application", required=True, help="bundled job name or absolute path to a .py script")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--stream", default="candidate")
    parser.add_argument("--trigger-seconds", type=float, default=5.0)
    parser.add_argument("--master", default="local[1]")
    parser.add_argument("--no-dry-run", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--allow-warnings", action="store_true")
    parser.add_argument("--storage-conn-id", default=None,
                        help="Airflow webhdfs connection for an hdfs:// checkpoint (default webhdfs_default)")
    parser.add_argument("app_args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    if ns.app_args and ns.app_args[0] == "--":
        ns.app_args = ns.app_args[1:]
    for item in ns.conf:
        if "=" not in item:
            parser.error(f"--conf expects KEY=VALUE, got {item!r}")
    return ns


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from airflow_streaming.checkpoint.logs import CheckpointError
    from airflow_streaming.compat.check import check_compatibility

    spark = None
    try:
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master(ns.master).appName("airflow-streaming-compat-check")
                 .config("spark.ui.enabled", "false").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        report = check_compatibility(
            spark, ns.checkpoint, ns.application, ns.app_args,
            spark_conf=dict(item.split("=", 1) for item in ns.conf), stream=ns.stream,
            trigger_seconds=ns.trigger_seconds, dry_run=not ns.no_dry_run, storage_conn_id=ns.storage_conn_id)
    except (CheckpointError, FileNotFoundError, OSError, ValueError) as exc:
        print(json.dumps({"error": str(exc), "error_type": type(exc).__name__}) if ns.json else f"error: {exc}")
        return EXIT_ERROR
    finally:
        if spark is not None:
            spark.stop()
    print(json.dumps(report.to_dict(), indent=1, default=str) if ns.json else report.render_text())
    if report.verdict == Verdict.INCOMPATIBLE:
        return EXIT_INCOMPATIBLE
    if report.verdict == Verdict.COMPATIBLE_WITH_WARNINGS and not ns.allow_warnings:
        return EXIT_WARNINGS
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
