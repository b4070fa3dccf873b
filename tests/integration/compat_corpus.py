"""Real change pairs for the compatibility corpus: a v1 query and a v2 candidate, as user scripts.

Every script reads JSON events (``src``, and ``src2`` where a second source is needed), writes to
``out`` with ``checkpointLocation=ckpt`` and runs ``availableNow`` so it ends by itself.
"""

from __future__ import annotations

from dataclasses import dataclass

HEADER = '''
import sys
from pyspark.sql import SparkSession, functions as F
spark = SparkSession.builder.getOrCreate()
src, src2, out, ckpt = sys.argv[1:5]
SCHEMA = "event_id STRING, device_id STRING, event_type STRING, ts STRING, signal DOUBLE"
events = spark.readStream.schema(SCHEMA).json(src)
other = spark.readStream.schema(SCHEMA).json(src2)
'''

AGG = '''result = events.groupBy("device_id").agg(F.count("*").alias("n"))
writer = result.writeStream.outputMode("update").format("noop")
'''
STATELESS = '''result = events.select("event_id", "device_id", "signal")
writer = result.writeStream.format("parquet").option("path", out)
'''
DEDUP = '''result = events.dropDuplicates(["event_id"]).select("event_id", "device_id", "signal")
writer = result.writeStream.format("parquet").option("path", out)
'''
JOIN = '''result = events.alias("a").join(other.alias("b"), F.col("a.device_id") == F.col("b.device_id"))
writer = result.select("a.event_id", "b.event_id").writeStream.format("noop")
'''
START = '''query = writer.option("checkpointLocation", ckpt).trigger(availableNow=True).start()
query.awaitTermination()
'''


@dataclass(frozen=True)
class ChangePair:
    name: str
    v1: str
    v2: str
    spark_fails: bool
    """What Spark itself does when v2 restarts on v1's checkpoint with new data (the oracle)."""
    expected_rule: str | None = None
    """A rule the check must name (for warnings and incompatibilities)."""
    silently_ignored_conf: str | None = None
    """Spark accepts the change but keeps the checkpoint's value of this conf."""

    def script(self, version: str) -> str:
        return HEADER + (self.v1 if version == "v1" else self.v2)


def _start(body: str, start: str = START) -> str:
    return body + start


PAIRS = [
    ChangePair("grouping_column_renamed", _start(AGG),
               _start(AGG.replace('events.groupBy("device_id")', 'events.withColumnRenamed("device_id", "dev").groupBy("dev")')),
               spark_fails=False, expected_rule="STATE_KEY_SCHEMA"),
    ChangePair("aggregate_added", _start(AGG),
               _start(AGG.replace('F.count("*").alias("n"))', 'F.count("*").alias("n"), F.sum("signal").alias("s"))')),
               spark_fails=True, expected_rule="STATE_VALUE_SCHEMA"),
    ChangePair("grouping_key_added", _start(AGG),
               _start(AGG.replace('groupBy("device_id")', 'groupBy("device_id", "event_type")')),
               spark_fails=True, expected_rule="STATE_KEY_SCHEMA"),
    ChangePair("dedup_added", _start(STATELESS), _start(DEDUP), spark_fails=True, expected_rule="STATEFUL_OPERATORS"),
    ChangePair("dedup_removed", _start(DEDUP), _start(STATELESS), spark_fails=True, expected_rule="STATEFUL_OPERATORS"),
    ChangePair("filter_added", _start(STATELESS),
               _start(STATELESS.replace('result = events.select', 'result = events.filter("signal > 10").select')),
               spark_fails=False),
    ChangePair("projection_added", _start(STATELESS),
               _start(STATELESS.replace('"signal")', '"signal", "event_type")')), spark_fails=False),
    ChangePair("trigger_interval_changed",
               _start(STATELESS, START.replace("trigger(availableNow=True)", "trigger(once=True)")),
               _start(STATELESS), spark_fails=False),
    ChangePair("shuffle_partitions_changed", _start(AGG),
               'spark.conf.set("spark.sql.shuffle.partitions", "5")\n' + _start(AGG),
               spark_fails=False, expected_rule="CONF_OVERRIDDEN_BY_CHECKPOINT",
               silently_ignored_conf="spark.sql.shuffle.partitions"),
    ChangePair("state_provider_changed", _start(AGG),
               'spark.conf.set("spark.sql.streaming.stateStore.providerClass", '
               '"org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")\n' + _start(AGG),
               spark_fails=False, expected_rule="CONF_OVERRIDDEN_BY_CHECKPOINT",
               silently_ignored_conf="spark.sql.streaming.stateStore.providerClass"),
    ChangePair("source_added", _start(STATELESS),
               _start(STATELESS.replace("result = events.select", "result = events.unionByName(other).select")),
               spark_fails=True, expected_rule="SOURCE_COUNT"),
    ChangePair("source_path_changed", _start(STATELESS),
               _start(STATELESS.replace("result = events.select", "result = other.select")),
               spark_fails=True, expected_rule="FILE_SOURCE_PATH"),
    ChangePair("sink_path_changed", _start(STATELESS),
               _start(STATELESS.replace('option("path", out)', 'option("path", out + "_moved")')),
               spark_fails=True, expected_rule="FILE_SINK_PATH"),
    ChangePair("join_key_type_changed", _start(JOIN),
               _start(JOIN.replace('F.col("a.device_id") == F.col("b.device_id")', 'F.col("a.signal") == F.col("b.signal")')),
               spark_fails=True, expected_rule="STATE_KEY_SCHEMA"),
    ChangePair("join_key_changed_same_type", _start(JOIN),
               _start(JOIN.replace('F.col("a.device_id") == F.col("b.device_id")', 'F.col("a.event_type") == F.col("b.event_type")')),
               spark_fails=False, expected_rule="STATE_KEYS_NOT_RECORDED"),
]


