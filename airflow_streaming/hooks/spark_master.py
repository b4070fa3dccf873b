"""Ask a Spark standalone master (its web UI's ``/json/`` endpoint) whether an application is running."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlparse

log = logging.getLogger(__name__)

DEFAULT_MASTER_UI_PORT = 8080


def master_ui_url(master: str, ui_url: str | None = None) -> str | None:
    """The master's web UI for ``spark://host:port`` (``ui_url`` wins); ``None`` for other masters."""
    if ui_url:
        return ui_url.rstrip("/")
    if not master.startswith("spark://"):
        return None
    host = urlparse(master.split(",")[0]).hostname
    return f"http://{host}:{DEFAULT_MASTER_UI_PORT}" if host else None


@dataclass(frozen=True)
class ClusterAppState:
    """What the master says about one application."""

    app_id: str
    state: str | None
    """RUNNING / WAITING (active), FINISHED / KILLED / FAILED (completed), None if unknown to the master."""
    active: bool | None
    """True: running on the cluster; False: completed; None: the master does not know it."""


def app_state(ui_url: str, app_id: str, timeout: float = 3.0) -> ClusterAppState:
    """Look ``app_id`` up in the master's JSON; raises ``OSError`` if the master cannot be reached."""
    with urllib.request.urlopen(f"{ui_url}/json/", timeout=timeout) as resp:  # noqa: S310 - operator-given URL
        data = json.load(resp)
    for key, active in (("activeapps", True), ("completedapps", False)):
        for app in data.get(key) or []:
            if app.get("id") == app_id:
                return ClusterAppState(app_id, app.get("state"), active)
    return ClusterAppState(app_id, None, None)
