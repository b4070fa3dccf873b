"""The webhook and email notifiers - the HTTP and SMTP providers' notifiers with this provider's security
checks (StreamHttpNotifier, StreamSmtpNotifier) - against REAL local servers, and as an on_failure_callback
in a real DAG run; the deprecated StreamWebhookNotifier / StreamEmailNotifier aliases still work and warn.

What is proved: credentials only over TLS unless explicitly allowed (refused before anything is sent),
certificates verified, no secret in logs or errors, redirects refused.

Servers (HTTP and HTTPS servers, and aiosmtpd SMTP servers with STARTTLS, implicit TLS or no TLS)
listen on 127.0.0.1 ephemeral ports, in threads of the test process, and are shut down at the end of
each test. Certificates come from a throwaway CA made by the test (``tests/tls.py``); the SMTP provider
verifies against the process's trust store, so SMTP tests trust that CA through ``SSL_CERT_FILE``.
"""

from __future__ import annotations

import base64
import email
import email.message
import email.policy
import json
import logging
import os
import socket
import socketserver
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller as _Controller
from aiosmtpd.smtp import SMTP, AuthResult

from airflow_streaming.notifications import (
    EventKind,
    NotificationError,
    StreamEmailNotifier,
    StreamEvent,
    StreamHttpNotifier,
    StreamSmtpNotifier,
    StreamWebhookNotifier,
)
from tls import ServerCert, TestCA

# aiosmtpd warns about the cleartext-AUTH server on purpose: that server is what the client must refuse.
pytestmark = pytest.mark.filterwarnings("ignore:Requiring AUTH while not requiring TLS:UserWarning")

REPO = Path(__file__).resolve().parents[2]
TOKEN = "tok-3f9a1c77-very-secret"
QUERY_TOKEN = "qtok-55b2e0d1"
SMTP_USER, SMTP_PASSWORD = "alerts@example.test", "smtp-pw-8c41e2f0"


def event(**overrides: Any) -> StreamEvent:
    values: dict[str, Any] = dict(
        kind=EventKind.FAILED, stream="orders-etl", version="v7", run_id="run-42", app_id="local-1741082520000",
        driver_id="31337", last_committed_batch=41,
        error_first_line="[STREAM_FAILED] Query orders terminated with exception: disk full",
        error_class="STREAM_FAILED", attempt=2, max_attempts=5, next_attempt_in_s=40.0,
        health_reasons=["driver exited with code 1"], links={"spark_ui": "http://127.0.0.1:4040"}, at=1741082520.0,
    )
    values.update(overrides)
    return StreamEvent(**values)


def no_secret_logged(caplog: pytest.LogCaptureFixture, captured: str, *secrets: str) -> None:
    texts = [r.getMessage() for r in caplog.records] + [str(r.args) for r in caplog.records] + [captured]
    for secret in secrets:
        assert not any(secret in t for t in texts), f"{secret!r} was logged"


@pytest.fixture(scope="module")
def tls_ca(tmp_path_factory) -> dict[str, Any]:
    """A throwaway CA (``ca``, trusted through a connection's ``verify``) and two server certificates it
    signed: ``good`` (127.0.0.1, localhost) and ``wrong_name`` (mail.example.test only)."""
    ca = TestCA(tmp_path_factory.mktemp("tls"))
    return {"ca": ca, "good": ca.issue("localhost", dns=("localhost",), ips=("127.0.0.1",)),
            "wrong_name": ca.issue("mail.example.test", dns=("mail.example.test",))}


# ------------------------------------------------------------------------------------------ HTTP server


class RecordingHTTPServer(ThreadingHTTPServer):
    """Records every POST; with ``cert``, speaks HTTPS."""

    daemon_threads = True

    def __init__(self, cert: ServerCert | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _RecordingHandler)
        if cert is not None:
            self.socket = cert.server_context().wrap_socket(self.socket, server_side=True)
        self.scheme = "https" if cert is not None else "http"
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}"

    def wait_for(self, count: int, timeout: float = 10.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.requests) >= count:
                    return list(self.requests)
            time.sleep(0.05)
        return list(self.requests)


