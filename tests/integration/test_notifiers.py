"""The webhook and email notifiers against REAL local servers, and as an on_failure_callback in a real DAG run.

Servers (an HTTP server and a minimal SMTP server written here) listen on 127.0.0.1 ephemeral ports
and are shut down at the end of each test.
"""

from __future__ import annotations

import base64
import email
import email.policy
import json
import logging
import os
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

from airflow_streaming.notifications import (
    EventKind,
    NotificationError,
    StreamEmailNotifier,
    StreamEvent,
    StreamWebhookNotifier,
)

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


# ------------------------------------------------------------------------------------------ HTTP server


class RecordingHTTPServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _RecordingHandler)
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.lock = threading.Lock()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

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


@pytest.fixture
def http_server() -> Iterator[RecordingHTTPServer]:
    server = RecordingHTTPServer()
    thread = threading.Thread(target=server.serve_forever, name="test-http", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.fixture
def http_conn(http_server, monkeypatch) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_WEBHOOK_TEST", json.dumps({
        "conn_type": "http", "host": "127.0.0.1", "port": http_server.server_address[1], "schema": "http",
        "password": TOKEN, "extra": {"headers": {"X-Team": "data-platform"}},
    }))
    return "webhook_test"


def test_webhook_posts_json_with_the_connections_bearer_token(http_server, http_conn, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    notifier = StreamWebhookNotifier(http_conn_id=http_conn, endpoint=f"hooks/streams?sig={QUERY_TOKEN}",
                                     headers={"X-Source": "airflow-streaming"})
    notifier({"stream_event": event()})

    (request,) = http_server.wait_for(1)
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

    port = str(http_server.server_address[1])
    assert any(f"127.0.0.1:{port}" in r.getMessage() for r in caplog.records), "the host is logged"
    no_secret_logged(caplog, "".join(capfd.readouterr()), TOKEN, QUERY_TOKEN, "sig=", "/hooks/streams")


def test_webhook_posts_a_slack_payload_from_an_event_dict(http_server):
    notifier = StreamWebhookNotifier(url=http_server.base_url + "/services/T000/B000/XXXX", payload_format="slack")
    notifier({"stream_event": event(kind=EventKind.RESTARTING).to_dict()})

    (request,) = http_server.wait_for(1)
    assert "authorization" not in {k.lower() for k in request["headers"]}
    payload = json.loads(request["body"])
    assert set(payload) == {"text", "blocks"}
    assert payload["text"] == "[airflow-streaming] orders-etl restarting (attempt 2 of 5, next in 40s)"
    assert payload["blocks"][0]["type"] == "header"
    assert "<http://127.0.0.1:4040|Spark UI>" in json.dumps(payload["blocks"])


def test_webhook_url_is_templated(http_server):
    notifier = StreamWebhookNotifier(url=http_server.base_url + "/hook/{{ stream_event.stream }}")
    notifier({"stream_event": event()})
    assert http_server.wait_for(1)[0]["path"] == "/hook/orders-etl"


def test_webhook_error_names_status_and_host_but_no_secret(http_server, http_conn, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    http_server.status = 500
    notifier = StreamWebhookNotifier(http_conn_id=http_conn, endpoint=f"hook?token={QUERY_TOKEN}")
    with pytest.raises(NotificationError) as info:
        notifier({"stream_event": event()})

    message = str(info.value)
    port = http_server.server_address[1]
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
        StreamWebhookNotifier(url=f"http://127.0.0.1:{port}/x?token={QUERY_TOKEN}", timeout=2)({"stream_event": event()})
    assert QUERY_TOKEN not in str(info.value)

    http_server.status = 307  # redirects are refused, not followed
    with pytest.raises(NotificationError, match="HTTP 307"):
        StreamWebhookNotifier(url=http_server.base_url + "/moved")({"stream_event": event()})


def test_webhook_configuration_errors():
    with pytest.raises(ValueError, match="exactly one"):
        StreamWebhookNotifier()
    with pytest.raises(ValueError, match="exactly one"):
        StreamWebhookNotifier(url="http://x", http_conn_id="y")
    with pytest.raises(ValueError, match="payload_format"):
        StreamWebhookNotifier(url="http://x", payload_format="xml")


# ------------------------------------------------------------------------------------------ SMTP server


class MiniSMTPServer(socketserver.ThreadingTCPServer):
    """Enough SMTP for smtplib: EHLO/HELO, AUTH PLAIN/LOGIN, MAIL, RCPT, DATA, RSET, NOOP, QUIT."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, user: str, password: str, mechanisms: str = "PLAIN LOGIN") -> None:
        super().__init__(("127.0.0.1", 0), _SMTPHandler)
        self.user, self.password, self.mechanisms = user, password, mechanisms
        self.messages: list[dict[str, Any]] = []
        self.auth_attempts: list[tuple[str, str, bool]] = []


class _SMTPHandler(socketserver.StreamRequestHandler):
    server: MiniSMTPServer

    def reply(self, line: str) -> None:
        self.wfile.write(line.encode() + b"\r\n")
        self.wfile.flush()

    def readline(self) -> str:
        return self.rfile.readline(65536).decode("utf-8", "replace").rstrip("\r\n")

    def authenticate(self, mechanism: str, initial: str | None) -> None:
        if mechanism == "PLAIN":
            if not initial:
                self.reply("334 ")
                initial = self.readline()
            _, user, password = base64.b64decode(initial).decode().split("\0")
        elif mechanism == "LOGIN":
            if initial:
                user = base64.b64decode(initial).decode()
            else:
                self.reply("334 " + base64.b64encode(b"Username:").decode())
                user = base64.b64decode(self.readline()).decode()
            self.reply("334 " + base64.b64encode(b"Password:").decode())
            password = base64.b64decode(self.readline()).decode()
        else:
            self.reply("504 unrecognized authentication type")
            return
        ok = (user, password) == (self.server.user, self.server.password)
        self.server.auth_attempts.append((mechanism, user, ok))
        self.authenticated = ok
        self.reply("235 2.7.0 Authentication successful" if ok else "535 5.7.8 Authentication credentials invalid")

    def handle(self) -> None:
        self.authenticated = False
        envelope: dict[str, Any] = {"rcpt_tos": []}
        self.reply("220 127.0.0.1 MiniSMTP ready")
        while True:
            line = self.readline()
            if not line and self.rfile.closed:
                return
            verb, _, arg = line.partition(" ")
            verb = verb.upper()
            if verb == "EHLO":
                self.reply("250-127.0.0.1 hello")
                self.reply(f"250-AUTH {self.server.mechanisms}")
                self.reply("250 8BITMIME")
            elif verb == "HELO":
                self.reply("250 127.0.0.1 hello")
            elif verb == "AUTH":
                mechanism, _, initial = arg.partition(" ")
                self.authenticate(mechanism.upper(), initial or None)
            elif verb == "MAIL":
                if not self.authenticated:
                    self.reply("530 5.7.0 Authentication required")
                    continue
                envelope = {"mail_from": arg.split(":", 1)[1].split()[0].strip("<>"), "rcpt_tos": []}
                self.reply("250 OK")
            elif verb == "RCPT":
                envelope["rcpt_tos"].append(arg.split(":", 1)[1].strip().strip("<>"))
                self.reply("250 OK")
            elif verb == "DATA":
                self.reply("354 End data with <CR><LF>.<CR><LF>")
                lines = []
                while True:
                    data = self.readline()
                    if data == ".":
                        break
                    lines.append(data[1:] if data.startswith("..") else data)
                envelope["data"] = "\r\n".join(lines) + "\r\n"
                self.server.messages.append(envelope)
                self.reply("250 OK: queued")
            elif verb in ("RSET", "NOOP"):
                self.reply("250 OK")
            elif verb == "QUIT":
                self.reply("221 Bye")
                return
            elif not line:
                return
            else:
                self.reply("502 Command not implemented")


@pytest.fixture
def smtp_server(request) -> Iterator[MiniSMTPServer]:
    server = MiniSMTPServer(SMTP_USER, SMTP_PASSWORD, getattr(request, "param", "PLAIN LOGIN"))
    thread = threading.Thread(target=server.serve_forever, name="test-smtp", daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def smtp_conn(monkeypatch, server: MiniSMTPServer, password: str = SMTP_PASSWORD) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_TEST", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": server.server_address[1],
        "login": SMTP_USER, "password": password,
    }))
    return "smtp_test"


@pytest.mark.parametrize("smtp_server", ["PLAIN LOGIN", "LOGIN"], indirect=True)
def test_email_is_sent_with_the_connections_credentials(smtp_server, monkeypatch, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    notifier = StreamEmailNotifier(to=["oncall@example.test", "data@example.test"],
                                   smtp_conn_id=smtp_conn(monkeypatch, smtp_server))
    notifier({"stream_event": event(suppressed_count=2, suppressed_since=1741082400.0)})

    assert [(user, ok) for _, user, ok in smtp_server.auth_attempts] == [(SMTP_USER, True)]
    (received,) = smtp_server.messages
    assert received["mail_from"] == SMTP_USER  # the login is an address: it is the sender
    assert received["rcpt_tos"] == ["oncall@example.test", "data@example.test"]
    message = email.message_from_string(received["data"], policy=email.policy.default)
    assert message["To"] == "oncall@example.test, data@example.test"
    assert message["From"] == SMTP_USER
    assert message["Subject"] == ("[airflow-streaming] orders-etl FAILED: [STREAM_FAILED] Query orders terminated "
                                  "with exception: disk full (attempt 2 of 5, next in 40s)")
    body = message.get_content()
    for expected in ("orders-etl", "v7", "local-1741082520000", "31337", "Last committed batch: 41",
                     "disk full", "STREAM_FAILED", "driver exited with code 1", "Spark UI: http://127.0.0.1:4040",
                     "(2 similar events suppressed since 10:00)"):
        assert expected in body, expected
    assert any(f"127.0.0.1:{smtp_server.server_address[1]}" in r.getMessage() for r in caplog.records)
    no_secret_logged(caplog, "".join(capfd.readouterr()), SMTP_PASSWORD)


def test_email_from_email_and_prefix_and_a_failure_context(smtp_server, monkeypatch):
    class TI:
        dag_id, task_id, run_id = "orders_dag", "deploy", "manual__1"
        log_url = "http://localhost:8080/dags/orders_dag/runs/manual__1/tasks/deploy"

    notifier = StreamEmailNotifier(to="oncall@example.test", smtp_conn_id=smtp_conn(monkeypatch, smtp_server),
                                   from_email="streams@example.test", subject_prefix="[prod]")
    notifier({"ti": TI(), "exception": RuntimeError("boom: password=hunter2\ntraceback line")})
    message = email.message_from_string(smtp_server.messages[0]["data"], policy=email.policy.default)
    assert message["From"] == "streams@example.test"
    assert message["Subject"] == "[prod] orders_dag.deploy FAILED: [RuntimeError] boom: password=***"
    body = message.get_content()
    assert "Airflow task log: http://localhost:8080/dags/orders_dag/runs/manual__1/tasks/deploy" in body
    assert "hunter2" not in body and "traceback line" not in body


def test_email_bad_credentials_raise_without_the_password(smtp_server, monkeypatch, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    wrong = "wrong-pw-0b7d9e21"
    notifier = StreamEmailNotifier(to=["oncall@example.test"], smtp_conn_id=smtp_conn(monkeypatch, smtp_server, wrong))
    with pytest.raises(NotificationError) as info:
        notifier({"stream_event": event()})
    port = smtp_server.server_address[1]
    assert f"SMTP 127.0.0.1:{port}" in str(info.value) and "SMTPAuthenticationError" in str(info.value)
    assert wrong not in str(info.value) and info.value.__context__ is None
    assert smtp_server.messages == []
    no_secret_logged(caplog, "".join(capfd.readouterr()), wrong)


def test_email_configuration_errors():
    with pytest.raises(ValueError, match="recipient"):
        StreamEmailNotifier(to=[])


# ------------------------------------------------------------------- on_failure_callback in a real DAG run

DAG_FILE = '''
from __future__ import annotations

import pendulum

from airflow.sdk import DAG, task

from airflow_streaming.notifications import StreamWebhookNotifier

with DAG(
    dag_id="notify_on_failure_demo",
    schedule=None,
    start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
    catchup=False,
    default_args={{"retries": 0}},
):

    @task(on_failure_callback=StreamWebhookNotifier(url="{url}"))
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
