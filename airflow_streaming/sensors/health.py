"""Watch a stream's health: wait until healthy, watch for a window, or report."""

from __future__ import annotations

import time
import warnings
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue

from airflow_streaming.defer_race import retry_deferred_task
from airflow_streaming.deprecated_names import module_getattr
from airflow_streaming.exceptions import StreamFailedError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.operators.parameters import SpecFileTemplates, seconds_of, sensor_durations, spec_with_conn_id
from airflow_streaming.spec import StreamSpec
from airflow_streaming.task_failures import fail_fast_on_permanent_errors
from airflow_streaming.triggers.health import MODES, REPORT, WATCH, SparkStreamHealthTrigger, health_event
from airflow_streaming.ui.links import STREAM_LINKS

DEFAULT_FAIL_ON = ("FALLING_BEHIND", "STALLED", "FAILED", "STOPPED")


def default_deferrable() -> bool:
    """``[operators] default_deferrable`` (False when unset), as Airflow's own deferrable operators read it."""
    from airflow.providers.common.compat.sdk import conf

    return conf.getboolean("operators", "default_deferrable", fallback=False)


def emit_metrics(verdict: dict[str, Any]) -> None:
    """Per-stream gauges through Airflow's metrics (StatsD/OTel when configured; a no-op otherwise)."""
    from airflow.providers.common.compat.sdk import Stats

    from airflow_streaming.health.verdict import STATE_GAUGE, HealthState

    stream = verdict.get("stream") or "unknown"
    # The stream is in the name (plain StatsD has no tags) and in the tags (Datadog, InfluxDB, OTel).
    for key, value in (verdict.get("metrics") or {}).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            Stats.gauge(f"airflow_streaming.{stream}.{key}", value, tags={"stream": stream})
    Stats.gauge(f"airflow_streaming.{stream}.health_state", STATE_GAUGE[HealthState(verdict["state"])],
                tags={"stream": stream})


def _split_modes(mode: str | None, health_mode: str | None) -> tuple[str, str]:
    """``(Airflow sensor mode, health mode)`` from the arguments, accepting the old spelling ``mode="watch"``.

    Until 0.1 the health mode was passed as ``mode``, which shadowed ``BaseSensorOperator.mode``. The
    three health words and Airflow's two modes do not overlap, so an old ``mode="watch"`` is mapped to
    ``health_mode="watch"`` with a :class:`DeprecationWarning`; giving both spellings is an error.
    """
    if mode in MODES:
        if health_mode is not None:
            raise ValueError(f"mode={mode!r} is a health mode, and health_mode={health_mode!r} is given too: the "
                             "health mode is health_mode=; mode= is Airflow's sensor mode (poke or reschedule)")
        warnings.warn(f"SparkStreamHealthSensor(mode={mode!r}) is deprecated: use health_mode={mode!r}. mode= is "
                      "Airflow's sensor mode (poke or reschedule).", DeprecationWarning, stacklevel=3)
        return "poke", mode
    health_mode = "wait_healthy" if health_mode is None else health_mode
    if health_mode not in MODES:
        raise ValueError(f"health_mode: must be one of {', '.join(MODES)}, got {health_mode!r}")
    return mode or "poke", health_mode