class _RecordingHandler(BaseHTTPRequestHandler):
    server: RecordingHTTPServer

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        with self.server.lock:
            self.server.requests.append({"path": self.path, "headers": dict(self.headers.items()), "body": body})
        status = self.server.status
        # An error answer that echoes the credentials, as some misbehaving servers do.
        answer = (b"ok" if status < 300 else
                  f"rejected Authorization: {self.headers.get('Authorization')} for {self.path}".encode())
        self.send_response(status)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep request lines out of the logs
        pass


def _serve(server: RecordingHTTPServer) -> Iterator[RecordingHTTPServer]:
    thread = threading.Thread(target=server.serve_forever, name=f"test-{server.scheme}", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def http_server() -> Iterator[RecordingHTTPServer]:
    yield from _serve(RecordingHTTPServer())


@pytest.fixture
def https_server(tls_ca) -> Iterator[RecordingHTTPServer]:
    yield from _serve(RecordingHTTPServer(tls_ca["good"]))


def webhook_conn(monkeypatch, server: RecordingHTTPServer, **extra: Any) -> str:
    """An HTTP provider connection: headers are its top-level extras (the token among them)."""
    monkeypatch.setenv("AIRFLOW_CONN_WEBHOOK_TEST", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": server.server_address[1], "schema": server.scheme,
        "extra": {"Authorization": f"Bearer {TOKEN}", "X-Team": "data-platform", **extra},
    }))
    return "webhook_test"


@pytest.fixture
def https_conn(https_server, tls_ca, monkeypatch) -> str:
    """An https connection with a bearer token, trusting the test CA."""
    return webhook_conn(monkeypatch, https_server, verify=str(tls_ca["ca"].path))


