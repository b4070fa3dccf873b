"""Plan a candidate job version without running it (Spark side).

The candidate is either a bundled job or an unmodified user script. Its query is *captured*: the
job builds its DataFrame and DataStreamWriter as usual, but ``start()`` / ``toTable()`` only record
what would be started (sources, sink, output mode, trigger) and stop the script there. The
candidate's stateful operators and their key/value state schemas are then materialised by Spark's
own planner in a scratch directory (see :mod:`.spark_adapter`) and read back with the checkpoint
reader, so they are described exactly as a checkpoint describes them.
"""

from __future__ import annotations

import contextlib
import os
import re
import runpy
import shutil
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from airflow_streaming.compat import spark_adapter
from airflow_streaming.compat.rules import normalize_path

#: Conf keys Spark records in the offsets log and restores from it on restart.
CHECKPOINT_CONF_KEYS = (
    "spark.sql.shuffle.partitions",
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.multipleWatermarkPolicy",
    "spark.sql.streaming.aggregation.stateFormatVersion",
    "spark.sql.streaming.join.stateFormatVersion",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion",
    "spark.sql.streaming.stateStore.compression.codec",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion",
    "spark.sql.streaming.stateStore.encodingFormat",
)


class QueryCaptured(Exception):  # noqa: N818 - control flow, not an error
    """Raised by the patched ``start()`` to stop a script right where it would start its query."""


class NoQueryStarted(RuntimeError):
    """The candidate application finished without starting a streaming query."""


@dataclass
class CapturedQuery:
    """What a job would start: its streaming DataFrame and writer settings."""

    df: Any
    format: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    output_mode: str = "append"
    partition_by: list[str] = field(default_factory=list)
    query_name: str | None = None
    trigger: dict[str, Any] = field(default_factory=dict)
    foreach_batch: bool = False
    table: str | None = None


@dataclass(frozen=True)
class SourceInfo:
    """One streaming source of a plan, in the plan order Spark uses for the offsets log."""

    index: int
    kind: str
    """Source format / provider short name: text, json, parquet, kafka, rate, memory..."""
    path: str | None
    options: dict[str, str]


@dataclass(frozen=True)
class SinkInfo:
    format: str | None
    path: str | None
    output_mode: str
    foreach_batch: bool
    partition_by: list[str]
    query_name: str | None
    trigger: dict[str, Any]


