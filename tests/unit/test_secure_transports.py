"""Transport rules without I/O: which SMTP mode a connection gets, when a webhook may carry credentials,
and how the compatibility check's child gets secret conf (stdin, not argv)."""

from __future__ import annotations

import io
import json
import ssl

import pytest

from airflow_streaming.compat.__main__ import parse_args, read_conf
from airflow_streaming.compat.run import check_command
from airflow_streaming.notifications.email import PLAIN, SSL, STARTTLS, SmtpSecurity
from airflow_streaming.notifications.events import NotificationError
from airflow_streaming.notifications.webhook import StreamWebhookNotifier, WebhookTarget
from airflow_streaming.spec import StreamSpec

# ----------------------------------------------------------------------------------------------- SMTP


@pytest.mark.parametrize(("port", "extra", "mode", "expected_port"), [
    (None, {}, STARTTLS, 587),                                   # TLS by default
    (587, {}, STARTTLS, 587),
    (25, {}, STARTTLS, 25),                                      # STARTTLS on 25 too
    (465, {}, SSL, 465),                                         # implicit TLS chosen by the port
    (None, {"ssl": True}, SSL, 465),
    (2465, {"ssl": "true"}, SSL, 2465),
    (465, {"disable_ssl": True}, STARTTLS, 465),                 # the SMTP provider's opt-out
    (465, {"starttls": True}, STARTTLS, 465),
    (None, {"starttls": True}, STARTTLS, 587),
    (None, {"disable_tls": True}, PLAIN, 25),                    # cleartext only when asked for
    (2525, {"disable_tls": "yes"}, PLAIN, 2525),
])
def test_smtp_mode_from_the_connection(port, extra, mode, expected_port):
    security = SmtpSecurity.from_connection(port, extra)
    assert (security.mode, security.port) == (mode, expected_port)
    assert security.tls is (mode != PLAIN)
    assert security.verify is True and security.allow_plaintext_auth is False


