"""The completeness cursor's file: two slots written in place, each with its checksum.

A cursor write used to create a file (a temp file renamed over the cursor): ~0.45 ms of CPU each, at every period
of every watched stream. Now only the first write creates the file; the next ones overwrite the slot that does not
hold the newest cursor. What may go wrong is broken here on purpose: a slot cut short (what a crash in the middle
of a write can leave), a real process killed while it writes, a write that fails, both slots spoiled, a file of
the one-document form the code before wrote, a storage that cannot write in place.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from airflow_streaming.completeness import HOUR_MS, CountedThrough, PeriodEvent, PeriodKey, parse_rule
from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import ControlStorage, StorageError
from airflow_streaming.hooks.completeness import CURSOR_SLOT, read_cursor, write_cursor

RULE = parse_rule({"period": "hourly"})
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def event(k: int) -> PeriodEvent:
    """The event of hour ``k`` (with the counts through its last batch)."""
    key = PeriodKey(T0 + k * HOUR_MS, T0 + (k + 1) * HOUR_MS, CountedThrough("q/e", 0, 10 * k + 9, 100 * k, k))
    return PeriodEvent(key, "hourly", False, 10 * k + 10, T0 + (k + 1) * HOUR_MS, 10, 100, k)


def slots(path: str) -> list[bytes]:
    data = open(path, "rb").read()
    assert len(data) == 2 * CURSOR_SLOT
    return [data[:CURSOR_SLOT], data[CURSOR_SLOT:]]


def test_writes_after_the_first_go_in_place_into_the_older_slot(tmp_path):
    storage, path = LocalStorage(), str(tmp_path / "completeness" / "c.json")
    write_cursor(storage, path, RULE, event(0))
    inode = os.stat(path).st_ino
    for k in (1, 2, 3):
        write_cursor(storage, path, RULE, event(k))
        assert read_cursor(storage, path, RULE) == event(k).key
        assert read_cursor(storage, path, RULE).counted_through == event(k).key.counted_through
    assert os.stat(path).st_ino == inode and os.listdir(tmp_path / "completeness") == ["c.json"]  # no new file
    first, second = slots(path)
    # Sequence numbers 3 and 4: hour 2 in one slot, hour 3 (the newest) in the other; each a line a person reads.
    assert [s.split(b" ")[1] for s in (first, second)] == [b"3", b"4"]
    assert json.loads(first.split(b" ", 2)[2])["identity"].endswith("03:00:00.000Z")
    assert first.endswith(b"\n") and second.endswith(b"\n")


@pytest.mark.parametrize("cut", [0, 9, 200, -1])  # -1: all but the document's last byte
def test_a_slot_cut_short_leaves_the_cursor_before_it(tmp_path, cut):
    storage, path = LocalStorage(), str(tmp_path / "c.json")
    for k in (0, 1):
        write_cursor(storage, path, RULE, event(k))
    # Hour 2's write stopped after ``cut`` bytes of its slot (a crash; the rest is what the slot held before).
    newest_slot = 0 if slots(path)[0].split(b" ")[1] == b"2" else 1
    older_slot = 1 - newest_slot
    write_cursor(storage, str(tmp_path / "scratch.json"), RULE, event(2))  # the bytes hour 2's slot would hold
    full = open(tmp_path / "scratch.json", "rb").read()[:CURSOR_SLOT].replace(b" 1 {", b" 3 {", 1)
    cut = len(full.rstrip()) - 1 if cut < 0 else cut
    with open(path, "r+b") as fh:
        fh.seek(older_slot * CURSOR_SLOT)
        fh.write(full[:cut] if cut else b"\0" * 16)
    assert read_cursor(storage, path, RULE) == event(1).key  # hour 2 is emitted again: never a hole
    write_cursor(storage, path, RULE, event(2))  # into the spoiled slot; hour 1 stays in the other
    assert read_cursor(storage, path, RULE) == event(2).key
    assert [s.split(b" ")[1] for s in slots(path)][newest_slot] == b"2"


def test_both_slots_spoiled_is_an_error_naming_the_file(tmp_path):
    storage, path = LocalStorage(), str(tmp_path / "c.json")
    for k in (0, 1):
        write_cursor(storage, path, RULE, event(k))
    data = bytearray(open(path, "rb").read())
    data[40] ^= 1
    data[CURSOR_SLOT + 40] ^= 1  # one bit in each document: the checksums no longer match
    open(path, "wb").write(bytes(data))
    with pytest.raises(ControlFileError, match=f"{path}: neither of its two slots holds a cursor"):
        read_cursor(storage, path, RULE)


def test_a_one_document_cursor_of_the_code_before_is_read_then_written_in_two_slots(tmp_path):
    storage, path = LocalStorage(), str(tmp_path / "c.json")
    key = event(4).key
    with open(path, "w") as fh:  # what write_cursor wrote before the slots
        json.dump({"rule": RULE.to_dict(), "identity": "x", "start": key.start, "end": key.end, "batch_id": 50,
                   "at": 1.0}, fh, sort_keys=True)
    assert read_cursor(storage, path, RULE) == key
    write_cursor(storage, path, RULE, event(5))
    assert read_cursor(storage, path, RULE) == event(5).key and len(open(path, "rb").read()) == 2 * CURSOR_SLOT


class _WholeFilesOnly(LocalStorage):
    """A storage that does not write in place (the base class's answer, as the remote storages give)."""

    write_in_place = ControlStorage.write_in_place


def test_a_storage_that_does_not_write_in_place_replaces_the_whole_file(tmp_path):
    storage, path = _WholeFilesOnly(), str(tmp_path / "c.json")
    write_cursor(storage, path, RULE, event(0))
    for k in range(1, 3):
        with open(path, "rb") as before:  # held open: its inode cannot be handed to another file meanwhile
            write_cursor(storage, path, RULE, event(k))
            assert os.fstat(before.fileno()).st_nlink == 0  # the file written before was replaced, not written into
            assert os.stat(path).st_ino != os.fstat(before.fileno()).st_ino
        assert read_cursor(storage, path, RULE) == event(k).key


def test_an_in_place_write_that_fails_raises_and_keeps_the_cursor_before(tmp_path, monkeypatch):
    storage, path = LocalStorage(), str(tmp_path / "completeness" / "c.json")
    write_cursor(storage, path, RULE, event(0))
    faults = tmp_path / "faults.json"  # the real write fails (airflow_streaming.faults: a disk full)
    faults.write_text(json.dumps([{"point": "storage.write", "match": "/completeness/", "action": "error",
                                   "errno": "ENOSPC"}]))
    monkeypatch.setenv("AIRFLOW_STREAMING_FAULTS", str(faults))
    with pytest.raises(StorageError, match="c.json"):
        write_cursor(storage, path, RULE, event(1))
    monkeypatch.delenv("AIRFLOW_STREAMING_FAULTS")
    assert read_cursor(storage, path, RULE) == event(0).key


WRITER = """
import sys
sys.path.insert(0, {root!r})
from tests.unit.test_completeness_cursor import RULE, event
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.hooks.completeness import write_cursor
storage, k = LocalStorage(), 1
write_cursor(storage, {path!r}, RULE, event(0))  # a cursor is there before the first kill, however slow the start
print("ready", flush=True)
while True:
    write_cursor(storage, {path!r}, RULE, event(k))
    k += 1
"""


def test_a_writer_killed_at_any_moment_leaves_a_cursor(tmp_path):
    """A real process writing cursors as fast as it can, killed (SIGKILL) at ten different moments: the file is
    a valid cursor each time, and the next writer goes on from it. This proves less than it seems: a SIGKILL
    does not tear a ``pwrite`` already in the page cache (any single-slot writer would pass it too); a slot cut
    short is :func:`test_a_slot_cut_short_leaves_the_cursor_before_it`'s case, the one that proves the slots."""
    path = str(tmp_path / "c.json")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    seen = []
    for trial in range(10):
        proc = subprocess.Popen([sys.executable, "-c", WRITER.format(root=root, path=path)], stdout=subprocess.PIPE)
        try:
            assert proc.stdout.readline() == b"ready\n"
            time.sleep(0.01 + 0.03 * trial)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        key = read_cursor(LocalStorage(), path, RULE)
        assert key is not None and (key.start - T0) % HOUR_MS == 0
        seen.append(key)
    assert len(set(seen)) > 1  # the writers did write (each starts again from hour 0)
