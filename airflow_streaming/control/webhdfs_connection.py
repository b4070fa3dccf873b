"""How the Airflow side reaches a NameNode's WebHDFS endpoint: settings, credentials, the HdfsCLI client.

:class:`WebHdfsSettings` come from an Airflow connection of the HDFS provider's ``webhdfs`` type or from
a ``webhdfs://host:port`` URI (:func:`settings_for` picks one for a location); :func:`build_client`
turns them into an HdfsCLI client (``hdfs.InsecureClient``, or ``KerberosClient`` when ``hdfs[kerberos]``
is installed and asked for). The storage over that client is
:class:`~airflow_streaming.control.webhdfs.WebHdfsStorage`.

Credentials (the connection's password, sent as HTTP Basic auth as the HDFS provider does) go only
over TLS (``use_ssl``) unless the connection's extra ``allow_plain_http: true`` says otherwise
(:class:`PlainHttpCredentialsError` before any request), and only to the NameNode(s) of the settings:
a redirect (``OPEN``, ``CREATE``) to a DataNode or any other scheme, host or port gets no
``Authorization`` header unless the extra ``trusted_redirect_hosts`` lists that host (``host`` or
``host:port``; still TLS only unless plain http is allowed). A normal HDFS DataNode authenticates the
redirect by the delegation token in its query string, never by the password.
"""

from __future__ import annotations

import errno
import getpass
import logging
import os
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from airflow_streaming.control.storage import StorageError

log = logging.getLogger(__name__)

DEFAULT_CONN_ID = "webhdfs_default"
DEFAULT_PORT = 9870
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 30.0


@dataclass(frozen=True)
class WebHdfsSettings:
    """Where the NameNode's WebHDFS endpoint is and how to talk to it.

    Built from an Airflow connection of the HDFS provider's ``webhdfs`` type
    (:meth:`from_connection`) or from a ``webhdfs://host:port`` URI (:meth:`from_uri`).
    """

    hosts: tuple[str, ...]
    """NameNode hosts; more than one for HA (tried in turn on connection errors and StandbyException).
    An entry may carry its own port (``nn2:9871``)."""
    port: int = DEFAULT_PORT
    user: str | None = None
    """The HDFS user (``user.name``); default ``HADOOP_USER_NAME`` or the OS user."""
    password: str | None = field(default=None, repr=False)
    """Sent as HTTP basic auth (e.g. through a Knox gateway), like the HDFS provider does. Never logged."""
    use_ssl: bool = False
    verify: bool | str = True
    """TLS certificate check: ``True``, ``False`` or a CA bundle path (the HDFS provider defaults to False)."""
    cert: str | None = None
    key: str | None = None
    path_prefix: str | None = None
    """The connection's ``schema``, appended to the base URL (a gateway path), as the HDFS provider does."""
    kerberos: bool = False
    connect_timeout: float = CONNECT_TIMEOUT
    read_timeout: float = READ_TIMEOUT
    source: str = ""
    """Where these settings came from, for messages (``connection 'webhdfs_default'``, ``URI ...``)."""
    allow_plain_http: bool = False
    """Send the password over plain http too (extra ``allow_plain_http``; a trusted network only)."""
    trusted_redirect_hosts: tuple[str, ...] = ()
    """Redirect targets other than the NameNodes that may receive the password (``host`` or ``host:port``;
    extra ``trusted_redirect_hosts``, a list or a comma-separated string)."""

    @property
    def urls(self) -> list[str]:
        scheme = "https" if self.use_ssl else "http"
        prefix = f"/{self.path_prefix.strip('/')}" if self.path_prefix else ""
        return [f"{scheme}://{host if ':' in host else f'{host}:{self.port}'}{prefix}" for host in self.hosts]

    @property
    def effective_user(self) -> str:
        return self.user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()

    @classmethod
    def from_uri(cls, location: str) -> WebHdfsSettings:
        """Settings for ``webhdfs://host[:port]/...`` (port default 9870)."""
        parsed = urlparse(location)
        if parsed.scheme != "webhdfs" or not parsed.hostname:
            raise ValueError(f"{location!r} does not name a WebHDFS NameNode (webhdfs://host:port/...)")
        return cls(hosts=(parsed.hostname,), port=parsed.port or DEFAULT_PORT, source=f"URI {location}")

    @classmethod
    def from_connection(cls, conn: Any, conn_id: str) -> WebHdfsSettings:
        """Settings from an Airflow connection: host (comma-separated for HA), port, login, password,
        schema, and ``extra`` ``use_ssl``, ``verify``, ``cert``, ``key`` (as the HDFS provider reads
        them), plus ``kerberos``, ``timeout`` and ``connect_timeout`` (seconds)."""
        extra = dict(getattr(conn, "extra_dejson", None) or {})
        hosts = tuple(h.strip() for h in (conn.host or "").split(",") if h.strip())
        if not hosts:
            raise ValueError(f"the Airflow connection {conn_id!r} has no host: set the NameNode host(s)")
        verify: bool | str = extra.get("verify", True)
        if isinstance(verify, str) and verify.lower() in ("true", "false"):
            verify = verify.lower() == "true"
        kerberos = _truthy(extra.get("kerberos")) or _airflow_security_is_kerberos()
        return cls(
            hosts=hosts, port=int(conn.port or DEFAULT_PORT), user=conn.login or None,
            password=conn.password or None, use_ssl=_truthy(extra.get("use_ssl")), verify=verify,
            cert=extra.get("cert"), key=extra.get("key"), path_prefix=conn.schema or None, kerberos=kerberos,
            connect_timeout=float(extra.get("connect_timeout", CONNECT_TIMEOUT)),
            read_timeout=float(extra.get("timeout", READ_TIMEOUT)), source=f"connection {conn_id!r}",
            allow_plain_http=_truthy(extra.get("allow_plain_http")),
            trusted_redirect_hosts=_host_list(extra.get("trusted_redirect_hosts"), conn_id))


