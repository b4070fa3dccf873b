"""docker-compose.yaml is a valid stack (checked by Debian's docker-compose itself, no engine needed) whose
service commands are those of ``airflow_streaming.deploy_stack`` - the ones the native fixture runs.

docker-compose is installed by ``scripts/setup_env.sh``; without it these tests FAIL (never skip).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_streaming import deploy_stack

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "docker-compose.yaml"
OUR_IMAGE = "airflow-streaming:dev"
AIRFLOW_SERVICES = set(deploy_stack.AIRFLOW_SERVICES)
LONG_RUNNING = {"postgres", "redis", *AIRFLOW_SERVICES - {"airflow-init"}, *deploy_stack.SPARK_SERVICES,
                *deploy_stack.HDFS_SERVICES}


def compose_config(path: Path = COMPOSE_FILE) -> dict[str, Any]:
    """``docker-compose -f path config``, parsed: the file as Compose itself resolves it (anchors, merges)."""
    binary = shutil.which("docker-compose")
    assert binary, ("docker-compose is not installed: scripts/setup_env.sh installs Debian's package "
                    "(sudo apt-get install -y docker-compose)")
    out = subprocess.run([binary, "-f", str(path), "config"], capture_output=True, text=True, timeout=120,
                         cwd=path.parent)
    assert out.returncode == 0, f"docker-compose config rejected {path}:\n{out.stderr}"
    return yaml.safe_load(out.stdout)


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    return compose_config()


def command_mismatches(config: dict[str, Any]) -> list[str]:
    """Services whose ``command`` differs from :func:`deploy_stack.service_commands` of the compose settings."""
    expected = deploy_stack.service_commands(deploy_stack.COMPOSE)
    return [f"{name}: compose runs {config['services'].get(name, {}).get('command')}, deploy_stack says {argv}"
            for name, argv in expected.items() if config["services"].get(name, {}).get("command") != argv]


def test_the_stack_has_every_service(config):
    assert set(config["services"]) == LONG_RUNNING | {"airflow-init"}


def test_service_commands_are_the_shared_ones(config):
    assert command_mismatches(config) == []


def test_a_drifted_command_is_caught(tmp_path):
    drifted = COMPOSE_FILE.read_text().replace('command: ["airflow", "scheduler"]',
                                               'command: ["airflow", "scheduler", "--num-runs", "5"]')
    (tmp_path / "docker-compose.yaml").write_text(drifted)
    for name in ("airflow_streaming", "spark_jobs", "dags"):  # the bind mounts must exist for config
        (tmp_path / name).mkdir()
    mismatches = command_mismatches(compose_config(tmp_path / "docker-compose.yaml"))
    assert len(mismatches) == 1 and mismatches[0].startswith("airflow-scheduler:")


def test_every_long_running_service_has_a_healthcheck(config):
    for name in LONG_RUNNING:
        check = config["services"][name].get("healthcheck")
        assert check and check.get("test"), f"{name} has no healthcheck"


def test_dependencies_wait_for_health_or_completion(config):
    services = config["services"]
    for name, service in services.items():
        for dependency, how in (service.get("depends_on") or {}).items():
            wanted = ("service_completed_successfully" if dependency == "airflow-init" else "service_healthy")
            assert how == {"condition": wanted}, f"{name} -> {dependency}: {how}"
            if wanted == "service_healthy":
                assert services[dependency].get("healthcheck"), f"{name} waits for {dependency}, which has none"
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        depends = services[name]["depends_on"]
        assert {"airflow-init", "postgres", "redis"} <= set(depends), name
    assert {"spark-master", "hdfs-namenode"} <= set(services["airflow-worker"]["depends_on"])
    assert set(services["spark-worker"]["depends_on"]) == {"spark-master"}
    assert set(services["hdfs-datanode"]["depends_on"]) == {"hdfs-namenode"}


def test_our_image_runs_as_a_non_root_user_with_an_init_process(config):
    for name, service in config["services"].items():
        if service.get("image") == OUR_IMAGE:
            assert service.get("user") == "50000:0", f"{name} runs as {service.get('user')}"
            assert service["build"]["dockerfile"] == "docker/Dockerfile"
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    assert re.search(r"^USER \$\{AIRFLOW_UID\}$", dockerfile, re.M)
    assert 'ENTRYPOINT ["/usr/bin/tini", "--"]' in dockerfile and " tini " in dockerfile
    assert "-c constraints.txt" in dockerfile, "the image installs the tested versions"
    ignored = (REPO / ".dockerignore").read_text().split()
    assert {".git", ".venv", "tests", "**/__pycache__"} <= set(ignored)


def test_named_volumes_and_read_only_code_mounts(config):
    assert set(config["volumes"]) == {"postgres-db-volume", "airflow-logs", "streams-data", "hdfs-namenode",
                                      "hdfs-datanode"}
    for name, service in config["services"].items():
        for volume in service.get("volumes", []):
            source, target, mode = volume.split(":") if isinstance(volume, str) else (None, None, None)
            if source and source.startswith("/"):  # a bind mount: only the code, read-only
                assert Path(source).relative_to(REPO).parts[0] in ("airflow_streaming", "spark_jobs", "dags")
                assert mode == "ro", f"{name} mounts {source} writable"
            elif source:
                assert source in config["volumes"], f"{name}: {source} is not a named volume"
    worker_volumes = [v.split(":")[1] for v in config["services"]["airflow-worker"]["volumes"]]
    assert "/opt/airflow-streaming/dags" in worker_volumes and "/opt/airflow-streaming/spark_jobs" in worker_volumes


def test_spark_master_serves_rest_submissions(config):
    properties = {}
    for line in (REPO / "docker" / "spark-master.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, value = line.split(None, 1)
            properties[key] = value.strip()
    assert properties == dict(deploy_stack.SPARK_MASTER_PROPERTIES)
    assert properties["spark.master.rest.enabled"] == "true"
    master = config["services"]["spark-master"]
    assert deploy_stack.COMPOSE.spark_master_properties_file in master["command"]
    assert {p["target"] for p in master["ports"]} >= {7077, 8090, int(properties["spark.master.rest.port"])}


def test_hdfs_runs_the_apache_hadoop_image(config):
    for name in deploy_stack.HDFS_SERVICES:
        service = config["services"][name]
        assert service["image"].startswith("apache/hadoop:3")
        assert service["environment"]["CORE-SITE.XML_fs.defaultFS"] == "hdfs://hdfs-namenode:8020"
    assert "ENSURE_NAMENODE_DIR" in config["services"]["hdfs-namenode"]["environment"]
    assert "ENSURE_NAMENODE_DIR" not in config["services"]["hdfs-datanode"]["environment"]


def test_airflow_services_share_the_stack_configuration(config):
    env = config["services"]["airflow-scheduler"]["environment"]
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql+psycopg2://airflow:airflow@postgres/")
    assert env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"] == "http://airflow-apiserver:8080/execution/"
    for name in AIRFLOW_SERVICES:  # one JWT secret for every component (tokens signed by one, checked by another)
        assert config["services"][name]["environment"]["AIRFLOW__API_AUTH__JWT_SECRET"] == env[
            "AIRFLOW__API_AUTH__JWT_SECRET"]
    assert '"spark://spark-master"' in env["AIRFLOW_CONN_SPARK_DEFAULT"]


def test_the_compose_file_says_how_to_bring_it_up():
    text = COMPOSE_FILE.read_text()
    assert "docker compose up -d" in text and "docker compose build" in text


def test_native_settings_give_the_commands_the_fixture_runs():
    """What tests/airflow_stack.py runs natively: same sub-commands and options, its own host/ports/launcher."""
    import sys

    native = deploy_stack.StackSettings(api_host="127.0.0.1", api_port=18080, spark_master_host="127.0.0.1",
                                        spark_master_port=17077, spark_master_webui_port=18090,
                                        spark_master_properties_file="/tmp/stack/spark-master.conf",
                                        spark_worker_cores=1, spark_worker_memory="1g", spark_worker_webui_port=18081)
    commands = deploy_stack.service_commands(native, airflow=(sys.executable, "-m", "airflow"))
    assert commands["airflow-apiserver"] == [sys.executable, "-m", "airflow", "api-server", "--host", "127.0.0.1",
                                             "--port", "18080", "--workers", "1"]
    assert commands["airflow-init"] == [sys.executable, "-m", "airflow", "db", "migrate"]
    assert commands["spark-worker"][1:3] == ["org.apache.spark.deploy.worker.Worker", "spark://127.0.0.1:17077"]
    compose = deploy_stack.service_commands()
    for name in ("airflow-scheduler", "airflow-dag-processor", "airflow-triggerer"):
        assert commands[name][3:] == compose[name][1:], name  # identical but for how airflow is started
    with pytest.raises(KeyError, match="no Airflow service 'webserver'"):
        deploy_stack.airflow_command("webserver", native)