@dataclass
class CandidatePlan:
    """Everything the compatibility rules compare against a checkpoint."""

    application: str
    sources: list[SourceInfo]
    sink: SinkInfo
    conf: dict[str, str | None]
    operators: list[Any]
    """Stateful operators as the checkpoint reader describes them (id, name, key/value schemas)."""
    spark_version: str
    key_expressions: dict[int, list[str]] = field(default_factory=dict)
    """Stateful operator id -> its key expressions as Spark prints them (join keys, grouping keys)."""
    df: Any = field(default=None, repr=False, compare=False)
    state_checked_in_planning: bool = True
    """Whether this Spark's planner materialised the stateful operators' state schemas (4.0+ does, and runs
    its state checks there); ``False`` (Spark 3.5) when the plan has stateful operators but planning wrote
    no schema: their facts then come from the plan, and a dry run cannot see a state schema change."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "application": self.application,
            "sources": [asdict(s) for s in self.sources],
            "sink": asdict(self.sink),
            "conf": self.conf,
            "operators": [op.to_dict() if hasattr(op, "to_dict") else asdict(op) for op in self.operators],
            "spark_version": self.spark_version,
            "key_expressions": self.key_expressions,
            "state_checked_in_planning": self.state_checked_in_planning,
        }


# ----------------------------------------------------------------------------------- capture


@contextlib.contextmanager
def capturing_writes() -> Iterator[list[CapturedQuery]]:
    """Patch DataStreamWriter so that building a query records it and starting it raises QueryCaptured."""
    from pyspark.sql.streaming.readwriter import DataStreamWriter

    captured: list[CapturedQuery] = []
    saved = {name: getattr(DataStreamWriter, name) for name in (
        "outputMode", "format", "option", "options", "partitionBy", "queryName", "trigger",
        "foreachBatch", "foreach", "start", "toTable")}

    def state(writer: Any) -> CapturedQuery:
        if "_airflow_streaming_capture" not in writer.__dict__:
            writer.__dict__["_airflow_streaming_capture"] = CapturedQuery(df=writer._df)
        return writer.__dict__["_airflow_streaming_capture"]

    def recorder(name: str, apply: Any) -> Any:
        original = saved[name]

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            apply(state(self), *args, **kwargs)
            return original(self, *args, **kwargs)

        return method

    def _opts(c: CapturedQuery, **kw: Any) -> None:
        c.options.update({k: str(v) for k, v in kw.items() if v is not None})

    def _trigger(c: CapturedQuery, **kw: Any) -> None:
        c.trigger = {k: v for k, v in kw.items() if v is not None}

    def _partition(c: CapturedQuery, *cols: Any) -> None:
        c.partition_by = list(cols[0]) if len(cols) == 1 and isinstance(cols[0], (list, tuple)) else list(cols)

    patches = {
        "outputMode": lambda c, m: setattr(c, "output_mode", m),
        "format": lambda c, f: setattr(c, "format", f),
        "option": lambda c, k, v: c.options.__setitem__(k, str(v)),
        "options": _opts,
        "partitionBy": _partition,
        "queryName": lambda c, n: setattr(c, "query_name", n),
        "trigger": _trigger,
        "foreachBatch": lambda c, f: setattr(c, "foreach_batch", True),
        "foreach": lambda c, f: setattr(c, "format", "foreach"),
    }

    def start(self: Any, path: str | None = None, format: str | None = None, outputMode: str | None = None,
              partitionBy: Any = None, queryName: str | None = None, **options: Any) -> Any:
        c = state(self)
        if path is not None:
            c.options["path"] = path
        if format is not None:
            c.format = format
        if outputMode is not None:
            c.output_mode = outputMode
        if partitionBy is not None:
            _partition(c, partitionBy)
        if queryName is not None:
            c.query_name = queryName
        _opts(c, **options)
        captured.append(c)
        raise QueryCaptured()

    def to_table(self: Any, tableName: str, format: str | None = None, outputMode: str | None = None,
                 partitionBy: Any = None, queryName: str | None = None, **options: Any) -> Any:
        state(self).table = tableName
        return start(self, None, format, outputMode, partitionBy, queryName, **options)

    try:
        for name, apply in patches.items():
            setattr(DataStreamWriter, name, recorder(name, apply))
        DataStreamWriter.start = start
        DataStreamWriter.toTable = to_table
        yield captured
    finally:
        for name, original in saved.items():
            setattr(DataStreamWriter, name, original)


def capture_query(spark: Any, application: str, args: list[str], stream: str, checkpoint: str,
                  trigger_seconds: float) -> CapturedQuery:
    """Build the candidate's query exactly as the driver would, without starting it."""
    from airflow_streaming.spec import BUNDLED_JOBS

    with capturing_writes() as captured:
        if application in BUNDLED_JOBS:
            from airflow_streaming.bundled_job import JobContext, bundled_writer

            ctx = JobContext(stream, "candidate", checkpoint, trigger_seconds)
            with contextlib.suppress(QueryCaptured):
                bundled_writer(spark, application, args, ctx).start()
        else:
            from airflow_streaming.application_source import script_file

            script = script_file(application)  # a fetched URI: its copy, fetched by ``spark``'s SparkContext
            saved_argv = sys.argv
            sys.argv = [script, *args]
            try:
                runpy.run_path(script, run_name="__main__")
            except QueryCaptured:
                pass
            finally:
                sys.argv = saved_argv
    if not captured:
        raise NoQueryStarted(f"{application} did not start a streaming query")
    return captured[0]


# ----------------------------------------------------------------------------------- planning


def _java_map(jvm: Any, scala_map: Any) -> dict[str, str]:
    try:
        java_map = spark_adapter.to_java(jvm, scala_map)
    except Exception:  # noqa: BLE001 - already a Java map (CaseInsensitiveStringMap)
        java_map = scala_map
    try:
        return {str(k): str(v) for k, v in dict(java_map).items()}
    except Exception:  # noqa: BLE001
        return {}



def streaming_sources(spark: Any, df: Any) -> list[SourceInfo]:
    """The streaming sources of ``df``'s analyzed plan, in plan (pre-order) order."""
    jvm = spark._jvm
    leaves = df._jdf.queryExecution().analyzed().collectLeaves()
    it = leaves.iterator()
    sources: list[SourceInfo] = []
    while it.hasNext():
        leaf = it.next()
        if not leaf.isStreaming():
            continue
        node = str(leaf.nodeName())
        kind, options = node, {}
        try:
            if node == "StreamingRelation":
                ds = leaf.dataSource()
                kind = str(ds.className())
                options = _java_map(jvm, ds.options())
                paths = [str(p) for p in spark_adapter.to_java(jvm, ds.paths())]
                if paths and "path" not in options:
                    options["path"] = paths[0]
            elif node == "StreamingRelationV2":
                kind = str(leaf.sourceName())
                options = _java_map(jvm, leaf.extraOptions())
        except Exception:  # noqa: BLE001 - keep the node name when internals differ
            pass
        kind = kind.rsplit(".", 1)[-1].lower().replace("fileformat", "").replace("sourceprovider", "")
        sources.append(SourceInfo(len(sources), kind, normalize_path(options.get("path")), options))
    return sources


