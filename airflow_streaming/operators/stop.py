"""Stop a managed stream gracefully at a micro-batch boundary."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_streaming.exceptions import StreamFailedError
from airflow_streaming.operators.deferral import DeferrableLifecycleMixin
from airflow_streaming.operators.lineage import StreamLineage
from airflow_streaming.operators.parameters import SpecFileTemplates, checked_duration, seconds_of, spec_with_conn_id
from airflow_streaming.task_owner import task_owner
from airflow_streaming.spec import StreamSpec
from airflow_streaming.ui.links import STREAM_LINKS


class SparkStreamStopOperator(SpecFileTemplates, DeferrableLifecycleMixin, StreamLineage, BaseOperator):
    """Ask the stream's driver to stop between micro-batches; kill it after the timeout.

    Returns (XCom) the stop report: graceful, killed, exit_code, last_planned_batch,
    last_committed_batch, clean (the last planned batch is committed), next_batch_id, seconds.
    Stopping a stream that is not running succeeds and says so. A stop refused because another action
    holds the stream, or storage that cannot be read, is retried per ``retries``; an invalid spec, a
    refused or failed stop action and (with ``fail_if_not_graceful``) a kill fail the task at once.

    :param spec: the stream: a :class:`StreamSpec`, a dict (templated) or a path to a YAML spec (a ``.yaml``
        / ``.yml`` file is rendered with Jinja).
    :param stop_timeout: how long to wait for the graceful stop (seconds or a duration string such as
        ``"2 minutes"``, checked when the DAG is parsed; templated); default: the spec's ``stop_timeout``.
    :param kill_on_timeout: kill the driver when the timeout passes (default) or fail the task.
    :param fail_if_not_graceful: fail the task when the stream had to be killed (default False).
    :param deferrable: wait for the driver's exit in the triggerer (no worker slot held meanwhile);
        default ``[operators] default_deferrable``. A deferrable task that sets no ``retries`` gets two, 15 s apart
        (:mod:`airflow_streaming.defer_race`: Airflow 3.3 can fail a task whose trigger fired early).
    :param poll_interval: deferred: seconds between the trigger's checks; default ``[airflow_streaming]
        lifecycle_poll_interval``.
    :param conn_id: the Spark connection; overrides the spec's ``conn_id`` (see ``docs/precedence.md``).
    """

    template_fields: Sequence[str] = ("spec", "stop_timeout")
    operator_extra_links = STREAM_LINKS
    ui_color = "#f6d3c5"
    _lineage_action = "stop"
    _lineage_datasets = False  # OpenLineage: the stream's facet only (a stop reads and writes no data)

    def __init__(
        self,
        *,
        spec: StreamSpec | Mapping[str, Any] | str,
        stop_timeout: float | str | None = None,
        kill_on_timeout: bool = True,
        fail_if_not_graceful: bool = False,
        deferrable: bool | None = None,
        poll_interval: float | str | None = None,
        conn_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.stop_timeout = checked_duration(stop_timeout, "stop_timeout", self, templated=True)
        self.kill_on_timeout = kill_on_timeout
        self.fail_if_not_graceful = fail_if_not_graceful
        self.conn_id = conn_id
        self._set_deferrable(deferrable, poll_interval, kwargs)

    def _act(self, context: Context, resume: dict[str, str] | None = None) -> dict[str, Any]:
        from airflow_streaming.lifecycle.operations import stop_stream
        from airflow_streaming.lifecycle.runner import LifecycleOptions

        options = LifecycleOptions(owner=task_owner(context["ti"]), kill_on_timeout=self.kill_on_timeout,
                                   stop_timeout=seconds_of(self.stop_timeout, "stop_timeout", self),
                                   defer=self.deferrable)
        spec = spec_with_conn_id(self.spec, self.conn_id)
        result = stop_stream(spec, options, resume)
        self.log.info("stream %s stop: graceful=%s killed=%s last committed batch=%s clean=%s", spec.name,
                      result.get("graceful"), result.get("killed"), result.get("last_committed_batch"),
                      result.get("clean"))
        if result.get("was_running") and not result.get("graceful") and self.fail_if_not_graceful:
            raise StreamFailedError(f"stream {spec.name!r} did not stop gracefully: {result}")
        return result
