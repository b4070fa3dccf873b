"""Unit tests of checkpoint snapshots on copies of real Spark 4.2 checkpoints (no Spark started)."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest

from airflow_streaming.lifecycle import snapshot as snapshots
from airflow_streaming.lifecycle.snapshot import (
    SnapshotError,
    SnapshotManifest,
    load_manifest,
    restore_snapshot,
    sink_path_from_description,
    take_snapshot,
)

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"
# Fixture -> its last committed batch (see tests/fixtures/checkpoints/README.md).
LAST_BATCH = {"spark42_agg_dedup": 1, "spark42_join": 1, "spark42_offsets_v2_rocksdb": 2, "spark42_tws": 0}
SUFFIX = ".rolled-back-u1"


def _copy_fixture(tmp_path: Path, name: str = "spark42_agg_dedup") -> Path:
    dest = tmp_path / "ckpt"
    shutil.copytree(FIXTURES / name, dest)
    return dest


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under ``root``: relative path -> bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _write(path: Path, data: str = "x") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(data)


def _simulate_v2_run(checkpoint: Path, n: int) -> None:
    """What a new version does to the checkpoint: batches n+1 and n+2, new state, cleanup, a rewrite."""
    for batch in (n + 1, n + 2):
        for log in ("offsets", "commits"):
            _write(checkpoint / log / str(batch), f"v2 {log} {batch}")
            _write(checkpoint / log / f".{batch}.crc", "crc")
    partitions = {p.parent for p in (checkpoint / "state").rglob("*") if snapshots._STATE_FILE.match(p.name)}
    for part in partitions or {checkpoint / "state" / "0" / "0"}:
        for version in (n + 2, n + 3):
            _write(part / f"{version}.delta", f"v2 state {version}")
            _write(part / f".{version}.delta.crc", "crc")
    (checkpoint / "offsets" / "0").unlink()  # Spark's log retention
    metadata = sorted(p for p in (checkpoint / "state" / "0" / "_metadata").rglob("*") if p.is_file())[-1]
    tmp = metadata.with_name(f".{metadata.name}.tmp")
    tmp.write_text("v2 operator metadata")
    os.replace(tmp, metadata)  # how Spark rewrites a file: temp + rename, never in place
    (checkpoint / "metadata").unlink()


@pytest.mark.parametrize("fixture", sorted(LAST_BATCH))
def test_snapshot_then_restore_after_a_v2_run(tmp_path, fixture):
    checkpoint = _copy_fixture(tmp_path, fixture)
    original = _tree(checkpoint)
    snap = tmp_path / "snap"

    manifest = take_snapshot(str(checkpoint), str(snap))

    assert manifest.batch_id == LAST_BATCH[fixture]
    assert (manifest.checkpoint, manifest.snapshot_dir, manifest.sink_metadata) == (str(checkpoint), str(snap), None)
    assert _tree(snap / "checkpoint") == original
    assert (manifest.files, manifest.bytes) == (len(original), sum(len(b) for b in original.values()))
    assert load_manifest(str(snap)) == manifest

    _simulate_v2_run(checkpoint, manifest.batch_id)
    v2 = _tree(checkpoint)
    assert v2 != original
    assert _tree(snap / "checkpoint") == original  # the v2 run did not touch the snapshot's files

    report = restore_snapshot(load_manifest(str(snap)), SUFFIX)

    assert _tree(checkpoint) == _tree(snap / "checkpoint") == original
    assert report == {"checkpoint": str(checkpoint), "batch_id": manifest.batch_id,
                      "moved_aside": f"{checkpoint}{SUFFIX}", "sink_metadata_restored": False,
                      "files": len(original)}
    assert _tree(Path(f"{checkpoint}{SUFFIX}")) == v2  # kept for forensics
    assert not (snap / "restoring.json").exists()
    assert json.loads((snap / "restored.json").read_text()) == report


def test_state_files_after_the_next_version_and_later_log_entries_are_left_out(tmp_path):
    checkpoint = _copy_fixture(tmp_path)  # last committed batch 1: state version 2 is current
    part = checkpoint / "state" / "0" / "0"
    later = ["3.delta", ".3.delta.crc", "3.delta.crc", "3.snapshot", ".3.snapshot.crc", "3.zip",
             "3_0b8f.zip", "3_0b8f.zip.crc", "3.changelog", "4_0b8f.changelog", ".3.delta.2c1e.tmp"]
    current = ["2.snapshot", "2_77aa.zip", "2.changelog", "SSTs/000009-77aa.sst", "_metadata/v2/5"]
    for name in later + current:
        _write(part / name)
    for log in ("offsets", "commits"):  # numbered names that do not count as planned/committed batches
        _write(checkpoint / log / ".2.crc")
        _write(checkpoint / log / ".2.4f0e.tmp")
        _write(checkpoint / log / ".1.9a9a.tmp")

    manifest = take_snapshot(str(checkpoint), str(tmp_path / "snap"))

    kept = _tree(tmp_path / "snap" / "checkpoint")
    dropped = {f"state/0/0/{name}" for name in later} | {f"{log}/{name}" for log in ("offsets", "commits")
                                                         for name in (".2.crc", ".2.4f0e.tmp")}
    expected = {rel: data for rel, data in _tree(checkpoint).items() if rel not in dropped}
    assert kept == expected
    for name in current:
        assert f"state/0/0/{name}" in kept
    assert "offsets/.1.9a9a.tmp" in kept and "commits/.2.crc" not in kept
    assert manifest.files == len(expected)


def test_an_unclean_checkpoint_is_snapshotted_at_its_last_committed_batch(tmp_path):
    # The stop cancelled batch 1 (planned, not committed): the snapshot holds batch 0; a restart from it
    # plans batch 1 again, as Spark replays an uncommitted batch.
    checkpoint = _copy_fixture(tmp_path)
    (checkpoint / "commits" / "1").unlink()
    manifest = take_snapshot(str(checkpoint), str(tmp_path / "snap"))
    kept = _tree(tmp_path / "snap" / "checkpoint")
    assert manifest.batch_id == 0
    assert "offsets/0" in kept and "offsets/1" not in kept and "commits/1" not in kept


def test_a_missing_checkpoint_is_refused_naming_the_path(tmp_path):
    missing = tmp_path / "never-ran"
    with pytest.raises(SnapshotError, match="does not exist") as err:
        take_snapshot(str(missing), str(tmp_path / "snap"))
    assert str(missing) in str(err.value)


def _sink_log(directory: Path, ids: range, compact: tuple[int, ...] = (9,)) -> None:
    for i in ids:
        name = f"{i}.compact" if i in compact else str(i)
        _write(directory / name, f"v1\n{{\"path\":\"part-{i}\"}}")
        _write(directory / f".{name}.crc", "crc")


def test_file_sink_log_is_snapshotted_up_to_the_batch_and_restored(tmp_path):
    checkpoint = tmp_path / "ckpt"  # a checkpoint clean at batch 10
    for log in ("offsets", "commits"):
        for i in range(11):
            _write(checkpoint / log / str(i), f"{log} {i}")
    _write(checkpoint / "metadata", '{"id":"q"}')
    out = tmp_path / "out"
    log_dir = out / "_spark_metadata"
    _sink_log(log_dir, range(13))  # entries 11 and 12 are after the checkpoint's batch
    _write(out / "part-0.parquet", "data")

    manifest = take_snapshot(str(checkpoint), str(tmp_path / "snap"), sink_path=f"file:{out}")

    assert manifest.sink_metadata == str(log_dir)
    snapped = _tree(tmp_path / "snap" / "sink_metadata")
    assert snapped == {rel: data for rel, data in _tree(log_dir).items() if "11" not in rel and "12" not in rel}
    assert {"9.compact", ".9.compact.crc", "10", ".10.crc"} <= set(snapped)
    assert manifest.files == len(_tree(checkpoint)) + len(snapped)

    # The new version writes batches 11..13 and its compaction deletes the entries before 9.
    _sink_log(log_dir, range(11, 14))
    for i in range(9):
        (log_dir / str(i)).unlink()
    _write(out / "part-13.parquet", "v2 data")
    v2_log = _tree(log_dir)

    report = restore_snapshot(manifest, SUFFIX)

    assert report["sink_metadata_restored"] is True
    assert _tree(log_dir) == snapped
    assert _tree(out / f"_spark_metadata{SUFFIX}") == v2_log  # "_" prefix: ignored by Spark's readers
    assert (out / "part-13.parquet").exists()  # data files are not the snapshot's business
    assert _tree(checkpoint) == _tree(tmp_path / "snap" / "checkpoint")


def test_snapshot_is_idempotent_and_redone_when_incomplete(tmp_path):
    checkpoint = _copy_fixture(tmp_path)
    snap = tmp_path / "snap"
    _write(snap / "checkpoint" / "half-written", "junk")  # a crash mid-snapshot: no manifest

    first = take_snapshot(str(checkpoint), str(snap))
    assert not (snap / "checkpoint" / "half-written").exists()
    assert _tree(snap / "checkpoint") == _tree(checkpoint)

    _write(snap / "checkpoint" / "marker")
    again = take_snapshot(f"file://{checkpoint}", str(snap))
    assert again == first
    assert (snap / "checkpoint" / "marker").exists()  # returned as is, not taken again

    _simulate_v2_run(checkpoint, 1)  # the checkpoint moved on: the snapshot is of another batch
    with pytest.raises(SnapshotError, match="already holds a snapshot"):
        take_snapshot(str(checkpoint), str(snap))


@pytest.mark.parametrize("crash_after", [0, 1, 20])
def test_a_restore_that_crashed_midway_completes_when_run_again(tmp_path, monkeypatch, crash_after):
    checkpoint = _copy_fixture(tmp_path, "spark42_join")
    out = tmp_path / "out"
    _sink_log(out / "_spark_metadata", range(2))
    manifest = take_snapshot(str(checkpoint), str(tmp_path / "snap"), sink_path=str(out))
    _simulate_v2_run(checkpoint, 1)
    _sink_log(out / "_spark_metadata", range(2, 4))
    v2 = _tree(checkpoint)

    real_place, placed = snapshots._place, []

    def crashing_place(source: str, dest: str, try_link: bool) -> bool:
        if len(placed) == crash_after:
            raise KeyboardInterrupt("killed mid-restore")
        placed.append(dest)
        return real_place(source, dest, try_link)

    monkeypatch.setattr(snapshots, "_place", crashing_place)
    with pytest.raises(KeyboardInterrupt):
        restore_snapshot(manifest, SUFFIX)
    monkeypatch.setattr(snapshots, "_place", real_place)
    for dest in placed[::2]:  # and half of what was already put back is lost too
        os.unlink(dest)

    report = restore_snapshot(manifest, SUFFIX)

    assert _tree(checkpoint) == _tree(tmp_path / "snap" / "checkpoint")
    assert _tree(out / "_spark_metadata") == _tree(tmp_path / "snap" / "sink_metadata")
    assert report["moved_aside"] == f"{checkpoint}{SUFFIX}"
    assert _tree(Path(f"{checkpoint}{SUFFIX}")) == v2  # the original, not a partial copy
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", f"ckpt{SUFFIX}", "out", "snap"]


def test_a_completed_restore_is_not_redone_until_the_checkpoint_moves_on(tmp_path):
    checkpoint = _copy_fixture(tmp_path)
    manifest = take_snapshot(str(checkpoint), str(tmp_path / "snap"))
    _simulate_v2_run(checkpoint, 1)
    first = restore_snapshot(manifest, SUFFIX)

    assert restore_snapshot(manifest, SUFFIX) == first
    assert not Path(f"{checkpoint}{SUFFIX}.1").exists()

    # The old version ran on (batch 2), then a second rollback: a fresh restore, a new aside name.
    _write(checkpoint / "offsets" / "2")
    _write(checkpoint / "commits" / "2")
    second = restore_snapshot(manifest, SUFFIX)
    assert second["moved_aside"] == f"{checkpoint}{SUFFIX}.1"
    assert (Path(second["moved_aside"]) / "commits" / "2").exists()
    assert _tree(checkpoint) == _tree(tmp_path / "snap" / "checkpoint")


def test_hard_links_on_the_same_filesystem(tmp_path):
    checkpoint = _copy_fixture(tmp_path)
    manifest = take_snapshot(str(checkpoint), str(tmp_path / "snap"))
    assert manifest.linked is True
    live, snapped = checkpoint / "state" / "0" / "0" / "2.delta", tmp_path / "snap" / "checkpoint" / "state/0/0/2.delta"
    assert live.stat().st_ino == snapped.stat().st_ino


def test_copies_when_hard_links_fail(tmp_path, monkeypatch):
    checkpoint = _copy_fixture(tmp_path)

    def cross_device(source: str, dest: str) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(snapshots.os, "link", cross_device)
    manifest = take_snapshot(str(checkpoint), str(tmp_path / "snap"))
    assert manifest.linked is False
    assert _tree(tmp_path / "snap" / "checkpoint") == _tree(checkpoint)
    live, snapped = checkpoint / "commits" / "1", tmp_path / "snap" / "checkpoint" / "commits" / "1"
    assert live.stat().st_ino != snapped.stat().st_ino


def test_manifest_round_trip_and_bad_manifests(tmp_path):
    manifest = SnapshotManifest("/c", "/s", None, "/o/_spark_metadata", 3, 10, True, 1.5)
    assert SnapshotManifest.from_dict(json.loads(json.dumps(manifest.to_dict()))) == manifest
    assert load_manifest(str(tmp_path)) is None
    (tmp_path / "manifest.json").write_text('{"checkpoint": "/c"}')
    with pytest.raises(SnapshotError, match="lacks snapshot_dir") as err:
        load_manifest(str(tmp_path))
    assert str(tmp_path / "manifest.json") in str(err.value)


@pytest.mark.parametrize(("description", "expected"), [
    ("FileSink[file:/tmp/x/out]", "/tmp/x/out"),
    ("FileSink[file:///tmp/x/out]", "/tmp/x/out"),
    ("FileSink[/tmp/x]", "/tmp/x"),
    ("FileSink[relative/out]", None),
    ("FileSink[hdfs://nn:8020/out]", "hdfs://nn:8020/out"),
    ("FileSink[webhdfs://nn:9870/out]", "webhdfs://nn:9870/out"),
    ("FileSink[s3a://bucket/out]", None),
    ("ForeachBatchSink", None),
    ("org.apache.spark.sql.kafka010.KafkaSourceProvider$KafkaTable@1c2d", None),
    ("", None),
    (None, None),
])
def test_sink_path_from_description(description, expected):
    assert sink_path_from_description(description) == expected