class PlainHttpCredentialsError(StorageError, ValueError):
    """A WebHDFS connection with a password but without TLS, and without ``allow_plain_http``: the
    password would cross the network readable by anyone on the path. Nothing was sent. A ``ValueError``
    too: retrying cannot fix a connection."""


def _host_list(value: Any, conn_id: str) -> tuple[str, ...]:
    if value in (None, "", []):
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)) or not all(isinstance(i, str) for i in items):
        raise ValueError(f"the Airflow connection {conn_id!r}: extra trusted_redirect_hosts must be a list of "
                         f"host or host:port strings (or one comma-separated string), got {value!r}")
    return tuple(i.strip().lower() for i in items if i.strip())


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int | None]:
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    try:
        port = parsed.port
    except ValueError:
        port = -1  # an unparsable port matches nothing
    return scheme, (parsed.hostname or "").lower(), port if port is not None else _DEFAULT_PORTS.get(scheme)


@dataclass(frozen=True)
class CredentialScope:
    """Where the password may go: the NameNodes' own origins (scheme, host, port), plus the trusted
    redirect hosts over TLS (over plain http too when allowed)."""

    origins: frozenset[tuple[str, str, int | None]]
    trusted_hosts: tuple[str, ...] = ()
    allow_plain_http: bool = False

    @classmethod
    def of(cls, settings: WebHdfsSettings) -> CredentialScope:
        return cls(frozenset(_origin(u) for u in settings.urls), settings.trusted_redirect_hosts,
                   settings.allow_plain_http)

    def allows(self, url: str) -> bool:
        scheme, host, port = _origin(url)
        if scheme not in ("https", "http") or (scheme == "http" and not self.allow_plain_http):
            return False
        if (scheme, host, port) in self.origins:
            return True
        return host in self.trusted_hosts or f"{host}:{port}" in self.trusted_hosts


def _scoped_session(user: str, password: str, scope: CredentialScope) -> Any:
    """A requests session whose Basic auth is attached only to URLs ``scope`` allows: the first request
    and every redirect it follows (requests keeps a header on some redirects, e.g. to another port of the
    same host over https, and the DataNode step of ``CREATE`` is a request of its own)."""
    import requests
    from requests.auth import AuthBase, HTTPBasicAuth

    basic = HTTPBasicAuth(user, password)

    class ScopedBasicAuth(AuthBase):
        def __call__(self, request: Any) -> Any:
            if scope.allows(request.url):
                return basic(request)
            request.headers.pop("Authorization", None)
            return request

    class ScopedSession(requests.Session):
        def rebuild_auth(self, prepared_request: Any, response: Any) -> None:
            super().rebuild_auth(prepared_request, response)
            prepared_request.headers.pop("Authorization", None)
            if scope.allows(prepared_request.url):
                prepared_request.prepare_auth(self.auth)

    session = ScopedSession()
    session.auth = ScopedBasicAuth()
    return session


def _truthy(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in ("true", "1", "yes"))


def _airflow_security_is_kerberos() -> bool:
    try:
        from airflow.configuration import conf

        return str(conf.get("core", "security", fallback="")).lower() == "kerberos"
    except Exception:  # noqa: BLE001 - no Airflow configuration: not Kerberos
        return False


