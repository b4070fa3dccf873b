"""Snapshots of checkpoints on HDFS (copy path, no hard links), against the WebHDFS-protocol STAND-IN.

No real NameNode can run here: the HDFS side of these tests is tests/webhdfs_standin.py, an HTTP
server over a temp directory answering like a NameNode + DataNode. The checkpoints are copies of real
Spark 4.2 checkpoints (tests/fixtures/checkpoints) and synthetic trees in Spark's layout.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.storage import StorageError, TreeEntry
from airflow_streaming.control.locations import storage_for
from airflow_streaming.control.webhdfs import WebHdfsSettings, WebHdfsStorage
from airflow_streaming.lifecycle import snapshot_copy
from airflow_streaming.lifecycle.snapshot import SnapshotError, load_manifest, restore_snapshot, take_snapshot
from airflow_streaming.lifecycle.snapshot_copy import restart_files
from webhdfs_standin import WebHdfsStandIn

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"
LAST_BATCH = {"spark42_agg_dedup": 1, "spark42_join": 1, "spark42_offsets_v2_rocksdb": 2, "spark42_tws": 0}
SUFFIX = ".rolled-back-u1"


@pytest.fixture
def nn(tmp_path):
    with WebHdfsStandIn(str(tmp_path / "hdfs")) as server:
        yield server


def hdfs(server: WebHdfsStandIn) -> WebHdfsStorage:
    return WebHdfsStorage(WebHdfsSettings(hosts=("127.0.0.1",), port=server.nn_port))


def tree(root: str) -> dict[str, bytes]:
    """Every file under a local directory: relative path -> bytes."""
    base = Path(root)
    return {str(p.relative_to(base)): p.read_bytes() for p in sorted(base.rglob("*")) if p.is_file()}


def write(path: str, data: str = "x") -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Path(path).write_text(data)


def entries(names: dict[str, str]) -> list[TreeEntry]:
    return [TreeEntry(name, False, len(data)) for name, data in names.items()]


# ------------------------------------------------------------------------------------------ what is kept


def loads_hdfs_state(names: set[str], version: int) -> bool:
    """Spark's HDFSBackedStateStoreProvider.loadMap(version), reduced to which files it opens: the snapshot
    of the version if there is one, else the newest snapshot below (or nothing), then every delta after."""
    base = version
    while base > 0 and f"{base}.snapshot" not in names:
        base -= 1
    return all(f"{v}.delta" in names for v in range(base + 1, version + 1))


@pytest.mark.parametrize("snapshots_at", [(), (5,), (5, 10), (11,), (12,)])
def test_state_store_files_kept_load_version_n_plus_1_and_nothing_is_spare(snapshots_at):
    n = 10  # clean at batch 10: a restart loads state version 11
    names = {f"{v}.delta": "d" for v in range(1, 14)} | {f".{v}.delta.crc": "c" for v in range(1, 14)}
    names |= {f"{v}.snapshot": "s" for v in snapshots_at} | {f".{v}.snapshot.crc": "c" for v in snapshots_at}
    names |= {"_metadata/schema": "schema", ".12.delta.3f2a.tmp": "t"}
    kept = {e.path.split("/", 3)[-1] for e in restart_files(
        [TreeEntry(f"state/0/3/{k}", False, 1) for k in names] + [TreeEntry("metadata", False, 1)], n)
        if e.path.startswith("state/")}
    data = {k for k in kept if not k.startswith(".") and k != "_metadata/schema"}
    assert loads_hdfs_state(data, n + 1)
    for name in data:  # minimal: without any one of them version 11 no longer loads
        assert not loads_hdfs_state(data - {name}, n + 1), name
    assert {f".{k}.crc" for k in data} <= kept  # checksum companions follow their file
    assert "_metadata/schema" in kept and not any(k.endswith(".tmp") for k in kept)
    assert not any(k.startswith(("12.", "13.", ".12.", ".13.")) for k in kept)


def test_rocksdb_keeps_the_newest_zip_and_the_changelogs_after_it_and_all_ssts():
    n = 6  # version 7
    names = {"state/0/0/3_aa.zip": "z", "state/0/0/3_aa.zip.crc": "c", "state/0/0/6_bb.zip": "z",
             "state/0/0/6_cc.zip": "z", "state/0/0/8_dd.zip": "z", "state/0/0/SSTs/000001-aa.sst": "s",
             "state/0/0/SSTs/000009-dd.sst": "s"}
    names |= {f"state/0/0/{v}_x{v}.changelog": "l" for v in range(1, 10)}
    kept = {e.path for e in restart_files(entries(names), n)}
    assert kept == {"state/0/0/6_bb.zip", "state/0/0/6_cc.zip", "state/0/0/7_x7.changelog",
                    "state/0/0/SSTs/000001-aa.sst", "state/0/0/SSTs/000009-dd.sst"}


def test_logs_offsets_sources_and_other_files():
    names = {"metadata": "m", ".metadata.crc": "c"}
    names |= {f"offsets/{i}": "o" for i in range(0, 14)} | {f"commits/{i}": "c" for i in range(0, 13)}
    names |= {"offsets/.12.crc": "c", "offsets/.13.crc": "c", "commits/.5.9a9a.tmp": "t"}
    names |= {f"sources/0/{i}": "f" for i in range(10, 14)} | {"sources/0/9.compact": "f", "sources/0/8": "f",
                                                              "sources/0/.9.compact.crc": "c"}
    names |= {"sources/1/0": "kafka", "state/0/_metadata/v2/13": "v2", "state/0/_stateSchema/default/0_u": "s"}
    kept = {e.path for e in restart_files(entries(names), 12)}
    assert {f"offsets/{i}" for i in range(13)} | {"offsets/.12.crc"} <= kept
    assert {"offsets/13", "offsets/.13.crc", "commits/.5.9a9a.tmp"}.isdisjoint(kept)
    assert {f"commits/{i}" for i in range(13)} <= kept
    assert {"sources/0/9.compact", "sources/0/.9.compact.crc", "sources/0/10", "sources/0/13"} <= kept
    assert "sources/0/8" not in kept  # before the latest compaction: not read on restart
    assert {"sources/1/0", "metadata", ".metadata.crc", "state/0/_metadata/v2/13",
            "state/0/_stateSchema/default/0_u"} <= kept


# ------------------------------------------------------------------------------------------ take + restore


def simulate_v2_run(server: WebHdfsStandIn, ckpt: str, n: int) -> None:
    """What a new version does to a checkpoint (as local writes behind the stand-in): batches n+1, n+2,
    new state versions, a deleted offsets entry, a rewritten operator metadata file, no metadata."""
    root = server.local(ckpt)
    for batch in (n + 1, n + 2):
        for log in ("offsets", "commits"):
            write(f"{root}/{log}/{batch}", f"v2 {log} {batch}")
    for part in [p for p in Path(root, "state").rglob("*") if p.is_dir() and any(
            snapshot_copy._STATE_FILE.match(c.name) for c in p.iterdir())]:
        write(f"{part}/{n + 2}.delta", "v2 state")
        write(f"{part}/{n + 3}.delta", "v2 state")
    os.unlink(f"{root}/offsets/0")
    os.unlink(f"{root}/metadata")


@pytest.mark.parametrize("fixture", sorted(LAST_BATCH))
def test_snapshot_of_an_hdfs_checkpoint_then_restore_after_a_v2_run(nn, tmp_path, fixture):
    shutil.copytree(FIXTURES / fixture, nn.local("/ckpt/q"), ignore=shutil.ignore_patterns(".*.crc"))  # no .crc on HDFS
    original = tree(nn.local("/ckpt/q"))
    location, st = f"{nn.uri}/ckpt/q", hdfs(nn)
    resolve = lambda loc: storage_for(loc)  # noqa: E731 - the URI names the stand-in

    manifest = take_snapshot(location, "/control/q/snapshots/u1", resolve=resolve, snapshot_storage=st)

    assert (manifest.method, manifest.batch_id, manifest.checkpoint) == ("copy", LAST_BATCH[fixture], location)
    assert manifest.linked is False and manifest.sink_metadata is None
    snapped = tree(nn.local("/control/q/snapshots/u1/checkpoint"))
    # 2-3 batches: every file is needed for a restart at N+1, except RocksDB's older versions (a RocksDB
    # store loads version N+1 from its own zip; these fixtures keep only the zips' checksum files).
    old_rocksdb = re.compile(r"^state/0/\d/[12]_[0-9a-f-]+\.zip\.crc$")
    expected = {k: v for k, v in original.items() if not old_rocksdb.match(k)}
    assert len(original) - len(expected) == (4 if fixture == "spark42_offsets_v2_rocksdb" else 0)
    assert snapped == expected
    assert (manifest.files, manifest.bytes) == (len(snapped), sum(len(b) for b in snapped.values()))
    assert load_manifest("/control/q/snapshots/u1", st) == manifest
    assert take_snapshot(location, "/control/q/snapshots/u1", resolve=resolve, snapshot_storage=st) == manifest

    simulate_v2_run(nn, "/ckpt/q", manifest.batch_id)
    v2 = tree(nn.local("/ckpt/q"))
    assert v2 != original

    report = restore_snapshot(manifest, SUFFIX, resolve=resolve, snapshot_storage=st)

    assert tree(nn.local("/ckpt/q")) == expected
    assert tree(nn.local(f"/ckpt/q{SUFFIX}")) == v2  # kept for forensics
    assert report == {"checkpoint": location, "batch_id": manifest.batch_id, "moved_aside": f"/ckpt/q{SUFFIX}",
                      "sink_metadata_restored": False, "files": len(expected)}
    assert not st.exists("/control/q/snapshots/u1/restoring.json")
    assert restore_snapshot(manifest, SUFFIX, resolve=resolve, snapshot_storage=st) == report  # done: not redone
    assert not st.exists(f"/ckpt/q{SUFFIX}.1")
    assert nn.unsupported == []


def test_old_state_and_compacted_sink_log_are_left_out_and_the_sink_log_is_restored(nn):
    st = hdfs(nn)
    root, n = nn.local("/ckpt/agg"), 12
    for i in range(n + 1):
        write(f"{root}/offsets/{i}", f"o{i}")
        write(f"{root}/commits/{i}", f"c{i}")
    write(f"{root}/metadata", '{"id":"q"}')
    for v in range(1, n + 3):  # versions up to 14 exist (a later run), snapshot at 10
        write(f"{root}/state/0/0/{v}.delta", f"d{v}")
    write(f"{root}/state/0/0/10.snapshot", "s10")
    out = nn.local("/out")
    for i in range(n + 3):
        write(f"{out}/_spark_metadata/{i}.compact" if i == 9 else f"{out}/_spark_metadata/{i}", f"log {i}")
    write(f"{out}/part-0.parquet", "data")
    resolve = lambda loc: storage_for(loc)  # noqa: E731

    manifest = take_snapshot(f"{nn.uri}/ckpt/agg", "/snap", f"{nn.uri}/out", resolve=resolve, snapshot_storage=st)

    state = sorted(os.listdir(nn.local("/snap/checkpoint/state/0/0")))
    assert state == ["10.snapshot", "11.delta", "12.delta", "13.delta"]
    assert sorted(os.listdir(nn.local("/snap/sink_metadata")), key=lambda s: int(s.split(".")[0])) == [
        "9.compact", "10", "11", "12"]
    assert manifest.sink_metadata == f"{nn.uri}/out/_spark_metadata"
    files = len(tree(nn.local("/snap/checkpoint"))) + 4
    assert manifest.files == files and manifest.bytes == sum(
        len(b) for d in ("/snap/checkpoint", "/snap/sink_metadata") for b in tree(nn.local(d)).values())

    # The new version writes batches 13.. and compacts the sink log; the rollback restores both.
    write(f"{out}/_spark_metadata/19.compact", "v2")
    os.unlink(f"{out}/_spark_metadata/9.compact")
    v2_log = tree(f"{out}/_spark_metadata")
    report = restore_snapshot(manifest, SUFFIX, resolve=resolve, snapshot_storage=st)
    assert report["sink_metadata_restored"] is True
    assert tree(f"{out}/_spark_metadata") == tree(nn.local("/snap/sink_metadata"))
    assert tree(f"{out}/_spark_metadata{SUFFIX}") == v2_log
    assert os.path.exists(f"{out}/part-0.parquet")  # data files are not the snapshot's business


def test_an_hdfs_checkpoint_into_a_local_snapshot_dir_and_back(nn, tmp_path):
    shutil.copytree(FIXTURES / "spark42_agg_dedup", nn.local("/ckpt/q"))
    original = tree(nn.local("/ckpt/q"))
    location = f"{nn.uri}/ckpt/q"
    manifest = take_snapshot(location, str(tmp_path / "snap"), snapshot_storage=LocalStorage())
    assert manifest.method == "copy" and tree(str(tmp_path / "snap" / "checkpoint")) == original
    simulate_v2_run(nn, "/ckpt/q", 1)
    restore_snapshot(load_manifest(str(tmp_path / "snap")), SUFFIX)  # defaults: storage_for, local snapshot dir
    assert tree(nn.local("/ckpt/q")) == original


def test_unclean_and_missing_checkpoints_are_refused(nn):
    shutil.copytree(FIXTURES / "spark42_agg_dedup", nn.local("/ckpt/q"))
    os.unlink(nn.local("/ckpt/q/commits/1"))
    with pytest.raises(SnapshotError, match="last planned batch 1, last committed batch 0"):
        take_snapshot(f"{nn.uri}/ckpt/q", "/snap", snapshot_storage=hdfs(nn))
    with pytest.raises(SnapshotError, match="does not exist"):
        take_snapshot(f"{nn.uri}/ckpt/never", "/snap", snapshot_storage=hdfs(nn))
    assert not os.path.exists(nn.local("/snap"))


def test_a_failing_namenode_mid_snapshot_raises_and_the_retry_starts_over(nn):
    st = hdfs(nn)
    shutil.copytree(FIXTURES / "spark42_join", nn.local("/ckpt/q"))
    fault = nn.inject(r"^/snap/checkpoint/state/", endpoint="dn", ops=["CREATE"], status=500, times=1)
    with pytest.raises(StorageError) as err:
        take_snapshot(f"{nn.uri}/ckpt/q", "/snap", snapshot_storage=st, copy_threads=1)
    assert fault.hits == 1 and "/snap/checkpoint/state/" in str(err.value) and "HTTP 500" in str(err.value)
    assert os.path.isdir(nn.local("/snap")) and load_manifest("/snap", st) is None  # incomplete: no manifest
    manifest = take_snapshot(f"{nn.uri}/ckpt/q", "/snap", snapshot_storage=st)
    assert tree(nn.local("/snap/checkpoint")) == tree(nn.local("/ckpt/q"))
    assert manifest.files == len(tree(nn.local("/ckpt/q")))


@pytest.mark.parametrize("fail_after", [0, 3, 30])
def test_a_restore_that_failed_midway_completes_when_run_again(nn, fail_after):
    st = hdfs(nn)
    shutil.copytree(FIXTURES / "spark42_join", nn.local("/ckpt/q"))
    original = tree(nn.local("/ckpt/q"))
    manifest = take_snapshot(f"{nn.uri}/ckpt/q", "/snap", snapshot_storage=st)
    simulate_v2_run(nn, "/ckpt/q", 1)
    v2 = tree(nn.local("/ckpt/q"))

    fault = nn.inject(r"^/ckpt/q/", endpoint="dn", ops=["CREATE"], status=500, after=fail_after)
    with pytest.raises(StorageError):
        restore_snapshot(manifest, SUFFIX, snapshot_storage=st, copy_threads=1)
    assert 1 <= fault.hits <= 2 and fault.seen >= fail_after + 1  # the first error stops the copy
    nn.clear_faults()
    assert st.exists("/snap/restoring.json")
    assert tree(nn.local(f"/ckpt/q{SUFFIX}")) == v2  # moved aside before anything was copied
    assert len(tree(nn.local("/ckpt/q"))) == min(fail_after, len(original))  # a partial copy

    report = restore_snapshot(manifest, SUFFIX, snapshot_storage=st)

    assert tree(nn.local("/ckpt/q")) == original
    assert tree(nn.local(f"/ckpt/q{SUFFIX}")) == v2  # the original, not the partial copy
    assert report["moved_aside"] == f"/ckpt/q{SUFFIX}" and not st.exists("/snap/restoring.json")
    assert sorted(os.listdir(nn.local("/ckpt"))) == ["q", f"q{SUFFIX}"]


def test_the_first_failed_copy_starts_no_other_even_when_the_caller_is_slow_to_see_it(tmp_path, monkeypatch):
    """Found flaky under load (a restore's fault hit 3 times with one copy thread): the worker picked up
    the next files before the caller had woken up to cancel them. A slow caller is made here on purpose."""
    import concurrent.futures
    import time

    src_root = tmp_path / "src"
    for i in range(6):
        write(str(src_root / f"f{i}"))
    writes: list[str] = []

    class FailingFirst(LocalStorage):
        def write_once(self, path: str, data: bytes) -> None:
            writes.append(path)
            raise StorageError(5, "injected")

    result = concurrent.futures.Future.result

    def slow_result(self, timeout=None):  # the caller wakes up late
        time.sleep(0.3)
        return result(self, timeout)

    monkeypatch.setattr(concurrent.futures.Future, "result", slow_result)
    with pytest.raises(StorageError):
        snapshot_copy.copy_files(LocalStorage(), str(src_root), entries({f"f{i}": "x" for i in range(6)}),
                                 FailingFirst(), str(tmp_path / "dst"), threads=1)
    assert len(writes) == 1, writes