def test_smtp_verification_settings(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("not parsed here")
    assert SmtpSecurity.from_connection(587, {"verify": str(ca)}).verify == str(ca)
    assert SmtpSecurity.from_connection(587, {"verify": False}).verify is False
    assert SmtpSecurity.from_connection(587, {"verify": "false"}).verify is False
    assert SmtpSecurity.from_connection(587, {"ssl_context": "none"}).verify is False
    assert SmtpSecurity.from_connection(587, {"ssl_context": "default"}).verify is True
    assert SmtpSecurity.from_connection(25, {"disable_tls": True, "allow_plaintext_auth": True}).allow_plaintext_auth

    default = SmtpSecurity.from_connection(587, {}).ssl_context()
    assert default.verify_mode == ssl.CERT_REQUIRED and default.check_hostname
    off = SmtpSecurity.from_connection(587, {"verify": False}).ssl_context()
    assert off.verify_mode == ssl.CERT_NONE and not off.check_hostname


@pytest.mark.parametrize(("extra", "match"), [
    ({"ssl": True, "starttls": True}, "both ssl and starttls"),
    ({"ssl": True, "disable_ssl": True}, "both ssl and disable_ssl"),
    ({"starttls": True, "disable_tls": True}, "both starttls and disable_tls"),
    ({"ssl_context": "lax"}, "ssl_context must be 'default' or 'none'"),
    ({"ssl_context": "none", "verify": "/etc/ssl/certs/ca-certificates.crt"}, "keep one"),
    ({"verify": "/no/such/ca.pem"}, "not a readable file"),
    ({"disable_tls": "maybe"}, "disable_tls must be true or false"),
])
def test_smtp_contradictions_are_configuration_errors(extra, match):
    with pytest.raises(ValueError, match=match):
        SmtpSecurity.from_connection(587, extra, "smtp_x")


# -------------------------------------------------------------------------------------------- webhook


@pytest.mark.parametrize(("url", "headers", "allowed", "refused"), [
    ("http://h/x", {"Content-Type": "application/json"}, False, False),  # no credential: plain http is fine
    ("http://h/x", {"Authorization": "Bearer t"}, False, True),
    ("http://h/x", {"authorization": "Basic dTpw"}, False, True),
    ("http://h/x", {"X-Api-Key": "k"}, False, True),
    ("http://h/x", {"Cookie": "session=1"}, False, True),
    ("http://h/x", {"Authorization": "Bearer t"}, True, False),          # explicitly allowed
    ("https://h/x", {"Authorization": "Bearer t"}, False, False),
])
def test_webhook_credentials_need_https(url, headers, allowed, refused):
    target = WebhookTarget(url=url, headers=headers, allow_insecure_auth=allowed)
    if refused:
        with pytest.raises(NotificationError, match="refusing to send credentials"):
            target.check_transport("the flag")
    else:
        target.check_transport("the flag")


def test_webhook_url_userinfo_becomes_basic_auth_and_leaves_the_url():
    target = StreamWebhookNotifier(url="https://bot:p%40ss@hooks.example.com:8443/x?y=1").target()
    assert target.url == "https://hooks.example.com:8443/x?y=1"
    assert target.headers["Authorization"] == "Basic Ym90OnBAc3M="  # bot:p@ss
    assert "p@ss" in target.secrets and target.ssl_context().verify_mode == ssl.CERT_REQUIRED
    insecure = StreamWebhookNotifier(url="http://bot:pw@hooks.example.com/x").target()
    with pytest.raises(NotificationError, match=r"\(Authorization\) over plain http://"):
        insecure.check_transport("x")


def test_webhook_verify_setting(tmp_path):
    assert StreamWebhookNotifier(url="https://h/x", verify=False).target().ssl_context().verify_mode == ssl.CERT_NONE
    with pytest.raises(ValueError, match="not a readable file"):
        StreamWebhookNotifier(url="https://h/x", verify=str(tmp_path / "missing.pem")).target()
    assert StreamWebhookNotifier(url="http://h/x").target().ssl_context() is None


# ------------------------------------------------------------------------------- compatibility child


def _spec(tmp_path, conf):
    return StreamSpec.from_dict({"name": "s", "application": "events_etl", "checkpoint_location": str(tmp_path / "c"),
                                 "control_location": str(tmp_path / "ctl"), "spark_conf": conf,
                                 "application_args": ["--input", "/in"]})


def test_compat_child_gets_secret_conf_on_stdin_not_argv(tmp_path):
    conf = {"spark.sql.shuffle.partitions": "4", "spark.hadoop.fs.s3a.secret.key": "S3-SECRET-VALUE",
            "spark.jdbc.password": "PW-VALUE-1"}
    argv, stdin = check_command(_spec(tmp_path, conf), allow_warnings=False)
    assert not any("S3-SECRET-VALUE" in a or "PW-VALUE-1" in a or "secret.key" in a for a in argv)
    assert "spark.sql.shuffle.partitions=4" in argv and "--conf-stdin" in argv
    assert json.loads(stdin) == {"spark.hadoop.fs.s3a.secret.key": "S3-SECRET-VALUE", "spark.jdbc.password": "PW-VALUE-1"}

    # The child reads it back: --conf entries plus stdin's.
    ns = parse_args(argv[3:])
    assert read_conf(ns, io.StringIO(stdin)) == conf

    plain_argv, no_stdin = check_command(_spec(tmp_path, {"spark.sql.shuffle.partitions": "4"}), allow_warnings=True)
    assert no_stdin is None and "--conf-stdin" not in plain_argv


def test_compat_child_rejects_bad_stdin_and_warns_about_secrets_on_argv(capsys):
    ns = parse_args(["--checkpoint", "/c", "--application", "a", "--conf-stdin"])
    for text, match in (("[1, 2]", "one JSON object"), ("{not json", "not a JSON object")):
        with pytest.raises(ValueError, match=match):
            read_conf(ns, io.StringIO(text))
    parse_args(["--checkpoint", "/c", "--application", "a", "--conf", "spark.x.password=hunter2"])
    err = capsys.readouterr().err
    assert "puts a secret on the command line" in err and "--conf-stdin" in err and "hunter2" not in err
