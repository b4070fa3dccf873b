"""The lifecycle on real Airflow services, driven through the REST API as the UI drives it.

One real Airflow (PostgreSQL, api-server, scheduler with LocalExecutor, dag-processor, triggerer: see
``tests/airflow_stack.py``) with ``[operators] default_deferrable = True``, and one real stream (the
bundled ``events_etl`` job, then ``events_etl_v2``) fed with events throughout. In order:

a. a deploy DAG run: the deploy task and the health sensor reach DEFERRED (their waits run in the real
   triggerer, no worker slot held) and come back to succeed;
b. the triggerer is restarted while the deploy is deferred: the new triggerer re-creates the trigger
   from the database, the task resumes and succeeds; one deploy, one driver - nothing lost;
c. the real ``stream_operations`` DAG, triggered with a conf (upgrade to v2), defers at its waits and
   succeeds; the task log shows the upgrade's steps and the gate's verdict, the lifecycle record says
   SUCCEEDED with that verdict;
d. the driver is SIGKILLed (its process group) and a supervisor DAG run restarts it from the checkpoint;
e. the desired-state file is edited to want v3 and the real ``stream_upgrade_window`` DAG (its cron set to
   every minute) arrives in the DAG folder: its first *scheduled* run - nobody triggers it - upgrades
   the stream behind the gate, and its summary reports v2 -> v3 SUCCEEDED.

Finally the operations DAG's operator stops the stream gracefully while Airflow 3.3's defer race is
injected (``RACE_DAG``: the try that deferred reports its exit only after the resumed try started, and the
scheduler fails that try): its default retry resumes the stop, taking over the lock the failed try
handed to its trigger. The sink's output is compared with what was fed: every event exactly once.

Throughout, the DAG ``e2e_periods`` is scheduled on an Asset whose ``AssetWatcher`` runs
``SparkStreamCompletenessTrigger`` (rule ``batches:6``: ``events_etl`` has no event-time watermark) over the
stream's spec; its task appends the payload of each Asset event it was triggered by to a file. At the end the
periods complete in the checkpoint are computed with the pure core (``read_committed`` + ``closed_periods``,
with the progress reports the status document showed during the test): ``e2e_periods`` ran exactly once per
complete period, in order, with the batch ids and row counts the core computes - across the triggerer restart
(b), the upgrades (c, e) and the kill (d). The deploy and supervisor DAGs are small test DAGs using the provider's
operators (the example ``device_signals_deploy`` waits for HEALTHY, which a running stream already is,
so its sensor decides in the worker and would not show a deferral; ``stream_supervisor`` is scheduled
every minute over a fixed spec file). Every process started is stopped by pid at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from airflow_stack import AirflowStack, StackOptions, airflow_stack  # noqa: F401 - the fixture
from airflow_streaming.checkpoint.committed import read_committed
from airflow_streaming.completeness import closed_periods, parse_rule
from airflow_streaming.hooks.streaming_job import storage_path
from airflow_streaming.lifecycle.desired_state import load_desired_state
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from streams import StreamRegistry, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.airflow]

REPO = Path(__file__).resolve().parents[2]
STREAM = "e2e-etl"
LIFECYCLE_TRIGGER = "airflow_streaming.triggers.lifecycle.SparkStreamLifecycleTrigger"
HEALTH_TRIGGER = "airflow_streaming.triggers.health.SparkStreamHealthTrigger"
#: The completeness rule of ``e2e_periods``: a period of 6 batches (the stream triggers every 2 s while fed,
#: about 30 batches in all: five periods or so).
PERIOD_RULE = {"period": "batches:6"}

# The downstream DAG: one run per Asset event of the completeness watcher. The spec is the one the test
# deploys, frozen in a file at setup (the desired state's later edits must not re-create the trigger).
PERIODS_DAG = """
import json
import os
import pendulum
from airflow.sdk import Asset, AssetWatcher, dag, task
from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger

SPEC = json.loads(open(os.environ["E2E_PERIODS_SPEC"]).read())
PERIODS = Asset(name="e2e-etl_periods", uri="stream://e2e-etl/periods", watchers=[AssetWatcher(
    name="e2e-etl_periods", trigger=SparkStreamCompletenessTrigger(spec=SPEC, rule=%r, poll_interval=2))])


