"""The raw driver log at rest holds no secret that the driver's JVM logged (issue 20: "the raw driver log
can hold secrets that the JVM logged"). A real driver's JVM logs, through log4j (as Spark, a JDBC driver
or a connector would), a JDBC URL with a password, a URL with userinfo, a JAAS config in an exception,
a bearer token and a PEM private key; the driver log file must show each masked, and the lines still
there (redaction, not silence)."""

from __future__ import annotations

from pathlib import Path

import pytest

from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark

SECRETS = ("LogJdbcPa55", "LogUrlPa55", "LogJaasPa55", "eyJhbGciOiJIUzI1NiJ9.LogT0ken", "MIIEvLogPemKeyMaterial")

USER_SCRIPT = '''
import sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.appName("logs-secrets").getOrCreate()
jvm = spark.sparkContext._jvm
log = jvm.org.apache.logging.log4j.LogManager.getLogger("user.connector")
log.warn("connecting to jdbc:postgresql://db:5432/app?user=etl&password=LogJdbcPa55 then postgres://etl:LogUrlPa55@db/app")
log.error("login failed", jvm.java.lang.RuntimeException(
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="LogJaasPa55";'))
log.warn("calling the API with Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.LogT0ken")
log.warn("loaded -----BEGIN PRIVATE KEY-----\\nMIIEvLogPemKeyMaterial\\n-----END PRIVATE KEY----- from the keystore")
source, sink, checkpoint = sys.argv[1:4]
query = (spark.readStream.format("text").load(source).writeStream.format("parquet").option("path", sink)
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
query.awaitTermination()
'''


def test_secrets_the_jvm_logs_are_masked_in_the_driver_log(streams, tmp_path):
    script = tmp_path / "logs_secrets.py"
    script.write_text(USER_SCRIPT)
    source = Path(streams.path("in"))
    source.mkdir(parents=True)
    (source / "a.txt").write_text("one line\n")
    hook = streams.hook(streams.spec("logsecrets", str(script), [str(source), streams.path("out"),
                                                                 streams.path("ckpt-logs")]))
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    log_text = wait_for(lambda: (t := Path(record.log_path).read_text(errors="replace")) and "Bearer" in t and t, 60,
                        "the JVM's log lines in the driver log")
    assert stream_actions.stop(hook).graceful
    log_text = Path(record.log_path).read_text(errors="replace")
    leaked = [s for s in SECRETS if s in log_text]
    assert not leaked, f"in the raw driver log {record.log_path}: {leaked}"
    for masked in ("password=***", "postgres://etl:***@db/app", 'password="***', "Bearer ***",
                   "-----BEGIN PRIVATE KEY----- *** -----END PRIVATE KEY-----", " connector: "):
        assert masked in log_text, f"{masked!r} missing: the lines must stay, masked"
