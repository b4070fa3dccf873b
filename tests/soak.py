"""Soak trials: kill -9 of the driver at named points under supervision, and the lifecycle task killed at
every named step of an upgrade - each trial followed by the recovery, the whole run checked exactly once.

Kill points are deterministic failpoints (``airflow_streaming.faults``), not sleeps:

- ``driver.batch`` ``before_write`` (batch N planned: its offsets are logged, nothing written),
  ``after_write`` (batch N's output written, not committed), ``driver.progress`` ``committed`` (batch N
  committed): the driver's whole process group is SIGKILLed there (``kill_group``);
- ``runner.step`` ``upgrade:<STEP>``: the process running the lifecycle action (the Airflow task's code
  path, ``python -m airflow_streaming.lifecycle``) SIGKILLs itself right after recording ``<STEP>``.

Used by ``tests/integration/test_soak.py`` (a few trials in the suite) and ``scripts/soak.sh`` (the long
run whose figures are in RELIABILITY.md).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from airflow_streaming import faults
from airflow_streaming.lifecycle.operations import deploy_stream, stop_stream
from airflow_streaming.supervision.policy import RestartPolicy
from airflow_streaming.lifecycle.supervisor import supervise
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from streams import wait_for

PROJECT = str(Path(__file__).resolve().parents[1])
DRIVER_KILL_POINTS = ("before_write", "after_write", "committed")
UPGRADE_STEPS = ("PLANNED", "CHECKED", "STOPPING", "STOPPED", "SNAPSHOTTED", "STARTING", "PROBATION")
ROLLBACK_STEPS = ("ROLLING_BACK", "RESTORED", "RESTARTING_OLD")
#: Not a recorded step: the task killed right after the new driver's submission, before its driver record
#: (failpoint ``hook.submitted``; the record says STARTING). The narrowest point of an upgrade (stop 30's CI):
#: the resumed task must adopt that driver - not submit a second one, not lose sight of it.
SUBMITTED = "SUBMITTED"


class DriverMonitor:
    """Samples the run ids of live driver processes (spark-submit JVM, Python driver) of one stream."""

    def __init__(self, stream: str):
        self.stream = stream
        self.max_alive = 0
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def runs_alive(self) -> set[str]:
        runs = set()
        for proc in psutil.process_iter(["cmdline", "status"]):
            try:
                cmd = proc.info["cmdline"] or []
                if proc.info["status"] == psutil.STATUS_ZOMBIE or "--run-id" not in cmd:
                    continue
            except psutil.Error:
                continue
            if "--stream" in cmd and cmd[cmd.index("--stream") + 1] == self.stream and "--standby" not in cmd:
                runs.add(cmd[cmd.index("--run-id") + 1])
        return runs

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            runs = self.runs_alive()
            self.seen |= runs
            self.max_alive = max(self.max_alive, len(runs))

    def __enter__(self) -> DriverMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class EtlFeeder:
    """Writes a file of ``per_file`` events every ``interval`` seconds (a thread); remembers every batch."""

    def __init__(self, directory: str, per_file: int = 20, interval: float = 0.7, run: str = "soak"):
        self.directory, self.per_file, self.interval, self.run = directory, per_file, interval, run
        self.fed: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def feed(self) -> None:
        index = len(self.fed)
        self.fed.append(generate_events(self.directory, count=self.per_file, files=1, run=f"{self.run}{index}",
                                        file_start_index=index, malformed_every=0))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.feed()

    def start(self) -> EtlFeeder:
        self.feed()
        self._thread.start()
        return self

    def stop(self) -> set[str]:
        self._stop.set()
        self._thread.join(timeout=30)
        return {i for batch in self.fed for i in batch.event_ids}


def write_faults(path: Path, entries: list[dict[str, Any]]) -> None:
    path.write_text(json.dumps(entries))
    now = time.time_ns()
    os.utime(path, ns=(now, now))


def exactly_once(output_dir: str, expected: set[str]) -> dict[str, Any]:
    output = read_etl_output(output_dir)
    found = set(output.event_ids)
    return {"expected": len(expected), "rows": output.rows, "duplicates": len(output.duplicates),
            "missing": len(expected - found), "unexpected": len(found - expected),
            "exactly_once": output.duplicates == {} and found == expected}


@dataclass
class Trial:
    """One injected fault and what followed."""

    trial: int
    fault: str
    outcome: str = "?"
    recovery_s: float | None = None
    detail: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- driver kills under supervision


def driver_kill_trials(streams: Any, trials: int, seed: int, fault_file: Path) -> dict[str, Any]:
    """``trials`` SIGKILLs of the whole driver at random named points, each recovered by supervisor passes."""
    rng = random.Random(seed)
    spec = streams.etl_spec(name="soakd", trigger_interval=1)
    hook = streams.hook(spec)
    feeder = EtlFeeder(streams.path("input", "soakd")).start()
    deploy_stream(spec)
    policy = RestartPolicy(max_attempts=trials + 5, backoff_initial_s=0, backoff_max_s=0, validity_interval_s=3600)
    results: list[Trial] = []
    with DriverMonitor("soakd") as monitor:
        for i in range(trials):
            point = rng.choice(DRIVER_KILL_POINTS)
            record = hook.driver_record()
            ahead = rng.randint(2, 4)
            armed = [0]

            def arm() -> int:
                """Arm the kill ``ahead`` batches after the current one (again if the stream got past it)."""
                doc = hook.status()
                last = doc.last_batch_id() if doc is not None and doc.last_batch_id() is not None else -1
                target = last + ahead
                where = "committed" if point == "committed" else point
                armed[0] += 1
                write_faults(fault_file, [{"point": "driver.progress" if point == "committed" else "driver.batch",
                                           "match": f"batch={target}:{where};", "action": "kill_group",
                                           "once": str(fault_file.parent / f"driver-kill-{seed}-{i}-{armed[0]}")}])
                return target

            batch = arm()
            deadline = time.monotonic() + 180
            while not hook.target_of(record).state(record).gone:
                doc = hook.status()
                if doc is not None and doc.run_id == record.run_id and (doc.last_batch_id() or -1) > batch + 1:
                    batch = arm()  # the batch went by before the fault file was read: aim again
                assert time.monotonic() < deadline, f"the kill at batch {batch} {point} never happened"
                time.sleep(0.2)
            trial = Trial(i + 1, f"SIGKILL of the driver's process group at batch {batch} {point}")
            killed_at = time.time()
            write_faults(fault_file, [])
            position = hook.batch_position()
            trial.detail = {"batch": batch, "point": point, "planned": position.last_planned,
                            "committed": position.last_committed, "replays": not position.clean}
            restarted = None
            deadline = time.monotonic() + 120
            while restarted is None and time.monotonic() < deadline:
                result = supervise(hook, policy, lambda e: None)
                if result.action == "RESTARTED":
                    restarted = result.new_run_id
                elif result.action in ("GAVE_UP", "RESTART_FAILED"):
                    trial.outcome = f"not recovered: {result.action} {result.reason}"
                    break
                else:
                    time.sleep(1)
            if restarted is None:
                trial.outcome = trial.outcome if trial.outcome != "?" else "not recovered in 120 s"
                results.append(trial)
                break
            wait_for(lambda: (d := hook.status()) is not None and d.run_id == restarted and d.ready
                     and d.last_batch_id() is not None, 180, f"run {restarted} makes progress")
            trial.recovery_s = round(time.time() - killed_at, 1)
            first = hook.status().queries[0].recent_progress[0]["batchId"]
            trial.detail["resumed_at_batch"] = first
            trial.outcome = "recovered"
            results.append(trial)
        expected = feeder.stop()
        wait_for(lambda: set(read_etl_output(streams.path("output", "soakd")).event_ids) >= expected, 180,
                 "every event fed during the soak in the output")
        stop_stream(spec)
    return {"trials": [asdict(t) for t in results], "exactly_once": exactly_once(streams.path("output", "soakd"), expected),
            "max_drivers_alive": monitor.max_alive, "runs": len(monitor.seen)}


# --------------------------------------------------------------------------- the lifecycle task killed at a step


def desired_state_file(streams: Any, name: str, probation_batches: int = 2) -> str:
    args = ["--input", streams.path("input", name), "--output", streams.path("output", name),
            "--quarantine", streams.path("quarantine", name)]
    broken_output = Path(streams.path("broken-output"))
    broken_output.parent.mkdir(parents=True, exist_ok=True)
    broken_output.write_text("a file where v3 expects a directory: its first batch fails")
    doc = {
        "defaults": {"control_location": streams.path("control"), "master": "local[2]", "trigger_interval": 1,
                     "heartbeat_interval": 1, "stop_timeout": 60, "startup_timeout": 180,
                     "spark_conf": {"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false"}},
        "streams": {name: {
            "version": "v1", "probation": {"min_batches": probation_batches, "window": "90 seconds"}, "allow_warnings": True,
            "spec": {"checkpoint_location": streams.path("checkpoints", name)},
            "versions": {"v1": {"application": "events_etl", "application_args": args},
                         "v2": {"application": "events_etl_v2", "application_args": args},
                         "v3": {"application": "events_etl", "application_args": [
                             "--input", streams.path("input", name), "--output", str(broken_output / "x"),
                             "--quarantine", streams.path("quarantine", name)]}}}},
    }
    path = Path(streams.path(f"{name}-desired.yaml"))
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def run_task(desired: str, stream: str, action: str, version: str | None, env: dict[str, str],
             timeout: float = 900) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "airflow_streaming.lifecycle", "--desired-state", desired, "--stream", stream,
           "--action", action, *(["--version", version] if version else [])]
    return subprocess.run(cmd, env=env, cwd=PROJECT, capture_output=True, text=True, timeout=timeout)


def task_kill_trials(streams: Any, steps: list[str], fault_file: Path) -> dict[str, Any]:
    """For each step: an upgrade whose task is SIGKILLed right after recording it, then run again."""
    name = "soaku"
    desired = desired_state_file(streams, name)
    env = {**os.environ, faults.ENV: str(fault_file), "PYTHONPATH": PROJECT}
    hook = streams.hook(streams.etl_spec(name=name))
    feeder = EtlFeeder(streams.path("input", name)).start()
    results: list[Trial] = []
    with DriverMonitor(name) as monitor:
        deployed = run_task(desired, name, "deploy", "v1", env)
        assert deployed.returncode == 0, deployed.stderr[-3000:]
        current = "v1"
        for i, step in enumerate(steps):
            target = "v3" if step in ROLLBACK_STEPS else ("v2" if current == "v1" else "v1")
            trial = Trial(i + 1, f"SIGKILL of the upgrade task {current}->{target} right after recording {step}")
            once = str(fault_file.parent / f"task-kill-{i}-{step}")
            write_faults(fault_file, [{"point": "hook.submitted", "action": "kill", "once": once}
                                      if step == SUBMITTED else
                                      {"point": "runner.step", "match": f"upgrade:{step};", "action": "kill", "once": once}])
            killed = run_task(desired, name, "upgrade", target, env)
            write_faults(fault_file, [])
            record = json.loads(Path(hook.paths.root, "lifecycle.json").read_text())
            trial.detail = {"from": current, "to": target, "killed_returncode": killed.returncode,
                            "recorded_step_at_kill": record["step"], "action_id": record["id"]}
            at_kill = "STARTING" if step == SUBMITTED else step
            if step == SUBMITTED:  # after the submission, before the record: the new run lives, unrecorded
                recorded = hook.driver_record()
                trial.detail.update(submitted_run=record.get("new_run_id"),
                                    recorded_run=recorded.run_id if recorded else None,
                                    submitted_alive=bool(record.get("new_run_id")
                                                         and hook.processes_of_run(record["new_run_id"])))
            if killed.returncode != -signal.SIGKILL or record["step"] != at_kill or (
                    step == SUBMITTED and (not trial.detail["submitted_alive"]
                                           or trial.detail["recorded_run"] == trial.detail["submitted_run"])):
                trial.outcome = f"the kill did not happen at {step} (exit {killed.returncode}, step {record['step']})"
                results.append(trial)
                continue
            started = time.time()
            resumed = run_task(desired, name, "upgrade", target, env)
            final = json.loads(Path(hook.paths.root, "lifecycle.json").read_text())
            trial.recovery_s = round(time.time() - started, 1)
            expected = "ROLLED_BACK" if target == "v3" else "SUCCEEDED"
            trial.detail.update(final_step=final["step"], resumed_returncode=resumed.returncode,
                                same_action=final["id"] == record["id"])
            ok = final["step"] == expected and final["id"] == record["id"] and \
                resumed.returncode == (1 if expected == "ROLLED_BACK" else 0)
            if step == SUBMITTED:  # adopted: the run submitted before the kill is the one recorded and running
                now_recorded = hook.driver_record()  # None: no driver recorded after the resume (not adopted)
                trial.detail.update(adopted=now_recorded is not None
                                    and final.get("new_run_id") == record.get("new_run_id") == now_recorded.run_id)
                ok = ok and trial.detail["adopted"]
            trial.outcome = f"resumed to {final['step']}" if ok else f"UNEXPECTED: {final['step']} " \
                f"(exit {resumed.returncode}: {resumed.stderr[-500:]})"
            if final["step"] == "SUCCEEDED":
                current = target
            results.append(trial)
        expected_ids = feeder.stop()
        wait_for(lambda: set(read_etl_output(streams.path("output", name)).event_ids) >= expected_ids, 180,
                 "every event fed during the soak in the output")
        stopped = run_task(desired, name, "stop", None, env)
        assert stopped.returncode == 0, stopped.stderr[-2000:]
    logs = sorted(p.name for p in Path(hook.paths.root, "logs").glob("*.log"))
    return {"trials": [asdict(t) for t in results],
            "exactly_once": exactly_once(streams.path("output", name), expected_ids),
            "max_drivers_alive": monitor.max_alive, "runs_seen": len(monitor.seen), "driver_logs": len(logs)}
