"""Validate OpenLineage events against the OpenLineage JSON schemas, offline.

The spec (``OpenLineage.json``) and the standard facets' schemas are vendored in ``tests/data/openlineage/``
(its README says from where); this package's own facet schema is the file the facet's ``_schemaURL`` names
(``airflow_streaming/operators/SparkStreamRunFacet.json``). Every ``$ref`` resolves to those files, by ``$id``,
through a ``referencing`` registry: nothing is fetched. A URL that is not among them fails the validation.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Iterator
from typing import Any

from jsonschema import Draft202012Validator
from referencing import Registry, Resource

ROOT = pathlib.Path(__file__).resolve().parents[1]
VENDORED = ROOT / "tests" / "data" / "openlineage"
OWN_FACET_SCHEMA = ROOT / "airflow_streaming" / "operators" / "SparkStreamRunFacet.json"
RUN_EVENT = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent"


def _schemas() -> list[dict[str, Any]]:
    files = [VENDORED / "OpenLineage.json", *sorted((VENDORED / "facets").glob("*.json")), OWN_FACET_SCHEMA]
    return [json.loads(path.read_text()) for path in files]


def registry() -> Registry:
    """Every known schema, under its ``$id``."""
    return Registry().with_resources((schema["$id"], Resource.from_contents(schema)) for schema in _schemas())


def _facets(event: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(where, facet)`` for every facet of an event: the run's, the job's, each dataset's."""
    for part in ("run", "job"):
        for name, facet in (event.get(part, {}).get("facets") or {}).items():
            yield f"{part}.facets.{name}", facet
    for kind in ("inputs", "outputs"):
        for index, dataset in enumerate(event.get(kind) or []):
            for key in ("facets", "inputFacets", "outputFacets"):
                for name, facet in (dataset.get(key) or {}).items():
                    yield f"{kind}[{index}].{key}.{name}", facet


def _errors(schema_url: str, instance: Any, known: Registry) -> list[str]:
    validator = Draft202012Validator({"$ref": schema_url}, registry=known)
    return [f"{'/'.join(map(str, error.absolute_path)) or '.'}: {error.message}"
            for error in validator.iter_errors(instance)]


def validate_event(event: dict[str, Any]) -> list[str]:
    """Validate one event (a RunEvent) and each facet against the schema its ``_schemaURL`` names; raise
    ``AssertionError`` listing every error. Returns the schema URLs the facets were checked against."""
    known = registry()
    problems = [f"event {error}" for error in _errors(RUN_EVENT, event, known)]
    checked = []
    for where, facet in _facets(event):
        url = facet.get("_schemaURL")
        if not url:
            problems.append(f"{where}: no _schemaURL")
            continue
        try:
            problems.extend(f"{where} ({url}) {error}" for error in _errors(url, facet, known))
        except Exception as exc:  # noqa: BLE001 - an unresolvable schema URL is a failure to report
            problems.append(f"{where}: its schema {url} cannot be resolved offline: {exc}")
        checked.append(url)
    assert not problems, "\n".join(problems)
    return checked
