"""The spec's ``SparkSubmitOperator`` fields: dependencies and resources of a stream's job.

``py_files``, ``files``, ``archives``, ``jars``, ``packages``, ``exclude_packages``, ``repositories``,
``driver_memory``, ``executor_memory``, ``executor_cores``, ``num_executors``, ``total_executor_cores``,
``queue``, ``env_vars`` and ``properties_file`` have the names and the meaning they have on the Spark
provider's ``SparkSubmitOperator`` / ``SparkSubmitHook`` (``docs/job-dependencies.md``):

- :func:`check_submit_fields` validates and normalises them (lists or comma-separated strings; a
  :class:`~airflow_streaming.exceptions.SpecError` names the entry, e.g. ``py_files[1]``);
- :func:`submit_options` is the spark-submit options they become, in ``SparkSubmitHook``'s order;
- :func:`shipped_files` is the ``files`` that travel: the spec's own and an ``application`` Spark fetches;
- :func:`spark_properties` is the Spark conf they become where there is no spark-submit (the standalone
  master's REST submission);
- :func:`refuse_unsupported` raises a ``SpecError`` naming the field and the target that cannot honour it.

Plain Python (standard library only): the spec, and so this module, is imported by the Spark driver.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from airflow_streaming.application_source import is_fetched
from airflow_streaming.exceptions import SpecError

__all__ = ["CLUSTER_TWINS", "LIST_FIELDS", "SUBMIT_FIELDS", "URI_SCHEMES", "check_location", "check_submit_fields",
           "cluster_manager", "refuse_unsupported", "set_twins", "shipped_files", "spark_properties",
           "submit_options", "target_kind"]

PATH_FIELDS = ("py_files", "files", "archives", "jars")
"""Files that travel with the job: absolute local paths or URIs."""
LIST_FIELDS = (*PATH_FIELDS, "packages", "exclude_packages", "repositories")
INT_FIELDS = ("executor_cores", "num_executors", "total_executor_cores")
MEMORY_FIELDS = ("driver_memory", "executor_memory")
SUBMIT_FIELDS = (*LIST_FIELDS, *MEMORY_FIELDS, *INT_FIELDS, "queue", "env_vars", "properties_file")

#: Spec fields with a ``cluster.`` setting of the same meaning (kept for specs written before the field).
CLUSTER_TWINS = {"driver_memory": "driver_memory", "queue": "queue", "archives": "archives"}

#: The spark-submit option of each field, in ``SparkSubmitHook._build_spark_common_args``'s order.
SUBMIT_FLAGS = {
    "properties_file": "--properties-file", "files": "--files", "py_files": "--py-files", "archives": "--archives",
    "jars": "--jars", "packages": "--packages", "exclude_packages": "--exclude-packages",
    "repositories": "--repositories", "num_executors": "--num-executors",
    "total_executor_cores": "--total-executor-cores", "executor_cores": "--executor-cores",
    "executor_memory": "--executor-memory", "driver_memory": "--driver-memory", "queue": "--queue",
}

#: The Spark conf key each field sets (what spark-submit itself turns the option into).
CONF_KEYS = {
    "py_files": "spark.submit.pyFiles", "files": "spark.files", "archives": "spark.archives", "jars": "spark.jars",
    "packages": "spark.jars.packages", "exclude_packages": "spark.jars.excludes",
    "repositories": "spark.jars.repositories", "num_executors": "spark.executor.instances",
    "total_executor_cores": "spark.cores.max", "executor_cores": "spark.executor.cores",
    "executor_memory": "spark.executor.memory", "driver_memory": "spark.driver.memory", "queue": "spark.yarn.queue",
}

#: The dependency conf a local session takes when it is created (the compatibility check's: it plans the
#: candidate with the files the candidate runs with); memory, cores, queue and executors are the cluster's.
SESSION_DEPENDENCY_KEYS = ("spark.submit.pyFiles", "spark.files", "spark.jars", "spark.jars.packages",
                           "spark.jars.excludes", "spark.jars.repositories", "spark.archives")

#: URI schemes a dependency may name (``local:`` - already on every node; the rest are fetched by Spark).
URI_SCHEMES = ("local", "file", "hdfs", "webhdfs", "s3a", "s3", "gs", "abfs", "abfss", "wasbs", "http", "https")
_URI_RE = re.compile(r"^([a-z][a-z0-9+.-]*):(.*)$")
_MEMORY_RE = re.compile(r"^\d+[kmgtp]?b?$", re.IGNORECASE)
_PACKAGE_RE = re.compile(r"^[A-Za-z0-9_.\-]+:[A-Za-z0-9_.\-]+:[A-Za-z0-9_.\-]+(:[A-Za-z0-9_.\-]+)?$")
_EXCLUDE_RE = re.compile(r"^[A-Za-z0-9_.\-]+:[A-Za-z0-9_.\-]+$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _items(value: Any, name: str) -> list[str]:
    """A list field as a list of strings: a list/tuple of strings or ``SparkSubmitOperator``'s
    comma-separated string."""
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",")]
        return [p for p in parts if p] if value.strip() else []
    if not isinstance(value, (list, tuple)):
        raise SpecError(name, f"must be a list of strings or a comma-separated string, got {type(value).__name__}")
    result = []
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip():
            raise SpecError(f"{name}[{index}]", f"must be a non-empty string, got {item!r}")
        result.append(item.strip())
    return result


def check_location(item: str, where: str, renamed: bool) -> None:
    """An absolute local path or a URI of :data:`URI_SCHEMES`; ``#name`` allowed when ``renamed``."""
    if "," in item or any(ch.isspace() for ch in item):
        raise SpecError(where, f"must not contain commas or whitespace, got {item!r}")
    path, sep, alias = item.partition("#")
    if sep and (not renamed or not _ENV_NAME_RE.match(alias.replace(".", "_").replace("-", "_"))):
        raise SpecError(where, f"{item!r}: a '#name' suffix is only allowed on files and archives (and must be "
                               "a plain file name)")
    if path.startswith("/"):
        return
    match = _URI_RE.match(path)
    if match is None:
        raise SpecError(where, f"must be an absolute local path or a URI ({', '.join(s + ':' for s in URI_SCHEMES)}),"
                               f" got {item!r}")
    scheme, rest = match.groups()
    if scheme not in URI_SCHEMES:
        raise SpecError(where, f"URI scheme {scheme!r} is not one Spark fetches from here (allowed: "
                               f"{', '.join(URI_SCHEMES)}), got {item!r}")
    if scheme in ("local", "file"):
        local = rest[2:] if rest.startswith("//") else rest
        if not local.startswith("/"):
            raise SpecError(where, f"a {scheme}: URI must name an absolute path, got {item!r}")
    elif not rest.startswith("//") or len(rest) <= 2:
        raise SpecError(where, f"must be {scheme}://<host or bucket>/<path>, got {item!r}")


