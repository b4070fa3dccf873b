"""Run the compatibility check of a candidate job version against a checkpoint.

1. Read the checkpoint (read-only) and reduce it to :class:`CheckpointFacts`.
2. Capture and plan the candidate without running it (:mod:`.candidate`).
3. Apply the rules (:mod:`.rules`).
4. Spark dry run: Spark's own restart checks for the candidate, planned against a scratch copy of
   only the checkpoint's metadata files (no state data, no source, no sink is touched).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

from airflow_streaming.checkpoint.reader import CheckpointInfo, OperatorInfo, read_checkpoint
from airflow_streaming.compat import rules, spark_adapter
from airflow_streaming.compat.model import (
    CandidateFacts,
    CheckpointFacts,
    DryRunResult,
    Field,
    Finding,
    OperatorFacts,
    SinkFacts,
    SourceFacts,
    Verdict,
)
from airflow_streaming.control.storage import ControlStorage
from airflow_streaming.control.locations import storage_for


@dataclass
class CompatibilityReport:
    """The verdict, every finding with both sides, and what was compared."""

    verdict: Verdict
    findings: list[Finding]
    checkpoint: dict[str, Any]
    candidate: dict[str, Any]
    dry_run: DryRunResult | None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "findings": [f.to_dict() for f in self.findings],
            "checkpoint": self.checkpoint,
            "candidate": self.candidate,
            "dry_run": self.dry_run.to_dict() if self.dry_run else None,
            "seconds": round(self.seconds, 3),
            "notes": self.notes,
        }

    def render_text(self) -> str:
        lines = [f"verdict: {self.verdict.value}",
                 f"checkpoint: {self.checkpoint.get('location')} (last committed batch "
                 f"{self.checkpoint.get('last_committed')}, {len(self.checkpoint.get('operators', []))} stateful operator(s))",
                 f"candidate: {self.candidate.get('application')}"]
        for f in self.findings:
            lines.append(f"  [{f.severity.value}] {f.rule}: {f.message}")
            if f.checkpoint is not None or f.candidate is not None:
                lines.append(f"      checkpoint: {f.checkpoint}")
                lines.append(f"      candidate:  {f.candidate}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


# ------------------------------------------------------------------------------------ facts


def _fields(schema: dict[str, Any] | None, prefix: str = "") -> tuple[Field, ...] | None:
    if schema is None:
        return None
    out = []
    for f in schema.get("fields", []):
        t = f.get("type")
        out.append(Field(prefix + str(f.get("name")), t if isinstance(t, str) else json.dumps(t, sort_keys=True)))
    return tuple(out)


def operator_facts(op: OperatorInfo) -> OperatorFacts:
    key, value = _fields(op.key_schema), _fields(op.value_schema)
    if len(op.stores) > 1 or ((key is None or value is None) and op.stores):
        # Several stores (a stream-stream join): compare all of them, store by store.
        keys: list[Field] = []
        values: list[Field] = []
        for store in sorted(op.stores, key=lambda s: s.name):
            keys += list(_fields(store.key_schema, f"{store.name}.") or ())
            values += list(_fields(store.value_schema, f"{store.name}.") or ())
        key, value = (tuple(keys) or None), (tuple(values) or None)
    return OperatorFacts(op.id, op.name or "unknown", key, value, op.num_partitions)


def checkpoint_facts(info: CheckpointInfo) -> CheckpointFacts:
    sources = []
    for s in info.sources:
        path = s.path_dirs[0] if len(s.path_dirs) == 1 else None
        kind = None if s.kind in ("none", "unknown") else s.kind
        sources.append(SourceFacts(s.index, kind, path))
    if info.latest_offsets is not None and len(sources) < len(info.latest_offsets.source_offsets):
        # Sources without a sources/<i> directory still count in the offsets log.
        known = {s.index for s in sources}
        sources += [SourceFacts(i, None, None) for i in range(len(info.latest_offsets.source_offsets)) if i not in known]
        sources.sort(key=lambda s: s.index)
    return CheckpointFacts(
        location=info.location, query_id=info.query_id, sources=tuple(sources), conf=dict(info.conf),
        operators=tuple(operator_facts(op) for op in info.operators),
        last_committed=info.last_committed_batch, last_planned=info.last_planned_batch,
        offsets_log_version=info.latest_offsets.version if info.latest_offsets else None,
        commit_log_version=info.latest_commit.version if info.latest_commit else None,
        operator_metadata_versions=tuple(sorted({op.metadata_version for op in info.operators if op.metadata_version})),
    )


def file_sink_committed_batch(path: str | None, storage: ControlStorage | None = None,
                              storage_conn_id: str | None = None) -> int | None:
    """Latest batch id in a file sink's ``_spark_metadata`` log (None when there is none)."""
    if not path:
        return None
    store, root = (storage, path) if storage is not None else storage_for(path, storage_conn_id)
    names = store.list_dir(f"{root}/_spark_metadata")
    ids = [int(n.split(".")[0]) for n in names if n.isdigit() or (n.endswith(".compact") and n[:-8].isdigit())]
    return max(ids) if ids else None