def build_client(settings: WebHdfsSettings) -> Any:
    """An HdfsCLI client for ``settings`` (HA URLs joined with ``;``, HdfsCLI's own syntax)."""
    import requests
    from hdfs import InsecureClient

    if settings.password and not settings.use_ssl and not settings.allow_plain_http:
        raise PlainHttpCredentialsError(errno.EACCES, (
            f"{settings.source or 'WebHDFS'}: refusing to send the connection's password to "
            f"{', '.join(settings.urls)} over plain http, where anyone on the network path can read it. Use TLS "
            "(extra use_ssl: true and the NameNode's https port, 9871 by default), remove the password, or - on a "
            "trusted network only - set extra allow_plain_http: true. Nothing was sent"))
    if settings.password and not settings.use_ssl:
        log.warning("%s sends its password over plain http (extra allow_plain_http is set)",
                    settings.source or ", ".join(settings.urls))
    if settings.password:
        session = _scoped_session(settings.effective_user, settings.password, CredentialScope.of(settings))
    else:
        session = requests.Session()
    # The environment's proxy and CA settings are read once here instead of on every request and redirect
    # (requests scans os.environ each time: a quarter of a health poll's CPU in bench/namenode_bench.py).
    url = ";".join(settings.urls)
    session.proxies = {k: v for u in settings.urls for k, v in requests.utils.get_environ_proxies(u).items()}
    session.trust_env = False
    if settings.use_ssl:
        bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        session.verify = bundle if settings.verify is True and bundle else settings.verify
        if settings.cert:
            session.cert = (settings.cert, settings.key) if settings.key else settings.cert
    timeout = (settings.connect_timeout, settings.read_timeout)
    if settings.kerberos:
        try:
            from hdfs.ext.kerberos import KerberosClient
        except ImportError as exc:
            raise StorageError(errno.ENOSYS, f"{settings.source} asks for Kerberos, but HdfsCLI's Kerberos extension "
                                             "is not installed: pip install 'hdfs[kerberos]' (needs libkrb5-dev)") from exc
        return KerberosClient(url, session=session, timeout=timeout)
    return InsecureClient(url, user=settings.effective_user, session=session, timeout=timeout)


def settings_for(location: str, conn_id: str | None = None) -> WebHdfsSettings:
    """The WebHDFS settings for an ``hdfs://`` or ``webhdfs://`` location.

    ``conn_id`` given: that Airflow connection. ``None``: a ``webhdfs://host:port`` URI names its
    NameNode itself; any other location (``hdfs://`` is the RPC address, which WebHDFS cannot use)
    needs the connection ``webhdfs_default``.
    """
    parsed = urlparse(location)
    if conn_id is None and parsed.scheme == "webhdfs" and parsed.hostname:
        return WebHdfsSettings.from_uri(location)
    wanted = conn_id or DEFAULT_CONN_ID
    try:
        from airflow.sdk import BaseHook
    except ImportError as exc:
        raise StorageError(errno.ENOSYS, f"{location}: the Airflow side reads HDFS through WebHDFS and needs an "
                                         f"Airflow connection {wanted!r}, but Airflow is not importable here") from exc
    try:
        conn = BaseHook.get_connection(wanted)
    except Exception as exc:  # noqa: BLE001 - AirflowNotFoundException and backend errors alike
        example = ('{"conn_type": "webhdfs", "host": "namenode-host", "port": 9870, "login": "hdfs-user"}')
        why = (f"{location} is an HDFS RPC address; the Airflow side talks WebHDFS (the NameNode's HTTP port, "
               "9870 by default), so it needs" if parsed.scheme == "hdfs" else f"{location} needs")
        raise StorageError(errno.ENOENT, f"{why} the Airflow connection {wanted!r} (type webhdfs), which cannot be "
                                         f"loaded: {type(exc).__name__}: {exc}. Define it, e.g. "
                                         f"AIRFLOW_CONN_{wanted.upper()}='{example}', or set the spec's "
                                         "storage_conn_id") from exc
    try:
        return WebHdfsSettings.from_connection(conn, wanted)
    except (ValueError, TypeError) as exc:
        raise StorageError(errno.EINVAL, f"the Airflow connection {wanted!r} for {location}: {exc}") from exc


__all__ = ["CONNECT_TIMEOUT", "DEFAULT_CONN_ID", "DEFAULT_PORT", "READ_TIMEOUT", "CredentialScope",
           "PlainHttpCredentialsError", "WebHdfsSettings", "build_client", "settings_for"]
