"""Pure unit tests of the compatibility rules (no Spark, no Airflow).

Every test builds the plain facts a rule compares (or the checkpoint reader's dataclasses that
``check.operator_facts`` / ``check.checkpoint_facts`` reduce) by hand. The change pairs they stand
for are the real ones of tests/integration/compat_corpus.py.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_streaming.checkpoint.batches import BatchPosition
from airflow_streaming.checkpoint.reader import CheckpointInfo, OffsetsInfo, OperatorInfo, SourceInfo, StoreInfo
from airflow_streaming.compat import rules
from airflow_streaming.compat.check import checkpoint_facts, file_sink_committed_batch, operator_facts
from airflow_streaming.compat.model import (
    CandidateFacts,
    CheckpointFacts,
    DryRunResult,
    Field,
    Finding,
    OperatorFacts,
    Severity,
    SinkFacts,
    SourceFacts,
    Verdict,
)

SHUFFLE = "spark.sql.shuffle.partitions"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


# ------------------------------------------------------------------------------------ builders


def fields(*pairs: tuple[str, str]) -> tuple[Field, ...]:
    return tuple(Field(n, t) for n, t in pairs)


def op(operator_id: int = 0, name: str = "stateStoreSave", key=(("device_id", "string"),),
       value=(("count", "long"),), key_expressions: tuple[str, ...] = ()) -> OperatorFacts:
    return OperatorFacts(operator_id, name, None if key is None else fields(*key),
                         None if value is None else fields(*value), 2, key_expressions)


def ckpt(**kw) -> CheckpointFacts:
    base = dict(location="/ckpt", query_id="q-1", sources=(SourceFacts(0, "file", "file:///data/src"),),
                conf={}, operators=(), last_committed=3, last_planned=3)
    base.update(kw)
    return CheckpointFacts(**base)


def cand(**kw) -> CandidateFacts:
    base = dict(application="job.py", sources=(SourceFacts(0, "json", "/data/src"),),
                sink=SinkFacts("noop", None, "append"), conf={}, operators=())
    base.update(kw)
    return CandidateFacts(**base)


def run(rule, c: CheckpointFacts, n: CandidateFacts) -> list[Finding]:
    return list(rule(c, n))


def only(findings: list[Finding]) -> Finding:
    assert len(findings) == 1, findings
    return findings[0]


def schema(*pairs: tuple[str, object]) -> dict:
    return {"type": "struct",
            "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in pairs]}


def store(name: str, key: dict | None, value: dict | None) -> StoreInfo:
    return StoreInfo(name=name, num_partitions=2, num_cols_prefix_key=0,
                     schema_file=None if key is None else f"state/0/0/{name}/_metadata/schema",
                     schema_version=None if key is None else 2, key_schema=key, value_schema=value)


def op_info(stores: list[StoreInfo], key: dict | None, value: dict | None, name: str | None = "stateStoreSave",
            op_id: int = 0) -> OperatorInfo:
    return OperatorInfo(id=op_id, name=name, metadata_file=None, metadata_version=1, num_partitions=2,
                        store_names=[s.name for s in stores], stores=stores, key_schema=key, value_schema=value,
                        schema_version=2)


# ------------------------------------------------------------------------------------ normalize_path


@pytest.mark.parametrize("path", ["file:///a/b/", "file:/a/b", "/a/b", "/a/b/", "file:///a/./b", "/a/c/../b"])
def test_normalize_path_equates_local_spellings(path):
    assert rules.normalize_path(path) == "/a/b"


@pytest.mark.parametrize("path", [None, ""])
def test_normalize_path_of_nothing_is_none(path):
    assert rules.normalize_path(path) is None


# ------------------------------------------------------------------------------------ rule_source_count


def test_source_count_equal_gives_nothing():
    assert run(rules.rule_source_count, ckpt(), cand()) == []


def test_source_count_differs_is_incompatible_showing_both_counts():
    two = (SourceFacts(0, "json", "/data/src"), SourceFacts(1, "json", "/data/src2"))
    f = only(run(rules.rule_source_count, ckpt(), cand(sources=two)))
    assert (f.rule, f.severity) == ("SOURCE_COUNT", Severity.INCOMPATIBLE)
    assert (f.checkpoint, f.candidate) == (1, 2)
    assert "1 source" in f.message and "reads 2" in f.message


def test_source_count_ignored_when_nothing_was_planned():
    two = (SourceFacts(0, "json", "/data/src"), SourceFacts(1, "json", "/data/src2"))
    assert run(rules.rule_source_count, ckpt(last_planned=None, last_committed=None), cand(sources=two)) == []


# ------------------------------------------------------------------------------------ rule_source_kind_and_path


@pytest.mark.parametrize("kind", ["text", "json", "parquet", "csv", "file", "JSON"])
def test_file_formats_are_one_source_family(kind):
    c = ckpt(sources=(SourceFacts(0, "file", "/data/src"),))
    n = cand(sources=(SourceFacts(0, kind, "/data/src"),))
    assert run(rules.rule_source_kind_and_path, c, n) == []


def test_json_to_text_is_not_a_source_type_change():
    c = ckpt(sources=(SourceFacts(0, "json", "/data/src"),))
    n = cand(sources=(SourceFacts(0, "text", "/data/src"),))
    assert run(rules.rule_source_kind_and_path, c, n) == []


def test_file_to_kafka_is_a_source_type_change():
    c = ckpt(sources=(SourceFacts(0, "file", "/data/src"),))
    n = cand(sources=(SourceFacts(0, "kafka", None),))
    f = only(run(rules.rule_source_kind_and_path, c, n))
    assert (f.rule, f.severity) == ("SOURCE_TYPE", Severity.INCOMPATIBLE)
    assert (f.checkpoint, f.candidate) == ("file", "kafka")


@pytest.mark.parametrize("ckpt_path", ["file:///data/src/", "file:/data/src", "/data/src"])
@pytest.mark.parametrize("cand_path", ["file:///data/src/", "file:/data/src", "/data/src"])
def test_file_source_path_spellings_compare_equal(ckpt_path, cand_path):
    c = ckpt(sources=(SourceFacts(0, "file", ckpt_path),))
    n = cand(sources=(SourceFacts(0, "json", cand_path),))
    assert run(rules.rule_source_kind_and_path, c, n) == []


def test_file_source_path_changed_is_incompatible_with_both_sides():
    c = ckpt(sources=(SourceFacts(0, "file", "file:///data/src"),))
    n = cand(sources=(SourceFacts(0, "json", "/data/src2"),))
    f = only(run(rules.rule_source_kind_and_path, c, n))
    assert (f.rule, f.severity) == ("FILE_SOURCE_PATH", Severity.INCOMPATIBLE)
    assert (f.checkpoint, f.candidate) == ("file:///data/src", "/data/src2")
    assert "file:///data/src" in f.message and "/data/src2" in f.message


def test_file_source_path_unknown_in_checkpoint_is_info():
    c = ckpt(sources=(SourceFacts(0, "file", None),))
    n = cand(sources=(SourceFacts(0, "json", "/data/src"),))
    f = only(run(rules.rule_source_kind_and_path, c, n))
    assert (f.rule, f.severity) == ("FILE_SOURCE_PATH", Severity.INFO)
    assert (f.checkpoint, f.candidate) == (None, "/data/src")


def test_source_kind_compared_index_by_index():
    c = ckpt(sources=(SourceFacts(0, "file", "/a"), SourceFacts(1, "kafka", None)))
    n = cand(sources=(SourceFacts(0, "json", "/a"), SourceFacts(1, "rate", None)))
    f = only(run(rules.rule_source_kind_and_path, c, n))
    assert f.rule == "SOURCE_TYPE" and "source 1" in f.message
    assert (f.checkpoint, f.candidate) == ("kafka", "rate")


# ------------------------------------------------------------------------------------ rule_stateful_operators


def test_same_stateful_operators_give_nothing():
    ops = (op(0, "stateStoreSave"), op(1, "dedupe"))
    assert run(rules.rule_stateful_operators, ckpt(operators=ops), cand(operators=tuple(reversed(ops)))) == []


def test_operator_added_to_stateless_query_is_incompatible():
    f = only(run(rules.rule_stateful_operators, ckpt(operators=()), cand(operators=(op(0, "dedupe"),))))
    assert (f.rule, f.severity) == ("STATEFUL_OPERATORS", Severity.INCOMPATIBLE)
    assert "added to a stateless query" in f.message
    assert (f.checkpoint, f.candidate) == ([], [(0, "dedupe")])


def test_operator_removed_is_incompatible():
    f = only(run(rules.rule_stateful_operators, ckpt(operators=(op(0, "dedupe"),)), cand(operators=())))
    assert (f.rule, f.severity) == ("STATEFUL_OPERATORS", Severity.INCOMPATIBLE)
    assert "removed" in f.message
    assert (f.checkpoint, f.candidate) == ([(0, "dedupe")], [])


def test_unnamed_operators_of_a_spark_35_checkpoint_compare_by_id_only():
    """Spark before 4.0 writes no operator metadata: the checkpoint's names are unknown, and Spark 4 resumes it."""
    f = only(run(rules.rule_stateful_operators, ckpt(operators=(op(0, "unknown"),)),
                 cand(operators=(op(0, "stateStoreSave"),))))
    assert (f.rule, f.severity) == ("STATEFUL_OPERATORS", Severity.INFO)
    assert "written before Spark 4.0" in f.message


