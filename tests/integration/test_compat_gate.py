"""The compatibility gate from the command line and as an Airflow task (real Spark, real Airflow DB)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from spark_jobs.event_generator import generate_events

pytestmark = pytest.mark.spark

MAKE_CHECKPOINT = '''
import sys
from pyspark.sql import SparkSession
from airflow_streaming.bundled_job import JobContext, bundled_writer
spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
         .config("spark.sql.shuffle.partitions", "2").getOrCreate())
job, ckpt, args = sys.argv[1], sys.argv[2], sys.argv[3:]
writer = bundled_writer(spark, job, args, JobContext("signals", "v1", ckpt, 1.0))
writer.trigger(availableNow=True).start().awaitTermination()
spark.stop()
'''


@pytest.fixture(scope="module")
def signals(tmp_path_factory):
    """A real checkpoint of the bundled stateful job (device_signals v1) after one batch."""
    root = tmp_path_factory.mktemp("signals")
    args = ["--input", str(root / "in"), "--output", str(root / "out"), "--window", "1 minute"]
    generate_events(root / "in", count=200, devices=4, event_time_start=datetime(2026, 1, 1, tzinfo=timezone.utc),
                    event_time_step=1.0)
    run = subprocess.run([sys.executable, "-c", MAKE_CHECKPOINT, "device_signals", str(root / "ckpt"), *args],
                         capture_output=True, text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert run.returncode == 0, run.stderr[-3000:]
    return {"ckpt": str(root / "ckpt"), "args": args, "root": root}


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "airflow_streaming.compat", *args], capture_output=True, text=True,
                          timeout=300)


def hashes(root: str) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in Path(root).rglob("*") if p.is_file()}


def test_cli_bundled_v2_is_compatible_and_reads_only(signals):
    before = hashes(signals["ckpt"])
    out = cli("--json", "--checkpoint", signals["ckpt"], "--application", "device_signals_v2", "--", *signals["args"])
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads(out.stdout[out.stdout.index("{"):])
    assert report["verdict"] == "COMPATIBLE"
    assert report["dry_run"]["status"] == "passed"
    assert report["checkpoint"]["operators"] == ["stateStoreSave"]
    assert hashes(signals["ckpt"]) == before


def test_cli_refuses_a_changed_aggregation_with_rule_and_both_sides(signals, tmp_path):
    script = tmp_path / "signals_by_site.py"
    script.write_text(
        "import sys\n"
        "from pyspark.sql import SparkSession, functions as F\n"
        "from spark_jobs.jobs import device_signals\n"
        "spark = SparkSession.builder.getOrCreate()\n"
        "ns = device_signals.parse_args(sys.argv[1:])\n"
        "lines = spark.readStream.format('text').load(ns.input)\n"
        "from spark_jobs.jobs.events_schema import EVENT_SCHEMA, event_time\n"
        "ev = lines.select(F.from_json('value', EVENT_SCHEMA).alias('r')).select('r.*')\n"
        "ev = ev.withColumn('event_time', event_time(F.col('ts'))).withWatermark('event_time', '30 seconds')\n"
        "agg = ev.groupBy(F.window('event_time', '1 minute'), 'device_id', 'event_type').agg(F.count('*').alias('n'))\n"
        "agg.writeStream.format('parquet').option('path', ns.output).start().awaitTermination()\n"
    )
    out = cli("--checkpoint", signals["ckpt"], "--application", str(script), "--", *signals["args"])
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "verdict: INCOMPATIBLE" in out.stdout
    assert "STATE_KEY_SCHEMA" in out.stdout and "event_type: string" in out.stdout
    assert "STATE_STORE_KEY_SCHEMA_NOT_COMPATIBLE" in out.stdout  # from Spark's own dry run


def test_cli_names_a_missing_checkpoint(tmp_path):
    out = cli("--checkpoint", str(tmp_path / "nope"), "--application", "device_signals_v2", "--", "--input", "/x",
              "--output", "/y")
    assert out.returncode == 3
    assert f"checkpoint {tmp_path / 'nope'} does not exist" in out.stdout


DAG_FILE = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_streaming.operators.compat import SparkStreamCompatibilityCheckOperator

SPEC = {spec!r}
with DAG("{dag_id}", schedule=None, start_date=datetime(2026, 1, 1)):
    SparkStreamCompatibilityCheckOperator(task_id="gate", spec=SPEC)
"""


