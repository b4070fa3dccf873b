"""Declarative description of one managed Spark Structured Streaming stream.

This module is plain Python on purpose: it imports neither Airflow nor
PySpark, because it is used both by the Airflow side (operators, hooks) and by
the Spark driver. PyYAML is only imported by :meth:`StreamSpec.from_yaml`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.application_source import is_fetched
from airflow_streaming.exceptions import SpecError
from airflow_streaming.location import (  # noqa: F401 - re-exported
    _check_location,
    _check_str,
    _same_file_system,
    is_local_location,
    locations_overlap,
)
from airflow_streaming.redaction import is_secret_conf_entry, secret_arguments
from airflow_streaming.spark_lines import check_runtime
from airflow_streaming.stream_assets import check_assets
from airflow_streaming.submit_fields import (
    SUBMIT_FIELDS,
    URI_SCHEMES,
    check_location,
    check_submit_fields,
    check_twins,
    refuse_unsupported,
    shipped_files,
    target_kind,
)

_UNIX_USER = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")

#: Spark conf whose value Spark's launchers put on a JVM's command line (``-D...`` options), in every mode.
JVM_OPTION_KEYS = ("spark.driver.extraJavaOptions", "spark.driver.defaultJavaOptions",
                   "spark.executor.extraJavaOptions", "spark.executor.defaultJavaOptions",
                   "spark.yarn.am.extraJavaOptions")

__all__ = ["BUNDLED_JOBS", "SpecError", "StreamSpec", "as_spec", "parse_duration"]

BUNDLED_JOBS: frozenset[str] = frozenset(
    {"events_etl", "events_etl_v2", "device_signals", "device_signals_v2"}
)
"""Names of the Spark jobs shipped with this provider (``application`` may name one)."""

ROOT_FIELD = "<root>"
#: What stored specs hold in place of a secret (``airflow_streaming.redaction.MASK``).
MASK_VALUE = "***"

_SEGMENT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_MASTER_RE = re.compile(r"^(local(\[(\d+|\*)\])?|spark://.+|yarn|k8s://.+)$")
_DURATION_RE = re.compile(r"^([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*([a-z]*)$")
_DURATION_UNITS: dict[str, float] = {
    "": 1.0,
    **dict.fromkeys(("ms", "msec", "msecs", "millisecond", "milliseconds"), 0.001),
    **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), 1.0),
    **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), 60.0),
    **dict.fromkeys(("h", "hr", "hrs", "hour", "hours"), 3600.0),
}
_DURATION_HINT = "'5 seconds', '500 milliseconds', '2 minutes', '10s', '250ms' or '1m'"
_MAX_HEARTBEAT_INTERVAL = 60.0
#: The shortest lease ttl a spec may ask for, and how many heartbeats it must span at least.
MIN_LEASE_TTL = 30.0
MIN_LEASE_TTL_HEARTBEATS = 6


def _check_lease_ttl(value: Any, heartbeat: float) -> float:
    seconds = parse_duration(value, "lease_ttl")
    lower = max(MIN_LEASE_TTL, MIN_LEASE_TTL_HEARTBEATS * heartbeat)
    if seconds < lower:
        raise SpecError("lease_ttl", f"must be >= {_fmt_seconds(lower)} seconds (at least "
                        f"{_fmt_seconds(MIN_LEASE_TTL)} s and {MIN_LEASE_TTL_HEARTBEATS} heartbeats of "
                        f"{_fmt_seconds(heartbeat)} s), got {_fmt_seconds(seconds)}")
    return seconds


def _type_name(value: Any) -> str:
    return type(value).__name__


def _fmt_seconds(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def parse_duration(value: Any, field: str) -> float:
    """Parse a duration into float seconds.

    Accepts an ``int``/``float`` (seconds; ``bool`` is rejected) or a string
    such as ``"5 seconds"``, ``"500 milliseconds"``, ``"2 minutes"``,
    ``"10s"``, ``"250ms"``, ``"1m"``, ``"1h"`` or a bare number of seconds.
    No range check is done here. Raises :class:`SpecError` naming ``field``.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise SpecError(
            field, f"must be a number of seconds or a duration string, got {_type_name(value)}"
        )
    if isinstance(value, str):
        match = _DURATION_RE.match(value.strip().lower())
        if match is None or match.group(2) not in _DURATION_UNITS:
            raise SpecError(field, f"invalid duration {value!r} (expected e.g. {_DURATION_HINT})")
        seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    else:
        seconds = float(value)
    if not math.isfinite(seconds):
        raise SpecError(field, f"must be a finite number of seconds, got {value!r}")
    return seconds