def test_unnamed_operators_still_refuse_a_changed_operator_count():
    f = only(run(rules.rule_stateful_operators, ckpt(operators=(op(0, "unknown"),)),
                 cand(operators=(op(0, "stateStoreSave"), op(1, "dedupe")))))
    assert (f.rule, f.severity) == ("STATEFUL_OPERATORS", Severity.INCOMPATIBLE)


def test_operator_name_changed_is_incompatible():
    f = only(run(rules.rule_stateful_operators, ckpt(operators=(op(0, "dedupe"),)),
                 cand(operators=(op(0, "stateStoreSave"),))))
    assert f.severity == Severity.INCOMPATIBLE
    assert "changed" in f.message
    assert (f.checkpoint, f.candidate) == ([(0, "dedupe")], [(0, "stateStoreSave")])


def test_operators_ignored_when_nothing_committed():
    c = ckpt(operators=(), last_committed=None, last_planned=0)
    assert run(rules.rule_stateful_operators, c, cand(operators=(op(0, "dedupe"),))) == []


# ------------------------------------------------------------------------------------ rule_state_schemas


def test_identical_state_schemas_give_nothing():
    assert run(rules.rule_state_schemas, ckpt(operators=(op(),)), cand(operators=(op(),))) == []


def test_key_type_change_is_incompatible_state_key_schema():
    c = ckpt(operators=(op(key=(("device_id", "string"),)),))
    n = cand(operators=(op(key=(("device_id", "double"),)),))
    f = only(run(rules.rule_state_schemas, c, n))
    assert (f.rule, f.severity) == ("STATE_KEY_SCHEMA", Severity.INCOMPATIBLE)
    assert (f.checkpoint, f.candidate) == (["device_id: string"], ["device_id: double"])
    assert "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in f.message


