"""Reading the newest committed batches of hand-built checkpoints (Spark's file formats), bad files included."""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from airflow_streaming.checkpoint.committed import progress_counts, read_committed
from airflow_streaming.checkpoint.logs import CheckpointError
from airflow_streaming.completeness import CommittedBatch
from airflow_streaming.control.local import LOCAL_FILE_SYSTEMS, LocalStorage, attributes_current, mount_types
from airflow_streaming.control.storage import ControlStorage, StorageError

QUERY = "6f1c2d3e-0000-4000-8000-000000000037"


def offsets(wm: int) -> bytes:
    meta = {"batchWatermarkMs": wm, "batchTimestampMs": 1_700_000_000_000, "conf": {"spark.sql.shuffle.partitions": "2"}}
    return f'v1\n{json.dumps(meta)}\n{{"logOffset":3}}'.encode()


COMMIT = b'v1\n{"nextBatchWatermarkMs":0}'


def build(root, watermarks: dict[int, int], commits, extra: dict[str, bytes] | None = None) -> str:
    os.makedirs(root / "offsets")
    os.makedirs(root / "commits")
    (root / "metadata").write_text(json.dumps({"id": QUERY}))
    for batch, wm in watermarks.items():
        (root / "offsets" / str(batch)).write_bytes(offsets(wm))
        (root / "offsets" / f".{batch}.crc").write_bytes(b"\x00crc")
    for batch in commits:
        (root / "commits" / str(batch)).write_bytes(COMMIT)
    for name, data in (extra or {}).items():
        (root / name).write_bytes(data)
    return str(root)


def test_watermarks_commits_and_only_the_newest(tmp_path):
    ckpt = build(tmp_path / "c", {i: 1000 * i for i in range(10)}, range(9))
    read = read_committed(LocalStorage(), ckpt, last=3)
    assert read.batches == [CommittedBatch(7, 7000, True), CommittedBatch(8, 8000, True), CommittedBatch(9, 9000, False)]
    assert read.skipped == [] and read.files_read == 3 + 2  # three offsets files, two commits, nothing older
    assert read_committed(LocalStorage(), ckpt).batches[0] == CommittedBatch(0, 0, True)


@pytest.mark.parametrize("bad, reason", [
    (b"", "empty offsets"),
    (b"v1\n", "truncated offsets"),
    (b'v1\n{"batchWatermarkMs":5', "not valid JSON"),
    (b"v9\n{}\n-", "unsupported offsets log version v9"),
    (b"\xff\xfe garbage", "not UTF-8"),
])
def test_a_bad_offsets_file_leaves_its_batch_out(tmp_path, bad, reason):
    ckpt = build(tmp_path / "c", {0: 0, 1: 10, 2: 20}, [0, 1, 2], {"offsets/1": bad})
    read = read_committed(LocalStorage(), ckpt)
    assert [b.batch_id for b in read.batches] == [0, 2]
    (why,) = read.skipped
    assert why.startswith(f"{ckpt}/offsets/1: ") and reason in why and "batch 1 left out" in why


@pytest.mark.parametrize("bad", [b"", b"v1\n", b"v1\n{not json", b"junk"])
def test_a_bad_commit_file_is_no_commit(tmp_path, bad):
    ckpt = build(tmp_path / "c", {0: 0, 1: 10}, [0, 1], {"commits/1": bad})
    read = read_committed(LocalStorage(), ckpt)
    assert read.batches == [CommittedBatch(0, 0, True), CommittedBatch(1, 10, False)]
    (why,) = read.skipped
    assert why.startswith(f"{ckpt}/commits/1: ") and "not counted as committed" in why


def test_a_commit_without_offsets_and_an_empty_checkpoint(tmp_path):
    ckpt = build(tmp_path / "c", {0: 0}, [0, 1])
    read = read_committed(LocalStorage(), ckpt)
    assert read.batches == [CommittedBatch(0, 0, True)]
    assert read.skipped == [f"{ckpt}/commits: commit(s) [1] have no offsets file (no watermark)"]
    fresh = read_committed(LocalStorage(), str(tmp_path / "never-started"))
    assert (fresh.batches, fresh.skipped) == ([], [])