def _check_segment(value: Any, field: str) -> str:
    """Require a string usable as a single, safe path segment."""
    _check_str(value, field)
    if value in (".", "..") or not _SEGMENT_RE.match(value):
        raise SpecError(
            field,
            f"must be a safe path segment matching {_SEGMENT_RE.pattern} "
            f"(letters, digits, '.', '_', '-'; at most 64 characters), got {value!r}",
        )
    return value


def _check_application(value: Any) -> str:
    _check_str(value, "application")
    if value in BUNDLED_JOBS:
        return value
    if not value.startswith("/") and ":" in value:  # a URI: the schemes and form a dependency may have
        check_location(value, "application", renamed=False)
    if (value.startswith("/") or ":" in value) and value.endswith(".py") and not value.endswith("/.py"):
        return value
    raise SpecError(
        "application",
        f"unknown bundled job {value!r} (bundled: {', '.join(sorted(BUNDLED_JOBS))}) and not an absolute path to a .py file "
        f"nor a URI of one ({', '.join(s + ':' for s in URI_SCHEMES)})",
    )


def _refuse_name_clash(application: str, shipped: tuple[str, ...]) -> None:
    """A fetched ``application`` lands in the driver's SparkFiles directory under its file name: another shipped
    file of that name from elsewhere would clash (Spark refuses a second path for one name)."""
    if not is_fetched(application):
        return
    name = posixpath.basename(application)
    for item in shipped:
        path, _, alias = item.partition("#")
        if item != application and (alias or posixpath.basename(path)) == name:
            raise SpecError("application", f"{application!r} and the shipped file {item!r} have the same file name "
                                           f"{name!r} in the driver's SparkFiles directory: rename one")


def _check_application_args(value: Any) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)):
        raise SpecError("application_args", f"must be a list of strings, got {_type_name(value)}")
    result: list[str] = []
    for index, item in enumerate(value):
        if isinstance(item, str):
            result.append(item)
        elif isinstance(item, (bool, int, float)):
            result.append(str(item))
        else:
            raise SpecError(
                f"application_args[{index}]",
                f"must be a string, number or boolean, got {_type_name(item)}",
            )
    return tuple(result)


