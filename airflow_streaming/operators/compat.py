"""Gate a restart or upgrade on the compatibility of the candidate version with the checkpoint."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_streaming.compat.last_report import write_last_report
from airflow_streaming.compat.run import IncompatibleCandidateError, blocking_problems, run_check
from airflow_streaming.control.locations import storage_for
from airflow_streaming.operators.parameters import SpecFileTemplates, spec_with_conn_id
from airflow_streaming.task_owner import task_owner
from airflow_streaming.spec import StreamSpec
from airflow_streaming.ui.links import STREAM_LINKS


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
    """

    template_fields: Sequence[str] = ("spec",)
    operator_extra_links = STREAM_LINKS
    ui_color = "#fff2b3"

    def __init__(self, *, spec: StreamSpec | Mapping[str, Any] | str, allow_warnings: bool = False,
                 dry_run: bool = True, conn_id: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.conn_id = conn_id
        self.allow_warnings = allow_warnings
        self.dry_run = dry_run

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        with fail_fast_on_permanent_errors():
            return self._check(context)

    def _check(self, context: Context) -> dict[str, Any]:
        spec = spec_with_conn_id(self.spec, self.conn_id)
        report = run_check(spec, self.allow_warnings, self.dry_run)
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
