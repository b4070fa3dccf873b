"""STAND-IN for a YARN ResourceManager's REST API (and one NodeManager's container logs).

Not YARN. It speaks the subset the YARN target uses, shaped after the Hadoop ResourceManager REST
API documentation:

- ``GET /ws/v1/cluster/apps/{id}`` -> ``{"app": {...}}`` (id, name, user, queue, state, finalStatus,
  diagnostics, applicationTags as a comma-separated lower-case string, trackingUrl, amContainerLogs);
  an unknown id -> 404 ``{"RemoteException": {"exception": "NotFoundException", ...}}``;
- ``GET /ws/v1/cluster/apps?applicationTags=a,b&states=X,Y`` -> ``{"apps": {"app": [...]}}`` or
  ``{"apps": null}`` (tags match any, lower-cased, as the RM does);
- ``PUT /ws/v1/cluster/apps/{id}/state`` ``{"state": "KILLED"}`` -> 202 with the state before the kill,
  200 when it already ended; without ``user.name`` (pseudo authentication) -> 403, as an RM with no
  authenticated user answers;
- ``GET /ws/v1/node/containerlogs/{container}/{file}`` (the NodeManager's raw log endpoint).

Its own control endpoint ``POST /standin/apps`` (used by the fake spark-submit, as the real one asks
the RM for a new application) registers an application in state ACCEPTED.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from standins import StandInServer

TERMINAL = {"FINISHED", "FAILED", "KILLED"}


class YarnRmStandIn(StandInServer):
    """ResourceManager REST API stand-in (see the module docstring). ``apps`` is inspectable/editable."""

    cluster_ts = 1700000000000

    def __init__(self) -> None:
        super().__init__()
        self.apps: dict[str, dict[str, Any]] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.kills: list[tuple[str, str | None]] = []
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ test helpers
    def register(self, name: str, tags: list[str], queue: str = "default", user: str = "airflow") -> str:
        with self._lock:
            app_id = f"application_{self.cluster_ts}_{len(self.apps) + 1:04d}"
            container = f"container_{self.cluster_ts}_{len(self.apps) + 1:04d}_01_000001"
            self.apps[app_id] = {
                "id": app_id, "user": user, "name": name, "queue": queue, "state": "ACCEPTED",
                "finalStatus": "UNDEFINED", "progress": 0.0, "trackingUI": "UNASSIGNED", "diagnostics": "",
                "applicationType": "SPARK", "applicationTags": ",".join(t.lower() for t in tags),
                "trackingUrl": f"{self.url}/proxy/{app_id}/",
                "amContainerLogs": f"{self.url}/node/containerlogs/{container}/{user}",
                "startedTime": 0, "finishedTime": 0,
            }
            self.logs[(container, "stdout")] = f"driver stdout of {app_id}\nline 2\nlast line of {app_id}\n"
            return app_id

    def set_state(self, app_id: str, state: str, final: str = "UNDEFINED", diagnostics: str = "") -> None:
        with self._lock:
            self.apps[app_id].update(state=state, finalStatus=final, diagnostics=diagnostics)

    # ------------------------------------------------------------------ protocol
    def handle(self, method: str, path: str, query: dict[str, str], headers: dict[str, str],
               body: bytes) -> tuple[int, Any, str]:
        parts = path.strip("/").split("/")
        if method == "POST" and path == "/standin/apps":
            doc = json.loads(body)
            return 200, {"id": self.register(doc["name"], doc.get("tags") or [], doc.get("queue") or "default")}, \
                "application/json"
        if parts[:3] == ["ws", "v1", "cluster"] and len(parts) >= 4 and parts[3] == "apps":
            if len(parts) == 4 and method == "GET":
                return self._list(query)
            app = self.apps.get(parts[4]) if len(parts) > 4 else None
            if app is None:
                return 404, {"RemoteException": {
                    "exception": "NotFoundException",
                    "message": f"java.lang.Exception: app with id: {parts[4] if len(parts) > 4 else ''} not found",
                    "javaClassName": "org.apache.hadoop.yarn.webapp.NotFoundException"}}, "application/json"
            if len(parts) == 5 and method == "GET":
                return 200, {"app": dict(app)}, "application/json"
            if len(parts) == 6 and parts[5] == "state":
                return self._state(method, app, query, body)
        if parts[:4] == ["ws", "v1", "node", "containerlogs"] and len(parts) == 6:
            text = self.logs.get((parts[4], parts[5]))
            if text is None:
                return 404, {"RemoteException": {"message": "Cannot find this log on the local disk."}}, \
                    "application/json"
            size = int(query.get("size", "0") or 0)
            if size < 0:
                text = text[size:]
            return 200, text.encode(), "text/plain"
        return 404, {"RemoteException": {"message": f"stand-in: no route {method} {path}"}}, "application/json"

    def _list(self, query: dict[str, str]) -> tuple[int, Any, str]:
        wanted_tags = {t.strip().lower() for t in query.get("applicationTags", "").split(",") if t.strip()}
        wanted_states = {s.strip().upper() for s in query.get("states", "").split(",") if s.strip()}
        apps = [dict(a) for a in self.apps.values()
                if (not wanted_tags or wanted_tags & set(a["applicationTags"].split(",")))
                and (not wanted_states or a["state"] in wanted_states)]
        return 200, {"apps": {"app": apps} if apps else None}, "application/json"

    def _state(self, method: str, app: dict[str, Any], query: dict[str, str], body: bytes) -> tuple[int, Any, str]:
        if method == "GET":
            return 200, {"state": app["state"]}, "application/json"
        if method != "PUT":
            return 405, {"RemoteException": {"message": "method not allowed"}}, "application/json"
        user = query.get("user.name")
        if not user:
            return 403, {"RemoteException": {"exception": "AuthorizationException",
                                             "message": "Unable to obtain user name, user not authenticated",
                                             "javaClassName": "org.apache.hadoop.security.authorize."
                                                              "AuthorizationException"}}, "application/json"
        if json.loads(body or b"{}").get("state") != "KILLED":
            return 400, {"RemoteException": {"message": "Only 'KILLED' is allowed as a target state."}}, \
                "application/json"
        self.kills.append((app["id"], user))
        if app["state"] in TERMINAL:
            return 200, {"state": app["state"]}, "application/json"
        before = app["state"]
        self.set_state(app["id"], "KILLED", "KILLED", "Application killed by user.")
        return 202, {"state": before}, "application/json"
