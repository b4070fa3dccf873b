"""Upgrade, restart or roll back a stream from a DAG: thin glue over :mod:`airflow_streaming.lifecycle`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseNotifier, BaseOperator, Context

from airflow_streaming.spec import StreamSpec, as_spec, parse_duration
from airflow_streaming.ui.links import STREAM_LINKS


class SparkStreamUpgradeOperator(BaseOperator):
    """Move a stream to ``spec`` safely (see ``docs/upgrades.md``).

    ``action="upgrade"`` (default): compatibility gate against the live checkpoint, graceful stop at a
    batch boundary, checkpoint snapshot, start, probation, automatic rollback. ``"restart"``: the same
    with the deployed spec (``spec`` may be omitted). ``"rollback"``: back to the version before the
    last successful upgrade. ``"parallel"``: an intentionally incompatible change - ``spec`` is a new
    stream (own name, checkpoint, output) started beside ``current`` and the old one is retired once
    the new one has caught up.

    The task fails (without Airflow retries) when the action ends REFUSED, ROLLED_BACK or FAILED; the
    stream's ``history.json`` records it. If the task dies, running it again resumes the action from its
    recorded step (Airflow retries do exactly that).

    :param spec: the target spec (dict, YAML path or :class:`StreamSpec`; templated).
    :param current: the running spec, for ``parallel`` (default: the deployed one).
    :param allow_warnings: let COMPATIBLE_WITH_WARNINGS pass the gate.
    :param probation_min_batches: completed batches the new version must show while HEALTHY.
    :param probation_window: how long it has to get there (seconds or a duration string).
    :param warm_start: prepare the new driver (JVM, session, planned query) beside the running one and
        stop the old one only once it is ready: shorter downtime, two drivers' memory for a while.
    :param notifiers: Airflow notifiers; each is called like a callback (templated fields rendered) with the
        task context plus ``stream_event`` (UPGRADE_SUCCEEDED / UPGRADE_ROLLED_BACK).
    """

    template_fields: Sequence[str] = ("spec", "current")
    operator_extra_links = STREAM_LINKS
    ui_color = "#c9f2d0"

    def __init__(self, *, spec: StreamSpec | Mapping[str, Any] | str | None = None, action: str = "upgrade",
                 current: StreamSpec | Mapping[str, Any] | str | None = None, allow_warnings: bool = False,
                 probation_min_batches: int = 2, probation_window: float | str = "5 minutes",
                 dry_run: bool = True, warm_start: bool = False, notifiers: Sequence[BaseNotifier] = (),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec, self.action, self.current = spec, action, current
        self.allow_warnings, self.dry_run, self.warm_start = allow_warnings, dry_run, warm_start
        self.probation_min_batches, self.probation_window = probation_min_batches, probation_window
        self.notifiers = list(notifiers)

    def execute(self, context: Context) -> dict[str, Any]:
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        with fail_fast_on_permanent_errors():
            return self._run(context)

    def _run(self, context: Context) -> dict[str, Any]:
        from airflow_streaming.hooks.streaming_job import StreamingJobHook
        from airflow_streaming.lifecycle.operations import LifecycleOutcomeError, result_of
        from airflow_streaming.lifecycle.record import Action, Probation
        from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner, restart_spec, resume_target
        from airflow_streaming.notifications.events import StreamEvent, call_notifier

        action = Action(self.action)
        ti = context["ti"]
        options = LifecycleOptions(
            allow_warnings=self.allow_warnings, dry_run=self.dry_run,
            probation=Probation(self.probation_min_batches, parse_duration(self.probation_window, "probation_window")),
            owner=f"{ti.dag_id}.{ti.task_id} run {ti.run_id} try {ti.try_number}", warm_start=self.warm_start)
        current = as_spec(self.current) if self.current is not None else None
        target = as_spec(self.spec) if self.spec is not None else None
        resumed = resume_target(StreamingJobHook(current or target), action) if action in (  # type: ignore[arg-type]
            Action.RESTART, Action.ROLLBACK) else None
        if resumed is not None:  # a previous try died mid-action: finish that action as recorded
            _, target, current = resumed
        elif target is None or action == Action.ROLLBACK:
            target = restart_spec(StreamingJobHook(target or current), action)  # type: ignore[arg-type]

        def notify(event: dict[str, Any]) -> None:
            for notifier in self.notifiers:
                try:
                    call_notifier(notifier, {**context, "stream_event": StreamEvent.from_dict(event)})
                except Exception:  # noqa: BLE001 - one broken channel must not hide the outcome
                    self.log.exception("notifier %s failed", type(notifier).__name__)

        record = LifecycleRunner(target, action, options, current=current, notify=notify).run()
        result = result_of(record)
        for line in result["steps"]:
            self.log.info("%s", line)
        if record.step.value != "SUCCEEDED":
            raise LifecycleOutcomeError(result)  # recorded as finished: not retried (task_failures)
        return result
