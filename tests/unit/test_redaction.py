"""airflow_streaming.redaction: every pattern with positive and negative cases, the registry, Airflow's
masker, the log formatter, and that the driver side can use it without importing Airflow."""

from __future__ import annotations

import io
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from airflow_streaming import redaction
from airflow_streaming.log_masking import register_secrets
from airflow_streaming.redaction import (
    MASK,
    RedactingFormatter,
    is_sensitive_header,
    is_sensitive_key,
    redact,
    redact_text,
    remember_secrets,
    scrub,
    secret_values,
    split_conf,
)

REPO = Path(__file__).resolve().parents[2]

PEM_BODY = ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n"
            "q4Vd2zRk0m9sV1xYtq0pZ7b3XhXb0s9mJ1eJ0bX5b3cQ2Yc1a0ZP\n")


@pytest.fixture(autouse=True)
def _fresh_registry(monkeypatch):
    """Each test starts with no remembered values (the registry is process-wide)."""
    monkeypatch.setattr(redaction, "_KNOWN", frozenset())


# ------------------------------------------------------------------------------------ sensitive keys


@pytest.mark.parametrize("key", [
    "spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.access.key", "fs.s3a.secret.key",
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", "fs.azure.account.key.acct.blob.core.windows.net",
    "spark.ssl.keyPassword", "spark.ssl.keyStorePassword", "spark.jdbc.password", "db.pwd", "spark.authenticate.secret",
    "spark.kafka.sasl.token", "spark.myapp.credentials", "api_key", "X-Api-Key", "spark.ssl.privateKey",
    "spark.myapp.private_key", "key", "spark.ssl.keystore", "gpg.passphrase",
])
def test_sensitive_keys(key):
    assert is_sensitive_key(key)


@pytest.mark.parametrize("key", [
    "spark.sql.shuffle.partitions", "spark.master", "spark.ui.enabled", "monkey", "keyboard", "key_count",
    "spark.sql.streaming.checkpointLocation", "spark.hadoop.fs.s3a.endpoint", "spark.app.name", "batchId",
    "spark.sql.streaming.stateStore.providerClass",
])
def test_not_sensitive_keys(key):
    assert not is_sensitive_key(key)


def test_sensitive_headers():
    for name in ("Authorization", "proxy-authorization", "Cookie", "X-Api-Key", "X-Auth-Token", "Private-Token"):
        assert is_sensitive_header(name), name
    for name in ("Content-Type", "User-Agent", "X-Team", "Accept"):
        assert not is_sensitive_header(name), name


def test_split_conf_and_secret_values():
    conf = {"spark.hadoop.fs.s3a.secret.key": "S3SECRETVALUE", "spark.sql.shuffle.partitions": "4",
            "spark.myapp.db.password": "pw-123456", "spark.security.credentials.hive.enabled": "false",
            "spark.yarn.token.renewal.interval": "3600", "spark.x.token": "ab"}
    plain, secret = split_conf(conf)
    assert plain == {"spark.sql.shuffle.partitions": "4"}
    assert set(secret) == set(conf) - set(plain)
    # Flags, small numbers and very short values are no literal to mask everywhere.
    assert sorted(secret_values(conf)) == ["S3SECRETVALUE", "pw-123456"]


# ------------------------------------------------------------------------------------------ patterns


@pytest.mark.parametrize(("text", "expected"), [
    # key=value / key: value / JSON, with every kind of sensitive key
    ("password=hunter2 user=bob", "password=*** user=bob"),
    ("DB_PASSWORD: hunter2", "DB_PASSWORD: ***"),
    ('{"client_secret": "s3cr3t value", "a": 1}', '{"client_secret": "***", "a": 1}'),
    ("spark.hadoop.fs.s3a.secret.key=AKIA123 next", "spark.hadoop.fs.s3a.secret.key=*** next"),
    ("--conf spark.hadoop.fs.s3a.access.key=AKIAXYZ", "--conf spark.hadoop.fs.s3a.access.key=***"),
    ("fs.azure.account.key.acct.dfs.core.windows.net=Zm9vYmFy==", "fs.azure.account.key.acct.dfs.core.windows.net=***"),
    ("spark.myapp.pwd: letmein", "spark.myapp.pwd: ***"),
    ("-Dspark.ssl.keyPassword=changeit -Dx=1", "-Dspark.ssl.keyPassword=*** -Dx=1"),
    ("private_key='abc def'", "private_key='***'"),
    ("{'key': 'AKIAQWERTY'}", "{'key': '***'}"),
    ("https://host/cb?access_token=abc123&x=1", "https://host/cb?access_token=***&x=1"),
    ("ApiKey=k1; API_KEY: k2, apikey=k3", "ApiKey=***; API_KEY: ***, apikey=***"),
    ("Credentials: abc", "Credentials: ***"),
    ("Error:password=hunter2", "Error:password=***"),
    # CLI options
    ("--password hunter2 --user bob", "--password *** --user bob"),
    ("--token=tok-1 --verbose", "--token=*** --verbose"),
    ("run --db-password 'two words' now", "run --db-password '***' now"),
    ("--api-key K123 -x", "--api-key *** -x"),
    # URL userinfo
    ("https://user:pass@host:8443/p", "https://***@host:8443/p"),
    ("jdbc:postgresql://admin:pw@db/x", "jdbc:postgresql://***@db/x"),
    ("s3a://AKIA:SECRET@bucket/path", "s3a://***@bucket/path"),
    # Authorization / Bearer
    ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.x.y", "Authorization: Bearer ***"),
    ("{'Authorization': 'Basic dXNlcjpwYXNz'}", "{'Authorization': 'Basic ***'}"),
    ("Proxy-Authorization: Digest abcdef", "Proxy-Authorization: Digest ***"),
    ("header Bearer abcdefgh sent", "header Bearer *** sent"),
])
def test_patterns_mask(text, expected):
    assert redact_text(text) == expected
    assert redact(text) == expected


