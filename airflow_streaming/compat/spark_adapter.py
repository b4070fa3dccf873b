"""A small version adapter over Spark's internal streaming planner (py4j).

Spark runs its restart checks (state schema compatibility, stateful operators vs the checkpoint's
state metadata) while it *plans* the first micro-batch of a restarted query, in
``IncrementalExecution``. We build that object ourselves for a candidate query, against a scratch
copy of a checkpoint's metadata, and ask for its physical plan: nothing reads a source, writes a
sink or touches real state. ``IncrementalExecution`` is internal API: its package moved in 4.1 and
its constructor grows; this adapter finds the class and constructor it knows and otherwise raises
:class:`DryRunUnsupported`, so a caller reports "not supported" instead of passing silently.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from airflow_streaming.supervision.classification import spark_error_class

_STREAMING = "org.apache.spark.sql.execution.streaming"
#: Where each internal class lives, newest Spark first (4.2: checkpointing/, 4.1: runtime/, 3.5 and 4.0: streaming/).
_PACKAGES = {
    "IncrementalExecution": (f"{_STREAMING}.runtime", _STREAMING),
    "OffsetSeqMetadata": (f"{_STREAMING}.checkpointing", f"{_STREAMING}.runtime", _STREAMING),
    "WatermarkPropagator": (f"{_STREAMING}.runtime", _STREAMING),
    "OffsetSeqLog": (f"{_STREAMING}.checkpointing", f"{_STREAMING}.runtime", _STREAMING),
    "CommitLog": (f"{_STREAMING}.checkpointing", f"{_STREAMING}.runtime", _STREAMING),
}
SUPPORTED_VERSIONS = ("3.5", "4.0", "4.1", "4.2")
#: Since 4.0 Spark checks state schemas and stateful operators against the checkpoint while it *plans* a
#: batch (on the driver). 3.5 plans without these checks: it checks a state schema (and writes its file)
#: when a state store is first loaded on an executor. Callers tell the two apart by what planning wrote
#: (see ``compat.candidate.plan_candidate``), not by the version.


class DryRunUnsupported(RuntimeError):
    """This Spark version's internal planner is not one the adapter knows."""


class SparkPlanningError(RuntimeError):
    """Spark rejected the candidate while planning it; keeps Spark's error class."""

    def __init__(self, error_class: str, message: str):
        self.error_class = error_class
        self.message = message
        super().__init__(f"[{error_class}] {message}")


def spark_version(spark: Any) -> str:
    return str(spark.version)


def to_java(jvm: Any, scala_collection: Any) -> Any:
    """A Scala collection as a Java one, on Scala 2.13 (Spark 4) and 2.12 (Spark 3.5)."""
    try:
        return jvm.scala.jdk.javaapi.CollectionConverters.asJava(scala_collection)  # Scala 2.13
    except Exception:  # noqa: BLE001 - py4j: no such class on Scala 2.12
        pass
    converters = jvm.scala.collection.JavaConverters
    for name in ("seqAsJavaListConverter", "mapAsJavaMapConverter", "setAsJavaSetConverter"):
        try:
            return getattr(converters, name)(scala_collection).asJava()
        except Exception:  # noqa: BLE001 - not this kind of collection
            continue
    raise TypeError(f"cannot convert {scala_collection} to a Java collection")


def _check_version(spark: Any) -> None:
    version = spark_version(spark)
    if not any(version.startswith(v) for v in SUPPORTED_VERSIONS):
        raise DryRunUnsupported(f"Spark {version} is not supported by the dry-run adapter "
                                f"(supported: {', '.join(SUPPORTED_VERSIONS)})")


def _class(jvm: Any, simple_name: str) -> tuple[str, Any]:
    for package in _PACKAGES[simple_name]:
        name = f"{package}.{simple_name}"
        try:
            jvm.java.lang.Class.forName(name, False, jvm.java.lang.Thread.currentThread().getContextClassLoader())
        except Exception:  # noqa: BLE001 - py4j raises Py4JJavaError for ClassNotFoundException
            continue
        return name, _java_object(jvm, name)
    raise DryRunUnsupported(f"Spark internal class {simple_name} not found in {', '.join(_PACKAGES[simple_name])}")


def _java_object(jvm: Any, dotted: str) -> Any:
    obj = jvm
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def describe_java_error(exc: BaseException) -> tuple[str, str]:
    """(error class, message) of a py4j error raised by Spark, following causes to Spark's own error."""
    # PySpark turns Spark's JVM errors into Python exceptions with the same accessors.
    error_class = spark_error_class(exc)
    if error_class:
        return error_class, str(exc).strip()
    java_exc = getattr(exc, "java_exception", None) or getattr(exc, "_java_exception", None)
    error_class, message = None, str(exc)
    seen = 0
    while java_exc is not None and seen < 10:
        seen += 1
        error_class = spark_error_class(java_exc)
        message = str(java_exc.getMessage() or java_exc.toString())
        if error_class:
            break
        java_exc = java_exc.getCause()
    if error_class is None:
        text = message
        error_class = "AssertionError" if "AssertionError" in text else "SparkInternalError"
    return error_class, message.strip()


