"""OpenLineage for the lifecycle operators: what a deploy, upgrade or stop tells a lineage backend.

Airflow's OpenLineage provider (``apache-airflow-providers-openlineage``, this package's ``openlineage`` extra)
calls an operator's ``get_openlineage_facets_on_start()``, ``get_openlineage_facets_on_complete(ti)`` and
``get_openlineage_facets_on_failure(ti)`` when the task starts and ends, and sends the events to its configured
transport (``[openlineage] transport``; without one the provider is disabled and nothing here runs).
:class:`StreamLineage` gives the deploy, upgrade and stop operators those methods. Each returns an
``OperatorLineage`` with:

- ``inputs`` / ``outputs``: the spec's declared ``assets`` sources and sinks
  (:mod:`airflow_streaming.stream_assets`), named by OpenLineage's dataset naming rules
  (:func:`dataset_naming`); a stop lists none (it neither reads nor writes data);
- the run facet ``airflowStreaming`` (:data:`FACET_NAME`): the stream, its version, the previous version (an
  upgrade, once it ran), the action, the Spark runtime, the checkpoint location, the deploy mode and the
  stream's run (``runId``, ``appId``) once known - public fields of the spec only: never ``spark_conf``,
  ``secret_args`` nor the cluster settings; a dataset's namespace never holds a URI's user information.

The naming and the facet's fields are plain Python (no Airflow nor OpenLineage import); the OpenLineage
objects are built inside functions (:mod:`airflow_streaming.operators.lineage_facets`), so the operators work
without the provider.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from airflow_streaming import __version__

__all__ = [
    "FACET_NAME", "PRODUCER", "StreamLineage", "dataset_naming", "operator_lineage",
    "stream_facet_fields",
]

#: The key of the stream's run facet in an event's ``run.facets``.
FACET_NAME = "airflowStreaming"

#: The facet's ``_producer``: this package, at its version.
PRODUCER = f"https://github.com/airflow-streaming/airflow-streaming/tree/{__version__}"

#: Default ports OpenLineage's namespaces spell out when a URI leaves them implicit.
_DEFAULT_PORTS = {"hdfs": 8020, "kafka": 9092, "postgres": 5432}


def _host_port(parts: urllib.parse.SplitResult, scheme: str) -> str:
    """``host:port`` of ``parts`` (no user information), the scheme's default port filled in."""
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    port = parts.port or _DEFAULT_PORTS.get(scheme)
    return f"{host}:{port}" if port else host


def dataset_naming(uri: str) -> tuple[str, str]:
    """``(namespace, name)`` of the OpenLineage dataset an Asset URI (as the spec stores it) names, per
    OpenLineage's dataset naming rules (``openlineage.client.naming.dataset``) and the providers' Asset
    converters (``common.io`` for ``file``, ``amazon`` for ``s3``):

    - ``file:///data/out`` -> ``("file", "/data/out")``; ``file://host/data`` -> ``("file://host", "/data")``;
    - ``s3://bucket/key`` (also ``s3a``/``s3n``) -> ``("s3://bucket", "key")``; ``gs://bucket/key`` likewise;
    - ``hdfs://nn:8020/path`` -> ``("hdfs://nn:8020", "/path")`` (port 8020 when not given);
    - ``kafka://broker:9092/topic`` -> ``("kafka://broker:9092", "topic")`` (port 9092 when not given);
    - ``postgres://host:5432/db/schema/table`` -> ``("postgres://host:5432", "db.schema.table")``;
    - any other scheme: ``("<scheme>://<authority>", "<path>")`` (``/`` for an empty path).

    User information never enters a namespace."""
    parts = urllib.parse.urlsplit(uri)
    scheme = parts.scheme.lower()
    path = parts.path or "/"
    if scheme == "file":
        host = _host_port(parts, scheme)
        return (f"file://{host}" if host and host != "localhost" else "file"), path
    if scheme in ("s3", "s3a", "s3n", "gs", "gcs"):
        prefix = "gs" if scheme in ("gs", "gcs") else "s3"
        return f"{prefix}://{parts.hostname or ''}", path.lstrip("/") or "/"
    if scheme in ("hdfs", "kafka"):
        name = path if scheme == "hdfs" else path.lstrip("/") or "/"
        return f"{scheme}://{_host_port(parts, scheme)}", name
    if scheme in ("postgres", "postgresql"):
        return f"postgres://{_host_port(parts, 'postgres')}", ".".join(p for p in path.split("/") if p)
    return f"{scheme}://{_host_port(parts, scheme) if parts.netloc else ''}", path