def _sink_committed_batch(path: str | None, resolve: Callable[[str], tuple[ControlStorage, str]]) -> int | None:
    if not path:
        return None
    storage, root = resolve(path)
    return file_sink_committed_batch(root, storage)


# ------------------------------------------------------------------------------------ dry run

_METADATA_DIRS = ("_metadata", "_stateSchema")


def scratch_copy(info: CheckpointInfo, storage: ControlStorage, dest: str) -> int:
    """Copy only the metadata a restart check needs into ``dest``; return the number of files copied."""
    root = info.location
    wanted = ["metadata"]
    for batch in {info.last_committed_batch, info.last_planned_batch, (info.last_committed_batch or 0) - 1}:
        if batch is not None and batch >= 0:
            wanted += [f"offsets/{batch}", f"commits/{batch}"]
    copied = 0

    def copy(rel: str) -> None:
        nonlocal copied
        data = storage.read_bytes(f"{root}/{rel}")
        if data is None:
            return
        target = os.path.join(dest, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as fh:
            fh.write(data)
        copied += 1

    def copy_tree(rel: str) -> None:
        for name in storage.list_dir(f"{root}/{rel}"):
            child = f"{rel}/{name}"
            if storage.list_dir(f"{root}/{child}"):
                copy_tree(child)
            else:
                copy(child)

    for rel in wanted:
        copy(rel)
    for op in storage.list_dir(f"{root}/state"):
        for sub in storage.list_dir(f"{root}/state/{op}"):
            if sub in _METADATA_DIRS:
                copy_tree(f"state/{op}/{sub}")
            elif sub.isdigit():
                for name in storage.list_dir(f"{root}/state/{op}/{sub}/_metadata"):
                    copy(f"state/{op}/{sub}/_metadata/{name}")
                # A store other than "default" keeps its schema in its own directory (a 3.5 stream-stream
                # join: state/<op>/<part>/left-keyToNumValues/_metadata/schema); 4.x uses _stateSchema.
                # Schemas are written for partition 0 only; data files have a dot in their names.
                for store in storage.list_dir(f"{root}/state/{op}/{sub}") if sub == "0" else ():
                    if store != "_metadata" and "." not in store:
                        for name in storage.list_dir(f"{root}/state/{op}/{sub}/{store}/_metadata"):
                            copy(f"state/{op}/{sub}/{store}/_metadata/{name}")
    return copied


def spark_dry_run(spark: Any, plan_df: Any, output_mode: str, info: CheckpointInfo,
                  storage: ControlStorage) -> DryRunResult:
    """Plan the candidate's next batch against a scratch copy of the checkpoint's metadata."""
    started = time.monotonic()
    version = spark_adapter.spark_version(spark)
    if info.latest_offsets is None or info.last_committed_batch is None:
        return DryRunResult("passed", None, "nothing committed yet: a restart starts from scratch", 0.0, version)
    scratch = tempfile.mkdtemp(prefix="airflow-streaming-dryrun-")
    saved_conf: dict[str, str | None] = {}
    try:
        scratch_copy(info, storage, scratch)
        offsets = info.latest_offsets
        # Spark restores these confs from the checkpoint before planning; do the same.
        for key, value in offsets.conf.items():
            try:
                saved_conf[key] = spark.conf.get(key, None)
                spark.conf.set(key, value)
            except Exception:  # noqa: BLE001 - a conf this Spark does not know
                saved_conf.pop(key, None)
        spark_adapter.read_logs(spark, scratch)  # the logs this Spark would read first (format versions)
        watermark = info.latest_commit.next_batch_watermark_ms if info.latest_commit else offsets.batch_watermark_ms
        batch = info.next_batch_id
        current = spark_adapter.offset_metadata_json(watermark, int(time.time() * 1000), offsets.conf)
        previous = spark_adapter.offset_metadata_json(offsets.batch_watermark_ms, offsets.batch_timestamp_ms, offsets.conf)
        spark_adapter.plan_incrementally(spark, plan_df, output_mode, os.path.join(scratch, "state"),
                                         info.query_id, batch, current, previous)
        return DryRunResult("passed", None, None, time.monotonic() - started, version)
    except spark_adapter.SparkPlanningError as exc:
        return DryRunResult("rejected", exc.error_class, exc.message[:2000], time.monotonic() - started, version)
    except spark_adapter.DryRunUnsupported as exc:
        return DryRunResult("unsupported", None, str(exc), time.monotonic() - started, version)
    except Exception as exc:  # noqa: BLE001 - report, never pass silently
        return DryRunResult("error", type(exc).__name__, str(exc)[:2000], time.monotonic() - started, version)
    finally:
        for key, value in saved_conf.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)
        shutil.rmtree(scratch, ignore_errors=True)