@pytest.mark.parametrize("text", [
    "Secret manager unavailable; token expired",
    "no secrets here: batch=41",
    "Last committed batch: 41",
    "monkey=banana keyboard=qwerty key_count=3",
    "spark.sql.shuffle.partitions=4 spark.master=local[2]",
    "--properties-file /tmp/x.properties --load-spark-defaults",
    "--conf spark.ui.enabled=false",
    "a value is missing: --password --verbose",
    "http://host/path?email=a@b.com",
    "mailto:oncall@example.com",
    "Bearer abc",  # too short to be a token
    "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
    "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----",
    "could not parse the PRIVATE KEY file",
    "[STREAM_FAILED] Query orders terminated with exception: disk full",
])
def test_patterns_leave_innocent_text_alone(text):
    assert redact_text(text) == text


@pytest.mark.parametrize("label", ["PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY", "ENCRYPTED PRIVATE KEY",
                                   "OPENSSH PRIVATE KEY", "PGP PRIVATE KEY BLOCK"])
def test_pem_private_key_blocks(label):
    pem = f"-----BEGIN {label}-----\n{PEM_BODY}-----END {label}-----"
    out = redact_text(f"bad key:\n{pem}\nafter")
    assert out == f"bad key:\n-----BEGIN {label}-----***-----END {label}-----\nafter"
    # JSON-escaped newlines, and a message truncated in the middle of the block.
    escaped = pem.replace("\n", "\\n")
    assert "MIIEvQ" not in redact_text(f'{{"k": "{escaped}"}}')
    assert redact_text(f"first line\n-----BEGIN {label}-----\n{PEM_BODY[:40]}") == (
        f"first line\n-----BEGIN {label}-----***-----END {label}-----")


def test_pem_private_key_next_to_a_certificate():
    cert = "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----"
    key = f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}-----END PRIVATE KEY-----"
    assert redact_text(f"{cert}\n{key}\n{cert}") == (
        f"{cert}\n-----BEGIN PRIVATE KEY-----***-----END PRIVATE KEY-----\n{cert}")


def test_exception_text_from_spark():
    text = ("org.apache.hadoop.fs.s3a.AWSBadRequestException: getFileStatus on s3a://AKIAEXAMPLE:wJalrXUtnFEMI@bkt/x: "
            "com.amazonaws... (Service: S3; secret.key=wJalrXUtnFEMI)\n"
            "Caused by: java.sql.SQLException: Access denied for user 'etl' (using password: YES) "
            "jdbc:mysql://etl:hunter22@db:3306/orders")
    out = redact_text(text)
    for secret in ("wJalrXUtnFEMI", "AKIAEXAMPLE", "hunter22"):
        assert secret not in out
    assert "getFileStatus on s3a://***@bkt/x" in out and "jdbc:mysql://***@db:3306/orders" in out


# ---------------------------------------------------------------------------------------- known values


def test_scrub_and_explicit_secrets():
    assert scrub("a hunter2 b hunter2", ["hunter2"]) == "a *** b ***"
    assert scrub("ab", ["ab"]) == "ab"  # too short to mask as a literal
    assert redact_text("the value was opaque-VALUE-42", ["opaque-VALUE-42"]) == "the value was ***"
    assert redact({"msg": "x opaque-VALUE-42"}, ["opaque-VALUE-42"]) == {"msg": "x ***"}


def test_remembered_values_are_masked_everywhere_in_the_process():
    assert redact_text("conf value zq-remembered-1") == "conf value zq-remembered-1"
    remember_secrets(["zq-remembered-1", "false", None, "12"])
    assert redact_text("conf value zq-remembered-1") == "conf value ***"
    assert redaction.known_secrets() == frozenset({"zq-remembered-1"})