def stream_facet_fields(spec: Any, action: str, *, previous_version: str | None = None,
                        run_id: str | None = None, app_id: str | None = None) -> dict[str, str]:
    """The fields of the ``airflowStreaming`` run facet for ``spec`` (a
    :class:`~airflow_streaming.spec.StreamSpec`): only public fields; the optional ones only when known."""
    from airflow_streaming.spark_runtime import describe, installed_version

    runtime = spec.spark_runtime
    if not runtime:
        spark_version = installed_version()
    elif isinstance(runtime, Mapping) and isinstance(runtime.get("version"), str):
        spark_version = runtime["version"]
    else:
        spark_version = None
    fields = {
        "stream": spec.name, "version": spec.version, "action": action,
        "deployMode": spec.deploy_mode or "client",
        "checkpointLocation": spec.checkpoint_location,  # never user information: the spec refuses it
        "sparkRuntime": describe(runtime),
        "sparkVersion": spark_version, "previousVersion": previous_version, "runId": run_id, "appId": app_id,
    }
    return {key: str(value) for key, value in fields.items() if value}


def operator_lineage(spec: Any, action: str, *, with_datasets: bool = True, **known: str | None) -> Any:
    """An ``OperatorLineage`` of ``spec``: its declared sources and sinks as inputs and outputs (none without
    ``with_datasets``) and the stream's run facet (``known``: see :func:`stream_facet_fields`)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import InputDataset, OutputDataset

    from airflow_streaming.operators.lineage_facets import SparkStreamRunFacet
    from airflow_streaming.stream_assets import spec_assets

    sources, sinks = spec_assets(spec) if with_datasets else ((), ())
    facet = SparkStreamRunFacet(**stream_facet_fields(spec, action, **known), producer=PRODUCER)
    return OperatorLineage(inputs=[InputDataset(*dataset_naming(uri)) for uri in sources],
                           outputs=[OutputDataset(*dataset_naming(uri)) for uri in sinks],
                           run_facets={FACET_NAME: facet})


class StreamLineage:
    """The OpenLineage provider's operator methods for a lifecycle operator (see the module).

    The operator names its action (``_lineage_action``: a class attribute, or a property) and, while it acts,
    calls :meth:`_note_lineage` with the spec it acted on and what it learnt (run id, previous version); before
    that (the start event) the spec is the operator's own ``spec`` argument, rendered (``current`` when an
    upgrade names none). A spec that cannot be had there gives nothing (``None``: the provider then uses the
    task's inlets and outlets)."""

    _lineage_action: str = "deploy"
    _lineage_datasets: bool = True

    def _note_lineage(self, spec: Any, **known: str | None) -> None:
        """Remember the spec acted on and the facts of the run (see :func:`stream_facet_fields`)."""
        self._lineage_known = (spec, {key: value for key, value in known.items() if value})

    def _lineage_spec(self) -> Any:
        from airflow_streaming.operators.parameters import spec_with_conn_id

        given = getattr(self, "spec", None)
        if given is None:
            given = getattr(self, "current", None)
        return None if given is None else spec_with_conn_id(given, getattr(self, "conn_id", None))

    def _lineage(self) -> Any:
        known = getattr(self, "_lineage_known", None)
        spec, facts = known if known is not None else (self._lineage_spec(), {})
        if spec is None:
            return None
        return operator_lineage(spec, self._lineage_action, with_datasets=self._lineage_datasets, **facts)

    def get_openlineage_facets_on_start(self) -> Any:
        """The task starts: the spec's datasets and the stream's facet."""
        return self._lineage()

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The task succeeded: as on start, with what the action learnt (run id, previous version)."""
        return self._lineage()

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Any:
        """The task failed: as on complete, with what the action learnt before it failed."""
        return self._lineage()