def test_webhook_posts_json_with_the_connections_bearer_token(https_server, https_conn, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    notifier = StreamHttpNotifier(http_conn_id=https_conn, endpoint=f"hooks/streams?sig={QUERY_TOKEN}",
                                  headers={"X-Source": "airflow-streaming"})
    notifier({"stream_event": event()})

    (request,) = https_server.wait_for(1)
    assert request["path"] == f"/hooks/streams?sig={QUERY_TOKEN}"
    headers = {k.lower(): v for k, v in request["headers"].items()}
    assert headers["authorization"] == f"Bearer {TOKEN}"
    assert headers["content-type"].startswith("application/json")
    assert headers["x-team"] == "data-platform" and headers["x-source"] == "airflow-streaming"
    payload = json.loads(request["body"])
    assert payload["schema"] == "airflow-streaming.event/v1"
    assert payload["kind"] == "FAILED" and payload["stream"] == "orders-etl" and payload["version"] == "v7"
    assert payload["app_id"] == "local-1741082520000" and payload["driver_id"] == "31337"
    assert payload["last_committed_batch"] == 41 and payload["error_class"] == "STREAM_FAILED"
    assert payload["subject"].startswith("[airflow-streaming] orders-etl FAILED: [STREAM_FAILED]")
    assert "Last committed batch: 41" in payload["text"]

    port = str(https_server.server_address[1])
    assert any(f"127.0.0.1:{port}" in r.getMessage() for r in caplog.records), "the host is logged"
    no_secret_logged(caplog, "".join(capfd.readouterr()), TOKEN, QUERY_TOKEN, "sig=", "/hooks/streams")


def test_webhook_posts_a_slack_payload_from_an_event_dict(http_server):
    notifier = StreamHttpNotifier(url=http_server.base_url + "/services/T000/B000/XXXX", payload_format="slack")
    notifier({"stream_event": event(kind=EventKind.RESTARTING).to_dict()})

    (request,) = http_server.wait_for(1)
    assert "authorization" not in {k.lower() for k in request["headers"]}
    payload = json.loads(request["body"])
    assert set(payload) == {"text", "blocks"}
    assert payload["text"] == "[airflow-streaming] orders-etl restarting (attempt 2 of 5, next in 40s)"
    assert payload["blocks"][0]["type"] == "header"
    assert "<http://127.0.0.1:4040|Spark UI>" in json.dumps(payload["blocks"])


def test_webhook_url_is_templated(http_server):
    notifier = StreamHttpNotifier(url=http_server.base_url + "/hook/{{ stream_event.stream }}")
    notifier({"stream_event": event()})
    assert http_server.wait_for(1)[0]["path"] == "/hook/orders-etl"


def test_webhook_error_names_status_and_host_but_no_secret(https_server, https_conn, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    https_server.status = 500
    notifier = StreamHttpNotifier(http_conn_id=https_conn, endpoint=f"hook?token={QUERY_TOKEN}")
    with pytest.raises(NotificationError) as info:
        notifier({"stream_event": event()})

    message = str(info.value)
    port = https_server.server_address[1]
    assert "HTTP 500" in message and f"127.0.0.1:{port}" in message
    assert info.value.__cause__ is None and info.value.__context__ is None
    for secret in (TOKEN, QUERY_TOKEN, "token=", "/hook"):
        assert secret not in message
    assert "Bearer ***" in message  # the server's echo, scrubbed
    no_secret_logged(caplog, "".join(capfd.readouterr()), TOKEN, QUERY_TOKEN)


def test_webhook_unreachable_and_redirect_errors_name_the_host_only(http_server):
    # Nothing listens on a port we just closed.
    closed = socketserver.TCPServer(("127.0.0.1", 0), socketserver.BaseRequestHandler)
    port = closed.server_address[1]
    closed.server_close()
    with pytest.raises(NotificationError, match=f"127.0.0.1:{port} unreachable") as info:
        StreamHttpNotifier(url=f"http://127.0.0.1:{port}/x?token={QUERY_TOKEN}", timeout=2)({"stream_event": event()})
    assert QUERY_TOKEN not in str(info.value)

    http_server.status = 307  # redirects are refused, not followed
    with pytest.raises(NotificationError, match="HTTP 307"):
        StreamHttpNotifier(url=http_server.base_url + "/moved")({"stream_event": event()})


@pytest.mark.parametrize("how", ["connection token", "authorization header", "api key header", "url userinfo"])
def test_webhook_refuses_credentials_over_plain_http(http_server, monkeypatch, how, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    base = http_server.base_url
    notifier = {
        "connection token": lambda: StreamHttpNotifier(http_conn_id=webhook_conn(monkeypatch, http_server)),
        "authorization header": lambda: StreamHttpNotifier(url=base + "/h", headers={"Authorization": f"Token {TOKEN}"}),
        "api key header": lambda: StreamHttpNotifier(url=base + "/h", headers={"X-Api-Key": TOKEN}),
        "url userinfo": lambda: StreamHttpNotifier(url=base.replace("://", f"://bot:{TOKEN}@") + "/h"),
    }[how]()
    with pytest.raises(NotificationError, match="refusing to send credentials .* over plain http://") as info:
        notifier({"stream_event": event()})
    assert "https://" in str(info.value) and "allow_insecure_auth" in str(info.value)
    assert f"127.0.0.1:{http_server.server_address[1]}" in str(info.value)
    assert http_server.wait_for(1, timeout=0.5) == []  # nothing was sent
    no_secret_logged(caplog, "".join(capfd.readouterr()) + str(info.value), TOKEN)


def test_webhook_sends_credentials_over_http_only_when_explicitly_allowed(http_server, monkeypatch, caplog):
    caplog.set_level(logging.DEBUG)
    StreamHttpNotifier(url=http_server.base_url + "/h", headers={"Authorization": f"Bearer {TOKEN}"},
                       allow_insecure_auth=True)({"stream_event": event()})
    conn_id = webhook_conn(monkeypatch, http_server, allow_insecure_auth=True)
    StreamHttpNotifier(http_conn_id=conn_id)({"stream_event": event()})
    requests = http_server.wait_for(2)
    assert [r["headers"].get("Authorization") for r in requests] == [f"Bearer {TOKEN}"] * 2
    assert sum("sending credentials over plain http" in r.getMessage() for r in caplog.records) == 2
    no_secret_logged(caplog, "", TOKEN)


def test_webhook_url_userinfo_goes_as_basic_auth_over_https(https_server, tls_ca, caplog):
    caplog.set_level(logging.DEBUG)
    url = https_server.base_url.replace("://", f"://bot:{TOKEN}@") + "/h"
    StreamHttpNotifier(url=url, verify=str(tls_ca["ca"].path))({"stream_event": event()})
    (request,) = https_server.wait_for(1)
    assert request["headers"]["Authorization"] == "Basic " + base64.b64encode(f"bot:{TOKEN}".encode()).decode()
    assert request["path"] == "/h"
    no_secret_logged(caplog, "", TOKEN)


def test_webhook_https_certificate_is_verified(https_server, tls_ca, caplog):
    caplog.set_level(logging.DEBUG)
    # The system's CAs do not know the test CA: refused, with what to do.
    with pytest.raises(NotificationError, match="CERTIFICATE_VERIFY_FAILED") as info:
        StreamHttpNotifier(url=https_server.base_url + "/h", headers={"Authorization": f"Bearer {TOKEN}"},
                           timeout=5)({"stream_event": event()})
    assert "verify=" in str(info.value) and TOKEN not in str(info.value)
    assert https_server.wait_for(1, timeout=0.5) == []
    # Trusting the CA works; turning verification off works too, with a warning.
    StreamHttpNotifier(url=https_server.base_url + "/a", verify=str(tls_ca["ca"].path))({"stream_event": event()})
    StreamHttpNotifier(url=https_server.base_url + "/b", verify=False)({"stream_event": event()})
    assert [r["path"] for r in https_server.wait_for(2)] == ["/a", "/b"]
    assert any("certificate verification is DISABLED" in r.getMessage() for r in caplog.records)


def test_the_deprecated_webhook_alias_warns_and_keeps_its_bearer_token_and_https_default(https_server, tls_ca,
                                                                                         monkeypatch):
    """StreamWebhookNotifier is StreamHttpNotifier now; a connection made for it (the password as a bearer token,
    no schema meaning https, a "headers" mapping) still works."""
    monkeypatch.setenv("AIRFLOW_CONN_OLD_WEBHOOK", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": https_server.server_address[1], "password": TOKEN,
        "extra": {"headers": {"X-Team": "data-platform"}, "verify": str(tls_ca["ca"].path)}}))
    with pytest.warns(DeprecationWarning, match="StreamHttpNotifier"):
        notifier = StreamWebhookNotifier(http_conn_id="old_webhook", endpoint="h", payload_format="slack")
    assert isinstance(notifier, StreamHttpNotifier)
    notifier({"stream_event": event()})
    (request,) = https_server.wait_for(1)
    assert request["headers"]["Authorization"] == f"Bearer {TOKEN}" and request["headers"]["X-Team"] == "data-platform"
    assert set(json.loads(request["body"])) == {"text", "blocks"}
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="exactly one"):
        StreamWebhookNotifier()


