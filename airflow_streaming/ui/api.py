"""The plugin's FastAPI app, mounted at ``/streaming`` in ``airflow api-server`` (see ``docs/ui.md``).

- ``GET /streaming/api/streams``: the overview - one page of rows (``?q=`` name search, ``health=``,
  ``supervisor=``, ``version=`` filters (comma-separated values), ``sort=``/``dir=``, ``page=``/``per_page=``:
  :mod:`airflow_streaming.ui.overview`), the counts per health, supervisor and version value of every
  stream the user may see, and the page's settings;
- ``GET /streaming/api/streams/{name}``: one stream (series, lifecycle timeline, compatibility report,
  the DAG runs that acted on it);
- ``GET /streaming/ui/`` and ``/streaming/ui/stream/{name}``: the page (no data in it); ``/streaming/static``.

Every ``/api`` route requires Airflow's own authentication (the UI session cookie or a ``Bearer`` JWT,
resolved by :func:`airflow.api_fastapi.core_api.security.get_user`) and the auth manager's permission
on the custom view ``Streams`` (method GET). A stream - its row, spec, history and actions - is shown
only to users who may read the DAG that deployed it (:mod:`airflow_streaming.ui.access`), and DAG runs
are only listed for DAGs the user may read. The
API is read-only: actions are DAG runs of the operations DAG, created by the page through Airflow's
public REST API with the user's own session (so they are authorized and audited like any trigger).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote, urlsplit

from fastapi import Depends, FastAPI, HTTPException, Request, status
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import GetUserDep
from airflow_streaming import config
from airflow_streaming.ui import views
from airflow_streaming.ui.access import visible_streams
from airflow_streaming.ui.overview import BadQuery, OverviewQuery, select, summarize
from airflow_streaming.ui.streams import configured_sources, discover, read_stream

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).resolve().parent / "static"
#: The auth manager's custom-view resource that guards the plugin (``is_authorized_custom_view``).
RESOURCE_NAME = "Streams"
URL_PREFIX = "/streaming"


def settings() -> dict[str, Any]:
    """The page's settings from ``[airflow_streaming]`` in Airflow's config (see ``docs/ui.md``)."""
    from airflow.configuration import conf

    return {
        "refresh_s": config.get_float("ui_refresh_seconds"),
        "actions_enabled": config.get_bool("ui_actions"),
        "operations_dag_id": config.get_option("operations_dag_id"),
        "airflow_root": urlsplit(conf.get("api", "base_url", fallback="") or "/").path.rstrip("/"),
    }


def authorized_user(user: GetUserDep) -> BaseUser:
    """The request's user if the auth manager lets them read the ``Streams`` view; 401/403 otherwise."""
    from airflow.api_fastapi.app import get_auth_manager

    if not get_auth_manager().is_authorized_custom_view(method="GET", resource_name=RESOURCE_NAME, user=user):
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"not authorized to read the {RESOURCE_NAME} view")
    return user


UserDep = Annotated[BaseUser, Depends(authorized_user)]


def dag_runs_for(owners: list[str], user: BaseUser, session: Any, airflow_root: str) -> dict[str, dict[str, Any]]:
    """Owner string -> the DAG run (and task) it names, for DAG runs that exist and the user may read."""
    from sqlalchemy import select

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.models.dagrun import DagRun

    parsed = {o: p for o in owners if (p := views.parse_owner(o)) is not None}
    if not parsed:
        return {}
    run_ids = {p["run_id"] for p in parsed.values()}
    rows = session.execute(select(DagRun.dag_id, DagRun.run_id, DagRun.state, DagRun.start_date, DagRun.end_date)
                           .where(DagRun.run_id.in_(run_ids))).all()
    runs = {(r.dag_id, r.run_id): r for r in rows}
    readable = get_auth_manager().get_authorized_dag_ids(user=user, method="GET", session=session)
    found: dict[str, dict[str, Any]] = {}
    for owner, p in parsed.items():
        for dag_id, task_id in p["candidates"]:
            row = runs.get((dag_id, p["run_id"]))
            if row is None or dag_id not in readable:
                continue
            base = f"{airflow_root}/dags/{quote(dag_id, safe='')}/runs/{quote(row.run_id, safe='')}"
            task_url = f"{base}/tasks/{quote(task_id, safe='')}"
            if p["map_index"] is not None:
                task_url += f"/mapped/{p['map_index']}"
            found[owner] = {"dag_id": dag_id, "run_id": row.run_id, "task_id": task_id, "try": p["try"],
                            "state": str(row.state.value if hasattr(row.state, "value") else row.state),
                            "start": row.start_date.timestamp() * 1000 if row.start_date else None,
                            "end": row.end_date.timestamp() * 1000 if row.end_date else None,
                            "url": base, "task_url": task_url}
            break
    return found


