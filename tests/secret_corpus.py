"""One corpus of secret-bearing Spark conf entries and job arguments (issue 24), shared by the unit test
of every decision about secrets (tests/unit/test_secret_corpus.py) and the end-to-end test that
pushes it through a real deploy, upgrade and stop (tests/integration/test_secret_corpus_exits.py).
docs/security.md lists the same corpus."""

from __future__ import annotations

PEM = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END PRIVATE KEY-----"
#: key -> (value, the secret inside it). Keys that name no secret on purpose: only the value tells.
CONF_CORPUS = {
    "spark.kafka.sasl.jaas.config": ('org.apache.kafka.common.security.scram.ScramLoginModule required '
                                     'username="svc" password="Sup3rS3cret-jaas";', "Sup3rS3cret-jaas"),
    "spark.kafka.ssl.keystore.password": ("ks-Pa55-kafka", "ks-Pa55-kafka"),
    "spark.kafka.ssl.key.password": ("key-Pa55-kafka", "key-Pa55-kafka"),
    "spark.myapp.jdbc.url": ("jdbc:postgresql://db:5432/app?user=etl&password=jdbcPa55word", "jdbcPa55word"),
    "spark.myapp.sink.url": ("postgres://etl:urlPa55word@db:5432/app", "urlPa55word"),
    "spark.myapp.tls.pem": (PEM, "MIIEvQIBADANBgkqhkiG9w0BAQEFAASC"),
    "spark.myapp.http.header": ("Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.tok3n", "eyJhbGciOiJIUzI1NiJ9.tok3n"),
    "spark.hadoop.fs.s3a.secret.key": ("wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    "spark.hadoop.fs.s3a.access.key": ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    "spark.hadoop.fs.s3a.session.token": ("FwoGZXIvYXdzEXAMPLETOKEN", "FwoGZXIvYXdzEXAMPLETOKEN"),
    "spark.hadoop.fs.gs.auth.service.account.private.key": ("gcs-private-key-material", "gcs-private-key-material"),
    "spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net": ("azureKey0123456789==", "azureKey0123456789=="),
    "spark.myapp.azure.connection": ("DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=azConnKey99==;",
                                     "azConnKey99=="),
    "spark.myapp.alerts.webhook": ("https://hooks.slack.com/services/T000/B000/slackHookSecret", "slackHookSecret"),
}
#: application_args that hold a secret, and the index of the argument that holds it.
ARGS_CORPUS = [
    (["--input", "/in", "--password", "hunter2-arg"], 3),
    (["--token=tok3n-arg-value"], 0),
    (["--db-url", "postgres://u:pw-in-url@h/db"], 1),
    (["--jdbc", "jdbc:postgresql://h/db?user=u&password=jdbc-arg-pw"], 1),
    (["--api-key", "k3y-arg-value"], 1),
]
