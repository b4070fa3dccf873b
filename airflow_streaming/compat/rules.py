"""Spark's "Recovery Semantics after Changes in a Streaming Query", as rules over plain facts.

Each rule compares what the checkpoint recorded with what the candidate would run and returns
findings naming the rule and showing both sides. The verdict is INCOMPATIBLE if any finding is,
COMPATIBLE_WITH_WARNINGS if any warns, else COMPATIBLE. A rule that cannot see one side says so
rather than passing silently.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Iterable

from airflow_streaming.compat.model import (
    CandidateFacts,
    CheckpointFacts,
    DryRunResult,
    Finding,
    OperatorFacts,
    Severity,
    Verdict,
)

#: Conf Spark restores from the checkpoint on restart, overriding the session (WARN only in Spark).
OVERRIDDEN_CONF = {
    "spark.sql.shuffle.partitions": "the number of state partitions is fixed by the checkpoint",
    "spark.sql.streaming.stateStore.providerClass": "the state store provider is fixed by the checkpoint",
}
FILE_SOURCE_KINDS = {"file", "text", "json", "csv", "parquet", "orc", "avro", "binaryfile"}
FILE_SINK_FORMATS = {"parquet", "json", "csv", "text", "orc", "avro"}

Rule = Callable[[CheckpointFacts, CandidateFacts], Iterable[Finding]]


def normalize_path(path: str | None) -> str | None:
    """``file:///a/b/``, ``file:/a/b`` and ``/a/b`` are the same local path."""
    if not path:
        return None
    for prefix in ("file://", "file:"):
        if path.startswith(prefix):
            path = path[len(prefix):]
            break
    return posixpath.normpath(path)


def _kind_family(kind: str | None) -> str | None:
    if kind is None:
        return None
    return "file" if kind.lower() in FILE_SOURCE_KINDS else kind.lower()


def rule_source_count(ckpt: CheckpointFacts, cand: CandidateFacts) -> Iterable[Finding]:
    if ckpt.last_planned is None:
        return  # nothing was ever planned: no offsets to match
    if len(ckpt.sources) != len(cand.sources):
        yield Finding("SOURCE_COUNT", Severity.INCOMPATIBLE,
                      f"the checkpoint's offsets log has {len(ckpt.sources)} source(s), the candidate reads "
                      f"{len(cand.sources)}: changing the number of sources is not allowed",
                      len(ckpt.sources), len(cand.sources))


def rule_source_kind_and_path(ckpt: CheckpointFacts, cand: CandidateFacts) -> Iterable[Finding]:
    for old, new in zip(ckpt.sources, cand.sources):
        old_family, new_family = _kind_family(old.kind), _kind_family(new.kind)
        if old_family and new_family and old_family != new_family:
            yield Finding("SOURCE_TYPE", Severity.INCOMPATIBLE,
                          f"source {old.index} changed from {old.kind} to {new.kind}: the type of a source "
                          "cannot change", old.kind, new.kind)
        elif old_family == "file" and old.path and new.path and normalize_path(old.path) != normalize_path(new.path):
            yield Finding("FILE_SOURCE_PATH", Severity.INCOMPATIBLE,
                          f"file source {old.index} read {old.path}, the candidate reads {new.path}: a file "
                          "source's path cannot change (Spark fails with 'Wrong basePath')", old.path, new.path)
        elif old_family == "file" and old.path is None and new.path:
            yield Finding("FILE_SOURCE_PATH", Severity.INFO,
                          f"file source {old.index}: the checkpoint has no file yet to compare its path with",
                          None, new.path)


#: The name of an operator whose checkpoint has no operator metadata (written before Spark 4.0).
UNKNOWN_OPERATOR = "unknown"


def _ops(ops: Iterable[OperatorFacts]) -> list[tuple[int, str]]:
    return sorted((op.operator_id, op.name) for op in ops)


def _same_operator(old: OperatorFacts, new: OperatorFacts) -> bool:
    """Same id and name; a checkpoint without operator metadata (Spark 3.5) names none, so its id decides."""
    return old.operator_id == new.operator_id and (old.name == new.name or UNKNOWN_OPERATOR in (old.name, new.name))


def rule_stateful_operators(ckpt: CheckpointFacts, cand: CandidateFacts) -> Iterable[Finding]:
    if ckpt.last_committed is None:
        return
    old, new = _ops(ckpt.operators), _ops(cand.operators)
    unnamed = [op for op in ckpt.operators if op.name == UNKNOWN_OPERATOR]
    if old != new and unnamed and len(ckpt.operators) == len(cand.operators) and all(
            _same_operator(o, n) for o, n in zip(sorted(ckpt.operators, key=lambda op: op.operator_id),
                                                 sorted(cand.operators, key=lambda op: op.operator_id))):
        yield Finding("STATEFUL_OPERATORS", Severity.INFO,
                      f"the checkpoint records no operator names (no operator metadata: written before Spark 4.0); "
                      f"its operator ids {[op.operator_id for op in ckpt.operators]} match the candidate's "
                      f"{new}, and their state schemas are compared below", old, new)
        return
    if old != new:
        what = ("added to a stateless query" if not old else "removed" if not new else "changed")
        yield Finding("STATEFUL_OPERATORS", Severity.INCOMPATIBLE,
                      f"stateful operators {what}: the checkpoint has {old or 'none'}, the candidate plans "
                      f"{new or 'none'} (Spark: STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA, or "
                      "missing state at the first batch)", old, new)


