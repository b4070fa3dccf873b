"""The environment a driver (and the spark-submit that starts it) gets: this process's, minus Airflow's.

An Airflow worker's environment holds Airflow's own configuration and credentials:
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` (the metadata database's password), ``AIRFLOW__CORE__FERNET_KEY``
(which decrypts every connection), the API's JWT secret, ``AIRFLOW_CONN_*`` connections and
``AIRFLOW_VAR_*`` variables, and ``AIRFLOW_HOME`` / ``AIRFLOW_CONFIG`` (where ``airflow.cfg`` and the
control seal key live). Job code runs in the driver; none of that is the job's business, and a
job that needs a credential gets it from its spec (secret conf, ``secret_args``). So a driver's
environment is the submitting process's without them; what Spark, Hadoop, Java and Python need
(``PATH``, ``JAVA_HOME``, ``SPARK_*``, ``HADOOP_*``, ``PYSPARK_*``, cloud SDK variables...) stays.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["AIRFLOW_ONLY_NAMES", "AIRFLOW_ONLY_PREFIXES", "driver_environment"]

#: Environment variables that are Airflow's configuration and credentials, never a driver's.
AIRFLOW_ONLY_PREFIXES = ("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_", "_AIRFLOW_", "AIRFLOW_CTX_")
#: Where Airflow's configuration, its secrets and the control seal key are: not a driver's business either.
#: (A driver that runs as the worker's own Unix user can still find them at their default places:
#: docs/security.md says which deploy modes share the worker's trust.)
AIRFLOW_ONLY_NAMES = frozenset({"AIRFLOW_HOME", "AIRFLOW_CONFIG"})


def driver_environment(environ: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` without Airflow's configuration and credentials, plus ``extra`` (the plan's own)."""
    env = {k: v for k, v in environ.items() if not k.startswith(AIRFLOW_ONLY_PREFIXES) and k not in AIRFLOW_ONLY_NAMES}
    env.update(extra or {})
    return env
