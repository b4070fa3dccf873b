"""Is a stream's failure worth a restart? Deterministic failures are not retried; transient ones are."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Any


class FailureKind(str, Enum):
    TRANSIENT = "TRANSIENT"
    DETERMINISTIC = "DETERMINISTIC"
    NOT_A_FAILURE = "NOT_A_FAILURE"


#: Spark error classes that a restart from the same checkpoint with the same code cannot fix.
DETERMINISTIC_ERROR_CLASSES = frozenset({
    "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE",
    "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE",
    "STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA",
    "BATCH_METADATA_NOT_FOUND",
    "STATE_STORE_INVALID_CONFIG_AFTER_RESTART",
    "STREAM_FAILED_INVALID_CHECKPOINT",
    "UNRESOLVED_COLUMN",
    "UNRESOLVED_COLUMN.WITH_SUGGESTION",
    "PATH_NOT_FOUND",
    "DATATYPE_MISMATCH",
    "SCHEMA_NOT_FOUND",
    "TABLE_OR_VIEW_NOT_FOUND",
    "ApplicationNotFoundError",
    "FileNotFoundError",
    "SyntaxError",
    "ModuleNotFoundError",
    "ImportError",
})
#: Message fragments of deterministic failures whose error class is generic (STREAM_FAILED, AssertionError).
DETERMINISTIC_MESSAGES = (
    "sources in the checkpoint offsets and now there are",
    "Wrong basePath",
    "does not exist",
    "is not a valid",
    "AnalysisException",
)


_BRACKETED = re.compile(r"\[([A-Z][A-Z0-9_]+(?:\.[A-Z0-9_]+)?)\]")
_WRAPPERS = {"STREAM_FAILED", "SparkInternalError", "StreamingQueryException", "Py4JJavaError"}


def root_error_class(error_class: str | None, message: str | None) -> str | None:
    """The most specific Spark error class: ``STREAM_FAILED`` wraps the real one, which Spark prints in
    brackets in the message (``[STREAM_FAILED] ... [STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE] ...``)."""
    if error_class and error_class not in _WRAPPERS:
        return error_class
    for found in _BRACKETED.findall(message or ""):
        if found not in _WRAPPERS:
            return found
    return error_class


def spark_error_class(exc: Any) -> str | None:
    """Spark's error class of ``exc`` - a PySpark exception or a py4j Java throwable, which have the same
    accessors: ``getCondition()`` (Spark 4), else ``getErrorClass()`` (3.5); ``None`` when it has neither,
    they fail, or they name none. Never raises (an :class:`Exception`)."""
    for getter in ("getCondition", "getErrorClass"):
        try:
            value = getattr(exc, getter)()
        except Exception:  # noqa: BLE001 - not a SparkThrowable, or py4j could not ask
            value = None
        if value:
            return str(value)
    return None


@dataclass(frozen=True)
class Classification:
    kind: FailureKind
    reason: str


def classify(error_class: str | None, message: str | None, exit_code: int | None,
             previous_error_classes: list[str | None] = (), repeat_limit: int = 3) -> Classification:
    """Classify one failure given the error classes of the failures just before it (newest last).

    - exit code 5 (another driver holds the lease): not a failure of this stream to restart;
    - a known deterministic error class or message (state schema, operators, sink metadata, missing
      paths/columns, missing application, bad code): DETERMINISTIC;
    - startup failure (exit code 4) with no error class: DETERMINISTIC (bad application or conf);
    - the same error class ``repeat_limit`` times in a row: DETERMINISTIC (retrying will not help);
    - anything else (lost executors, network, killed driver, OOM...): TRANSIENT.
    """
    text = message or ""
    error_class = root_error_class(error_class, message)
    if exit_code == 5:
        return Classification(FailureKind.NOT_A_FAILURE, "another driver holds the stream's lease")
    if error_class in DETERMINISTIC_ERROR_CLASSES:
        return Classification(FailureKind.DETERMINISTIC, f"{error_class} cannot be fixed by a restart")
    for fragment in DETERMINISTIC_MESSAGES:
        if fragment in text:
            return Classification(FailureKind.DETERMINISTIC, f"{error_class or 'error'}: '{fragment}' cannot be fixed "
                                                             "by a restart")
    if exit_code == 4 and not error_class:
        return Classification(FailureKind.DETERMINISTIC, "the driver failed at startup (application or configuration)")
    if error_class and len(previous_error_classes) >= repeat_limit - 1 and all(
            c == error_class for c in list(previous_error_classes)[-(repeat_limit - 1):]):
        return Classification(FailureKind.DETERMINISTIC, f"{error_class} {repeat_limit} times in a row")
    return Classification(FailureKind.TRANSIENT, f"{error_class or 'driver exit'}: retryable")
