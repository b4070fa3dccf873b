"""Compatibility check from the command line, outside Airflow.

    python -m airflow_streaming.compat --checkpoint PATH --application APP [--conf KEY=VALUE ...]
        [--conf-stdin] [--stream NAME] [--trigger-seconds S] [--master local[1]] [--no-dry-run] [--json]
        [--allow-warnings] [--storage-conn-id CONN] [-- APP ARGS...]

Secret conf (passwords, keys, tokens) does not belong on a command line, which every user of the
machine can read: pass it with --conf-stdin as a JSON object on stdin, e.g.
``echo '{"spark.hadoop.fs.s3a.secret.key": "..."}' | python -m airflow_streaming.compat --conf-stdin ...``.

Exit codes: 0 compatible (or compatible with warnings and --allow-warnings), 1 incompatible,
2 compatible with warnings (not allowed), 3 the check itself failed (bad checkpoint, bad app...).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import TextIO

from airflow_streaming.compat.model import Verdict
from airflow_streaming.redaction import (
    SECRET_ARG_PREFIX,
    is_secret_conf_entry,
    redact,
    redact_text,
    remember_secrets,
    secret_args_of_conf,
    secret_values,
)

EXIT_OK, EXIT_INCOMPATIBLE, EXIT_WARNINGS, EXIT_ERROR = 0, 1, 2, 3


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m airflow_streaming.compat", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--application", required=True, help="bundled job name or absolute path to a .py script")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--conf-stdin", action="store_true",
                        help="read more conf (the secret entries) from stdin as one JSON object")
    parser.add_argument("--stream", default="candidate")
    parser.add_argument("--trigger-seconds", type=float, default=5.0)
    parser.add_argument("--master", default="local[1]")
    parser.add_argument("--no-dry-run", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--allow-warnings", action="store_true")
    parser.add_argument("--report-to", default=None, metavar="LOCATION",
                        help="also write {id, report|error} to this control-storage location (a detached check)")
    parser.add_argument("--report-id", default=None, help="the id written with --report-to")
    parser.add_argument("--run-id", default=None, help="identifies this process (a detached check's token)")
    parser.add_argument("--storage-conn-id", default=None,
                        help="Airflow webhdfs connection for an hdfs:// checkpoint (default webhdfs_default)")
    parser.add_argument("app_args", nargs=argparse.REMAINDER)
    ns = parser.parse_args(argv)
    if ns.app_args and ns.app_args[0] == "--":
        ns.app_args = ns.app_args[1:]
    for item in ns.conf:
        if "=" not in item:
            parser.error(f"--conf expects KEY=VALUE, got {item!r}")
        if is_secret_conf_entry(*item.split("=", 1)):
            print(f"warning: --conf {item.split('=', 1)[0]}=... puts private conf (not a known public Spark setting, "
                  "or a value that holds a secret) on the command line, where every user of this machine can read "
                  "it: pass it with --conf-stdin instead", file=sys.stderr)
    return ns


def read_conf(ns: argparse.Namespace, stdin: TextIO | None = None) -> dict[str, str]:
    """The ``--conf`` entries, plus (``--conf-stdin``) the JSON object on ``stdin``, which wins."""
    conf = dict(item.split("=", 1) for item in ns.conf)
    if ns.conf_stdin:
        text = (stdin or sys.stdin).read()
        try:
            extra = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError as exc:
            raise ValueError(f"--conf-stdin: stdin is not a JSON object of conf entries ({exc.msg})") from None
        if not isinstance(extra, dict):
            raise ValueError("--conf-stdin: stdin must hold one JSON object of conf entries, "
                             f"got {type(extra).__name__}")
        conf.update({str(k): str(v) for k, v in extra.items()})
    return conf


def main(argv: list[str] | None = None) -> int:
    ns = parse_args(sys.argv[1:] if argv is None else argv)
    outcome: dict[str, object] = {}
    try:
        return _main(ns, outcome)
    finally:
        if ns.report_to:
            _report(ns, outcome)


def _report(ns: argparse.Namespace, outcome: dict[str, object]) -> None:
    """Write the detached check's answer where the lifecycle runner (or its trigger) waits for it."""
    from airflow_streaming.control.locations import storage_for

    answer = {"id": ns.report_id, **(outcome or {"error": "the check ended without a report"})}
    storage, path = storage_for(ns.report_to)
    storage.write_atomic(path, json.dumps(answer, default=str).encode())


def _main(ns: argparse.Namespace, outcome: dict[str, object]) -> int:
    try:
        conf = read_conf(ns)
    except ValueError as exc:
        outcome["error"] = str(exc)
        print(json.dumps({"error": str(exc), "error_type": "ValueError"}) if ns.json else f"error: {exc}")
        return EXIT_ERROR
    remember_secrets(secret_values(conf))  # masked in whatever this process prints
    extra_args = secret_args_of_conf(conf)  # the stream's secret arguments (StreamSpec.secret_args)
    if extra_args:
        remember_secrets(extra_args[1::2])
        ns.app_args = [*ns.app_args, *extra_args]
        conf = {k: v for k, v in conf.items() if not k.startswith(SECRET_ARG_PREFIX)}
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from airflow_streaming.pyspark_install import full_pyspark_missing, needs_full_pyspark

    missing = full_pyspark_missing()
    if missing:  # only pyspark-client here: a local session cannot start (say which extra to install)
        message = needs_full_pyspark("the compatibility check", missing)
        outcome["error"] = message
        print(json.dumps({"error": message, "error_type": "PySparkNotInstalled"}) if ns.json else f"error: {message}")
        return EXIT_ERROR
    from airflow_streaming.checkpoint.logs import CheckpointError
    from airflow_streaming.compat.check import check_compatibility

    spark = None
    try:
        from pyspark.sql import SparkSession

        from airflow_streaming.submit_fields import SESSION_DEPENDENCY_KEYS

        builder = SparkSession.builder.master(ns.master).appName("airflow-streaming-compat-check") \
            .config("spark.ui.enabled", "false")
        for key in SESSION_DEPENDENCY_KEYS:  # the candidate's py_files, files, jars: set when the session starts
            if conf.get(key):
                builder = builder.config(key, conf[key])
        spark = builder.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        report = check_compatibility(
            spark, ns.checkpoint, ns.application, ns.app_args,
            spark_conf=conf, stream=ns.stream,
            trigger_seconds=ns.trigger_seconds, dry_run=not ns.no_dry_run, storage_conn_id=ns.storage_conn_id)
    except (CheckpointError, FileNotFoundError, OSError, ValueError) as exc:
        message = redact_text(str(exc))
        outcome["error"] = message
        print(json.dumps({"error": message, "error_type": type(exc).__name__}) if ns.json else f"error: {message}")
        return EXIT_ERROR
    finally:
        if spark is not None:
            spark.stop()
    outcome["report"] = redact(report.to_dict())  # it lands on shared storage
    print(json.dumps(report.to_dict(), indent=1, default=str) if ns.json else report.render_text())
    if report.verdict == Verdict.INCOMPATIBLE:
        return EXIT_INCOMPATIBLE
    if report.verdict == Verdict.COMPATIBLE_WITH_WARNINGS and not ns.allow_warnings:
        return EXIT_WARNINGS
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
