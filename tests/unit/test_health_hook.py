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
