"""Tests and benchmarks that drive the hook's acting primitives directly act the way a lifecycle step does.

In the product, only the lifecycle runner issues step permits (``tests/unit/test_one_acting_path.py`` holds
that): every start, stop and kill of a stream is a recorded step under the stream's lock. A test of the
hook itself, or a benchmark's bare baseline (no record, no gate), takes the stream's real lock and issues a
permit for a named test step here - the same guard, without the runner's record.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when used: a bench sets AIRFLOW_HOME before anything of the product loads
    from airflow_streaming.control.contract import DriverRecord
    from airflow_streaming.control.lifecycle_lock import LifecycleLock
    from airflow_streaming.control.permit import StepPermit
    from airflow_streaming.hooks.stopping import StopReport

KILL_GRACE_SECONDS = 10.0


@contextlib.contextmanager
def step_permit(hook: Any, action: str = "test", lock: LifecycleLock | None = None,
                owner: str | None = None) -> Iterator[StepPermit]:
    """An open permit for ``hook``'s stream under ``lock`` (default: the stream's lock, taken for the block by
    ``owner``)."""
    from airflow_streaming.control.lifecycle_lock import LifecycleLock
    from airflow_streaming.control.permit import issue

    own = lock is None
    held = lock or LifecycleLock.acquire(hook.storage, hook.paths.root, action, owner=owner or f"test {action}")
    permit = issue(held, action, "test", "TEST")
    try:
        with permit.open(hook.paths.root, action):
            yield permit
    finally:
        if own:
            held.release()


def submit(hook: Any, lock: LifecycleLock | None = None, **kwargs: Any) -> DriverRecord:
    """``hook.submit`` for a test step (``run_id``, ``standby``, ``failover`` as the hook takes them)."""
    with step_permit(hook, "deploy", lock) as permit:
        return hook.submit(permit, **kwargs)


def request_stop(hook: Any, lock: LifecycleLock | None = None) -> bool:
    with step_permit(hook, "stop", lock) as permit:
        return hook.request_stop(permit)


def kill(hook: Any, record: DriverRecord, grace: float = KILL_GRACE_SECONDS, lock: LifecycleLock | None = None,
         keep_marker: bool = False) -> str:
    with step_permit(hook, "kill", lock) as permit:
        return hook.kill(permit, record, grace, keep_marker=keep_marker)


def stop(hook: Any, timeout: float | None = None, kill_on_timeout: bool = True,
         lock: LifecycleLock | None = None) -> StopReport:
    """A graceful stop at a batch boundary, killed after ``timeout`` (the spec's stop timeout) - what a stop
    action's STOPPING step does, without its record."""
    timeout = hook.spec.stop_timeout if timeout is None else timeout
    with step_permit(hook, "stop", lock) as permit:
        requested_at = time.time()
        run_id = hook.begin_stop(permit)
        driver, stopped = hook.await_stop(run_id, requested_at, timeout, permit.lock)
        if stopped:
            return hook.stop_report(driver, requested_at)
        if not kill_on_timeout:
            raise TimeoutError(f"stream {hook.spec.name!r} did not stop within {timeout:.0f}s")
        note = hook.kill(permit, driver)
        return hook.stop_report(driver, requested_at, killed=True, note=note)


def adopt(hook: Any, run_id: str, lock: LifecycleLock | None = None, standby: bool = False) -> DriverRecord:
    with step_permit(hook, "deploy", lock) as permit:
        return hook.adopt(permit, run_id, standby=standby)


def promote(hook: Any, run_id: str, lock: LifecycleLock | None = None) -> DriverRecord:
    with step_permit(hook, "upgrade", lock) as permit:
        return hook.promote(permit, run_id)


def submit_gate(hook: Any, run_id: str, lock: LifecycleLock | None = None, dry_run: bool = True) -> DriverRecord:
    with step_permit(hook, "upgrade", lock) as permit:
        return hook.submit_gate(permit, run_id, dry_run)


def prepare_hot_standby(hook: Any, lock: LifecycleLock | None = None) -> DriverRecord:
    """What a ``standby`` action's STARTING step does: the hot standby submitted beside the running driver."""
    return submit(hook, lock, standby=True, failover=True)


def retire_hot_standby(hook: Any, reason: str, lock: LifecycleLock | None = None) -> str | None:
    with step_permit(hook, "upgrade", lock) as permit:
        return hook.retire_hot_standby(permit, reason)


def acknowledge_takeover(hook: Any, run_id: str, lock: LifecycleLock | None = None) -> None:
    with step_permit(hook, "failover", lock) as permit:
        hook.acknowledge_takeover(permit, run_id)