# ------------------------------------------------------------------------------------------ SMTP servers
# aiosmtpd servers on 127.0.0.1, in a thread each: STARTTLS, implicit TLS, and one without TLS at all;
# AUTH required everywhere. Every command verb a server receives is recorded, so a test can prove that
# a client never sent AUTH.


class _RecordingSMTP(SMTP):
    """aiosmtpd's SMTP session, recording every command verb it receives."""

    def __init__(self, handler: Any, *, record: list[str], **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self._smtp_methods = {verb: self._recorded(verb, method, record) for verb, method in self._smtp_methods.items()}

    @staticmethod
    def _recorded(verb: str, method: Any, record: list[str]) -> Any:
        async def call(arg: str) -> Any:
            record.append(verb)
            return await method(arg)

        return call


class SMTPTestServer:
    """One aiosmtpd server: ``mode`` ``"starttls"``, ``"ssl"`` (implicit TLS) or ``"plain"`` (no TLS offered)."""

    def __init__(self, mode: str, cert: ServerCert | None = None, mechanisms: tuple[str, ...] = ("LOGIN", "PLAIN")):
        self.mode = mode
        self.messages: list[dict[str, Any]] = []
        self.commands: list[str] = []
        self.auth_attempts: list[tuple[str, str, bool]] = []
        with socket.socket() as probe:  # a free port (aiosmtpd's controller needs one up front)
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        kwargs: dict[str, Any] = {
            "auth_required": True, "authenticator": self._authenticate,
            "auth_exclude_mechanism": [m for m in ("LOGIN", "PLAIN") if m not in mechanisms],
        }
        if mode == "starttls":
            kwargs.update(tls_context=cert.server_context(), require_starttls=True, auth_require_tls=True)
        elif mode == "ssl":
            kwargs.update(ssl_context=cert.server_context(), auth_require_tls=False)
        else:
            kwargs.update(auth_require_tls=False)  # advertises AUTH in cleartext, as careless servers do
        server = self

        class Controller(_Controller):
            def factory(self) -> SMTP:
                return _RecordingSMTP(self.handler, record=server.commands, **self.SMTP_kwargs)

        self.controller = Controller(self, hostname="127.0.0.1", port=self.port, **kwargs)

    def _authenticate(self, smtp: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
        user, password = auth_data.login.decode(), auth_data.password.decode()
        ok = (user, password) == (SMTP_USER, SMTP_PASSWORD)
        self.auth_attempts.append((mechanism, user, ok))
        return AuthResult(success=ok, handled=False)  # handled=False: aiosmtpd answers 235 or 535

    async def handle_DATA(self, smtp: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd's hook
        self.messages.append({"mail_from": envelope.mail_from, "rcpt_tos": list(envelope.rcpt_tos),
                              "data": envelope.content.decode("utf-8", "replace"),
                              "tls": session.ssl is not None or smtp.transport.get_extra_info("ssl_object") is not None})
        return "250 OK: queued"

    def __enter__(self) -> SMTPTestServer:
        self.controller.start()
        self.commands.clear()  # the controller's own start-up probe is no client
        return self

    def __exit__(self, *exc: object) -> None:
        self.controller.stop()


@pytest.fixture
def smtp_server(request, tls_ca) -> Iterator[SMTPTestServer]:
    """``request.param``: ``(mode, certificate name)`` or just the mode (certificate ``good``)."""
    param = getattr(request, "param", "starttls")
    mode, cert = param if isinstance(param, tuple) else (param, "good")
    with SMTPTestServer(mode, tls_ca[cert]) as server:
        yield server


def smtp_conn(monkeypatch, server: SMTPTestServer, password: str = SMTP_PASSWORD, ca: Any = None, **extra: Any) -> str:
    """An SMTP provider connection for ``server`` (``disable_ssl`` for STARTTLS, ``disable_tls`` for implicit
    TLS, unless ``extra`` says otherwise); ``ca``: trust that CA (``SSL_CERT_FILE``), else the system's CAs."""
    mode = {"starttls": {"disable_ssl": True}, "ssl": {"disable_tls": True}}.get(server.mode, {"disable_ssl": True})
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_TEST", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": server.port, "login": SMTP_USER, "password": password,
        "extra": {**mode, "retry_limit": 0, "timeout": 10, **extra},
    }))
    if ca is not None:
        monkeypatch.setenv("SSL_CERT_FILE", str(ca.path))
    else:
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    return "smtp_test"


