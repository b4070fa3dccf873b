"""The gate-only driver (``--gate-only``): the compatibility gate of an application, run on the stream's target.

A short driver on the stream's own target - where the checkpoint and the job's dependencies are -
that runs the compatibility gate of this application against ``--checkpoint`` and exits. Its answer
``{"id": <run id>, "report" | "error", "seconds", "host"}`` goes to ``gate-report.json`` in the
control directory. It touches neither the checkpoint, the lease, the run marker nor the status.
"""

from __future__ import annotations

import argparse
import json
import logging
import socket
import sys
from collections.abc import Callable
from typing import Any

from airflow_streaming.application_source import checked_if_local, script_file
from airflow_streaming.control.contract import EXIT_GRACEFUL, EXIT_STARTUP_FAILED, ControlPaths
from airflow_streaming.control.storage import ControlStorage, StorageError

log = logging.getLogger("airflow_streaming.runtime")


def run_gate_only(ns: argparse.Namespace, storage: ControlStorage, paths: ControlPaths,
                  session: Callable[[str], Any]) -> int:
    """Run the gate (``session(name)`` builds the driver's SparkSession), write its answer, stop the session;
    the exit code: ``0`` when the answer was written (whatever its verdict), ``4`` when it could not be."""
    from spark_jobs.runtime.standby_gate import answer_of, run_check_in_driver

    spark: Any = None

    def check() -> Any:
        nonlocal spark
        if ns.script:
            ns.script = checked_if_local(ns.script)
        spark = session(f"{ns.stream}:{ns.version} compatibility gate")
        if ns.script:  # the file to check (a fetched URI: the copy its SparkContext fetched through spark.files)
            ns.script = script_file(ns.script)
        return run_check_in_driver(spark, ns, ns.checkpoint, not ns.gate_no_dry_run)

    try:
        answer = {**answer_of(ns.run_id, check), "host": socket.gethostname()}
        try:
            storage.write_atomic(paths.gate_report, json.dumps(answer, default=str).encode())
        except StorageError as exc:
            print(f"airflow-streaming: the gate of {ns.stream!r} ran but its answer cannot be written to "
                  f"{paths.gate_report}: {exc}", file=sys.stderr, flush=True)
            return EXIT_STARTUP_FAILED
        log.info("gate driver %s of %s %s: %s in %.2fs", ns.run_id, ns.stream, ns.version,
                 (answer.get("report") or {}).get("verdict") or "error", answer["seconds"])
        return EXIT_GRACEFUL
    finally:
        if spark is not None:
            spark.stop()
