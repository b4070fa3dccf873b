"""``hook.health(status=...)``: a caller that has just read and parsed the status document (a lifecycle
wait, every poll) hands it over instead of having it read and parsed again. The verdict must be the one
``health()`` reaches by reading the file itself, for every kind of document (real control files and real
processes standing in for drivers, as ``bench/scale_watch_bench.py`` has them)."""

from __future__ import annotations

import json
import time

import pytest

from airflow_streaming.control.local import LocalStorage
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from synthetic_fleet import StandInDrivers, build_fleet


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):  # type: ignore[no-untyped-def]
    with StandInDrivers(2) as drivers:
        yield build_fleet(tmp_path_factory.mktemp("fleet"), 4, drivers, failed_every=2)


def _both(stream) -> tuple[dict, dict]:  # type: ignore[no-untyped-def]
    hook = SparkStreamHook(stream.spec)
    now = time.time()
    raw = LocalStorage().read_bytes(stream.paths.status)
    handed = None if raw is None else json.loads(raw)
    return hook.health(now=now).to_dict(), hook.health(now=now, status=handed).to_dict()


def test_running_and_failed_documents(fleet) -> None:  # type: ignore[no-untyped-def]
    states = set()
    for stream in fleet:
        read, handed = _both(stream)
        assert read == handed
        states.add(read["state"])
    assert states == {"HEALTHY", "FAILED"}


def test_a_document_of_another_run_and_no_document(fleet) -> None:  # type: ignore[no-untyped-def]
    stream = fleet[0]
    stream.doc.run_id = "an-earlier-run"
    stream.beat(LocalStorage())
    read, handed = _both(stream)
    assert read == handed and read["state"] != "HEALTHY"
    LocalStorage().delete(stream.paths.status)
    read, handed = _both(stream)
    assert read == handed and read["state"] == "UNKNOWN"


def test_a_document_that_fails_validation(fleet) -> None:  # type: ignore[no-untyped-def]
    stream = fleet[2]
    doc = json.loads(LocalStorage().read_bytes(stream.paths.status))
    doc["queries"] = "not a list"
    LocalStorage().write_atomic(stream.paths.status, json.dumps(doc).encode())
    read, handed = _both(stream)
    assert read == handed and read["state"] == "UNKNOWN"


def test_the_handed_document_is_the_one_judged(fleet) -> None:  # type: ignore[no-untyped-def]
    """Not merely the same answer: ``health(status=...)`` judges what it is handed and does not read the
    file again (a caller that read a FAILED document must not get the verdict of a later HEALTHY one)."""
    stream = fleet[1]  # built FAILED (failed_every=2): made RUNNING again here
    stream.doc.state, stream.doc.exit, stream.doc.last_exception = "RUNNING", None, None
    stream.doc.queries[0].active = True
    stream.beat(LocalStorage())
    hook = SparkStreamHook(stream.spec)
    now = time.time()
    on_disk = json.loads(LocalStorage().read_bytes(stream.paths.status))
    assert hook.health(now=now).state.value == "HEALTHY"
    failed = {**on_disk, "state": "FAILED", "exit": {"code": 3, "reason": "query failed", "last_committed_batch": 1},
              "last_exception": {"error_class": "STREAM_FAILED", "message": "handed"}}
    failed["queries"] = [{**on_disk["queries"][0], "active": False}]
    assert hook.health(now=now, status=failed).state.value == "FAILED"
    assert hook.health(now=now, status=None).state.value == "UNKNOWN"  # "there is none", though the file exists