def test_key_field_added_is_incompatible_state_key_schema():
    c = ckpt(operators=(op(key=(("device_id", "string"),)),))
    n = cand(operators=(op(key=(("device_id", "string"), ("event_type", "string"))),))
    f = only(run(rules.rule_state_schemas, c, n))
    assert (f.rule, f.severity) == ("STATE_KEY_SCHEMA", Severity.INCOMPATIBLE)


def test_value_field_added_is_incompatible_state_value_schema():
    c = ckpt(operators=(op(value=(("count", "long"),)),))
    n = cand(operators=(op(value=(("count", "long"), ("sum", "double"))),))
    f = only(run(rules.rule_state_schemas, c, n))
    assert (f.rule, f.severity) == ("STATE_VALUE_SCHEMA", Severity.INCOMPATIBLE)
    assert f.candidate == ["count: long", "sum: double"]
    assert "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in f.message


def test_key_rename_only_is_a_warning():
    c = ckpt(operators=(op(key=(("device_id", "string"),)),))
    n = cand(operators=(op(key=(("dev", "string"),)),))
    f = only(run(rules.rule_state_schemas, c, n))
    assert (f.rule, f.severity) == ("STATE_KEY_SCHEMA", Severity.WARNING)
    assert (f.checkpoint, f.candidate) == (["device_id: string"], ["dev: string"])
    assert "renamed" in f.message


@pytest.mark.parametrize("side", ["checkpoint", "candidate"])
@pytest.mark.parametrize("part,rule", [("key", "STATE_KEY_SCHEMA"), ("value", "STATE_VALUE_SCHEMA")])
def test_unreadable_state_schema_warns(side, part, rule):
    unreadable = op(**{part: None})
    c = ckpt(operators=(unreadable if side == "checkpoint" else op(),))
    n = cand(operators=(unreadable if side == "candidate" else op(),))
    f = only(run(rules.rule_state_schemas, c, n))
    assert (f.rule, f.severity) == (rule, Severity.WARNING)
    assert "not readable" in f.message
    assert (f.checkpoint if side == "checkpoint" else f.candidate) is None


def test_state_schemas_skip_operators_whose_name_changed():
    c = ckpt(operators=(op(0, "dedupe", key=(("a", "string"),)),))
    n = cand(operators=(op(0, "stateStoreSave", key=(("a", "long"),)),))
    assert run(rules.rule_state_schemas, c, n) == []  # rule_stateful_operators reports it


# ------------------------------------------------------------------------------------ rule_unverifiable_keys