@dag(schedule=[PERIODS], start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def e2e_periods():
    @task
    def record(triggering_asset_events=None, run_id=None):
        lines = [json.dumps({"run_id": run_id, "timestamp": str(event.timestamp), "extra": event.extra})
                 for events in triggering_asset_events.values() for event in events]
        with open(os.environ["E2E_PERIODS_OUT"], "a") as fh:
            fh.write("".join(line + "\\n" for line in lines))

    record()


e2e_periods()
""" % (PERIOD_RULE,)

DEPLOY_DAG = '''
import os
import pendulum
from airflow.sdk import dag
from airflow_streaming.lifecycle.desired_state import load_desired_state
from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.sensors.health import SparkStreamHealthSensor

SPEC = load_desired_state(os.environ["AIRFLOW_STREAMING_DESIRED_STATE"]).target("e2e-etl").spec.to_dict()


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def e2e_deploy():
    # deferrable: [operators] default_deferrable = True in this stack
    deploy = SparkStreamDeployOperator(task_id="deploy", spec=SPEC, poll_interval=1)
    deploy >> SparkStreamHealthSensor(task_id="health", spec=SPEC, health_mode="watch", watch_seconds=25,
                                    fail_on=["FAILED", "STOPPED"], poke_interval=3, timeout=300)


e2e_deploy()
'''

SUPERVISOR_DAG = '''
import os
import pendulum
from airflow.sdk import dag
from airflow_streaming.lifecycle.desired_state import load_desired_state
from airflow_streaming.operators.supervise import SparkStreamSupervisorOperator

SPEC = load_desired_state(os.environ["AIRFLOW_STREAMING_DESIRED_STATE"]).target("e2e-etl").spec.to_dict()


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def e2e_supervisor():
    SparkStreamSupervisorOperator(task_id="supervise", specs=[SPEC], max_wait_s=30,
                                  restart_policy={"max_attempts": 3, "backoff_initial_s": 1, "backoff_max_s": 5})


e2e_supervisor()
'''


# The final stop runs the operations DAG's operator with a fault injected at a named step: Airflow 3.3's
# defer race (apache/airflow#72716). The try that deferred reports its exit only once the resumed try is
# RUNNING (Airflow's task runner calls the operator's extra links after it sent the deferral; this link
# holds the exit there), so the scheduler drains a stale "success" for a task that runs again and fails
# that try as "killed externally". The provider must ride it out: the task's default retries (it sets
# none) resume the stop from its record, taking over the lock the failed try handed to its trigger.
RACE_DAG = '''
import os
import time
from pathlib import Path

import pendulum
from airflow.sdk import BaseOperatorLink, dag
from airflow_streaming.operators.lifecycle import SparkStreamOperationOperator
from airflow_streaming.ui.links import STREAM_LINKS

MARKS = Path(os.environ["E2E_RACE_MARKS"])


class ExitReportedLate(BaseOperatorLink):
    name = "exit reported late (fault injection)"

    def get_link(self, operator, *, ti_key):
        if getattr(operator, "deferred_here", False) and not (MARKS / "deferred").exists():
            (MARKS / "deferred").touch()
            deadline = time.monotonic() + 180
            while not (MARKS / "resumed").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(2)  # the resumed try is RUNNING: now this process exits and the executor reports it
        return ""


class RacedOperation(SparkStreamOperationOperator):
    operator_extra_links = (*STREAM_LINKS, ExitReportedLate())

    def defer(self, **kwargs):
        self.deferred_here = True
        super().defer(**kwargs)

    def execute_complete(self, context, event):
        if not (MARKS / "resumed").exists():
            (MARKS / "resumed").touch()
            time.sleep(120)  # running when the stale report arrives: Airflow fails this try and kills it here
        return super().execute_complete(context, event)


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def e2e_raced_stop():
    # no retries set: a deferrable lifecycle task gets its default ones
    RacedOperation(task_id="operate", stream="e2e-etl", action="stop",
                   desired_state=os.environ["AIRFLOW_STREAMING_DESIRED_STATE"])


e2e_raced_stop()
'''


def _desired_state(root: Path) -> str:
    args = f"[--input, {root}/input, --output, {root}/output, --quarantine, {root}/quarantine]"
    path = root / "desired_state.yaml"
    path.write_text(f"""
defaults:
  control_location: {root}/control
  master: local[2]
  trigger_interval: 2 seconds
  heartbeat_interval: 1 second
  stop_timeout: 60 seconds
  startup_timeout: 240 seconds
  spark_conf:
    spark.sql.shuffle.partitions: 2
    spark.sql.streaming.minBatchesToRetain: "1000"  # the whole checkpoint stays, for the periods' check
    spark.ui.enabled: "false"
streams:
  {STREAM}:
    version: v1
    probation: {{min_batches: 1, window: 3 minutes}}
    spec: {{checkpoint_location: {root}/checkpoints/{STREAM}}}
    versions:
      v1: {{application: events_etl, application_args: {args}}}
      v2: {{application: events_etl_v2, application_args: {args}}}
      v3: {{application: events_etl_v2, application_args: {args}}}
""")
    return str(path)


def _want_version(root: Path, version: str) -> None:
    """Edit the desired-state file as a platform team does before its upgrade window."""
    path = root / "desired_state.yaml"
    text = path.read_text()
    assert text.count("    version: v1\n") == 1, text
    path.write_text(text.replace("    version: v1\n", f"    version: {version}\n"))


@pytest.fixture(scope="module")
def e2e_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="module")
def airflow_stack_options(e2e_root: Path) -> StackOptions:
    dags = e2e_root / "dags"
    dags.mkdir()
    (dags / "e2e_deploy.py").write_text(DEPLOY_DAG)
    (dags / "e2e_supervisor.py").write_text(SUPERVISOR_DAG)
    (dags / "e2e_raced_stop.py").write_text(RACE_DAG)
    (e2e_root / "race").mkdir()
    (dags / "e2e_periods.py").write_text(PERIODS_DAG)
    shutil.copy(REPO / "dags" / "stream_operations.py", dags / "stream_operations.py")  # the real example DAG
    desired = _desired_state(e2e_root)
    (e2e_root / "spec.json").write_text(json.dumps(load_desired_state(desired).target(STREAM).spec.to_dict()))
    return StackOptions(dags_folder=str(dags), env={
        "AIRFLOW_STREAMING_DESIRED_STATE": desired,
        "E2E_PERIODS_SPEC": str(e2e_root / "spec.json"),
        "E2E_PERIODS_OUT": str(e2e_root / "periods.jsonl"),
        "E2E_RACE_MARKS": str(e2e_root / "race"),
        "AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE": "True",
        "AIRFLOW__AIRFLOW_STREAMING__LIFECYCLE_POLL_INTERVAL": "1",
        # The upgrade-window DAG (copied in at step (e)) fires every minute instead of Sundays 03:00.
        "AIRFLOW_STREAMING_UPGRADE_CRON": "* * * * *",
    })


class Feed:
    """Writes event files into the stream's input (a background thread between ``start`` and ``stop``)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.batches: list[Any] = []
        self.index = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def write(self, count: int, files: int = 1) -> None:
        self.batches.append(generate_events(self.directory, count=count, files=files, run=f"f{self.index}",
                                            file_start_index=self.index))
        self.index += files

    def start(self, every_s: float = 2.0) -> None:
        def loop() -> None:
            while not self._stop.wait(every_s) and self.index < 1000:  # bounded
                self.write(20)

        self._thread = threading.Thread(target=loop, name="e2e-feeder", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    @property
    def event_ids(self) -> set[str]:
        return {i for b in self.batches for i in b.event_ids}


class ProgressLog:
    """Keeps every progress report the stream's status document shows (polled in a background thread):
    the counts the core needs for batches whose driver is gone (the status document holds the current
    driver's recent reports only)."""

    def __init__(self, hook: Any):
        self.hook = hook
        self.reports: dict[tuple[Any, Any], dict[str, Any]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="e2e-progress", daemon=True)
        self._thread.start()

    def poll(self) -> None:
        try:
            doc = self.hook.status()
        except Exception:  # noqa: BLE001 - a status file being replaced: read it at the next poll
            return
        for query in doc.queries if doc is not None else []:
            for report in query.recent_progress:
                self.reports[(report.get("runId"), report.get("batchId"))] = report

    def _loop(self) -> None:
        while not self._stop.wait(0.5):
            self.poll()

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join(10)
        self.poll()
        return list(self.reports.values())


def _recorded_periods(root: Path) -> list[dict[str, Any]]:
    path = root / "periods.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def stream(e2e_root: Path, airflow_stack: AirflowStack) -> Iterator[dict[str, Any]]:
    """The stream's spec, hook and feeder; whatever driver the DAGs start is killed by pid at the end."""
    spec = load_desired_state(str(e2e_root / "desired_state.yaml")).target(STREAM).spec
    registry = StreamRegistry(e2e_root)
    hook = registry.hook(spec)
    feed = Feed(str(e2e_root / "input"))
    progress = ProgressLog(hook)
    try:
        yield {"spec": spec, "hook": hook, "feed": feed, "progress": progress}
    finally:
        progress.stop()
        feed.stop()
        registry.kill_all()


def _tis(stack: AirflowStack, dag_id: str, run_id: str) -> dict[str, dict[str, Any]]:
    body = stack.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    return {ti["task_id"]: ti for ti in body["task_instances"]}


class Watch:
    """Polls a DAG run's task instances (as the UI's grid does) and keeps each task's state sequence."""

    def __init__(self, stack: AirflowStack, dag_id: str, run_id: str):
        self.stack, self.dag_id, self.run_id = stack, dag_id, run_id
        self.states: dict[str, list[str]] = {}
        self.triggers: dict[str, set[str]] = {}
        self.last: dict[str, dict[str, Any]] = {}

    def poll(self) -> dict[str, dict[str, Any]]:
        self.stack.check_alive()
        self.last = _tis(self.stack, self.dag_id, self.run_id)
        for task, ti in self.last.items():
            seq = self.states.setdefault(task, [])
            state = ti.get("state") or "none"
            if not seq or seq[-1] != state:
                seq.append(state)
            if ti.get("trigger"):
                self.triggers.setdefault(task, set()).add(ti["trigger"]["classpath"])
        return self.last

    def until(self, task: str, states: tuple[str, ...], timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ti = self.poll().get(task) or {}
            if ti.get("state") in states:
                return ti
            if ti.get("state") in ("failed", "upstream_failed") and ti.get("state") not in states:
                raise AssertionError(f"{self.dag_id}.{task} {ti.get('state')}: {self.states}\n"
                                     f"{self.task_log(task)[-4000:]}")
            time.sleep(0.5)
        raise TimeoutError(f"{self.dag_id}.{task} not in {states} after {timeout:.0f}s: {self.states}")

    def task_log(self, task: str, try_number: int | None = None) -> str:
        """The task's log through the REST API (what the UI's log view shows), as one text: of ``try_number``,
        or of every try so far (``None``).

        Airflow 3.3's defer race (apache/airflow#72716, docs/upgrades.md) can fail a deferred try and retry
        it; that path records no TaskInstanceHistory row for the failed try, so the API answers 404
        "TaskInstance not found" for its log. Such a try's log is then read from its file, where the
        api-server's own log handler would have read it, and marked as such."""
        if try_number is None:
            ti = self.stack.api("GET", f"/api/v2/dags/{self.dag_id}/dagRuns/{self.run_id}/taskInstances/{task}")
            return "\n".join(self.task_log(task, n) for n in range(1, int(ti.get("try_number") or 1) + 1))
        resp = self.stack.api("GET", f"/api/v2/dags/{self.dag_id}/dagRuns/{self.run_id}/taskInstances/{task}/logs/"
                              f"{try_number}?full_content=true", headers={"Accept": "application/json"}, expect=None)
        if resp.status_code == 404:
            path = (self.stack.home / "logs" / f"dag_id={self.dag_id}" / f"run_id={self.run_id}" / f"task_id={task}"
                    / f"attempt={try_number}.log")
            if path.is_file():
                lines = [_event_of(line) for line in path.read_text(errors="replace").splitlines()]
                return f"(try {try_number}: no TaskInstanceHistory row, read from {path.name})\n" + "\n".join(lines)
        if resp.status_code != 200:
            return f"(log: {resp.status_code} {resp.text[:300]})"
        lines = []
        for item in resp.json().get("content", []):
            lines.append(item if isinstance(item, str) else " ".join(
                str(item.get(k)) for k in ("event", "logger", "error_detail") if item.get(k)))
        return "\n".join(lines)

    def xcom(self, task: str) -> Any:
        body = self.stack.api("GET", f"/api/v2/dags/{self.dag_id}/dagRuns/{self.run_id}/taskInstances/{task}/"
                              "xcomEntries/return_value?deserialize=true&stringify=false")
        value = body["value"]
        return json.loads(value) if isinstance(value, str) and value[:1] in "{[" else value


def _event_of(line: str) -> str:
    """A task log file's line (structured JSON, one event per line) as the API's ``event`` text."""
    try:
        item = json.loads(line)
    except ValueError:
        return line
    return str(item.get("event", "")) if isinstance(item, dict) else line


def _lock(hook: Any) -> dict[str, Any] | None:
    path = Path(hook.paths.root, "lifecycle.lock")
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _history(hook: Any) -> list[dict[str, Any]]:
    return json.loads(Path(hook.paths.root, "history.json").read_text())


def test_lifecycle_through_the_rest_api_on_real_airflow_services(airflow_stack: AirflowStack,
                                                                  stream: dict[str, Any], e2e_root: Path):
    hook, feed, spec = stream["hook"], stream["feed"], stream["spec"]
    started = time.monotonic()
    marks: dict[str, float] = {}
    feed.write(300, files=3)
    for dag_id in ("e2e_deploy", "stream_operations", "e2e_supervisor", "e2e_raced_stop", "e2e_periods"):
        airflow_stack.wait_for_dag(dag_id)
    marks["dags_parsed"] = time.monotonic() - started

    # (a) deploy: the deploy task defers (waiting for the first progress) to the real triggerer.
    run_id = airflow_stack.trigger("e2e_deploy")
    deploy = Watch(airflow_stack, "e2e_deploy", run_id)
    ti = deploy.until("deploy", ("deferred",), 240)
    assert ti["trigger"]["classpath"] == LIFECYCLE_TRIGGER, ti
    first_job = wait_for(lambda: (deploy.poll()["deploy"].get("triggerer_job") or {}).get("id"), 30,
                         "the triggerer job running the deploy's trigger", interval=0.2)
    lock = _lock(hook)
    assert lock and lock["deferred"] and lock["pid"] == 0, lock  # no worker process holds the stream's lock
    marks["deploy_deferred"] = time.monotonic() - started

    # (b) restart the triggerer while the deploy is deferred.
    triggerer_log = airflow_stack.logs / "triggerer.log"
    offset = triggerer_log.stat().st_size
    old_pid, new_pid = airflow_stack.restart("triggerer")
    assert deploy.poll()["deploy"]["state"] == "deferred"  # the task did not notice: still deferred
    jobs = set()
    deadline = time.monotonic() + 300
    while (ti := deploy.poll()["deploy"])["state"] == "deferred" and time.monotonic() < deadline:
        job = ti.get("triggerer_job") or ti.get("queued_by_job") or {}
        jobs.add((job.get("id"), job.get("state")))
        time.sleep(0.3)
    print(f"triggerer jobs seen serving the deferred deploy after the restart: {jobs}", file=sys.stderr)
    ti = deploy.until("deploy", ("success",), 300)
    marks["deploy_done"] = time.monotonic() - started
    after_restart = triggerer_log.read_bytes()[offset:].decode(errors="replace")
    # The new triggerer ran the trigger: the task instance named a triggerer job other than the first one
    # while deferred, or the new triggerer's log shows the trigger starting.
    served_by_new = {j for j, _ in jobs if j is not None and j != first_job}
    started_in_log = [line for line in after_restart.splitlines() if "trigger" in line and "starting" in line]
    print(f"first triggerer job {first_job}, seen after the restart {jobs}; new triggerer log: {started_in_log}",
          file=sys.stderr)
    assert served_by_new or started_in_log, after_restart[-3000:]
    assert deploy.states["deploy"][-1] == "success" and "deferred" in deploy.states["deploy"], deploy.states
    deploy_log = deploy.task_log("deploy")
    assert "waiting in the triggerer for ready" in deploy_log, deploy_log[-3000:]
    identity = deploy.xcom("deploy")
    record = hook.driver_record()
    assert identity["run_id"] == record.run_id and hook.alive(record)
    assert [(h["action"], h["outcome"]) for h in _history(hook)] == [("deploy", "SUCCEEDED")]
    assert len(list(Path(hook.paths.root, "logs").glob("*.log"))) == 1  # one driver submitted, nothing redone

    # (a) the health sensor watches in the triggerer (served by the restarted one) and succeeds.
    ti = deploy.until("health", ("deferred",), 120)
    assert ti["trigger"]["classpath"] == HEALTH_TRIGGER, ti
    assert airflow_stack.wait_for_run("e2e_deploy", run_id, timeout=180) == "success"
    deploy.poll()
    assert deploy.states["health"][-1] == "success" and "deferred" in deploy.states["health"], deploy.states
    marks["deploy_run_done"] = time.monotonic() - started
    print(f"deploy DAG run: {deploy.states}; triggerer restarted pid {old_pid} -> {new_pid}", file=sys.stderr)

    # (c) upgrade to v2 with the real operations DAG, triggered with a conf as the UI's form does.
    feed.start()
    op_run = airflow_stack.trigger("stream_operations", conf={"stream": STREAM, "action": "upgrade", "version": "v2"})
    upgrade = Watch(airflow_stack, "stream_operations", op_run)
    upgrade.until("operate", ("deferred",), 120)
    assert upgrade.last["operate"]["trigger"]["classpath"] == LIFECYCLE_TRIGGER
    assert airflow_stack.wait_for_run("stream_operations", op_run, timeout=420) == "success", \
        upgrade.task_log("operate")[-4000:]
    upgrade.poll()
    marks["upgrade_done"] = time.monotonic() - started
    log = upgrade.task_log("operate")
    record = json.loads(Path(hook.paths.root, "lifecycle.json").read_text())
    assert record["action"] == "upgrade" and record["to_spec"]["version"] == "v2" and record["step"] == "SUCCEEDED", record
    verdict = record["verdict"]
    assert verdict and str(verdict).startswith("COMPATIBLE"), record
    steps = [s["step"] for s in record["steps"] if s["step"] != "RESUMED"]
    assert steps == ["PLANNED", "CHECKED", "STOPPING", "STOPPED", "SNAPSHOTTED", "STARTING", "PROBATION",
                     "SUCCEEDED"], steps
    for text in ("waiting in the triggerer for file", "waiting in the triggerer for probation", "CHECKED",
                 verdict, "SUCCEEDED"):
        assert text in log, f"{text!r} not in the task log:\n{log[-4000:]}"
    assert [(h["action"], h["to_version"], h["outcome"]) for h in _history(hook)][-1] == ("upgrade", "v2", "SUCCEEDED")
    assert hook.deployed()["spec"]["version"] == "v2"
    print(f"upgrade task states {upgrade.states}, verdict {verdict}", file=sys.stderr)

    # (d) the driver dies (SIGKILL to its process group); a supervisor DAG run restarts it.
    killed = hook.driver_record()
    wait_for(lambda: (d := hook.status()) is not None and d.run_id == killed.run_id and d.totals["batches"] >= 1,
             120, "v2 processing batches")
    os.killpg(killed.submit_pid, signal.SIGKILL)
    wait_for(lambda: hook.health().state.value == "FAILED", 60, "the FAILED verdict")
    sup_run = airflow_stack.trigger("e2e_supervisor")
    assert airflow_stack.wait_for_run("e2e_supervisor", sup_run, timeout=300) == "success"
    supervisor = Watch(airflow_stack, "e2e_supervisor", sup_run)
    result = supervisor.xcom("supervise")
    assert result[0]["action"] == "RESTARTED" and result[0]["stream"] == STREAM, result
    restarted = hook.driver_record()
    assert restarted.run_id != killed.run_id and restarted.version == "v2" and hook.alive(restarted)
    wait_for(lambda: (d := hook.status()) is not None and d.run_id == restarted.run_id and d.state == "RUNNING", 180,
             "the restarted driver running")
    marks["supervisor_done"] = time.monotonic() - started

    # (e) the upgrade window fires on its schedule: the desired state now wants v3 (v2's code, a new
    # release label); the real window DAG arrives in the DAG folder and its first scheduled run upgrades.
    _want_version(e2e_root, "v3")
    shutil.copy(REPO / "dags" / "stream_upgrade_window.py", e2e_root / "dags" / "stream_upgrade_window.py")
    airflow_stack.wait_for_dag("stream_upgrade_window", timeout=180)
    window_runs = "/api/v2/dags/stream_upgrade_window/dagRuns"
    window = wait_for(lambda: (airflow_stack.api("GET", window_runs).get("dag_runs") or [None])[0], 180,
                      "the upgrade window's first scheduled run", interval=2)
    assert window["run_type"] == "scheduled", window
    try:
        state = airflow_stack.wait_for_run("stream_upgrade_window", window["dag_run_id"], timeout=480)
    finally:  # no further window runs while the test stops the stream
        airflow_stack.api("PATCH", "/api/v2/dags/stream_upgrade_window", json_body={"is_paused": True})
    scheduled = Watch(airflow_stack, "stream_upgrade_window", window["dag_run_id"])
    assert state == "success", scheduled.task_log("summary")[-3000:]
    summary = scheduled.xcom("summary")
    assert [(r["stream"], r["from"], r["to"], r["outcome"]) for r in summary] == [(STREAM, "v2", "v3", "SUCCEEDED")], \
        summary
    assert hook.deployed()["spec"]["version"] == "v3"
    marks["scheduled_window_done"] = time.monotonic() - started
    print(f"scheduled upgrade window {window['dag_run_id']}: {summary}", file=sys.stderr)

    # Several periods of batches:6 must close during the test (three at least, checked below). A busy machine runs
    # fewer, fuller batches (one full run had 17 batches, two periods): the feeder goes on until the checkpoint
    # holds 18 commits.
    commits = e2e_root / "checkpoints" / STREAM / "commits"
    wait_for(lambda: sum(1 for p in commits.iterdir() if p.name.isdigit()) >= 18, 300, "18 committed batches",
             interval=1)
    # Everything fed is in the sink once; then the operations DAG stops the stream gracefully.
    feed.stop()
    fed = feed.event_ids
    wait_for(lambda: set(read_etl_output(str(e2e_root / "output")).event_ids) >= fed, 240, "every event in the sink")
    # The graceful stop meets Airflow's defer race on purpose (RACE_DAG) and is retried to success.
    stop_run = airflow_stack.trigger("e2e_raced_stop")
    raced = Watch(airflow_stack, "e2e_raced_stop", stop_run)
    state = airflow_stack.wait_for_run("e2e_raced_stop", stop_run, timeout=300)
    ti = raced.poll()["operate"]
    mismatches = airflow_stack.api("GET", "/api/v2/eventLogs?dag_id=e2e_raced_stop&event=state%20mismatch")
    assert state == "success", (ti, mismatches, raced.task_log("operate", ti["try_number"])[-4000:])
    assert mismatches["total_entries"] >= 1 and ti["try_number"] == 2, (ti, mismatches)  # the race did happen
    assert {p.name for p in (e2e_root / "race").iterdir()} == {"deferred", "resumed"}
    report = raced.xcom("operate")
    assert report["graceful"] and report["clean"], report
    assert "taking over the lifecycle lock" in raced.task_log("operate", 2), raced.task_log("operate", 2)[-3000:]
    print(f"raced stop: {raced.states}; {mismatches['event_logs'][0].get('extra', '')[:300]}", file=sys.stderr)
    assert hook.running_driver() is None and _lock(hook) is None
    output = read_etl_output(str(e2e_root / "output"))
    assert output.duplicates == {}, f"{len(output.duplicates)} duplicated events"
    assert set(output.event_ids) == fed and output.rows == len(fed), (len(fed), output.rows)
    # The supervisor's restart is recorded as a recovery, like every other change of the stream.
    assert [(h["action"], h["to_version"], h["outcome"]) for h in _history(hook)] == [
        ("deploy", "v1", "SUCCEEDED"), ("upgrade", "v2", "SUCCEEDED"), ("recover", "v2", "SUCCEEDED"),
        ("upgrade", "v3", "SUCCEEDED"), ("stop", "v3", "SUCCEEDED")]
    marks["stopped"] = time.monotonic() - started

    # The completeness events: one e2e_periods run per period the checkpoint shows complete, in order, with
    # the core's batch ids and counts - across the triggerer restart, both upgrades and the kill.
    doc = hook.status()
    location = sorted({hook._normalized_location(c) for c in (doc.checkpoints() if doc is not None else [])}
                      or [hook.spec.checkpoint_location])[0]
    reports = stream["progress"].stop()
    read = read_committed(hook.checkpoint_storage, storage_path(location).rstrip("/"), last=100_000, progress=reports)
    assert read.batches and read.batches[0].batch_id == 0 and not read.skipped, (read.batches[:3], read.skipped)
    assert {b.batch_id for b in read.batches if b.committed} == {b.batch_id for b in read.batches}  # stopped clean
    rule = parse_rule({**PERIOD_RULE, "max_events": 10_000})
    expected = closed_periods(rule, read.batches, None)
    assert len(expected) >= 3, (len(read.batches), expected)  # several periods closed during the test
    # A count is unknown to the core only where no report of a batch ever reached the status document (a driver
    # killed between a batch's commit and its report): the watch cannot know it either.
    want = [e.identity for e in expected]
    wait_for(lambda: len(_recorded_periods(e2e_root)) >= len(want), 120, f"the e2e_periods run of {want[-1]}",
             interval=1)
    time.sleep(6)  # three polls of the watcher: nothing more comes
    records = sorted(_recorded_periods(e2e_root), key=lambda r: datetime.fromisoformat(r["timestamp"]))
    payloads = [r["extra"]["payload"] for r in records]
    got = [p["identity"] for p in payloads]
    print(f"completeness: {len(read.batches)} batches, periods {want}; runs "
          f"{[(r['run_id'], r['extra']['payload']) for r in records]}", file=sys.stderr)
    assert got == want, (got, want)  # once each, none missing, none for an uncommitted batch, in order
    assert len({r["run_id"] for r in records}) == len(records)  # one event per run
    dag_runs = airflow_stack.api("GET", "/api/v2/dags/e2e_periods/dagRuns?limit=1000")["dag_runs"]
    assert sorted(r["dag_run_id"] for r in dag_runs) == sorted(r["run_id"] for r in records), dag_runs
    assert {(r["run_type"], r["state"]) for r in dag_runs} == {("asset_triggered", "success")}, dag_runs
    versions = [p["version"] for p in payloads]
    assert versions == sorted(versions) and set(versions) <= {"v1", "v2", "v3"}, versions
    # Which driver run (Spark's runId) processed each batch: a period may span an upgrade or a restart.
    run_of = {r.get("batchId"): r.get("runId") for r in reports}
    spanning = []
    for payload, event in zip(payloads, expected):
        assert payload["stream"] == STREAM, payload
        assert (payload["batch_id"], payload["batches"], payload["first_batch_id"], payload["last_batch_id"]) == \
            (event.batch_id, event.batches, event.key.start, event.key.end - 1), (payload, event)
        runs = sorted({str(run_of.get(b)) for b in range(event.key.start, event.key.end)})
        if len(runs) > 1:
            spanning.append((payload["identity"], event.input_rows, runs))
        # Every count the core knows is the event's, also for a period whose batches ran under two drivers and a
        # trigger recreated in between (a triggerer restart): each starting driver carries the counts of the
        # status document it replaces (earlier_progress). The core's is unknown only where no report of a batch
        # reached the status document (a driver killed between a commit and its report).
        assert event.input_rows is None or (payload["input_rows"], payload["late_rows"]) == \
            (event.input_rows, event.late_rows), (payload, event, runs)
    print(f"completeness: payload versions {versions}; periods spanning driver runs (period, count, runs): "
          f"{spanning}", file=sys.stderr)
    marks["periods_done"] = time.monotonic() - started
    print(f"E2E on real Airflow: {len(fed)} events in, {output.rows} out, no duplicates; "
          f"{ {k: round(v) for k, v in marks.items()} } s; stack {airflow_stack.timings}", file=sys.stderr)