@pytest.mark.airflow
@pytest.mark.parametrize("application, version, passes", [
    pytest.param("device_signals_v2", "v2", True, marks=pytest.mark.long(
        covered_by="tests/integration/test_compat_gate.py::"
                   "test_upgrade_operator_refuses_an_incompatible_version_and_touches_nothing")),
    pytest.param("events_etl", "v3", False, marks=pytest.mark.long(
        covered_by="tests/integration/test_compat_gate.py::"
                   "test_upgrade_operator_refuses_an_incompatible_version_and_touches_nothing"))])
def test_operator_gates_the_task_under_airflow_dags_test(signals, airflow_db, tmp_path, application, version, passes):
    args = signals["args"] if application.startswith("device_signals") else [
        "--input", str(signals["root"] / "in"), "--output", str(signals["root"] / "etl"),
        "--quarantine", str(signals["root"] / "bad")]
    spec = {"name": "signals", "application": application, "version": version,
            "checkpoint_location": signals["ckpt"], "control_location": str(signals["root"] / "control"),
            "master": "local[1]", "application_args": args,
            "spark_conf": {"spark.sql.shuffle.partitions": "2"}}
    dags = tmp_path / "dags"
    dags.mkdir()
    dag_id = f"compat_gate_{application}"
    (dags / f"{dag_id}.py").write_text(DAG_FILE.format(spec=spec, dag_id=dag_id))
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", dag_id], env=env, capture_output=True,
                         text=True, timeout=600)
    output = run.stdout + run.stderr
    if passes:
        assert run.returncode == 0, output[-4000:]
        assert "compatibility of device_signals_v2 v2" in output and ": COMPATIBLE" in output
    else:
        assert run.returncode != 0, output[-4000:]
        assert "IncompatibleCandidateError" in output and "events_etl v3 is INCOMPATIBLE" in output
        assert "STATEFUL_OPERATORS" in output


UPGRADE_DAG = """
from datetime import datetime
from airflow.sdk import DAG
from airflow_streaming.operators.lifecycle import SparkStreamUpgradeOperator

with DAG("upgrade_refused", schedule=None, start_date=datetime(2026, 1, 1)):
    SparkStreamUpgradeOperator(task_id="upgrade", spec={spec!r})
    SparkStreamUpgradeOperator(task_id="rollback", action="rollback", spec={other!r})
"""


@pytest.mark.airflow
def test_upgrade_operator_refuses_an_incompatible_version_and_touches_nothing(signals, airflow_db, tmp_path):
    """The operator's glue under `airflow dags test`: REFUSED fails the task with the gate's findings,
    the checkpoint is byte-identical, the history records it; a rollback with no history says why."""
    control = str(signals["root"] / "control-op")
    spec = {"name": "signals", "application": "events_etl", "version": "v3", "checkpoint_location": signals["ckpt"],
            "control_location": control, "master": "local[1]",
            "application_args": ["--input", str(signals["root"] / "in"), "--output", str(signals["root"] / "etl"),
                                 "--quarantine", str(signals["root"] / "bad")],
            "spark_conf": {"spark.sql.shuffle.partitions": "2"}}
    other = {**spec, "name": "never-deployed", "checkpoint_location": str(tmp_path / "none")}
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "upgrade_refused.py").write_text(UPGRADE_DAG.format(spec=spec, other=other))
    before = hashes(signals["ckpt"])
    env = {**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}
    run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "upgrade_refused"], env=env,
                         capture_output=True, text=True, timeout=600)
    output = run.stdout + run.stderr
    assert run.returncode != 0, output[-4000:]
    assert "upgrade of signals to v3 ended REFUSED" in output and "INCOMPATIBLE" in output
    assert "stream 'never-deployed' was never deployed" in output and "deploy it before a rollback" in output
    assert hashes(signals["ckpt"]) == before
    history = json.loads((Path(control) / "signals" / "history.json").read_text())
    assert [(h["action"], h["to_version"], h["outcome"], h["verdict"]) for h in history] == [
        ("upgrade", "v3", "REFUSED", "INCOMPATIBLE")]
