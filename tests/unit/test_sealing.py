"""The seal on stored specs and its key (airflow_streaming.control.seal, airflow_streaming.sealing)."""

from __future__ import annotations

import os

import pytest

from airflow_streaming import sealing
from airflow_streaming.control.seal import is_sealed_by, seal_spec, without_seal

SPEC = {"name": "s", "version": "v1", "application": "events_etl", "spark_conf": {"a": "1"}}


def test_a_seal_covers_every_field_and_only_its_key_makes_it():
    key, other = b"k" * 32, b"o" * 32
    stamped = seal_spec(SPEC, key)
    assert is_sealed_by(stamped, key) and not is_sealed_by(stamped, other) and without_seal(stamped) == SPEC
    assert is_sealed_by(seal_spec(dict(reversed(list(SPEC.items()))), key), key)  # key order does not matter
    for change in ({"application": "/tmp/evil.py"}, {"spark_conf": {"a": "2"}}, {"cluster": {"api_server": "x"}}):
        assert not is_sealed_by({**stamped, **change}, key), change
    assert not is_sealed_by(SPEC, key) and not is_sealed_by({**SPEC, "seal": 7}, key) and not is_sealed_by(None, key)


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
