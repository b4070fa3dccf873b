"""Stream events through the SMTP, Slack and HTTP providers' own notifiers, against REAL local servers,
and templated fields rendered from the context - directly, through the operators' delivery, and as an
on_failure_callback in a real DAG run.

The servers (HTTP, aiosmtpd with STARTTLS and a test CA) are those of ``test_notifiers.py``. The Slack
and HTTP providers are the ``slack`` / ``http`` extras (in ``test``); a test whose provider cannot be
imported is skipped with the reason (the SMTP provider comes with Airflow).
"""

from __future__ import annotations

import email
import email.policy
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_streaming.notifications import EventKind, StreamHttpNotifier, call_notifier, send_event
from test_notifiers import (  # noqa: F401 - fixtures
    QUERY_TOKEN,
    SMTP_PASSWORD,
    SMTP_USER,
    RecordingHTTPServer,
    SMTPTestServer,
    _serve,
    event,
    http_server,
    tls_ca,
)

REPO = Path(__file__).resolve().parents[2]


def provider(module: str) -> Any:
    """Import a provider notifier module, or skip the test saying which provider is missing."""
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as exc:  # pragma: no cover - the test dependency group installs them
        pytest.skip(f"{module} needs a provider that is not installed here: {exc} "
                    "(the `test` dependency group: scripts/setup_env.sh)")


@pytest.fixture
def starttls_server(tls_ca) -> Iterator[SMTPTestServer]:
    with SMTPTestServer("starttls", tls_ca["good"]) as server:
        yield server


def test_smtp_providers_notifier_sends_the_event_over_starttls(starttls_server, tls_ca, monkeypatch):
    smtp = provider("airflow_streaming.notifications.smtp_provider")
    # The SMTP provider verifies the server against the default trust store: trust the test CA there.
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_ca["ca"].path))
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_PROVIDER_TEST", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": starttls_server.port, "login": SMTP_USER,
        "password": SMTP_PASSWORD, "extra": {"disable_ssl": True, "timeout": 10, "retry_limit": 0}}))
    notifier = smtp.StreamSmtpNotifier(to="oncall@example.test", from_email="streams@example.test",
                                       smtp_conn_id="smtp_provider_test")
    notifier({"stream_event": event()})

    assert starttls_server.commands.index("STARTTLS") < starttls_server.commands.index("AUTH")
    assert starttls_server.auth_attempts[-1] == (starttls_server.auth_attempts[-1][0], SMTP_USER, True)
    (envelope,) = starttls_server.messages
    assert envelope["tls"] and envelope["rcpt_tos"] == ["oncall@example.test"]
    message = email.message_from_string(envelope["data"], policy=email.policy.default)
    assert message["Subject"] == ("[airflow-streaming] orders-etl FAILED: [STREAM_FAILED] Query orders terminated "
                                  "with exception: disk full (attempt 2 of 5, next in 40s)")
    html = message.get_body(("html",)).get_content()
    for expected in ("Last committed batch: 41", "local-1741082520000", "Spark UI: http://127.0.0.1:4040"):
        assert expected in html, expected


def test_smtp_providers_notifier_renders_user_templates_with_the_event(starttls_server, tls_ca, monkeypatch):
    smtp = provider("airflow_streaming.notifications.smtp_provider")
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_ca["ca"].path))
    monkeypatch.setenv("AIRFLOW_CONN_SMTP_PROVIDER_TEST", json.dumps({
        "conn_type": "smtp", "host": "127.0.0.1", "port": starttls_server.port, "login": SMTP_USER,
        "password": SMTP_PASSWORD, "extra": {"disable_ssl": True, "retry_limit": 0}}))
    notifier = smtp.StreamSmtpNotifier(
        to="{{ params.team }}@example.test", from_email="streams@example.test", smtp_conn_id="smtp_provider_test",
        subject="[{{ params.env }}] {{ stream_event.stream }} is {{ stream_event.kind.value }}")
    notifier({"stream_event": event(kind=EventKind.GAVE_UP), "params": {"team": "data-oncall", "env": "prod"}})

    (envelope,) = starttls_server.messages
    assert envelope["rcpt_tos"] == ["data-oncall@example.test"]
    message = email.message_from_string(envelope["data"], policy=email.policy.default)
    assert message["Subject"] == "[prod] orders-etl is GAVE_UP"
    assert "GAVE UP" in message.get_body(("html",)).get_content()  # the default body is the event's


def slack_conn(monkeypatch, server: RecordingHTTPServer) -> str:
    monkeypatch.setenv("AIRFLOW_CONN_SLACK_TEST", json.dumps({
        "conn_type": "slackwebhook", "schema": "http", "host": f"127.0.0.1:{server.server_address[1]}",
        "password": "T000/B000/XXXX"}))
    return "slack_test"


def test_slack_providers_webhook_notifier_posts_the_events_blocks(http_server, monkeypatch):
    slack = provider("airflow_streaming.notifications.slack_provider")
    notifier = slack.StreamSlackWebhookNotifier(slack_webhook_conn_id=slack_conn(monkeypatch, http_server))
    notifier({"stream_event": event(kind=EventKind.RESTARTING)})

    (request,) = http_server.wait_for(1)
    assert request["path"] == "/T000/B000/XXXX"
    payload = json.loads(request["body"])
    assert payload["text"] == "[airflow-streaming] orders-etl restarting (attempt 2 of 5, next in 40s)"
    assert payload["blocks"][0]["type"] == "header"
    assert "<http://127.0.0.1:4040|Spark UI>" in json.dumps(payload["blocks"])


