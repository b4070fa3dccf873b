"""compat.json: the stream's last full compatibility report (written best effort, read strictly)."""

from __future__ import annotations

import pytest

from airflow_streaming.compat.last_report import read_last_report, report_path, write_last_report
from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.control.local import LocalStorage


def test_round_trip_and_strict_reading(tmp_path):
    storage = LocalStorage()
    assert read_last_report(storage, str(tmp_path)) is None
    report = {"verdict": "INCOMPATIBLE", "findings": [{"rule": "stateful_operators", "severity": "INCOMPATIBLE"}]}
    assert write_last_report(storage, str(tmp_path), report, candidate_version="v2", candidate_application="app",
                             action_id="a1", owner="d.t run r try 1", now=5.0)
    doc = read_last_report(storage, str(tmp_path))
    assert doc == {"at": 5.0, "action_id": "a1", "owner": "d.t run r try 1", "candidate_version": "v2",
                   "candidate_application": "app", "report": report}
    for garbage in ("{oops", "[]", '{"report": 3}'):
        (tmp_path / "compat.json").write_text(garbage)
        with pytest.raises(ControlFileError, match="compat.json"):
            read_last_report(storage, str(tmp_path))


def test_writing_never_fails_the_caller(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")  # a file where the control dir should be: the write fails
    assert not write_last_report(LocalStorage(), str(blocker), {"verdict": "COMPATIBLE"}, candidate_version="v1",
                                 candidate_application="app")
    assert report_path(str(blocker)).endswith("file/compat.json")
