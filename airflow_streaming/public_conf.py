"""Which Spark conf keys are known to hold no secret: the allowlist of the command line.

Plain Python, no Airflow import (the driver side uses it through :mod:`airflow_streaming.redaction`).

A ``spark_conf`` entry goes on the spark-submit command line, and is shown unmasked in specs at rest,
the UI and logs, only when :func:`is_public_conf_key` says its key is a documented, non-secret Spark
setting (and its value holds no secret: :func:`airflow_streaming.redaction.is_secret_conf_entry`).
Every other key - a connector's option (``spark.es.net.http.auth.pass``, ``spark.redis.auth``), an
environment variable (``spark.executorEnv.*``), a Hadoop option (``spark.hadoop.*``), anything
unknown - is private: it travels by the private channel (the 0600 properties file, the cluster
target's secret conf) and is masked wherever it is shown.

The list is chosen from Spark's documented configuration (https://spark.apache.org/docs/latest/
configuration.html, running-on-yarn.html, running-on-kubernetes.html, structured streaming): exact keys,
and prefixes whose settings are sizes, switches, class names and paths. A key under a public prefix is
still private when it passes environment variables or names a credential (``auth``, ``pass``,
``password``, ``secret``, ``token``, ``sas``, ``key``...).
"""

from __future__ import annotations

import re

__all__ = ["PRIVATE_PREFIXES", "PUBLIC_KEYS", "PUBLIC_PREFIXES", "PUBLIC_REFERENCE_PREFIXES", "is_public_conf_key"]

#: Keys that are public exactly as written (settings whose values are names, sizes, paths or switches).
PUBLIC_KEYS = frozenset({
    "spark.master", "spark.app.name", "spark.submit.deployMode", "spark.submit.pyFiles", "spark.cores.max",
    "spark.default.parallelism", "spark.serializer", "spark.jars", "spark.jars.packages", "spark.jars.excludes",
    "spark.jars.repositories", "spark.jars.ivy", "spark.jars.ivySettings", "spark.files", "spark.archives",
    "spark.speculation", "spark.local.dir", "spark.logConf", "spark.log.level", "spark.checkpoint.compress",
    "spark.port.maxRetries", "spark.redaction.regex", "spark.redaction.string.regex", "spark.scheduler.mode",
    "spark.extraListeners", "spark.plugins", "spark.pyspark.python", "spark.pyspark.driver.python",
    "spark.executor.instances", "spark.executor.memory", "spark.executor.cores", "spark.executor.memoryOverhead",
    "spark.executor.extraJavaOptions", "spark.executor.extraClassPath", "spark.executor.extraLibraryPath",
    "spark.driver.memory", "spark.driver.cores", "spark.driver.memoryOverhead", "spark.driver.maxResultSize",
    "spark.driver.extraJavaOptions", "spark.driver.extraClassPath", "spark.driver.extraLibraryPath",
    "spark.driver.host", "spark.driver.port", "spark.driver.bindAddress", "spark.driver.supervise",
    "spark.driver.userClassPathFirst", "spark.executor.userClassPathFirst", "spark.executor.id",
    "spark.serializer.objectStreamReset",
    # Hadoop settings Spark itself sets, and the usual non-secret ones of an object store
    "spark.hadoop.fs.s3a.vectored.read.max.merged.size", "spark.hadoop.fs.s3a.vectored.read.min.seek.size",
    "spark.hadoop.fs.defaultFS", "spark.hadoop.fs.s3a.endpoint", "spark.hadoop.fs.s3a.endpoint.region",
    "spark.hadoop.fs.s3a.path.style.access", "spark.hadoop.fs.s3a.impl", "spark.hadoop.fs.s3a.connection.ssl.enabled",
    "spark.hadoop.fs.s3a.aws.credentials.provider",
    # Kubernetes settings whose values are names or file paths (the credentials themselves stay private)
    "spark.kubernetes.authenticate.driver.serviceAccountName",
    "spark.kubernetes.authenticate.executor.serviceAccountName",
    "spark.kubernetes.authenticate.submission.caCertFile", "spark.kubernetes.authenticate.driver.caCertFile",
    # the provider's own
    "spark.airflow_streaming.run_id", "spark.airflow_streaming.stream", "spark.airflow_streaming.warmUp.maxBytes",
    "spark.airflow_streaming.warmUp.script",
})

#: Prefixes of documented Spark settings that are sizes, switches, class names and paths.
PUBLIC_PREFIXES = (
    "spark.sql.", "spark.streaming.", "spark.app.", "spark.driver.log.", "spark.executor.heartbeat",
    "spark.executor.processTreeMetrics", "spark.executor.metrics.", "spark.executor.logs.",
    "spark.executor.decommission.", "spark.memory.", "spark.shuffle.", "spark.dynamicAllocation.",
    "spark.scheduler.", "spark.speculation.", "spark.task.", "spark.network.timeout", "spark.rpc.", "spark.storage.",
    "spark.kryo.", "spark.kryoserializer.", "spark.io.compression.", "spark.broadcast.", "spark.ui.",
    "spark.eventLog.", "spark.metrics.", "spark.cleaner.", "spark.locality.", "spark.files.", "spark.excludeOnFailure.",
    "spark.stage.", "spark.barrier.", "spark.reducer.", "spark.rdd.", "spark.python.", "spark.pyspark.",
    "spark.checkpoint.", "spark.yarn.", "spark.kubernetes.", "spark.standalone.", "spark.deploy.",
    "spark.decommission.", "spark.resources.", "spark.driver.resource.", "spark.executor.resource.",
)

#: Prefixes that pass environment variables: never public, whatever follows.
PRIVATE_PREFIXES = (
    "spark.executorEnv.", "spark.yarn.appMasterEnv.", "spark.kubernetes.driverEnv.", "spark.kubernetes.executorEnv.",
    "spark.mesos.driverEnv.", "spark.yarn.executorEnv.", "spark.hadoop.", "spark.airflow_streaming.secret_arg.",
    "spark.kubernetes.authenticate.submission.oauthToken", "spark.kubernetes.authenticate.driver.oauthToken",
    "spark.kubernetes.authenticate.executor.oauthToken",
)

#: Prefixes whose keys name a Kubernetes Secret to mount or reference (``<secret>:<key>``), never the
#: secret's value: public although the key says "secret".
PUBLIC_REFERENCE_PREFIXES = (
    "spark.kubernetes.driver.secretKeyRef.", "spark.kubernetes.executor.secretKeyRef.",
    "spark.kubernetes.driver.secrets.", "spark.kubernetes.executor.secrets.",
)

#: A key under a public prefix that names a credential stays private.
_CREDENTIAL_KEY = re.compile(
    r"auth|pass|pwd|secret|token|credential|private|apikey|api[._-]key|jaas|sasl|cookie|signature"
    r"|(?:^|[._-])(?:sas|sig|pat|pw|key|keystore|truststore|cert)(?:$|[._-])"
    r"|\.account\.key|accesskey|accountkey",
    re.IGNORECASE)


def is_public_conf_key(key: str) -> bool:
    """Whether ``key`` is a known Spark setting that holds no secret (see the module docstring): it may go on
    a command line and be shown. Everything else is private."""
    key = str(key).strip()
    if key in PUBLIC_KEYS:
        return True
    if key.startswith(PRIVATE_PREFIXES):
        return False
    if key.startswith(PUBLIC_REFERENCE_PREFIXES):
        return True
    return key.startswith(PUBLIC_PREFIXES) and not _CREDENTIAL_KEY.search(key)
