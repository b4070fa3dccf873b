"""Run the compatibility check in a child process (no JVM in the caller) and read its JSON report."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from airflow_streaming.exceptions import StreamingError
from airflow_streaming.spec import StreamSpec

__all__ = ["IncompatibleCandidateError", "run_check", "blocking_problems"]


class IncompatibleCandidateError(StreamingError):
    """The candidate version may not restart on the stream's checkpoint (or warned, when not allowed)."""


def blocking_problems(report: dict[str, Any], allow_warnings: bool) -> list[str] | None:
    """The findings that block the candidate, or ``None`` if it may go ahead."""
    verdict = report["verdict"]
    if verdict == "INCOMPATIBLE" or (verdict == "COMPATIBLE_WITH_WARNINGS" and not allow_warnings):
        return [f"{f['rule']}: {f['message']}" for f in report["findings"] if f["severity"] != "INFO"]
    return None


def run_check(spec: StreamSpec, allow_warnings: bool, dry_run: bool = True, timeout: float = 600) -> dict[str, Any]:
    """Run ``python -m airflow_streaming.compat`` for ``spec`` (the candidate) against its checkpoint.

    The check runs in a child process with its own local Spark session, so the Airflow worker never
    hosts a JVM. Returns the JSON report; raises :class:`StreamingError` if the check itself failed.
    """
    cmd = [sys.executable, "-m", "airflow_streaming.compat", "--json", "--checkpoint", spec.checkpoint_location,
           "--application", spec.application, "--stream", spec.name,
           "--trigger-seconds", str(spec.trigger_interval)]
    cmd += [arg for key, value in spec.spark_conf.items() for arg in ("--conf", f"{key}={value}")]
    if spec.storage_conn_id:
        cmd += ["--storage-conn-id", spec.storage_conn_id]
    if allow_warnings:
        cmd.append("--allow-warnings")
    if not dry_run:
        cmd.append("--no-dry-run")
    cmd += ["--", *spec.application_args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    start = next((i for i, line in enumerate(lines) if line.startswith("{")), None)
    try:
        report = json.loads("\n".join(lines[start:])) if start is not None else None
    except json.JSONDecodeError:
        report = None
    if report is None or "error" in report:
        reason = report["error"] if report else (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise StreamingError(f"compatibility check of {spec.application!r} against {spec.checkpoint_location} "
                             f"could not run: {reason}")
    return report
