"""The checkpoint reader against checkpoints written by a real local Spark (one session for the module)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

import pytest

from airflow_streaming.checkpoint.reader import read_checkpoint

pytestmark = pytest.mark.spark

HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
SCHEMA = "key STRING, v INT, ts TIMESTAMP"


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("checkpoint-reader-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("ckpt-reader")


def write_input(directory, name: str, rows: int, start: int = 0) -> None:
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{name}.tmp")
    with open(tmp, "w") as fh:
        for i in range(start, start + rows):
            fh.write(json.dumps({"key": f"k{i % 3}", "v": i % 7, "ts": f"2024-01-01 00:00:{i % 60:02d}"}) + "\n")
    os.replace(tmp, os.path.join(directory, name))  # hidden while written: the file source skips dot-files


def run(writer):
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination(120)
    assert query.exception() is None
    return query


def batch_id(progress) -> int:
    """A progress entry's batchId (StreamingQueryProgress object or plain dict)."""
    return progress["batchId"] if isinstance(progress, dict) else progress.batchId


def digest(root) -> dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for d in dirnames:
            out[os.path.relpath(os.path.join(dirpath, d), root) + "/"] = "dir"
        for f in filenames:
            with open(os.path.join(dirpath, f), "rb") as fh:
                out[os.path.relpath(os.path.join(dirpath, f), root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


def field_names(schema) -> list[str]:
    return [f["name"] for f in schema["fields"]]


def field_types(schema) -> dict[str, str]:
    return {f["name"]: f["type"] for f in schema["fields"]}


def agg_over_dedup(spark, source):
    from pyspark.sql import functions as F

    df = spark.readStream.schema(SCHEMA).json(str(source))
    return df.dropDuplicates(["key", "v"]).groupBy("key").agg(F.count("*").alias("n"), F.sum("v").alias("total"))


def test_aggregation_over_dedup(spark, work):
    source, ckpt = work / "in_agg", work / "ckpt_agg"
    write_input(source, "part-0.json", 12)
    frame = agg_over_dedup(spark, source)
    start = lambda name: (  # noqa: E731
        frame.writeStream.format("memory").queryName(name).outputMode("complete").option("checkpointLocation", str(ckpt))
    )
    first = run(start("agg1"))
    write_input(source, "part-1.json", 5, start=12)
    second = run(start("agg2"))
    assert first.id == second.id

    before = digest(ckpt)
    t0 = time.perf_counter()
    info = read_checkpoint(str(ckpt))
    elapsed = time.perf_counter() - t0
    assert digest(ckpt) == before, "the reader modified the checkpoint"

    assert info.query_id == second.id
    assert info.last_committed_batch == info.last_planned_batch == batch_id(second.lastProgress) == 1
    assert info.clean and info.next_batch_id == 2
    assert info.shuffle_partitions == 2 and info.conf["spark.sql.shuffle.partitions"] == "2"
    assert info.state_store_provider == HDFS
    assert info.latest_offsets.source_offsets == [{"logOffset": 1}]

    [src] = info.sources
    assert src.kind == "file" and src.latest_log_batch == 1
    assert src.path_dirs == [f"file://{source}"]
    assert src.sample_path == f"file://{source}/part-1.json"

    agg, dedup = info.operators
    assert (agg.id, agg.name) == (0, "stateStoreSave")
    assert (dedup.id, dedup.name) == (1, "dedupe")
    for op in (agg, dedup):
        assert op.num_partitions == 2 and op.store_names == ["default"] and op.schema_version == 2
    assert field_types(agg.key_schema) == {"key": "string"}
    # The aggregation buffer: count(*) -> count, sum(v) -> sum (buffer names, not the aliases).
    assert field_types(agg.value_schema) == {"count": "long", "sum": "long"}
    assert field_types(dedup.key_schema) == {"key": "string", "v": "integer"}
    assert field_names(dedup.value_schema) == ["__dummy__"]

    assert info.files_read == 8
    assert elapsed < 1.0
    text = info.render_text()
    assert "stateStoreSave" in text and "dedupe" in text and second.id in text

    # Spark still restarts fine from the checkpoint we read, and the reader follows it.
    write_input(source, "part-2.json", 3, start=17)
    third = run(start("agg3"))
    assert read_checkpoint(str(ckpt)).last_committed_batch == batch_id(third.lastProgress) == 2


def test_uncommitted_batch_is_reported_and_replayed_by_spark(spark, work):
    """A copy of the aggregation checkpoint without its last commit: not clean, and Spark replays that batch."""
    source, original, ckpt = work / "in_agg", work / "ckpt_agg", work / "ckpt_agg_uncommitted"
    shutil.copytree(original, ckpt)
    last = read_checkpoint(str(ckpt)).last_committed_batch
    for name in (str(last), f".{last}.crc"):
        (ckpt / "commits" / name).unlink()

    info = read_checkpoint(str(ckpt))
    assert not info.clean and info.next_batch_id == last
    assert f"batch {last} planned but not committed; Spark will replay it" in info.notes

    frame = agg_over_dedup(spark, source)
    replay = run(
        frame.writeStream.format("memory").queryName("agg_replay").outputMode("complete")
        .option("checkpointLocation", str(ckpt))
    )
    assert batch_id(replay.recentProgress[0]) == last  # the same batch id, replayed
    after = read_checkpoint(str(ckpt))
    assert after.clean and after.last_committed_batch == last


def test_stateless_file_to_parquet(spark, work):
    source, ckpt, out = work / "in_plain", work / "ckpt_plain", work / "out_plain"
    write_input(source, "part-0.json", 10)
    query = run(
        spark.readStream.schema(SCHEMA).json(str(source)).writeStream.format("parquet")
        .option("path", str(out)).option("checkpointLocation", str(ckpt))
    )
    info = read_checkpoint(str(ckpt))
    assert info.query_id == query.id
    assert info.operators == []
    assert info.clean and info.last_committed_batch == 0
    [src] = info.sources
    assert src.kind == "file" and src.path_dirs == [f"file://{source}"] and src.entries_in_file == 1
    assert info.files_read == 4  # metadata, offsets/0, commits/0, sources/0/0
    # The file sink's own log lives in the output directory, not in the checkpoint.
    assert (out / "_spark_metadata").is_dir() and not (ckpt / "sinks").exists()


def test_stream_stream_join(spark, work):
    from pyspark.sql import functions as F

    left_dir, right_dir, ckpt = work / "in_left", work / "in_right", work / "ckpt_join"
    write_input(left_dir, "part-0.json", 6)
    write_input(right_dir, "part-0.json", 6)

    def side(directory, prefix):
        return (
            spark.readStream.schema(SCHEMA).json(str(directory)).withWatermark("ts", "10 seconds")
            .select(F.col("key").alias(f"{prefix}k"), F.col("v").alias(f"{prefix}v"), F.col("ts").alias(f"{prefix}ts"))
        )

    joined = side(left_dir, "l").join(
        side(right_dir, "r"),
        F.expr("lk = rk AND rts BETWEEN lts - INTERVAL 5 SECONDS AND lts + INTERVAL 5 SECONDS"),
    )
    query = run(joined.writeStream.format("memory").queryName("joined").option("checkpointLocation", str(ckpt)))

    info = read_checkpoint(str(ckpt))
    assert info.query_id == query.id and info.clean
    assert [s.kind for s in info.sources] == ["file", "file"]
    assert [s.path_dirs for s in info.sources] == [[f"file://{left_dir}"], [f"file://{right_dir}"]]
    [op] = info.operators
    assert (op.id, op.name, op.num_partitions) == (0, "symmetricHashJoin", 2)
    assert op.store_names == [
        "left-keyToNumValues", "left-keyWithIndexToValue", "right-keyToNumValues", "right-keyWithIndexToValue",
    ]
    stores = {s.name: s for s in op.stores}
    assert field_types(stores["left-keyWithIndexToValue"].value_schema) == {
        "lk": "string", "lv": "integer", "lts": "timestamp", "matched": "boolean",
    }
    assert field_names(stores["right-keyToNumValues"].value_schema) == ["value"]
    assert all(s.schema_version == 2 for s in op.stores)
    # The watermark of the last batch: max event time seen (00:00:05) minus 10 s.
    assert info.latest_commit.next_batch_watermark_ms == 1704067195000