def received(server: SMTPTestServer) -> email.message.EmailMessage:
    (message,) = server.messages
    return email.message_from_string(message["data"], policy=email.policy.default)


def body_of(message: email.message.EmailMessage) -> str:
    return message.get_body(("html", "plain")).get_content()


@pytest.mark.parametrize("mechanism", ["PLAIN", "LOGIN"])
def test_email_over_starttls_with_auth(smtp_server, tls_ca, mechanism, monkeypatch, caplog, capfd):
    smtp_server.controller.SMTP_kwargs["auth_exclude_mechanism"] = [m for m in ("LOGIN", "PLAIN") if m != mechanism]
    caplog.set_level(logging.DEBUG)
    notifier = StreamSmtpNotifier(to=["oncall@example.test", "data@example.test"],
                                  smtp_conn_id=smtp_conn(monkeypatch, smtp_server, ca=tls_ca["ca"]))
    notifier({"stream_event": event(suppressed_count=2, suppressed_since=1741082400.0)})

    assert smtp_server.auth_attempts == [(mechanism, SMTP_USER, True)]
    assert smtp_server.commands.index("STARTTLS") < smtp_server.commands.index("AUTH")
    (envelope,) = smtp_server.messages
    assert envelope["tls"] and envelope["mail_from"] == SMTP_USER  # the login is an address: it is the sender
    assert envelope["rcpt_tos"] == ["oncall@example.test", "data@example.test"]
    message = received(smtp_server)
    assert "oncall@example.test" in message["To"] and "data@example.test" in message["To"]
    assert message["From"] == SMTP_USER
    assert message["Subject"] == ("[airflow-streaming] orders-etl FAILED: [STREAM_FAILED] Query orders terminated "
                                  "with exception: disk full (attempt 2 of 5, next in 40s)")
    body = body_of(message)
    for expected in ("orders-etl", "v7", "local-1741082520000", "31337", "Last committed batch: 41",
                     "disk full", "STREAM_FAILED", "driver exited with code 1", "Spark UI: http://127.0.0.1:4040",
                     "(2 similar events suppressed since 10:00)"):
        assert expected in body, expected
    assert any(f"127.0.0.1:{smtp_server.port} (STARTTLS, certificate verified" in r.getMessage()
               for r in caplog.records)
    no_secret_logged(caplog, "".join(capfd.readouterr()), SMTP_PASSWORD)


