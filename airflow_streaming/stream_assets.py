"""The data a stream reads and writes, declared as Airflow Asset URIs (the spec's ``assets`` field).

Plain Python (no Airflow import): the spec checks its ``assets`` here, on the Airflow side and in the Spark
driver alike. The rule is Airflow 3.3's own (``airflow.sdk.definitions.asset._sanitize_uri`` and the
``Asset`` validators), reproduced so that a URI this module accepts is one ``airflow.sdk.Asset(uri=...)``
accepts too:

- a string of at most 1500 characters, not blank;
- a URI: it has a scheme (``file:///data/out``, ``s3://bucket/key``, ``kafka://broker:9092/topic``);
- not the ``airflow`` scheme (Airflow reserves it);
- normalised as Airflow normalises it: scheme in lower case, trailing slashes of the path removed (``/`` for
  an empty path), query parameters sorted, fragment dropped - except for ``x-`` schemes, which Airflow
  keeps verbatim;
- the URI rules of the providers for the usual schemes (each provider's ``sanitize_uri``): ``s3://`` and
  ``gs://`` name a bucket, ``postgres://`` / ``postgresql://`` a host and ``/database/schema/table``, with a
  numeric port; and any port must be a number.

Unlike Airflow, which drops a password from a URI with a warning, a URI with a password is refused: a spec
is stored, and a secret has no place there.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any

from airflow_streaming.exceptions import SpecError

__all__ = ["ASSET_KINDS", "check_asset_uri", "check_assets", "spec_assets"]

#: The keys of a spec's ``assets``: what the stream reads (inlets) and what it writes (outlets).
ASSET_KINDS = ("sources", "sinks")

#: Airflow's limit on an Asset's name and URI (``_validate_identifier``).
_MAX_URI_LENGTH = 1500


def _provider_rule(scheme: str, parts: urllib.parse.SplitResult) -> str | None:
    """What the provider's URI handler of ``scheme`` refuses in ``parts`` (``None``: nothing)."""
    if scheme in ("s3", "gs", "gcs") and not parts.netloc:
        return f"a {scheme}:// URI must name a bucket ({scheme}://bucket/key)"
    if scheme in ("postgres", "postgresql"):
        if not parts.netloc:
            return f"a {scheme}:// URI must name a host ({scheme}://host:5432/database/schema/table)"
        if len(parts.path.split("/")) != 4:
            return f"a {scheme}:// URI must name the database, schema and table ({scheme}://host:5432/database/schema/table)"
    return None


def check_asset_uri(value: Any, field: str) -> str:
    """``value`` checked as an Airflow Asset URI and normalised as Airflow normalises it; :class:`SpecError`
    naming ``field`` otherwise."""
    if not isinstance(value, str):
        raise SpecError(field, f"must be an Asset URI string, got {type(value).__name__} {value!r}")
    if not value or value.isspace():
        raise SpecError(field, "must be an Asset URI, got an empty string")
    if len(value) > _MAX_URI_LENGTH:
        raise SpecError(field, f"must be at most {_MAX_URI_LENGTH} characters (Airflow's limit), got {len(value)}")
    try:
        parts = urllib.parse.urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise SpecError(field, f"is not a valid URI ({exc}): {value!r}") from exc
    scheme = parts.scheme.lower()
    if not scheme:
        raise SpecError(field, f"must be a URI with a scheme (file:///data/out, s3://bucket/key, "
                               f"kafka://broker:9092/topic), got {value!r}")
    if scheme.startswith("x-"):
        return value
    if scheme == "airflow":
        raise SpecError(field, f"the 'airflow' scheme is reserved by Airflow, got {value!r}")
    if parts.password:
        raise SpecError(field, "must not hold a password (Airflow would drop it, and a spec is stored): "
                               "name the data, not the credentials")
    refused = _provider_rule(scheme, parts)
    if refused:
        raise SpecError(field, f"{refused}, got {value!r}")
    query = urllib.parse.urlencode(sorted(urllib.parse.parse_qsl(parts.query))) if parts.query else ""
    return urllib.parse.urlunsplit(parts._replace(scheme=scheme, path=parts.path.rstrip("/") or "/",
                                                  query=query, fragment=""))


def check_assets(value: Any) -> dict[str, tuple[str, ...]]:
    """A spec's ``assets`` checked and normalised: ``{"sources": (...), "sinks": (...)}``, or ``{}`` when it
    declares none (a spec without assets stores nothing for them)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise SpecError("assets", f"must be a mapping with 'sources' and/or 'sinks', got {type(value).__name__}")
    unknown = sorted(str(key) for key in value if key not in ASSET_KINDS)
    if unknown:
        raise SpecError(f"assets.{unknown[0]}", f"unknown key (allowed: {', '.join(ASSET_KINDS)})")
    result: dict[str, tuple[str, ...]] = {}
    for kind in ASSET_KINDS:
        uris = value.get(kind) or ()
        if isinstance(uris, str) or not isinstance(uris, (list, tuple)):
            raise SpecError(f"assets.{kind}", f"must be a list of Asset URIs, got {type(uris).__name__}")
        checked = tuple(check_asset_uri(uri, f"assets.{kind}[{index}]") for index, uri in enumerate(uris))
        for index, uri in enumerate(checked):
            if uri in checked[:index]:
                raise SpecError(f"assets.{kind}[{index}]", f"repeats {uri!r}")
        result[kind] = checked
    return result if any(result.values()) else {}


def spec_assets(spec: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The URIs a spec declares: ``(sources, sinks)``, each empty when it declares none."""
    assets = getattr(spec, "assets", None) or {}
    return tuple(assets.get("sources", ())), tuple(assets.get("sinks", ()))
