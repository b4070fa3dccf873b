"""The Airflow plugin that puts streams in the UI (registered through the ``airflow.plugins`` entry point).

- a FastAPI app mounted at ``/streaming`` in ``airflow api-server`` (:mod:`airflow_streaming.ui.api`);
- an external view "Streams" in the UI's navigation (``/plugin/streams``) showing the dashboard page;
- the operator extra links are declared on the operators themselves (:mod:`airflow_streaming.ui.links`).

Why an entry point and not the provider info's ``plugins`` list: Airflow 3.3 loads provider-listed
plugins only when ``[core] lazy_discover_providers`` is False (``airflow.plugins_manager``), and a
plugin listed in both places is reported as "already registered". The entry point is always loaded,
so installing the package is enough.

The app is built on first access (:attr:`StreamingPlugin.fastapi_apps`), i.e. only in the API
server: schedulers, workers and DAG processors load plugins too and never pay for it.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from airflow.plugins_manager import AirflowPlugin

from airflow_streaming.ui.links import URL_ROUTE, airflow_base


def _root() -> str:
    return urlsplit(airflow_base() or "/").path.rstrip("/")


class StreamingPlugin(AirflowPlugin):
    """Streams overview and per-stream dashboards in the Airflow UI (read-only; see ``docs/ui.md``)."""

    name = "airflow_streaming"

    @cached_property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        from airflow_streaming.ui.api import URL_PREFIX, create_app

        return [{"app": create_app(), "url_prefix": URL_PREFIX, "name": "Streams"}]

    @cached_property
    def external_views(self) -> list[dict[str, Any]]:  # type: ignore[override]
        root = _root()
        return [{
            "name": "Streams",
            "href": f"{root}/streaming/ui/",
            "destination": "nav",
            "url_route": URL_ROUTE,
            "nav_top_level": True,
            "icon": f"{root}/streaming/static/icon.svg",
        }]
