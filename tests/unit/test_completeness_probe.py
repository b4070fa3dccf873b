"""The completeness look finds a checkpoint's newest commit by asking for the next names, not by listing.

On a local file system an idle look asks whether ``commits/<last seen>`` and ``commits/<last seen + 1>`` exist
(:func:`airflow_streaming.hooks.completeness._commits_after`) instead of listing ``commits/`` (~200 names read
and sorted at every look). It must find exactly what the listing finds, and list whenever it cannot be sure: a
checkpoint restored or replaced (the last seen commit gone), many new commits, a storage whose ``exists`` is a
request (WebHDFS).
"""

from __future__ import annotations

import os
import shutil
import time

import pytest
from test_completeness_trigger import Stream, hour

from airflow_streaming.checkpoint.batches import _batch_ids
from airflow_streaming.completeness import parse_rule
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.hooks import completeness
from airflow_streaming.hooks.completeness import _commits_after, _list_commits, look


@pytest.fixture
def listings(monkeypatch):
    """The ``commits/`` listings the looks made."""
    calls: list[str] = []
    real = LocalStorage.list_dir

    def counting(self, path):
        if path.endswith("/commits"):
            calls.append(path)
        return real(self, path)

    monkeypatch.setattr(LocalStorage, "list_dir", counting)
    return calls


def listed(s: Stream) -> list[int]:
    return _batch_ids(os.listdir(s.ckpt / "commits"))


@pytest.fixture
def settled(monkeypatch):
    """Directories and files count as settled 0.05 s after their last change (LocalStorage.SETTLED_S is 2 s):
    :func:`settle` waits that long."""
    monkeypatch.setattr(LocalStorage, "SETTLED_S", 0.05)
    completeness._LISTED.clear()


def settle() -> None:
    time.sleep(0.1)


def test_the_probe_finds_what_the_listing_finds(tmp_path, settled):
    s = Stream(tmp_path)
    for b in range(5):
        s.batch(b, hour(0) + b)
    storage, ckpt = LocalStorage(), str(s.ckpt)
    for seen in range(4):
        assert _commits_after(storage, ckpt, seen) == [c for c in listed(s) if c >= seen]
    assert _commits_after(storage, ckpt, 4) is None  # no next name: only a listing can tell there is none
    settle()
    assert _list_commits(storage, ckpt) == listed(s)
    assert _commits_after(storage, ckpt, 4) == [4]  # the directory is as it was listed: nothing new
    s.batch(5, hour(0) + 5, commit=False)  # planned, not committed: not a commit
    settle()
    assert _commits_after(storage, ckpt, 4) == [4]
    (s.ckpt / "commits" / ".5.crc").write_bytes(b"crc")  # Spark's checksum file is not a commit, but a change:
    settle()
    assert _commits_after(storage, ckpt, 4) is None  # listed again
    assert _list_commits(storage, ckpt) == [0, 1, 2, 3, 4]
    s.commit(5)
    assert _commits_after(storage, ckpt, 4) == [4, 5]


def test_a_log_with_gaps_is_listed(tmp_path, settled):
    """Async progress tracking writes the offsets and commit logs only every interval: commit ids with gaps. A
    commit past a gap is found at the next look at the latest (never missed while the stream is idle after it)."""
    s = Stream(tmp_path)
    for b in (0, 5):
        s.batch(b, hour(0) + b)
    storage, ckpt = LocalStorage(), str(s.ckpt)
    settle()
    assert _list_commits(storage, ckpt) == [0, 5]
    assert _commits_after(storage, ckpt, 5) == [5]
    s.batch(9, hour(0) + 9)  # 6..8 never logged
    assert _commits_after(storage, ckpt, 5) is None  # directory changed, no commits/6: list
    settle()
    assert _list_commits(storage, ckpt) == [0, 5, 9]
    s.batch(10, hour(0) + 10)
    s.batch(14, hour(0) + 14)
    assert _commits_after(storage, ckpt, 9) == [9, 10]  # this look stops at the gap...
    settle()
    assert _commits_after(storage, ckpt, 10) is None  # ...the next one lists (the last listing found 9)
    assert _list_commits(storage, ckpt)[-1] == 14


def test_it_lists_when_it_cannot_be_sure(tmp_path, settled):
    s = Stream(tmp_path)
    for b in range(12):
        s.batch(b, hour(0) + b)
    storage, ckpt = LocalStorage(), str(s.ckpt)
    assert _commits_after(storage, ckpt, 2) is None  # 9 new commits: more than _PROBE_MAX
    assert _commits_after(storage, ckpt, 3) == list(range(3, 12))  # 8 new: found
    assert _commits_after(storage, ckpt, 40) is None  # the last seen commit is not there (restored, replaced)
    assert _list_commits(storage, ckpt)[-1] == 11  # listed before it settled: no mark is kept
    assert _commits_after(storage, ckpt, 11) is None
    settle()
    _list_commits(storage, ckpt)
    assert _commits_after(storage, ckpt, 11) == [11]

    class Remote(LocalStorage):
        cheap_exists = False  # e.g. WebHDFS: every exists() is a request

    assert _commits_after(Remote(), ckpt, 11) is None


def test_an_idle_look_does_not_list_and_a_restored_checkpoint_is_listed_and_read(tmp_path, listings, settled):
    s, rule = Stream(tmp_path), parse_rule({"period": "hourly"})
    s.batch(0, hour(0) + 1)
    settle()
    found = look(s.hook, rule, None, None)
    assert len(listings) == 2  # the first look lists commits/ (and its full read lists it again)
    seen = (found.checkpoint, found.newest_commit)
    for _ in range(3):
        again = look(s.hook, rule, None, seen)
        assert again.unchanged and again.newest_commit == 0
    assert len(listings) == 2, "an idle look must not list commits/"
    s.batch(1, hour(0) + 2)
    found = look(s.hook, rule, None, seen)
    assert found.unchanged and found.newest_commit == 1 and len(listings) == 2  # found by name
    seen = (found.checkpoint, found.newest_commit)
    settle()
    assert look(s.hook, rule, None, seen).newest_commit == 1 and len(listings) == 3  # no next name: listed once
    for _ in range(3):
        assert look(s.hook, rule, None, seen).unchanged
    assert len(listings) == 3, "an idle look must not list commits/"
    # The checkpoint is replaced by an older copy that then ran on past the old position with other watermarks:
    # commits/1 is gone for a moment, then batch 1 is committed again, closing hour 0 this time.
    shutil.rmtree(s.ckpt / "commits")
    os.makedirs(s.ckpt / "commits")
    s.commit(0)
    restored = look(s.hook, rule, None, seen)
    assert restored.newest_commit == 0 and not restored.unchanged and len(listings) > 2
    s.batch(1, hour(1) + 1)
    found = look(s.hook, rule, None, (restored.checkpoint, restored.newest_commit))
    assert [e.batch_id for e in found.events] == [1]