def plan_candidate(spark: Any, captured: CapturedQuery, application: str,
                   checkpoint_conf_keys: tuple[str, ...] = CHECKPOINT_CONF_KEYS) -> CandidatePlan:
    """Describe the candidate: sources, sink, relevant conf and stateful operators with state schemas."""
    from airflow_streaming.checkpoint.reader import read_checkpoint

    conf = {key: spark.conf.get(key, None) for key in checkpoint_conf_keys}
    scratch = tempfile.mkdtemp(prefix="airflow-streaming-candidate-")
    try:
        query_id = str(uuid.uuid4())
        with open(os.path.join(scratch, "metadata"), "w") as fh:
            fh.write('{"id":"%s"}\n' % query_id)
        metadata = spark_adapter.offset_metadata_json(0, 0, {k: v for k, v in conf.items() if v is not None})
        executed = spark_adapter.plan_incrementally(spark, captured.df, captured.output_mode,
                                                    os.path.join(scratch, "state"), query_id, 0, metadata, None)
        operators = list(read_checkpoint(scratch).operators)
        key_expressions = stateful_key_expressions(executed)
        state_checked = bool(operators) or not key_expressions
        if not state_checked:  # Spark 3.5: planning wrote nothing; describe the operators from the plan
            operators = planned_operators(spark, executed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    sink = SinkInfo(
        format="foreachBatch" if captured.foreach_batch else captured.format,
        path=normalize_path(captured.options.get("path")),
        output_mode=captured.output_mode,
        foreach_batch=captured.foreach_batch,
        partition_by=captured.partition_by,
        query_name=captured.query_name,
        trigger=captured.trigger,
    )
    return CandidatePlan(application, streaming_sources(spark, captured.df), sink, conf, operators,
                         spark_adapter.spark_version(spark), key_expressions=key_expressions, df=captured.df,
                         state_checked_in_planning=state_checked)


def _struct_json(java_struct: Any) -> dict[str, Any]:
    import json

    return json.loads(str(java_struct.json()))


def planned_operators(spark: Any, executed_plan: Any) -> list[Any]:
    """The stateful operators of an executed plan as the checkpoint reader describes them, for a Spark
    whose planner writes no state schema (3.5): id and short name from each state-writing node, the key
    schema from its key expressions and, for an aggregation, the value schema from its state manager
    (the two the state store checks). What the plan does not tell (a join's four stores, a dedup's value)
    stays ``None``, and the rules say they could not compare it."""
    from airflow_streaming.checkpoint.info import OperatorInfo

    jvm = spark._jvm
    found: dict[int, Any] = {}
    stack = [executed_plan]
    while stack:
        node = stack.pop()
        children = node.children().iterator()
        while children.hasNext():
            stack.append(children.next())
        try:
            info = node.stateInfo()
            if not info.isDefined():
                continue
            name = str(node.shortName())  # only the state-writing node of an operator has one
        except Exception:  # noqa: BLE001 - not a stateful node, or a restore node (no shortName)
            continue
        state = info.get()
        key = value = None
        try:
            key = _struct_json(jvm.org.apache.spark.sql.catalyst.types.DataTypeUtils.fromAttributes(node.keyExpressions()))
        except Exception:  # noqa: BLE001 - a join: keys per side, several stores
            pass
        try:
            value = _struct_json(node.stateManager().getStateValueSchema())
        except Exception:  # noqa: BLE001 - not an aggregation
            pass
        op_id = int(state.operatorId())
        found[op_id] = OperatorInfo(id=op_id, name=name, metadata_file=None, metadata_version=None,
                                    num_partitions=int(state.numPartitions()), store_names=[], stores=[],
                                    key_schema=key, value_schema=value, schema_version=None)
    return [found[i] for i in sorted(found)]


_EXPR_ID = re.compile(r"#\d+L?")


def _expressions(seq: Any) -> list[str]:
    it = seq.iterator()
    out = []
    while it.hasNext():
        out.append(_EXPR_ID.sub("", str(it.next().sql())))
    return out


def stateful_key_expressions(executed_plan: Any) -> dict[int, list[str]]:
    """``{operator id: [key expressions]}`` of the stateful operators of an executed plan.

    Join keys are stored in the checkpoint under generic names (``field0``), so the plan is the only
    place that says which columns they are.
    """
    found: dict[int, list[str]] = {}
    stack = [executed_plan]
    while stack:
        node = stack.pop()
        try:
            info = node.stateInfo()
            if info.isDefined():
                op_id = int(info.get().operatorId())
                keys: list[str] = []
                for getter in ("leftKeys", "rightKeys", "keyExpressions", "groupingAttributes"):
                    if hasattr(node, getter):
                        try:
                            keys += _expressions(getattr(node, getter)())
                        except Exception:  # noqa: BLE001 - not this operator's accessor
                            pass
                found[op_id] = keys
        except Exception:  # noqa: BLE001 - not a stateful node
            pass
        children = node.children().iterator()
        while children.hasNext():
            stack.append(children.next())
    return found