def plan_incrementally(
    spark: Any,
    df: Any,
    output_mode: str,
    state_dir: str,
    query_id: str,
    batch_id: int,
    offset_metadata_json: str,
    prev_offset_metadata_json: str | None,
) -> Any:
    """Build Spark's ``IncrementalExecution`` for ``df`` at ``batch_id`` against ``state_dir`` and plan it.

    Returns the executed physical plan (a py4j object). Raises :class:`SparkPlanningError` with
    Spark's error class when Spark rejects the plan, :class:`DryRunUnsupported` when this Spark
    version's internals are unknown. Writes operator metadata and schema files under ``state_dir``
    (like Spark's first batch): always pass a scratch directory.
    """
    _check_version(spark)
    jvm = spark._jvm
    jspark = spark._jsparkSession
    ie_name, ie_class = _class(jvm, "IncrementalExecution")
    _, offset_seq_metadata = _class(jvm, "OffsetSeqMetadata")
    _, watermark_propagator = _class(jvm, "WatermarkPropagator")
    modes = {"append": "Append", "update": "Update", "complete": "Complete"}
    mode = getattr(jvm.org.apache.spark.sql.streaming.OutputMode, modes[output_mode.lower()])()
    metadata = offset_seq_metadata.apply(offset_metadata_json)
    prev = jvm.scala.Option.apply(offset_seq_metadata.apply(prev_offset_metadata_json)
                                  if prev_offset_metadata_json else None)
    conf = jspark.sessionState().conf()
    propagator = watermark_propagator.apply(conf)
    uuid_class = jvm.java.util.UUID
    # 3.5: the first 10 arguments; 4.0+ adds isFirstBatch, then (4.1+) the schema maps, the mode and a flag.
    args = [
        jspark, df._jdf.queryExecution().analyzed(), mode, state_dir,
        uuid_class.fromString(query_id), uuid_class.fromString(str(uuid.uuid4())),
        batch_id, prev, metadata, propagator,
    ]
    arity = _constructor_arity(jvm, ie_name)
    defaults = [lambda: True, jvm.scala.collection.mutable.HashMap, jvm.scala.collection.mutable.HashMap,
                lambda: jvm.org.apache.spark.sql.execution.CommandExecutionMode.ALL(), lambda: False]
    if arity < len(args) or arity > len(args) + len(defaults):
        raise DryRunUnsupported(f"{ie_name} has a {arity}-argument constructor this adapter does not know")
    args += [make() for make in defaults[: arity - len(args)]]
    try:
        execution = ie_class(*args)
        return execution.executedPlan()
    except Exception as exc:  # noqa: BLE001 - py4j errors carry Spark's exception
        spark_error = ("Py4J" in type(exc).__name__ or hasattr(exc, "java_exception")
                       or callable(getattr(exc, "getCondition", None)) or type(exc).__module__.startswith("pyspark"))
        if not spark_error:
            raise
        error_class, message = describe_java_error(exc)
        raise SparkPlanningError(error_class, message) from exc


def read_logs(spark: Any, checkpoint_dir: str) -> None:
    """Read the latest entry of the offsets and commit logs under ``checkpoint_dir`` with Spark's own log
    classes, as a restart does before anything else: a log written in a format this Spark cannot read
    (e.g. a commit log v2 of ``stateStore.checkpointFormatVersion=2`` for Spark 3.5) fails here with
    Spark's own error (:class:`SparkPlanningError`). Pass a scratch copy: 4.x may create the log dirs."""
    jvm, jspark = spark._jvm, spark._jsparkSession
    for simple_name, sub in (("OffsetSeqLog", "offsets"), ("CommitLog", "commits")):
        name, cls = _class(jvm, simple_name)
        arity = _constructor_arity(jvm, name)
        args: list[Any] = [jspark, f"{checkpoint_dir.rstrip('/')}/{sub}"]
        for i in range(len(args) + 1, arity + 1):  # later arguments: Scala's defaults (4.2: a flag)
            args.append(getattr(cls, f"$lessinit$greater$default${i}")())
        try:
            cls(*args).getLatest()
        except Exception as exc:  # noqa: BLE001 - py4j errors carry Spark's exception
            error_class, message = describe_java_error(exc)
            if error_class in ("SparkInternalError", "AssertionError"):
                error_class = _java_class_of(exc) or error_class
            raise SparkPlanningError(error_class, message) from exc


def _java_class_of(exc: BaseException) -> str | None:
    """The simple class name of the Java exception behind a py4j error (``IllegalStateException``)."""
    java_exc = getattr(exc, "java_exception", None) or getattr(exc, "_java_exception", None)
    try:
        return str(java_exc.getClass().getSimpleName()) if java_exc is not None else None
    except Exception:  # noqa: BLE001
        return None


def _constructor_arity(jvm: Any, class_name: str) -> int:
    cls = jvm.java.lang.Class.forName(class_name, False, jvm.java.lang.Thread.currentThread().getContextClassLoader())
    return max(len(c.getParameterTypes()) for c in cls.getConstructors())


def offset_metadata_json(batch_watermark_ms: int, batch_timestamp_ms: int, conf: dict[str, str]) -> str:
    return json.dumps({"batchWatermarkMs": batch_watermark_ms, "batchTimestampMs": batch_timestamp_ms, "conf": conf})
