"""Retries for deferrable tasks: Airflow 3.3's defer race.

Airflow 3.3 can fail a deferred task whose trigger fired soon after it deferred: when the executor's
report that the deferring process exited arrives after the task was queued or started again, the
scheduler takes it for a task "killed externally" (apache/airflow#66374, #67287, #72716; 3.3.2 guards only
the SCHEDULED state). Such a failure is a retry of the task. A lifecycle action's retry resumes it from its
record, taking over the lock its earlier try handed to the trigger
(:func:`~airflow_streaming.control.lifecycle_lock.adoptable`); a health sensor's retry watches again.

So a deferrable task of this provider whose DAG sets no ``retries`` (nor ``[core] default_task_retries``)
gets :data:`DEFERRED_RETRIES` retries, :data:`DEFERRED_RETRY_DELAY` apart; the task's own ``retries`` and
``retry_delay``, or its DAG's ``default_args``, always win. A failure that a retry cannot fix (a refused
upgrade, a FAILED stream) still fails the task without retries (:mod:`airflow_streaming.task_failures`).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

#: Retries of a deferrable task that sets none.
DEFERRED_RETRIES = 2
#: Their delay, unless the task or its DAG sets ``retry_delay``.
DEFERRED_RETRY_DELAY = timedelta(seconds=15)


def retry_deferred_task(task: Any, task_kwargs: dict[str, Any]) -> None:
    """Give a deferrable ``task`` its default retries unless it, its DAG's ``default_args`` or ``[core]
    default_task_retries`` set any. Call after ``BaseOperator.__init__`` with the task's ``**kwargs``."""
    given = {**(task_kwargs.get("default_args") or {}), **task_kwargs}
    # ``task.retries`` is ``[core] default_task_retries`` here unless the task or its DAG set it.
    if "retries" not in given and not task.retries:
        task.retries = DEFERRED_RETRIES
        if "retry_delay" not in given:
            task.retry_delay = DEFERRED_RETRY_DELAY