def asset_pages(uris: list[str], user: BaseUser, session: Any, airflow_root: str) -> dict[str, str]:
    """Asset URI -> Airflow's own page of that Asset, for the Assets Airflow knows (a DAG declared them:
    the deploy and upgrade tasks of a spec with ``assets``) when the user may read assets."""
    from sqlalchemy import select

    from airflow.api_fastapi.app import get_auth_manager
    from airflow.models.asset import AssetModel

    if not uris or not get_auth_manager().is_authorized_asset(method="GET", user=user):
        return {}
    rows = session.execute(select(AssetModel.id, AssetModel.uri).where(AssetModel.uri.in_(uris))).all()
    return {row.uri: f"{airflow_root}/assets/{int(row.id)}" for row in rows}


def _index(request: Request) -> HTMLResponse:
    html = (STATIC_DIR / "index.html").read_text(encoding="utf-8")
    root = request.scope.get("root_path", "") or URL_PREFIX
    return HTMLResponse(html.replace("{{ROOT}}", root), headers={"Cache-Control": "no-store"})


def create_app() -> FastAPI:
    """Build the plugin's app (one per API server process)."""
    app = FastAPI(title="Streams (airflow-streaming)", docs_url=None, redoc_url=None, openapi_url=None)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/ui/", include_in_schema=False)
    def page_overview(request: Request) -> HTMLResponse:
        return _index(request)

    @app.get("/ui/stream/{name}", include_in_schema=False)
    def page_stream(request: Request, name: str) -> HTMLResponse:
        return _index(request)

    @app.get("/api/streams")
    def list_streams(request: Request, user: UserDep, session: SessionDep) -> dict[str, Any]:
        started = time.monotonic()
        try:
            query = OverviewQuery.from_params(request.query_params)
        except BadQuery as exc:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, str(exc)) from None
        found = discover(*configured_sources())
        access = visible_streams(found.streams, user, session)
        now = time.time()
        refs = {ref.name: ref for ref in access.visible}
        chosen = select([summarize(ref, now) for ref in access.visible], query)
        rows = [views.overview_row(read_stream(refs[name], now)) for name in chosen.names]
        conf = settings()
        owners = [o for r in rows if (o := (r.get("last_action") or {}).get("owner"))]
        runs = dag_runs_for(owners, user, session, conf["airflow_root"])
        for row in rows:
            action = row.get("last_action")
            if action:
                action["dag_run"] = runs.get(action.get("owner"))
            row["actionable"] = row["source"] == "desired_state"
        # Discovery errors name other streams' directories: only for who may read every DAG.
        errors = found.errors if access.reads_every_dag else []
        return {"streams": rows, "total": chosen.total, "matched": chosen.matched, "page": chosen.page,
                "pages": chosen.pages, "per_page": query.per_page, "facets": chosen.facets,
                "sort": {"key": query.sort, "dir": "desc" if query.desc else "asc"},
                "errors": errors, "generated_at": time.time() * 1000,
                "took_ms": round((time.monotonic() - started) * 1000, 1), "settings": conf}

    @app.get("/api/streams/{name}")
    def get_stream(name: str, user: UserDep, session: SessionDep) -> dict[str, Any]:
        found = discover(*configured_sources())
        ref = next((r for r in found.streams if r.name == name), None)
        if ref is None or not visible_streams([ref], user, session).visible:  # the same answer: no hint it exists
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no managed stream named {name!r}")
        snap = read_stream(ref)
        detail = views.stream_detail(snap)
        conf = settings()
        runs = dag_runs_for(views.owners_of(snap), user, session, conf["airflow_root"])
        for action in detail["actions"] + ([detail["last_action"]] if detail.get("last_action") else []):
            action["dag_run"] = runs.get(action.get("owner"))
        if detail.get("compat"):
            detail["compat"]["dag_run"] = runs.get(detail["compat"].get("owner"))
        views.link_assets(detail, asset_pages(views.asset_uris(detail), user, session, conf["airflow_root"]))
        detail["dag_runs"] = sorted(runs.values(), key=lambda r: r.get("start") or 0, reverse=True)
        detail["actionable"] = ref.source == "desired_state"
        detail["generated_at"] = time.time() * 1000
        detail["settings"] = conf
        return detail

    return app