def test_slack_text_template_is_rendered_from_the_context(http_server, monkeypatch):
    slack = provider("airflow_streaming.notifications.slack_provider")
    notifier = slack.StreamSlackWebhookNotifier(
        slack_webhook_conn_id=slack_conn(monkeypatch, http_server),
        text="<!here> {{ stream_event_subject }} (run {{ run_id }})", subject_prefix=None)
    notifier({"stream_event": event(), "run_id": "manual__2026-01-01"})
    payload = json.loads(http_server.wait_for(1)[0]["body"])
    assert payload["text"].startswith("<!here> orders-etl FAILED: [STREAM_FAILED]")
    assert payload["text"].endswith("(run manual__2026-01-01)")


def test_http_providers_notifier_posts_the_event_as_json(http_server, monkeypatch):
    http = provider("airflow_streaming.notifications.http_provider")
    monkeypatch.setenv("AIRFLOW_CONN_HTTP_EVENTS_TEST", json.dumps({
        "conn_type": "http", "schema": "http", "host": "127.0.0.1", "port": http_server.server_address[1]}))
    notifier = http.StreamHttpNotifier(http_conn_id="http_events_test", endpoint="events/{{ stream_event.stream }}",
                                       headers={"X-Env": "{{ params.env }}"})
    notifier({"stream_event": event(kind=EventKind.RECOVERED), "params": {"env": "staging"}})

    (request,) = http_server.wait_for(1)
    assert request["path"] == "/events/orders-etl"
    assert {k.lower(): v for k, v in request["headers"].items()}["x-env"] == "staging"
    payload = json.loads(request["body"])
    assert payload["schema"] == "airflow-streaming.event/v1" and payload["kind"] == "RECOVERED"


def test_each_event_renders_the_notifiers_templates_afresh(http_server):
    """The supervisor and upgrade operators deliver many events through one notifier object."""
    notifier = StreamHttpNotifier(url=http_server.base_url + "/hook/{{ stream_event.stream }}/{{ ti_label }}")
    call_notifier(notifier, {"stream_event": event(stream="orders-etl"), "ti_label": "supervise"})
    send_event(event(stream="payments"), [notifier])  # the supervisor's own path (no task context)
    paths = [r["path"] for r in http_server.wait_for(2)]
    assert paths == ["/hook/orders-etl/supervise", "/hook/payments/"]
    assert notifier.url.endswith("/hook/{{ stream_event.stream }}/{{ ti_label }}")  # the original is untouched


DAG_FILE = '''
from __future__ import annotations

import pendulum

from airflow.sdk import DAG, task

from airflow_streaming.notifications import StreamHttpNotifier
from airflow_streaming.notifications.slack_provider import StreamSlackWebhookNotifier

with DAG(dag_id="templated_notifiers_demo", schedule=None, start_date=pendulum.datetime(2025, 1, 1, tz="UTC"),
         catchup=False, params={{"hook_base": "{base}"}}, default_args={{"retries": 0}}):

    @task(on_failure_callback=[
        StreamHttpNotifier(url="{{{{ params.hook_base }}}}/hooks/{{{{ dag.dag_id }}}}/{{{{ ti.task_id }}}}?t={token}",
                           headers={{"X-Try": "{{{{ ti.try_number }}}}"}}),
        StreamSlackWebhookNotifier(slack_webhook_conn_id="slack_test",
                                   text="{{{{ ti.task_id }}}} failed: {{{{ stream_event.error_first_line }}}}"),
    ])
    def explode():
        raise RuntimeError("[STREAM_FAILED] orders query terminated: disk full")

    explode()
'''


@pytest.mark.airflow
def test_templated_fields_are_rendered_from_the_task_context_as_on_failure_callback(tmp_path, http_server,
                                                                                    airflow_db, monkeypatch):
    provider("airflow_streaming.notifications.slack_provider")
    slack_conn(monkeypatch, http_server)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "templated_notifiers_demo.py").write_text(
        textwrap.dedent(DAG_FILE.format(base=http_server.base_url, token=QUERY_TOKEN)))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
           "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)}
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "templated_notifiers_demo"], env=env,
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    output = run.stdout + run.stderr

    requests = {r["path"].split("?")[0]: r for r in http_server.wait_for(2, timeout=10)}
    assert set(requests) == {"/hooks/templated_notifiers_demo/explode", "/T000/B000/XXXX"}, output[-6000:]
    webhook = requests["/hooks/templated_notifiers_demo/explode"]
    assert {k.lower(): v for k, v in webhook["headers"].items()}["x-try"] == "1"
    assert json.loads(webhook["body"])["error_first_line"] == "[STREAM_FAILED] orders query terminated: disk full"
    slack_text = json.loads(requests["/T000/B000/XXXX"]["body"])["text"]
    assert slack_text == "explode failed: [STREAM_FAILED] orders query terminated: disk full"
    assert QUERY_TOKEN not in output
