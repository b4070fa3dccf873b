"""Upgrade, restart or roll back a stream from a DAG: thin glue over :mod:`airflow_streaming.lifecycle`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseNotifier, BaseOperator, Context

from airflow_streaming.operators.asset_lineage import declare_spec_assets, describe_asset_events
from airflow_streaming.operators.deferral import DeferrableLifecycleMixin
from airflow_streaming.operators.lineage import StreamLineage
from airflow_streaming.operators.parameters import (
    SpecFileTemplates,
    checked_duration,
    seconds_of,
    spec_with_conn_id,
    with_conn_id,
)
from airflow_streaming.task_owner import task_owner
from airflow_streaming.spec import StreamSpec
from airflow_streaming.ui.links import STREAM_LINKS


class SparkStreamUpgradeOperator(SpecFileTemplates, DeferrableLifecycleMixin, StreamLineage, BaseOperator):
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

    :param spec: the target spec (dict, YAML path or :class:`StreamSpec`; templated; a ``.yaml`` / ``.yml``
        file is rendered with Jinja). Its ``assets`` (``current``'s when ``spec`` is omitted) become the task's
        ``inlets`` (sources) and ``outlets`` (sinks) when known as the DAG is parsed, added after any
        ``inlets=``/``outlets=`` given (see :class:`~airflow_streaming.operators.deploy.SparkStreamDeployOperator`
        and :mod:`airflow_streaming.operators.asset_lineage`); a restart or rollback of the deployed spec
        declares none of its own. On success Airflow records an asset event for each sink.
    :param current: the running spec, for ``parallel`` (default: the deployed one).
    :param allow_warnings: let COMPATIBLE_WITH_WARNINGS pass the gate.
    :param probation_min_batches: completed batches the new version must show while HEALTHY.
    :param probation_window: how long it has to get there (seconds or a duration string such as
        ``"5 minutes"``, checked when the DAG is parsed; templated).
    :param warm_start: prepare the new driver (JVM, session, planned query) beside the running one and
        stop the old one only once it is ready: shorter downtime, two drivers' memory for a while.
    :param notifiers: Airflow notifiers; each is called like a callback (templated fields rendered) with the
        task context plus ``stream_event`` (UPGRADE_SUCCEEDED / UPGRADE_ROLLED_BACK).
    :param deferrable: run every wait (the gate's report, the old driver's exit, the new one's start,
        probation) in the triggerer, so the task holds a worker slot only for the short steps; default
        ``[operators] default_deferrable``. A deferrable task that sets no ``retries`` gets two, 15 s apart
        (:mod:`airflow_streaming.defer_race`: Airflow 3.3 can fail a task whose trigger fired early).
    :param poll_interval: deferred: seconds between the trigger's checks; default ``[airflow_streaming]
        lifecycle_poll_interval``.
    :param conn_id: the Spark connection; overrides the ``conn_id`` of ``spec``, ``current`` and a restart's or
        rollback's deployed spec (see ``docs/precedence.md``). An action resumed from its record finishes
        with the specs it recorded.
    """

    template_fields: Sequence[str] = ("spec", "current", "probation_window")
    operator_extra_links = STREAM_LINKS
    ui_color = "#c9f2d0"

    def __init__(self, *, spec: StreamSpec | Mapping[str, Any] | str | None = None, action: str = "upgrade",
                 current: StreamSpec | Mapping[str, Any] | str | None = None, allow_warnings: bool = False,
                 probation_min_batches: int = 2, probation_window: float | str = "5 minutes",
                 dry_run: bool = True, warm_start: bool = False, notifiers: Sequence[BaseNotifier] = (),
                 deferrable: bool | None = None, poll_interval: float | str | None = None, conn_id: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.spec, self.action, self.current = spec, action, current
        declare_spec_assets(self, spec if spec is not None else current)
        self.allow_warnings, self.dry_run, self.warm_start = allow_warnings, dry_run, warm_start
        self.probation_min_batches = probation_min_batches
        self.probation_window = checked_duration(probation_window, "probation_window", self, templated=True)
        self.conn_id = conn_id
        self.notifiers = list(notifiers)
        self._set_deferrable(deferrable, poll_interval, kwargs)

    @property
    def _lineage_action(self) -> str:  # type: ignore[override]
        return self.action

    def _act(self, context: Context, resume: dict[str, str] | None = None) -> dict[str, Any]:
        from airflow_streaming.hooks.streaming_job import SparkStreamHook
        from airflow_streaming.lifecycle.operations import LifecycleOutcomeError, result_of
        from airflow_streaming.lifecycle.record import Action, Probation
        from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner, restart_spec, resume_target
        from airflow_streaming.notifications.delivery import call_notifier
        from airflow_streaming.notifications.events import StreamEvent

        action = Action(self.action)
        ti = context["ti"]
        options = LifecycleOptions(
            allow_warnings=self.allow_warnings, dry_run=self.dry_run,
            probation=Probation(self.probation_min_batches,
                                seconds_of(self.probation_window, "probation_window", self)),  # type: ignore[arg-type]
            owner=task_owner(ti), warm_start=self.warm_start,
            defer=self.deferrable)
        current = spec_with_conn_id(self.current, self.conn_id) if self.current is not None else None
        target = spec_with_conn_id(self.spec, self.conn_id) if self.spec is not None else None
        resumed = resume_target(SparkStreamHook(current or target), action) if action in (  # type: ignore[arg-type]
            Action.RESTART, Action.ROLLBACK) else None
        if resumed is not None:  # a previous try died mid-action: finish that action as recorded
            _, target, current = resumed
        elif target is None or action == Action.ROLLBACK:
            target = with_conn_id(restart_spec(SparkStreamHook(target or current), action),  # type: ignore[arg-type]
                                  self.conn_id)

        def notify(event: dict[str, Any]) -> None:
            for notifier in self.notifiers:
                try:
                    call_notifier(notifier, {**context, "stream_event": StreamEvent.from_dict(event)})
                except Exception:  # noqa: BLE001 - one broken channel must not hide the outcome
                    self.log.exception("notifier %s failed", type(notifier).__name__)

        record = LifecycleRunner(target, action, options, current=current, notify=notify, resume=resume).run()
        result = result_of(record)
        self._note_lineage(target, previous_version=result.get("from_version"), run_id=result.get("new_run_id"))
        # The runner logged each step as it happened; the outcome's error is in the exception, once.
        if record.step.value != "SUCCEEDED":
            raise LifecycleOutcomeError(result)  # recorded as finished: not retried (task_failures)
        describe_asset_events(self, context, target, {"run_id": result.get("new_run_id")})
        self.log.info("%s of %s to %s: %s (%d steps, recorded in history.json)", result.get("action"),
                      result.get("stream"), result.get("to_version"), result.get("outcome"), len(result.get("steps", [])))
        return result


def state_with_conn_id(state: Any, conn_id: str | None) -> Any:
    """A :class:`~airflow_streaming.lifecycle.desired_state.DesiredState` whose every spec (each stream's wanted
    spec and every listed version's) has the operator's ``conn_id``; unchanged for ``None``/""."""
    import dataclasses

    if not conn_id:
        return state
    streams = {name: dataclasses.replace(target, spec=with_conn_id(target.spec, conn_id),
                                         _specs={v: with_conn_id(s, conn_id) for v, s in target._specs.items()})
               for name, target in state.streams.items()}
    return dataclasses.replace(state, streams=streams)


def _as_bool(value: bool | str | None) -> bool | None:
    """A templated boolean ("True" / "false" / "" once rendered) or a real one; ``None`` stays ``None``."""
    if value is None or isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("", "none"):
        return None
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"allow_warnings: expected a boolean, got {value!r}")


