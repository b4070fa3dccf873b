"""Bad status documents on disk give UNKNOWN with a reason - never a crash (real files, real hook)."""

from __future__ import annotations

import json

import pytest

from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec


@pytest.fixture
def hook(tmp_path):
    spec = StreamSpec(name="s1", application="events_etl", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "ctl"))
    h = SparkStreamHook(spec)
    (tmp_path / "ctl" / "s1").mkdir(parents=True)
    return h


@pytest.mark.parametrize("content, expected", [
    (b"", "not valid JSON"),
    (b'{"schema": 1, "stream": "s1", "state": "RUNN', "not valid JSON"),
    (b"\x00\xff\xfe garbage", "not valid JSON"),
    (b"[1, 2, 3]", "expected a JSON object"),
    (b'{"schema": 99}', "unsupported status schema 99"),
    (json.dumps({"schema": 1, "stream": "s1"}).encode(), "field 'state' is missing"),
])
def test_unreadable_status_document_is_unknown_with_the_reason(hook, content, expected):
    with open(hook.paths.status, "wb") as fh:
        fh.write(content)
    verdict = hook.health()
    assert verdict.state.value == "UNKNOWN"
    assert verdict.reasons[0].code == "STATUS_UNREADABLE"
    assert expected in verdict.reasons[0].message and hook.paths.status in verdict.reasons[0].message
    assert verdict.stream == "s1"


def test_no_status_yet_is_unknown(hook):
    verdict = hook.health()
    assert verdict.state.value == "UNKNOWN" and verdict.reasons[0].code == "NO_STATUS"


def test_a_polls_driver_record_is_parsed_again_only_when_its_bytes_change(hook, monkeypatch):
    """Issue 37: a watched stream's hook parses ``driver.json`` once per content, not once a poll; a new
    record, or garbage in its place, is never served from the previous parse."""
    import socket
    import time

    from airflow_streaming.control import contract
    from airflow_streaming.control.contract import DriverRecord

    def write(run_id: str) -> None:
        record = DriverRecord(run_id=run_id, stream="s1", version="v1", application="events_etl",
                              host=socket.gethostname(), command="spark-submit", log_path="", submitted_at=time.time(),
                              checkpoint_location=hook.spec.checkpoint_location, handle={})
        with open(hook.paths.driver, "wb") as fh:
            fh.write(record.to_json())

    parses: list[str] = []
    real = DriverRecord.from_json.__func__
    monkeypatch.setattr(DriverRecord, "from_json", classmethod(lambda cls, path, data: parses.append(path)
                                                                or real(cls, path, data)))
    write("run-1")
    for _ in range(3):
        hook.health()
    assert len(parses) == 1
    assert hook._polled_driver_record().run_id == "run-1" and len(parses) == 1
    write("run-2")
    assert hook._polled_driver_record().run_id == "run-2" and len(parses) == 2
    assert contract.read_driver_record(hook.storage, hook.paths).run_id == "run-2"  # the plain read agrees
    with open(hook.paths.driver, "wb") as fh:
        fh.write(b'{"run_id": ')
    verdict = hook.health()
    assert verdict.state.value == "UNKNOWN" and "driver record" in verdict.reasons[0].message, verdict