@pytest.mark.parametrize("smtp_server", ["ssl"], indirect=True)
def test_email_over_implicit_tls_with_auth(smtp_server, tls_ca, monkeypatch, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    conn_id = smtp_conn(monkeypatch, smtp_server, ca=tls_ca["ca"])
    StreamSmtpNotifier(to="oncall@example.test", smtp_conn_id=conn_id)({"stream_event": event()})
    assert smtp_server.auth_attempts[0][1:] == (SMTP_USER, True)
    assert "STARTTLS" not in smtp_server.commands and received(smtp_server)["To"] == "oncall@example.test"
    assert smtp_server.messages[0]["tls"]
    assert any("(SSL, certificate verified" in r.getMessage() for r in caplog.records)
    no_secret_logged(caplog, "".join(capfd.readouterr()), SMTP_PASSWORD)


@pytest.mark.parametrize("smtp_server", ["plain"], indirect=True)
def test_no_auth_over_cleartext_unless_explicitly_allowed(smtp_server, monkeypatch, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    notifier = StreamSmtpNotifier(to="oncall@example.test", smtp_conn_id="smtp_test")

    # STARTTLS required (the SMTP provider's default when implicit TLS is off): a server without it is
    # refused after EHLO, before any AUTH.
    smtp_conn(monkeypatch, smtp_server)
    with pytest.raises(NotificationError, match="does not offer STARTTLS") as info:
        notifier({"stream_event": event()})
    assert f"127.0.0.1:{smtp_server.port}" in str(info.value)
    assert "disable_tls" in str(info.value) and "allow_plaintext_auth" in str(info.value)
    assert "EHLO" in smtp_server.commands and "AUTH" not in smtp_server.commands
    assert smtp_server.auth_attempts == [] and smtp_server.messages == []
    # The provider's default, implicit TLS, fails at the handshake: no AUTH either.
    smtp_conn(monkeypatch, smtp_server, disable_ssl=False)
    with pytest.raises(NotificationError, match=r"\(SSL\)"):
        notifier({"stream_event": event()})
    assert smtp_server.auth_attempts == [] and smtp_server.messages == []

    # TLS disabled but plaintext AUTH not allowed: refused before connecting at all.
    smtp_server.commands.clear()
    smtp_conn(monkeypatch, smtp_server, disable_tls=True)
    with pytest.raises(NotificationError, match="refusing to send the login .* without TLS") as info:
        notifier({"stream_event": event()})
    assert "allow_plaintext_auth: true" in str(info.value)
    assert smtp_server.commands == [] and smtp_server.auth_attempts == [] and smtp_server.messages == []

    # Explicitly allowed: the same server takes the login and the mail (so the refusals above were ours).
    smtp_conn(monkeypatch, smtp_server, disable_tls=True, allow_plaintext_auth=True)
    notifier({"stream_event": event()})
    assert "AUTH" in smtp_server.commands and smtp_server.auth_attempts[0][1:] == (SMTP_USER, True)
    assert not smtp_server.messages[0]["tls"]
    assert any("sending the login in cleartext" in r.getMessage() for r in caplog.records)
    no_secret_logged(caplog, "".join(capfd.readouterr()) + str(info.value), SMTP_PASSWORD)


@pytest.mark.parametrize("smtp_server", [("starttls", "wrong_name"), ("ssl", "wrong_name")], indirect=True)
def test_certificate_mismatch_fails_unless_verification_is_disabled(smtp_server, tls_ca, monkeypatch, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    notifier = StreamSmtpNotifier(to="oncall@example.test", smtp_conn_id="smtp_test")

    # Trusted CA, but the certificate is for mail.example.test, not 127.0.0.1.
    smtp_conn(monkeypatch, smtp_server, ca=tls_ca["ca"])
    with pytest.raises(NotificationError, match="SSLCertVerificationError") as mismatch:
        notifier({"stream_event": event()})
    assert "127.0.0.1" in str(mismatch.value) and "SSL_CERT_FILE" in str(mismatch.value)
    # An untrusted CA (the system's CAs only) fails too.
    smtp_conn(monkeypatch, smtp_server)
    with pytest.raises(NotificationError, match="CERTIFICATE_VERIFY_FAILED") as untrusted:
        notifier({"stream_event": event()})
    assert "AUTH" not in smtp_server.commands and smtp_server.auth_attempts == [] and smtp_server.messages == []

    # Verification explicitly disabled (the SMTP provider's ssl_context: none): sent, with a warning.
    smtp_conn(monkeypatch, smtp_server, ssl_context="none")
    notifier({"stream_event": event()})
    assert len(smtp_server.messages) == 1 and smtp_server.messages[0]["tls"]
    assert [ok for _, _, ok in smtp_server.auth_attempts] == [True]
    assert any("certificate verification is DISABLED" in r.getMessage() for r in caplog.records)
    no_secret_logged(caplog, "".join(capfd.readouterr()) + str(mismatch.value) + str(untrusted.value), SMTP_PASSWORD)


def test_email_from_email_and_prefix_and_a_failure_context(smtp_server, tls_ca, monkeypatch):
    class TI:
        dag_id, task_id, run_id = "orders_dag", "deploy", "manual__1"
        log_url = "http://localhost:8080/dags/orders_dag/runs/manual__1/tasks/deploy"

    notifier = StreamSmtpNotifier(to="oncall@example.test",
                                  smtp_conn_id=smtp_conn(monkeypatch, smtp_server, ca=tls_ca["ca"]),
                                  from_email="streams@example.test", subject_prefix="[prod]")
    notifier({"ti": TI(), "exception": RuntimeError("boom: password=hunter2\ntraceback line")})
    message = received(smtp_server)
    assert message["From"] == "streams@example.test"
    assert message["Subject"] == "[prod] orders_dag.deploy FAILED: [RuntimeError] boom: password=***"
    body = body_of(message)
    assert "Airflow task log: http://localhost:8080/dags/orders_dag/runs/manual__1/tasks/deploy" in body
    assert "hunter2" not in body and "traceback line" not in body


def test_email_bad_credentials_raise_without_the_password(smtp_server, tls_ca, monkeypatch, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-pw-0b7d9e21"
    notifier = StreamSmtpNotifier(to=["oncall@example.test"], smtp_conn_id=smtp_conn(
        monkeypatch, smtp_server, wrong, ca=tls_ca["ca"]))
    with pytest.raises(NotificationError) as info:
        notifier({"stream_event": event()})
    assert f"SMTP 127.0.0.1:{smtp_server.port}" in str(info.value) and "SMTPAuthenticationError" in str(info.value)
    assert smtp_server.auth_attempts and not smtp_server.auth_attempts[0][2]
    assert wrong not in str(info.value) and info.value.__context__ is None and info.value.__cause__ is None
    assert smtp_server.messages == []
    no_secret_logged(caplog, "".join(capfd.readouterr()), wrong)


def test_email_configuration_errors(monkeypatch):
    with pytest.raises(ValueError, match="recipient"):
        StreamSmtpNotifier(to=[])
    notifier = StreamSmtpNotifier(to="oncall@example.test", smtp_conn_id="smtp_bad")
    for extra, match in (({"ssl": True}, "extra ssl"), ({"starttls": True}, "extra starttls"),
                         ({"verify": "/etc/ca.pem"}, "extra verify"),
                         ({"ssl_context": "lax"}, "ssl_context")):
        monkeypatch.setenv("AIRFLOW_CONN_SMTP_BAD", json.dumps({"conn_type": "smtp", "host": "127.0.0.1",
                                                                "port": 1, "extra": extra}))
        with pytest.raises(ValueError, match=match):
            notifier({"stream_event": event()})


def test_the_deprecated_email_alias_warns_and_sends_through_the_provider(smtp_server, tls_ca, monkeypatch):
    with pytest.warns(DeprecationWarning, match="StreamSmtpNotifier"):
        notifier = StreamEmailNotifier(to="oncall@example.test",
                                       smtp_conn_id=smtp_conn(monkeypatch, smtp_server, ca=tls_ca["ca"]))
    assert isinstance(notifier, StreamSmtpNotifier)
    notifier({"stream_event": event()})
    assert received(smtp_server)["Subject"].startswith("[airflow-streaming] orders-etl FAILED")
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="recipient"):
        StreamEmailNotifier(to=[])


# ------------------------------------------------------------------- on_failure_callback in a real DAG run

DAG_FILE = '''
from __future__ import annotations

import pendulum

from airflow.sdk import DAG, task

from airflow_streaming.notifications import StreamHttpNotifier

with DAG(
    dag_id="notify_on_failure_demo",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    default_args={{"retries": 0}},
):

    @task(on_failure_callback=StreamHttpNotifier(url="{url}"))
    def explode():
        raise RuntimeError("[STREAM_FAILED] orders query terminated: disk full\\nsecond line of the trace")

    explode()
'''


@pytest.mark.airflow
def test_notifier_as_on_failure_callback_in_a_dag_run(tmp_path, http_server, airflow_db):
    dags = tmp_path / "dags"
    dags.mkdir()
    url = f"{http_server.base_url}/hook?token={QUERY_TOKEN}"
    (dags / "notify_on_failure_demo.py").write_text(textwrap.dedent(DAG_FILE.format(url=url)))
    env = {**os.environ, "AIRFLOW_HOME": airflow_db, "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "notify_on_failure_demo"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr

    requests = http_server.wait_for(1, timeout=5)
    assert len(requests) == 1, output[-6000:]
    assert requests[0]["path"] == f"/hook?token={QUERY_TOKEN}"
    payload = json.loads(requests[0]["body"])
    assert payload["kind"] == "FAILED"
    assert payload["dag_id"] == "notify_on_failure_demo" and payload["task_id"] == "explode"
    assert payload["stream"] == "notify_on_failure_demo.explode"
    assert payload["error_first_line"] == "[STREAM_FAILED] orders query terminated: disk full"
    assert payload["error_class"] == "STREAM_FAILED"
    assert payload["run_id"] and "/dags/notify_on_failure_demo/runs/" in payload["links"]["airflow_log"]
    assert "second line" not in payload["text"]
    # The task log names the webhook's host, never its query token.
    assert f"127.0.0.1:{http_server.server_address[1]}" in output, output[-6000:]
    assert QUERY_TOKEN not in output
