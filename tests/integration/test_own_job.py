"""Issue 34's "done when", end to end on real Spark and real Airflow task code: a team's own job, first class.

A script that is not in the repository imports a helper module shipped with ``py_files``, reads a data file
shipped with ``files``, runs its own 30-second trigger and a named stateful query (deduplication with a
watermark). It is deployed by ``airflow dags test`` of a DAG that sets only fields the README documents;
judged HEALTHY (never FALLING_BEHIND or STALLED) through a full minute of steady input, by its own trigger;
upgraded warm to v2 (the prepared driver ran the script up to its start() and replayed its plan); then
its driver is SIGKILLed and the hot standby takes over. The sink holds every fed event exactly once,
enriched from the shipped file by the shipped helper.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from airflow_streaming.lifecycle.record import Action, Probation, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner
from airflow_streaming.lifecycle.supervisor import supervise
from airflow_streaming.spec import StreamSpec
from airflow_streaming.supervision.policy import RestartPolicy
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import committed_sink_files
from streams import wait_for
import stream_actions

pytestmark = [pytest.mark.spark, pytest.mark.airflow]

EXAMPLE = Path(__file__).resolve().parents[2] / "dags" / "own_job"
"""The example DAG's team files (dags/own_job_stream.py ships them): copied out of the repository here."""

DAG_FILE = '''
from datetime import datetime

from airflow.sdk import DAG

from airflow_streaming.operators.deploy import SparkStreamDeployOperator

SPEC = {spec!r}

with DAG("team_orders_deploy", schedule=None, start_date=datetime(2026, 1, 1)):
    SparkStreamDeployOperator(task_id="deploy", spec=SPEC)
'''


