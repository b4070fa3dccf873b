"""Email stream events through an Airflow SMTP connection with the stdlib's smtplib."""

from __future__ import annotations

import asyncio
import logging
import smtplib
import socket
import ssl
from collections.abc import Iterable, Sequence
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from airflow.sdk import BaseNotifier

from airflow_streaming.notifications.events import (
    SUBJECT_PREFIX,
    NotificationError,
    event_from_context,
    redact,
    render_text,
)

# A stdlib logger: Airflow routes it to the task log, and tests can capture it (caplog).
log = logging.getLogger(__name__)


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("1", "true", "yes", "on")
    return bool(value)


def _recipients(to: str | Iterable[str]) -> list[str]:
    items = [to] if isinstance(to, str) else list(to)
    out = [part.strip() for item in items for part in str(item).replace(";", ",").split(",")]
    return [address for address in out if address]


class StreamEmailNotifier(BaseNotifier):
    """Email a stream event as plain text (:func:`render_text`: subject and body, secrets redacted).

    Sends ``context["stream_event"]`` (a :class:`StreamEvent` or its dict); without one, a FAILED event
    built from the task failure context, so it also works as an ``on_failure_callback``.

    The SMTP connection gives ``host``, ``port``, ``login`` and ``password`` (the password is never
    logged); ``extra`` ``{"ssl": true}`` connects with implicit TLS (default port 465),
    ``{"starttls": true}`` upgrades with STARTTLS (default port 587), neither: plain SMTP (port 25);
    ``{"timeout": 30}`` and ``{"from_email": ...}`` are honoured too.

    :param to: recipient address(es) (templated): a list or a comma-separated string.
    :param smtp_conn_id: the Airflow SMTP connection (templated).
    :param from_email: sender (templated); default: the connection's ``from_email`` extra, else its
        login when it is an address, else ``airflow-streaming@<fqdn>``.
    :param subject_prefix: starts every subject (templated).
    :param timeout: SMTP socket timeout in seconds, unless the connection's extra sets one.
    """

    template_fields: Sequence[str] = ("to", "smtp_conn_id", "from_email", "subject_prefix")

    def __init__(
        self,
        *,
        to: str | Iterable[str],
        smtp_conn_id: str = "smtp_default",
        from_email: str | None = None,
        subject_prefix: str = SUBJECT_PREFIX,
        timeout: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not to or (not isinstance(to, str) and not list(to)):
            raise ValueError("StreamEmailNotifier needs at least one recipient in to=")
        if not smtp_conn_id:
            raise ValueError("StreamEmailNotifier needs an smtp_conn_id")
        self.to = to if isinstance(to, str) else list(to)
        self.smtp_conn_id = smtp_conn_id
        self.from_email = from_email
        self.subject_prefix = subject_prefix
        self.timeout = float(timeout)

    def build_message(self, context: Any, from_email: str) -> EmailMessage:
        """The email for ``context``'s event (no I/O)."""
        event = event_from_context(context)
        subject, body = render_text(event, prefix=self.subject_prefix or None)
        message = EmailMessage()
        message["Subject"] = subject
        message["From"] = from_email
        message["To"] = ", ".join(_recipients(self.to))
        message["Date"] = formatdate(localtime=False)
        message["Message-ID"] = make_msgid(domain=from_email.rpartition("@")[2] or None)
        message["X-Airflow-Streaming-Event"] = f"{event.kind.value} {event.stream}"
        message.set_content(body)
        return message

    def notify(self, context: Any) -> None:
        """Send the email; raise :class:`NotificationError` (naming host and port, never the password)."""
        from airflow.sdk import BaseHook

        conn = BaseHook.get_connection(str(self.smtp_conn_id))
        extra = conn.extra_dejson or {}
        use_ssl, starttls = _as_bool(extra.get("ssl", False)), _as_bool(extra.get("starttls", False))
        if use_ssl and starttls:
            raise ValueError(f"connection {self.smtp_conn_id!r}: set extra ssl or starttls, not both")
        host = conn.host or "localhost"
        port = int(conn.port or (465 if use_ssl else 587 if starttls else 25))
        timeout = float(extra.get("timeout") or self.timeout)
        sender = (self.from_email or extra.get("from_email")
                  or (conn.login if conn.login and "@" in conn.login else None)
                  or f"airflow-streaming@{socket.getfqdn()}")
        recipients = _recipients(self.to)
        if not recipients:
            raise ValueError("StreamEmailNotifier: to= rendered to no recipient")
        message = self.build_message(context, sender)
        mode = "SSL" if use_ssl else "STARTTLS" if starttls else "plain"
        log.info("Emailing %s to %d recipient(s) via SMTP %s:%s (%s%s)", message["X-Airflow-Streaming-Event"],
                      len(recipients), host, port, mode, ", login " + conn.login if conn.login else "")
        secrets = [s for s in (conn.password,) if s]
        error: NotificationError | None = None
        try:
            tls = ssl.create_default_context()
            smtp: smtplib.SMTP = (smtplib.SMTP_SSL(host, port, timeout=timeout, context=tls) if use_ssl
                                  else smtplib.SMTP(host, port, timeout=timeout))
            try:
                smtp.ehlo()
                if starttls:
                    smtp.starttls(context=tls)
                    smtp.ehlo()
                if conn.login and conn.password:
                    smtp.login(conn.login, conn.password)
                smtp.send_message(message, from_addr=sender, to_addrs=recipients)
            finally:
                try:
                    smtp.quit()
                except (smtplib.SMTPException, OSError):
                    smtp.close()
        except (smtplib.SMTPException, OSError) as exc:
            text = str(exc)
            for secret in secrets:
                text = text.replace(secret, "***")
            error = NotificationError(f"SMTP {host}:{port} ({mode}): {type(exc).__name__}: {redact(text)}")
        if error is not None:
            raise error  # outside the except block: nothing that might hold a credential is chained
        log.info("SMTP %s:%s accepted %s", host, port, message["X-Airflow-Streaming-Event"])

    async def async_notify(self, context: Any) -> None:
        """Same as :meth:`notify`, in a worker thread (for the triggerer)."""
        await asyncio.to_thread(self.notify, context)