def test_dicts_and_lists():
    doc = {"message": "failed: password=hunter2", "spark.hadoop.fs.s3a.secret.key": "S3VALUE",
           "nested": {"token": ["a-token-value", 7], "batch": 41}, "items": ("Bearer abcdefgh", 3), "n": None}
    assert redact(doc) == {"message": "failed: password=***", "spark.hadoop.fs.s3a.secret.key": MASK,
                           "nested": {"token": [MASK, 7], "batch": 41}, "items": ["Bearer ***", 3], "n": None}
    assert redact(41) == 41 and redact(None) is None and redact("") == ""


def test_notifications_redact_is_the_same_function():
    from airflow_streaming.notifications import redact as notifications_redact
    from airflow_streaming.notifications.events import redact as events_redact

    assert notifications_redact is redact and events_redact is redact


# ------------------------------------------------------------------------------------ Airflow's masker


def test_values_registered_with_airflow_only_are_masked_too():
    from airflow.sdk.log import mask_secret

    mask_secret("only-airflow-knows-7f3e")
    assert redact("x only-airflow-knows-7f3e y") == "x *** y"
    assert "only-airflow-knows-7f3e" not in redaction.known_secrets()


def test_register_secrets_feeds_airflows_masker_and_ours():
    from airflow.sdk._shared.secrets_masker import redact as airflow_redact

    register_secrets(["registered-both-91ac", "true"])
    assert airflow_redact("v=registered-both-91ac") == "v=***"  # Airflow masks it in task logs
    assert redact_text("v registered-both-91ac") == "v ***"    # and so do we, without Airflow


def test_the_driver_side_never_imports_airflow():
    code = textwrap.dedent("""
        import logging, sys
        from airflow_streaming.redaction import RedactingFormatter, redact, redact_text, remember_secrets
        from spark_jobs.runtime import reporter
        remember_secrets(["driver-secret-55"])
        assert redact("a driver-secret-55 password=x") == "a *** password=***"
        assert reporter.describe_exception(RuntimeError("boom driver-secret-55"))["message"] == "boom ***"
        bad = [m for m in sys.modules if m == "airflow" or m.startswith("airflow.")]
        assert not bad, bad
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


# ------------------------------------------------------------------------------------------- logging


def test_redacting_formatter_masks_messages_arguments_and_tracebacks():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(RedactingFormatter("%(levelname)s %(message)s"))
    logger = logging.getLogger("test_redaction.formatter")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.error("connecting with --password %s", "hunter2")
        try:
            raise ValueError("spark.myapp.db.password=hunter2 rejected")
        except ValueError:
            logger.exception("startup failed")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert "hunter2" not in out
    assert "--password ***" in out and "spark.myapp.db.password=*** rejected" in out and "Traceback" in out


# ----------------------------------------------------------------------- the driver's secret properties


def test_properties_file_round_trip_and_the_driver_remembers_its_values(tmp_path, monkeypatch):
    from airflow_streaming.targets.submit_command import read_properties_file, write_properties_file
    from spark_jobs.runtime.driver_session import forget_secret_properties

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    conf = {"spark.hadoop.fs.s3a.secret.key": "s3/key+with=equals", "spark.my app:pw": " lead\\ing\nnl\ttab",
            "spark.x.password": "#not-a-comment!"}
    path = write_properties_file(conf, "run-1")
    assert Path(path).stat().st_mode & 0o777 == 0o600
    assert read_properties_file(path) == conf

    monkeypatch.setenv("AIRFLOW_STREAMING_SECRET_PROPERTIES", path)
    forget_secret_properties()
    assert not Path(path).exists()
    assert "AIRFLOW_STREAMING_SECRET_PROPERTIES" not in __import__("os").environ
    assert redact_text("failed reading s3/key+with=equals") == "failed reading ***"
    assert "#not-a-comment!" in redaction.known_secrets()


def test_specs_at_rest_keep_no_secret_and_a_restart_takes_it_from_the_callers_spec():
    from airflow_streaming.redaction import mask_spec, restore_secrets
    from airflow_streaming.spec import SpecError, StreamSpec

    spec = StreamSpec.from_dict({"name": "s", "application": "events_etl", "checkpoint_location": "/c",
                                 "control_location": "/d", "spark_conf": {"spark.hadoop.fs.s3a.secret.key": "S3CR3T!",
                                                                          "spark.sql.shuffle.partitions": 4}})
    stored = mask_spec(spec.to_dict())
    assert stored["spark_conf"] == {"spark.hadoop.fs.s3a.secret.key": "***", "spark.sql.shuffle.partitions": "4"}
    assert "S3CR3T!" not in str(stored)
    assert StreamSpec.from_dict(restore_secrets(stored, spec)) == spec
    assert StreamSpec.from_dict(restore_secrets(stored, None, spec.to_dict())) == spec
    with pytest.raises(SpecError, match=r"spark_conf.spark.hadoop.fs.s3a.secret.key: this secret is not stored"):
        restore_secrets(stored, StreamSpec.from_dict({**spec.to_dict(), "spark_conf": {}}))
