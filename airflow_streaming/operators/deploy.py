"""Deploy a managed stream and return once it reports progress."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_streaming.control.contract import DriverRecord
from airflow_streaming.hooks.streaming_job import StreamingJobHook
from airflow_streaming.spec import StreamSpec, as_spec


class SparkStreamDeployOperator(BaseOperator):
    """Submit a stream's driver (detached) through the Spark provider and wait for its first progress.

    Refuses before submitting when the stream already runs, the application file is missing or Java
    is not usable. Fails with the driver's own error when the driver dies while starting.
    Returns (XCom) the run's identity: stream, version, run_id, submit_pid, driver_pid, app_id,
    spark_ui, control_dir, log_path.

    :param spec: the stream: a :class:`StreamSpec`, a dict (templated) or a path to a YAML spec.
    :param wait_for_progress: wait until the query reports progress (default) or return after submit.
    :param startup_timeout: seconds to wait for progress; default: the spec's ``startup_timeout``.
    """

    template_fields: Sequence[str] = ("spec",)
    ui_color = "#d4f1c5"

    def __init__(
        self,
        *,
        spec: StreamSpec | Mapping[str, Any] | str,
        wait_for_progress: bool = True,
        startup_timeout: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.wait_for_progress = wait_for_progress
        self.startup_timeout = startup_timeout
        self._hook: StreamingJobHook | None = None
        self._record: DriverRecord | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        spec = as_spec(self.spec)
        self._hook = hook = StreamingJobHook(spec)
        self._record = record = hook.submit()
        self.log.info("stream %s %s submitted: run %s, spark-submit pid %s, log %s",
                      spec.name, spec.version, record.run_id, record.submit_pid, record.log_path)
        identity: dict[str, Any] = {
            "stream": spec.name, "version": spec.version, "run_id": record.run_id,
            "submit_pid": record.submit_pid, "control_dir": spec.control_dir, "log_path": record.log_path,
        }
        if self.wait_for_progress:
            doc = hook.wait_until_ready(record, self.startup_timeout)
            identity.update(driver_pid=doc.pid, app_id=doc.app_id, spark_ui=doc.spark_ui)
            self.log.info("stream %s is running: app %s, driver pid %s, Spark UI %s", spec.name, doc.app_id,
                          doc.pid, doc.spark_ui)
        return identity

    def on_kill(self) -> None:
        # Killed while waiting for the start: ask the half-started driver to stop (never raises).
        if self._hook is not None and self._record is not None:
            try:
                self._hook.request_stop()
            except Exception:  # noqa: BLE001
                self.log.exception("could not request the stop of stream run %s", self._record.run_id)