class SparkStreamOperationOperator(DeferrableLifecycleMixin, BaseOperator):
    """One operation on one stream of a desired-state file: what the ``stream_operations`` form runs,
    and what the ``stream_upgrade_window`` DAG maps over its pending changes.

    ``action``: ``status`` / ``deploy`` / ``stop`` / ``restart`` / ``upgrade`` (to ``version``, default the
    wanted one) / ``rollback`` - see :func:`airflow_streaming.lifecycle.operations.operate`. Every argument
    is templated (``"{{ params.stream }}"``). Returns (XCom) the operation's result; a deploy's result
    carries ``outcome: DEPLOYED``. An invalid choice, or an action that ends REFUSED / ROLLED_BACK / FAILED,
    fails the task without retries - unless ``fail_on_outcome=False``, which returns that outcome
    (``outcome``, ``error``, ``steps``) instead, for a summary task to report.

    :param stream: the stream's name in the desired-state file.
    :param action: one of :data:`airflow_streaming.lifecycle.operations.ACTIONS`.
    :param version: the version to deploy / upgrade to (empty: the deployed, resp. wanted, one).
    :param allow_warnings: let COMPATIBLE_WITH_WARNINGS pass the gate (default: the file's setting).
    :param desired_state: path of the desired-state YAML.
    :param fail_on_outcome: fail the task when the action ends REFUSED / ROLLED_BACK / FAILED (default).
    :param deferrable: run every wait in the triggerer; default ``[operators] default_deferrable``. A deferrable
        task that sets no ``retries`` gets two, 15 s apart (:mod:`airflow_streaming.defer_race`: Airflow 3.3 can
        fail a task whose trigger fired early).
    :param poll_interval: deferred: seconds between the trigger's checks; default ``[airflow_streaming]
        lifecycle_poll_interval``.
    :param conn_id: the Spark connection; overrides the ``conn_id`` of every spec of the desired-state file
        (see ``docs/precedence.md``).
    """

    # Not ``desired_state``: the file that says which specs run is the DAG author's, never a form's or a
    # Param's (a templated path would let whoever may trigger the DAG run any spec file).
    template_fields: Sequence[str] = ("stream", "action", "version", "allow_warnings")
    operator_extra_links = STREAM_LINKS
    ui_color = "#c9f2d0"

    def __init__(self, *, stream: str, action: str = "status", version: str | None = None,
                 allow_warnings: bool | str | None = None, desired_state: str, fail_on_outcome: bool = True,
                 deferrable: bool | None = None, poll_interval: float | str | None = None, conn_id: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stream, self.action, self.version = stream, action, version
        self.allow_warnings, self.desired_state = allow_warnings, desired_state
        self.fail_on_outcome = fail_on_outcome
        self.conn_id = conn_id
        self._set_deferrable(deferrable, poll_interval, kwargs)

    def _action(self, context: Context, resume: dict[str, str] | None) -> dict[str, Any]:
        from airflow_streaming.lifecycle.operations import LifecycleOutcomeError
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors, original_error

        try:
            with fail_fast_on_permanent_errors():
                result = self._operate(context, resume)
        except Exception as exc:  # noqa: BLE001 - only a recorded outcome is returned, see fail_on_outcome
            outcome = original_error(exc)
            if self.fail_on_outcome or not isinstance(outcome, LifecycleOutcomeError):
                raise
            result = dict(outcome.result)
            self.log.error("%s", outcome)  # the outcome's error, once; not again below
        # The runner logged each step as it happened.
        self.log.info("%s", {k: v for k, v in result.items() if k not in ("steps", "error")})
        return result

    def _operate(self, context: Context, resume: dict[str, str] | None) -> dict[str, Any]:
        from airflow_streaming.lifecycle.desired_state import load_desired_state
        from airflow_streaming.lifecycle.operations import operate

        ti = context["ti"]
        result = operate(state_with_conn_id(load_desired_state(self.desired_state), self.conn_id), self.stream, self.action, self.version or None,
                         allow_warnings=_as_bool(self.allow_warnings),
                         owner=task_owner(ti),
                         defer=self.deferrable, resume=resume)
        if self.action == "deploy":
            result.setdefault("outcome", "DEPLOYED")
        return result
