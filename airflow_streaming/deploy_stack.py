"""The services of an airflow-streaming deployment and their command lines, in one place.

``docker-compose.yaml`` runs these services in containers and the native end-to-end fixture
(``tests/airflow_stack.py``) runs them as local processes; both take the command lines from here, so
what the tests run is what the compose file runs. ``tests/unit/test_docker_compose.py`` checks that
every ``command:`` of ``docker-compose.yaml`` (as ``docker-compose config`` resolves it) equals
:func:`service_commands` of :data:`COMPOSE`, and that ``docker/spark-master.conf`` holds
:data:`SPARK_MASTER_PROPERTIES`.

A native run passes its own :class:`StackSettings` (loopback host, free ports) and the way it starts
programs (``airflow=(sys.executable, "-m", "airflow")``)::

    from airflow_streaming.deploy_stack import StackSettings, service_commands

    settings = StackSettings(api_host="127.0.0.1", api_port=port, spark_master_host="127.0.0.1", ...)
    argv = service_commands(settings, airflow=(sys.executable, "-m", "airflow"))["airflow-scheduler"]

Plain Python, no Airflow import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

#: The Airflow services, by their compose service name -> the ``airflow`` sub-command they run.
AIRFLOW_SERVICES: Mapping[str, tuple[str, ...]] = {
    "airflow-init": ("db", "migrate"),
    "airflow-apiserver": ("api-server",),
    "airflow-scheduler": ("scheduler",),
    "airflow-dag-processor": ("dag-processor",),
    "airflow-triggerer": ("triggerer",),
    "airflow-worker": ("celery", "worker"),
}
#: Services that need a Celery broker: a native LocalExecutor run leaves them out.
CELERY_ONLY = ("airflow-worker",)
SPARK_SERVICES = ("spark-master", "spark-worker")
HDFS_SERVICES = ("hdfs-namenode", "hdfs-datanode")

#: The standalone master's settings (``--properties-file``): the REST submission server (cluster-mode
#: Python drivers, ``/v1/submissions/...``) and kill links/POSTs in its web UI.
SPARK_MASTER_PROPERTIES: Mapping[str, str] = {
    "spark.master.rest.enabled": "true",
    "spark.master.rest.port": "6066",
    "spark.ui.killEnabled": "true",
}


@dataclass(frozen=True)
class StackSettings:
    """Host names, ports and sizes the command lines depend on.

    :param api_host: address ``airflow api-server`` binds to.
    :param api_port: its port.
    :param api_workers: its worker processes.
    :param worker_concurrency: task slots of ``airflow celery worker``.
    :param spark_master_host: the Spark master's host name (what workers and drivers connect to).
    :param spark_master_port: its RPC port.
    :param spark_master_webui_port: its web UI (``/json/``) port.
    :param spark_master_properties_file: the file holding :data:`SPARK_MASTER_PROPERTIES`.
    :param spark_worker_cores: cores the Spark worker offers.
    :param spark_worker_memory: memory the Spark worker offers (``2g``).
    :param spark_worker_webui_port: the Spark worker's web UI port.
    """

    api_host: str = "0.0.0.0"
    api_port: int = 8080
    api_workers: int = 1
    worker_concurrency: int = 4
    spark_master_host: str = "spark-master"
    spark_master_port: int = 7077
    spark_master_webui_port: int = 8090
    spark_master_properties_file: str = "/opt/airflow-streaming/docker/spark-master.conf"
    spark_worker_cores: int = 2
    spark_worker_memory: str = "2g"
    spark_worker_webui_port: int = 8081

    @property
    def spark_master_url(self) -> str:
        """``spark://host:port`` of the master."""
        return f"spark://{self.spark_master_host}:{self.spark_master_port}"


#: The settings docker-compose.yaml uses.
COMPOSE = StackSettings()


def airflow_command(service: str, settings: StackSettings, airflow: Sequence[str] = ("airflow",)) -> list[str]:
    """The command line of Airflow service ``service`` (a key of :data:`AIRFLOW_SERVICES`)."""
    if service not in AIRFLOW_SERVICES:
        raise KeyError(f"no Airflow service {service!r} (known: {', '.join(AIRFLOW_SERVICES)})")
    argv = [*airflow, *AIRFLOW_SERVICES[service]]
    if service == "airflow-apiserver":
        argv += ["--host", settings.api_host, "--port", str(settings.api_port), "--workers", str(settings.api_workers)]
    if service == "airflow-worker":
        argv += ["--concurrency", str(settings.worker_concurrency)]
    return argv


def spark_command(service: str, settings: StackSettings, spark_class: Sequence[str] = ("spark-class",)) -> list[str]:
    """The command line of ``spark-master`` or ``spark-worker`` (pip's pyspark ships ``spark-class``)."""
    if service == "spark-master":
        return [*spark_class, "org.apache.spark.deploy.master.Master", "--host", settings.spark_master_host,
                "--port", str(settings.spark_master_port), "--webui-port", str(settings.spark_master_webui_port),
                "--properties-file", settings.spark_master_properties_file]
    if service == "spark-worker":
        return [*spark_class, "org.apache.spark.deploy.worker.Worker", settings.spark_master_url,
                "--cores", str(settings.spark_worker_cores), "--memory", settings.spark_worker_memory,
                "--webui-port", str(settings.spark_worker_webui_port)]
    raise KeyError(f"no Spark service {service!r} (known: {', '.join(SPARK_SERVICES)})")


def hdfs_command(service: str) -> list[str]:
    """The command line of ``hdfs-namenode`` or ``hdfs-datanode`` in the Apache Hadoop image."""
    if service not in HDFS_SERVICES:
        raise KeyError(f"no HDFS service {service!r} (known: {', '.join(HDFS_SERVICES)})")
    return ["hdfs", service.removeprefix("hdfs-")]


def service_commands(settings: StackSettings = COMPOSE, airflow: Sequence[str] = ("airflow",),
                     spark_class: Sequence[str] = ("spark-class",)) -> dict[str, list[str]]:
    """Every service's command line, by compose service name (Airflow, Spark and HDFS services)."""
    commands = {service: airflow_command(service, settings, airflow) for service in AIRFLOW_SERVICES}
    commands.update({service: spark_command(service, settings, spark_class) for service in SPARK_SERVICES})
    commands.update({service: hdfs_command(service) for service in HDFS_SERVICES})
    return commands


def spark_master_properties_text() -> str:
    """:data:`SPARK_MASTER_PROPERTIES` as a Spark properties file (``key value`` lines)."""
    return "".join(f"{key} {value}\n" for key, value in SPARK_MASTER_PROPERTIES.items())
