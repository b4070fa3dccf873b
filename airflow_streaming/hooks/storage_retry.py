"""Bounded retries of control-file reads on the Airflow side, with tenacity (an Airflow dependency).

The rule of :mod:`airflow_streaming.control.storage` holds through the retries: only a confirmed
absence is "absent" (``None``); a :class:`StorageError` that a retry may fix (EIO, a NameNode that did
not answer...) is retried with bounded exponential backoff, each failure logged, and the last one is
raised; one that a retry cannot fix (:data:`PERMANENT_ERRNOS`: permissions, a wrong path, bytes that
are not text) is raised at once, as is every other exception (a garbage file is a
``ControlFileError``, never retried).

Airflow side only: the driver side (``control/``, ``spark_jobs/``) imports no tenacity (see
``docs/architecture.md``, "The rule of the driver side").
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from airflow_streaming.control.storage import PERMANENT_ERRNOS, StorageError

log = logging.getLogger(__name__)

T = TypeVar("T")


def transient(exc: BaseException) -> bool:
    """Whether a retry may fix ``exc``: a :class:`StorageError` whose errno is not permanent."""
    return isinstance(exc, StorageError) and exc.errno not in PERMANENT_ERRNOS


def retrying(fn: Callable[[], T], what: str, attempts: int = 3, first_delay: float = 0.2,
             max_delay: float = 2.0) -> T:
    """Call ``fn``; retry a transient :class:`StorageError` up to ``attempts`` tries in all, waiting
    ``first_delay`` seconds, then twice as long each time (at most ``max_delay``), logging each failure
    with ``what``; raise the last error. A transient error costs a retry, never a wrong answer."""

    try:  # the common case, a read that works, costs no retry machinery (a triggerer reads thousands a second)
        return fn()
    except Exception as exc:
        if attempts <= 1 or not transient(exc):
            raise
        log.warning("%s failed (attempt 1/%d, retrying in %.1fs): %s", what, attempts, first_delay, exc)
    time.sleep(first_delay)

    def before_sleep(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        delay = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("%s failed (attempt %d/%d, retrying in %.1fs): %s", what, state.attempt_number + 1, attempts,
                    delay, exc)

    # Attempts 2..n: the n-th waits first_delay * 2**(n-1) before the next, as one Retrying over all would.
    retry = Retrying(retry=retry_if_exception(transient), stop=stop_after_attempt(attempts - 1),
                     wait=wait_exponential(multiplier=2 * first_delay, max=max_delay), before_sleep=before_sleep,
                     reraise=True)
    return retry(fn)
