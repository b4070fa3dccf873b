"""Transport rules: which SMTP mode a connection gets and when a login may go, when a webhook may carry
credentials (refused before anything is sent), and how the compatibility check's child gets secret conf
(stdin, not argv)."""

from __future__ import annotations

import io
import json
import socket
from types import SimpleNamespace

import pytest

from airflow_streaming.compat.__main__ import parse_args, read_conf
from airflow_streaming.compat.run import check_command
from airflow_streaming.notifications.events import NotificationError
from airflow_streaming.notifications.http_provider import StreamHttpNotifier
from airflow_streaming.notifications.smtp_provider import transport_of
from airflow_streaming.spec import StreamSpec

# ----------------------------------------------------------------------------------------------- SMTP


def smtp_connection(extra: dict, login: str | None = "u@example.test", password: str | None = "pw") -> SimpleNamespace:
    return SimpleNamespace(host="mail.example.test", port=587, login=login, password=password, extra_dejson=extra)


@pytest.mark.parametrize(("extra", "mode"), [
    ({}, "SSL"),                                                  # the SMTP provider's default: implicit TLS
    ({"disable_tls": True}, "SSL"),
    ({"disable_ssl": True}, "STARTTLS"),
    ({"disable_ssl": "true"}, "STARTTLS"),
    ({"disable_ssl": True, "disable_tls": True, "allow_plaintext_auth": True}, "plain"),
])
def test_smtp_mode_from_the_providers_extras(extra, mode):
    assert transport_of(smtp_connection(extra), "smtp_x") == mode


def test_smtp_login_never_goes_in_cleartext_unless_allowed():
    cleartext = {"disable_ssl": True, "disable_tls": True}
    with pytest.raises(NotificationError, match="refusing to send the login .* without TLS") as refused:
        transport_of(smtp_connection(cleartext), "smtp_x")
    assert "allow_plaintext_auth: true" in str(refused.value) and "pw" not in str(refused.value).split("password")[0]
    assert transport_of(smtp_connection(cleartext, login=None, password=None), "smtp_x") == "plain"  # no login


@pytest.mark.parametrize(("extra", "match"), [
    ({"ssl": True}, "extra ssl .*disable_tls: true"),
    ({"starttls": True}, "extra starttls .*disable_ssl: true"),
    ({"verify": "/etc/ssl/certs/ca.pem"}, "extra verify .*SSL_CERT_FILE"),
])
def test_the_old_notifiers_extras_are_refused_with_the_providers_equivalent(extra, match):
    with pytest.raises(ValueError, match=match):
        transport_of(smtp_connection(extra), "smtp_x")


# -------------------------------------------------------------------------------------------- webhook


def closed_url(scheme: str = "http", userinfo: str = "") -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"{scheme}://{userinfo}127.0.0.1:{s.getsockname()[1]}/hooks/streams?sig=q-5f0e1d2c"


@pytest.mark.parametrize(("headers", "allowed", "refused"), [
    ({"Content-Type": "application/json"}, False, False),  # no credential: plain http is fine
    ({"Authorization": "Bearer t"}, False, True),
    ({"authorization": "Basic dTpw"}, False, True),
    ({"X-Api-Key": "k"}, False, True),
    ({"Cookie": "session=1"}, False, True),
    ({"Authorization": "Bearer t"}, True, False),          # explicitly allowed
])
def test_webhook_credentials_need_https(headers, allowed, refused):
    notifier = StreamHttpNotifier(url=closed_url(), headers=headers, allow_insecure_auth=allowed, timeout=2)
    with pytest.raises(NotificationError) as raised:
        notifier.notify({})
    # Refused before sending, or sent (and the closed port did not answer).
    assert ("refusing to send credentials" in str(raised.value)) is refused
    assert ("unreachable" in str(raised.value)) is not refused


def test_webhook_url_userinfo_is_basic_auth_and_never_in_an_error():
    with pytest.raises(NotificationError, match=r"\(Authorization\) over plain http://") as raised:
        StreamHttpNotifier(url=closed_url(userinfo="bot:p%40ssw0rd-9e1@")).notify({})
    for secret in ("p@ssw0rd-9e1", "p%40ssw0rd-9e1", "q-5f0e1d2c", "/hooks/streams"):
        assert secret not in str(raised.value)
    with pytest.raises(NotificationError, match="unreachable") as raised:  # over https it is sent (nobody answers)
        StreamHttpNotifier(url=closed_url("https", "bot:p%40ssw0rd-9e1@"), timeout=2).notify({})
    for secret in ("p@ssw0rd-9e1", "p%40ssw0rd-9e1", "q-5f0e1d2c", "/hooks/streams"):
        assert secret not in str(raised.value)


def test_webhook_configuration_errors():
    with pytest.raises(ValueError, match="exactly one"):
        StreamHttpNotifier(url="http://x", http_conn_id="y")
    with pytest.raises(ValueError, match="payload_format"):
        StreamHttpNotifier(url="http://x", payload_format="xml")
    with pytest.raises(ValueError, match="timeout"):
        StreamHttpNotifier(url="http://x", timeout=0)


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
    assert "puts private conf" in err and "on the command line" in err and "--conf-stdin" in err and "hunter2" not in err
