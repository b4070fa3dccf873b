"""Watch a stream's health: wait until healthy, watch for a window, or report."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from airflow_streaming.exceptions import StreamFailedError
from airflow_streaming.hooks.streaming_job import StreamingJobHook
from airflow_streaming.spec import StreamSpec, as_spec
from airflow_streaming.triggers.health import MODES, REPORT, WATCH, StreamingHealthTrigger, decide
from airflow_streaming.ui.links import STREAM_LINKS


def _default_deferrable() -> bool:
    try:
        from airflow.configuration import conf

        return conf.getboolean("operators", "default_deferrable", fallback=True)
    except Exception:  # noqa: BLE001
        return True


def emit_metrics(verdict: dict[str, Any]) -> None:
    """Per-stream gauges through Airflow's metrics (StatsD/OTel when configured; a no-op otherwise)."""
    from airflow.sdk.observability.stats import Stats

    from airflow_streaming.health.verdict import STATE_GAUGE, HealthState

    stream = verdict.get("stream") or "unknown"
    # The stream is in the name (plain StatsD has no tags) and in the tags (Datadog, InfluxDB, OTel).
    for key, value in (verdict.get("metrics") or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            Stats.gauge(f"airflow_streaming.{stream}.{key}", value, tags={"stream": stream})
    Stats.gauge(f"airflow_streaming.{stream}.health_state", STATE_GAUGE[HealthState(verdict["state"])],
                tags={"stream": stream})


class StreamingHealthSensor(BaseSensorOperator):
    """Judge a stream from its own ``status`` and ``recentProgress`` (see ``airflow_streaming.health``).

    Modes:

    - ``wait_healthy`` (default): succeed once HEALTHY or IDLE; fail if FAILED or STOPPED.
    - ``watch``: watch for ``watch_seconds`` and fail on the first verdict in ``fail_on``
      (FALLING_BEHIND, STALLED, FAILED, STOPPED by default); succeed when the window ends.
    - ``report``: one verdict, pushed to XCom, never fails on health.

    Deferrable by default (the triggerer polls; no worker slot is held); ``deferrable=False`` pokes.
    Each poll logs one line: stream, state, reasons. The verdict dict is returned (XCom), and per-stream
    gauges (input/processing rate, batch duration, state rows, watermark lag, health state) are emitted.

    :param spec: the stream: a :class:`StreamSpec`, a dict (templated) or a YAML path.
    :param mode: ``wait_healthy`` | ``watch`` | ``report``.
    :param watch_seconds: ``watch`` mode: length of the window.
    :param fail_on: ``watch`` mode: the states that fail the task.
    :param deferrable: poll from the triggerer (default from ``[operators] default_deferrable``, True).
    """

    template_fields: Sequence[str] = ("spec",)
    operator_extra_links = STREAM_LINKS

    def __init__(self, *, spec: StreamSpec | Mapping[str, Any] | str, mode: str = "wait_healthy",
                 watch_seconds: float = 300.0,
                 fail_on: Sequence[str] = ("FALLING_BEHIND", "STALLED", "FAILED", "STOPPED"),
                 deferrable: bool | None = None, **kwargs: Any) -> None:
        if mode not in MODES:
            raise ValueError(f"mode: must be one of {', '.join(MODES)}, got {mode!r}")
        kwargs.setdefault("poke_interval", 10)
        super().__init__(**kwargs)
        self.spec = spec
        self.health_mode = mode
        self.watch_seconds = watch_seconds
        self.fail_on = tuple(fail_on)
        self.deferrable = _default_deferrable() if deferrable is None else deferrable
        self._started: float | None = None

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            self._started = time.time()
            return super().execute(context)
        spec = as_spec(self.spec)
        self.defer(trigger=StreamingHealthTrigger(spec.to_dict(), self.health_mode, float(self.poke_interval),
                                                  self.watch_seconds, self.fail_on),
                   method_name="execute_complete")

    def poke(self, context: Context) -> PokeReturnValue:
        spec = as_spec(self.spec)
        verdict = StreamingJobHook(spec).health().to_dict()
        event = decide(self.health_mode, verdict, self._started or time.time(), time.time(), self.watch_seconds,
                       self.fail_on)
        self._log_verdict(verdict)
        if event is None:
            return PokeReturnValue(is_done=False)
        return PokeReturnValue(is_done=True, xcom_value=self._finish(event))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") == "error":
            raise StreamFailedError(f"health watch failed: {event.get('message')}")
        self._log_verdict(event["verdict"])
        return self._finish(event)

    def _log_verdict(self, verdict: dict[str, Any]) -> None:
        reasons = "; ".join(r["message"] for r in verdict.get("reasons", []))
        warnings = "; ".join(w["message"] for w in verdict.get("warnings", []))
        self.log.info("stream %s: %s - %s%s", verdict.get("stream"), verdict["state"], reasons,
                      f" | warnings: {warnings}" if warnings else "")

    def _finish(self, event: dict[str, Any]) -> dict[str, Any]:
        verdict = event["verdict"]
        try:
            emit_metrics(verdict)
        except Exception:  # noqa: BLE001 - metrics never fail a task
            self.log.warning("could not emit metrics", exc_info=True)
        if event["status"] == "unhealthy" and self.health_mode != REPORT:
            reasons = "; ".join(r["message"] for r in verdict.get("reasons", []))
            raise StreamFailedError(f"stream {verdict.get('stream')} is {verdict['state']}: {reasons}")
        if self.health_mode == WATCH:
            self.log.info("stream %s stayed healthy for the %.0fs window", verdict.get("stream"), self.watch_seconds)
        return verdict
