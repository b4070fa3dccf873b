"""A supervision pass over managed streams: restart failed ones per policy, notify people."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseNotifier, BaseOperator, Context

from airflow_streaming.exceptions import StreamingError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.operators.parameters import SpecFileTemplates, seconds_of, spec_with_conn_id
from airflow_streaming.task_owner import task_owner
from airflow_streaming.spec import StreamSpec
from airflow_streaming.ui.links import STREAM_LINKS


class SparkStreamSupervisorOperator(SpecFileTemplates, BaseOperator):
    """One supervision pass per stream (see ``docs/supervision.md``); schedule it every minute.

    For each stream: health verdict -> restart a failed or vanished driver from its checkpoint following
    the restart policy, give up (once) on deterministic failures, report unhealthy and recovered
    streams. Events go through a per-stream :class:`NotificationGate` (flap protection) to every
    notifier. Safe to run twice at once or to retry: see the supervisor's lock and ledger.

    :param specs: the streams (each a :class:`StreamSpec`, a dict (templated) or a YAML path; a ``.yaml`` /
        ``.yml`` file is rendered with Jinja).
    :param restart_policy: overrides of :class:`RestartPolicy` fields, for every stream.
    :param notifiers: Airflow notifiers (ours, the SMTP/Slack/HTTP providers' adapters in
        :mod:`airflow_streaming.notifications`, or any ``BaseNotifier``); each is called like a callback
        (templated fields rendered) with the task context plus ``stream_event`` (a ``StreamEvent``).
    :param repeat_window_s: flap protection: a repeat of the last message within this window is
        suppressed and summarised in the next one (seconds or a duration string such as ``"15 minutes"``);
        default ``[airflow_streaming] notification_repeat_window`` (900 s).
    :param max_wait_s: a restart whose backoff ends within this long waits in this pass (seconds or a
        duration string).
    :param conn_id: the Spark connection; overrides every spec's ``conn_id`` (see ``docs/precedence.md``).
    """

    template_fields: Sequence[str] = ("specs",)
    operator_extra_links = STREAM_LINKS
    ui_color = "#d6e4ff"

    def __init__(self, *, specs: Sequence[StreamSpec | Mapping[str, Any] | str],
                 restart_policy: Mapping[str, Any] | None = None, notifiers: Sequence[BaseNotifier] = (),
                 repeat_window_s: float | str | None = None, max_wait_s: float | str = 30.0, conn_id: str | None = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.specs = list(specs)
        self.restart_policy = dict(restart_policy or {})
        self.notifiers = list(notifiers)
        if repeat_window_s is None:
            from airflow_streaming.config import get_float

            repeat_window_s = get_float("notification_repeat_window")
        self.repeat_window_s = seconds_of(repeat_window_s, "repeat_window_s", self, inclusive=True)
        self.max_wait_s = seconds_of(max_wait_s, "max_wait_s", self, inclusive=True)
        self.conn_id = conn_id

    def execute(self, context: Context) -> list[dict[str, Any]]:
        from airflow_streaming.supervision.policy import RestartPolicy
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        with fail_fast_on_permanent_errors():  # an invalid policy fails at once; a failed pass is retried
            policy = RestartPolicy.from_mapping(self.restart_policy)
        try:
            log_url = getattr(context["ti"], "log_url", None)
        except Exception:  # noqa: BLE001 - no task instance (direct call)
            log_url = None
        results: list[dict[str, Any]] = []
        errors: list[str] = []
        for index, raw in enumerate(self.specs):
            # One stream at a time, in isolation: an unreadable spec or control directory is reported and
            # the others are still supervised.
            try:
                results.append(self._supervise_one(raw, policy, log_url, context))
            except Exception as exc:  # noqa: BLE001 - isolation: report, go on with the next stream
                name = raw.get("name") if isinstance(raw, Mapping) else getattr(raw, "name", None) or str(raw)
                self.log.error("supervision of stream %s (specs[%d]) failed: %s", name, index, exc)
                results.append({"stream": name, "health": "-", "action": "ERROR", "reason": str(exc), "events": []})
                errors.append(f"specs[{index}] ({name}): {exc}")
        if errors:
            context["ti"].xcom_push(key="return_value", value=results)
            raise StreamingError(f"{len(errors)} of {len(self.specs)} stream(s) could not be supervised (the others "
                                 "were): " + "; ".join(errors))
        return results

    def _supervise_one(self, raw: Any, policy: Any, log_url: Any, context: Context) -> dict[str, Any]:
        from airflow_streaming.lifecycle.supervisor import supervise
        from airflow_streaming.notifications.delivery import call_notifier
        from airflow_streaming.notifications.gate import NotificationGate

        hook = SparkStreamHook(spec_with_conn_id(raw, self.conn_id))
        gate = NotificationGate(hook.storage, f"{hook.paths.root}/notifications.json", self.repeat_window_s)

        def deliver(event: dict[str, Any]) -> None:
            if isinstance(log_url, str) and log_url:
                event = {**event, "links": {**(event.get("links") or {}), "airflow_log": log_url}}
            admitted = gate.admit(event)
            if admitted is None:
                return
            for notifier in self.notifiers:
                try:
                    call_notifier(notifier, {**context, "stream_event": admitted})
                except Exception:  # noqa: BLE001 - one broken channel must not hide the others
                    self.log.exception("notifier %s failed", type(notifier).__name__)

        ti = context["ti"]
        owner = task_owner(ti)
        result = supervise(hook, policy, deliver, max_wait_s=self.max_wait_s, owner=owner)
        self.log.info("stream %s: %s -> %s (%s)", result.stream, result.health, result.action, result.reason)
        return ({k: v for k, v in dataclasses.asdict(result).items() if k != "events"}
                | {"events": [e["kind"] for e in result.events]})