def _check_list(value: Any, name: str) -> tuple[str, ...]:
    items = _items(value, name)
    for index, item in enumerate(items):
        where = f"{name}[{index}]"
        if name in PATH_FIELDS:
            check_location(item, where, renamed=name in ("files", "archives"))
        elif name == "packages" and not _PACKAGE_RE.match(item):
            raise SpecError(where, f"must be a Maven coordinate group:artifact:version, got {item!r}")
        elif name == "exclude_packages" and not _EXCLUDE_RE.match(item):
            raise SpecError(where, f"must be group:artifact, got {item!r}")
        elif name == "repositories" and not re.match(r"^(https?|file)://\S+$", item):
            raise SpecError(where, f"must be a repository URL (http://, https:// or file://), got {item!r}")
    return tuple(items)


def _check_env_vars(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise SpecError("env_vars", f"must be a mapping of variable -> value, got {type(value).__name__}")
    result: dict[str, str] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not _ENV_NAME_RE.match(key):
            raise SpecError("env_vars", f"names must be environment variable names ([A-Za-z_][A-Za-z0-9_]*), "
                                        f"got {key!r}")
        if isinstance(item, bool):
            result[key] = "true" if item else "false"
        elif isinstance(item, (str, int, float)):
            result[key] = str(item)
        else:
            raise SpecError(f"env_vars.{key}", f"must be a string, number or boolean, got {type(item).__name__}")
    return result


def check_submit_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The :data:`SUBMIT_FIELDS` of ``values`` validated and normalised (lists as tuples, ``env_vars`` a dict of
    strings); :class:`SpecError` naming the field (and entry) otherwise."""
    result: dict[str, Any] = {}
    for name in LIST_FIELDS:
        result[name] = _check_list(values.get(name) or (), name)
    for name in MEMORY_FIELDS:
        item = values.get(name)
        if item is not None and (not isinstance(item, str) or not _MEMORY_RE.match(item.strip())):
            raise SpecError(name, f"must be a JVM memory size such as '512m', '2g' or '4096M', got {item!r}")
        result[name] = None if item is None else item.strip()
    for name in INT_FIELDS:
        item = values.get(name)
        if item is not None and (isinstance(item, bool) or not isinstance(item, int) or item < 1):
            raise SpecError(name, f"must be a positive integer, got {item!r}")
        result[name] = item
    queue = values.get("queue")
    if queue is not None and (not isinstance(queue, str) or not queue.strip()):
        raise SpecError("queue", f"must be a non-empty string, got {queue!r}")
    result["queue"] = queue
    result["env_vars"] = _check_env_vars(values.get("env_vars") or {})
    properties = values.get("properties_file")
    if properties is not None:
        if not isinstance(properties, str) or not properties.startswith("/"):
            raise SpecError("properties_file", "must be an absolute path on the submitting host (spark-submit reads "
                                               f"it there), got {properties!r}")
    result["properties_file"] = properties
    return result


def check_twins(values: Mapping[str, Any], cluster: Mapping[str, Any]) -> None:
    """A field and its ``cluster.`` twin (:data:`CLUSTER_TWINS`) set to different values, or a field whose
    option ``cluster.submit_args`` also passes: :class:`SpecError` naming both."""
    for name, setting in CLUSTER_TWINS.items():
        mine, theirs = values.get(name), cluster.get(setting)
        if mine in (None, ()) or theirs in (None, [], ()):
            continue
        if (tuple(theirs) if isinstance(theirs, (list, tuple)) else theirs) != mine:
            raise SpecError(name, f"{name}={_shown(mine)} and cluster.{setting}={_shown(theirs)} disagree: set one "
                                  f"(cluster.{setting} is the older spelling of {name})")
    args = list(cluster.get("submit_args") or [])
    for name, flag in SUBMIT_FLAGS.items():
        if values.get(name) in (None, (), {}):
            continue
        if any(arg == flag or arg.startswith(flag + "=") for arg in args):
            raise SpecError(name, f"{name} is set and cluster.submit_args also passes {flag} (spark-submit keeps "
                                  f"only the last one): set it in one place, {name} preferably")


def _shown(value: Any) -> str:
    return ",".join(value) if isinstance(value, (list, tuple)) else repr(value)


def set_twins(spec: Any) -> set[str]:
    """The ``cluster.`` settings whose twin field ``spec`` sets (a connection's value of them is not used:
    the spec's own field wins)."""
    return {setting for name, setting in CLUSTER_TWINS.items() if getattr(spec, name, None) not in (None, ())}


# --------------------------------------------------------------------------- where a spec runs

def cluster_manager(master: str | None) -> str:
    """``local``, ``standalone``, ``yarn`` or ``kubernetes``: whose cluster a master names."""
    master = master or "local[2]"
    if master.startswith("local"):
        return "local"
    if master.startswith("spark://"):
        return "standalone"
    if master == "yarn":
        return "yarn"
    if master.startswith("k8s://"):
        return "kubernetes"
    raise ValueError(f"no cluster manager for master {master!r}")


def target_kind(master: str | None, deploy_mode: str | None) -> str:
    """``local`` (local[N], and client mode anywhere), ``standalone-cluster``, ``yarn`` or ``kubernetes``."""
    manager = cluster_manager(master)
    if (deploy_mode or "client") == "client" or manager == "local":
        return "local"
    return "standalone-cluster" if manager == "standalone" else manager


#: Fields a cluster manager has no use for (spark-submit's own help: "YARN and Kubernetes only"...).
_UNSUPPORTED_BY_MANAGER = {
    "num_executors": ("local", "standalone"),
    "total_executor_cores": ("local", "yarn", "kubernetes"),
    "queue": ("local", "standalone", "kubernetes"),
}
_WHY = {
    "num_executors": "--num-executors (spark.executor.instances) is for YARN and Kubernetes; a standalone cluster "
                     "sizes an application with total_executor_cores and executor_cores, local[N] has no executors",
    "total_executor_cores": "--total-executor-cores (spark.cores.max) is for standalone clusters; on YARN and "
                            "Kubernetes use num_executors and executor_cores",
    "queue": "--queue (spark.yarn.queue) is a YARN queue; other cluster managers have none",
    "properties_file": "the standalone master's REST submission reads no properties file (no spark-submit runs); "
                       "put its entries in spark_conf",
}


def refuse_unsupported(spec: Any, master: str | None, deploy_mode: str | None) -> None:
    """:class:`SpecError` naming the first field ``spec`` sets that the target of ``master`` / ``deploy_mode``
    cannot honour (checked when the spec is built with a master, and again before a driver is planned)."""
    manager, kind = cluster_manager(master), target_kind(master, deploy_mode)
    where = f"{kind} target (master {master or 'local[2]'}, {deploy_mode or 'client'} mode)"
    for name, managers in _UNSUPPORTED_BY_MANAGER.items():
        if getattr(spec, name, None) is not None and manager in managers:
            raise SpecError(name, f"not supported by the {where}: {_WHY[name]}")
    if getattr(spec, "properties_file", None) and kind == "standalone-cluster":
        raise SpecError("properties_file", f"not supported by the {where}: {_WHY['properties_file']}")


# --------------------------------------------------------------------------- what the fields become

def _value(spec: Any, name: str) -> Any:
    value = getattr(spec, name, None)
    return None if value in (None, (), {}) else value


def shipped_files(spec: Any) -> tuple[str, ...]:
    """The ``files`` that travel with ``spec``'s driver: its own ``files`` and, when ``application`` is a URI
    Spark fetches (``hdfs://``, ``s3a://``, ``https://``...), that URI, so the driver's SparkContext fetches the
    script it runs (:mod:`airflow_streaming.application_source`)."""
    files = tuple(getattr(spec, "files", None) or ())
    application = getattr(spec, "application", None)
    if isinstance(application, str) and is_fetched(application) and application not in files:
        files += (application,)
    return files


def submit_options(spec: Any, archives: tuple[str, ...] | list[str] = (), with_py_files: bool = False,
                   queue: str | None = None) -> list[str]:
    """The spark-submit options of ``spec``'s fields, in ``SparkSubmitHook``'s order. ``archives`` are added
    to the spec's own (``cluster.archives``); ``--py-files`` only ``with_py_files`` (the targets merge
    ``py_files`` with their own runtime bundle into one ``--py-files``); ``queue`` is the queue to use when the
    spec sets none (``cluster.queue``, the connection's)."""
    args: list[str] = []
    for name, flag in SUBMIT_FLAGS.items():
        value = _value(spec, name)
        if name == "files":
            value = shipped_files(spec) or None
        elif name == "archives":
            value = list(dict.fromkeys([*archives, *(value or ())])) or None
        elif (name == "py_files" and not with_py_files) or name == "properties_file":
            continue  # the plan's py_files and properties_file (merged with the target's own)
        elif name == "queue":
            value = value or queue
        if value is None:
            continue
        args += [flag, ",".join(value) if isinstance(value, (list, tuple)) else str(value)]
    return args


def spark_properties(spec: Any) -> dict[str, str]:
    """The Spark conf of ``spec``'s fields where no spark-submit runs (the standalone REST submission):
    ``spark.submit.pyFiles``, ``spark.files`` (:func:`shipped_files`, also carrying the py-files, as spark-submit
    does for a Python application), ``spark.jars``, ``spark.jars.packages``... (:data:`CONF_KEYS`)."""
    conf: dict[str, str] = {}
    for name, key in CONF_KEYS.items():
        value = (shipped_files(spec) or None) if name == "files" else _value(spec, name)
        if value is not None:
            conf[key] = ",".join(value) if isinstance(value, (list, tuple)) else str(value)
    py_files = _value(spec, "py_files") or ()
    if py_files:
        conf["spark.files"] = ",".join(dict.fromkeys([*shipped_files(spec), *py_files]))
    return conf


def is_local_path(item: str) -> bool:
    """Whether a dependency names a file on the submitting host (a plain path or ``file:``), which a cluster
    target has to upload."""
    return item.startswith("/") or item.startswith("file:")
