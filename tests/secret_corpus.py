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


# ------------------------------------------------------------------------------------------ issue 35
# Secret shapes that a keyword list missed: each carries a unique canary (the text that must never show at
# any exit). Conf shapes are judged by the allowlist of public Spark settings (airflow_streaming.public_conf);
# argument shapes must be refused by the spec. tests/unit/test_secret_shapes.py pushes each through every
# exit available without Spark.
import base64 as _b64


def _canary(n: int) -> str:
    return f"cAn4ry{n:02d}xQz"


def _basic(user: str, password: str) -> str:
    return _b64.b64encode(f"{user}:{password}".encode()).decode()


def _pem(n: int) -> str:
    return f"-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA{_canary(n)}\n-----END RSA PRIVATE KEY-----\n"


_PEM_B64 = _b64.b64encode(_pem(6).encode()).decode()
_PEM_B64_ARG = _b64.b64encode(_pem(55).encode()).decode()
_BASIC_07 = _basic("svc", _canary(7))
_JAAS_08 = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="svc" '
            f'password="{_canary(8)}";')
_GCS_KEYFILE = ('{"type": "service_account", "project_id": "p", "private_key_id": "' + _canary(12) + '", '
                '"private_key": "-----BEGIN PRIVATE KEY-----\\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC' + _canary(12)
                + '\\n-----END PRIVATE KEY-----\\n", "client_email": "svc@p.iam.gserviceaccount.com"}')

#: (key, value, canary): secret Spark conf entries, many under keys no keyword names.
CONF_SHAPES = [
    ("spark.executorEnv.DB_PASS", _canary(1), _canary(1)),
    ("spark.yarn.appMasterEnv.GITHUB_PAT", f"ghp_{_canary(2)}abcdefghijklmnopqrstu", _canary(2)),
    ("spark.es.net.http.auth.pass", _canary(3), _canary(3)),
    ("spark.redis.auth", _canary(4), _canary(4)),
    ("spark.myapp.source.url",
     f"https://acct.blob.core.windows.net/c/f.json?sv=2022-11-02&ss=b&sp=r&sig={_canary(5)}%3D", _canary(5)),
    ("spark.myapp.tls.material", _PEM_B64, _PEM_B64[40:90]),
    ("spark.es.net.http.header.Authorization", f"Basic {_BASIC_07}", _BASIC_07),
    ("spark.kafka.sasl.jaas.config", _JAAS_08, _canary(8)),
    ("spark.hadoop.fs.s3a.access.key", f"AKIA{_canary(9).upper()[:12]}WXYZ", _canary(9).upper()[:12]),
    ("spark.hadoop.fs.s3a.secret.key", _canary(10), _canary(10)),
    ("spark.hadoop.fs.s3a.bucket.lake.session.token", _canary(11), _canary(11)),
    ("spark.myapp.gcs.keyfile", _GCS_KEYFILE, _canary(12)),
    ("spark.myapp.jdbc.url", f"jdbc:postgresql://db:5432/app?user=etl&password={_canary(13)}", _canary(13)),
    ("spark.myapp.http.headers", f"Bearer {_canary(14)}", _canary(14)),
    ("spark.myapp.alerts.url", f"https://hooks.slack.com/services/T000/B000/{_canary(15)}", _canary(15)),
    ("spark.myapp.slack.bot", f"xoxb-{_canary(16)}-1234", _canary(16)),
    ("spark.hadoop.fs.azure.sas.box.acct.blob.core.windows.net", f"sv=2022-11-02&sr=c&sig={_canary(17)}", _canary(17)),
    ("spark.hadoop.fs.azure.account.key.acct.dfs.core.windows.net", _canary(18), _canary(18)),
    ("spark.hadoop.fs.azure.account.oauth2.client.secret", _canary(19), _canary(19)),
    ("spark.cassandra.auth.password", _canary(20), _canary(20)),
    ("spark.mongodb.write.connection.uri", f"mongodb://etl:{_canary(21)}@mongo:27017/app", _canary(21)),
    ("spark.snowflake.pem_private_key", f"MIIEvQIBADANBgkqhkiG9w0BAQEFAASC{_canary(22)}", _canary(22)),
    ("spark.kubernetes.driverEnv.API_KEY", _canary(23), _canary(23)),
    ("spark.myapp.oracle.url", f"jdbc:oracle:thin:scott/{_canary(24)}@//db:1521/svc", _canary(24)),
    ("spark.sql.catalog.lake.token", _canary(25), _canary(25)),
    ("spark.sql.catalog.rest.credential", f"client:{_canary(26)}", _canary(26)),
    ("spark.ssl.keyStorePassword", _canary(27), _canary(27)),
    ("spark.authenticate.secret", _canary(28), _canary(28)),
    ("spark.myapp.opaque", _canary(29), _canary(29)),
    ("spark.myapp.ssh.passphrase", f"{_canary(30)}-phrase", _canary(30)),
    ("spark.executorEnv.AWS_SECRET_ACCESS_KEY", _canary(31), _canary(31)),
    ("spark.datadog.api", _canary(32), _canary(32)),
    ("spark.sql.streaming.sink.url", f"https://etl:{_canary(33)}@sink.example/api", _canary(33)),
    ("spark.yarn.appMasterEnv.SLACK_HOOK", f"https://hooks.slack.com/services/T1/B1/{_canary(34)}", _canary(34)),
]

