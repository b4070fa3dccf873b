"""Stop a managed stream gracefully at a micro-batch boundary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_streaming.exceptions import StreamFailedError
from airflow_streaming.operators.deferral import DeferrableLifecycleMixin
from airflow_streaming.task_owner import task_owner
from airflow_streaming.spec import StreamSpec, as_spec
from airflow_streaming.ui.links import STREAM_LINKS


class SparkStreamStopOperator(DeferrableLifecycleMixin, BaseOperator):
    """Ask the stream's driver to stop between micro-batches; kill it after the timeout.

    Returns (XCom) the stop report: graceful, killed, exit_code, last_planned_batch,
    last_committed_batch, clean (the last planned batch is committed), next_batch_id, seconds.
    Stopping a stream that is not running succeeds and says so. A stop refused because another action
    holds the stream, or storage that cannot be read, is retried per ``retries``; an invalid spec, a
    refused or failed stop action and (with ``fail_if_not_graceful``) a kill fail the task at once.

    :param spec: the stream: a :class:`StreamSpec`, a dict (templated) or a path to a YAML spec.
    :param stop_timeout: seconds to wait for the graceful stop; default: the spec's ``stop_timeout``.
    :param kill_on_timeout: kill the driver when the timeout passes (default) or fail the task.
    :param fail_if_not_graceful: fail the task when the stream had to be killed (default False).
    :param deferrable: wait for the driver's exit in the triggerer (no worker slot held meanwhile);
        default ``[operators] default_deferrable``. A deferrable task that sets no ``retries`` gets two, 15 s apart
        (:mod:`airflow_streaming.defer_race`: Airflow 3.3 can fail a task whose trigger fired early).
    :param poll_interval: deferred: seconds between the trigger's checks; default ``[airflow_streaming]
        lifecycle_poll_interval``.
    """

    template_fields: Sequence[str] = ("spec",)
    operator_extra_links = STREAM_LINKS
    ui_color = "#f6d3c5"

    def __init__(
        self,
        *,
        spec: StreamSpec | Mapping[str, Any] | str,
        stop_timeout: float | None = None,
        kill_on_timeout: bool = True,
        fail_if_not_graceful: bool = False,
        deferrable: bool | None = None,
        poll_interval: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.stop_timeout = stop_timeout
        self.kill_on_timeout = kill_on_timeout
        self.fail_if_not_graceful = fail_if_not_graceful
        self._set_deferrable(deferrable, poll_interval, kwargs)

    def execute(self, context: Context) -> dict[str, Any]:
        return self._run_deferrable(context)

    def _action(self, context: Context, resume: dict[str, str] | None) -> dict[str, Any]:
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        with fail_fast_on_permanent_errors():
            return self._stop(context, resume)

    def _stop(self, context: Context, resume: dict[str, str] | None = None) -> dict[str, Any]:
        from airflow_streaming.lifecycle.operations import stop_stream
        from airflow_streaming.lifecycle.runner import LifecycleOptions

        spec = as_spec(self.spec)
        ti = context["ti"]
        options = LifecycleOptions(owner=task_owner(ti),
                                   stop_timeout=self.stop_timeout, kill_on_timeout=self.kill_on_timeout,
                                   defer=self.deferrable)
        result = stop_stream(spec, options, resume)
        self.log.info("stream %s stop: graceful=%s killed=%s last committed batch=%s clean=%s", spec.name,
                      result.get("graceful"), result.get("killed"), result.get("last_committed_batch"),
                      result.get("clean"))
        if result.get("was_running") and not result.get("graceful") and self.fail_if_not_graceful:
            raise StreamFailedError(f"stream {spec.name!r} did not stop gracefully: {result}")
        return result
