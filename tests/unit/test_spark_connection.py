"""The ``spark`` connection (AIRFLOW_CONN_<ID> JSON) is honoured field by field, as the Spark provider's
SparkSubmitHook reads it: the mapping is compared with the real SparkSubmitHook, and each field is
followed to where it lands - the spark-submit command (a stand-in spark-submit records it), the YARN
ResourceManager and standalone REST addresses the targets call (protocol stand-ins). No secret (the
keytab's content) on a command line, in a record, a control file or a log line; its file's path is."""

from __future__ import annotations

import base64
import json
import logging
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

import pytest

from airflow_streaming.hooks.spark_connection import master_of, settings_of
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.spec import StreamSpec
from airflow_streaming.targets.base import Liveness
from airflow_streaming.targets.standalone import StandaloneClusterTarget
from airflow_streaming.targets.yarn import YarnClusterTarget
from standins import StandInServer
from standins.yarn_fixtures import rm, submit_record  # noqa: F401 - fixtures
import stream_actions

KEYTAB = b"\x05\x02\x00\x00\x00\x3bkeytab-bytes-of-etl@EXAMPLE.COM\x00\x01"
KEYTAB_B64 = base64.b64encode(KEYTAB).decode()
PRINCIPAL = "etl@EXAMPLE.COM"


def set_conn(monkeypatch, conn_id: str, **fields: Any) -> str:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "spark", **fields}))
    return conn_id


def stream(tmp_path: Path, conn_id: str, **fields: Any) -> StreamSpec:
    return StreamSpec(name="etl", application="events_etl", checkpoint_location=str(tmp_path / "ckpt"),
                      control_location=str(tmp_path / "ctl"), conn_id=conn_id, **fields)


