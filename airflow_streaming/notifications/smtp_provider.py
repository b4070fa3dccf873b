"""Stream events through the SMTP provider's notifier (``apache-airflow-providers-smtp``, installed with Airflow).

:class:`StreamSmtpNotifier` is ``airflow.providers.smtp.notifications.smtp.SmtpNotifier`` - same
connection (the SMTP provider's ``smtp`` connection type and its extras: ``disable_ssl``,
``disable_tls``, ``ssl_context``, ``from_email``, ``timeout``, ``retry_limit``, templates) and same
sending code - whose subject and body default to the stream event's (:func:`render_text`,
:func:`render_html`). Use it where the SMTP provider's connection is already set up; use
:class:`~airflow_streaming.notifications.email.StreamEmailNotifier` for this provider's stricter TLS
policy (STARTTLS required by default, no AUTH over cleartext).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow.providers.smtp.notifications.smtp import SmtpNotifier

from airflow_streaming.notifications.events import SUBJECT_PREFIX, event_template_context


class StreamSmtpNotifier(SmtpNotifier):
    """Email a stream event with the SMTP provider's :class:`SmtpNotifier`.

    Works like any notifier: as a task or DAG callback (a FAILED event is built from the failure
    context) or in an operator's ``notifiers=`` (the event is ``context["stream_event"]``). Templated
    fields (``to``, ``subject``, ``html_content``, ...; see ``SmtpNotifier``) are rendered with the task
    context plus ``stream_event``, ``stream_event_subject``, ``stream_event_text``, ``stream_event_html``
    and ``stream_event_json``.

    :param to: recipient(s) (templated).
    :param subject: the subject (templated); default: the event's subject (``[airflow-streaming] s1 FAILED: ...``).
    :param html_content: the body (templated); default: the event's facts as preformatted text.
    :param subject_prefix: prefix of the default subject (``None``: none).
    :param kwargs: everything else ``SmtpNotifier`` takes (``from_email``, ``smtp_conn_id``, ``cc``, ...).
    """

    def __init__(self, *, to: str | Iterable[str], subject: str | None = None, html_content: str | None = None,
                 subject_prefix: str | None = SUBJECT_PREFIX, **kwargs: Any) -> None:
        super().__init__(to=to, subject=subject, html_content=html_content, **kwargs)
        self.subject_prefix = subject_prefix
        self._default_subject = subject is None
        self._default_body = html_content is None and kwargs.get("template") is None

    def render_template_fields(self, context: Any, jinja_env: Any = None) -> None:
        """Add the event to ``context``, render the templated fields, then fill the event's defaults."""
        event_context = event_template_context(context, self.subject_prefix)
        context.update(event_context)
        super().render_template_fields(context, jinja_env)
        if self._default_subject:
            self.subject = event_context["stream_event_subject"]
        if self._default_body:
            self.html_content = event_context["stream_event_html"]
