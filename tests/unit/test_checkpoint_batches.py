"""Unit tests of reading a checkpoint's batch position from hand-built checkpoint directories."""

from __future__ import annotations

import os

import pytest

from airflow_streaming.checkpoint.batches import BatchPosition, read_batch_position
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.locations import storage_for


def _log(directory, *names: str) -> None:
    """Create a Spark-like metadata log directory containing the given file names."""
    os.makedirs(directory, exist_ok=True)
    for name in names:
        with open(os.path.join(directory, name), "w") as fh:
            fh.write("v1\n{}")


def _checkpoint(tmp_path, offsets=(), commits=(), extra_offsets=(), extra_commits=()) -> str:
    root = tmp_path / "ckpt"
    _log(root / "offsets", *(str(i) for i in offsets), *extra_offsets)
    _log(root / "commits", *(str(i) for i in commits), *extra_commits)
    (root / "metadata").write_text('{"id":"0f5c"}')
    return str(root)


@pytest.fixture
def storage() -> LocalStorage:
    return LocalStorage()


def test_missing_checkpoint_is_fresh(storage, tmp_path):
    pos = read_batch_position(storage, str(tmp_path / "never-started"))
    assert (pos.last_planned, pos.last_committed) == (None, None)
    assert pos.clean is True
    assert pos.next_batch_id == 0


def test_empty_checkpoint_dirs_are_fresh(storage, tmp_path):
    pos = read_batch_position(storage, _checkpoint(tmp_path))
    assert (pos.last_planned, pos.last_committed) == (None, None)
    assert pos.clean is True
    assert pos.next_batch_id == 0


def test_all_planned_batches_committed_is_clean(storage, tmp_path):
    ckpt = _checkpoint(tmp_path, offsets=range(6), commits=range(6))
    pos = read_batch_position(storage, ckpt)
    assert pos == BatchPosition(ckpt, 5, 5)
    assert pos.clean is True
    assert pos.next_batch_id == 6


def test_planned_but_uncommitted_batch_is_replayed(storage, tmp_path):
    ckpt = _checkpoint(tmp_path, offsets=range(7), commits=range(6))
    pos = read_batch_position(storage, ckpt)
    assert (pos.last_planned, pos.last_committed) == (6, 5)
    assert pos.clean is False
    assert pos.next_batch_id == 6


def test_planned_without_any_commit_replays_last_planned(storage, tmp_path):
    pos = read_batch_position(storage, _checkpoint(tmp_path, offsets=range(3)))
    assert (pos.last_planned, pos.last_committed) == (2, None)
    assert pos.clean is False
    assert pos.next_batch_id == 2


def test_batch_ids_compare_as_numbers_not_names(storage, tmp_path):
    # Listing order is by name ("10" < "9"); the last batch is still 11.
    ckpt = _checkpoint(tmp_path, offsets=range(12), commits=range(11))
    pos = read_batch_position(storage, ckpt)
    assert (pos.last_planned, pos.last_committed) == (11, 10)
    assert pos.next_batch_id == 11


def test_purged_old_batches(storage, tmp_path):
    # Spark keeps only the latest minBatchesToRetain entries of each log.
    pos = read_batch_position(storage, _checkpoint(tmp_path, offsets=range(95, 101), commits=range(95, 101)))
    assert (pos.last_planned, pos.last_committed) == (100, 100)
    assert pos.clean is True
    assert pos.next_batch_id == 101


def test_ignores_crc_tmp_and_hidden_names(storage, tmp_path):
    ckpt = _checkpoint(
        tmp_path,
        offsets=range(4),
        commits=range(4),
        extra_offsets=(".0.crc", ".4.crc", "7.tmp", ".9.abc.tmp", "_x", "_12", "8.compact", "-1"),
        extra_commits=(".3.crc", ".5.crc", "6.tmp", "_x", "99.tmp"),
    )
    assert "7.tmp" in storage.list_dir(f"{ckpt}/offsets")  # the junk really is there
    pos = read_batch_position(storage, ckpt)
    assert (pos.last_planned, pos.last_committed) == (3, 3)
    assert pos.clean is True
    assert pos.next_batch_id == 4


def test_only_junk_names_count_as_fresh(storage, tmp_path):
    pos = read_batch_position(
        storage, _checkpoint(tmp_path, extra_offsets=(".0.crc", "0.tmp"), extra_commits=("_x",))
    )
    assert (pos.last_planned, pos.last_committed) == (None, None)
    assert pos.next_batch_id == 0


def test_works_with_a_file_uri_location(tmp_path):
    ckpt = _checkpoint(tmp_path, offsets=range(3), commits=range(2))
    storage, path = storage_for("file://" + ckpt)
    pos = read_batch_position(storage, path)
    assert pos.checkpoint == ckpt
    assert (pos.last_planned, pos.last_committed, pos.next_batch_id) == (2, 1, 2)


@pytest.mark.parametrize(
    "planned, committed, clean, next_id",
    [
        (None, None, True, 0),
        (0, None, False, 0),
        (0, 0, True, 1),
        (2, None, False, 2),
        (5, 5, True, 6),
        (6, 5, False, 6),
    ],
)
def test_position_properties(planned, committed, clean, next_id):
    pos = BatchPosition("/ckpt", planned, committed)
    assert pos.clean is clean
    assert pos.next_batch_id == next_id


def test_to_dict(storage, tmp_path):
    ckpt = _checkpoint(tmp_path, offsets=range(7), commits=range(6))
    d = read_batch_position(storage, ckpt).to_dict()
    assert d == {
        "checkpoint": ckpt,
        "last_planned_batch": 6,
        "last_committed_batch": 5,
        "clean": False,
        "next_batch_id": 6,
    }
    assert BatchPosition("/c", None, None).to_dict() == {
        "checkpoint": "/c",
        "last_planned_batch": None,
        "last_committed_batch": None,
        "clean": True,
        "next_batch_id": 0,
    }
