"""Triggerer-side waiting for a stream's progress (the deferrable progress sensor: no worker slot held).

:func:`progress_of` is the progress sensor's one check, used by its ``poke`` and by
:class:`SparkStreamProgressTrigger` alike, so a deferred sensor decides exactly as a poking one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_streaming.triggers import poll_rounds


@dataclass(frozen=True)
class Progress:
    """One look at a stream's current run: ``done`` (with the XCom value), ``failed`` (why), or neither."""

    done: bool = False
    failed: str | None = None
    message: str = ""
    """What the sensor logs for this look."""
    warning: bool = False
    """Log it as a warning (the control files could not be read)."""
    xcom: dict[str, Any] = field(default_factory=dict)


def progress_of(hook: Any, min_batches: int, min_input_rows: int) -> Progress:
    """Whether the stream of ``hook`` (a :class:`~airflow_streaming.hooks.streaming_job.SparkStreamHook`) has
    completed ``min_batches`` micro-batches and read ``min_input_rows`` rows in its current run; ``failed`` if its
    driver failed or exited. Unreadable control files are neither (look again). Blocking file I/O."""
    from airflow_streaming.control import contract
    from airflow_streaming.control.contract import ControlFileError
    from airflow_streaming.control.storage import StorageError

    name = hook.spec.name
    try:
        doc = hook.status()
        record = hook.driver_record()
    except (ControlFileError, StorageError) as exc:
        return Progress(message=f"stream {name}: control files unreadable, will look again: {exc}", warning=True)
    if doc is None or record is None or doc.run_id != record.run_id:
        return Progress(message=f"stream {name}: no status for the current run yet")
    if doc.is_terminal or not hook.alive(record):
        err = doc.last_exception or {}
        return Progress(failed=f"stream {name!r} is {doc.state if doc.is_terminal else 'gone (driver exited)'}: "
                               f"[{err.get('error_class')}] {err.get('message')}")
    totals = doc.totals
    done = doc.state == contract.RUNNING and totals["batches"] >= min_batches and (
        totals["input_rows"] >= int(min_input_rows))
    return Progress(done=done, xcom={**totals, "last_batch_id": doc.last_batch_id()},
                    message=f"stream {name}: state {doc.state}, {totals['batches']} batches, {totals['input_rows']} "
                            f"input rows, {totals['quarantined_rows']} quarantined, last batch {doc.last_batch_id()}")


def _look(spec: dict[str, Any], min_batches: int, min_input_rows: int) -> Progress:
    from airflow_streaming.spec_hooks import hook_for

    return progress_of(hook_for(spec), min_batches, min_input_rows)


class SparkStreamProgressTrigger(BaseTrigger):
    """Poll a stream's current run until it has made the progress the sensor waits for, or failed.

    Events: ``{"status": "done", "xcom": ...}``, ``{"status": "failed", "message": ...}``; a look that raises
    (storage or cluster unreachable) is logged and repeated (the sensor's ``timeout`` bounds the wait).

    :param spec: the stream spec as a dict (JSON-safe).
    :param min_batches: completed micro-batches required in this run.
    :param min_input_rows: input rows required in this run.
    :param poll_interval: seconds between looks.
    """

    def __init__(self, spec: dict[str, Any], min_batches: int, min_input_rows: int, poll_interval: float) -> None:
        super().__init__()
        self.spec = spec
        self.min_batches = int(min_batches)
        self.min_input_rows = int(min_input_rows)
        self.poll_interval = float(poll_interval)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("airflow_streaming.triggers.progress.SparkStreamProgressTrigger",
                {"spec": self.spec, "min_batches": self.min_batches, "min_input_rows": self.min_input_rows,
                 "poll_interval": self.poll_interval})

    async def run(self) -> AsyncIterator[TriggerEvent]:
        last = None
        while True:
            try:
                progress = await poll_rounds.call(_look, self.spec, self.min_batches, self.min_input_rows)
            except Exception as exc:  # noqa: BLE001 - report, do not kill the triggerer; look again
                self.log.warning("progress of %s could not be read (will look again): %s", self.spec.get("name"), exc)
            else:
                if progress.failed is not None:
                    yield TriggerEvent({"status": "failed", "message": progress.failed})
                    return
                if progress.done:
                    yield TriggerEvent({"status": "done", "xcom": progress.xcom, "message": progress.message})
                    return
                if progress.message != last:
                    self.log.info("%s", progress.message)
                    last = progress.message
            await asyncio.sleep(max(0.1, self.poll_interval))
