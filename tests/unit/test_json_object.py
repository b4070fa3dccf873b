"""The Airflow side's fast decoder of control files reads what the standard library reads, and refuses
the same garbage with the same error naming the file."""

from __future__ import annotations

import json

import pytest

from airflow_streaming import json_object as module
from airflow_streaming.control.contract import ControlFileError, parse_json_object
from airflow_streaming.json_object import json_object

PATH = "/control/s1/status.json"

READABLE = [
    b'{"a": 1, "b": [1.5, "x", null, true], "c": {"d": "\\u00e9"}}',
    b'{"rate": NaN, "top": Infinity}',  # what Python's json.dumps writes for a NaN (the reporter's doc)
    b'{"big": 123456789012345678901234567890}',  # beyond 64 bits
    b'  {"pad": 1}  \n',
    '{"name": "caf\u00e9 \u2603"}'.encode(),
    b'{"dup": 1, "dup": 2}',
]

GARBAGE = [b"", b"{", b"[1, 2]", b'"text"', b"\xff\xfe{}", b'{"a": 1} trailing', b"\xef\xbb\xbf{}", b"null"]


def _same(a, b) -> bool:  # type: ignore[no-untyped-def]
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)  # NaN == NaN as text


@pytest.mark.parametrize("data", READABLE)
def test_what_the_standard_library_reads_is_read_the_same(data: bytes) -> None:
    assert _same(json_object(PATH, data), parse_json_object(PATH, data))


@pytest.mark.parametrize("data", GARBAGE)
def test_garbage_gets_the_standard_error_naming_the_file(data: bytes) -> None:
    with pytest.raises(ControlFileError) as expected:
        parse_json_object(PATH, data, "restore it")
    with pytest.raises(ControlFileError) as got:
        json_object(PATH, data, "restore it")
    assert str(got.value) == str(expected.value) and PATH in str(got.value)


def test_the_fast_decoder_is_the_one_used_when_installed() -> None:
    # msgspec comes with Airflow (its task SDK); without it the standard library decodes (the fallback).
    assert module._decode is not None
    status = json.dumps({"queries": [{"recent_progress": [{"batchId": k, "timestamp": "2026-11-27T10:00:00.000Z"}
                                                          for k in range(20)]}]}).encode()
    assert json_object(PATH, status) == json.loads(status)


def test_without_msgspec_the_standard_library_decodes(monkeypatch) -> None:
    monkeypatch.setattr(module, "_decode", None)
    assert json_object(PATH, b'{"a": 1}') == {"a": 1}
    with pytest.raises(ControlFileError):
        json_object(PATH, b"[1]")
