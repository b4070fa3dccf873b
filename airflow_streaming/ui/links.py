"""Extra links on every operator and sensor of the provider: "Spark UI" and "Stream dashboard".

Airflow computes an operator's links in the worker when the task finishes and stores each one as an
XCom (``_link_<class name>``); the task page shows them as buttons. Both links find the stream from
the task's own result (``stream`` / ``spark_ui`` in its ``return_value`` XCom, as the deploy operator
returns them) and otherwise from the operator's spec; the Spark UI falls back to the URL in the
stream's status document while its driver runs. Only an ``http(s)://`` URL becomes a link (the status
document is written by the driver: a ``javascript:`` URL there would run in the viewer's session). A
link that cannot be computed is empty (no button), never an error.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk import BaseOperator
    from airflow.sdk.types import TaskInstanceKey

log = logging.getLogger(__name__)

#: The external view's ``url_route``: the dashboard lives at ``<airflow>/plugin/streams/...``.
URL_ROUTE = "streams"
LIVE_STATES = ("STARTING", "RUNNING", "STOPPING")


def airflow_base() -> str:
    """``[api] base_url`` without its trailing slash ('' when not configured: links stay relative)."""
    try:
        from airflow.configuration import conf

        return (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    except Exception:  # noqa: BLE001
        return ""


def dashboard_url(stream: str | None, base: str | None = None) -> str:
    """The Airflow UI URL of the dashboard (one stream's page when ``stream`` is given).

    The page runs in the Airflow UI's frame for the plugin view: ``<base>/plugin/streams`` followed by
    the page's own path (``<base path>/streaming/ui/stream/<name>``)."""
    base = airflow_base() if base is None else base.rstrip("/")
    page = f"{urlsplit(base).path.rstrip('/')}/streaming/ui/" + (f"stream/{quote(stream, safe='')}" if stream else "")
    return f"{base}/plugin/{URL_ROUTE}{page}"


def _return_value(ti_key: TaskInstanceKey) -> Mapping[str, Any]:
    try:
        from airflow.sdk.execution_time.xcom import XCom

        value = XCom.get_value(ti_key=ti_key, key="return_value")
    except Exception:  # noqa: BLE001 - no XCom backend reachable (outside a task): no value
        log.debug("no return_value XCom for %s", ti_key, exc_info=True)
        return {}
    return value if isinstance(value, Mapping) else {}


def operator_spec(operator: Any) -> Any:
    """The stream spec an operator acts on (``spec``, else ``current``), as a :class:`StreamSpec` or ``None``."""
    from airflow_streaming.spec import as_spec

    for attr in ("spec", "current"):
        value = getattr(operator, attr, None)
        if value is None:
            continue
        try:
            return as_spec(value)
        except Exception:  # noqa: BLE001 - an unrendered template, a missing YAML file...
            continue
    return None


def stream_of(operator: Any, result: Mapping[str, Any]) -> str | None:
    """The name of the stream a task acted on: from its result, else from its spec."""
    name = result.get("stream")
    if isinstance(name, str) and name:
        return name
    spec = operator_spec(operator)
    return spec.name if spec is not None else None


class StreamDashboardLink(BaseOperatorLink):
    """The stream's page in the Streams dashboard (the overview for a task over several streams)."""

    name = "Stream dashboard"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        return dashboard_url(stream_of(operator, _return_value(ti_key)))


class SparkUILink(BaseOperatorLink):
    """The Spark UI of the stream's driver: from the task's result, else from the live status document."""

    name = "Spark UI"

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        from airflow_streaming.ui.views import http_url

        result = _return_value(ti_key)
        url = http_url(result.get("spark_ui"))
        if url:
            return url
        spec = operator_spec(operator)
        if spec is None:
            return ""
        try:
            from airflow_streaming.hooks.streaming_job import SparkStreamHook

            doc = SparkStreamHook(spec).status()
        except Exception:  # noqa: BLE001 - links never fail a task
            log.debug("no status for the Spark UI link of %s", spec.name, exc_info=True)
            return ""
        if doc is None or doc.state not in LIVE_STATES:
            return ""
        return http_url(doc.spark_ui) or ""  # a driver writes status.json: only an http(s) URL is a link


#: What every operator and sensor of the provider carries.
STREAM_LINKS = (SparkUILink(), StreamDashboardLink())
