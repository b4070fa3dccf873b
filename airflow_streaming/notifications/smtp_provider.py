"""Stream events by email through the SMTP provider's notifier - the one email path.

:class:`StreamSmtpNotifier` is ``airflow.providers.smtp.notifications.smtp.SmtpNotifier`` (the SMTP
provider, installed with Airflow): the provider's ``smtp`` connection and its extras (implicit TLS
unless ``disable_ssl: true``; STARTTLS unless ``disable_tls: true``; ``ssl_context: "none"`` to skip
certificate checks; ``from_email``, ``timeout``, ``retry_limit``, templates) and its sending code,
whose subject and body default to the stream event's (:func:`render_text`, :func:`render_html`).

What the provider's notifier does not do, and this one adds (the properties
``tests/integration/test_notifiers.py`` proves):

- ``AUTH`` never goes over a connection without TLS (``disable_ssl`` and ``disable_tls`` both set)
  unless the connection's extra ``allow_plaintext_auth: true`` says so: refused before connecting;
- errors name the server and what to do, never the password (nor its base64 forms on the wire), and
  are not chained to the ``smtplib`` exception;
- skipped certificate verification (``ssl_context: "none"``) and cleartext AUTH are logged as warnings;
- without ``from_email`` (argument or extra): the login when it is an address, else
  ``airflow-streaming@<fqdn>``;
- ``async_notify`` runs the same checks (in a worker thread), instead of the provider's aiosmtplib path.

The server's certificate is verified against the process's trust store (the system's CAs, or the
bundle named by ``SSL_CERT_FILE``): the provider has no per-connection CA bundle.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import socket
from collections.abc import Iterable, Mapping
from typing import Any

from airflow.providers.smtp.notifications.smtp import SmtpNotifier

from airflow_streaming.log_masking import register_secrets
from airflow_streaming.notifications.events import SUBJECT_PREFIX, NotificationError, event_template_context
from airflow_streaming.redaction import redact

log = logging.getLogger(__name__)

_TRUE = ("1", "true", "yes", "on")
#: Extras of this provider's former hand-written email notifier that the SMTP provider does not read.
RETIRED_EXTRAS = {
    "ssl": "implicit TLS is the SMTP provider's default (port 465); set disable_tls: true with it",
    "starttls": "for STARTTLS (port 587) set disable_ssl: true",
    "verify": "certificates are verified against the system's CAs (SSL_CERT_FILE names another bundle); "
              "ssl_context: none skips verification",
}


def _flag(extra: Mapping[str, Any], name: str) -> bool:
    value = extra.get(name, False)
    return value.strip().lower() in _TRUE if isinstance(value, str) else bool(value)


def _auth_secrets(login: str | None, password: str | None) -> list[str]:
    """The password and its forms on the wire (AUTH PLAIN and LOGIN are base64), to scrub from errors."""
    if not password:
        return []
    forms = [password, base64.b64encode(password.encode()).decode()]
    if login:
        forms.append(base64.b64encode(f"\0{login}\0{password}".encode()).decode())
    return forms


def transport_of(conn: Any, conn_id: str) -> str:
    """``SSL``, ``STARTTLS`` or ``plain`` for the SMTP provider's extras of ``conn``; :class:`ValueError`
    (how to fix) for an extra the provider does not read, and :class:`NotificationError` (nothing sent)
    for a login that would go over a connection without TLS without ``allow_plaintext_auth``."""
    extra = conn.extra_dejson or {}
    retired = [f"{name} ({hint})" for name, hint in RETIRED_EXTRAS.items() if name in extra]
    if retired:
        raise ValueError(f"SMTP connection {conn_id!r}: extra {', '.join(retired)}: the SMTP provider's extras "
                         "apply (docs/notifications.md); remove the old ones")
    # The provider: implicit TLS unless disable_ssl, then STARTTLS unless disable_tls (after implicit TLS too).
    if extra.get("ssl_context") not in (None, "default", "none"):
        raise ValueError(f"SMTP connection {conn_id!r}: extra ssl_context must be 'default' (verify the server's "
                         f"certificate) or 'none', got {extra['ssl_context']!r}")
    mode = "SSL" if not _flag(extra, "disable_ssl") else "STARTTLS" if not _flag(extra, "disable_tls") else "plain"
    host = f"{conn.host or 'localhost'}:{conn.port or ''}".rstrip(":")
    if conn.login and conn.password and mode == "plain":
        if not _flag(extra, "allow_plaintext_auth"):
            raise NotificationError(
                f"SMTP {host}: refusing to send the login of connection {conn_id!r} over a connection without TLS "
                "(extras disable_ssl and disable_tls are set), where anyone on the network path could read the "
                "password. Use TLS (remove disable_tls: STARTTLS; or disable_ssl: implicit TLS), or if the server is "
                "on a trusted network set extra allow_plaintext_auth: true. Nothing was sent.")
        log.warning("SMTP %s: sending the login in cleartext (extra allow_plaintext_auth)", host)
    if mode != "plain" and extra.get("ssl_context") == "none":
        log.warning("SMTP %s: certificate verification is DISABLED by connection %s (extra ssl_context: none): "
                    "anyone on the network path can impersonate the server", host, conn_id)
    return mode


class StreamSmtpNotifier(SmtpNotifier):
    """Email a stream event with the SMTP provider's :class:`SmtpNotifier`, safely (module docstring).

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
        if not to or (not isinstance(to, str) and not list(to)):
            raise ValueError(f"{type(self).__name__} needs at least one recipient in to=")
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

    def notify(self, context: Any) -> None:
        """Send the email through the provider; :class:`NotificationError` naming the server (never the
        password) when it cannot be sent, or before connecting when the login would go in cleartext."""
        conn = _connection(str(self.smtp_conn_id))
        mode = transport_of(conn, str(self.smtp_conn_id))
        host = f"{conn.host or 'localhost'}:{conn.port or ''}".rstrip(":")
        secrets = _auth_secrets(conn.login, conn.password)
        register_secrets(secrets)
        extra = conn.extra_dejson or {}
        if self.from_email is None and not extra.get("from_email"):
            self.from_email = conn.login if conn.login and "@" in conn.login else f"airflow-streaming@{socket.getfqdn()}"
        log.info("Emailing a stream event via SMTP %s (%s%s)", host, mode,
                 ", certificate verified" if mode != "plain" and extra.get("ssl_context") != "none" else "")
        error: NotificationError | None = None
        self.__dict__.pop("hook", None)  # the provider's hook caches the connection: use the one checked above
        try:
            super().notify(context)
        except Exception as exc:  # noqa: BLE001 - smtplib, ssl, socket and the provider's AirflowException
            if isinstance(exc, ValueError) and not isinstance(exc, OSError):
                raise  # a configuration error (from_email...): named, no credential in it
            reason = redact(str(exc), secrets) or type(exc).__name__
            error = NotificationError(f"SMTP {host} ({mode}): {type(exc).__name__}: {reason}{_hint(exc, mode)}")
        if error is not None:
            raise error  # outside the except block: nothing that might hold a credential is chained
        log.info("SMTP %s accepted the stream event", host)

    async def async_notify(self, context: Any) -> None:
        """Same as :meth:`notify`, in a worker thread (for the triggerer)."""
        await asyncio.to_thread(self.notify, context)


