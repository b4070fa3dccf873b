"""Bounded retries of control-file reads (tenacity): only a confirmed absence is "absent", a transient
StorageError is retried and then raised, a permanent one or any other error is raised at once."""

from __future__ import annotations

import errno
import logging

import pytest

from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import StorageError
from airflow_streaming.hooks.storage_retry import retrying, transient


class Flaky:
    """Raises the given errors in turn, then returns ``value``; counts the calls."""

    def __init__(self, errors: list[BaseException], value: object = b"ok"):
        self.errors, self.value, self.calls = list(errors), value, 0

    def __call__(self) -> object:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.value


def eio(path: str = "/c/s1/status.json") -> StorageError:
    return StorageError(errno.EIO, f"cannot read {path}: Input/output error")


def test_a_transient_error_costs_retries_never_a_wrong_answer(caplog):
    read = Flaky([eio(), eio()])
    with caplog.at_level(logging.WARNING, logger="airflow_streaming.hooks.storage_retry"):
        assert retrying(read, "reading status.json of s1", first_delay=0.01) == b"ok"
    assert read.calls == 3
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("reading status.json of s1 failed (attempt 1/3, retrying in 0.0s)")
    assert "attempt 2/3" in lines[1] and "Input/output error" in lines[1] and len(lines) == 2


def test_the_last_transient_error_is_raised_after_the_bounded_attempts():
    read = Flaky([eio(), eio(), eio(), eio()])
    with pytest.raises(StorageError, match="Input/output error") as raised:
        retrying(read, "reading lease.json of s1", first_delay=0.01)
    assert read.calls == 3 and raised.value.errno == errno.EIO


def test_backoff_doubles_and_is_capped(caplog):
    read = Flaky([eio()] * 4)
    with caplog.at_level(logging.WARNING, logger="airflow_streaming.hooks.storage_retry"), \
            pytest.raises(StorageError):
        retrying(read, "x", attempts=4, first_delay=0.1, max_delay=0.2)
    waits = [r.getMessage().split("retrying in ")[1].split("s)")[0] for r in caplog.records]
    assert waits == ["0.1", "0.2", "0.2"] and read.calls == 4


@pytest.mark.parametrize("code", [errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EILSEQ])
def test_a_permanent_error_is_raised_at_once(code):
    read = Flaky([StorageError(code, "cannot read /c/s1/status.json: permission denied")])
    with pytest.raises(StorageError):
        retrying(read, "x", first_delay=0.01)
    assert read.calls == 1 and not transient(StorageError(code, "x"))


def test_garbage_and_other_errors_are_never_retried():
    for error in (ControlFileError("/c/s1/status.json is not valid JSON"), RuntimeError("bug")):
        read = Flaky([error])
        with pytest.raises(type(error)):
            retrying(read, "x", first_delay=0.01)
        assert read.calls == 1


def test_absence_is_none_through_a_real_storage(tmp_path):
    storage = LocalStorage()
    assert retrying(lambda: storage.read_bytes(str(tmp_path / "missing.json")), "x") is None
    (tmp_path / "dir").mkdir()
    with pytest.raises(StorageError):  # a directory where a file should be: EISDIR, permanent
        retrying(lambda: storage.read_bytes(str(tmp_path / "dir")), "x", first_delay=0.01)
