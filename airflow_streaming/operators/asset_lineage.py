"""A spec's declared assets as an operator's ``inlets`` (its sources) and ``outlets`` (its sinks).

The deploy and upgrade operators call :func:`declare_spec_assets` in their ``__init__``: Airflow reads a
task's inlets and outlets when the DAG is parsed (the DAG's asset graph, the Assets a downstream DAG can be
scheduled on), so they can come only from a spec known then - a :class:`~airflow_streaming.spec.StreamSpec`,
or a dict whose ``assets`` hold no Jinja template. A spec given as a path (a YAML file Airflow renders at
run time) or as a template string, and a dict whose ``assets`` are templated, add nothing: the task's
``inlets``/``outlets`` stay what the DAG author passed.

The DAG author's own ``inlets=``/``outlets=`` are kept, first; the spec's Assets are added after them,
except one whose URI the author already listed (the author's object wins: its name, group, extra).
On success Airflow records an asset event for each outlet; :func:`describe_asset_events` gives each event of
the spec's sinks the stream, version and run that wrote it (``extra``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_streaming.operators.parameters import is_template
from airflow_streaming.spec import StreamSpec
from airflow_streaming.stream_assets import check_assets, spec_assets

__all__ = ["declare_spec_assets", "describe_asset_events", "known_assets"]


def _holds_template(value: Any) -> bool:
    if isinstance(value, Mapping):
        return any(_holds_template(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(_holds_template(v) for v in value)
    return is_template(value)


def known_assets(spec: Any) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """``(sources, sinks)`` of a spec known when the DAG is parsed; ``None`` when they are only known once
    rendered (a path, a template string, a dict with templated ``assets``). A dict's ``assets`` are checked
    (:class:`~airflow_streaming.exceptions.SpecError` fails the DAG file, as a bad duration does)."""
    if isinstance(spec, StreamSpec):
        return spec_assets(spec)
    if isinstance(spec, Mapping):
        assets = spec.get("assets")
        if _holds_template(assets):
            return None
        checked = check_assets(assets)
        return tuple(checked.get("sources", ())), tuple(checked.get("sinks", ()))
    return None


def _merged(given: list[Any], uris: tuple[str, ...]) -> list[Any]:
    from airflow.sdk import Asset

    listed = {getattr(item, "uri", None) for item in given}
    return [*given, *(Asset(uri=uri) for uri in uris if Asset(uri=uri).uri not in listed)]


def declare_spec_assets(operator: Any, spec: Any) -> None:
    """Add the spec's sources to ``operator.inlets`` and its sinks to ``operator.outlets`` (see the module)."""
    assets = known_assets(spec)
    if assets is None:
        return
    sources, sinks = assets
    operator.inlets = _merged(list(operator.inlets), sources)
    operator.outlets = _merged(list(operator.outlets), sinks)


def describe_asset_events(operator: Any, context: Any, spec: StreamSpec, identity: Mapping[str, Any]) -> None:
    """Put the stream, its version and run (``identity``) in the ``extra`` of the asset event Airflow records
    for each of ``spec``'s sinks that is one of the task's outlets."""
    events = context.get("outlet_events") if hasattr(context, "get") else None
    if events is None:
        return
    from airflow.sdk import Asset

    sinks = {Asset(uri=uri).uri for uri in spec_assets(spec)[1]}
    extra = {"stream": spec.name, "version": spec.version,
             **{key: identity[key] for key in ("run_id", "app_id") if identity.get(key)}}
    for outlet in operator.outlets:
        if getattr(outlet, "uri", None) in sinks:
            events[outlet].extra.update(extra)
