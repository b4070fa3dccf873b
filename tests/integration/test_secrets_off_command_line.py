"""Secrets never on a command line, on real Spark: while a stream with secret conf runs (and while the
compatibility check's child runs), every process on the machine is scanned - no argv, and no
environment we can read, holds a secret; the driver still has the values; no file the provider
wrote holds them; a driver error that quotes one reaches the status document masked."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from airflow_streaming.compat.run import run_check
from airflow_streaming.control import contract
from airflow_streaming.spec import StreamSpec
from airflow_streaming.targets.local import run_processes
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark

S3_SECRET = "s3SECRET-a91f27c4e0d3"
DB_PASSWORD = "dbPASSWORD-5d20b7e1c9"
JAAS_PASSWORD = "jaasPASSWORD-0c4e7f9a21"  # secret by value: its key names no secret
URL_PASSWORD = "u7e11b2d0aa9c"  # names nothing: only the URL form (userinfo) marks it
ARG_SECRET = "a3f0b9d2c71e5"  # a secret argument of the job (StreamSpec.secret_args)
REDIS_AUTH = "rEDISauth-7c1f0e92b4"  # issue 35: keys no keyword list named, private by default
ENV_PASS = "eNVpass-3b8d61f0a2"
OPAQUE = "oPAQUE-9e2a4c71d5"  # an unknown key with a plain value: private too (but Spark's own UI shows it)
SECRETS = (S3_SECRET, DB_PASSWORD, JAAS_PASSWORD, URL_PASSWORD, ARG_SECRET, REDIS_AUTH, ENV_PASS)
JAAS = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="{JAAS_PASSWORD}";'
SECRET_CONF = {"spark.hadoop.fs.s3a.secret.key": S3_SECRET, "spark.myapp.db.password": DB_PASSWORD,
               "spark.kafka.sasl.jaas.config": JAAS, "spark.myapp.sink.url": f"postgres://etl:{URL_PASSWORD}@db/app",
               "spark.redis.auth": REDIS_AUTH, "spark.executorEnv.DB_PASS": ENV_PASS, "spark.myapp.opaque": OPAQUE}
REPO = Path(__file__).resolve().parents[2]

# An unmodified user application: it proves the driver's SparkConf holds the secrets (it writes only
# booleans: does the sha256 of what Spark has match?), then streams text files through foreachBatch,
# which fails - quoting the password - when it sees a line "POISON".
USER_SCRIPT = '''
import hashlib, json, os, sys
from pyspark.sql import SparkSession

spark = SparkSession.builder.getOrCreate()
argv = sys.argv[1:]
secret_arg = argv[-1] if len(argv) > 1 and argv[-2] == "--db-password" else None
source, checkpoint, out, *checks = argv[:-2] if secret_arg is not None else argv


def digest(value):
    return hashlib.sha256((value or "").encode()).hexdigest()


hadoop = spark.sparkContext._jsc.hadoopConfiguration()
result = {}
for item in checks:
    key, want = item.split("@", 1)
    result[key] = {"session": digest(spark.conf.get(key, None)) == want,
                   "spark_conf": digest(spark.sparkContext.getConf().get(key)) == want}
    if key.startswith("spark.hadoop."):
        result[key]["hadoop"] = digest(hadoop.get(key[len("spark.hadoop."):])) == want
result["argv"] = digest(secret_arg) if secret_arg is not None else None
with open(out + ".tmp", "w") as fh:
    json.dump(result, fh)
os.replace(out + ".tmp", out)
password = spark.conf.get("spark.myapp.db.password")


def handle(df, batch_id):
    if df.filter(df.value == "POISON").count():
        raise RuntimeError(f"login failed for etl using {password} (password={password})")


query = (spark.readStream.format("text").load(source).writeStream.foreachBatch(handle)
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
query.awaitTermination()
'''


def _environ_is_private(pid: int) -> bool:
    """Whether only the process's own user (and root) can read its environment (``/proc/<pid>/environ``)."""
    try:
        st = os.stat(f"/proc/{pid}/environ")
    except OSError:
        return False
    return st.st_uid == os.getuid() and not st.st_mode & 0o077