@pytest.mark.parametrize("key", [
    (("field0", "string"),),
    (("field0", "string"), ("field1", "long")),
    (("left-keyToNumValues.field0", "string"), ("right-keyToNumValues.field0", "string")),
])
def test_generic_join_keys_warn_with_candidate_key_expressions(key):
    c = ckpt(operators=(op(0, "symmetricHashJoin", key=key),))
    n = cand(operators=(op(0, "symmetricHashJoin", key=key, key_expressions=("device_id", "event_type")),))
    f = only(run(rules.rule_unverifiable_keys, c, n))
    assert (f.rule, f.severity) == ("STATE_KEYS_NOT_RECORDED", Severity.WARNING)
    assert f.checkpoint == [f"{name}: {t}" for name, t in key]
    assert f.candidate == ["device_id", "event_type"]


def test_generic_keys_without_candidate_expressions_show_none():
    c = ckpt(operators=(op(0, "symmetricHashJoin", key=(("field0", "string"),)),))
    n = cand(operators=(op(0, "symmetricHashJoin", key=(("field0", "string"),)),))
    assert only(run(rules.rule_unverifiable_keys, c, n)).candidate is None


def test_any_unnamed_key_column_warns():
    key = (("field0", "string"), ("device_id", "string"))
    c = ckpt(operators=(op(key=key),))
    n = cand(operators=(op(key=key, key_expressions=("device_id",)),))
    assert only(run(rules.rule_unverifiable_keys, c, n)).rule == "STATE_KEYS_NOT_RECORDED"


@pytest.mark.parametrize("key", [
    (("device_id", "string"),),
    (("myfield0", "string"),),
])
def test_named_keys_give_nothing(key):
    c = ckpt(operators=(op(key=key),))
    n = cand(operators=(op(key=key, key_expressions=("device_id",)),))
    assert run(rules.rule_unverifiable_keys, c, n) == []


def test_generic_keys_of_all_join_stores_warn():
    key = (("left-keyToNumValues.field0", "string"), ("left-keyWithIndexToValue.field0", "string"),
           ("left-keyWithIndexToValue.index", "long"), ("right-keyToNumValues.field0", "string"),
           ("right-keyWithIndexToValue.field0", "string"), ("right-keyWithIndexToValue.index", "long"))
    c = ckpt(operators=(op(0, "symmetricHashJoin", key=key),))
    n = cand(operators=(op(0, "symmetricHashJoin", key=key, key_expressions=("device_id",)),))
    assert only(run(rules.rule_unverifiable_keys, c, n)).rule == "STATE_KEYS_NOT_RECORDED"


# ------------------------------------------------------------------------------------ rule_overridden_conf


def test_shuffle_partitions_changed_warns_new_value_ignored():
    f = only(run(rules.rule_overridden_conf, ckpt(conf={SHUFFLE: "2"}), cand(conf={SHUFFLE: "5"})))
    assert (f.rule, f.severity) == ("CONF_OVERRIDDEN_BY_CHECKPOINT", Severity.WARNING)
    assert (f.checkpoint, f.candidate) == ("2", "5")
    assert SHUFFLE in f.message and "will be ignored" in f.message


def test_state_provider_changed_warns():
    f = only(run(rules.rule_overridden_conf, ckpt(conf={PROVIDER: HDFS}), cand(conf={PROVIDER: ROCKSDB})))
    assert (f.rule, f.severity) == ("CONF_OVERRIDDEN_BY_CHECKPOINT", Severity.WARNING)
    assert (f.checkpoint, f.candidate) == (HDFS, ROCKSDB)


def test_same_overridden_conf_gives_nothing():
    conf = {SHUFFLE: "2", PROVIDER: HDFS}
    assert run(rules.rule_overridden_conf, ckpt(conf=dict(conf)), cand(conf=dict(conf))) == []


def test_overridden_conf_unset_in_candidate_gives_nothing():
    c = ckpt(conf={SHUFFLE: "2", PROVIDER: HDFS})
    assert run(rules.rule_overridden_conf, c, cand(conf={SHUFFLE: None, PROVIDER: None})) == []


def test_other_conf_changes_are_not_reported():
    c = ckpt(conf={"spark.sql.streaming.multipleWatermarkPolicy": "min"})
    n = cand(conf={"spark.sql.streaming.multipleWatermarkPolicy": "max"})
    assert run(rules.rule_overridden_conf, c, n) == []


# ------------------------------------------------------------------------------------ rule_file_sink_path


def test_file_sink_without_metadata_log_is_incompatible():
    n = cand(sink=SinkFacts("parquet", "/out_moved", "append", committed_batch=None))
    f = only(run(rules.rule_file_sink_path, ckpt(last_committed=3), n))
    assert (f.rule, f.severity) == ("FILE_SINK_PATH", Severity.INCOMPATIBLE)
    assert (f.checkpoint, f.candidate) == (3, "/out_moved")
    assert "_spark_metadata" in f.message


