"""Wait until a managed stream is making progress."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import StreamFailedError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.operators.parameters import SpecFileTemplates, sensor_durations, spec_with_conn_id
from airflow_streaming.spec import StreamSpec
from airflow_streaming.ui.links import STREAM_LINKS


class SparkStreamProgressSensor(SpecFileTemplates, BaseSensorOperator):
    """Succeed once the stream's current run has completed ``min_batches`` micro-batches and read at
    least ``min_input_rows`` rows; fail at once if its driver failed or exited.

    Pushes the run's totals (batches, input_rows, quarantined_rows) and last batch id to XCom. A failed
    or exited driver fails the task without retries (waiting again cannot help); unreadable control
    files are polled again, within the sensor's ``timeout``. ``mode="reschedule"`` frees the worker
    slot between pokes.

    :param spec: the stream: a :class:`StreamSpec`, a dict (templated) or a path to a YAML spec (a ``.yaml``
        / ``.yml`` file is rendered with Jinja).
    :param min_batches: completed micro-batches required in this run.
    :param min_input_rows: input rows required in this run (e.g. the number of events fed).
    :param poke_interval: time between pokes (seconds or a duration string such as ``"5s"``); default
        ``[airflow_streaming] progress_poll_interval`` (2). ``timeout`` takes a duration string too.
    :param conn_id: the Spark connection; overrides the spec's ``conn_id`` (see ``docs/precedence.md``).
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

    def poke(self, context: Context) -> PokeReturnValue:
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        with fail_fast_on_permanent_errors():
            return self._poke(spec_with_conn_id(self.spec, self.conn_id))

    def _poke(self, spec: StreamSpec) -> PokeReturnValue:
        hook = SparkStreamHook(spec)
        try:
            doc = hook.status()
            record = hook.driver_record()
        except (ControlFileError, StorageError) as exc:
            # Unreadable is not "failed": poke again (the sensor's timeout bounds the wait).
            self.log.warning("stream %s: control files unreadable, will poke again: %s", spec.name, exc)
            return PokeReturnValue(is_done=False)
        if doc is None or record is None or doc.run_id != record.run_id:
            self.log.info("stream %s: no status for the current run yet", spec.name)
            return PokeReturnValue(is_done=False)
        if doc.is_terminal or not hook.alive(record):
            err = doc.last_exception or {}
            raise StreamFailedError(
                f"stream {spec.name!r} is {doc.state if doc.is_terminal else 'gone (driver exited)'}: "
                f"[{err.get('error_class')}] {err.get('message')}"
            )
        totals = doc.totals
        self.log.info("stream %s: state %s, %s batches, %s input rows, %s quarantined, last batch %s",
                      spec.name, doc.state, totals["batches"], totals["input_rows"], totals["quarantined_rows"],
                      doc.last_batch_id())
        done = doc.state == contract.RUNNING and totals["batches"] >= self.min_batches and (
            totals["input_rows"] >= int(self.min_input_rows))
        return PokeReturnValue(is_done=done, xcom_value={**totals, "last_batch_id": doc.last_batch_id()})