def _check_secret_args(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise SpecError("secret_args", f"must be a mapping of option -> secret value, got {_type_name(value)}")
    result: dict[str, str] = {}
    for option, secret in value.items():
        if not isinstance(option, str) or not option.startswith("-"):
            raise SpecError("secret_args", f"keys are the job's options (e.g. '--db-password'), got {option!r}")
        if not isinstance(secret, str):
            raise SpecError(f"secret_args.{option}", f"must be a string, got {_type_name(secret)}")
        result[option] = secret
    return result


def _refuse_secret_arguments(args: tuple[str, ...]) -> None:
    """Plain arguments go on the spark-submit command line (``ps``) and into the specs at rest."""

    # An argument that is exactly the mask (``--password ***``, ``--token=***`` of a stored spec) holds nothing:
    # skipped; a ``***`` never turns the check off for the other arguments.
    found = [i for i in secret_arguments(args) if MASK_VALUE not in (args[i], args[i].partition("=")[2])]
    if found:
        index = found[0]
        option = args[index - 1] if index and args[index - 1].startswith("-") else args[index].split("=", 1)[0]
        raise SpecError(
            f"application_args[{index}]",
            "holds a secret: plain arguments go on the spark-submit command line (readable by every user of the "
            "host) and into the specs stored on shared storage. Pass it as a secret argument instead: "
            f"secret_args={{'{option if option.startswith('-') else '--your-option'}': <value from an Airflow "
            "connection or variable>}} - it travels like secret Spark conf and is appended to the job's arguments "
            "in the driver (docs/security.md)")


def _check_spark_conf(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise SpecError("spark_conf", f"must be a mapping, got {_type_name(value)}")
    result: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise SpecError(
                "spark_conf", f"keys must be non-empty strings, got {_type_name(key)} {key!r}"
            )
        key_field = f"spark_conf.{key}"
        if any(ch.isspace() for ch in key):
            raise SpecError(key_field, "key must not contain whitespace")
        if not key.startswith("spark.") or key == "spark.":
            raise SpecError(key_field, f"key must start with 'spark.', got {key!r}")
        if isinstance(item, bool):
            result[key] = "true" if item else "false"
        elif isinstance(item, (str, int, float)):
            result[key] = str(item)
        else:
            raise SpecError(
                key_field, f"value must be a string, number or boolean, got {_type_name(item)}"
            )
    return result


DEPLOY_MODES = ("client", "cluster")
CLUSTER_SETTINGS = {
    "rest_url": str, "master_ui_url": str, "resourcemanager_url": str, "api_server": str, "namespace": str,
    "image": str, "service_account": str, "runtime_path": str, "python": str, "driver_cores": int,
    "driver_memory": str, "queue": str, "max_app_attempts": int, "attempt_failures_validity_interval": str,
    "spark_binary": str, "submit_args": list, "kube_token_file": str, "kube_ca_file": str, "verify_tls": bool,
    "pod_template_file": str, "archives": list, "supervise": bool,
    # Kerberos (--principal / --keytab on spark-submit) and the standalone REST server's scheme and port;
    # also read from the Spark connection (airflow_streaming.hooks.spark_connection).
    "principal": str, "keytab": str, "rest_scheme": str, "rest_port": int,
    # Kubernetes: a kubeconfig and its context for the API (targets/kube_api.py); credentials over plain http
    # only when allowed (a test cluster).
    "kubeconfig": str, "kube_context": str, "allow_plain_http": bool,
}


def _check_cluster(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise SpecError("cluster", f"must be a mapping of deploy-target settings, got {_type_name(value)}")
    result: dict[str, Any] = {}
    for key, item in value.items():
        if key not in CLUSTER_SETTINGS:
            close = difflib.get_close_matches(str(key), list(CLUSTER_SETTINGS), n=1)
            raise SpecError(f"cluster.{key}", f"unknown setting (known: {', '.join(sorted(CLUSTER_SETTINGS))})"
                            + (f"; did you mean {close[0]!r}?" if close else ""))
        kind = CLUSTER_SETTINGS[key]
        if item is None:
            continue
        if kind is int and (isinstance(item, bool) or not isinstance(item, int) or item < 1):
            raise SpecError(f"cluster.{key}", f"must be a positive integer, got {item!r}")
        if kind is bool and not isinstance(item, bool):
            raise SpecError(f"cluster.{key}", f"must be true or false, got {item!r}")
        if kind is str and (not isinstance(item, str) or not item.strip()):
            raise SpecError(f"cluster.{key}", f"must be a non-empty string, got {item!r}")
        if kind is list and (not isinstance(item, (list, tuple)) or not all(isinstance(i, str) for i in item)):
            raise SpecError(f"cluster.{key}", f"must be a list of strings, got {item!r}")
        if key == "supervise" and item:
            raise SpecError("cluster.supervise", "true is not supported: the project's supervisor restarts a failed "
                            "driver (through the lifecycle, with backoff and attempt limits) and Spark's supervise "
                            "would restart it a second time; remove it (see docs/cluster.md)")
        result[key] = list(item) if kind is list else item
    return result


@dataclass(frozen=True)
class StreamSpec:
    """Declarative, validated description of one managed Structured Streaming stream.

    Constructing an instance (directly, via :meth:`from_dict`,
    :meth:`from_yaml` or :meth:`with_version`) validates and normalises every
    field, raising :class:`SpecError` on the first problem found. Durations
    are stored as float seconds, ``application_args`` as a tuple of strings
    and ``spark_conf`` as a plain ``dict`` of strings.
    """

    name: str
    """Stream name; a safe path segment (``^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$``)."""

    application: str
    """A bundled job name (see :data:`BUNDLED_JOBS`) or an absolute path to a ``.py`` file."""

    checkpoint_location: str
    """Spark checkpoint location: absolute local path or file://, hdfs://, webhdfs:// URI."""

    control_location: str
    """Parent of the stream's control dir (``control_location/name``); rules as for checkpoints."""

    version: str = "v1"
    """Version label of the deployed code/config; a safe path segment."""

    application_args: tuple[str, ...] = ()
    """Arguments passed to the application; scalars are converted with ``str()``."""

    spark_conf: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Extra Spark configuration; keys start with ``spark.``, values are stored as strings."""

    conn_id: str = "spark_default"
    """Id of the Airflow ``spark`` connection used to submit the job."""

    master: str | None = None
    """Optional override of the connection's master.

    One of ``local``, ``local[N]``, ``local[*]``, ``spark://...``, ``yarn``, ``k8s://...``.
    """

    trigger_interval: float = 5.0
    """Micro-batch trigger interval in seconds (>= 0; 0 means as fast as possible)."""

    stop_timeout: float = 120.0
    """Seconds (> 0) to wait for a graceful stop before giving up."""

    startup_timeout: float = 300.0
    """Seconds (> 0) to wait for the stream to report it is running."""

    heartbeat_interval: float = 5.0
    """Seconds (> 0, <= 60) between heartbeats written by the driver."""

    master_ui_url: str | None = None
    """Web UI of a Spark standalone master (default ``http://<master host>:8080``), used to cross-check
    driver liveness with the cluster."""

    health: Mapping[str, float] = field(default_factory=dict, hash=False)
    """Health thresholds overriding the defaults (see ``airflow_streaming.health.thresholds``)."""

    deploy_mode: str | None = None
    """``client`` (default: the driver runs on the submitting host) or ``cluster`` (the driver runs on
    the cluster: standalone through the master's REST server, YARN, Kubernetes)."""

    cluster: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Settings of the deploy target (see ``docs/cluster.md``): ``rest_url``, ``resourcemanager_url``,
    ``namespace``, ``image``, ``service_account``, ``api_server``, ``runtime_path``, ``python``..."""

    storage_conn_id: str | None = None
    """Airflow connection of the WebHDFS NameNode for ``hdfs://`` / ``webhdfs://`` locations
    (default ``webhdfs_default``; the HDFS provider's ``webhdfs`` connection type)."""

    secret_args: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Secret arguments of the job, option -> value (e.g. ``{"--db-password": "{{ conn.db.password }}"}``):
    never on a command line nor in a stored spec; delivered to the driver like secret Spark conf and
    appended to the job's arguments there. Plain ``application_args`` that hold a secret are refused."""

    spark_runtime: Mapping[str, str] | None = field(default=None, hash=False)
    """The Spark this version runs on (``airflow_streaming.spark_runtime``, docs/spark-runtimes.md): ``None``
    for the PySpark installed beside the provider, a release (``"3.5.7"``, stored as ``{"version": "3.5.7"}``)
    or an existing installation ``{"spark_home": ..., "python": ...}``."""

    hot_standby: bool = False
    """Keep a *hot standby* beside the running driver (``docs/failover.md``): a prepared driver of the same
    version (JVM, session, planned query) that takes the stream over when the active driver crashes, so
    that recovery is a query start in a running JVM, not a cold start. Costs a second driver's memory
    and cores while it waits; the supervisor prepares it and records each takeover."""

    lease_ttl: float | None = None
    """Seconds the driver's lease on the stream lives without a renewal (``docs/failover.md``). ``None``: the
    default, ``max(120, 12 x heartbeat_interval)`` (long enough for a NameNode failover); at least 30 s and 6
    heartbeats. A hot standby with no proof that the active driver died (on another host, without the cluster
    manager's word) takes over only once the lease went this long unrenewed, and a driver that cannot renew its
    lease stops its queries after half of it: a shorter ttl is a faster takeover without proof, but an outage
    of the control storage longer than half of it stops the stream (the supervisor restarts it), and a batch
    of a sink without the per-batch lease check should finish within half of it."""

    run_as_user: str | None = None
    """A local or client-mode driver, and the compatibility check's child that runs the candidate's code,
    started as this Unix user (``docs/security.md``, :mod:`airflow_streaming.run_as`): it cannot read the seal
    key, ``airflow.cfg`` or the worker's private files, nor change the Airflow side's control files. Needs a
    local ``control_location``; not with ``hot_standby`` (a takeover rewrites the Airflow side's files)."""

    assets: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The data the stream reads and writes, as Airflow Asset URIs (:mod:`airflow_streaming.stream_assets`):
    ``{"sources": [...], "sinks": [...]}``. The deploy and upgrade operators list the sources as their
    ``inlets`` and the sinks as their ``outlets``; the Streams page links them. Stored normalised as Airflow
    normalises an Asset URI, each kind as a tuple; ``{}`` when none is declared."""

    # SparkSubmitOperator's fields, same names and meaning (airflow_streaming.submit_fields, docs/job-dependencies.md).
    # The list fields accept a list or a comma-separated string; files are absolute paths or URIs.
    py_files: tuple[str, ...] = ()
    """``--py-files``: .py/.zip/.egg files put on the driver's and the executors' PYTHONPATH."""
    files: tuple[str, ...] = ()
    """``--files``: files placed in the working directory of each executor (``SparkFiles.get(name)``)."""
    archives: tuple[str, ...] = ()
    """``--archives``: archives unpacked in each executor's working directory (``path#dir`` names the dir)."""
    jars: tuple[str, ...] = ()
    """``--jars``: jars on the driver's and the executors' classpaths."""
    packages: tuple[str, ...] = ()
    """``--packages``: Maven coordinates ``group:artifact:version`` resolved with their dependencies."""
    exclude_packages: tuple[str, ...] = ()
    """``--exclude-packages``: ``group:artifact`` left out while resolving ``packages``."""
    repositories: tuple[str, ...] = ()
    """``--repositories``: extra Maven repositories searched for ``packages``."""
    driver_memory: str | None = None
    """``--driver-memory`` (e.g. ``2g``); ``cluster.driver_memory`` is its older spelling."""
    executor_memory: str | None = None
    """``--executor-memory`` (e.g. ``4g``)."""
    executor_cores: int | None = None
    """``--executor-cores``."""
    num_executors: int | None = None
    """``--num-executors`` (YARN, Kubernetes)."""
    total_executor_cores: int | None = None
    """``--total-executor-cores`` (standalone)."""
    queue: str | None = None
    """``--queue``: the YARN queue; ``cluster.queue`` is its older spelling (and the connection's ``queue``)."""
    env_vars: Mapping[str, str] = field(default_factory=dict, hash=False)
    """Environment of the driver (SparkSubmitHook's ``env_vars``); values that hold a secret are masked in
    stored specs and never put on a command line."""
    properties_file: str | None = None
    """``--properties-file``: Spark properties read by spark-submit on the submitting host (instead of
    ``spark-defaults.conf``)."""

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        _check_segment(self.name, "name")
        _check_application(self.application)
        checkpoint = _check_location(self.checkpoint_location, "checkpoint_location")
        control = _check_location(self.control_location, "control_location")
        _check_segment(self.version, "version")
        set_(self, "application_args", _check_application_args(self.application_args))
        set_(self, "secret_args", _check_secret_args(self.secret_args))
        set_(self, "spark_conf", _check_spark_conf(self.spark_conf))
        _check_str(self.conn_id, "conn_id")
        if self.master is not None:
            _check_str(self.master, "master")
            if not _MASTER_RE.match(self.master):
                raise SpecError(
                    "master",
                    "must be local, local[N], local[*], spark://..., yarn or k8s://..., "
                    f"got {self.master!r}",
                )
        durations = (
            ("trigger_interval", 0.0, True),
            ("stop_timeout", 0.0, False),
            ("startup_timeout", 0.0, False),
            ("heartbeat_interval", 0.0, False),
        )
        for name, lower, inclusive in durations:
            seconds = parse_duration(getattr(self, name), name)
            if seconds < lower or (not inclusive and seconds == lower):
                op = ">=" if inclusive else ">"
                raise SpecError(
                    name,
                    f"must be {op} {_fmt_seconds(lower)} seconds, got {_fmt_seconds(seconds)}",
                )
            set_(self, name, seconds)
        if self.heartbeat_interval > _MAX_HEARTBEAT_INTERVAL:
            raise SpecError(
                "heartbeat_interval",
                f"must be <= {_fmt_seconds(_MAX_HEARTBEAT_INTERVAL)} seconds, "
                f"got {_fmt_seconds(self.heartbeat_interval)}",
            )
        if self.lease_ttl is not None:
            set_(self, "lease_ttl", _check_lease_ttl(self.lease_ttl, self.heartbeat_interval))
        if self.master_ui_url is not None:
            _check_str(self.master_ui_url, "master_ui_url")
            if not re.match(r"^https?://[^/\s]+", self.master_ui_url):
                raise SpecError("master_ui_url", f"must be an http(s) URL, got {self.master_ui_url!r}")
        if not isinstance(self.health, Mapping):
            raise SpecError("health", f"must be a mapping of thresholds, got {_type_name(self.health)}")
        from airflow_streaming.health.thresholds import HealthThresholds

        try:
            HealthThresholds.from_mapping(self.health)
        except ValueError as exc:
            field_name, _, message = str(exc).partition(": ")
            raise SpecError(field_name, message) from exc
        set_(self, "health", dict(self.health))
        if self.deploy_mode is not None and self.deploy_mode not in DEPLOY_MODES:
            raise SpecError("deploy_mode", f"must be one of {', '.join(DEPLOY_MODES)}, got {self.deploy_mode!r}")
        if self.deploy_mode == "cluster" and (self.master is None or self.master.startswith("local")):
            raise SpecError("deploy_mode", "cluster mode needs a cluster master (spark://..., yarn or k8s://...), "
                            f"got master {self.master!r}")
        set_(self, "cluster", _check_cluster(self.cluster))
        submit = check_submit_fields({name: getattr(self, name) for name in SUBMIT_FIELDS})
        for name, value in submit.items():
            set_(self, name, value)
        check_twins({**submit, "files": shipped_files(self)}, self.cluster)
        _refuse_name_clash(self.application, (*self.files, *self.py_files))
        if self.master is not None:  # the target is known: refuse now what it cannot honour
            refuse_unsupported(self, self.master, self.deploy_mode)
        set_(self, "spark_runtime", check_runtime(self.spark_runtime))
        if not isinstance(self.hot_standby, bool):
            raise SpecError("hot_standby", f"must be true or false, got {_type_name(self.hot_standby)} "
                                           f"{self.hot_standby!r}")
        if self.run_as_user is not None:
            self._check_run_as_user()
        set_(self, "assets", check_assets(self.assets))
        if self.storage_conn_id is not None:
            _check_str(self.storage_conn_id, "storage_conn_id")
        # The checkpoint and the stream's control dir must not overlap.
        control_dir = control[:2] + (control[2] + (self.name,),)
        if _same_file_system(checkpoint, control_dir):
            a, b = checkpoint[2], control_dir[2]
            if a[: len(b)] == b or b[: len(a)] == a:
                raise SpecError(
                    "checkpoint_location",
                    f"must not be equal to or nested with the stream's control dir "
                    f"{self.control_dir!r} (control_location/name)",
                )

    @property
    def is_bundled(self) -> bool:
        """True if ``application`` names a job bundled with this provider."""
        return self.application in BUNDLED_JOBS

    @property
    def control_dir(self) -> str:
        """The stream's control directory: ``control_location`` + ``/`` + ``name``."""
        base = self.control_location.rstrip("/")
        if base.endswith(":"):  # e.g. "file:///" -> "file:" -> "file://"
            base += "//"
        return f"{base}/{self.name}"

    def with_version(
        self,
        version: str,
        application: str | None = None,
        application_args: list[Any] | tuple[Any, ...] | None = None,
        spark_conf: Mapping[str, Any] | None = None,
        spark_runtime: Mapping[str, str] | str | None = "keep",
    ) -> StreamSpec:
        """Return a validated copy with a new ``version`` (and optionally new code/args/conf/runtime).

        Arguments left as ``None`` keep their current value; ``spark_runtime`` is kept unless given
        (``None`` then means the installed PySpark).
        """
        changes: dict[str, Any] = {"version": version}
        if spark_runtime != "keep":
            changes["spark_runtime"] = spark_runtime
        if application is not None:
            changes["application"] = application
        if application_args is not None:
            changes["application_args"] = application_args
        if spark_conf is not None:
            changes["spark_conf"] = spark_conf
        return dataclasses.replace(self, **changes)

    def refuse_plain_secrets(self) -> None:
        """Raise :class:`SpecError` naming the argument when a plain ``application_args`` entry holds a
        secret (it would go on a command line): called before anything is submitted or checked. (Not at
        construction: specs stored by earlier versions must stay readable.)"""
        _refuse_secret_arguments(self.application_args)
        for key in JVM_OPTION_KEYS:
            value = self.spark_conf.get(key)
            if value not in (None, "") and is_secret_conf_entry(key, value):
                raise SpecError(f"spark_conf.{key}", "holds a secret, and Spark puts JVM options on the JVM's "
                                "command line, which every user of its host can read (ps, /proc): give the "
                                "secret its own spark_conf entry (it travels privately, never on a command line) "
                                "or put it in a file the option names")

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-safe dict; ``StreamSpec.from_dict(s.to_dict()) == s``."""
        return {
            "name": self.name,
            "application": self.application,
            "checkpoint_location": self.checkpoint_location,
            "control_location": self.control_location,
            "version": self.version,
            "application_args": list(self.application_args),
            "spark_conf": dict(self.spark_conf),
            "conn_id": self.conn_id,
            "master": self.master,
            "trigger_interval": self.trigger_interval,
            "stop_timeout": self.stop_timeout,
            "startup_timeout": self.startup_timeout,
            "heartbeat_interval": self.heartbeat_interval,
            "master_ui_url": self.master_ui_url,
            "health": dict(self.health),
            "deploy_mode": self.deploy_mode,
            "cluster": dict(self.cluster),
            "storage_conn_id": self.storage_conn_id,
            **({"secret_args": dict(self.secret_args)} if self.secret_args else {}),
            **({"spark_runtime": dict(self.spark_runtime)} if self.spark_runtime else {}),
            **({"hot_standby": True} if self.hot_standby else {}),
            **({"lease_ttl": self.lease_ttl} if self.lease_ttl is not None else {}),
            **({"run_as_user": self.run_as_user} if self.run_as_user else {}),
            **({"assets": {kind: list(uris) for kind, uris in self.assets.items()}} if self.assets else {}),
            **self._submit_fields_dict(),
        }

    def _check_run_as_user(self) -> None:
        if not isinstance(self.run_as_user, str) or not _UNIX_USER.match(self.run_as_user):
            raise SpecError("run_as_user", "must be a Unix user name (lower-case letters, digits, '_', '.', '-'), "
                                           f"got {self.run_as_user!r}")
        if self.master is not None and target_kind(self.master, self.deploy_mode) != "local":
            raise SpecError("run_as_user", "only for a driver on the Airflow worker (a local master, or client "
                            "mode): a cluster-mode driver runs on the cluster, as the cluster's user (use its own "
                            "impersonation: proxy_user, a Kubernetes service account)")
        if self.hot_standby:
            raise SpecError("run_as_user", "not with hot_standby: a takeover rewrites driver.json and the run "
                            "marker, which a driver running as another user may not write; drop one of them")
        if not is_local_location(self.control_location) or not is_local_location(self.checkpoint_location):
            raise SpecError("run_as_user", "needs a local control_location and checkpoint_location (the control "
                            "directory is shared with the driver's Unix user on this host's file system, and the "
                            "compatibility check reads the checkpoint as that user, without the worker's Airflow "
                            "connections)")

    def _submit_fields_dict(self) -> dict[str, Any]:
        """The SparkSubmitOperator fields that are set (left out when unset: specs stored before them stay
        byte for byte what they were)."""
        result: dict[str, Any] = {}
        for name in SUBMIT_FIELDS:
            value = getattr(self, name)
            if value in (None, (), {}):
                continue
            result[name] = list(value) if isinstance(value, tuple) else dict(value) if isinstance(value, Mapping) \
                else value
        return result

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StreamSpec:
        """Build and validate a spec from a mapping (e.g. parsed YAML/JSON).

        Unknown keys and missing required fields raise :class:`SpecError`.
        A ``None`` value for an optional field means "use the default". The ``seal`` of a spec stored by
        the Airflow side (see :mod:`airflow_streaming.control.seal`) is not a field and is ignored here.
        """
        if not isinstance(data, Mapping):
            raise SpecError(ROOT_FIELD, f"must be a mapping, got {_type_name(data)}")
        data = {k: v for k, v in data.items() if k != "seal"}
        fields = [f for f in dataclasses.fields(cls) if f.init]
        allowed = [f.name for f in fields]
        for key in data:
            if not isinstance(key, str):
                raise SpecError(
                    ROOT_FIELD, f"field names must be strings, got {_type_name(key)} {key!r}"
                )
        unknown = sorted(k for k in data if k not in allowed)
        if unknown:
            key = unknown[0]
            message = f"unknown field {key!r} (allowed: {', '.join(allowed)})"
            close = difflib.get_close_matches(key, allowed, n=1)
            if close:
                message += f"; did you mean {close[0]!r}?"
            raise SpecError(key, message)
        kwargs: dict[str, Any] = {}
        for f in fields:
            required = (
                f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            value = data.get(f.name)
            if value is None:
                if required:
                    raise SpecError(f.name, "is required")
                continue
            kwargs[f.name] = value
        return cls(**kwargs)

    @classmethod
    def from_yaml(cls, text_or_path: str | os.PathLike[str]) -> StreamSpec:
        """Build a spec from YAML text or from a YAML file.

        A path-like argument, or a string naming an existing file, is read;
        any other string is parsed as YAML text (``yaml.safe_load``).
        """
        import yaml  # local import: the Spark driver may not have PyYAML

        if isinstance(text_or_path, os.PathLike) or (
            isinstance(text_or_path, str)
            and "\n" not in text_or_path
            and os.path.isfile(text_or_path)
        ):
            try:
                with open(text_or_path, encoding="utf-8") as fh:
                    text = fh.read()
            except (OSError, UnicodeDecodeError) as exc:
                path = os.fspath(text_or_path)
                raise SpecError(ROOT_FIELD, f"cannot read {path!r}: {exc}") from exc
        elif isinstance(text_or_path, str):
            if _looks_like_a_path(text_or_path):
                raise SpecError(ROOT_FIELD, f"spec file {text_or_path!r} does not exist (a path to a YAML spec was "
                                "given, or YAML text without a mapping)")
            text = text_or_path
        else:
            raise SpecError(
                ROOT_FIELD, f"expected YAML text or a path, got {_type_name(text_or_path)}"
            )
        try:
            data = strict_yaml_load(text)
        except yaml.YAMLError as exc:
            raise SpecError(ROOT_FIELD, f"invalid YAML: {exc}") from exc
        if not isinstance(data, Mapping):
            got = "an empty document" if data is None else _type_name(data)
            raise SpecError(ROOT_FIELD, f"top level must be a mapping, got {got}")
        return cls.from_dict(data)


def strict_yaml_load(text: str) -> Any:
    """``yaml.safe_load`` that refuses duplicate mapping keys (a silently dropped setting is a bug
    waiting to happen): raises ``yaml.YAMLError`` naming the key and its line."""
    import yaml

    class _StrictLoader(yaml.SafeLoader):
        pass

    def construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return loader.construct_mapping(node, deep=deep)

    _StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass


def _looks_like_a_path(text: str) -> bool:
    stripped = text.strip()
    return "\n" not in stripped and ":" not in stripped and (
        stripped.startswith(("/", "./", "~")) or stripped.endswith((".yaml", ".yml", ".json")))


def as_spec(value: StreamSpec | Mapping[str, Any] | str | os.PathLike[str]) -> StreamSpec:
    """A :class:`StreamSpec` from a spec, a dict, a YAML file path or YAML text (what operators accept)."""
    if isinstance(value, StreamSpec):
        return value
    if isinstance(value, Mapping):
        return StreamSpec.from_dict(value)
    if isinstance(value, (str, os.PathLike)):
        return StreamSpec.from_yaml(value)
    raise SpecError(ROOT_FIELD, f"expected a StreamSpec, a dict or a YAML path, got {_type_name(value)}")