#: (key, value, canary): Spark conf that Spark itself puts on a JVM's command line (JVM options): a secret
#: there is refused by the spec before anything is submitted (a real driver showed it in /proc/<pid>/cmdline).
REFUSED_CONF_SHAPES = [
    ("spark.driver.extraJavaOptions", f"-Xss4m -Djavax.net.ssl.keyStorePassword={_canary(56)}", _canary(56)),
    ("spark.executor.extraJavaOptions", f"-Dkafka.password={_canary(57)}", _canary(57)),
]

#: (application_args, index of the argument that holds the secret, canary): refused by the spec.
ARG_SHAPES = [
    (["--input", "/in", "--pass", _canary(41)], 3, _canary(41)),
    (["--password", _canary(42)], 1, _canary(42)),
    ([f"--token={_canary(43)}"], 0, _canary(43)),
    (["--db", f"scott/{_canary(44)}@orcl"], 1, _canary(44)),
    (["--sink", f"postgres://etl:{_canary(45)}@db/app"], 1, _canary(45)),
    (["--source", f"https://a.blob.core.windows.net/c/x?sv=2022-11-02&sig={_canary(46)}"], 1, _canary(46)),
    (["--tls", _pem(54)], 1, _canary(54)),
    (["--header", f"Basic {_basic('svc', _canary(47))}"], 1, _basic("svc", _canary(47))),
    (["--jdbc", f"jdbc:mysql://db/app?user=etl&password={_canary(48)}"], 1, _canary(48)),
    (["--gh", f"ghp_{_canary(49)}abcdefghijklmnopqrstu"], 1, _canary(49)),
    (["--notify", f"https://hooks.slack.com/services/T0/B0/{_canary(50)}"], 1, _canary(50)),
    (["--pw", _canary(51)], 1, _canary(51)),
    (["--auth", f"Bearer {_canary(52)}"], 1, _canary(52)),
    (["--key-material", _PEM_B64_ARG], 1, _PEM_B64_ARG[40:90]),
    (["--input", "/in", "--password", "***", "--api-token", _canary(53)], 5, _canary(53)),
]

#: (env var name, value, canary): the spec's env_vars (how SparkSubmitHook hands them to the driver).
ENV_SHAPES = [
    ("DB_PASS", _canary(61), _canary(61)),
    ("GITHUB_PAT", f"ghp_{_canary(62)}abcdefghijklmnopqrstu", _canary(62)),
]