def test_file_sink_behind_checkpoint_is_incompatible():
    n = cand(sink=SinkFacts("parquet", "/out", "append", committed_batch=1))
    f = only(run(rules.rule_file_sink_path, ckpt(last_committed=3), n))
    assert (f.rule, f.severity) == ("FILE_SINK_PATH", Severity.INCOMPATIBLE)
    assert (f.checkpoint, f.candidate) == (3, 1)


@pytest.mark.parametrize("sink_batch", [3, 4])
def test_file_sink_at_or_past_checkpoint_gives_nothing(sink_batch):
    n = cand(sink=SinkFacts("parquet", "/out", "append", committed_batch=sink_batch))
    assert run(rules.rule_file_sink_path, ckpt(last_committed=3), n) == []


@pytest.mark.parametrize("fmt", ["foreachBatch", "noop", "console", "memory", None])
def test_non_file_sinks_give_nothing(fmt):
    n = cand(sink=SinkFacts(fmt, "/out", "append", committed_batch=None))
    assert run(rules.rule_file_sink_path, ckpt(last_committed=3), n) == []


def test_file_sink_ignored_when_checkpoint_committed_nothing():
    n = cand(sink=SinkFacts("parquet", "/out", "append", committed_batch=None))
    assert run(rules.rule_file_sink_path, ckpt(last_committed=None, last_planned=0), n) == []


@pytest.mark.parametrize("fmt", ["json", "CSV", "text", "orc"])
def test_every_file_sink_format_is_checked(fmt):
    n = cand(sink=SinkFacts(fmt, "/out", "append", committed_batch=None))
    assert only(run(rules.rule_file_sink_path, ckpt(last_committed=0), n)).rule == "FILE_SINK_PATH"


# ------------------------------------------------------------------------------------ dry_run_findings


def test_dry_run_not_run_warns():
    f = only(rules.dry_run_findings(None))
    assert (f.rule, f.severity) == ("SPARK_DRY_RUN", Severity.WARNING)


def test_dry_run_passed_is_info():
    f = only(rules.dry_run_findings(DryRunResult("passed", seconds=1.25, spark_version="4.2.0")))
    assert (f.rule, f.severity) == ("SPARK_DRY_RUN", Severity.INFO)
    assert "4.2.0" in f.message


def test_dry_run_passed_without_timing_is_info():
    assert only(rules.dry_run_findings(DryRunResult("passed"))).severity == Severity.INFO


def test_dry_run_rejected_is_incompatible_with_error_class():
    r = DryRunResult("rejected", "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE", "value schema differs", 2.0, "4.2.0")
    f = only(rules.dry_run_findings(r))
    assert (f.rule, f.severity) == ("SPARK_DRY_RUN", Severity.INCOMPATIBLE)
    assert f.candidate == "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE"
    assert "STATE_STORE_VALUE_SCHEMA_NOT_COMPATIBLE" in f.message and "value schema differs" in f.message


@pytest.mark.parametrize("status", ["unsupported", "error"])
def test_dry_run_unsupported_or_error_warns(status):
    f = only(rules.dry_run_findings(DryRunResult(status, None, "no IncrementalExecution", 0.1, "3.5.1")))
    assert (f.rule, f.severity) == ("SPARK_DRY_RUN", Severity.WARNING)
    assert status in f.message and "no IncrementalExecution" in f.message


# ------------------------------------------------------------------------------------ evaluate


PASSED = DryRunResult("passed", seconds=0.5, spark_version="4.2.0")


def test_evaluate_clean_is_compatible():
    verdict, findings = rules.evaluate(ckpt(), cand(), PASSED)
    assert verdict == Verdict.COMPATIBLE
    assert [f.severity for f in findings] == [Severity.INFO]


def test_evaluate_all_info_is_compatible():
    c = ckpt(sources=(SourceFacts(0, "file", None),))
    n = cand(sources=(SourceFacts(0, "json", "/data/src"),), trigger={"availableNow": True})
    verdict, findings = rules.evaluate(c, n, PASSED)
    assert verdict == Verdict.COMPATIBLE
    assert {f.rule for f in findings} == {"FILE_SOURCE_PATH", "TRIGGER", "SPARK_DRY_RUN"}
    assert {f.severity for f in findings} == {Severity.INFO}


def test_evaluate_skipped_dry_run_is_never_silently_compatible():
    verdict, findings = rules.evaluate(ckpt(), cand(), None)
    assert verdict == Verdict.COMPATIBLE_WITH_WARNINGS
    assert any(f.rule == "SPARK_DRY_RUN" for f in findings)


