"""The environment a driver (and the spark-submit that starts it) gets: this process's, minus Airflow's.

An Airflow worker's environment holds Airflow's own configuration and credentials:
``AIRFLOW__DATABASE__SQL_ALCHEMY_CONN`` (the metadata database's password), ``AIRFLOW__CORE__FERNET_KEY``
(which decrypts every connection), the API's JWT secret, ``AIRFLOW_CONN_*`` connections and
``AIRFLOW_VAR_*`` variables. Job code runs in the driver; none of that is the job's business, and a
job that needs a credential gets it from its spec (secret conf, ``secret_args``). So a driver's
environment is the submitting process's without them; what Spark, Hadoop, Java and Python need
(``PATH``, ``JAVA_HOME``, ``SPARK_*``, ``HADOOP_*``, ``PYSPARK_*``, cloud SDK variables...) stays.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["AIRFLOW_ONLY_PREFIXES", "driver_environment"]

#: Environment variables that are Airflow's configuration and credentials, never a driver's.
AIRFLOW_ONLY_PREFIXES = ("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_", "_AIRFLOW_", "AIRFLOW_CTX_")


def driver_environment(environ: Mapping[str, str], extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` without Airflow's configuration and credentials, plus ``extra`` (the plan's own)."""
    env = {k: v for k, v in environ.items() if not k.startswith(AIRFLOW_ONLY_PREFIXES)}
    env.update(extra or {})
    return env
