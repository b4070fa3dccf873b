"""One corpus of secret-bearing Spark conf entries and job arguments (issue 24), pushed through every
decision about secrets: which conf goes to the 0600 properties file instead of the command line, what
specs at rest and the UI show, which values the log redaction masks, what Spark's own redaction hides,
and which plain arguments are refused. docs/security.md lists the same corpus."""

from __future__ import annotations

import re

import pytest

from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.redaction import (
    MASK,
    SPARK_REDACTION_REGEX,
    mask_args,
    mask_spec,
    redact_text,
    secret_args_of_conf,
    secret_values,
    split_conf,
)
from airflow_streaming.spec import SpecError, StreamSpec
from secret_corpus import ARGS_CORPUS, CONF_CORPUS

@pytest.mark.parametrize("key", sorted(CONF_CORPUS))
def test_every_secret_conf_entry_is_a_secret_by_key_or_by_value(key):
    value, secret = CONF_CORPUS[key]
    plain, secrets = split_conf({key: value, "spark.sql.shuffle.partitions": "2"})
    assert key in secrets and key not in plain and plain == {"spark.sql.shuffle.partitions": "2"}
    assert value in secret_values({key: value})
    assert mask_spec({"spark_conf": {key: value}})["spark_conf"][key] == MASK
    assert secret not in redact_text(f"conf {key}={value}")
    # Spark's own redaction (key OR value matching spark.redaction.regex) hides it too.
    java_like = re.compile(SPARK_REDACTION_REGEX.replace("(?i)", ""), re.IGNORECASE)
    assert java_like.search(key) or java_like.search(value), key


def test_the_issues_snippet_masks_or_moves_every_secret():
    jaas = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="Sup3rS3cret";'
    plain, secret = split_conf({"spark.kafka.sasl.jaas.config": jaas})
    assert plain == {} and secret == {"spark.kafka.sasl.jaas.config": jaas}
    masked = mask_spec({"name": "x", "spark_conf": {"spark.kafka.sasl.jaas.config": jaas},
                        "application_args": ["--password", "hunter2", "--db-url", "postgres://u:pw@h/db"]})
    text = repr(masked)
    assert "Sup3rS3cret" not in text and "hunter2" not in text and "u:pw@" not in text
    assert masked["application_args"] == ["--password", MASK, "--db-url", f"postgres://{MASK}@h/db"]


@pytest.mark.parametrize("args,index", ARGS_CORPUS)
def test_plain_arguments_that_hold_a_secret_are_refused_with_the_fix(tmp_path, args, index):
    spec = StreamSpec(name="s", application="events_etl", checkpoint_location=str(tmp_path / "c"),
                      control_location=str(tmp_path / "ctl"), application_args=args)
    with pytest.raises(SpecError) as err:
        spec.refuse_plain_secrets()
    assert err.value.field == f"application_args[{index}]"
    assert "secret_args=" in str(err.value) and "command line" in str(err.value)
    assert args[index] not in str(err.value)  # the refusal does not print the secret either
    with pytest.raises(SpecError):
        SparkStreamHook(spec).preflight()
    masked = mask_args(args)
    assert args[index] not in masked and len(masked) == len(args)


def test_a_secret_argument_travels_as_secret_conf_and_never_on_the_command_line(tmp_path):
    spec = StreamSpec(name="s", application="events_etl", checkpoint_location=str(tmp_path / "c"),
                      control_location=str(tmp_path / "ctl"), master="local[2]",
                      application_args=["--input", "/in"], secret_args={"--db-password": "argSecret-77"},
                      spark_conf={"spark.kafka.sasl.jaas.config": CONF_CORPUS["spark.kafka.sasl.jaas.config"][0]})
    hook = SparkStreamHook(spec)
    plan = hook.launch_plan("20260101T000000Z-0000aaaa")
    argv, shown = hook.command_for("20260101T000000Z-0000aaaa")
    for text in (" ".join(argv), shown, " ".join(plan.runtime_args), repr(plan.conf)):
        assert "argSecret-77" not in text and "Sup3rS3cret-jaas" not in text
    assert secret_args_of_conf(plan.secret_conf) == ["--db-password", "argSecret-77"]
    assert "spark.kafka.sasl.jaas.config" in plan.secret_conf
    assert plan.conf["spark.redaction.regex"] == SPARK_REDACTION_REGEX
    stored = mask_spec(spec.to_dict())
    assert stored["secret_args"] == {"--db-password": MASK} and "argSecret-77" not in repr(stored)
    from airflow_streaming.redaction import restore_secrets

    assert restore_secrets(stored, spec)["secret_args"] == {"--db-password": "argSecret-77"}
    assert StreamSpec.from_dict(restore_secrets(stored, spec)) == spec