# ------------------------------------------------------------------------------------ check


def check_compatibility(
    spark: Any,
    checkpoint: str,
    application: str,
    application_args: list[str],
    *,
    spark_conf: dict[str, str] | None = None,
    stream: str = "candidate",
    trigger_seconds: float = 5.0,
    dry_run: bool = True,
    storage_conn_id: str | None = None,
    resolve: Callable[[str], tuple[ControlStorage, str]] | None = None,
) -> CompatibilityReport:
    """Check whether ``application`` (bundled job or script) may restart on ``checkpoint``.

    How the checkpoint and the file sink's log are read: ``resolve(location) -> (storage, path)``;
    by default the Airflow side's :func:`storage_for` (``storage_conn_id``: the Airflow webhdfs
    connection for an ``hdfs://`` checkpoint). Inside a driver, the driver's own storage (the JVM's
    Hadoop FileSystem for ``hdfs://``): ``spark_jobs.runtime.hadoop_storage.driver_storage``."""
    from airflow_streaming.compat.candidate import capture_query, plan_candidate

    started = time.monotonic()
    resolve = resolve or (lambda location: storage_for(location, storage_conn_id))
    storage, root = resolve(checkpoint)
    info = read_checkpoint(root, storage)
    for key, value in (spark_conf or {}).items():
        # Only runtime (SQL) confs shape the plan; static/core ones (spark.ui.enabled, memory...) cannot
        # be set on a running session and do not matter to the check.
        if spark.conf.isModifiable(key):
            spark.conf.set(key, value)
    captured = capture_query(spark, application, list(application_args), stream, checkpoint, trigger_seconds)
    plan = plan_candidate(spark, captured, application)
    cand = CandidateFacts(
        application=application,
        sources=tuple(SourceFacts(s.index, s.kind, s.path) for s in plan.sources),
        sink=SinkFacts(plan.sink.format, plan.sink.path, plan.sink.output_mode,
                       _sink_committed_batch(plan.sink.path, resolve)),
        conf=plan.conf,
        operators=tuple(dataclasses.replace(operator_facts(op), key_expressions=tuple(plan.key_expressions.get(op.id, ())))
                        for op in plan.operators),
        trigger=plan.sink.trigger,
        spark_version=plan.spark_version,
    )
    ckpt = checkpoint_facts(info)
    result = spark_dry_run(spark, captured.df, captured.output_mode, info, storage) if dry_run else None
    if result is not None and result.status == "passed" and not plan.state_checked_in_planning:
        result = dataclasses.replace(result, status="partial", message=(
            f"Spark {result.spark_version} plans a batch without checking state: it checks a state schema only "
            "when a batch runs, so a changed state schema was not looked for here (source checks ran)"))
    verdict, findings = rules.evaluate(ckpt, cand, result)
    notes = list(info.notes)
    return CompatibilityReport(
        verdict=verdict, findings=findings,
        checkpoint={"location": info.location, "query_id": info.query_id, "last_committed": info.last_committed_batch,
                    "clean": info.clean, "operators": [op.name for op in info.operators],
                    "sources": [s.kind for s in info.sources], "conf": info.conf},
        candidate={**plan.to_dict(), "sink_committed_batch": cand.sink.committed_batch},
        dry_run=result, seconds=time.monotonic() - started, notes=notes,
    )
