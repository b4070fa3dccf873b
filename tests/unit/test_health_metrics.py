"""Per-stream health gauges go out through Airflow's metrics to a real StatsD (UDP) listener."""

from __future__ import annotations

import socket

import pytest

from airflow_streaming.health.verdict import HealthState, HealthVerdict, Reason
from airflow_streaming.sensors.health import emit_metrics


@pytest.fixture
def statsd_listener(monkeypatch):
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(3)
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "True")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_HOST", "127.0.0.1")
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PORT", str(sock.getsockname()[1]))
    monkeypatch.setenv("AIRFLOW__METRICS__STATSD_PREFIX", "airflow")
    reinitialize = _stats_reinitializer()
    reinitialize()
    try:
        yield sock
    finally:
        monkeypatch.setenv("AIRFLOW__METRICS__STATSD_ON", "False")
        reinitialize()
        sock.close()


def _stats_reinitializer():
    """A function that makes Airflow's ``Stats`` read the ``[metrics]`` settings again (3.2+: the task
    SDK's stats module; 3.1: the core's ``airflow.stats``, whose logger factory is picked at import)."""
    try:
        from airflow.sdk._shared.observability.metrics import stats
        from airflow.sdk.observability.metrics import stats_utils
    except ImportError:  # Airflow 3.1
        from airflow.configuration import conf
        from airflow.metrics.base_stats_logger import NoStatsLogger
        from airflow.metrics.statsd_logger import get_statsd_logger
        from airflow.stats import Stats

        def reinitialize_core() -> None:
            type(Stats).factory = get_statsd_logger if conf.getboolean("metrics", "statsd_on") else NoStatsLogger
            Stats.instance = None  # the logger is cached on the class itself on first use

        return reinitialize_core
    return lambda: stats.initialize(factory=stats_utils.get_stats_factory(), export_legacy_names=True)


def test_gauges_reach_statsd_with_the_stream_in_the_name(statsd_listener):
    verdict = HealthVerdict("orders-etl", HealthState.FALLING_BEHIND, (Reason("X", "slow"),),
                            metrics={"input_rows_per_s": 120.5, "processed_rows_per_s": 80.0, "batch_duration_ms": 2500,
                                     "state_rows": 42, "watermark_lag_s": None, "last_batch_id": 7})
    emit_metrics(verdict.to_dict())
    lines = set()
    try:
        while True:
            lines.update(statsd_listener.recv(65535).decode().splitlines())
    except socket.timeout:
        pass
    assert "airflow.airflow_streaming.orders-etl.input_rows_per_s:120.5|g" in lines
    assert "airflow.airflow_streaming.orders-etl.processed_rows_per_s:80.0|g" in lines
    assert "airflow.airflow_streaming.orders-etl.batch_duration_ms:2500|g" in lines
    assert "airflow.airflow_streaming.orders-etl.state_rows:42|g" in lines
    assert "airflow.airflow_streaming.orders-etl.health_state:1|g" in lines  # FALLING_BEHIND
    assert not any("watermark_lag_s" in line for line in lines)  # unknown values are not sent