def test_evaluate_warning_gives_compatible_with_warnings():
    verdict, findings = rules.evaluate(ckpt(conf={SHUFFLE: "2"}), cand(conf={SHUFFLE: "5"}), PASSED)
    assert verdict == Verdict.COMPATIBLE_WITH_WARNINGS
    assert Severity.INCOMPATIBLE not in {f.severity for f in findings}


def test_evaluate_incompatible_wins_over_warnings():
    c = ckpt(conf={SHUFFLE: "2"})
    n = cand(conf={SHUFFLE: "5"}, sources=(SourceFacts(0, "json", "/data/src"), SourceFacts(1, "json", "/x")))
    verdict, findings = rules.evaluate(c, n, None)
    assert verdict == Verdict.INCOMPATIBLE
    assert {Severity.WARNING, Severity.INCOMPATIBLE} <= {f.severity for f in findings}


def test_evaluate_rejected_dry_run_alone_is_incompatible():
    rejected = DryRunResult("rejected", "SOME_CLASS", "boom", 0.1, "4.2.0")
    verdict, _ = rules.evaluate(ckpt(), cand(), rejected)
    assert verdict == Verdict.INCOMPATIBLE


# ------------------------------------------------------------------------------------ operator_facts


def test_single_store_operator_uses_its_own_schemas():
    key, value = schema(("key", "string")), schema(("count", "long"), ("sum", "long"))
    info = op_info([store("default", key, value)], key, value, name="stateStoreSave", op_id=3)
    facts = operator_facts(info)
    assert (facts.operator_id, facts.name, facts.num_partitions) == (3, "stateStoreSave", 2)
    assert facts.key_fields == fields(("key", "string"))
    assert facts.value_fields == fields(("count", "long"), ("sum", "long"))


def test_operator_without_name_is_unknown():
    key = schema(("key", "string"))
    assert operator_facts(op_info([store("default", key, key)], key, key, name=None)).name == "unknown"


def test_multi_store_operator_concatenates_stores_in_sorted_order_prefixed():
    stores = [
        store("right-keyToNumValues", schema(("field0", "string")), schema(("value", "long"))),
        store("left-keyWithIndexToValue", schema(("field0", "string"), ("index", "long")),
              schema(("lk", "string"), ("matched", "boolean"))),
        store("left-keyToNumValues", schema(("field0", "string")), schema(("value", "long"))),
        store("right-keyWithIndexToValue", None, None),  # unreadable store: skipped
    ]
    facts = operator_facts(op_info(stores, None, None, name="symmetricHashJoin"))
    assert facts.key_fields == fields(
        ("left-keyToNumValues.field0", "string"),
        ("left-keyWithIndexToValue.field0", "string"), ("left-keyWithIndexToValue.index", "long"),
        ("right-keyToNumValues.field0", "string"),
    )
    assert facts.value_fields == fields(
        ("left-keyToNumValues.value", "long"),
        ("left-keyWithIndexToValue.lk", "string"), ("left-keyWithIndexToValue.matched", "boolean"),
        ("right-keyToNumValues.value", "long"),
    )


def test_multi_store_operator_with_no_readable_store_has_no_schemas():
    facts = operator_facts(op_info([store("a", None, None), store("b", None, None)], None, None))
    assert (facts.key_fields, facts.value_fields) == (None, None)


def test_nested_struct_type_rendered_as_json_text():
    nested = {"type": "struct", "fields": [
        {"name": "start", "type": "timestamp", "nullable": True, "metadata": {}},
        {"name": "end", "type": "timestamp", "nullable": True, "metadata": {}}]}
    key = schema(("window", nested), ("device_id", "string"))
    value = schema(("count", "long"))
    facts = operator_facts(op_info([store("default", key, value)], key, value))
    window = facts.key_fields[0]
    assert window.name == "window"
    assert isinstance(window.type, str)
    assert json.loads(window.type) == nested
    assert window.type == json.dumps(nested, sort_keys=True)
    assert facts.key_fields[1] == Field("device_id", "string")


def test_nested_struct_rendering_is_order_insensitive_so_equal_types_compare_equal():
    a = {"type": "struct", "fields": [], "extra": 1}
    b = {"extra": 1, "fields": [], "type": "struct"}
    fa = operator_facts(op_info([store("default", schema(("k", a)), schema())], schema(("k", a)), schema()))
    fb = operator_facts(op_info([store("default", schema(("k", b)), schema())], schema(("k", b)), schema()))
    assert fa.key_fields == fb.key_fields


