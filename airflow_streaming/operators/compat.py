"""Gate a restart or upgrade on the compatibility of the candidate version with the checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_streaming.exceptions import StreamingError
from airflow_streaming.spec import StreamSpec, as_spec


class IncompatibleCandidateError(StreamingError):
    """The candidate version may not restart on the stream's checkpoint (or warned, when not allowed)."""


def run_check(spec: StreamSpec, allow_warnings: bool, dry_run: bool = True, timeout: float = 600) -> dict[str, Any]:
    """Run ``python -m airflow_streaming.compat`` for ``spec`` (the candidate) against its checkpoint.

    The check runs in a child process with its own local Spark session, so the Airflow worker never
    hosts a JVM. Returns the JSON report; raises :class:`StreamingError` if the check itself failed.
    """
    cmd = [sys.executable, "-m", "airflow_streaming.compat", "--json", "--checkpoint", spec.checkpoint_location,
           "--application", spec.application, "--stream", spec.name,
           "--trigger-seconds", str(spec.trigger_interval)]
    cmd += [arg for key, value in spec.spark_conf.items() for arg in ("--conf", f"{key}={value}")]
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


class SparkStreamCompatibilityCheckOperator(BaseOperator):
    """Check a candidate job version against the stream's live checkpoint, without touching the stream.

    Fails the task on INCOMPATIBLE, and on COMPATIBLE_WITH_WARNINGS unless ``allow_warnings``. The
    findings are logged one per line (rule, both sides) and the full report is returned (XCom).

    :param spec: the candidate: the stream's spec with the new application / version / args / conf
        (a :class:`StreamSpec`, a dict (templated) or a YAML path). Its ``checkpoint_location`` is checked.
    :param allow_warnings: let COMPATIBLE_WITH_WARNINGS pass.
    :param dry_run: also run Spark's own restart checks on a scratch copy of the checkpoint metadata.
    """

    template_fields: Sequence[str] = ("spec",)
    ui_color = "#fff2b3"

    def __init__(self, *, spec: StreamSpec | Mapping[str, Any] | str, allow_warnings: bool = False,
                 dry_run: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.allow_warnings = allow_warnings
        self.dry_run = dry_run

    def execute(self, context: Context) -> dict[str, Any]:
        spec = as_spec(self.spec)
        report = run_check(spec, self.allow_warnings, self.dry_run)
        verdict = report["verdict"]
        self.log.info("compatibility of %s %s with %s: %s", spec.application, spec.version,
                      spec.checkpoint_location, verdict)
        for f in report["findings"]:
            self.log.info("[%s] %s: %s | checkpoint: %s | candidate: %s", f["severity"], f["rule"], f["message"],
                          f["checkpoint"], f["candidate"])
        if verdict == "INCOMPATIBLE" or (verdict == "COMPATIBLE_WITH_WARNINGS" and not self.allow_warnings):
            problems = [f"{f['rule']}: {f['message']}" for f in report["findings"] if f["severity"] != "INFO"]
            raise IncompatibleCandidateError(f"{spec.application} {spec.version} is {verdict} with the checkpoint "
                                             f"{spec.checkpoint_location}: " + "; ".join(problems))
        return report