def _schema_findings(rule: str, op: int, old, new) -> Iterable[Finding]:
    if old is None or new is None:
        yield Finding(rule, Severity.WARNING, f"operator {op}: state schema not readable on one side; cannot compare",
                      None if old is None else [f.__dict__ for f in old], None if new is None else [f.__dict__ for f in new])
        return
    old_types, new_types = [f.type for f in old], [f.type for f in new]
    show_old, show_new = [f"{f.name}: {f.type}" for f in old], [f"{f.name}: {f.type}" for f in new]
    what = "key" if "KEY" in rule else "value"
    if old_types != new_types:
        yield Finding(rule, Severity.INCOMPATIBLE,
                      f"operator {op}: the state {what} schema changed (Spark: STATE_STORE_{what.upper()}_SCHEMA_"
                      "NOT_COMPATIBLE)", show_old, show_new)
    elif [f.name for f in old] != [f.name for f in new]:
        yield Finding(rule, Severity.WARNING,
                      f"operator {op}: state {what} columns renamed with the same types; Spark ignores names and "
                      "accepts this, but swapped columns of the same type would silently mix state",
                      show_old, show_new)


def rule_state_schemas(ckpt: CheckpointFacts, cand: CandidateFacts) -> Iterable[Finding]:
    new_by_id = {op.operator_id: op for op in cand.operators}
    for old in ckpt.operators:
        new = new_by_id.get(old.operator_id)
        if new is None or not _same_operator(old, new):
            continue  # reported by rule_stateful_operators
        yield from _schema_findings("STATE_KEY_SCHEMA", old.operator_id, old.key_fields, new.key_fields)
        yield from _schema_findings("STATE_VALUE_SCHEMA", old.operator_id, old.value_fields, new.value_fields)


_GENERIC_FIELD = re.compile(r"^(.*\.)?field\d+$")


def rule_unverifiable_keys(ckpt: CheckpointFacts, cand: CandidateFacts) -> Iterable[Finding]:
    """Join state stores its keys as ``field0, field1...``: a change of join key to columns of the same
    types passes every schema check and Spark accepts it, silently mismatching old state."""
    new_by_id = {op.operator_id: op for op in cand.operators}
    for old in ckpt.operators:
        new = new_by_id.get(old.operator_id)
        if new is None or not _same_operator(old, new) or not old.key_fields:
            continue
        if any(_GENERIC_FIELD.match(f.name) for f in old.key_fields):
            yield Finding("STATE_KEYS_NOT_RECORDED", Severity.WARNING,
                          f"operator {old.operator_id} ({old.name}) stores its keys without column names, so a "
                          "change of key columns with the same types cannot be seen in the checkpoint and Spark "
                          "accepts it silently: confirm the candidate's keys are the ones the state was built with",
                          [f"{f.name}: {f.type}" for f in old.key_fields], list(new.key_expressions) or None)


def rule_overridden_conf(ckpt: CheckpointFacts, cand: CandidateFacts) -> Iterable[Finding]:
    for key, why in OVERRIDDEN_CONF.items():
        old, new = ckpt.conf.get(key), cand.conf.get(key)
        if old is not None and new is not None and str(old) != str(new):
            yield Finding("CONF_OVERRIDDEN_BY_CHECKPOINT", Severity.WARNING,
                          f"{key}: the candidate sets {new} but the checkpoint recorded {old}; {why}, so the new "
                          f"value will be ignored (Spark only logs a warning)", old, new)


def rule_file_sink_path(ckpt: CheckpointFacts, cand: CandidateFacts) -> Iterable[Finding]:
    sink = cand.sink
    if (sink.format or "").lower() not in FILE_SINK_FORMATS or not sink.path or ckpt.last_committed is None:
        return
    if sink.committed_batch is None:
        yield Finding("FILE_SINK_PATH", Severity.INCOMPATIBLE,
                      f"the candidate's file sink {sink.path} has no _spark_metadata log although the checkpoint "
                      f"committed batches up to {ckpt.last_committed}: the sink path changed (or its output was "
                      "deleted); Spark fails with BATCH_METADATA_NOT_FOUND at the next compaction",
                      ckpt.last_committed, sink.path)
    elif sink.committed_batch < ckpt.last_committed:
        yield Finding("FILE_SINK_PATH", Severity.INCOMPATIBLE,
                      f"the file sink {sink.path} logged batches up to {sink.committed_batch} but the checkpoint "
                      f"committed {ckpt.last_committed}: this sink belongs to another query or checkpoint",
                      ckpt.last_committed, sink.committed_batch)