def _connection(conn_id: str) -> Any:
    from airflow.sdk import BaseHook

    return BaseHook.get_connection(conn_id)


def _hint(exc: BaseException, mode: str) -> str:
    text = str(exc)
    if "STARTTLS extension not supported" in text and mode == "SSL":
        return (". The SMTP provider sends STARTTLS after implicit TLS unless extra disable_tls: true; an implicit-TLS "
                "server (port 465) does not offer it: set disable_tls: true")
    if "STARTTLS extension not supported" in text:
        return (". The server does not offer STARTTLS, and the connection requires TLS: nothing was sent, no login "
                "either. Enable STARTTLS on the server, use implicit TLS (remove disable_ssl; set disable_tls), or - "
                "on a trusted network only - set extras disable_tls: true (plus allow_plaintext_auth: true if the "
                "server needs a login)")
    if "CERTIFICATE_VERIFY_FAILED" in text or "certificate verify failed" in text:
        return (". The server's certificate could not be verified: trust its CA (the system's store, or "
                "SSL_CERT_FILE), and check that the connection's host is a name the certificate is for")
    if mode == "SSL" and ("WRONG_VERSION_NUMBER" in text or "wrong version number" in text):
        return (". The server does not speak implicit TLS on this port: for STARTTLS (port 587) set extra "
                "disable_ssl: true")
    return ""