def test_join_buffered_row_schema_change_is_seen_through_operator_facts():
    def join(left_value: dict) -> OperatorInfo:
        stores = [
            store("left-keyToNumValues", schema(("field0", "string")), schema(("value", "long"))),
            store("left-keyWithIndexToValue", schema(("field0", "string"), ("index", "long")), left_value),
            store("right-keyToNumValues", schema(("field0", "string")), schema(("value", "long"))),
            store("right-keyWithIndexToValue", schema(("field0", "string"), ("index", "long")),
                  schema(("rk", "string"), ("matched", "boolean"))),
        ]
        # Exactly what reader._read_operators sets: the first store with a schema file is "main".
        return op_info(stores, stores[0].key_schema, stores[0].value_schema, name="symmetricHashJoin")

    old = operator_facts(join(schema(("lk", "string"), ("matched", "boolean"))))
    new = operator_facts(join(schema(("lk", "string"), ("lv", "integer"), ("matched", "boolean"))))
    findings = run(rules.rule_state_schemas, ckpt(operators=(old,)), cand(operators=(new,)))
    assert [(f.rule, f.severity) for f in findings] == [("STATE_VALUE_SCHEMA", Severity.INCOMPATIBLE)]


# ------------------------------------------------------------------------------------ checkpoint_facts


def source_info(index: int, kind: str, path_dirs: list[str]) -> SourceInfo:
    return SourceInfo(index=index, name=str(index), kind=kind, offset={"logOffset": 0}, log_dir=None,
                      latest_log_batch=None, log_file_read=None, entries_in_file=0, latest_batch_entries=None,
                      sample_path=None, path_dirs=path_dirs)


def checkpoint_info(sources: list[SourceInfo], offsets: int | None = None, operators=(), conf=None,
                    committed: int | None = 4, planned: int | None = 5) -> CheckpointInfo:
    latest = None if offsets is None else OffsetsInfo(
        batch_id=planned or 0, file=f"/ck/offsets/{planned}", version=1, batch_watermark_ms=0,
        batch_timestamp_ms=0, conf=dict(conf or {}), source_offsets=[{"logOffset": 0}] * offsets)
    return CheckpointInfo(
        location="/ck", query_id="q-9", position=BatchPosition("/ck", planned, committed),
        last_planned_batch=planned, last_committed_batch=committed, next_batch_id=(committed or 0) + 1,
        clean=planned == committed, notes=[], latest_offsets=latest, latest_commit=None, sources=sources,
        operators=list(operators), state_store_provider=None, shuffle_partitions=None, conf=dict(conf or {}),
        spark_version_hints=[], files_read=0, dirs_listed=0, bytes_read=0)


@pytest.mark.parametrize("kind,expected", [("none", None), ("unknown", None), ("file", "file"), ("kafka", "kafka")])
def test_checkpoint_source_kind(kind, expected):
    facts = checkpoint_facts(checkpoint_info([source_info(0, kind, [])], offsets=1))
    assert facts.sources[0].kind == expected


@pytest.mark.parametrize("dirs,expected", [
    ([], None),
    (["file:///data/src"], "file:///data/src"),
    (["file:///data/src/d=1", "file:///data/src/d=2"], None),
])
def test_checkpoint_source_path_only_when_one_directory(dirs, expected):
    assert checkpoint_facts(checkpoint_info([source_info(0, "file", dirs)], offsets=1)).sources[0].path == expected


def test_checkpoint_sources_padded_to_offsets_count():
    facts = checkpoint_facts(checkpoint_info([source_info(1, "file", ["/data/b"])], offsets=3))
    assert facts.sources == (SourceFacts(0, None, None), SourceFacts(1, "file", "/data/b"), SourceFacts(2, None, None))


def test_checkpoint_sources_not_padded_without_offsets():
    facts = checkpoint_facts(checkpoint_info([source_info(0, "kafka", [])], offsets=None, committed=None,
                                             planned=None))
    assert facts.sources == (SourceFacts(0, "kafka", None),)


def test_checkpoint_facts_carry_position_conf_and_operators():
    key, value = schema(("key", "string")), schema(("count", "long"))
    info = checkpoint_info([source_info(0, "file", ["/a"])], offsets=1, conf={SHUFFLE: "2"},
                           operators=[op_info([store("default", key, value)], key, value, op_id=0)],
                           committed=4, planned=5)
    facts = checkpoint_facts(info)
    assert (facts.location, facts.query_id) == ("/ck", "q-9")
    assert (facts.last_committed, facts.last_planned) == (4, 5)
    assert facts.conf == {SHUFFLE: "2"}
    assert facts.operators == (OperatorFacts(0, "stateStoreSave", fields(("key", "string")),
                                             fields(("count", "long")), 2),)


# ------------------------------------------------------------------------------------ file_sink_committed_batch


