"""Triggerer-side waiting of a deferred lifecycle action (deploy, stop, upgrade): no worker slot held.

The runner, in deferrable mode, saved its record, handed its lifecycle lock over (by holder id) and
described what it waits for (:class:`~airflow_streaming.lifecycle.waits.Wait`). This trigger keeps
the lock alive (renewal by holder id, so a trigger recreated after a triggerer restart carries on) and
polls :func:`~airflow_streaming.lifecycle.waits.wait_over` until the runner can make progress; then
the task resumes from its record. If the lock was lost meanwhile, it says so and the task fails
without touching the stream.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_streaming.deprecated_names import module_getattr
from airflow_streaming.triggers import poll_rounds

RENEW_EVERY_S = 20.0


class SparkStreamLifecycleTrigger(BaseTrigger):
    """Wait for a lifecycle action's condition in the triggerer.

    :param wait: the :class:`~airflow_streaming.lifecycle.waits.Wait` as a dict.
    :param holders: control dir -> holder id of the locks handed over by the action.
    :param poll_interval: seconds between checks.
    """

    def __init__(self, wait: dict[str, Any], holders: dict[str, str], poll_interval: float = 2.0) -> None:
        super().__init__()
        self.wait = wait
        self.holders = dict(holders)
        self.poll_interval = poll_interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("airflow_streaming.triggers.lifecycle.SparkStreamLifecycleTrigger",
                {"wait": self.wait, "holders": self.holders, "poll_interval": self.poll_interval})

    def _renew(self) -> str | None:
        """Renew every handed-over lock; the control dir of one that is lost, else ``None``."""
        from airflow_streaming.control.lifecycle_lock import renew_deferred
        from airflow_streaming.spec_hooks import hook_for

        storage = hook_for(self.wait["spec"]).storage
        for control_dir, holder in self.holders.items():
            if not renew_deferred(storage, control_dir, holder):
                return control_dir
        return None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_streaming.lifecycle.waits import Wait

        wait = Wait.from_dict(self.wait)
        next_renewal = 0.0
        while True:
            if time.monotonic() >= next_renewal:
                try:
                    lost = await poll_rounds.call(self._renew)
                except Exception as exc:  # noqa: BLE001 - a storage error: retry; the ttl leaves room
                    self.log.warning("could not renew the lifecycle lock (will retry): %s", exc)
                    lost = None
                else:
                    next_renewal = time.monotonic() + RENEW_EVERY_S
                if lost is not None:
                    yield TriggerEvent({"status": "lock_lost", "control_dir": lost, "holders": self.holders,
                                        "message": f"the lifecycle lock of {lost} was taken over while the action "
                                                   "waited in the triggerer"})
                    return
            try:
                over = await poll_rounds.call(_check, wait)
            except Exception as exc:  # noqa: BLE001 - unreadable now: the runner decides at the deadline
                self.log.warning("checking %s of %s failed (will retry): %s", wait.kind, wait.spec.get("name"), exc)
                over = time.time() >= wait.deadline
            if over:
                yield TriggerEvent({"status": "over", "kind": wait.kind, "holders": self.holders})
                return
            await asyncio.sleep(self.poll_interval)


def _check(wait: Any) -> bool:
    """:func:`wait_over` with the spec's shared hook (blocking: runs in a thread)."""
    from airflow_streaming.lifecycle.waits import wait_over
    from airflow_streaming.spec_hooks import hook_for

    return wait_over(wait, hook=hook_for(wait.spec))


__getattr__ = module_getattr(__name__, 'LifecycleWaitTrigger')  # the old name, deprecated
