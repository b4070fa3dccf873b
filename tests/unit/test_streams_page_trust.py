"""Trust boundary of the Streams page (issue 25, item 9; issue 21, the page's access rule and lag display).

- The page's handlers never ask a host that a control file names, nor any cluster manager: a
  ``driver.json`` written beside the driver names a standalone master, a YARN ResourceManager or a
  Kubernetes API server that hangs for 10 s (an attacker's listener here); reading the stream makes no
  request to it and returns at once. The positive control: the hook the operators use does ask it.
- Only ``http(s)://`` URLs from a status document become links (``javascript:`` runs in the session).
- A stream is shown only to users who may read the DAG that deployed it: the deployer is sealed into
  ``deployed.json`` at deploy time, and the filter asks a real ``SimpleAuthManager`` with teams (the
  auth manager's own ``get_authorized_dag_ids``) over a real Airflow metadata DB.
- A negative event-time lag is shown as 0 with a note; a stopped stream shows no lag.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
import stream_actions

from airflow_streaming.control import contract
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.sealing import deployer_of, sealed
from airflow_streaming.spec import StreamSpec
from airflow_streaming.ui import views
from airflow_streaming.ui.streams import StreamRef, discover, read_stream

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "status"
RUN = "20261125T000000Z-0000page"


class HangingListener:
    """A host named by a control file: records each request, answers after ``delay`` seconds (a cluster
    manager that hangs; the clients' own timeout is 10 s)."""

    def __init__(self, delay: float = 2.5) -> None:
        self.requests: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _any(self) -> None:
                outer.requests.append(f"{self.command} {self.path}")
                time.sleep(delay)
                self.send_response(200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            do_GET = do_POST = _any  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> HangingListener:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _record(target: str, handle: dict, tmp_path: Path) -> str:
    return json.dumps({"run_id": RUN, "stream": "s1", "version": "v1", "application": "events_etl", "host": "other",
                       "command": "", "log_path": "", "submitted_at": 1.0, "checkpoint_location": str(tmp_path),
                       "target": target, "handle": handle})


def _status(tmp_path: Path, state: str = "RUNNING", spark_ui: str | None = None) -> str:
    doc = contract.StatusDocument(stream="s1", version="v1", run_id=RUN, state=state, pid=1, host="other",
                                  app_id="app-20261125000000-0001",
                                  started_at=time.time() - 60, heartbeat_at=time.time(), ready=True,
                                  queries=[contract.QueryStatus("q", "r", "s1", True, last_batch_id=3)],
                                  spark_ui=spark_ui)
    return doc.to_json().decode()


# ------------------------------------------------------------------ no network calls per refresh


@pytest.mark.parametrize("kind", ["standalone-cluster", "yarn", "kubernetes", "sealed spark:// master"])
def test_the_page_asks_no_host_a_control_file_names(tmp_path, kind):
    ctl = tmp_path / "control"
    d = ctl / "s1"
    d.mkdir(parents=True)
    with HangingListener() as host:
        spec = {"name": "s1", "version": "v1", "application": "events_etl", "control_location": str(ctl),
                "checkpoint_location": str(tmp_path / "ckpt"), "master": "local[2]"}
        handles = {"standalone-cluster": {"submission_id": "driver-1", "rest_url": host.url, "master_ui_url": host.url},
                   "yarn": {"app_id": "application_1_0001", "rm_url": host.url, "rm_urls": [host.url]},
                   "kubernetes": {"namespace": "x", "pod": "p", "api_server": host.url}}
        if kind == "sealed spark:// master":  # the deployment's own spec: still no call from the page
            spec.update(master="spark://127.0.0.1:7077", master_ui_url=host.url)
            (d / "driver.json").write_text(_record("local", {"pid": 1}, tmp_path))
        else:
            (d / "driver.json").write_text(_record(kind, handles[kind], tmp_path))
        (d / "deployed.json").write_text(json.dumps({"run_id": RUN, "at": 1.0, "spec": sealed(spec)}))
        (d / "status.json").write_text(_status(tmp_path))
        (ref,) = discover(None, [str(ctl)]).streams
        started = time.monotonic()
        snap = read_stream(ref)
        row = views.overview_row(snap)
        took = time.monotonic() - started
        assert host.requests == [] and took < 2.0, (host.requests, took)
        assert row["health"]["state"] in ("HEALTHY", "IDLE", "UNKNOWN", "STALLED"), row["health"]
        # The positive control: the hook the operators and the supervisor use asks the host its spec names.
        # A host that only the record names is asked by nobody (a record's API server: issue 25 item 1; a
        # record's ResourceManager, REST server or master UI: issue 35).
        real = SparkStreamHook(ref.spec)
        if kind == "sealed spark:// master":
            real.health()
            assert host.requests, "the control: the operators' hook asks the cluster manager"
        else:  # the spec configures no such cluster: the target cannot be built, naming the setting to set
            with pytest.raises(ValueError, match="rest_url|resourcemanager_url|api_server"):
                real.health()
            assert host.requests == []


# ------------------------------------------------------------------ links only for http(s)


@pytest.mark.parametrize("url", ["javascript:alert(document.cookie)", "JavaScript:alert(1)", " javascript:alert(1)",
                                 "data:text/html,<script>alert(1)</script>", "vbscript:x", "//evil.example/x",
                                 "http:/no-host", "http://exa mple/", "file:///etc/passwd", 7, None])
def test_only_http_urls_are_links(url):
    assert views.http_url(url) is None


def test_http_urls_are_kept():
    assert views.http_url("http://driver-host:4040") == "http://driver-host:4040"
    assert views.http_url("HTTPS://h.example/x?y=1") == "HTTPS://h.example/x?y=1"


def test_a_javascript_spark_ui_in_status_json_is_no_link(tmp_path):
    ctl = tmp_path / "control"
    (ctl / "s1").mkdir(parents=True)
    (ctl / "s1" / "status.json").write_text(_status(tmp_path, spark_ui="javascript:alert(document.cookie)"))
    (ref,) = discover(None, [str(ctl)]).streams
    snap = read_stream(ref)
    snap.health = {"state": "HEALTHY", "reasons": []}
    assert views.overview_row(snap)["spark_ui"] is None
    snap.status["spark_ui"] = "http://driver:4040"
    assert views.overview_row(snap)["spark_ui"] == "http://driver:4040"


def test_the_spark_ui_extra_link_refuses_a_javascript_url(tmp_path):
    from airflow_streaming.ui.links import SparkUILink

    spec = StreamSpec(name="s1", application="events_etl", control_location=str(tmp_path / "control"),
                      checkpoint_location=str(tmp_path / "ckpt"), master="local[2]")
    (tmp_path / "control" / "s1").mkdir(parents=True)
    status = tmp_path / "control" / "s1" / "status.json"
    operator = SimpleNamespace(spec=spec)
    status.write_text(_status(tmp_path, spark_ui="javascript:alert(1)"))
    assert SparkUILink().get_link(operator, ti_key=None) == ""
    status.write_text(_status(tmp_path, spark_ui="http://driver:4040"))
    assert SparkUILink().get_link(operator, ti_key=None) == "http://driver:4040"


# ------------------------------------------------------------------ lag


def test_a_negative_event_time_lag_is_shown_as_zero_with_a_note():
    point = views.progress_point({"timestamp": "2026-11-22T03:00:00.000Z", "batchId": 4,
                                  "eventTime": {"max": "2026-11-22T03:00:02.900Z"}}, "q")
    assert point["event_lag_s"] == -2.9  # the raw figure stays in the chart data
    lag = views.current_lag([point])
    assert lag["value"] == 0 and lag["label"] == "0.0s (event time)" and "-" not in lag["label"]
    assert "2.9s after the batch started" in lag["note"]


def test_a_stopped_stream_shows_no_lag(tmp_path):
    other = tmp_path / "other"
    (other / "legacy").mkdir(parents=True)
    shutil.copy(FIXTURES / "device_signals_stopped.json", other / "legacy" / "status.json")
    (ref,) = discover(None, [str(other)]).streams
    row = views.overview_row(read_stream(ref))
    assert row["reported_state"] == "STOPPED" and row["live"] is False
    assert row["lag"] is None  # was "325.2 d (watermark)": the calendar since its last batch
    assert views.current_lag(views.progress_points(json.loads((other / "legacy" / "status.json").read_text())))


# ------------------------------------------------------------------ who deployed it


def test_the_deployer_is_sealed_into_deployed_json_and_kept_by_later_actions(tmp_path):
    spec = StreamSpec(name="s1", application="events_etl", control_location=str(tmp_path / "control"),
                      checkpoint_location=str(tmp_path / "ckpt"), master="local[2]")
    hook = SparkStreamHook(spec)
    hook.storage.makedirs(hook.paths.root)
    record = contract.DriverRecord(run_id=RUN, stream="s1", version="v1", application="events_etl", host="h",
                                   command="", log_path="", submitted_at=1.0, checkpoint_location="/c", target="local",
                                   handle={})

    def deployed() -> dict:
        return json.loads(Path(hook.deployed_path).read_text())

    owner = "team_a.etl.deploy run manual__2026 try 1"
    with stream_actions.step_permit(hook, "deploy", owner=owner) as permit:
        hook._record_deployment(record, permit)
    control = spec.control_dir
    assert deployer_of(deployed(), "s1", control) == owner and "deployed_by" not in deployed()  # only in the seal
    # A restart by a shared supervisor DAG keeps the deployer.
    with stream_actions.step_permit(hook, "recover", owner="supervisor.sup run r try 1") as permit:
        hook._record_deployment(record, permit)
    assert deployer_of(deployed(), "s1", control) == owner
    # Forged (the driver rewrites it), copied from another stream or another control location: not trusted.
    doc = deployed()
    doc["spec"]["seal"]["deployed_by"] = "open_dag.t run r try 1"
    assert deployer_of(doc, "s1", control) is None
    assert deployer_of(deployed(), "other", control) is None
    assert deployer_of(deployed(), "s1", str(tmp_path / "elsewhere" / "s1")) is None
    assert deployer_of({"spec": sealed(spec.to_dict(), spec.with_version("v1"), deployed_by=owner)}, "s1", control) == owner
    elsewhere = StreamSpec(name="s1", application="events_etl", control_location=str(tmp_path / "elsewhere"),
                           checkpoint_location=str(tmp_path / "ckpt2"), master="local[2]")
    assert deployer_of({"spec": sealed(elsewhere.to_dict(), deployed_by=owner)}, "s1", control) is None


def _deploy_as(tmp_path: Path, location: Path, owner: str) -> tuple[StreamSpec, dict]:
    """Stream ``s1`` in ``location`` deployed by the real writer with the lock owner ``owner``."""
    spec = StreamSpec(name="s1", application="events_etl", control_location=str(location),
                      checkpoint_location=str(tmp_path / "ckpt" / location.name), master="local[2]")
    hook = SparkStreamHook(spec)
    hook.storage.makedirs(hook.paths.root)
    record = contract.DriverRecord(run_id=RUN, stream="s1", version="v1", application="events_etl", host="h",
                                   command="", log_path="", submitted_at=1.0, checkpoint_location="/c", target="local",
                                   handle={})
    with stream_actions.step_permit(hook, "deploy", owner=owner) as permit:
        hook._record_deployment(record, permit)
    return spec, json.loads(Path(hook.deployed_path).read_text())


def test_a_deployer_written_outside_the_seal_gives_no_access(airflow_db, tmp_path):
    """Issue 35: the page's per-DAG access read ``deployed_by`` from outside the seal of the spec. Team A's
    stream ``s1``; team B deployed a stream of the same name in another control location. A driver that can
    write team A's control directory makes the stream look like team B's: the deployer copied from team
    B's ``deployed.json`` (on main a separately sealed ``{stream, owner}`` that any same-named stream's
    deployer passes), the seal's own field edited, or team B's sealed spec copied whole. Team B's reader
    must not see team A's stream (its last exception, its spec) in any of these."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.utils.session import create_session

    from airflow_streaming.ui.access import visible_streams

    team_a, team_b = "seal_alpha.deploy run r1 try 1", "seal_beta.deploy run r2 try 1"
    _, a_doc = _deploy_as(tmp_path, tmp_path / "control_a", team_a)
    _, b_doc = _deploy_as(tmp_path, tmp_path / "control_b", team_b)
    a_file = tmp_path / "control_a" / "s1" / "deployed.json"
    assert discover(None, [str(tmp_path / "control_a")]).streams[0].deployed_by == team_a  # the genuine one
    forgeries = {
        "team B's deployer beside team A's spec": {**a_doc, **{k: v for k, v in b_doc.items() if k != "spec"},
                                                   "deployed_by": b_doc.get("deployed_by") or team_b},
        "team B's sealed spec copied whole": {**a_doc, "spec": b_doc["spec"]},
    }
    if isinstance(a_doc["spec"]["seal"], dict):  # the deployer inside the seal, edited
        edited = json.loads(json.dumps(a_doc))
        edited["spec"]["seal"]["deployed_by"] = team_b
        forgeries["the seal's deployer edited"] = edited
    with create_session() as session:
        _dags(session, {"seal_alpha": ("seal_bundle_alpha", "seal_alpha_team"),
                        "seal_beta": ("seal_bundle_beta", "seal_beta_team")})
        bob = SimpleAuthManagerUser(username="bob", role="VIEWER", teams=["seal_beta_team"])
        ann = SimpleAuthManagerUser(username="ann", role="VIEWER", teams=["seal_alpha_team"])
        genuine = discover(None, [str(tmp_path / "control_a")]).streams
        assert [r.name for r in visible_streams(genuine, ann, session, SimpleAuthManager()).visible] == ["s1"]
        assert visible_streams(genuine, bob, session, SimpleAuthManager()).visible == []
        for what, doc in forgeries.items():
            a_file.write_text(json.dumps(doc))
            refs = discover(None, [str(tmp_path / "control_a")]).streams
            assert refs[0].deployed_by != team_b, what
            assert visible_streams(refs, bob, session, SimpleAuthManager()).visible == [], what
        session.rollback()


def _dags(session, layout: dict[str, tuple[str, str | None]]) -> None:
    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team, dag_bundle_team_association_table

    bundles = {bundle: team for bundle, team in layout.values()}
    for team in {t for t in bundles.values() if t}:
        session.merge(Team(name=team))
    for bundle in bundles:
        session.merge(DagBundleModel(name=bundle))
    session.flush()
    for bundle, team in bundles.items():
        if team:
            session.execute(dag_bundle_team_association_table.insert().values(dag_bundle_name=bundle, team_name=team))
    for dag_id, (bundle, _) in layout.items():
        session.merge(DagModel(dag_id=dag_id, bundle_name=bundle, fileloc=f"/dags/{dag_id}.py"))
    session.flush()


def test_streams_are_shown_to_who_may_read_the_deploying_dag(airflow_db, tmp_path):
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.utils.session import create_session

    from airflow_streaming.ui.access import visible_streams

    def ref(name: str, owner: str | None) -> StreamRef:
        spec = StreamSpec(name=name, application="events_etl", control_location=str(tmp_path),
                          checkpoint_location=str(tmp_path / "ckpt" / name))
        return StreamRef(name=name, spec=spec, source="control_location", deployed_by=owner)

    refs = [ref("alpha-stream", "alpha_etl.deploy run r1 try 1"),
            ref("beta-stream", "beta_etl.deploy run r2 try 1"),
            ref("dotted-stream", "alpha.etl.v2.deploy run r3 try 1"),  # candidates alpha, alpha.etl, alpha.etl.v2
            ref("shared-stream", "shared_etl.deploy run r4 try 1"),
            ref("unknown-stream", None),
            ref("gone-dag-stream", "deleted_dag.deploy run r5 try 1")]
    manager = SimpleAuthManager()
    with create_session() as session:
        _dags(session, {"alpha_etl": ("bundle_alpha", "alpha"), "alpha.etl.v2": ("bundle_alpha", "alpha"),
                        "beta_etl": ("bundle_beta", "beta"), "shared_etl": ("bundle_shared", None)})
        names = {}
        for user in (SimpleAuthManagerUser(username="ann", role="VIEWER", teams=["alpha"]),
                     SimpleAuthManagerUser(username="bob", role="VIEWER", teams=["beta"]),
                     SimpleAuthManagerUser(username="root", role="ADMIN"),
                     SimpleAuthManagerUser(username="nobody", role=None)):
            access = visible_streams(refs, user, session, manager)
            names[user.username] = ({r.name for r in access.visible}, access.reads_every_dag)
        session.rollback()
    assert names["ann"] == ({"alpha-stream", "dotted-stream", "shared-stream"}, False)
    assert names["bob"] == ({"beta-stream", "shared-stream"}, False)
    assert names["root"] == ({r.name for r in refs}, True)
    assert names["nobody"] == (set(), False)


def test_a_control_directory_with_markup_for_a_name_is_reported_not_shown(tmp_path):
    ctl = tmp_path / "control"
    bad = ctl / "<img src=x onerror=alert(1)>"
    bad.mkdir(parents=True)
    (bad / "status.json").write_text("{}")
    (ctl / "good").mkdir()
    (ctl / "good" / "status.json").write_text(_status(tmp_path))
    found = discover(None, [str(ctl)])  # before: the stand-in spec of that name raised, and the page failed
    assert [r.name for r in found.streams] == ["good"]
    assert len(found.errors) == 1 and "not a valid stream name" in found.errors[0]


def _drop_dags(session, dags: list[str], bundles: list[str], teams: list[str]) -> None:
    from sqlalchemy import delete

    from airflow.models.dag import DagModel
    from airflow.models.dagbundle import DagBundleModel
    from airflow.models.team import Team, dag_bundle_team_association_table

    session.execute(delete(DagModel).where(DagModel.dag_id.in_(dags)))
    session.execute(delete(dag_bundle_team_association_table).where(
        dag_bundle_team_association_table.c.dag_bundle_name.in_(bundles)))
    session.execute(delete(DagBundleModel).where(DagBundleModel.name.in_(bundles)))
    session.execute(delete(Team).where(Team.name.in_(teams)))


def test_the_api_shows_a_stream_only_to_readers_of_its_dag(airflow_db, tmp_path, monkeypatch):
    """The plugin's own routes (FastAPI app, real SimpleAuthManager with teams, the tests' metadata DB):
    the overview lists only the user's streams, the stream's page answers 404 for another team's stream
    exactly as for a missing one, and discovery errors go only to who may read every DAG."""
    from fastapi.testclient import TestClient

    import airflow.api_fastapi.app as airflow_app
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.common.db.common import _get_session
    from airflow.utils.session import create_session

    from airflow_streaming.ui import api

    ctl = tmp_path / "control"
    for name, owner in (("alpha-stream", "api_alpha.deploy run r1 try 1"), ("beta-stream", "api_beta.deploy run r2 try 1")):
        d = ctl / name
        d.mkdir(parents=True)
        spec = StreamSpec(name=name, application="events_etl", control_location=str(ctl),
                          checkpoint_location=str(tmp_path / "ckpt" / name), master="local[2]")
        (d / "deployed.json").write_text(json.dumps({"run_id": RUN, "at": 1.0,
                                                     "spec": sealed(spec.to_dict(), deployed_by=owner)}))
    (ctl / "bad name!").mkdir()
    (ctl / "bad name!" / "status.json").write_text("{}")
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__CONTROL_LOCATIONS", str(ctl))
    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: SimpleAuthManager())
    layout = {"api_alpha": ("api_bundle_alpha", "api_alpha_team"), "api_beta": ("api_bundle_beta", "api_beta_team")}
    app = api.create_app()

    def session_dep():
        with create_session() as s:
            yield s

    app.dependency_overrides[_get_session] = session_dep
    seen = {}
    try:
        with create_session() as session:
            _dags(session, layout)
        for user in (SimpleAuthManagerUser(username="ann", role="VIEWER", teams=["api_alpha_team"]),
                     SimpleAuthManagerUser(username="root", role="ADMIN")):
            app.dependency_overrides[api.authorized_user] = lambda u=user: u
            client = TestClient(app)
            overview = client.get("/api/streams").json()
            seen[user.username] = ({r["name"] for r in overview["streams"]}, bool(overview["errors"]),
                                   client.get("/api/streams/beta-stream").status_code,
                                   client.get("/api/streams/alpha-stream").status_code,
                                   client.get("/api/streams/no-such-stream").status_code)
    finally:
        with create_session() as session:  # leave the shared metadata DB as it was
            _drop_dags(session, list(layout), [b for b, _ in layout.values()], [t for _, t in layout.values()])
    assert seen["ann"] == ({"alpha-stream"}, False, 404, 200, 404)
    assert seen["root"] == ({"alpha-stream", "beta-stream"}, True, 200, 200, 404)