def rule_trigger(ckpt: CheckpointFacts, cand: CandidateFacts) -> Iterable[Finding]:
    if cand.trigger:
        yield Finding("TRIGGER", Severity.INFO, "trigger settings are not recorded in the checkpoint and may change",
                      None, cand.trigger)


def _line(version: str | None) -> tuple[int, int] | None:
    """``"3.5.7"`` -> ``(3, 5)``; ``None`` when not a version."""
    parts = (version or "").split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (ValueError, IndexError):
        return None


def rule_spark_runtime(ckpt: CheckpointFacts, cand: CandidateFacts) -> Iterable[Finding]:
    """What a checkpoint's own files say about the Spark that wrote it, against the candidate's Spark.

    A checkpoint records no Spark version, but some files exist only from a line on: operator metadata
    (``state/<op>/_metadata``) from 4.0; a commit log v2 (``stateStore.checkpointFormatVersion=2``) from 4.0
    - and Spark 3.5 refuses it (measured: ``IllegalStateException: UnsupportedLogVersion: maximum supported
    log version is v1, but encountered v2``); an offsets log v2 from 4.2 (older lines' log reader accepts v1
    only)."""
    line = _line(cand.spark_version)
    if line is None or ckpt.last_committed is None:
        return
    unreadable = []
    if ckpt.commit_log_version and ckpt.commit_log_version >= 2 and line < (4, 0):
        unreadable.append(f"commit log v{ckpt.commit_log_version} (stateStore.checkpointFormatVersion=2, Spark 4.0+)")
    if ckpt.offsets_log_version and ckpt.offsets_log_version >= 2 and line < (4, 2):
        unreadable.append(f"offsets log v{ckpt.offsets_log_version} (Spark 4.2+)")
    if unreadable:
        yield Finding("SPARK_DOWNGRADE", Severity.INCOMPATIBLE,
                      f"the checkpoint was written by a newer Spark in a format Spark {cand.spark_version} cannot read: "
                      f"{'; '.join(unreadable)} (Spark fails with UnsupportedLogVersion ... 'produced by a newer "
                      "version of Spark and cannot be read by this version')", "; ".join(unreadable), cand.spark_version)
    elif ckpt.operator_metadata_versions and line < (4, 0):
        yield Finding("SPARK_DOWNGRADE", Severity.WARNING,
                      f"the checkpoint has operator metadata (v{', v'.join(map(str, ckpt.operator_metadata_versions))}), "
                      f"which only Spark 4.0+ writes, and the candidate runs Spark {cand.spark_version}: a downgrade. "
                      "Spark 3.5 ignores that metadata (aggregation, dropDuplicates and stream-stream join state were "
                      "measured to resume), but it checks state schemas only when a batch runs",
                      "Spark 4.0+", cand.spark_version)


RULES: tuple[Rule, ...] = (
    rule_source_count,
    rule_source_kind_and_path,
    rule_stateful_operators,
    rule_state_schemas,
    rule_unverifiable_keys,
    rule_overridden_conf,
    rule_file_sink_path,
    rule_spark_runtime,
    rule_trigger,
)


def dry_run_findings(result: DryRunResult | None) -> list[Finding]:
    if result is None:
        return [Finding("SPARK_DRY_RUN", Severity.WARNING, "Spark's own restart checks were not run (dry run skipped)")]
    if result.status == "passed":
        return [Finding("SPARK_DRY_RUN", Severity.INFO,
                        f"Spark {result.spark_version} planned the candidate's next batch against the checkpoint's "
                        "metadata without error" + (f" ({result.seconds:.1f}s)" if result.seconds is not None else ""))]
    if result.status == "partial":
        return [Finding("SPARK_DRY_RUN", Severity.WARNING, f"Spark's restart checks ran only in part: {result.message}",
                        None, result.spark_version)]
    if result.status == "rejected":
        return [Finding("SPARK_DRY_RUN", Severity.INCOMPATIBLE,
                        f"Spark rejected the candidate: [{result.error_class}] {result.message}",
                        None, result.error_class)]
    return [Finding("SPARK_DRY_RUN", Severity.WARNING,
                    f"Spark's own restart checks could not run ({result.status}): {result.message}")]


def evaluate(ckpt: CheckpointFacts, cand: CandidateFacts, dry_run: DryRunResult | None) -> tuple[Verdict, list[Finding]]:
    findings = [f for rule in RULES for f in rule(ckpt, cand)] + dry_run_findings(dry_run)
    severities = {f.severity for f in findings}
    if Severity.INCOMPATIBLE in severities:
        return Verdict.INCOMPATIBLE, findings
    if Severity.WARNING in severities:
        return Verdict.COMPATIBLE_WITH_WARNINGS, findings
    return Verdict.COMPATIBLE, findings
