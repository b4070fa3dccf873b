"""Email stream events through an Airflow SMTP connection with the stdlib's smtplib - over TLS.

TLS is the default: STARTTLS on port 587 (or 25), implicit TLS (SMTPS) on port 465; the server's
certificate is verified against the system's CAs (or a CA bundle named in the connection) and its
host name. ``AUTH`` is only ever sent over TLS, unless the connection explicitly allows plaintext
authentication. See :class:`SmtpSecurity` for the connection extras, and ``docs/security.md``.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import smtplib
import socket
import ssl
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any

from airflow.sdk import BaseNotifier

from airflow_streaming.log_masking import register_secrets
from airflow_streaming.notifications.events import (
    SUBJECT_PREFIX,
    NotificationError,
    event_from_context,
    render_text,
)
from airflow_streaming.redaction import redact

# A stdlib logger: Airflow routes it to the task log, and tests can capture it (caplog).
log = logging.getLogger(__name__)

SSL, STARTTLS, PLAIN = "SSL", "STARTTLS", "plain"
_DEFAULT_PORTS = {SSL: 465, STARTTLS: 587, PLAIN: 25}
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


def _as_bool(value: Any, name: str = "value") -> bool:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError(f"extra {name} must be true or false, got {value!r}")
    return bool(value)


def _recipients(to: str | Iterable[str]) -> list[str]:
    items = [to] if isinstance(to, str) else list(to)
    out = [part.strip() for item in items for part in str(item).replace(";", ",").split(",")]
    return [address for address in out if address]


@dataclass(frozen=True)
class SmtpSecurity:
    """How to reach an SMTP server safely, from its connection's port and ``extra``.

    Transport (``mode``):

    - ``SSL`` (implicit TLS, SMTPS): ``extra.ssl: true``, or port 465 (unless ``disable_ssl: true``);
    - ``STARTTLS`` (default, port 587): ``extra.starttls: true`` or nothing set. The server must offer
      STARTTLS: a server that does not is refused, before any credential is sent;
    - ``plain``: only with ``extra.disable_tls: true`` (the Airflow SMTP provider's extra; its
      ``disable_ssl`` is honoured too). Default port 25.

    Certificates (``verify``): verified (chain and host name) against the system's CAs by default;
    ``extra.verify`` may name a CA bundle file (PEM) to trust instead, or be ``false`` to skip
    verification (``extra.ssl_context: "none"``, as in the Airflow SMTP provider, does the same) -
    anyone on the network path can then read the password.

    ``AUTH`` over a connection without TLS is refused unless ``extra.allow_plaintext_auth: true``.

    :param mode: ``SSL``, ``STARTTLS`` or ``plain``.
    :param port: the port to connect to (the connection's, else the mode's default).
    :param verify: ``True`` (system CAs), ``False`` (no verification) or a CA bundle path.
    :param allow_plaintext_auth: whether ``AUTH`` may be sent without TLS.
    """

    mode: str
    port: int
    verify: bool | str = True
    allow_plaintext_auth: bool = False

    @classmethod
    def from_connection(cls, port: int | None, extra: Mapping[str, Any], conn_id: str = "smtp") -> SmtpSecurity:
        """Read the transport settings of connection ``conn_id``; :class:`ValueError` names a contradiction."""
        flag = {name: _as_bool(extra.get(name, False), name)
                for name in ("ssl", "starttls", "disable_ssl", "disable_tls", "allow_plaintext_auth")}
        where = f"SMTP connection {conn_id!r}"
        if flag["ssl"] and flag["starttls"]:
            raise ValueError(f"{where}: extra sets both ssl and starttls: ssl is implicit TLS (port 465), starttls "
                             "upgrades a plain connection (port 587); keep one")
        if flag["ssl"] and flag["disable_ssl"]:
            raise ValueError(f"{where}: extra sets both ssl and disable_ssl; keep one")
        if flag["starttls"] and flag["disable_tls"]:
            raise ValueError(f"{where}: extra sets both starttls and disable_tls; keep one")
        if flag["ssl"] or (int(port or 0) == 465 and not flag["disable_ssl"] and not flag["starttls"]):
            mode = SSL
        elif flag["disable_tls"]:
            mode = PLAIN
        else:
            mode = STARTTLS
        return cls(mode=mode, port=int(port or _DEFAULT_PORTS[mode]), verify=cls._verify(extra, where),
                   allow_plaintext_auth=flag["allow_plaintext_auth"])

    @staticmethod
    def _verify(extra: Mapping[str, Any], where: str) -> bool | str:
        context = extra.get("ssl_context")
        if context not in (None, "", "default", "none"):
            raise ValueError(f"{where}: extra ssl_context must be 'default' or 'none', got {context!r}")
        verify = extra.get("verify", True)
        if isinstance(verify, str) and verify.strip().lower() in (*_TRUE, *_FALSE):
            verify = _as_bool(verify, "verify")
        if context == "none":
            if isinstance(verify, str):
                raise ValueError(f"{where}: extra ssl_context 'none' disables verification, verify names a CA "
                                 "bundle; keep one")
            return False
        if isinstance(verify, str):
            if not os.path.isfile(verify):
                raise ValueError(f"{where}: extra verify names the CA bundle {verify!r}, which is not a readable "
                                 "file: give the path of a PEM file with the CA certificate(s) to trust")
            return verify
        return bool(verify)

    @property
    def tls(self) -> bool:
        """Whether the connection is encrypted (implicit TLS or STARTTLS)."""
        return self.mode != PLAIN

    def ssl_context(self) -> ssl.SSLContext:
        """The client TLS context: verification on (system CAs or the CA bundle), or explicitly off."""
        if self.verify is False:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        return ssl.create_default_context(cafile=self.verify if isinstance(self.verify, str) else None)

    def describe(self) -> str:
        """``STARTTLS, certificate verified`` and the like, for logs and errors."""
        if not self.tls:
            return PLAIN
        if self.verify is False:
            return f"{self.mode}, certificate NOT verified"
        return f"{self.mode}, certificate verified" + (" against the connection's CA bundle"
                                                        if isinstance(self.verify, str) else "")


def _auth_secrets(login: str | None, password: str | None) -> list[str]:
    """The password and its forms on the wire (AUTH PLAIN and LOGIN are base64), to scrub from errors."""
    if not password:
        return []
    forms = [password, base64.b64encode(password.encode()).decode()]
    if login:
        forms.append(base64.b64encode(f"\0{login}\0{password}".encode()).decode())
    return forms


class StreamEmailNotifier(BaseNotifier):
    """Email a stream event as plain text (:func:`render_text`: subject and body, secrets redacted).

    Sends ``context["stream_event"]`` (a :class:`StreamEvent` or its dict); without one, a FAILED event
    built from the task failure context, so it also works as an ``on_failure_callback``.

    The SMTP connection gives ``host``, ``port``, ``login`` and ``password`` (the password is never
    logged). The transport is TLS by default - STARTTLS, or implicit TLS on port 465 - with the
    server's certificate verified; ``AUTH`` is refused over a connection without TLS unless allowed.
    :class:`SmtpSecurity` lists the ``extra`` settings (``ssl``, ``starttls``, ``disable_tls``,
    ``disable_ssl``, ``verify``, ``ssl_context``, ``allow_plaintext_auth``); ``timeout`` and
    ``from_email`` are honoured too.

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
        security = SmtpSecurity.from_connection(conn.port, extra, str(self.smtp_conn_id))
        host, port = conn.host or "localhost", security.port
        login, password = conn.login or None, conn.password or None
        secrets = _auth_secrets(login, password)
        register_secrets(secrets)
        wants_auth = bool(login and password)
        if wants_auth and not security.tls and not security.allow_plaintext_auth:
            raise NotificationError(
                f"SMTP {host}:{port}: refusing to send the login of connection {self.smtp_conn_id!r} over a "
                "connection without TLS (extra disable_tls is set), where anyone on the network path could read "
                "the password. Use TLS (remove disable_tls: STARTTLS on port 587, or ssl: true on port 465), or "
                "if the server is on a trusted network set extra allow_plaintext_auth: true. Nothing was sent.")
        timeout = float(extra.get("timeout") or self.timeout)
        sender = (self.from_email or extra.get("from_email")
                  or (login if login and "@" in login else None)
                  or f"airflow-streaming@{socket.getfqdn()}")
        recipients = _recipients(self.to)
        if not recipients:
            raise ValueError("StreamEmailNotifier: to= rendered to no recipient")
        message = self.build_message(context, sender)
        if security.tls and security.verify is False:
            log.warning("SMTP %s:%s: certificate verification is DISABLED by connection %s (extra verify/"
                        "ssl_context): anyone on the network path can impersonate the server", host, port,
                        self.smtp_conn_id)
        if wants_auth and not security.tls:
            log.warning("SMTP %s:%s: sending the login in cleartext (extra allow_plaintext_auth)", host, port)
        log.info("Emailing %s to %d recipient(s) via SMTP %s:%s (%s%s)", message["X-Airflow-Streaming-Event"],
                 len(recipients), host, port, security.describe(), f", login {login}" if wants_auth else "")
        error: NotificationError | None = None
        try:
            self._send(host, security, timeout, login if wants_auth else None, password, message, sender, recipients)
        except NotificationError as exc:
            error = exc
        except (smtplib.SMTPException, OSError) as exc:
            error = NotificationError(f"SMTP {host}:{port} ({security.describe()}): {type(exc).__name__}: "
                                      f"{redact(str(exc), secrets)}{_hint(exc)}")
        if error is not None:
            raise error  # outside the except blocks: nothing that might hold a credential is chained
        log.info("SMTP %s:%s accepted %s", host, port, message["X-Airflow-Streaming-Event"])

    def _send(self, host: str, security: SmtpSecurity, timeout: float, login: str | None, password: str | None,
              message: EmailMessage, sender: str, recipients: list[str]) -> None:
        """Connect, secure, authenticate (only over TLS unless allowed), send, quit."""
        context = security.ssl_context() if security.tls else None
        smtp: smtplib.SMTP = (smtplib.SMTP_SSL(host, security.port, timeout=timeout, context=context)
                              if security.mode == SSL else smtplib.SMTP(host, security.port, timeout=timeout))
        try:
            smtp.ehlo()
            if security.mode == STARTTLS:
                if not smtp.has_extn("starttls"):
                    raise NotificationError(
                        f"SMTP {host}:{security.port} does not offer STARTTLS, and the connection "
                        f"{self.smtp_conn_id!r} requires TLS (the default): nothing was sent, no login either. "
                        "Enable STARTTLS on the server, use implicit TLS (extra ssl: true, port 465), or - on a "
                        "trusted network only - set extra disable_tls: true (plus allow_plaintext_auth: true if the "
                        "server needs a login).")
                smtp.starttls(context=context)
                smtp.ehlo()
            if login and password:
                smtp.login(login, password)
            smtp.send_message(message, from_addr=sender, to_addrs=recipients)
        finally:
            try:
                smtp.quit()
            except (smtplib.SMTPException, OSError):
                smtp.close()

    async def async_notify(self, context: Any) -> None:
        """Same as :meth:`notify`, in a worker thread (for the triggerer)."""
        await asyncio.to_thread(self.notify, context)


def _hint(exc: BaseException) -> str:
    """What to do about a TLS failure."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (". The server's certificate could not be verified: if it is signed by a private CA, trust that CA "
                "with the connection's extra verify: /path/to/ca.pem; check that the connection's host is a name "
                "the certificate is for. (extra verify: false turns verification off - not recommended.)")
    if isinstance(exc, ssl.SSLError):
        return ". The TLS handshake failed: check the port (465 implicit TLS, 587 STARTTLS) and extra ssl/starttls."
    return ""