class SparkStreamHealthSensor(SpecFileTemplates, BaseSensorOperator):
    """Judge a stream from its own ``status`` and ``recentProgress`` (see ``airflow_streaming.health``).

    Health modes (``health_mode``):

    - ``wait_healthy`` (default): succeed once HEALTHY or IDLE; fail if FAILED or STOPPED.
    - ``watch``: watch for ``watch_seconds`` and fail on the first verdict in ``fail_on``
      (FALLING_BEHIND, STALLED, FAILED, STOPPED by default); succeed when the window ends.
    - ``report``: one verdict, pushed to XCom, never fails on health.

    How it waits is Airflow's business, as for any sensor: ``mode="poke"`` (default) holds a worker
    slot and polls every ``poke_interval``; ``mode="reschedule"`` frees the slot between polls;
    ``deferrable=True`` computes one verdict in the worker and, if that does not decide, hands the
    polling to the triggerer (no worker slot held) with a deferral timeout of ``timeout``. The default
    of ``deferrable`` is ``[operators] default_deferrable`` (False unless configured), like Airflow's
    own deferrable operators. ``timeout`` (Airflow's sensor timeout, default ``[sensors]
    default_timeout``) bounds the whole wait in every mode; in ``watch`` it must cover the window.

    Each poll logs one line: stream, state, reasons. The verdict dict is returned (XCom), and per-stream
    gauges (input/processing rate, batch duration, state rows, watermark lag, health state) are emitted.
    A FAILED or STOPPED stream (or a bad verdict in ``watch``) fails the task without retries.

    :param spec: the stream: a :class:`StreamSpec`, a dict (templated) or a YAML path (a ``.yaml`` / ``.yml``
        file is rendered with Jinja).
    :param health_mode: ``wait_healthy`` | ``watch`` | ``report``. (The old spelling ``mode="watch"``
        still works, with a DeprecationWarning.)
    :param watch_seconds: ``watch``: length of the window (seconds or a duration string such as ``"10 minutes"``).
    :param fail_on: ``watch``: the states that fail the task.
    :param deferrable: poll from the triggerer; default ``[operators] default_deferrable``. A deferrable
        sensor that sets no ``retries`` gets two, 15 s apart (:mod:`airflow_streaming.defer_race`); a bad
        verdict still fails it without retries.
    :param poke_interval: time between verdicts (seconds or a duration string); default ``[airflow_streaming]
        health_poll_interval`` (10). ``timeout`` takes a duration string too.
    :param conn_id: the Spark connection; overrides the spec's ``conn_id`` (see ``docs/precedence.md``).
    """

    template_fields: Sequence[str] = ("spec",)
    operator_extra_links = STREAM_LINKS

    def __init__(self, *, spec: StreamSpec | Mapping[str, Any] | str, health_mode: str | None = None,
                 watch_seconds: float | str = 300.0, fail_on: Sequence[str] = DEFAULT_FAIL_ON,
                 deferrable: bool | None = None, conn_id: str | None = None, **kwargs: Any) -> None:
        sensor_durations(self, kwargs)
        watch_seconds = seconds_of(watch_seconds, "watch_seconds", f"{type(self).__name__}(task_id="
                                   f"{kwargs.get('task_id')!r})")  # type: ignore[assignment]
        sensor_mode, health_mode = _split_modes(kwargs.pop("mode", None), health_mode)
        if "poke_interval" not in kwargs:
            from airflow_streaming.config import get_float

            kwargs["poke_interval"] = get_float("health_poll_interval")
        super().__init__(mode=sensor_mode, **kwargs)
        if health_mode == WATCH and watch_seconds > self.timeout:
            raise ValueError(f"watch_seconds ({watch_seconds:g}s) is longer than the sensor's timeout "
                             f"({self.timeout:g}s): the window could never end; raise timeout=")
        self.spec = spec
        self.health_mode = health_mode
        self.watch_seconds = watch_seconds
        self.fail_on = tuple(fail_on)
        self.conn_id = conn_id
        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        if self.deferrable:  # Airflow 3.3's defer race: a retry watches again (airflow_streaming.defer_race)
            retry_deferred_task(self, kwargs)

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        # One verdict here first (like Airflow's deferrable sensors): a stream that is already healthy,
        # failed or reported needs no trip through the triggerer.
        started = time.time()
        with fail_fast_on_permanent_errors():
            spec = spec_with_conn_id(self.spec, self.conn_id)
            verdict = self._verdict(spec)
            event = health_event(self.health_mode, verdict, started, time.time(), self.watch_seconds, self.fail_on)
            self._log_verdict(verdict)
            if event is not None:
                return self._finish(event)
        self.defer(trigger=SparkStreamHealthTrigger(spec.to_dict(), self.health_mode, float(self.poke_interval),
                                                  self.watch_seconds, self.fail_on, started=started),
                   method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def poke(self, context: Context) -> PokeReturnValue:
        with fail_fast_on_permanent_errors():
            verdict = self._verdict(spec_with_conn_id(self.spec, self.conn_id))
            event = health_event(self.health_mode, verdict, self._started_at(context), time.time(), self.watch_seconds,
                           self.fail_on)
            self._log_verdict(verdict)
            if event is None:
                return PokeReturnValue(is_done=False)
            return PokeReturnValue(is_done=True, xcom_value=self._finish(event))

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") == "error":
            # The trigger could not compute a verdict (storage or cluster unreachable): retryable.
            raise RuntimeError(f"health watch failed: {event.get('message')}")
        with fail_fast_on_permanent_errors():
            self._log_verdict(event["verdict"])
            return self._finish(event)

    @staticmethod
    def _verdict(spec: StreamSpec) -> dict[str, Any]:
        return SparkStreamHook(spec).health().to_dict()

    def _started_at(self, context: Context) -> float:
        """When the watch began: the first poke of this try (``poke``) or of the first reschedule."""
        if self.reschedule:
            first = context["ti"].get_first_reschedule_date(context)
            if first is not None:
                return first.timestamp()
        if getattr(self, "_poke_started", None) is None:
            self._poke_started = time.time()
        return self._poke_started

    def _log_verdict(self, verdict: dict[str, Any]) -> None:
        reasons = "; ".join(r["message"] for r in verdict.get("reasons", []))
        warnings_text = "; ".join(w["message"] for w in verdict.get("warnings", []))
        self.log.info("stream %s: %s - %s%s", verdict.get("stream"), verdict["state"], reasons,
                      f" | warnings: {warnings_text}" if warnings_text else "")

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


__getattr__ = module_getattr(__name__, 'StreamingHealthSensor')  # the old name, deprecated