class ProcessScanner:
    """Scans every process on the machine, every ``interval`` seconds, until stopped: remembers each
    argv seen, and every process whose argv - or environment, where readable - holds a secret."""

    def __init__(self, secrets: tuple[str, ...], interval: float = 0.1, environ_every: int = 10,
                 private_env: frozenset[str] = frozenset()) -> None:
        """``private_env``: variables that are a designed channel for secrets (the standalone REST driver's
        ``AIRFLOW_STREAMING_SECRET_CONF``): a secret there is no leak as long as the process's environment
        is readable by its own user only; where it was seen is kept in ``private_env_seen``."""
        self.secrets = secrets
        self.private_env = private_env
        self.private_env_seen: set[str] = set()
        self.interval = interval
        self.environ_every = environ_every
        self.seen: set[tuple[str, ...]] = set()
        self.leaks: list[str] = []
        self.scans = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="argv-scanner", daemon=True)

    def __enter__(self) -> ProcessScanner:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.scan(environ=self.scans % self.environ_every == 0)
            self._stop.wait(self.interval)

    def scan(self, environ: bool = True) -> None:
        for proc in psutil.process_iter():
            try:
                argv = tuple(proc.cmdline())
                # Judged before the environment is read: a short-lived process (a driver's child such as
                # `readlink`) may be gone by the time it is judged, and a gone process's environment
                # cannot be judged private (a leak reported for the test's own race).
                private = _environ_is_private(proc.pid) if environ else False
                env = proc.environ() if environ else {}
            except (psutil.Error, OSError):
                continue
            self.seen.add(argv)
            joined = "\0".join(argv)
            for secret in self.secrets:
                if secret in joined:
                    self.leaks.append(f"argv of pid {proc.pid}: {argv[:3]}...")
                holders = [k for k, v in env.items() if secret in f"{k}={v}"]
                if holders and set(holders) <= self.private_env and private:
                    self.private_env_seen.update(holders)
                elif holders:
                    self.leaks.append(f"environment of pid {proc.pid} ({', '.join(holders)}): {argv[:3]}...")
        self.scans += 1

    def saw(self, predicate: Callable[[tuple[str, ...]], bool]) -> bool:
        return any(predicate(argv) for argv in list(self.seen))


def files_holding(root: Path, secrets: tuple[str, ...]) -> list[str]:
    """Every file under ``root`` whose bytes hold one of ``secrets``."""
    hits = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            hits += [f"{path}: {s[:4]}..." for s in secrets if s.encode() in data]
    return hits


