"""The temp-file-then-rename writes both HDFS backends share (``control/rename_commit.py``), over an
in-memory file system with the same primitives: create new, rename with or without overwrite, delete."""

from __future__ import annotations

import errno
import logging

import pytest

from airflow_streaming.control.rename_commit import RenameCommitStorage, temp_name
from airflow_streaming.control.storage import StorageError

LOG = logging.getLogger("test_rename_commit.backend")


class MemoryStorage(RenameCommitStorage):
    """Files in a dict; ``fail_rename`` / ``fail_remove`` make those primitives fail."""

    _log = LOG

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}
        self.calls: list[tuple[str, ...]] = []
        self.fail_rename = self.fail_remove = False

    def _write_new(self, path: str, data: bytes, doing: str, target: str | None = None) -> None:
        self.calls.append(("write_new", path, doing, target or ""))
        if path in self.files:
            raise StorageError(errno.EEXIST, f"cannot {doing} {target or path}: exists")
        self.files[path] = data

    def _rename(self, src: str, dst: str, overwrite: bool, doing: str) -> None:
        self.calls.append(("rename", src, dst, str(overwrite), doing))
        if self.fail_rename:
            raise StorageError(errno.EIO, f"cannot {doing} {dst}: broken")
        if dst in self.files and not overwrite:
            raise StorageError(errno.EEXIST, f"cannot {doing} {dst}: exists")
        self.files[dst] = self.files.pop(src)

    def _remove(self, path: str) -> None:
        if self.fail_remove:
            raise StorageError(errno.EIO, f"cannot delete {path}: broken")
        self.files.pop(path, None)

    def read_bytes(self, path: str) -> bytes | None:
        return self.files.get(path)

    def delete(self, path: str) -> bool:
        return self.files.pop(path, None) is not None

    def exists(self, path: str) -> bool:
        return path in self.files

    def list_dir(self, path: str) -> list[str]:
        return sorted(p.rsplit("/", 1)[1] for p in self.files if p.rsplit("/", 1)[0] == path)


def test_temp_name_is_hidden_unique_and_beside_the_target():
    first, second = temp_name("/c/s/lease.json"), temp_name("/c/s/lease.json")
    assert first.startswith("/c/s/.lease.json.") and first.endswith(".tmp") and first != second


def test_replace_writes_a_temp_file_and_renames_it_over_the_target():
    st = MemoryStorage()
    st.write_atomic("/c/f", b"old")
    st.write_atomic("/c/f", b"new")
    assert st.files == {"/c/f": b"new"}
    (_, tmp, doing, target), rename = st.calls[-2:]
    assert tmp.startswith("/c/.f.") and (doing, target) == ("write", "/c/f")
    assert rename == ("rename", tmp, "/c/f", "True", "write")


def test_exclusive_create_has_one_winner_and_leaves_no_temp_file():
    st = MemoryStorage()
    assert st.create_exclusive("/c/lease", b"mine") is True
    assert st.create_exclusive("/c/lease", b"theirs") is False
    assert st.files == {"/c/lease": b"mine"}
    assert st.calls[-1][3:] == ("False", "create")


def test_a_failed_rename_removes_the_temp_file_and_raises(caplog):
    st = MemoryStorage()
    st.fail_rename = True
    with pytest.raises(StorageError, match="broken"):
        st.write_atomic("/c/f", b"x")
    with pytest.raises(StorageError, match="broken"):
        st.create_exclusive("/c/g", b"x")
    assert st.files == {}
    st.fail_remove = True
    with caplog.at_level(logging.WARNING, logger=LOG.name), pytest.raises(StorageError, match="cannot write /c/f"):
        st.write_atomic("/c/f", b"x")
    assert [r.name for r in caplog.records] == [LOG.name]
    assert "could not remove the temporary file /c/.f." in caplog.records[0].getMessage()


def test_write_once_and_move_are_one_primitive_each():
    st = MemoryStorage()
    st.write_once("/c/a", b"1")
    with pytest.raises(StorageError) as err:
        st.write_once("/c/a", b"2")
    assert err.value.errno == errno.EEXIST
    st.move("/c/a", "/c/b")
    assert st.files == {"/c/b": b"1"} and st.calls[-1] == ("rename", "/c/a", "/c/b", "False", "move /c/a to")


def test_fault_points_keep_their_names(tmp_path, monkeypatch):
    rules = tmp_path / "faults.json"
    rules.write_text('[{"point": "storage.create", "action": "error", "errno": "EIO"}]')
    monkeypatch.setenv("AIRFLOW_STREAMING_FAULTS", str(rules))
    st = MemoryStorage()
    with pytest.raises(StorageError, match="cannot create /c/lease") as err:
        st.create_exclusive("/c/lease", b"x")
    assert err.value.errno == errno.EIO and st.calls == []
