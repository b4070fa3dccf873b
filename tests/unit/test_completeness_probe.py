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

import pytest
from test_completeness_trigger import Stream, hour

from airflow_streaming.checkpoint.batches import _batch_ids
from airflow_streaming.completeness import parse_rule
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.hooks import completeness
from airflow_streaming.hooks.completeness import _commits_after, look


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


def test_the_probe_finds_what_the_listing_finds(tmp_path):
    s = Stream(tmp_path)
    for b in range(5):
        s.batch(b, hour(0) + b)
    storage, ckpt = LocalStorage(), str(s.ckpt)
    for seen in range(5):
        assert _commits_after(storage, ckpt, seen) == [c for c in listed(s) if c >= seen]
    s.batch(5, hour(0) + 5, commit=False)  # planned, not committed: not a commit
    assert _commits_after(storage, ckpt, 4) == [4]
    (s.ckpt / "commits" / ".5.crc").write_bytes(b"crc")  # Spark's checksum file is not a commit either
    assert _commits_after(storage, ckpt, 4) == [4]


def test_it_lists_when_it_cannot_be_sure(tmp_path):
    s = Stream(tmp_path)
    for b in range(12):
        s.batch(b, hour(0) + b)
    storage, ckpt = LocalStorage(), str(s.ckpt)
    assert _commits_after(storage, ckpt, 2) is None  # 9 new commits: more than _PROBE_MAX
    assert _commits_after(storage, ckpt, 3) == list(range(3, 12))  # 8 new: found
    assert _commits_after(storage, ckpt, 40) is None  # the last seen commit is not there (restored, replaced)

    class Remote(LocalStorage):
        cheap_exists = False  # e.g. WebHDFS: every exists() is a request

    assert _commits_after(Remote(), ckpt, 11) is None


def test_an_idle_look_does_not_list_and_a_restored_checkpoint_is_listed_and_read(tmp_path, listings):
    s, rule = Stream(tmp_path), parse_rule({"period": "hourly"})
    s.batch(0, hour(0) + 1)
    found = look(s.hook, rule, None, None)
    assert len(listings) == 2  # the first look lists commits/ (and its full read lists it again)
    seen = (found.checkpoint, found.newest_commit)
    for _ in range(3):
        again = look(s.hook, rule, None, seen)
        assert again.unchanged and again.newest_commit == 0
    assert len(listings) == 2, "an idle look must not list commits/"
    s.batch(1, hour(0) + 2)
    found = look(s.hook, rule, None, seen)
    assert found.unchanged and found.newest_commit == 1 and len(listings) == 2
    seen = (found.checkpoint, found.newest_commit)
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
