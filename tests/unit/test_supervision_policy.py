"""Restart policy and failure classification (pure)."""

from __future__ import annotations

import pytest

from airflow_streaming.supervision.classification import FailureKind, classify
from airflow_streaming.supervision.policy import (
    BudgetAction as Action,
    RestartLedger,
    RestartPolicy,
    note_healthy,
    record_restart,
    restart_budget,
)


POLICY = RestartPolicy(max_attempts=3, validity_interval_s=600, backoff_initial_s=10, backoff_multiplier=2,
                       backoff_max_s=25, reset_after_healthy_s=300)


@pytest.mark.parametrize("error_class, message, exit_code, kind", [
    ("STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE", "Provided key schema does not match", 3, FailureKind.DETERMINISTIC),
    ("STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA", "", 3, FailureKind.DETERMINISTIC),
    ("AssertionError", "There are [1] sources in the checkpoint offsets and now there are [2]", 3,
     FailureKind.DETERMINISTIC),
    ("ApplicationNotFoundError", "application file /x.py does not exist", 4, FailureKind.DETERMINISTIC),
    (None, None, 4, FailureKind.DETERMINISTIC),
    ("STREAM_FAILED", "Connection reset by peer", 3, FailureKind.TRANSIENT),
    (None, None, None, FailureKind.TRANSIENT),  # a driver that vanished (SIGKILL, OOM killer)
    ("LEASE", "held", 5, FailureKind.NOT_A_FAILURE),
])
def test_classification(error_class, message, exit_code, kind):
    assert classify(error_class, message, exit_code).kind == kind


def test_the_same_error_class_three_times_in_a_row_becomes_deterministic():
    assert classify("STREAM_FAILED", "boom", 3, ["STREAM_FAILED"]).kind == FailureKind.TRANSIENT
    result = classify("STREAM_FAILED", "boom", 3, ["OTHER", "STREAM_FAILED", "STREAM_FAILED"])
    assert result.kind == FailureKind.DETERMINISTIC and "3 times in a row" in result.reason


def test_backoff_is_exponential_with_a_cap():
    assert [POLICY.backoff(n) for n in (1, 2, 3, 4)] == [10, 20, 25, 25]


def test_restart_waits_for_the_backoff_then_restarts():
    ledger = RestartLedger()
    waiting = restart_budget(POLICY, ledger, failed_at=1000, now=1004)
    assert waiting.action == Action.WAIT and waiting.attempt == 1 and waiting.wait_s == pytest.approx(6)
    go = restart_budget(POLICY, ledger, failed_at=1000, now=1010)
    assert go.action == Action.RESTART and (go.attempt, go.max_attempts) == (1, 3)


def test_attempts_exhausted_within_the_validity_interval_give_up():
    ledger = RestartLedger()
    for i, t in enumerate((1000, 1100, 1200)):
        assert restart_budget(POLICY, ledger, t, t + 100).action == Action.RESTART
        record_restart(ledger, f"run-{i}", t, "X")
    gave_up = restart_budget(POLICY, ledger, 1300, 1400)
    assert gave_up.action == Action.GIVE_UP and "3 restarts within 600s" in gave_up.reason


def test_failures_older_than_the_validity_interval_do_not_count():
    ledger = RestartLedger(failures=[0, 100, 200])
    decision = restart_budget(POLICY, ledger, failed_at=900, now=1000)
    assert decision.action == Action.RESTART and decision.attempt == 1  # 900 - 200 = 700 s > 600 s: none count
    assert restart_budget(POLICY, RestartLedger(failures=[850, 860, 870]), 900, 1000).action == Action.GIVE_UP


def test_counter_resets_after_a_healthy_period():
    ledger = RestartLedger(failures=[1000, 1100, 1200], error_classes=["X"] * 3)
    assert not note_healthy(ledger, POLICY, 1300)
    assert not note_healthy(ledger, POLICY, 1599)
    assert note_healthy(ledger, POLICY, 1600) and ledger.failures == []
    assert restart_budget(POLICY, ledger, 1700, 1720).attempt == 1


# Which failures are restarted at all (deterministic ones, a stream the supervisor gave up on, another run's
# lease) is the reconcile core's rule (reconcile/decision.py, tests/unit/test_reconcile_*.py): the policy only
# counts attempts and backs off.


def test_ledger_round_trip_and_policy_validation():
    ledger = RestartLedger(failures=[1.0], error_classes=["X"], healthy_since=2.0, handled_run_ids=["r"])
    assert RestartLedger.from_dict(ledger.to_dict()) == ledger
    assert RestartPolicy.from_mapping({"max_attempts": 2}).max_attempts == 2
    with pytest.raises(ValueError, match="restart_policy.max_atempts: unknown"):
        RestartPolicy.from_mapping({"max_atempts": 2})
    with pytest.raises(ValueError, match="restart_policy.backoff_multiplier: must be >= 1"):
        RestartPolicy.from_mapping({"backoff_multiplier": 0.5})


def test_the_wrapped_spark_error_class_is_found_in_the_message():
    from airflow_streaming.supervision.classification import root_error_class

    message = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: "
               "[STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] Provided value schema does not match")
    assert root_error_class("STREAM_FAILED", message) == "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
    assert classify("STREAM_FAILED", message, 3).kind == FailureKind.DETERMINISTIC
    assert root_error_class("STREAM_FAILED", "no inner class") == "STREAM_FAILED"


def test_spark_error_class_asks_getcondition_then_geterrorclass_and_never_raises():
    from airflow_streaming.supervision.classification import spark_error_class

    class Spark35Error(Exception):
        def getCondition(self):
            return None

        def getErrorClass(self):
            return "PATH_NOT_FOUND"

    class BrokenJavaThrowable:
        def getCondition(self):
            raise RuntimeError("py4j: not a SparkThrowable")

        getErrorClass = getCondition

    assert spark_error_class(Spark35Error()) == "PATH_NOT_FOUND"
    assert spark_error_class(BrokenJavaThrowable()) is None
    assert spark_error_class(ValueError("plain")) is None
