"""The Streams UI's I/O-free parts: discovery, reading (bad files never crash), shaping, masking, links."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from airflow_streaming.compat.last_report import write_last_report
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.ui import views
from airflow_streaming.ui.links import dashboard_url, stream_of
from airflow_streaming.ui.streams import discover, read_stream

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "status"
SECRET = "s3cr3t-value-42"


def _desired_state(tmp_path: Path) -> Path:
    path = tmp_path / "desired.yaml"
    path.write_text(f"""
defaults:
  control_location: {tmp_path}/control
  master: local[2]
  spark_conf: {{spark.hadoop.fs.s3a.secret.key: {SECRET}, spark.sql.shuffle.partitions: 2}}
streams:
  etl:
    version: v2
    spec: {{checkpoint_location: {tmp_path}/ckpt/etl}}
    versions:
      v1: {{application: events_etl, application_args: [--input, /in, --output, /out, --quarantine, /q, --password, {SECRET}]}}
      v2: {{application: events_etl_v2, application_args: [--input, /in, --output, /out, --quarantine, /q]}}
""")
    return path


def _stream_dir(root: Path, name: str, status_fixture: str | None = None, **files: str) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    if status_fixture:
        shutil.copy(FIXTURES / status_fixture, d / "status.json")
    for fname, text in files.items():
        (d / fname.replace("_json", ".json")).write_text(text)
    return d


def test_discovery_lists_desired_state_streams_then_other_control_dirs(tmp_path):
    desired = _desired_state(tmp_path)
    other = tmp_path / "other"
    _stream_dir(other, "legacy", "device_signals_stopped.json")
    _stream_dir(other, "broken", status_json="{not json")
    (other / "not-a-stream").mkdir()
    (other / "not-a-stream" / "random.txt").write_text("x")

    found = discover(str(desired), [str(other), str(tmp_path / "missing-location")])

    assert [(s.name, s.source) for s in found.streams] == [
        ("etl", "desired_state"), ("broken", "control_location"), ("legacy", "control_location")]
    etl = found.streams[0]
    assert etl.wanted_version == "v2" and etl.versions == ("v1", "v2") and etl.spec.version == "v2"
    assert not found.streams[1].spec_known and "no deployed spec" in (found.streams[1].note or "")
    assert found.errors == [], found.errors  # a missing location is just empty


def test_discovery_reports_an_unreadable_desired_state_file_and_goes_on(tmp_path):
    bad = tmp_path / "desired.yaml"
    bad.write_text("streams: [this is not a mapping")
    other = tmp_path / "other"
    _stream_dir(other, "legacy", "device_signals_stopped.json")
    found = discover(str(bad), [str(other)])
    assert [s.name for s in found.streams] == ["legacy"]
    assert len(found.errors) == 1 and str(bad) in found.errors[0]


def test_garbage_control_files_are_shown_with_the_readers_errors_never_raised(tmp_path):
    other = tmp_path / "other"
    _stream_dir(other, "broken", status_json="{not json", deployed_json="[]", lifecycle_json="nope",
                history_json='{"a": 1}', supervisor_json="[1,", compat_json="{}", driver_json='{"run_id": 3}')
    ref = discover(None, [str(other)]).streams[0]
    snap = read_stream(ref)
    for part in ("status.json", "lifecycle.json", "history.json", "supervisor.json", "compat.json", "driver.json"):
        assert part in snap.errors, (part, snap.errors)
    row = views.overview_row(snap)
    assert row["name"] == "broken" and row["health"]["state"] == "UNKNOWN" and row["errors"]
    detail = views.stream_detail(snap)
    assert detail["points"] == [] and detail["actions"] == [] and detail["compat"] is None
    json.dumps(detail)  # JSON-safe


def test_stopped_stream_row_and_points_from_a_recorded_status(tmp_path):
    other = tmp_path / "other"
    _stream_dir(other, "legacy", "device_signals_stopped.json")
    snap = read_stream(discover(None, [str(other)]).streams[0])
    row = views.overview_row(snap)
    assert row["health"]["state"] == "STOPPED" and row["severity"] == 0 and row["spark_ui"] is None
    status = json.loads((FIXTURES / "device_signals_stopped.json").read_text())
    progress = [p for q in status["queries"] for p in q["recent_progress"]]
    detail = views.stream_detail(snap)
    assert [p["batch"] for p in detail["points"]] == sorted(p["batchId"] for p in progress)
    assert row["last_batch"]["id"] == max(p["batchId"] for p in progress)
    stateful = [p for p in detail["points"] if p["state"]]
    assert stateful and detail["state_operators"] and all(s["rows"] is not None for p in stateful for s in p["state"])


def test_progress_point_fields_and_lag():
    progress = {"timestamp": "2026-11-22T02:51:34.000Z", "batchId": 7, "numInputRows": 50, "inputRowsPerSecond": 10.0,
                "processedRowsPerSecond": 25.5, "durationMs": {"triggerExecution": 2000, "addBatch": 1500},
                "eventTime": {"watermark": "2026-11-22T02:50:34.000Z", "max": "2026-11-22T02:51:04.000Z"},
                "stateOperators": [{"operatorName": "stateStoreSave", "numRowsTotal": 12, "memoryUsedBytes": 2048}],
                "sources": [{"metrics": {"maxOffsetsBehindLatest": "120"}}], "sink": {"numOutputRows": -1}}
    p = views.progress_point(progress, "q")
    assert p["batch"] == 7 and p["duration_ms"] == 2000 and p["watermark_lag_s"] == 60 and p["event_lag_s"] == 30
    assert p["state"] == [{"op": "0:stateStoreSave", "rows": 12, "memory": 2048, "dropped": None}]
    assert p["output_rows"] is None  # Spark's -1: unknown
    assert views.current_lag([p])["kind"] == "offsets"
    no_kafka = views.progress_point({**progress, "sources": []}, "q")
    assert views.current_lag([no_kafka]) == {"kind": "event_time", "value": 30.0, "label": "30.0s (event time)"}
    epoch = views.progress_point({**progress, "eventTime": {"watermark": "1970-01-01T00:00:00.000Z"}, "sources": []}, "q")
    assert epoch["watermark"] is None and views.current_lag([epoch]) is None
    assert views.progress_point({"batchId": 1}, "q") is None


def test_owner_parsing_keeps_every_dotted_split():
    parsed = views.parse_owner("stream_operations.operate run manual__2026-11-22T10:00:00+00:00 try 2")
    assert parsed == {"dag_task": "stream_operations.operate", "run_id": "manual__2026-11-22T10:00:00+00:00", "try": 2,
                      "map_index": None, "candidates": [("stream_operations", "operate")]}
    # a mapped task (the upgrade window's apply): task_owner.task_owner names its map index
    mapped = views.parse_owner("stream_upgrade_window.apply[3] run scheduled__2026 try 1")
    assert (mapped["map_index"], mapped["candidates"]) == (3, [("stream_upgrade_window", "apply")])
    assert len(views.parse_owner("a.b.c run r try 1")["candidates"]) == 2
    assert views.parse_owner("supervisor pid 42") is None and views.parse_owner(None) is None


def test_no_secret_is_ever_served(tmp_path):
    desired = _desired_state(tmp_path)
    ref = discover(str(desired), []).streams[0]
    ctl = Path(ref.spec.control_dir)
    ctl.mkdir(parents=True)
    v1 = {**ref.spec.to_dict(), "version": "v1", "application": "events_etl",
          "application_args": ["--input", "/in", "--password", SECRET, f"--token={SECRET}"],
          "master": f"spark://admin:{SECRET}@host:7077"}
    (ctl / "deployed.json").write_text(json.dumps({"run_id": "r1", "at": time.time(), "spec": v1}))
    (ctl / "history.json").write_text(json.dumps([{
        "id": "a1", "action": "upgrade", "from_version": "v0", "to_version": "v1", "outcome": "ROLLED_BACK",
        "started_at": time.time() - 60, "ended_at": time.time(), "owner": "d.t run r try 1", "verdict": "COMPATIBLE",
        "error": f"driver said password={SECRET} and {SECRET}", "from_spec": v1}]))
    write_last_report(LocalStorage(), str(ctl), {"verdict": "COMPATIBLE_WITH_WARNINGS", "findings": [
        {"rule": "conf", "severity": "WARNING", "message": f"uses {SECRET}",
         "checkpoint": {"spark.hadoop.fs.s3a.secret.key": SECRET}, "candidate": None}]},
        candidate_version="v2", candidate_application="events_etl_v2", owner="d.t run r try 1")
    snap = read_stream(ref)
    served = json.dumps([views.overview_row(snap), views.stream_detail(snap)])
    assert SECRET not in served
    detail = views.stream_detail(snap)
    assert detail["spec"]["spark_conf"]["spark.hadoop.fs.s3a.secret.key"] == "***"
    assert detail["spec"]["application_args"] == ["--input", "/in", "--password", "***", "--token=***"]
    assert detail["compat"]["verdict"] == "COMPATIBLE_WITH_WARNINGS" and detail["actions"][0]["outcome"] == "ROLLED_BACK"


def test_lifecycle_actions_merge_history_with_the_running_record():
    now = time.time()
    history = [{"id": "a1", "action": "deploy", "to_version": "v1", "outcome": "SUCCEEDED", "started_at": now - 100,
                "ended_at": now - 90}]
    record = {"id": "a2", "action": "upgrade", "step": "PROBATION", "created_at": now - 10, "updated_at": now - 2,
              "from_spec": {"version": "v1"}, "to_spec": {"version": "v2"}, "verdict": "COMPATIBLE",
              "steps": [{"step": "PLANNED", "at": now - 10, "detail": None}, {"step": "PROBATION", "at": now - 2, "detail": "x"}]}
    actions = views.lifecycle_actions(history, record, [])
    assert [a["id"] for a in actions] == ["a1", "a2"]
    assert actions[1]["running"] and actions[1]["end"] is None and actions[1]["from_version"] == "v1"
    assert [s["step"] for s in actions[1]["steps"]] == ["PLANNED", "PROBATION"]


def test_each_versions_spark_runtime_shows_in_the_history_and_the_spec():
    from airflow_streaming.lifecycle.record import Action, LifecycleRecord, Step
    from airflow_streaming.spark_runtime import installed_version

    done = LifecycleRecord(stream="s", action=Action.UPGRADE, step=Step.SUCCEEDED, to_spec={"version": "v2"},
                           from_spec={"version": "v1", "spark_runtime": {"version": "3.5.7"}})
    entry = done.history_entry()
    assert (entry["from_runtime"], entry["to_runtime"]) == ("Spark 3.5.7", f"Spark {installed_version()} (installed)")
    plain = LifecycleRecord(stream="s", action=Action.UPGRADE, step=Step.SUCCEEDED, to_spec={"version": "v2"},
                            from_spec={"version": "v1"}).history_entry()
    assert "from_runtime" not in plain  # streams on the installed Spark keep the history format they had
    running = {"id": "a2", "action": "upgrade", "step": "PROBATION", "created_at": 1.0, "updated_at": 2.0,
               "from_spec": {"version": "v1"}, "to_spec": {"version": "v2", "spark_runtime": {"version": "4.1.1"}}}
    actions = {a["id"]: a for a in views.lifecycle_actions([entry], running, [])}
    assert actions["a2"]["to_runtime"] == "Spark 4.1.1" and actions[entry["id"]]["from_runtime"] == "Spark 3.5.7"
    assert views.spec_view({"name": "s", "version": "v1", "spark_runtime": {"version": "3.5.7"}})["spark_runtime"] == "Spark 3.5.7"
    assert views.spec_view({"name": "s", "spark_runtime": "<img src=x>"})["spark_runtime"] == "an unreadable Spark runtime"


def test_supervisor_view_counts_restarts_in_the_window():
    now = 10_000.0
    view = views.supervisor_view({"failures": [now - 7200, now - 30, now - 10], "error_classes": [None, "X", "Y"],
                                  "gave_up": True}, now)
    assert view["restarts_in_window"] == 2 and view["restarts_total"] == 3 and view["gave_up"]
    assert view["last_error_class"] == "Y"


def test_links_point_at_the_dashboard_page_inside_the_airflow_ui():
    assert dashboard_url("etl", "http://af:8080") == "http://af:8080/plugin/streams/streaming/ui/stream/etl"
    assert dashboard_url(None, "https://h/airflow/") == "https://h/airflow/plugin/streams/airflow/streaming/ui/"

    class Op:
        spec = {"name": "from-spec", "application": "events_etl", "checkpoint_location": "/c",
                "control_location": "/x"}

    assert stream_of(Op(), {"stream": "from-xcom"}) == "from-xcom"
    assert stream_of(Op(), {}) == "from-spec"
    assert stream_of(object(), {}) is None


def test_every_operator_and_sensor_carries_both_links():
    from airflow_streaming.operators.compat import SparkStreamCompatibilityCheckOperator
    from airflow_streaming.operators.deploy import SparkStreamDeployOperator
    from airflow_streaming.operators.lifecycle import SparkStreamUpgradeOperator
    from airflow_streaming.operators.stop import SparkStreamStopOperator
    from airflow_streaming.operators.supervise import SparkStreamSupervisorOperator
    from airflow_streaming.sensors.health import SparkStreamHealthSensor
    from airflow_streaming.sensors.progress import SparkStreamProgressSensor

    for cls in (SparkStreamCompatibilityCheckOperator, SparkStreamDeployOperator, SparkStreamUpgradeOperator,
                SparkStreamStopOperator, SparkStreamSupervisorOperator, SparkStreamHealthSensor, SparkStreamProgressSensor):
        assert {link.name for link in cls.operator_extra_links} == {"Spark UI", "Stream dashboard"}, cls


@pytest.mark.parametrize("setting, expected", [(None, False), ("True", True)])
def test_actions_are_off_unless_enabled(monkeypatch, setting, expected):
    from airflow_streaming.ui.api import settings

    if setting is None:
        monkeypatch.delenv("AIRFLOW__AIRFLOW_STREAMING__UI_ACTIONS", raising=False)
    else:
        monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__UI_ACTIONS", setting)
    assert settings()["actions_enabled"] is expected


def test_a_stream_needing_a_person_stands_out_even_when_its_driver_is_fine(tmp_path):
    other = tmp_path / "other"
    d = _stream_dir(other, "legacy", "device_signals_stopped.json")
    assert views.overview_row(read_stream(discover(None, [str(other)]).streams[0]))["severity"] == 0
    (d / "supervisor.json").write_text(json.dumps({"failures": [time.time() - 60], "gave_up": True}))
    row = views.overview_row(read_stream(discover(None, [str(other)]).streams[0]))
    assert row["severity"] == 2 and row["supervisor"]["gave_up"] and row["supervisor"]["restarts_in_window"] == 1
    (d / "supervisor.json").unlink()
    (d / "history.json").write_text(json.dumps([{"id": "x", "action": "upgrade", "outcome": "ROLLBACK_FAILED",
                                                 "started_at": time.time() - 9, "ended_at": time.time()}]))
    row = views.overview_row(read_stream(discover(None, [str(other)]).streams[0]))
    assert row["severity"] == 2 and row["last_action"]["outcome"] == "ROLLBACK_FAILED"


def test_a_killed_driver_is_shown_gone_not_running(tmp_path):
    from airflow_streaming.ui.streams import StreamSnapshot

    other = tmp_path / "other"
    _stream_dir(other, "etl", "etl_dag_phase1_running.json")
    ref = discover(None, [str(other)]).streams[0]
    status = json.loads((FIXTURES / "etl_dag_phase1_running.json").read_text())
    status["spark_ui"] = "http://127.0.0.1:4040"
    healthy = StreamSnapshot(ref=ref, read_at=time.time(), status=status, health={"state": "HEALTHY", "reasons": []})
    assert views.overview_row(healthy)["state"] == "RUNNING" and views.overview_row(healthy)["spark_ui"]
    dead = StreamSnapshot(ref=ref, read_at=time.time(), status=status, health={
        "state": "FAILED", "reasons": [{"code": "DRIVER_GONE", "message": "driver exited without a graceful stop"}]})
    row = views.overview_row(dead)
    assert row["state"] == "GONE" and row["reported_state"] == "RUNNING" and row["spark_ui"] is None
    assert row["severity"] == 3 and row["health"]["reason"].startswith("driver exited")


def test_the_deployed_spec_shows_what_travels_with_the_job_and_no_env_value():
    view = views.spec_view({"name": "s", "version": "v2", "py_files": ["/opt/team/lib/enrich.py"],
                            "files": ["/opt/team/data/sites.csv"], "driver_memory": "2g", "queue": "etl",
                            "env_vars": {"DB_PASSWORD": "hunter2-secret", "REGION": "eu"}})
    assert view["py_files"] == ["/opt/team/lib/enrich.py"] and view["files"] == ["/opt/team/data/sites.csv"]
    assert (view["driver_memory"], view["queue"]) == ("2g", "etl")
    assert view["env_vars"] == "DB_PASSWORD, REGION (values not shown)"
    assert "hunter2-secret" not in repr(view) and "eu" not in view["env_vars"].split(" (")[0].split(", ")


def test_the_detail_lists_the_declared_assets_and_their_airflow_pages(tmp_path):
    path = tmp_path / "desired.yaml"
    path.write_text(f"""