class Feeder:
    """One file of 20 events every ``every`` seconds, in a thread; remembers every id written."""

    def __init__(self, directory: str, every: float = 2.0):
        self.directory, self.every, self.ids, self.files = directory, every, [], 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def feed(self) -> None:
        batch = generate_events(self.directory, count=20, files=1, run=f"f{self.files}", file_start_index=self.files)
        self.ids.extend(batch.event_ids)
        self.files += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.feed()

    def __enter__(self) -> Feeder:
        self.feed()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def test_a_teams_own_job_is_deployed_judged_upgraded_warm_and_failed_over_exactly_once(streams, airflow_db, tmp_path):
    import pyarrow.dataset as ds

    import shutil

    team = tmp_path / "team-repo"  # the team's own checkout: not this repository (the example's files, copied)
    shutil.copytree(EXAMPLE, team)
    (team / "orders_dedup_v1.py").write_text((team / "orders_dedup.py").read_text())
    (team / "orders_dedup_v2.py").write_text((team / "orders_dedup.py").read_text() + "# v2\n")
    inp, out, ckpt = streams.path("orders-in"), streams.path("orders-out"), streams.path("orders-ckpt")
    spec = {"name": "team-orders", "application": str(team / "orders_dedup_v1.py"), "version": "v1",
            "checkpoint_location": ckpt, "control_location": streams.path("control"), "master": "local[2]",
            "application_args": ["--input", inp, "--output", out, "--checkpoint", ckpt],
            "py_files": [str(team / "lib" / "enrich.py")], "files": [str(team / "data" / "sites.csv")],
            "heartbeat_interval": "1 second", "stop_timeout": "2 minutes", "startup_timeout": "4 minutes",
            "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false"}}
    hook = streams.hook(StreamSpec.from_dict(spec))
    hook_v2 = streams.hook(StreamSpec.from_dict({**spec, "application": str(team / "orders_dedup_v2.py"),
                                                 "version": "v2", "hot_standby": True}))
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "team_orders.py").write_text(DAG_FILE.format(spec=spec))

    with Feeder(inp) as feeder:
        # 1. Deployed by a DAG: `airflow dags test` runs the deploy task until the first progress.
        run = subprocess.run([sys.executable, "-m", "airflow", "dags", "test", "team_orders_deploy"],
                             env={**os.environ, "AIRFLOW__CORE__DAGS_FOLDER": str(dags)}, capture_output=True,
                             text=True, timeout=600)
        assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
        first = hook.driver_record()
        doc = hook.status()
        assert doc.run_id == first.run_id and doc.queries[0].name == "orders_dedup"

        # 2. A full minute of steady input, judged by the job's own 30 s trigger: HEALTHY throughout.
        wait_for(lambda: hook.status().queries[0].trigger is not None, 30, "the job's trigger reported")
        assert hook.status().queries[0].trigger == {"kind": "processing_time", "interval_s": 30.0}
        verdicts = []
        until = time.monotonic() + 60
        while time.monotonic() < until:
            verdicts.append(hook.health())
            time.sleep(5)
        assert {v.state.value for v in verdicts} == {"HEALTHY"}, [(v.state.value, v.reasons) for v in verdicts]
        assert {(v.metrics["trigger_interval_s"], v.metrics["trigger_from"]) for v in verdicts} == {(30.0, "job")}

        # 3. Upgraded warm to v2: prepared beside v1, the script planned (start() held) and its plan replayed.
        warm = LifecycleOptions(probation=Probation(min_batches=1, window_s=120), poll_s=0.5, warm_start=True)
        done = LifecycleRunner(hook_v2.spec, Action.UPGRADE, warm).run()
        assert done.step == Step.SUCCEEDED, done.error
        standby_log = Path(hook.driver_log_path(done.new_run_id)).read_text(errors="replace")
        assert "planned the script's first query" in standby_log, standby_log[-3000:]
        assert "plan warm-up replayed batch" in standby_log, standby_log[-3000:]
        assert hook.deployed()["spec"]["py_files"] == [str(team / "lib" / "enrich.py")]
        hook = hook_v2

        # 4. The hot standby (v2 asks for one): prepared by a supervisor pass, it replayed the plan too.
        policy = RestartPolicy(max_attempts=3, backoff_initial_s=1, backoff_max_s=5)
        wait_for(lambda: supervise(hook, policy, lambda e: None).action == "STANDBY_PREPARED", 180,
                 "a pass preparing the hot standby", interval=1)
        wait_for(lambda: (hook.hot_standby_state() or {}).get("state") == "READY", 180, "the hot standby READY")
        standby = hook.hot_standby_state()
        assert standby["plan_warm_up_s"] is not None, standby
        active = hook.driver_record()
        os.killpg(active.submit_pid, signal.SIGKILL)
        wait_for(lambda: hook.driver_record().run_id == standby["run_id"], 90, "the takeover", interval=0.2)
        wait_for(lambda: (d := hook.status()) and d.run_id == standby["run_id"] and d.totals["batches"] >= 1, 90,
                 "the standby's first batch", interval=0.2)
        # The taken-over run reports the job's own trigger (not the replay's `once`: the replay ran on a copy
        # of the checkpoint, under the same query id).
        assert hook.status().queries[0].trigger == {"kind": "processing_time", "interval_s": 30.0}
        assert supervise(hook, policy, lambda e: None).action == "FAILED_OVER"

    def sink():
        return ds.dataset(committed_sink_files(out), format="parquet").to_table(columns=["event_id", "device_id", "site"])

    wait_for(lambda: set(sink().column("event_id").to_pylist()) >= set(feeder.ids), 120, "every event in the sink",
             interval=2)
    assert stream_actions.stop(hook).graceful
    table = sink()
    ids = table.column("event_id").to_pylist()
    assert len(ids) == len(set(ids)) and set(ids) == set(feeder.ids)  # nothing lost, nothing duplicated
    sites = dict(zip(table.column("device_id").to_pylist(), table.column("site").to_pylist(), strict=True))
    assert sites and all(site == f"site-{int(device[4:]) % 3}" for device, site in sites.items())