def test_unreadable_files_are_skipped_and_a_listing_failure_is_named(tmp_path):
    class Flaky(LocalStorage):
        def read_bytes(self, path):
            if path.endswith("/offsets/1"):
                raise StorageError(5, f"{path}: input/output error")
            if path.endswith("/commits/0"):
                return None  # deleted between the listing and the read
            return super().read_bytes(path)

    ckpt = build(tmp_path / "c", {0: 0, 1: 10, 2: 20}, [0, 1, 2])
    read = read_committed(Flaky(), ckpt)
    assert read.batches == [CommittedBatch(0, 0, False), CommittedBatch(2, 20, True)]
    assert [s.split(": ", 1)[0] for s in read.skipped] == [f"{ckpt}/commits/0", f"{ckpt}/offsets/1"]

    class NoListing(LocalStorage):
        def list_dir(self, path):
            raise StorageError(13, f"{path}: permission denied")

    with pytest.raises(CheckpointError, match=r"/offsets: cannot be listed"):
        read_committed(NoListing(), ckpt)


def test_progress_counts_of_this_query_only(tmp_path):
    ckpt = build(tmp_path / "c", {0: 0, 1: 10, 2: 20}, [0, 1, 2])

    def report(batch, rows, dropped, query=QUERY):
        return {"id": query, "batchId": batch, "numInputRows": rows, "eventTime": {"min": f"2026-01-01T00:00:0{batch}.250Z"},
                "stateOperators": [{"numRowsDroppedByWatermark": d} for d in dropped]}

    progress = [report(0, 5, [0]), report(1, 7, [2, 1]), report(1, 8, [3]),  # batch 1 replayed: the last wins
                report(2, 99, [9], query="another-checkpoint"), "not a report", {"batchId": "x"}]
    read = read_committed(LocalStorage(), ckpt, progress=progress)
    assert read.query_id == QUERY
    t0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
    assert read.batches == [CommittedBatch(0, 0, True, 5, 0, t0 + 250), CommittedBatch(1, 10, True, 8, 3, t0 + 1250),
                            CommittedBatch(2, 20, True, None, None, None)]
    # Reports of batches older than those read are not parsed (a watch remembers 4x more than a read uses).
    assert read_committed(LocalStorage(), ckpt, last=2, progress=progress).batches == [
        CommittedBatch(1, 10, True, 8, 3, t0 + 1250), CommittedBatch(2, 20, True, None, None, None)]
    assert progress_counts(progress, QUERY, since=1) == {1: (8, 3, t0 + 1250)}
    # No state operator: nothing dropped as late; an operator without the count: unknown.
    assert progress_counts([{"batchId": 4, "numInputRows": 3, "eventTime": {"min": "garbage"}},
                            {"batchId": 5, "stateOperators": [{}]}]) == {4: (3, 0, None), 5: (None, None, None)}


def test_the_reader_writes_nothing(tmp_path):
    ckpt = build(tmp_path / "c", {0: 0, 1: 10}, [0])
    before = sorted((p, os.stat(os.path.join(p, f)).st_mtime_ns) for p, _, fs in os.walk(ckpt) for f in fs)
    read_committed(LocalStorage(), ckpt, progress=[])
    assert sorted((p, os.stat(os.path.join(p, f)).st_mtime_ns) for p, _, fs in os.walk(ckpt) for f in fs) == before


def test_an_epoch_earliest_event_time_is_no_earliest_event():
    """Spark reports ``eventTime.min`` as the epoch when a batch had a row with a null event time (a malformed
    line): that is not the batch's earliest event, and a first look must not start from 1970 (or 48 empty
    periods before the first watermark)."""
    def report(batch, minimum):
        return {"id": "q", "batchId": batch, "numInputRows": 10, "stateOperators": [],
                "eventTime": {"min": minimum, "watermark": "1970-01-01T00:00:00.000Z"}}

    counts = progress_counts([report(0, "1970-01-01T00:00:00.000Z"), report(1, "2026-01-01T00:00:05.000Z")])
    assert counts[0].first_event_ms is None and counts[0].input_rows == 10
    assert counts[1].first_event_ms == 1767225605000


# What an earlier read parsed is used again only while the storage vouches for the file (its identity).

SETTLE = 0.1


@pytest.fixture
def settled(monkeypatch):
    """Files count as settled 0.05 s after their last change (LocalStorage.SETTLED_S is 2 s): these tests
    change files and read them again within a second, sleeping SETTLE after each change."""
    monkeypatch.setattr(LocalStorage, "SETTLED_S", 0.05)


def rewrite(path, data: bytes) -> None:
    """Replace ``path`` the way Spark puts a file in place: a temporary file, then a rename over it."""
    tmp = f"{path}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


def test_a_second_read_uses_what_the_first_parsed_and_sees_the_same(tmp_path, settled):
    ckpt = build(tmp_path / "c", {i: 1000 * i for i in range(10)}, range(9))
    time.sleep(SETTLE)
    first = read_committed(LocalStorage(), ckpt, last=3)
    again = read_committed(LocalStorage(), ckpt, last=3)
    assert first.files_read == 5 and again.files_read == 0  # three offsets files and two commits, then none
    assert again.batches == first.batches and again.skipped == []


