"""Deferrable glue for the lifecycle operators: nothing waits in a worker slot.

A lifecycle action (deploy, stop, upgrade, restart, rollback, any operation of the operations DAG)
runs in the worker only for its short steps. At every wait - a deploy's first progress, a driver's
exit, the compatibility gate, a probation, a parallel stream catching up - the runner (deferrable
mode) saves its record, hands its lifecycle lock to the trigger and raises ``WaitNeeded``; the
operator defers to :class:`~airflow_streaming.triggers.lifecycle.SparkStreamLifecycleTrigger`, and when it
fires, runs the action again with the handed-over locks: it resumes from the record. A worker or
triggerer restart in between loses nothing: the record and the lock (renewed by holder id) are on the
control storage.

A deferrable lifecycle task that sets no retries gets some: Airflow 3.3 can fail a deferred task whose
trigger fired early, and the retry resumes the action (:mod:`airflow_streaming.defer_race`).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from airflow_streaming.defer_race import retry_deferred_task
from airflow_streaming.lifecycle.waits import WaitNeeded

#: Extra time the deferral may take beyond the wait's own deadline before Airflow times the task out.
DEFERRAL_MARGIN_S = 900.0


def default_deferrable() -> bool:
    """``[operators] default_deferrable``, as Airflow's own operators read it (default False)."""
    try:
        from airflow.configuration import conf

        return conf.getboolean("operators", "default_deferrable", fallback=False)
    except Exception:  # noqa: BLE001 - no Airflow configuration (a plain Python caller)
        return False


def lifecycle_poll_interval() -> float:
    """``[airflow_streaming] lifecycle_poll_interval``: the trigger's poll interval (seconds)."""
    from airflow_streaming.config import get_float

    return get_float("lifecycle_poll_interval")


class DeferrableLifecycleMixin:
    """Runs ``self._action(context, resume)`` and defers while it waits (``self.deferrable``).

    Operators using it define ``_act(context, resume: dict | None)`` (``resume``: the locks handed
    back by the trigger; ``None`` on the first run), call :meth:`_set_deferrable` in ``__init__`` and run
    their action with ``LifecycleOptions(defer=self.deferrable)``; ``execute`` runs it (:meth:`_action`: a
    permanent failure fails the task without retries; an operator may override ``_action``). Not deferrable:
    the action runs once and waits in the worker, as before.
    """

    deferrable: bool
    poll_interval: float

    def _set_deferrable(self, deferrable: bool | None, poll_interval: float | str | None,
                        operator_kwargs: dict[str, Any]) -> None:
        """Call after ``BaseOperator.__init__`` with the operator's ``**kwargs`` (they carry the task's own
        ``retries``/``retry_delay`` and the DAG's ``default_args``). ``poll_interval``: seconds or a duration
        string (``"30s"``), checked here, when the DAG is parsed."""
        from airflow_streaming.operators.parameters import seconds_of

        self.deferrable = default_deferrable() if deferrable is None else bool(deferrable)
        self.poll_interval = lifecycle_poll_interval() if poll_interval is None else \
            seconds_of(poll_interval, "poll_interval", self)  # type: ignore[assignment]
        if self.deferrable:
            retry_deferred_task(self, operator_kwargs)

    def execute(self, context: Any) -> Any:
        return self._run_deferrable(context)

    def _action(self, context: Any, resume: dict[str, str] | None) -> Any:
        from airflow_streaming.task_failures import fail_fast_on_permanent_errors

        with fail_fast_on_permanent_errors():
            return self._act(context, resume)

    def _act(self, context: Any, resume: dict[str, str] | None) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def _run_deferrable(self, context: Any, resume: dict[str, str] | None = None) -> Any:
        try:
            return self._action(context, resume)
        except WaitNeeded as wait:
            from airflow_streaming.triggers.lifecycle import SparkStreamLifecycleTrigger

            self.log.info("waiting in the triggerer for %s of stream %s (run %s); the worker slot is free",  # type: ignore[attr-defined]
                          wait.wait.kind, wait.wait.spec.get("name"), wait.wait.run_id)
            self.defer(  # type: ignore[attr-defined]
                trigger=SparkStreamLifecycleTrigger(wait.wait.to_dict(), wait.holders, self.poll_interval),
                method_name="execute_complete",
                timeout=timedelta(seconds=max(60.0, wait.wait.deadline - time.time()) + DEFERRAL_MARGIN_S))

    def execute_complete(self, context: Any, event: dict[str, Any]) -> Any:
        """The trigger fired: resume the action from its record with the locks it kept alive."""
        if event.get("status") == "lock_lost":
            from airflow.sdk.exceptions import AirflowFailException

            raise AirflowFailException(f"{event.get('message')}; the action's record is kept: run the task again to "
                                       "continue it once the other holder is done")
        return self._run_deferrable(context, resume=event.get("holders"))

