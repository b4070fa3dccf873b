"""Helpers for tests that run real streams: specs in a temp dir, waiting, cleanup by pid."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from airflow_streaming.control.contract import StatusDocument
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec
import stream_actions

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.5) -> T:
    """Poll ``predicate`` until it returns something truthy; fail the test with ``what`` on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


class StreamRegistry:
    """Specs for streams living under one temp dir; remembers every hook to kill leftovers."""

    def __init__(self, root: Path):
        self.root = root
        self.hooks: list[SparkStreamHook] = []

    def path(self, *parts: str) -> str:
        p = self.root.joinpath(*parts)
        return str(p)

    def spec(self, name: str, application: str, args: list[str], **overrides: Any) -> StreamSpec:
        fields: dict[str, Any] = {
            "name": name,
            "application": application,
            "checkpoint_location": self.path("checkpoints", name),
            "control_location": self.path("control"),
            "master": "local[2]",
            "trigger_interval": 1,
            "heartbeat_interval": 1,
            "stop_timeout": 60,
            "startup_timeout": 180,
            "application_args": args,
            "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false"},
        }
        fields.update(overrides)
        return StreamSpec.from_dict(fields)

    def etl_spec(self, name: str = "etl", application: str = "events_etl", **overrides: Any) -> StreamSpec:
        args = ["--input", self.path("input", name), "--output", self.path("output", name),
                "--quarantine", self.path("quarantine", name)]
        return self.spec(name, application, args, **overrides)

    def hook(self, spec: StreamSpec) -> SparkStreamHook:
        hook = SparkStreamHook(spec)
        self.hooks.append(hook)
        return hook

    def kill_all(self) -> None:
        for hook in self.hooks:
            record = hook.driver_record()
            if record is not None and hook.alive(record):
                stream_actions.kill(hook, record, grace=5)
            assert record is None or not hook.alive(record), f"driver {record.submit_pid} survived cleanup"
            standby = hook.standby_record()  # a standby (an upgrade's, or the hot standby) left behind
            if standby is not None and hook.processes_of_run(standby.run_id):
                stream_actions.kill(hook, standby, 5, keep_marker=True)
            assert standby is None or not hook.processes_of_run(standby.run_id), \
                f"standby {standby.run_id} survived cleanup"


def totals(hook: SparkStreamHook, run_id: str) -> dict[str, int] | None:
    doc = hook.status()
    return doc.totals if doc is not None and doc.run_id == run_id else None


def current_status(hook: SparkStreamHook, run_id: str) -> StatusDocument:
    doc = hook.status()
    assert doc is not None and doc.run_id == run_id, f"no status for run {run_id}: {doc}"
    return doc
