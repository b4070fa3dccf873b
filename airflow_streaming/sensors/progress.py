"""Wait until a managed stream is making progress."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from airflow_streaming.defer_race import retry_deferred_task
from airflow_streaming.exceptions import StreamFailedError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.operators.deferral import default_deferrable
from airflow_streaming.operators.parameters import SpecFileTemplates, sensor_durations, spec_with_conn_id
from airflow_streaming.spec import StreamSpec
from airflow_streaming.triggers.progress import Progress, SparkStreamProgressTrigger, progress_of
from airflow_streaming.ui.links import STREAM_LINKS


class SparkStreamProgressSensor(SpecFileTemplates, BaseSensorOperator):
    """Succeed once the stream's current run has completed ``min_batches`` micro-batches and read at
    least ``min_input_rows`` rows; fail at once if its driver failed or exited.

    Pushes the run's totals (batches, input_rows, quarantined_rows) and last batch id to XCom. A failed
    or exited driver fails the task without retries (waiting again cannot help); unreadable control
    files are polled again, within the sensor's ``timeout``. ``mode="reschedule"`` frees the worker
    slot between pokes; ``deferrable=True`` looks once in the worker and, if that does not decide, hands the
    looking to the triggerer (:class:`~airflow_streaming.triggers.progress.SparkStreamProgressTrigger`, the
    same check) with a deferral timeout of ``timeout``.

    :param spec: the stream: a :class:`StreamSpec`, a dict (templated) or a path to a YAML spec (a ``.yaml``
        / ``.yml`` file is rendered with Jinja).
    :param min_batches: completed micro-batches required in this run.
    :param min_input_rows: input rows required in this run (e.g. the number of events fed).
    :param poke_interval: time between pokes (seconds or a duration string such as ``"5s"``); default
        ``[airflow_streaming] progress_poll_interval`` (2). ``timeout`` takes a duration string too.
    :param conn_id: the Spark connection; overrides the spec's ``conn_id`` (see ``docs/precedence.md``).
    :param deferrable: wait in the triggerer; default ``[operators] default_deferrable``. A deferrable sensor
        that sets no ``retries`` gets two, 15 s apart (:mod:`airflow_streaming.defer_race`); a failed or exited
        driver still fails it without retries.
    """

    template_fields: Sequence[str] = ("spec", "min_input_rows")
    operator_extra_links = STREAM_LINKS

    def __init__(
        self,
        *,
        spec: StreamSpec | Mapping[str, Any] | str,
        min_batches: int = 1,
        min_input_rows: int = 0,
        conn_id: str | None = None,
        deferrable: bool | None = None,
        **kwargs: Any,
    ) -> None:
        sensor_durations(self, kwargs)
        if "poke_interval" not in kwargs:
            from airflow_streaming.config import get_float

            kwargs["poke_interval"] = get_float("progress_poll_interval")
        super().__init__(**kwargs)
        self.spec = spec
        self.min_batches = min_batches
        self.min_input_rows = min_input_rows
        self.conn_id = conn_id
        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        if self.deferrable:  # Airflow 3.3's defer race: a retry looks again (airflow_streaming.defer_race)
            retry_deferred_task(self, kwargs)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        # One look here first (like Airflow's deferrable sensors): a stream that already made its progress, or
        # failed, needs no trip through the triggerer.
        with fail_fast_on_permanent_errors():
            spec = spec_with_conn_id(self.spec, self.conn_id)
            progress = self._look(spec)
            if progress.done:
                return progress.xcom
        self.defer(trigger=SparkStreamProgressTrigger(spec.to_dict(), self.min_batches, int(self.min_input_rows),
                                                      float(self.poke_interval)),
                   method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        with fail_fast_on_permanent_errors():
            if event.get("status") == "failed":
                raise StreamFailedError(event.get("message"))
            self.log.info("%s", event.get("message"))
            return event["xcom"]

    def poke(self, context: Context) -> PokeReturnValue:
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        with fail_fast_on_permanent_errors():
            progress = self._look(spec_with_conn_id(self.spec, self.conn_id))
            return PokeReturnValue(is_done=progress.done, xcom_value=progress.xcom if progress.done else None)

    def _look(self, spec: StreamSpec) -> Progress:
        """One look (:func:`~airflow_streaming.triggers.progress.progress_of`), logged; a failed or exited driver
        is :class:`StreamFailedError` (permanent)."""
        progress = progress_of(SparkStreamHook(spec), self.min_batches, int(self.min_input_rows))
        if progress.failed is not None:
            raise StreamFailedError(progress.failed)
        (self.log.warning if progress.warning else self.log.info)("%s", progress.message)
        return progress
