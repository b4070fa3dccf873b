"""The seal on stored specs and its key (airflow_streaming.control.seal, airflow_streaming.sealing)."""

from __future__ import annotations

import hashlib
import hmac
import json
import os

import pytest

from airflow_streaming import sealing
from airflow_streaming.control.seal import (
    CANDIDATE,
    DEPLOYABLE,
    LEGACY,
    is_sealed_by,
    seal_problem,
    seal_spec,
    sealed_field,
    without_seal,
)

SPEC = {"name": "s", "version": "v1", "application": "events_etl", "spark_conf": {"a": "1"}}
AT = {"stream": "s", "control": "/ctl/s"}


def test_a_seal_covers_every_field_and_only_its_key_makes_it():
    key, other = b"k" * 32, b"o" * 32
    stamped = seal_spec(SPEC, key, **AT)
    assert is_sealed_by(stamped, key, **AT) and not is_sealed_by(stamped, other, **AT) and without_seal(stamped) == SPEC
    assert is_sealed_by(seal_spec(dict(reversed(list(SPEC.items()))), key, **AT), key, **AT)  # key order does not matter
    for change in ({"application": "/tmp/evil.py"}, {"spark_conf": {"a": "2"}}, {"cluster": {"api_server": "x"}},
                   {"version": "v2"}):
        assert not is_sealed_by({**stamped, **change}, key, **AT), change
    assert not is_sealed_by(SPEC, key, **AT) and not is_sealed_by({**SPEC, "seal": 7}, key, **AT)
    assert not is_sealed_by(None, key, **AT)


def test_a_seal_binds_its_stream_control_directory_status_and_deployer():
    key = b"k" * 32
    stamped = seal_spec(SPEC, key, **AT, deployed_by="team_a.deploy run r try 1")
    assert sealed_field(stamped, "deployed_by") == "team_a.deploy run r try 1" and sealed_field(stamped, "mac") is None
    assert "sealed for stream 's'" in seal_problem(stamped, key, stream="t", control="/ctl/s")
    assert "sealed for stream 's' in '/ctl/s'" in seal_problem(stamped, key, stream="s", control="/other/s")
    for bound, value in (("stream", "t"), ("control", "/other/s"), ("status", DEPLOYABLE), ("deployed_by", "x"),
                         ("version", "v2")):
        forged = {**stamped, "seal": {**stamped["seal"], bound: value}}
        if bound == "status":  # a candidate's seal edited to say deployable
            forged = {**seal_spec(SPEC, key, **AT, status=CANDIDATE)}
            forged["seal"] = {**forged["seal"], "status": DEPLOYABLE}
        assert not is_sealed_by(forged, key, **AT) and not is_sealed_by(forged, key, stream="t", control="/other/s")
    candidate = seal_spec(SPEC, key, **AT, status=CANDIDATE)
    assert "'candidate' only" in seal_problem(candidate, key, **AT)
    assert is_sealed_by(candidate, key, **AT, statuses=(DEPLOYABLE, CANDIDATE))
    with pytest.raises(ValueError, match="status"):
        seal_spec(SPEC, key, **AT, status="passed")


def test_a_seal_of_the_previous_format_is_told_apart_and_still_checked():
    key = b"k" * 32
    canonical = json.dumps(SPEC, sort_keys=True, separators=(",", ":"))
    legacy = {**SPEC, "seal": "hmac-sha256:" + hmac.new(key, canonical.encode(), hashlib.sha256).hexdigest()}
    assert seal_problem(legacy, key, **AT) == LEGACY and not is_sealed_by(legacy, key, **AT)
    assert seal_problem({**legacy, "application": "/tmp/evil.py"}, key, **AT) != LEGACY  # a forged one is not legacy
    assert seal_problem({**SPEC, "seal": "hmac-sha256:" + "0" * 64}, key, **AT) != LEGACY


def test_the_key_file_is_made_once_0600_and_refused_when_others_can_read_it(tmp_path, monkeypatch):
    monkeypatch.delenv("AIRFLOW__AIRFLOW_STREAMING__CONTROL_SEAL_KEY", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    first = sealing.seal_key()
    path = tmp_path / sealing.KEY_FILE_NAME
    assert path.stat().st_mode & 0o777 == 0o600 and sealing.seal_key() == first
    os.chmod(path, 0o644)
    with pytest.raises(PermissionError, match="mode 0600"):
        sealing.seal_key()


def test_the_configured_key_wins_and_every_host_with_it_agrees(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__CONTROL_SEAL_KEY", "shared-by-every-host")
    configured = sealing.seal_key()
    assert not (tmp_path / sealing.KEY_FILE_NAME).exists()
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "another-host"))
    assert sealing.seal_key() == configured
