"""The driver's SparkSession, and the secrets that reach the driver for it.

Secret Spark conf arrives either in a 0600 properties file that spark-submit has read
(:func:`forget_secret_properties` remembers its values for redaction and deletes it) or, on a
cluster target, in the environment (:func:`secret_conf_from_environment`). :class:`DriverSession`
builds the session with that conf and appends the stream's secret arguments to the application's.
Every mode of the driver (a normal run, a standby, the gate-only driver) builds its session here.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from typing import Any

log = logging.getLogger("airflow_streaming.runtime")


class DriverSession:
    """Builds this driver's SparkSession from its arguments (``ns``) and its secret conf."""

    def __init__(self, ns: argparse.Namespace, secret_conf: dict[str, str] | None = None):
        self.ns = ns
        self.secret_conf: dict[str, str] = dict(secret_conf or {})
        """Secret conf passed in the environment (cluster targets), applied to the session."""
        self._secret_args_added = False

    def create(self, name: str | None = None) -> Any:
        """The SparkSession (``getOrCreate``), named ``<stream>:<version>`` unless ``name`` is given."""
        from pyspark.sql import SparkSession

        builder = SparkSession.builder.appName(name or f"{self.ns.stream}:{self.ns.version}")
        for key, value in self.secret_conf.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
        self._add_secret_args(spark)
        if self.ns.script:
            # Named queries of a user script without their own checkpointLocation land under the stream's.
            spark.conf.set("spark.sql.streaming.checkpointLocation", self.ns.checkpoint)
        return spark

    def _add_secret_args(self, spark: Any) -> None:
        """Append the stream's secret arguments (``StreamSpec.secret_args``, delivered as secret conf: the
        properties file, or the cluster target's environment) to the job's arguments, once."""
        if self._secret_args_added:
            return
        self._secret_args_added = True
        from airflow_streaming.redaction import remember_secrets, secret_args_of_conf

        conf = {**dict(spark.sparkContext.getConf().getAll()), **self.secret_conf}
        extra = secret_args_of_conf(conf)
        if extra:
            remember_secrets(extra[1::2])
            self.ns.app_args = [*self.ns.app_args, *extra]


def forget_secret_properties() -> None:
    """Delete the 0600 properties file that carried secret conf to spark-submit (the JVM has read it),
    after remembering its values so that this driver masks them in its log and status document."""
    path = os.environ.pop("AIRFLOW_STREAMING_SECRET_PROPERTIES", None)
    if path:
        from airflow_streaming.redaction import remember_secrets
        from airflow_streaming.properties_file import read_properties_file

        try:
            remember_secrets(read_properties_file(path).values())
        except (OSError, UnicodeDecodeError) as exc:
            log.warning("could not read the secret properties file before deleting it: %s", exc)
        try:
            os.unlink(path)
        except OSError:
            pass


def secret_conf_from_environment() -> dict[str, str]:
    """Secret Spark conf a cluster target passed in ``AIRFLOW_STREAMING_SECRET_CONF`` (JSON; standalone
    cluster mode, where the master would put ``sparkProperties`` on the driver JVM's command line).
    Removed from the environment at once: nothing this driver starts inherits it."""
    raw = os.environ.pop("AIRFLOW_STREAMING_SECRET_CONF", None)
    if not raw:
        return {}
    try:
        conf = json.loads(raw)
    except ValueError:
        log.error("AIRFLOW_STREAMING_SECRET_CONF is not valid JSON: secret conf ignored")
        return {}
    return {str(k): str(v) for k, v in conf.items()} if isinstance(conf, dict) else {}