def sha(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def test_secret_conf_reaches_the_driver_but_no_command_line_file_or_status(streams, tmp_path):
    script = tmp_path / "secret_app.py"
    script.write_text(USER_SCRIPT)
    source, ckpt, proof = streams.path("in"), streams.path("ckpt"), tmp_path / "proof.json"
    Path(source).mkdir(parents=True)
    (Path(source) / "a.txt").write_text("one\ntwo\n")
    checks = [f"{key}@{sha(value)}" for key, value in SECRET_CONF.items()]
    spec = streams.spec("secrets", str(script), [source, ckpt, str(proof), *checks],
                        spark_conf={"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "true", "spark.ui.port": "0",
                                    **SECRET_CONF})
    spec = StreamSpec.from_dict({**spec.to_dict(), "secret_args": {"--db-password": ARG_SECRET}})
    hook = streams.hook(spec)

    with ProcessScanner((*SECRETS, OPAQUE)) as scanner:
        record = stream_actions.submit(hook)
        doc = hook.wait_until_ready(record)
        assert doc.state == contract.RUNNING
        proof_doc = json.loads(wait_for(lambda: proof.exists() and proof.read_text(), 60, "the script's proof"))
        drivers = run_processes(record.run_id)
        # Spark's own REST API (what the UI's Environment page shows) hides them too.
        environment = urllib.request.urlopen(f"{doc.spark_ui}/api/v1/applications/{doc.app_id}/environment",
                                             timeout=30).read().decode()
        scanner.scan()  # at least one full scan with every driver process up
    assert scanner.scans > 10 and len(drivers) >= 2, (scanner.scans, drivers)
    # The scan did see the driver JVM (spark-submit execs it: its argv names the properties file) and
    # the Python driver...
    assert scanner.saw(lambda a: "org.apache.spark.deploy.SparkSubmit" in a and "--properties-file" in a
                       and record.run_id in a)
    assert scanner.saw(lambda a: any(x.endswith("launch.py") for x in a) and record.run_id in a)
    # ...and no process's argv or environment held a secret.
    assert scanner.leaks == []

    # The driver has every value (in the session, its SparkConf, and Hadoop's conf for spark.hadoop.*).
    assert proof_doc == {"spark.hadoop.fs.s3a.secret.key": {"session": True, "spark_conf": True, "hadoop": True},
                         "spark.myapp.db.password": {"session": True, "spark_conf": True},
                         "spark.kafka.sasl.jaas.config": {"session": True, "spark_conf": True},
                         "spark.myapp.sink.url": {"session": True, "spark_conf": True},
                         "spark.redis.auth": {"session": True, "spark_conf": True},
                         "spark.executorEnv.DB_PASS": {"session": True, "spark_conf": True},
                         "spark.myapp.opaque": {"session": True, "spark_conf": True},
                         "argv": sha(ARG_SECRET)}  # the secret argument reached the job's argv
    assert "spark.kafka.sasl.jaas.config" in environment and not [s for s in SECRETS if s in environment]

    # The 0600 properties file that carried them is gone once the driver started.
    properties = hook.driver_record().handle.get("properties_file")
    assert properties and not Path(properties).exists()

    # Nothing the driver or the deployer wrote holds them: driver.json, status.json, the run marker, the
    # lease, the driver log, the checkpoint - nor deployed.json and the lifecycle record, which keep the
    # spec with its secrets masked (a restart takes the values from the caller's spec).
    control = Path(spec.control_dir)
    assert (control / "driver.json").exists() and (control / "status.json").exists()
    assert "--properties-file" in (control / "driver.json").read_text()  # the record names the file, not its content
    assert files_holding(Path(ckpt), (*SECRETS, OPAQUE)) == []
    assert files_holding(control, (*SECRETS, OPAQUE)) == []
    assert json.loads((control / "deployed.json").read_text())["spec"]["spark_conf"][
        "spark.hadoop.fs.s3a.secret.key"] == "***"

    # A driver error quoting the password reaches the status document, the hook's error and log tail masked.
    (Path(source) / "b.txt").write_text("POISON\n")
    failed = wait_for(lambda: (d := hook.status()) is not None and d.is_terminal and d, 90, "the query to fail")
    hook.wait_gone(record, 60)
    assert failed.state == contract.FAILED
    message = failed.last_exception["message"]
    assert "login failed for etl using ***" in message and "password=***" in message, message
    assert not any(s in json.dumps(dataclasses.asdict(failed)) for s in SECRETS)  # query status message too
    assert not any(s in hook.log_tail(record.run_id, 400) for s in SECRETS)
    # The runtime's own log lines are redacted (its traceback of the script's failure)...
    log_file = Path(hook.paths.log(record.run_id))
    assert "RuntimeError: login failed for etl using *** (password=***)" in log_file.read_text()
    # ...but the raw file also holds what Spark's JVM logged about the failed query (a documented limit:
    # docs/security.md); nothing else the provider wrote holds a secret.
    assert {Path(hit.split(": ")[0]).name for hit in files_holding(control, SECRETS)} <= {log_file.name}


def test_the_compatibility_checks_child_gets_secret_conf_off_its_command_line(streams, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(REPO / "tests" / "fixtures" / "checkpoints" / "spark42_agg_dedup", ckpt)
    spec = streams.etl_spec(checkpoint_location=str(ckpt),
                            spark_conf={"spark.sql.shuffle.partitions": 2, **SECRET_CONF})
    Path(streams.path("input", "etl")).mkdir(parents=True)

    with ProcessScanner(SECRETS) as scanner:
        report = run_check(spec, allow_warnings=True, dry_run=False)
    assert report["verdict"] in ("COMPATIBLE", "COMPATIBLE_WITH_WARNINGS", "INCOMPATIBLE"), report
    # The scan saw the child and its JVM, and neither had a secret in its argv or environment.
    assert scanner.saw(lambda a: "airflow_streaming.compat" in a and "--conf-stdin" in a)
    assert scanner.saw(lambda a: "org.apache.spark.deploy.SparkSubmit" in a and "pyspark-shell" in a)
    assert scanner.leaks == []
    assert not any(s in json.dumps(report) for s in SECRETS)
