"""Which failures of the provider's tasks Airflow should retry, and which end the task at once.

A failure that the same task would hit again on its next try - a bad spec, an incompatible upgrade,
a stream that already runs, a missing application, a driver that fails deterministically at start -
raises :class:`AirflowFailException` (chained to the original error, with its message): Airflow then
fails the task without using its retries. Everything else (storage or cluster errors, a stream state
that cannot be told right now, a lock held by another action, a driver that died of something
transient) is raised unchanged, and the task's ``retries`` apply.

The operators and sensors run their work inside :func:`fail_fast_on_permanent_errors`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from airflow_streaming.exceptions import (
    ApplicationNotFoundError,
    DriverStartError,
    JavaNotFoundError,
    StreamAlreadyRunningError,
    StreamFailedError,
)

#: Failures that a retry of the same task cannot fix. ``ValueError`` covers ``SpecError``, every other
#: invalid setting (the provider raises ``ValueError`` for bad configuration) and ``ControlFileError`` (a
#: control file that exists but cannot be understood: a person has to repair or move it).
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (
    ValueError,
    StreamAlreadyRunningError,
    ApplicationNotFoundError,
    JavaNotFoundError,
    StreamFailedError,
)


def _permanent_by_name() -> tuple[type[BaseException], ...]:
    """Permanent errors defined in modules that import heavier code (imported lazily)."""
    from airflow_streaming.compat.run import IncompatibleCandidateError
    from airflow_streaming.lifecycle.operations import LifecycleOutcomeError

    return (IncompatibleCandidateError, LifecycleOutcomeError)


def is_retryable(exc: BaseException) -> bool:
    """Whether an Airflow retry of the task that raised ``exc`` can succeed.

    Not retryable: ``ValueError`` (``SpecError``, other bad settings, ``ControlFileError``),
    ``StreamAlreadyRunningError``,
    ``ApplicationNotFoundError``, ``JavaNotFoundError``, ``StreamFailedError``,
    ``IncompatibleCandidateError``, ``LifecycleOutcomeError`` (an action that ended REFUSED /
    ROLLED_BACK / FAILED and is recorded as such) and a ``DriverStartError`` that
    :meth:`DriverStartError.is_deterministic` says a restart cannot fix. Everything else is retryable.
    """
    if isinstance(exc, DriverStartError):
        return not exc.is_deterministic()
    return not isinstance(exc, PERMANENT_ERRORS + _permanent_by_name())


@contextlib.contextmanager
def fail_fast_on_permanent_errors() -> Iterator[None]:
    """Re-raise a permanent failure as ``AirflowFailException``; let Airflow's own exceptions and
    retryable failures through unchanged.

    The ``AirflowFailException`` has the original's message and carries the original's traceback (where
    it was raised) and the original itself as ``original`` (see :func:`original_error`) - but is not
    *chained* to it: Airflow logs a failed task's exception with its whole chain, and a chained original
    would print the same message twice in the task log."""
    from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException

    try:
        yield
    except AirflowException:
        raise  # Airflow's own signals (fail, skip, sensor timeout, ...) keep their meaning
    except Exception as exc:
        if is_retryable(exc):
            raise
        fail = AirflowFailException(str(exc))
        fail.original = exc  # type: ignore[attr-defined]
        fail.add_note(f"({type(exc).__module__}.{type(exc).__qualname__}: a permanent failure, not retried)")
        raise fail.with_traceback(exc.__traceback__) from None


def original_error(exc: BaseException) -> BaseException:
    """The error :func:`fail_fast_on_permanent_errors` turned into ``exc`` (``exc`` itself otherwise)."""
    return getattr(exc, "original", None) or exc