defaults:
  control_location: {tmp_path}/control
  master: local[2]
streams:
  orders:
    version: v1
    spec:
      checkpoint_location: {tmp_path}/ckpt/orders
      assets: {{sources: ["kafka://broker:9092/orders"], sinks: ["FILE:///data/out/orders/", "s3://lake/orders"]}}
    versions: {{v1: {{application: events_etl, application_args: [--input, /in, --output, /out, --quarantine, /q]}}}}
  plain:
    version: v1
    spec: {{checkpoint_location: {tmp_path}/ckpt/plain}}
    versions: {{v1: {{application: events_etl, application_args: [--input, /in, --output, /out, --quarantine, /q]}}}}
""")
    found = discover(str(path), [])
    assert found.errors == []
    refs = {ref.name: ref for ref in found.streams}
    detail = views.stream_detail(read_stream(refs["orders"]))
    assert detail["assets"] == {"sources": [{"uri": "kafka://broker:9092/orders"}],
                                "sinks": [{"uri": "file:///data/out/orders"}, {"uri": "s3://lake/orders"}]}
    assert views.asset_uris(detail) == ["file:///data/out/orders", "kafka://broker:9092/orders", "s3://lake/orders"]
    views.link_assets(detail, {"file:///data/out/orders": "/airflow/assets/7"})  # what Airflow knows
    assert detail["assets"]["sinks"] == [{"uri": "file:///data/out/orders", "url": "/airflow/assets/7"},
                                         {"uri": "s3://lake/orders", "url": None}]
    assert json.loads(json.dumps(detail))["assets"] == detail["assets"]
    assert views.stream_detail(read_stream(refs["plain"]))["assets"] is None


def test_asset_pages_link_only_the_assets_airflow_knows_for_who_may_read_them(airflow_db, monkeypatch):
    """The API's lookup over the tests' real metadata DB and a real SimpleAuthManager."""
    import airflow.api_fastapi.app as airflow_app
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.models.asset import AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import delete

    from airflow_streaming.ui import api

    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: SimpleAuthManager())
    uri = "file:///data/out/ui-assets-test"
    with create_session() as session:
        session.add(AssetModel(name=uri, uri=uri, group="asset"))
    try:
        with create_session() as session:
            known = session.query(AssetModel).filter(AssetModel.uri == uri).one().id
            reader = SimpleAuthManagerUser(username="ann", role="VIEWER")
            assert api.asset_pages([uri, "s3://lake/unknown"], reader, session, "/airflow") == \
                {uri: f"/airflow/assets/{known}"}
            assert api.asset_pages([uri], SimpleAuthManagerUser(username="nobody", role=None), session, "") == {}
            assert api.asset_pages([], reader, session, "") == {}
    finally:
        with create_session() as session:
            session.execute(delete(AssetModel).where(AssetModel.uri == uri))