# ------------------------------------------------------------------------------------ Spark runtime changes
# v1 runs on one Spark line, v2 on another (each in a child process of that line's python: one JVM per
# process). The session is built here (the corpus' HEADER takes whatever getOrCreate gives), with the
# conf a pair names; everything else as above.

RUNTIME_HEADER = '''
import json, os, sys
from pyspark.sql import SparkSession, functions as F
builder = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
           .config("spark.sql.shuffle.partitions", "2"))
for key, value in json.loads(os.environ.get("CORPUS_CONF", "{}")).items():
    builder = builder.config(key, value)
spark = builder.getOrCreate()
src, src2, out, ckpt = sys.argv[1:5]
SCHEMA = "event_id STRING, device_id STRING, event_type STRING, ts STRING, signal DOUBLE"
events = spark.readStream.schema(SCHEMA).json(src)
other = spark.readStream.schema(SCHEMA).json(src2)
'''
COUNTS = '''result = events.groupBy("device_id").agg(F.count("*").alias("n"))
def write(df, batch_id):
    df.coalesce(1).write.mode("overwrite").json(f"{out}/batch={batch_id}")
writer = result.writeStream.outputMode("complete").foreachBatch(write)
'''
CHECKPOINT_FORMAT_2 = {
    "spark.sql.streaming.stateStore.checkpointFormatVersion": "2",
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
}
CURRENT = "current"
"""The line of the test's own interpreter (pyspark 4.x)."""


@dataclass(frozen=True)
class RuntimePair:
    name: str
    v1_runtime: str
    v2_runtime: str
    body: str
    """The query (the same script for v1 and v2: only the Spark line changes)."""
    spark_fails: bool
    """What Spark does when v2's line restarts the query on v1's checkpoint with new data (the oracle)."""
    spark_error: str | None = None
    """Text of Spark's own error that the oracle raises and the gate's dry run must report."""
    v1_conf: dict[str, str] | None = None

    def script(self) -> str:
        return RUNTIME_HEADER + _start(self.body)


RUNTIME_PAIRS = [
    # An upgrade of aggregation state: resumes, every count kept (state is portable from 3.5 to 4.x).
    RuntimePair("aggregation_3.5_to_4", "3.5.7", CURRENT, COUNTS, spark_fails=False),
    # A stream-stream join's state from 3.5 does not resume on 4.x: 3.5 recorded the join key as not
    # nullable in the value schema, 4.x plans it nullable.
    RuntimePair("join_3.5_to_4", "3.5.7", CURRENT, JOIN, spark_fails=True,
                spark_error="STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"),
    # A downgrade of a checkpoint in 4.x's checkpoint format v2 (commit log v2): 3.5 cannot read it.
    RuntimePair("checkpoint_format_2_4_to_3.5", CURRENT, "3.5.7", COUNTS, spark_fails=True,
                spark_error="UnsupportedLogVersion", v1_conf=CHECKPOINT_FORMAT_2),
]
