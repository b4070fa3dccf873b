"""The OpenLineage custom run facet of a stream (needs ``openlineage-python``, which the OpenLineage provider
brings; imported only by :func:`airflow_streaming.operators.lineage.operator_lineage`).

Its JSON schema is ``SparkStreamRunFacet.json`` beside this module; its ``_schemaURL`` points there
(:data:`FACET_SCHEMA_URL`). Unset optional fields are left out of the
event (the client drops ``None``).
"""

from __future__ import annotations

from attrs import define
from openlineage.client.facet_v2 import RunFacet

__all__ = ["FACET_SCHEMA_URL", "SparkStreamRunFacet"]

#: The facet's ``_schemaURL``: the JSON schema shipped beside this module (``SparkStreamRunFacet.json``).
FACET_SCHEMA_URL = ("https://raw.githubusercontent.com/airflow-streaming/airflow-streaming/main/"
                    "airflow_streaming/operators/SparkStreamRunFacet.json#/$defs/SparkStreamRunFacet")


@define
class SparkStreamRunFacet(RunFacet):
    """A Spark Structured Streaming stream as a lifecycle task saw it (``run.facets.airflowStreaming``)."""

    stream: str
    version: str
    action: str
    deployMode: str  # noqa: N815 - OpenLineage's field names are camelCase
    checkpointLocation: str  # noqa: N815
    sparkRuntime: str  # noqa: N815
    sparkVersion: str | None = None  # noqa: N815
    previousVersion: str | None = None  # noqa: N815
    runId: str | None = None  # noqa: N815
    appId: str | None = None  # noqa: N815

    @staticmethod
    def _get_schema() -> str:
        return FACET_SCHEMA_URL
