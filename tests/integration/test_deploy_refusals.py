"""Deploys that must fail: missing application (before submit), a driver that crashes while starting."""

from __future__ import annotations

import os

import pytest

from airflow_streaming.control import contract
from airflow_streaming.exceptions import ApplicationNotFoundError, DriverStartError
from airflow_streaming.lifecycle.operations import deploy_stream
import stream_actions


def test_missing_application_fails_before_anything_is_submitted(streams):
    missing = streams.path("apps", "no_such_job.py")
    hook = streams.hook(streams.spec("ghost", missing, []))
    with pytest.raises(ApplicationNotFoundError, match=f"application file {missing} does not exist"):
        deploy_stream(hook.spec)  # the product's deploy: refused before its lock, record or submission
    # Nothing was written or started: no marker, no driver record, no log, no lock.
    assert not os.path.exists(hook.paths.root)


@pytest.mark.spark
def test_driver_crash_at_start_fails_the_deploy_with_the_drivers_error(streams, tmp_path):
    app = tmp_path / "crashing_job.py"
    app.write_text(
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "raise RuntimeError('cannot reach the config service at cfg.internal:8443')\n"
    )
    hook = streams.hook(streams.spec("crashy", str(app), []))
    record = stream_actions.submit(hook)
    with pytest.raises(DriverStartError) as err:
        hook.wait_until_ready(record)
    message = str(err.value)
    assert "cannot reach the config service at cfg.internal:8443" in message
    assert "exit code 4: startup failed" in message
    doc = hook.status()
    assert doc.state == contract.FAILED and doc.exit["code"] == contract.EXIT_STARTUP_FAILED
    assert doc.last_exception["error_class"] == "RuntimeError"
    assert not hook.alive(record)
    # The failed driver released its lease: a fixed deploy is not blocked by it.
    assert hook.running_driver() is None