def test_a_file_written_in_the_last_seconds_is_read_every_time(tmp_path):
    ckpt = build(tmp_path / "c", {0: 0, 1: 10}, [0, 1])
    assert LocalStorage.SETTLED_S >= 1
    assert read_committed(LocalStorage(), ckpt).files_read == read_committed(LocalStorage(), ckpt).files_read == 4


def test_a_rewritten_or_restored_file_is_read_again(tmp_path, settled):
    root = tmp_path / "c"
    ckpt = build(root, {0: 0, 1: 10, 2: 20}, [0, 1, 2])
    time.sleep(SETTLE)
    assert [(b.watermark_ms, b.committed) for b in read_committed(LocalStorage(), ckpt).batches] == \
        [(0, True), (10, True), (20, True)]
    rewrite(root / "offsets" / "0", offsets(7))  # replaced by a rename, the same size
    with open(root / "offsets" / "1", "r+b") as fh:  # overwritten in place, the same size
        fh.write(offsets(11))
    time.sleep(SETTLE)
    read = read_committed(LocalStorage(), ckpt)
    assert [b.watermark_ms for b in read.batches] == [7, 11, 20] and read.files_read == 2
    # A snapshot restored over it: every file deleted and written again (inode numbers may come back).
    shutil.rmtree(root)
    build(root, {0: 1, 1: 12, 2: 23}, [0, 1], {"commits/2": b"v1\n"})
    time.sleep(SETTLE)
    read = read_committed(LocalStorage(), ckpt)
    assert [(b.watermark_ms, b.committed) for b in read.batches] == [(1, True), (12, True), (23, False)]
    assert read.files_read == 6 and "truncated commit file" in read.skipped[0]


def test_garbage_is_never_kept(tmp_path, settled):
    ckpt = build(tmp_path / "c", {0: 0, 1: 10}, [0, 1], {"offsets/1": b"v1\n{garbage"})
    time.sleep(SETTLE)
    for _ in range(2):
        read = read_committed(LocalStorage(), ckpt)
        assert [b.batch_id for b in read.batches] == [0] and "batch 1 left out" in read.skipped[0]
    assert read.files_read == 1  # offsets/1 again; offsets/0 and commits/0 from the first read


class _NoIdentities(LocalStorage):
    """A storage that cannot vouch for a file (the base class's answer, as WebHDFS gives today)."""

    file_identity = ControlStorage.file_identity


def test_a_storage_without_identities_is_read_every_time(tmp_path, settled):
    ckpt = build(tmp_path / "c", {0: 0, 1: 10}, [0, 1])
    time.sleep(SETTLE)
    assert [read_committed(_NoIdentities(), ckpt).files_read for _ in range(2)] == [4, 4]


def test_local_file_identity(tmp_path, settled):
    storage, path = LocalStorage(), tmp_path / "f"
    assert storage.file_identity(str(path)) is None  # absent
    assert storage.file_identity(str(tmp_path)) is None  # a directory
    path.write_bytes(b"one")
    assert storage.file_identity(str(path)) is None  # too fresh to vouch for
    time.sleep(SETTLE)
    first = storage.file_identity(str(path))
    assert first is not None and storage.file_identity(str(path)) == first
    rewrite(path, b"two")
    time.sleep(SETTLE)
    second = storage.file_identity(str(path))
    assert second not in (None, first)
    path.write_bytes(b"six")
    time.sleep(SETTLE)
    assert storage.file_identity(str(path)) not in (None, first, second)


def test_only_a_file_system_known_to_keep_its_attributes_current_gives_identities():
    mountinfo = ("27 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard\n"
                 "40 27 0:45 / /mnt/ckpt rw,relatime shared:1 - nfs4 server:/export rw,vers=4.2\n"
                 "41 27 0:46 / /mnt/fuse rw - fuse.sshfs host:/x rw\n"
                 "garbage line\n")
    types = mount_types(mountinfo)
    assert types == {os.makedev(254, 0): "ext4", os.makedev(0, 45): "nfs4", os.makedev(0, 46): "fuse.sshfs"}
    assert [t in LOCAL_FILE_SYSTEMS for t in types.values()] == [True, False, False]
    assert attributes_current(os.stat(__file__).st_dev)  # this machine's tests run on a local file system
    assert not attributes_current(os.makedev(4095, 4095))  # not mounted: not known