def test_file_sink_committed_batch_reads_latest_log_entry(tmp_path):
    meta = tmp_path / "out" / "_spark_metadata"
    meta.mkdir(parents=True)
    for name in ("0", "1", "2.compact", "3", ".3.crc", "3.tmp"):
        (meta / name).write_text("v1\n")
    assert file_sink_committed_batch(str(tmp_path / "out")) == 3
    assert file_sink_committed_batch("file://" + str(tmp_path / "out")) == 3


def test_file_sink_committed_batch_counts_compact_files(tmp_path):
    meta = tmp_path / "out" / "_spark_metadata"
    meta.mkdir(parents=True)
    for name in ("8", "9.compact", ".9.compact.crc"):
        (meta / name).write_text("v1\n")
    assert file_sink_committed_batch(str(tmp_path / "out")) == 9


def test_file_sink_committed_batch_without_metadata_dir(tmp_path):
    (tmp_path / "out").mkdir()
    assert file_sink_committed_batch(str(tmp_path / "out")) is None
    assert file_sink_committed_batch(str(tmp_path / "never-written")) is None


def test_file_sink_committed_batch_with_empty_metadata_dir(tmp_path):
    (tmp_path / "out" / "_spark_metadata").mkdir(parents=True)
    assert file_sink_committed_batch(str(tmp_path / "out")) is None


@pytest.mark.parametrize("path", [None, ""])
def test_file_sink_committed_batch_without_path(path):
    assert file_sink_committed_batch(path) is None


def test_findings_serialise_with_severity_value():
    d = Finding("R", Severity.WARNING, "m", 1, [2]).to_dict()
    assert d == {"rule": "R", "severity": "WARNING", "message": "m", "checkpoint": 1, "candidate": [2]}


def test_facts_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        op().name = "x"  # type: ignore[misc]


# ------------------------------------------------------------------------------------ Spark runtime changes


def test_a_checkpoint_without_operator_names_matches_the_candidates_operators_by_id():
    """A 3.5 checkpoint has no operator metadata: its operators are 'unknown' and match by id, while their
    state schemas are still compared (a changed aggregate stays INCOMPATIBLE)."""
    old = ckpt(operators=(op(name="unknown"),))
    verdict, findings = rules.evaluate(old, cand(operators=(op(),)), DryRunResult("passed"))
    assert verdict == Verdict.COMPATIBLE, findings
    assert [f.severity for f in findings if f.rule == "STATEFUL_OPERATORS"] == [Severity.INFO]
    changed = cand(operators=(op(value=(("count", "long"), ("sum", "double"))),))
    verdict, findings = rules.evaluate(old, changed, DryRunResult("passed"))
    assert verdict == Verdict.INCOMPATIBLE and "STATE_VALUE_SCHEMA" in {f.rule for f in findings}
    verdict, findings = rules.evaluate(old, cand(operators=(op(), op(1, "dedupe"))), DryRunResult("passed"))
    assert verdict == Verdict.INCOMPATIBLE and "STATEFUL_OPERATORS" in {f.rule for f in findings}


@pytest.mark.parametrize("commit_version, offsets_version, metadata, spark, expected", [
    (2, 1, (1,), "3.5.7", Severity.INCOMPATIBLE),   # checkpointFormatVersion=2: 3.5 cannot read it (measured)
    (1, 2, (), "4.1.1", Severity.INCOMPATIBLE),     # offsets log v2 needs 4.2
    (1, 1, (1,), "3.5.7", Severity.WARNING),        # written by 4.0+, run on 3.5: a downgrade that resumes
    (2, 1, (1,), "4.0.1", None),
    (1, 2, (1,), "4.2.0", None),
    (1, 1, (), "3.5.7", None),                      # nothing 4.x-only in the checkpoint
    (1, 1, (1,), None, None),                       # the candidate's Spark unknown
])
def test_spark_runtime_rule_names_what_the_candidates_spark_cannot_read(commit_version, offsets_version, metadata,
                                                                      spark, expected):
    facts = ckpt(commit_log_version=commit_version, offsets_log_version=offsets_version,
                 operator_metadata_versions=metadata)
    found = [f for f in rules.rule_spark_runtime(facts, cand(spark_version=spark))]
    assert [f.severity for f in found] == ([expected] if expected else []), found
    if found:
        assert found[0].rule == "SPARK_DOWNGRADE" and spark in found[0].message


def test_a_partial_dry_run_warns():
    result = DryRunResult("partial", message="Spark 3.5.7 plans a batch without checking state", spark_version="3.5.7")
    [finding] = rules.dry_run_findings(result)
    assert finding.severity == Severity.WARNING and "3.5.7" in finding.message
