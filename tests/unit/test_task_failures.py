"""Which failures Airflow retries: permanent ones become AirflowFailException (message kept, cause chained)."""

from __future__ import annotations

import traceback

import pytest
from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException, AirflowSensorTimeout

from airflow_streaming.compat.run import IncompatibleCandidateError
from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import (
    ApplicationNotFoundError,
    DriverStartError,
    JavaNotFoundError,
    StreamAlreadyRunningError,
    StreamFailedError,
    StreamingError,
    StreamStateUnknownError,
)
from airflow_streaming.lifecycle.operations import LifecycleOutcomeError
from airflow_streaming.lifecycle.runner import LifecycleError
from airflow_streaming.spec import SpecError
from airflow_streaming.task_failures import fail_fast_on_permanent_errors, is_retryable, original_error

OUTCOME = {"action": "upgrade", "stream": "s1", "to_version": "v2", "outcome": "REFUSED", "error": "INCOMPATIBLE"}

PERMANENT = [
    SpecError("application", "is required"),
    ValueError("no deploy target for master 'mesos://x' in client mode"),
    ControlFileError("/c/s1/lifecycle.json: not valid JSON; move it aside"),  # a person must repair it
    StreamAlreadyRunningError("stream 's1' is already running: pid 42"),
    ApplicationNotFoundError("application file /x.py does not exist; nothing was submitted"),
    JavaNotFoundError("Spark needs Java 17"),
    StreamFailedError("stream s1 is FAILED: query failed"),
    IncompatibleCandidateError("job v2 is INCOMPATIBLE with the checkpoint /c"),
    LifecycleOutcomeError(OUTCOME),
    DriverStartError("driver of stream 's1' failed while starting: [ModuleNotFoundError] No module named 'x'",
                     error_class="ModuleNotFoundError", exit_code=4),
    DriverStartError("driver of stream 's1' failed while starting: "
                     "[STREAM_FAILED] [STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] ...",
                     error_class="STREAM_FAILED", exit_code=3),
    DriverStartError("driver of stream 's1' failed while starting (exit code 4: startup failed)", exit_code=4),
]
RETRYABLE = [
    StorageError(5, "cannot read /c/s1/history.json: Input/output error"),
    StreamStateUnknownError("cannot tell whether stream 's1' runs: master unreachable"),
    LifecycleError("upgrade of s1 stopped before its next side effect: the lock was lost"),
    StreamingError("stream 's1' has an unfinished upgrade"),
    TimeoutError("stream 's1' did not stop within 60s"),
    OSError("connection reset"),
    DriverStartError("driver of stream 's1' failed while starting: [RuntimeError] cannot reach cfg.internal:8443",
                     error_class="RuntimeError", exit_code=4),
    DriverStartError("stream 's1' did not report progress within 180s; the driver was stopped", timed_out=True),
    DriverStartError("driver of stream 's1' failed while starting (exit code 5: another driver holds the lease)",
                     exit_code=5),
]


@pytest.mark.parametrize("exc", PERMANENT, ids=lambda e: type(e).__name__)
def test_permanent_failures_fail_the_task_at_once_keeping_message_and_cause(exc):
    assert not is_retryable(exc)
    with pytest.raises(AirflowFailException) as raised:
        with fail_fast_on_permanent_errors():
            raise exc
    assert str(raised.value) == str(exc)
    # The original is kept (and its traceback) but not chained: Airflow logs a failed task's exception with
    # its whole chain, and a chained original would print the same message twice in the task log.
    assert original_error(raised.value) is exc and raised.value.__cause__ is None
    assert raised.value.__suppress_context__
    printed = "".join(traceback.format_exception(raised.value))
    assert printed.count(str(exc).splitlines()[0]) == 1, printed
    assert "raise exc" in printed  # where the original was raised is still shown, and what it was
    assert f"{type(exc).__qualname__}: a permanent failure, not retried" in printed


@pytest.mark.parametrize("exc", RETRYABLE, ids=lambda e: type(e).__name__)
def test_retryable_failures_pass_through_unchanged(exc):
    assert is_retryable(exc)
    with pytest.raises(type(exc)) as raised:
        with fail_fast_on_permanent_errors():
            raise exc
    assert raised.value is exc


@pytest.mark.parametrize("exc", [AirflowSensorTimeout("timed out"), AirflowFailException("already final"),
                                 AirflowException("generic")])
def test_airflows_own_exceptions_keep_their_meaning(exc):
    with pytest.raises(type(exc)) as raised:
        with fail_fast_on_permanent_errors():
            raise exc
    assert raised.value is exc


def test_nothing_raised_nothing_changed():
    with fail_fast_on_permanent_errors():
        value = 1
    assert value == 1
