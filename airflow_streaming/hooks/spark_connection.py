"""The Spark provider's ``spark`` connection, read the way its ``SparkSubmitHook`` reads it.

A stream whose spec sets no ``master`` takes where and how it is submitted from its ``conn_id``.
Every field the provider's ``SparkSubmitHook._resolve_connection`` reads is honoured, with the same
meaning (``tests/unit/test_spark_connection.py`` compares the two on the same connections):

===========================================  ==================================================================
connection                                   where it lands
===========================================  ==================================================================
host, port, conn type                        the master: ``host`` as is when it holds a scheme (``spark://``,
                                             ``k8s://``, ``yarn``, ``local[2]``) or has no port, else
                                             ``<conn type>://host``; then ``:port``
``deploy-mode``                              the deploy mode (client / cluster)
``queue``                                    ``cluster.queue``: ``spark.yarn.queue`` on YARN
``namespace``                                ``cluster.namespace`` (``spark.kubernetes.namespace`` in the spec's
                                             ``spark_conf`` wins, as in ``SparkSubmitHook``)
``principal``, ``keytab`` (base64)           ``cluster.principal``/``cluster.keytab`` -> ``--principal P
                                             --keytab <0600 file>`` on every spark-submit (local/client, YARN,
                                             Kubernetes); the standalone REST target refuses them
``rest-scheme``, ``rest-port``               ``cluster.rest_scheme``/``rest_port``: the standalone master's REST
                                             submission server (``<scheme>://<master host>:<port>``)
``yarn_resourcemanager_webapp_address``      ``cluster.resourcemanager_url``: the ResourceManager the YARN
                                             target asks (state, kill, find, logs)
``spark-binary``                             ``cluster.spark_binary``; only ``spark-submit``, ``spark2-submit``
                                             or ``spark3-submit``, as in ``SparkSubmitHook``
                                             (:class:`SparkBinaryNotAllowedError` otherwise)
===========================================  ==================================================================

The spec's own ``cluster`` settings win over the connection's. Not reused at run time: constructing
a ``SparkSubmitHook`` needs the cncf.kubernetes provider for a ``k8s://`` master, and it writes the
keytab with the default file mode into the shared temp directory; here it goes to a 0600 file in a
0700 directory. The keytab's content is registered with Airflow's secrets masker and is never put on
a command line, in a record or in a log line - only its file's path is.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.exceptions import SparkBinaryNotAllowedError
from airflow_streaming.private_dir import private_dir

__all__ = ["ConnectionSettings", "allowed_spark_binaries", "allowed_spark_binary", "keytab_file", "master_of",
           "settings_of"]

DEFAULT_REST_SCHEME = "http"
DEFAULT_REST_PORT = 6066
RM_ADDRESS_EXTRA = "yarn_resourcemanager_webapp_address"
KEYTAB_DIR_ENV = "AIRFLOW_STREAMING_KEYTAB_DIR"


@dataclass(frozen=True)
class ConnectionSettings:
    """What a ``spark`` connection says about where and how a stream is submitted."""

    master: str
    deploy_mode: str | None
    cluster: dict[str, Any] = field(default_factory=dict)
    """Deploy-target settings (``queue``, ``namespace``, ``principal``, ``keytab``, ``rest_scheme``,
    ``rest_port``, ``resourcemanager_url``, ``spark_binary``); only those the connection sets."""


def master_of(conn_type: str | None, host: str | None, port: int | None) -> str:
    """The master URL of a connection, as ``SparkSubmitHook`` builds it; ``local[2]`` without a host."""
    if not host:
        return "local[2]" + (f":{port}" if port else "")  # no master at all: this provider's default
    if (conn_type or "spark") == "spark" and ("://" in host or not port):
        master = host
    else:
        master = f"{conn_type}://{host}"
    return f"{master}:{port}" if port else master


def allowed_spark_binaries() -> list[str]:
    """The programs a Spark connection's ``spark-binary`` extra may name: the Spark provider's own list."""
    try:
        from airflow.providers.apache.spark.hooks.spark_submit import ALLOWED_SPARK_BINARIES
    except ImportError:  # a provider version without the list: the same three names
        return ["spark-submit", "spark2-submit", "spark3-submit"]
    return list(ALLOWED_SPARK_BINARIES)


def allowed_spark_binary(value: Any, conn_id: str) -> str:
    """``value`` (a connection's ``spark-binary`` extra) if the Spark provider allows it;
    :class:`SparkBinaryNotAllowedError` otherwise (nothing is run)."""
    allowed = allowed_spark_binaries()
    if value not in allowed:
        raise SparkBinaryNotAllowedError(
            f"the Spark connection {conn_id!r} has extra spark-binary={str(value)[:200]!r}, which is not one of "
            f"{', '.join(allowed)}: a connection does not choose which program the workers run (the Spark "
            "provider's SparkSubmitHook has the same rule). Put one of those on PATH and name it in the extra "
            "(or remove the extra); a DAG may set another program in its spec's cluster.spark_binary. "
            "Nothing was submitted")
    return str(value)


def settings_of(conn: Any, conn_id: str, spark_conf: Mapping[str, Any] | None = None) -> ConnectionSettings:
    """Read connection ``conn`` (an Airflow ``Connection``) named ``conn_id``; :class:`ValueError` naming the
    connection and the extra for a value that cannot be used."""
    extra: Mapping[str, Any] = conn.extra_dejson or {}
    where = f"Spark connection {conn_id!r}"
    cluster: dict[str, Any] = {}
    for key, setting in (("queue", "queue"), ("namespace", "namespace")):
        if extra.get(key):
            cluster[setting] = str(extra[key])
    if extra.get("spark-binary"):
        cluster["spark_binary"] = allowed_spark_binary(extra["spark-binary"], conn_id)
    namespace = (spark_conf or {}).get("spark.kubernetes.namespace")
    if namespace:
        cluster["namespace"] = str(namespace)
    if "rest-scheme" in extra:
        scheme = str(extra["rest-scheme"]).strip().lower()
        if scheme not in ("http", "https"):
            raise ValueError(f"{where}: extra rest-scheme must be http or https, got {extra['rest-scheme']!r}")
        cluster["rest_scheme"] = scheme
    if "rest-port" in extra:
        try:
            port = int(extra["rest-port"])
        except (TypeError, ValueError):
            port = 0
        if not 0 < port < 65536:
            raise ValueError(f"{where}: extra rest-port must be a port number (spark.master.rest.port, default "
                             f"6066), got {extra['rest-port']!r}")
        cluster["rest_port"] = port
    rm = str(extra.get(RM_ADDRESS_EXTRA) or "").strip()
    if rm:
        cluster["resourcemanager_url"] = (rm if "://" in rm else f"http://{rm}").rstrip("/")
    if extra.get("principal"):
        cluster["principal"] = str(extra["principal"])
    if extra.get("keytab"):
        cluster["keytab"] = keytab_file(str(extra["keytab"]), conn_id)
    master = master_of(getattr(conn, "conn_type", None), conn.host, conn.port)
    return ConnectionSettings(master=master, deploy_mode=extra.get("deploy-mode") or None, cluster=cluster)


def keytab_file(base64_keytab: str, conn_id: str) -> str:
    """Write the connection's keytab (base64, as the Spark provider's form stores it) to a 0600 file in a
    0700 directory and return its path; the same content gets the same file. :class:`ValueError` (without
    the content) when it is not base64."""
    from airflow_streaming.log_masking import register_secrets

    register_secrets([base64_keytab])
    try:
        content = base64.b64decode(base64_keytab.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"Spark connection {conn_id!r}: extra keytab is not base64; put the output of "
                         "`base64 -w0 <your keytab>` there (the Spark provider's form does)") from None
    if not content:
        raise ValueError(f"Spark connection {conn_id!r}: extra keytab is empty")
    # The default is this user's private directory under the temp dir (created 0700, refused when it is a
    # symlink, another user's or open to others: airflow_streaming.private_dir).
    directory = os.environ.get(KEYTAB_DIR_ENV) or private_dir("airflow-streaming-keytabs")
    os.makedirs(directory, mode=0o700, exist_ok=True)
    if os.stat(directory).st_uid != os.getuid() or os.stat(directory).st_mode & 0o077:
        raise ValueError(f"{directory} (where keytabs are written) must be a directory of this user with mode "
                         f"0700; fix it or set {KEYTAB_DIR_ENV} to one")
    path = os.path.join(directory, f"{hashlib.sha256(content).hexdigest()[:24]}.keytab")
    try:
        with open(path, "rb") as existing:
            if existing.read() == content:
                return path
    except OSError:
        pass
    staging = f"{path}.{os.getpid()}.tmp"
    fd = os.open(staging, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.replace(staging, path)
    finally:
        if os.path.exists(staging):
            os.unlink(staging)
    return path
