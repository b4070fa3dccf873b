"""Unit tests of the read-only checkpoint reader, on hand-built checkpoints and on real Spark 4.2 fixtures.

No Spark is started: the hand-built files copy the exact layout Spark 4.2.0 writes (see
tests/fixtures/checkpoints/README.md for the real ones).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from airflow_streaming.checkpoint.__main__ import main as cli_main
from airflow_streaming.checkpoint.batches import BatchPosition, read_batch_position
from airflow_streaming.checkpoint.logs import parse_offsets
from airflow_streaming.checkpoint.reader import CheckpointError, CheckpointInfo, read_checkpoint
from airflow_streaming.checkpoint.state_schema import parse_state_schema
from airflow_streaming.control.storage import ControlStorage
from airflow_streaming.control.local import LocalStorage

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "checkpoints"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
QUERY_ID = "3efa0466-a4b7-4c02-abfc-de66d624d451"

# The conf map Spark 4.2.0 records in offsets/<N> (copied from a real checkpoint).
CONF_42 = {
    "spark.sql.streaming.stateStore.providerClass": HDFS,
    "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion": "2",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion": "5",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution": "false",
    "spark.sql.streaming.stateStore.encodingFormat": "unsaferow",
    "spark.sql.streaming.statefulOperator.useStrictDistribution": "true",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion": "2",
    "spark.sql.streaming.multipleWatermarkPolicy": "min",
    "spark.sql.streaming.stateStore.rowChecksum.enabled": "false",
    "spark.sql.streaming.aggregation.stateFormatVersion": "2",
    "spark.sql.function.protobufExtensions.enabled": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.streaming.join.stateFormatVersion": "2",
    "spark.sql.streaming.stateStore.compression.codec": "lz4",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan": "false",
}


def _field(name: str, typ: str, nullable: bool = True) -> dict:
    return {"name": name, "type": typ, "nullable": nullable, "metadata": {}}


def _struct(*fields: dict) -> dict:
    return {"type": "struct", "fields": list(fields)}


AGG_KEY = _struct(_field("key", "string"))
AGG_VALUE = _struct(_field("count", "long", False), _field("sum", "long"))
DEDUP_KEY = _struct(_field("key", "string"), _field("v", "integer"))
DEDUP_VALUE = _struct(_field("__dummy__", "void"))


# ---- hand-packed Java DataOutputStream bytes -------------------------------------------------


def java_utf(text: str) -> bytes:
    """DataOutputStream.writeUTF: 2-byte big-endian length + modified UTF-8."""
    body = bytearray()
    units = text.encode("utf-16-be", "surrogatepass")
    for (unit,) in struct.iter_unpack(">H", units):
        if 1 <= unit <= 0x7F:
            body.append(unit)
        elif unit <= 0x7FF:
            body += struct.pack("BB", 0xC0 | unit >> 6, 0x80 | unit & 0x3F)
        else:
            body += struct.pack("BBB", 0xE0 | unit >> 12, 0x80 | (unit >> 6) & 0x3F, 0x80 | unit & 0x3F)
    return struct.pack(">H", len(body)) + bytes(body)


def java_chunked(text: str, chunk: int = 65535) -> bytes:
    parts = [text[i : i + chunk] for i in range(0, len(text), chunk)] or [""]
    return struct.pack(">i", len(parts)) + b"".join(java_utf(p) for p in parts)


def compact(obj: dict) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def schema_v2(key: dict, value: dict) -> bytes:
    return java_utf("v2") + java_chunked(compact(key)) + java_chunked(compact(value))


def schema_v1(key: dict, value: dict) -> bytes:
    return java_utf("v1") + java_utf(compact(key)) + java_utf(compact(value))


def schema_v3(families: list[tuple[str, dict, dict]], with_ids: bool = True) -> bytes:
    out = java_utf("v3") + struct.pack(">i", len(families))
    for name, key, value in families:
        out += java_utf(name)
        out += (struct.pack(">h", 0) if with_ids else b"") + java_chunked(compact(key))
        out += (struct.pack(">h", 0) if with_ids else b"") + java_chunked(compact(value))
        out += java_chunked('{"keyStateEncoderType":"NoPrefixKeyStateEncoderSpec"}')
        out += java_chunked("{    }")
    return out


# ---- hand-built checkpoints ------------------------------------------------------------------


def _write(path: Path, data: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    path.write_bytes(data)
    # Hadoop's hidden checksum sidecar, as Spark leaves it (the reader must ignore it).
    (path.parent / f".{path.name}.crc").write_bytes(b"crc\x00" + hashlib.md5(data).digest()[:8])


def offsets_text(batch: int, offsets: list[str], conf: dict | None = None, watermark: int = 0) -> str:
    meta = {"batchWatermarkMs": watermark, "batchTimestampMs": 1795317835574 + batch, "conf": conf or CONF_42}
    return "v1\n" + compact(meta) + "".join("\n" + o for o in offsets)


def operator_metadata_v1(op_id: int, name: str, stores=("default",), partitions: int = 2) -> str:
    info = [{"storeName": s, "numColsPrefixKey": 0, "numPartitions": partitions} for s in stores]
    return "v1\n" + compact({"operatorInfo": {"operatorId": op_id, "operatorName": name}, "stateStoreInfo": info})


def build_checkpoint(
    root: Path,
    batches: int = 3,
    committed: int | None = None,
    operators: bool = True,
    partitions: int = 2,
    source_dir: str = "file:///data/in",
) -> Path:
    """An aggregation-over-dedup checkpoint as Spark 4.2 writes it: `batches` batches, one file each."""
    committed = batches if committed is None else committed
    _write(root / "metadata", compact({"id": QUERY_ID}))
    for b in range(batches):
        _write(root / "offsets" / str(b), offsets_text(b, [compact({"logOffset": b})]))
        _write(
            root / "sources" / "0" / str(b),
            "v1\n" + compact({"path": f"{source_dir}/part-{b}.json", "timestamp": 1795317829962 + b, "batchId": b}),
        )
    for b in range(committed):
        _write(root / "commits" / str(b), 'v1\n{"nextBatchWatermarkMs":0}')
    if operators:
        for op_id, name, key, value in ((0, "stateStoreSave", AGG_KEY, AGG_VALUE), (1, "dedupe", DEDUP_KEY, DEDUP_VALUE)):
            op = root / "state" / str(op_id)
            _write(op / "_metadata" / "metadata", operator_metadata_v1(op_id, name, partitions=partitions))
            _write(op / "0" / "_metadata" / "schema", schema_v2(key, value))
            for p in range(partitions):
                for b in range(1, batches + 1):
                    _write(op / str(p) / f"{b}.delta", b"\x00\x00\x00\x01")
    return root


def tree_digest(root: Path) -> dict[str, tuple[str, int]]:
    """sha256 and mode of every file (hidden ones too) and the set of directories."""
    out: dict[str, tuple[str, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = ("dir", 0)
        for f in filenames:
            p = os.path.join(dirpath, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = (hashlib.sha256(fh.read()).hexdigest(), os.stat(p).st_mode)
    return out


class RecordingStorage(LocalStorage):
    """LocalStorage that records every call, to prove the reader only reads."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def read_bytes(self, path):
        self.calls.append(("read_bytes", path))
        return super().read_bytes(path)

    def list_dir(self, path):
        self.calls.append(("list_dir", path))
        return super().list_dir(path)

    def exists(self, path):
        self.calls.append(("exists", path))
        return super().exists(path)

    def write_atomic(self, path, data):  # pragma: no cover - must never be called
        self.calls.append(("write_atomic", path))
        raise AssertionError("reader wrote")

    def create_exclusive(self, path, data):  # pragma: no cover
        self.calls.append(("create_exclusive", path))
        raise AssertionError("reader created a file")

    def delete(self, path):  # pragma: no cover
        self.calls.append(("delete", path))
        raise AssertionError("reader deleted a file")

    def makedirs(self, path):  # pragma: no cover
        self.calls.append(("makedirs", path))
        raise AssertionError("reader created a directory")


