"""Triggers at scale (issue 23): one hook per watched spec, reused across polls, without changing what a poll
sees; a lifecycle wait asks the recorded driver before scanning every local process."""

from __future__ import annotations

import time

import pytest

from airflow_streaming import spec_hooks
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.lifecycle.waits import PROBATION, Wait, wait_over
from airflow_streaming.triggers.health import poll_once
from synthetic_fleet import StandInDrivers, build_fleet


@pytest.fixture(autouse=True)
def _fresh():
    spec_hooks.forget_all()
    yield
    spec_hooks.forget_all()


def test_one_hook_per_spec_reused_until_it_expires(tmp_path, monkeypatch):
    with StandInDrivers(1) as drivers:
        a, b = build_fleet(tmp_path, 2, drivers)
        first = spec_hooks.hook_for(a.spec.to_dict())
        assert spec_hooks.hook_for(dict(reversed(list(a.spec.to_dict().items())))) is first  # same content
        assert spec_hooks.hook_for(b.spec.to_dict()) is not first
        later = time.monotonic() + spec_hooks.REUSE_SECONDS + 1
        monkeypatch.setattr(spec_hooks.time, "monotonic", lambda: later)
        assert spec_hooks.hook_for(a.spec.to_dict()) is not first  # a changed connection is read again
    with pytest.raises(ValueError):
        spec_hooks.hook_for({**a.spec.to_dict(), "name": "no spaces allowed"})


def test_a_triggers_own_spec_dict_is_keyed_once_and_another_dict_by_its_content(tmp_path, monkeypatch):
    with StandInDrivers(1) as drivers:
        a, b = build_fleet(tmp_path, 2, drivers)
        spec = a.spec.to_dict()
        first = spec_hooks.hook_for(spec)
        dumps: list[object] = []
        real = spec_hooks.json.dumps
        monkeypatch.setattr(spec_hooks.json, "dumps", lambda *args, **kw: dumps.append(args[0]) or real(*args, **kw))
        assert all(spec_hooks.hook_for(spec) is first for _ in range(5)) and dumps == []  # the same dict: no dumps
        copy = dict(spec)
        assert spec_hooks.hook_for(copy) is first and dumps == [copy]  # another dict: keyed by its content
        other = b.spec.to_dict()
        assert spec_hooks.hook_for(other) is not first


def test_a_reused_hook_still_sees_every_change_of_the_files(tmp_path):
    with StandInDrivers(1) as drivers:
        (stream,) = build_fleet(tmp_path, 1, drivers)
        spec = stream.spec.to_dict()
        assert poll_once(spec)["state"] == "HEALTHY"
        stream.fail(LocalStorage())
        verdict = poll_once(spec)
        assert verdict["state"] == "FAILED" and verdict["stream"] == stream.spec.name
        drivers.stop()
        assert poll_once(spec)["state"] == "FAILED"


def test_a_probation_wait_asks_the_driver_before_scanning_processes(tmp_path, monkeypatch):
    from airflow_streaming.hooks.streaming_job import SparkStreamHook

    scans = []
    original = SparkStreamHook.processes_of_run
    monkeypatch.setattr(SparkStreamHook, "processes_of_run", lambda self, run_id: scans.append(run_id) or
                        original(self, run_id))
    with StandInDrivers(1) as drivers:
        (stream,) = build_fleet(tmp_path, 1, drivers)
        wait = Wait(PROBATION, stream.spec.to_dict(), stream.doc.run_id, time.time() + 600,
                    {"started_at": time.time(), "probation": {"window_s": 600.0, "min_batches": 10**6}})
        assert wait_over(wait) is False and scans == []  # the lease names a live driver: no scan
        hook = spec_hooks.hook_for(stream.spec.to_dict())
        assert wait_over(wait, hook=hook) is False and scans == []
        drivers.stop()
        assert wait_over(wait, hook=hook) is True  # the driver is gone: now the scan confirms no process is left
        assert scans == [stream.doc.run_id]