@pytest.fixture
def keytab_dir(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "keytabs"
    monkeypatch.setenv("AIRFLOW_STREAMING_KEYTAB_DIR", str(directory))
    return directory


# ------------------------------------------------------------------ the same reading as SparkSubmitHook

CONNECTIONS = {
    "standalone-url-in-host": {"host": "spark://m1", "port": 7077,
                               "extra": {"deploy-mode": "cluster", "rest-scheme": "https", "rest-port": "16066"}},
    "standalone-bare-host": {"host": "spark-master", "port": 7077, "extra": {"deploy-mode": "client"}},
    "yarn-kerberos": {"host": "yarn", "extra": {"deploy-mode": "cluster", "queue": "streams", "principal": PRINCIPAL,
                                                "keytab": KEYTAB_B64,
                                                "yarn_resourcemanager_webapp_address": "rm.example:8088/"}},
    "local": {"host": "local[4]"},
    "namespace": {"host": "yarn", "extra": {"namespace": "streams"}},
}


@pytest.mark.parametrize("name", sorted(CONNECTIONS))
def test_the_connection_is_read_as_spark_submit_hook_reads_it(name, monkeypatch, tmp_path, keytab_dir):
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
    from airflow.sdk import BaseHook

    conn_id = set_conn(monkeypatch, f"spark_cmp_{name.replace('-', '_')}", **CONNECTIONS[name])
    # SparkSubmitHook writes the keytab into the temp directory: give it this test's.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    theirs = SparkSubmitHook(conn_id=conn_id)._connection
    ours = settings_of(BaseHook.get_connection(conn_id), conn_id)

    assert ours.master == theirs["master"]
    assert ours.deploy_mode == theirs["deploy_mode"]
    assert ours.cluster.get("queue") == theirs["queue"]
    assert ours.cluster.get("namespace") == theirs["namespace"]
    assert ours.cluster.get("principal") == theirs["principal"]
    assert ours.cluster.get("rest_scheme", "http") == theirs["rest_scheme"]
    assert ours.cluster.get("rest_port", 6066) == theirs["rest_port"]
    if theirs["keytab"]:
        assert Path(ours.cluster["keytab"]).read_bytes() == Path(theirs["keytab"]).read_bytes() == KEYTAB
    else:
        assert "keytab" not in ours.cluster
    if theirs.get("rest_endpoint"):  # SparkSubmitHook's standalone REST endpoint (single master, cluster mode)
        target = StandaloneClusterTarget(None, None, ours.cluster, master=ours.master)
        assert target.rest_urls == [theirs["rest_endpoint"]]
    extra = CONNECTIONS[name].get("extra", {})
    if "yarn_resourcemanager_webapp_address" in extra:
        their_rm = SparkSubmitHook(conn_id=conn_id, yarn_track_via_rm_api=True)._get_yarn_rm_base_url()
        assert ours.cluster["resourcemanager_url"] == their_rm == "http://rm.example:8088"


def test_master_without_a_host_is_local_and_conf_namespace_wins(monkeypatch):
    from airflow.sdk import BaseHook

    assert master_of("spark", None, None) == "local[2]"
    assert master_of("spark", "k8s://https://api.example:6443", None) == "k8s://https://api.example:6443"
    conn_id = set_conn(monkeypatch, "spark_ns", host="k8s://https://api.example:6443", extra={"namespace": "a"})
    assert settings_of(BaseHook.get_connection(conn_id), conn_id,
                       {"spark.kubernetes.namespace": "b"}).cluster["namespace"] == "b"


@pytest.mark.parametrize("extra, match", [
    ({"rest-scheme": "ftp"}, "rest-scheme must be http or https"),
    ({"rest-port": "sixty"}, "rest-port must be a port number"),
    ({"keytab": "not base64!"}, "extra keytab is not base64"),
])
def test_bad_extras_are_named_errors_that_never_echo_the_keytab(extra, match, monkeypatch, keytab_dir):
    from airflow.sdk import BaseHook

    conn_id = set_conn(monkeypatch, "spark_bad", host="yarn", extra=extra)
    with pytest.raises(ValueError, match=match) as raised:
        settings_of(BaseHook.get_connection(conn_id), conn_id)
    assert "spark_bad" in str(raised.value) and "not base64!" not in str(raised.value)


def test_the_keytab_is_a_0600_file_in_a_0700_directory_reused_for_the_same_content(monkeypatch, keytab_dir):
    from airflow.sdk import BaseHook

    conn_id = set_conn(monkeypatch, "spark_kt", host="yarn", extra={"principal": PRINCIPAL, "keytab": KEYTAB_B64})
    first = settings_of(BaseHook.get_connection(conn_id), conn_id).cluster["keytab"]
    again = settings_of(BaseHook.get_connection(conn_id), conn_id).cluster["keytab"]
    assert first == again and Path(first).read_bytes() == KEYTAB
    assert stat.S_IMODE(os.stat(first).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(keytab_dir).st_mode) == 0o700
    assert PRINCIPAL not in first  # the file name says nothing about whose keytab it is
    keytab_dir.chmod(0o755)
    with pytest.raises(ValueError, match="mode 0700"):
        settings_of(BaseHook.get_connection(conn_id), conn_id)


# ------------------------------------------------------------------ where each field lands




def every_file_under(root: Path) -> str:
    return "\n".join(p.read_bytes().decode("utf-8", "replace") for p in root.rglob("*") if p.is_file())


def test_yarn_connection_lands_on_spark_submit_and_the_resourcemanager(tmp_path, monkeypatch, rm, submit_record,
                                                                       keytab_dir, caplog):
    conn_id = set_conn(monkeypatch, "spark_yarn", host="yarn", extra={
        "deploy-mode": "cluster", "queue": "streams", "principal": PRINCIPAL, "keytab": KEYTAB_B64,
        "yarn_resourcemanager_webapp_address": rm.url.removeprefix("http://")})
    hook = SparkStreamHook(stream(tmp_path, conn_id))
    with caplog.at_level(logging.DEBUG):
        record = stream_actions.submit(hook)
        assert hook.driver_liveness()[0] == Liveness.ALIVE

    assert isinstance(hook.target, YarnClusterTarget) and hook.target.rm_urls == [rm.url]
    (call,) = [json.loads(line) for line in submit_record.read_text().splitlines()]
    argv = call["argv"]
    assert argv[:4] == ["--master", "yarn", "--deploy-mode", "cluster"]
    keytab = argv[argv.index("--keytab") + 1]
    assert argv[argv.index("--principal") + 1] == PRINCIPAL
    assert Path(keytab).read_bytes() == KEYTAB and stat.S_IMODE(os.stat(keytab).st_mode) == 0o600
    assert "spark.yarn.queue=streams" in argv
    # The ResourceManager the connection names is the one asked about the application.
    app_path = f"/ws/v1/cluster/apps/{record.handle['app_id']}"
    assert any(method == "GET" and path == app_path for method, path, _, _ in rm.requests)
    assert record.handle["rm_url"] == rm.url
    # The keytab's content is nowhere: not on argv, in the record, the control files or the logs.
    for text in (" ".join(argv), record.command, json.dumps(record.handle), every_file_under(tmp_path / "ctl"),
                 caplog.text):
        assert KEYTAB_B64 not in text and "keytab-bytes" not in text


def test_local_client_connection_passes_kerberos_to_spark_submit(tmp_path, monkeypatch, keytab_dir):
    conn_id = set_conn(monkeypatch, "spark_client", host="yarn",
                       extra={"deploy-mode": "client", "principal": PRINCIPAL, "keytab": KEYTAB_B64})
    hook = SparkStreamHook(stream(tmp_path, conn_id))
    argv, line = hook.command_for("20261123T000000Z-12345678")
    assert hook.target.kind == "local"
    assert argv[argv.index("--principal") + 1] == PRINCIPAL
    assert Path(argv[argv.index("--keytab") + 1]).read_bytes() == KEYTAB
    assert KEYTAB_B64 not in line and KEYTAB_B64 not in " ".join(argv)


def test_the_specs_own_cluster_settings_win_over_the_connections(tmp_path, monkeypatch, keytab_dir):
    conn_id = set_conn(monkeypatch, "spark_both", host="yarn",
                       extra={"deploy-mode": "cluster", "queue": "from-conn", "yarn_resourcemanager_webapp_address":
                              "http://conn-rm:8088"})
    hook = SparkStreamHook(stream(tmp_path, conn_id, cluster={"queue": "from-spec",
                                                               "resourcemanager_url": "http://spec-rm:8088"}))
    assert hook.resolved_spec.cluster["queue"] == "from-spec"
    assert hook.target.rm_urls == ["http://spec-rm:8088"]


class RestMaster(StandInServer):
    """STAND-IN for a standalone master's REST submission server (create only)."""

    def handle(self, method, path, query, headers, body):
        if method == "POST" and path == "/v1/submissions/create":
            return 200, {"action": "CreateSubmissionResponse", "success": True,
                         "submissionId": "driver-20261123000000-0000", "serverSparkVersion": "4.2.0"}, "application/json"
        return 404, {"message": f"stand-in: no route {method} {path}"}, "application/json"


def test_standalone_connection_rest_scheme_and_port_are_where_the_submission_goes(tmp_path, monkeypatch):
    with RestMaster() as master:
        port = master.server.server_address[1]
        conn_id = set_conn(monkeypatch, "spark_sa", host="spark://127.0.0.1", port=7077,
                           extra={"deploy-mode": "cluster", "rest-port": str(port)})
        hook = SparkStreamHook(stream(tmp_path, conn_id))
        assert hook.target.rest_urls == [f"http://127.0.0.1:{port}"]
        record = stream_actions.submit(hook)
        assert record.handle["submission_id"] == "driver-20261123000000-0000"
        assert [(m, p) for m, p, _, _ in master.requests] == [("POST", "/v1/submissions/create")]

    conn_id = set_conn(monkeypatch, "spark_sa_tls", host="spark://m1:7077,m2:7077",
                       extra={"deploy-mode": "cluster", "rest-scheme": "https", "rest-port": 16066})
    assert SparkStreamHook(stream(tmp_path, conn_id)).target.rest_urls == ["https://m1:16066", "https://m2:16066"]


def test_standalone_cluster_refuses_kerberos_with_what_to_do(tmp_path, monkeypatch, keytab_dir):
    conn_id = set_conn(monkeypatch, "spark_sa_krb", host="spark://m1", port=7077,
                       extra={"deploy-mode": "cluster", "principal": PRINCIPAL, "keytab": KEYTAB_B64})
    hook = SparkStreamHook(stream(tmp_path, conn_id))
    with pytest.raises(ValueError, match="no Kerberos login") as raised:
        hook.launch_plan("20261123T000000Z-12345678")
    assert "YARN or Kubernetes" in str(raised.value) and KEYTAB_B64 not in str(raised.value)


def test_kubernetes_connection_namespace_and_kerberos_land_on_the_plan(tmp_path, monkeypatch, keytab_dir):
    from airflow_streaming.targets.submit_command import spark_submit_argv

    conn_id = set_conn(monkeypatch, "spark_k8s", host="k8s://https://api.example:6443", extra={
        "deploy-mode": "cluster", "namespace": "streams", "principal": PRINCIPAL, "keytab": KEYTAB_B64})
    hook = SparkStreamHook(stream(tmp_path, conn_id, cluster={"image": "img:1", "runtime_path": "/opt/as"}))
    assert hook.target.kind == "kubernetes" and hook.target.namespace == "streams"
    assert hook.target.api_server == "https://api.example:6443"
    argv = spark_submit_argv(hook.launch_plan("20261123T000000Z-12345678"))
    assert argv[argv.index("--master") + 1] == "k8s://https://api.example:6443"
    assert "spark.kubernetes.namespace=streams" in argv
    assert argv[argv.index("--principal") + 1] == PRINCIPAL
    assert Path(argv[argv.index("--keytab") + 1]).read_bytes() == KEYTAB and KEYTAB_B64 not in " ".join(argv)
