"""Gate a restart or upgrade on the compatibility of the candidate version with the checkpoint."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_streaming.compat.last_report import write_last_report
from airflow_streaming.compat.run import (
    IncompatibleCandidateError,
    blocking_problems,
    read_detached_report,
    run_check,
    start_check_detached,
)
from airflow_streaming.control.locations import storage_for
from airflow_streaming.defer_race import retry_deferred_task
from airflow_streaming.operators.deferral import DEFERRAL_MARGIN_S, default_deferrable, lifecycle_poll_interval
from airflow_streaming.operators.parameters import SpecFileTemplates, seconds_of, spec_with_conn_id
from airflow_streaming.task_owner import task_owner
from airflow_streaming.spec import StreamSpec
from airflow_streaming.ui.links import STREAM_LINKS


#: Where a deferred check's detached child writes its answer (``{"id", "report" | "error"}``), in the stream's
#: control directory; the latest check's, as ``gate-report.json`` is the latest gate's.
REPORT_NAME = "compat-check-report.json"


class SparkStreamCompatibilityCheckOperator(SpecFileTemplates, BaseOperator):
    """Check a candidate job version against the stream's live checkpoint, without touching the stream.

    Fails the task (without retries) on INCOMPATIBLE, and on COMPATIBLE_WITH_WARNINGS unless
    ``allow_warnings``; a check that could not run (checkpoint unreadable, Spark error) is retried. The
    findings are logged one per line (rule, both sides) and the full report is returned (XCom).

    :param spec: the candidate: the stream's spec with the new application / version / args / conf
        (a :class:`StreamSpec`, a dict (templated) or a YAML path; a ``.yaml`` / ``.yml`` file is rendered with
        Jinja). Its ``checkpoint_location`` is checked.
    :param allow_warnings: let COMPATIBLE_WITH_WARNINGS pass.
    :param dry_run: also run Spark's own restart checks on a scratch copy of the checkpoint metadata.
    :param conn_id: the Spark connection; overrides the spec's ``conn_id`` (see ``docs/precedence.md``).
    :param deferrable: run the check in a detached child and wait for its report in the triggerer (no worker
        slot held while the check's Spark session runs); default ``[operators] default_deferrable``. A
        deferrable task that sets no ``retries`` gets two, 15 s apart (:mod:`airflow_streaming.defer_race`).
    :param poll_interval: deferred: time between the trigger's checks (seconds or a duration string); default
        ``[airflow_streaming] lifecycle_poll_interval``.
    :param check_timeout: how long the check may take (seconds or a duration string; default 10 minutes).
    """

    template_fields: Sequence[str] = ("spec",)
    operator_extra_links = STREAM_LINKS
    ui_color = "#fff2b3"

    def __init__(self, *, spec: StreamSpec | Mapping[str, Any] | str, allow_warnings: bool = False,
                 dry_run: bool = True, conn_id: str | None = None, deferrable: bool | None = None,
                 poll_interval: float | str | None = None, check_timeout: float | str = 600.0,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.conn_id = conn_id
        self.allow_warnings = allow_warnings
        self.dry_run = dry_run
        self.check_timeout = seconds_of(check_timeout, "check_timeout", self)
        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        self.poll_interval = lifecycle_poll_interval() if poll_interval is None else \
            seconds_of(poll_interval, "poll_interval", self)
        if self.deferrable:
            retry_deferred_task(self, kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        with fail_fast_on_permanent_errors():
            spec = spec_with_conn_id(self.spec, self.conn_id)
            if self.deferrable:
                self._defer_check(spec)
            return self._judge(context, spec, run_check(spec, self.allow_warnings, self.dry_run,
                                                        timeout=self.check_timeout))  # type: ignore[arg-type]

    def _defer_check(self, spec: StreamSpec) -> None:
        """Start the check detached (its report goes to the stream's control directory) and wait for the
        report in the triggerer: :class:`~airflow_streaming.triggers.lifecycle.SparkStreamLifecycleTrigger`
        with a ``file`` wait, as a deferred upgrade's gate waits (it also ends when the check's process
        ended without a report)."""
        from airflow_streaming.hooks.streaming_job import SparkStreamHook
        from airflow_streaming.lifecycle.waits import FILE, Wait
        from airflow_streaming.triggers.lifecycle import SparkStreamLifecycleTrigger

        hook = SparkStreamHook(spec)
        token = f"check-{uuid.uuid4().hex[:16]}"
        start_check_detached(spec, self.allow_warnings, self.dry_run, f"{spec.control_dir}/{REPORT_NAME}", token,
                             hook.driver_log_path(token))
        wait = Wait(FILE, spec.to_dict(), None, time.time() + float(self.check_timeout),  # type: ignore[arg-type]
                    {"path": f"{hook.paths.root}/{REPORT_NAME}", "id": token, "process_token": token})
        self.log.info("compatibility check %s of %s %s runs detached; waiting for its report in the triggerer",
                      token, spec.application, spec.version)
        self.defer(trigger=SparkStreamLifecycleTrigger(wait.to_dict(), {}, self.poll_interval),
                   method_name="execute_complete", kwargs={"token": token},
                   timeout=timedelta(seconds=float(self.check_timeout) + DEFERRAL_MARGIN_S))  # type: ignore[arg-type]

    def execute_complete(self, context: Context, event: dict[str, Any], token: str = "") -> dict[str, Any]:
        """The detached check wrote its report (or ended, or its time ran out): judge it as in the worker."""
        import json

        from airflow_streaming.hooks.streaming_job import SparkStreamHook
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        spec = spec_with_conn_id(self.spec, self.conn_id)
        hook = SparkStreamHook(spec)
        raw = hook.storage.read_bytes(f"{hook.paths.root}/{REPORT_NAME}")
        answer = json.loads(raw) if raw else None
        if not isinstance(answer, dict) or answer.get("id") != token:  # none, or another check's
            answer = {"error": f"no report within {float(self.check_timeout):.0f}s "  # type: ignore[arg-type]
                               f"(the check's output: {hook.driver_log_path(token)})"}
        report = read_detached_report(spec, answer)  # a check that could not run: retried
        with fail_fast_on_permanent_errors():
            return self._judge(context, spec, report)

    def _judge(self, context: Context, spec: StreamSpec, report: dict[str, Any]) -> dict[str, Any]:
        verdict = report["verdict"]
        self.log.info("compatibility of %s %s with %s: %s", spec.application, spec.version,
                      spec.checkpoint_location, verdict)
        for f in report["findings"]:
            self.log.info("[%s] %s: %s | checkpoint: %s | candidate: %s", f["severity"], f["rule"], f["message"],
                          f["checkpoint"], f["candidate"])
        ti = context["ti"]
        storage, control_dir = storage_for(spec.control_dir, spec.storage_conn_id)
        write_last_report(storage, control_dir, report, candidate_version=spec.version,
                          candidate_application=spec.application,
                          owner=task_owner(ti))
        problems = blocking_problems(report, self.allow_warnings)
        if problems is not None:
            raise IncompatibleCandidateError(f"{spec.application} {spec.version} is {verdict} with the checkpoint "
                                             f"{spec.checkpoint_location}: " + "; ".join(problems))
        return report