# ---- the happy path ----------------------------------------------------------------------------


def test_reads_hand_built_aggregation_checkpoint(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    info = read_checkpoint(str(root))

    assert isinstance(info, CheckpointInfo)
    assert info.query_id == QUERY_ID
    assert (info.last_planned_batch, info.last_committed_batch, info.next_batch_id) == (2, 2, 3)
    assert info.clean is True and info.notes == []
    assert info.position == BatchPosition(str(root), 2, 2)

    o = info.latest_offsets
    assert o is not None and o.batch_id == 2 and o.version == 1
    assert o.file == f"{root}/offsets/2"
    assert o.batch_watermark_ms == 0 and o.batch_timestamp_ms == 1795317835576
    assert o.source_offsets == [{"logOffset": 2}]
    assert o.conf == CONF_42
    assert info.latest_commit is not None and info.latest_commit.batch_id == 2
    assert info.latest_commit.next_batch_watermark_ms == 0
    assert info.state_store_provider == HDFS
    assert info.shuffle_partitions == 2

    [src] = info.sources
    assert src.kind == "file" and src.offset == {"logOffset": 2}
    assert src.latest_log_batch == 2 and src.log_file_read == f"{root}/sources/0/2"
    assert src.entries_in_file == 1 and src.latest_batch_entries == 1
    assert src.sample_path == "file:///data/in/part-2.json"
    assert src.path_dirs == ["file:///data/in"]

    agg, dedup = info.operators
    assert (agg.id, agg.name, dedup.id, dedup.name) == (0, "stateStoreSave", 1, "dedupe")
    assert agg.store_names == ["default"] and agg.num_partitions == 2 and agg.metadata_version == 1
    assert agg.key_schema == AGG_KEY and agg.value_schema == AGG_VALUE and agg.schema_version == 2
    assert dedup.key_schema == DEDUP_KEY and dedup.value_schema == DEDUP_VALUE
    assert agg.stores[0].schema_file == f"{root}/state/0/0/_metadata/schema"

    # Exactly: metadata, offsets/2, commits/2, sources/0/2, 2 x (operator metadata + schema).
    assert info.files_read == 8
    assert any("operator metadata v1" in h for h in info.spark_version_hints)
    assert any("exactly the conf keys Spark 4.2" in h for h in info.spark_version_hints)


def test_to_json_and_render_text(tmp_path):
    info = read_checkpoint(str(build_checkpoint(tmp_path / "ckpt")))
    data = json.loads(info.to_json())
    assert data["query_id"] == QUERY_ID
    assert data["operators"][0]["key_schema"] == AGG_KEY
    assert data["position"]["next_batch_id"] == 3
    assert data["latest_offsets"]["conf"]["spark.sql.shuffle.partitions"] == "2"
    text = info.render_text()
    for needle in (QUERY_ID, "stateStoreSave", "dedupe", "key: string", "count: long", "clean:               yes", HDFS):
        assert needle in text


def test_file_uri_location(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    assert read_checkpoint(f"file://{root}").query_id == QUERY_ID


def test_explicit_storage_is_used_and_only_read(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    storage = RecordingStorage()
    info = read_checkpoint(str(root), storage)
    kinds = {k for k, _ in storage.calls}
    assert kinds <= {"read_bytes", "list_dir", "exists"}
    reads = [p for k, p in storage.calls if k == "read_bytes"]
    assert len(reads) == info.files_read == len(set(reads))
    # Never any per-batch history: only the latest offsets/commit/source log.
    assert f"{root}/offsets/0" not in reads and f"{root}/commits/1" not in reads
    assert not any(p.endswith(".delta") or p.endswith(".crc") for p in reads)


def test_reader_never_modifies_the_checkpoint(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt", committed=2)
    shutil.copytree(FIXTURES / "spark42_tws", tmp_path / "tws")
    for ckpt in (root, tmp_path / "tws"):
        before = tree_digest(ckpt)
        assert any(name.split("/")[-1].startswith(".") for name in before)  # hidden files are covered
        read_checkpoint(str(ckpt)).render_text()
        assert tree_digest(ckpt) == before


def test_files_read_does_not_depend_on_the_number_of_batches(tmp_path):
    small = read_checkpoint(str(build_checkpoint(tmp_path / "small", batches=3)))
    large = read_checkpoint(str(build_checkpoint(tmp_path / "large", batches=300, partitions=1)))
    assert large.last_committed_batch == 299
    assert small.files_read == large.files_read == 8


# ---- clean / not clean -------------------------------------------------------------------------


def test_offsets_without_commit_is_not_clean_and_not_an_error(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt", batches=3, committed=2)
    info = read_checkpoint(str(root))
    assert info.clean is False
    assert (info.last_planned_batch, info.last_committed_batch, info.next_batch_id) == (2, 1, 2)
    assert "batch 2 planned but not committed; Spark will replay it" in info.notes
    assert "NO" in info.render_text() and "Spark will replay it" in info.render_text()
    # The conf of the batch to be replayed comes from its offsets file.
    assert info.latest_offsets.batch_id == 2 and info.latest_commit.batch_id == 1


def test_nothing_committed_yet(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt", batches=1, committed=0, operators=False)
    info = read_checkpoint(str(root))
    assert info.latest_commit is None and info.clean is False and info.next_batch_id == 0
    assert "batch 0 planned but not committed; Spark will replay it" in info.notes


def test_started_but_never_planned(tmp_path):
    _write(tmp_path / "ckpt" / "metadata", compact({"id": QUERY_ID}))
    info = read_checkpoint(str(tmp_path / "ckpt"))
    assert info.clean is True and info.latest_offsets is None and info.sources == [] and info.operators == []
    assert info.next_batch_id == 0


# ---- errors ------------------------------------------------------------------------------------


def test_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match=rf"checkpoint {tmp_path}/nope does not exist"):
        read_checkpoint(str(tmp_path / "nope"))


def test_missing_metadata_file(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    (root / "metadata").unlink()
    with pytest.raises(CheckpointError, match=rf"{root}/metadata"):
        read_checkpoint(str(root))


def test_truncated_offsets_file(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt", batches=3, committed=2)
    (root / "offsets" / "2").write_text("v1\n")
    with pytest.raises(CheckpointError, match=rf"{root}/offsets/2: truncated offsets file"):
        read_checkpoint(str(root))


def test_empty_offsets_file(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    (root / "offsets" / "2").write_bytes(b"")
    with pytest.raises(CheckpointError, match=rf"{root}/offsets/2: empty offsets file"):
        read_checkpoint(str(root))


def test_offsets_metadata_cut_mid_json(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    text = (root / "offsets" / "2").read_text()
    (root / "offsets" / "2").write_text(text[: text.index("conf") + 10])
    with pytest.raises(CheckpointError, match=rf"{root}/offsets/2: line 2 offsets metadata is not valid JSON"):
        read_checkpoint(str(root))


def test_unknown_offsets_log_version(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    (root / "offsets" / "2").write_text((root / "offsets" / "2").read_text().replace("v1", "v9", 1))
    with pytest.raises(CheckpointError) as exc:
        read_checkpoint(str(root))
    msg = str(exc.value)
    assert msg.startswith(f"{root}/offsets/2: unsupported offsets log version v9")
    assert "supported: v1, v2" in msg


def test_unknown_commit_log_version(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    (root / "commits" / "2").write_text('v9\n{"nextBatchWatermarkMs":0}')
    with pytest.raises(CheckpointError, match=rf"{root}/commits/2: unsupported commit log version v9 \(supported: v1, v2, v3\)"):
        read_checkpoint(str(root))


def test_unknown_file_source_log_version(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    (root / "sources" / "0" / "2").write_text('v9\n{"path":"file:///x","timestamp":0,"batchId":2}')
    # A v9 log no longer looks like a file-source log we know: it must not be silently skipped.
    with pytest.raises(CheckpointError, match=rf"{root}/sources/0/2: unsupported file source log version v9"):
        read_checkpoint(str(root))


def test_malformed_version_line(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    (root / "offsets" / "2").write_text("garbage\n{}")
    with pytest.raises(CheckpointError, match=rf"{root}/offsets/2: malformed offsets log"):
        read_checkpoint(str(root))


def test_garbage_schema_file(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    (root / "state" / "1" / "0" / "_metadata" / "schema").write_bytes(os.urandom(3) + b"\xff" * 64)
    with pytest.raises(CheckpointError, match=rf"{root}/state/1/0/_metadata/schema: "):
        read_checkpoint(str(root))


def test_truncated_schema_file(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    path = root / "state" / "0" / "0" / "_metadata" / "schema"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match=rf"{path}: truncated or corrupt state schema file"):
        read_checkpoint(str(root))


def test_unknown_schema_version(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    path = root / "state" / "0" / "0" / "_metadata" / "schema"
    path.write_bytes(java_utf("v9") + path.read_bytes()[4:])
    with pytest.raises(CheckpointError, match=rf"{path}: unsupported state schema version v9 \(supported: v1, v2, v3\)"):
        read_checkpoint(str(root))


def test_garbage_operator_metadata(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    path = root / "state" / "1" / "_metadata" / "metadata"
    path.write_text('v1\n{"operatorInfo":')
    with pytest.raises(CheckpointError, match=rf"{path}: "):
        read_checkpoint(str(root))


def test_garbage_query_metadata(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt")
    (root / "metadata").write_text("{not json")
    with pytest.raises(CheckpointError, match=rf"{root}/metadata: query metadata is not valid JSON"):
        read_checkpoint(str(root))


# ---- format details ----------------------------------------------------------------------------


def test_offsets_parse_void_and_multiple_sources():
    text = offsets_text(7, [compact({"logOffset": 3}), "-", compact({"topic": {"0": 12, "1": 40}})], watermark=5000)
    entry = parse_offsets("/x/offsets/7", text.encode(), 7)
    assert entry.offsets == [{"logOffset": 3}, None, {"topic": {"0": 12, "1": 40}}]
    assert entry.batch_watermark_ms == 5000


def test_offsets_v2_named_sources_and_commit_v2(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt", operators=False)
    meta = {
        "batchWatermarkMs": 0,
        "batchTimestampMs": 1,
        "conf": CONF_42,
        "sourceMetadataInfo": {"events": {"sourceId": "events"}},
    }
    (root / "offsets" / "2").write_text("v2\n" + compact(meta) + '\nevents:{"logOffset":2}\nclicks:-')
    (root / "commits" / "2").write_text('v2\n{"nextBatchWatermarkMs":7,"stateUniqueIds":{"0":[["a"],["b"]]}}')
    shutil.move(root / "sources" / "0", root / "sources" / "events")
    info = read_checkpoint(str(root))
    assert info.latest_offsets.version == 2
    assert info.latest_offsets.named_source_offsets == {"events": {"logOffset": 2}, "clicks": None}
    assert [(s.name, s.kind) for s in info.sources] == [("events", "file"), ("clicks", "none")]
    assert info.sources[0].sample_path == "file:///data/in/part-2.json"
    assert info.latest_commit.version == 2 and info.latest_commit.next_batch_watermark_ms == 7
    assert any("offsets log v2" in h for h in info.spark_version_hints)
    assert any("commit log v2" in h for h in info.spark_version_hints)


def test_file_source_prefers_plain_log_over_compact(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt", operators=False)
    src = root / "sources" / "0"
    entries = [compact({"path": f"file:///data/in/part-{i}.json", "timestamp": i, "batchId": i}) for i in range(20)]
    # Batch 19 is a compaction batch: 19.compact holds every entry so far; 18 is the last plain file.
    _write(src / "18", "v1\n" + entries[18])
    _write(src / "19.compact", "v1\n" + "\n".join(entries))
    (root / "offsets" / "2").write_text(offsets_text(2, [compact({"logOffset": 19})]))
    info = read_checkpoint(str(root))
    s = info.sources[0]
    assert s.latest_log_batch == 19 and s.log_file_read == f"{src}/18"
    assert s.entries_in_file == 1 and s.latest_batch_entries is None
    # Without a plain neighbour the compact file is read and the latest batch counted inside it.
    (src / "18").unlink()
    s = read_checkpoint(str(root)).sources[0]
    assert s.log_file_read == f"{src}/19.compact" and s.entries_in_file == 20 and s.latest_batch_entries == 1
    assert s.sample_path == "file:///data/in/part-19.json"


def test_changed_source_path_is_visible(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt", operators=False, source_dir="file:///old/place")
    assert read_checkpoint(str(root)).sources[0].path_dirs == ["file:///old/place"]


def test_schema_v2_multiple_chunks_and_modified_utf8(tmp_path):
    # A non-BMP character (a surrogate pair, 3+3 bytes in modified UTF-8) split across two chunks,
    # and a non-ASCII BMP character. (A NUL cannot occur raw in schema JSON: it is escaped.)
    name = "é" + "x" * 20 + "\U0001f600"
    key = _struct(_field(name, "string"))
    text = compact(key)
    split = text.index("\U0001f600")
    utf16 = text.encode("utf-16-be", "surrogatepass")
    # Chunk boundaries in UTF-16 units, like Java's char-based StringReader: between the two surrogates.
    units = len(text[:split].encode("utf-16-be")) // 2 + 1
    first = utf16[: units * 2].decode("utf-16-be", "surrogatepass")
    second = utf16[units * 2 :].decode("utf-16-be", "surrogatepass")
    data = java_utf("v2") + struct.pack(">i", 2) + java_utf(first) + java_utf(second) + java_chunked(compact(AGG_VALUE))
    assert b"\xed\xa0\xbd" in data  # really modified UTF-8, the first chunk ending in a lone high surrogate
    parsed = parse_state_schema("/x/schema", data)
    assert parsed.version == 2 and parsed.default.key_schema == key and parsed.default.value_schema == AGG_VALUE


def test_modified_utf8_nul_in_a_column_family_name():
    fams = [("a\x00b", AGG_KEY, AGG_VALUE)]
    data = schema_v3(fams)
    assert b"a\xc0\x80b" in data
    assert parse_state_schema("/x/0_uuid", data).column_families[0].name == "a\x00b"


def test_schema_v1(tmp_path):
    parsed = parse_state_schema("/x/schema", schema_v1(AGG_KEY, AGG_VALUE))
    assert parsed.version == 1 and parsed.default.key_schema == AGG_KEY


def test_schema_v3_with_and_without_schema_ids():
    fams = [("$rowCounter_seen", AGG_KEY, _struct(_field("count", "long"))), ("count", AGG_KEY, _struct(_field("c", "long")))]
    for with_ids in (True, False):
        parsed = parse_state_schema("/x/0_uuid", schema_v3(fams, with_ids))
        assert parsed.version == 3
        assert [cf.name for cf in parsed.column_families] == ["$rowCounter_seen", "count"]
        assert parsed.default.name == "count"  # "$..." families are Spark's internal ones
        assert parsed.column_families[1].key_encoder_spec == {"keyStateEncoderType": "NoPrefixKeyStateEncoderSpec"}
        assert parsed.column_families[1].key_schema_id == (0 if with_ids else None)


def test_pre_40_checkpoint_without_operator_metadata(tmp_path):
    """Spark < 4.0 wrote no state/<op>/_metadata: stores are found in partition 0 (joins: one dir per store)."""
    root = build_checkpoint(tmp_path / "ckpt", operators=False)
    part0 = root / "state" / "0" / "0"
    for store in ("left-keyToNumValues", "right-keyToNumValues"):
        _write(part0 / store / "_metadata" / "schema", schema_v2(AGG_KEY, _struct(_field("value", "long"))))
        _write(part0 / store / "1.delta", b"\x00")
    (root / "state" / "0" / "1").mkdir()
    [op] = read_checkpoint(str(root)).operators
    assert op.name is None and op.metadata_version is None and op.num_partitions == 2
    assert op.store_names == ["left-keyToNumValues", "right-keyToNumValues"]
    assert op.key_schema == AGG_KEY


# ---- real Spark 4.2.0 checkpoints (tests/fixtures/checkpoints) ---------------------------------


def test_real_aggregation_over_dedup_checkpoint():
    info = read_checkpoint(str(FIXTURES / "spark42_agg_dedup"))
    assert info.query_id == QUERY_ID
    assert (info.last_planned_batch, info.last_committed_batch, info.clean) == (1, 1, True)
    assert [(op.id, op.name) for op in info.operators] == [(0, "stateStoreSave"), (1, "dedupe")]
    agg, dedup = info.operators
    assert agg.key_schema == AGG_KEY
    assert [f["name"] for f in agg.value_schema["fields"]] == ["count", "sum"]
    assert dedup.key_schema == DEDUP_KEY and dedup.value_schema == DEDUP_VALUE
    assert agg.num_partitions == dedup.num_partitions == 2
    assert info.latest_offsets.conf == CONF_42
    assert len(info.sources) == 1 and info.sources[0].kind == "file"
    assert info.sources[0].path_dirs == ["file:///tmp/ckexp/out/in_a"]
    assert info.files_read == 8


def test_real_stream_stream_join_checkpoint():
    info = read_checkpoint(str(FIXTURES / "spark42_join"))
    [op] = info.operators
    assert op.name == "symmetricHashJoin"
    assert op.store_names == [
        "left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue",
    ]
    by_name = {s.name: s for s in op.stores}
    left = by_name["left-keyWithIndexToValue"]
    assert [f["name"] for f in left.key_schema["fields"]] == ["field0", "index"]
    assert [f["name"] for f in left.value_schema["fields"]] == ["lk", "lv", "lts", "matched"]
    assert left.schema_file.endswith("state/0/0/left-keyWithIndexToValue/_metadata/schema")
    assert [s.kind for s in info.sources] == ["file", "file"]
    assert info.latest_offsets.batch_watermark_ms == 1704067195000


def test_real_transform_with_state_checkpoint():
    info = read_checkpoint(str(FIXTURES / "spark42_tws"))
    [op] = info.operators
    assert op.name == "transformWithStateInPandasExec" and op.metadata_version == 2
    assert op.operator_properties["timeMode"] == "NoTime"
    assert [v["stateName"] for v in op.operator_properties["stateVariables"]] == ["count", "seen"]
    [store] = op.stores
    # The recorded stateSchemaFilePaths point at the original /tmp location; the file is found here.
    assert store.schema_file.startswith(str(FIXTURES / "spark42_tws" / "state" / "0" / "_stateSchema" / "default"))
    assert store.schema_version == 3 and op.schema_version == 3
    assert [cf.name for cf in store.column_families] == ["$rowCounter_seen", "count", "seen"]
    assert op.key_schema == AGG_KEY and op.value_schema == _struct(_field("c", "long"))
    assert info.state_store_provider == ROCKSDB


def test_real_offsets_v2_rocksdb_checkpoint_format_v2():
    """offsetLog.formatVersion=2 + a named source + RocksDB with checkpointFormatVersion=2."""
    root = FIXTURES / "spark42_offsets_v2_rocksdb"
    info = read_checkpoint(str(root))
    assert info.latest_offsets.version == 2
    assert info.latest_offsets.named_source_offsets == {"events": {"logOffset": 2}}
    [src] = info.sources
    assert (src.name, src.kind, src.log_file_read) == ("events", "file", f"{root}/sources/events/2")
    assert info.latest_commit.version == 2
    assert info.operators[0].name == "stateStoreSave" and info.state_store_provider == ROCKSDB
    assert any("state store unique ids" in h for h in info.spark_version_hints)
    assert any("checksum files" in h for h in info.spark_version_hints)
    # Observed: Spark 4.2 left spark.sql.shuffle.partitions out of the FIRST v2 offsets file.
    first = parse_offsets(f"{root}/offsets/0", (root / "offsets" / "0").read_bytes(), 0)
    assert "spark.sql.shuffle.partitions" not in first.conf
    assert first.named_offsets == {"events": {"logOffset": 0}}


# ---- the command line --------------------------------------------------------------------------


def test_cli_text_json_and_error(tmp_path, capsys):
    root = build_checkpoint(tmp_path / "ckpt")
    assert cli_main(["inspect", str(root)]) == 0
    assert QUERY_ID in capsys.readouterr().out
    assert cli_main(["inspect", str(root), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["query_id"] == QUERY_ID
    assert cli_main(["inspect", str(tmp_path / "missing")]) == 2
    assert f"checkpoint {tmp_path}/missing does not exist" in capsys.readouterr().err


def test_batches_module_api_unchanged(tmp_path):
    root = build_checkpoint(tmp_path / "ckpt", batches=4, committed=3)
    pos = read_batch_position(LocalStorage(), str(root))
    assert pos == BatchPosition(str(root), 3, 2) and pos.next_batch_id == 3 and not pos.clean
    assert isinstance(LocalStorage(), ControlStorage)
