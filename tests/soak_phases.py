"""Every-phase soak (issue 20): ``kill -9`` at a random moment of every phase of a supervised stream's life,
not only while it runs - then supervision (and, where the supervisor reports an unfinished action, a person
running that action again, as the notification tells them) must bring the stream back.

Phases (each trial starts from a healthy stream and picks one, with a random delay into it):

- ``deploy_start``: a deploy task submits the driver; its processes are killed while it starts;
- ``supervisor_restart``: the driver is killed, a supervisor pass restarts it, and the new run is killed
  while it starts;
- ``supervisor_pass``: the driver is killed, and the supervising process itself is killed in the middle
  of its pass: at a random moment from its start, or right after it records a random step of its
  recovery (before the submission, after it, at its end: a failpoint, as that part takes well under a
  second);
- ``standby``: a warm upgrade prepares a standby driver, which is killed while it prepares (or after
  its promotion, when the delay outlasts it);
- ``gate``: a cold upgrade's compatibility gate (a child process with its own JVM) is killed;
- ``probation``: the new version's driver is killed during its probation;
- ``rollback``: an upgrade to a version whose first batch fails rolls back, and the old version's
  restarted driver is killed while the rollback waits for it;
- ``task``: the process running an upgrade (the Airflow task's code path) is killed with its children.

Checked all along: at most one driver that can commit (a standby counts once it is promoted); every
supervisor pass that sees the wanted stream proven gone acts or notifies (never a silent ``NOTHING``);
after every trial the stream runs and makes progress again; at the end the sink holds every fed event
exactly once. Drivers and tasks run as real processes (``python -m airflow_streaming.lifecycle``,
``tests/soak_pass.py``), so a kill is a real SIGKILL of a real process tree.
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

from soak import PROJECT, EtlFeeder, desired_state_file, exactly_once
from spark_jobs.outputs import read_etl_output
from streams import wait_for

PHASES = ("deploy_start", "supervisor_restart", "supervisor_pass", "standby", "gate", "probation", "rollback",
          "task")
#: Upper bound (seconds) of the random delay into each phase: about the phase's length on 2 cores.
DELAY_S = {"deploy_start": 9, "supervisor_restart": 9, "supervisor_pass": 3, "standby": 25, "gate": 12,
           "probation": 20, "rollback": 15, "task": 45}


@dataclass
class PhaseTrial:
    """One kill and what followed."""

    trial: int
    phase: str
    delay_s: float
    killed: str = ""
    outcome: str = "?"
    recovery_s: float | None = None
    passes: int = 0
    person_reran: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)


def _runs(proc_filter: Any = None) -> list[tuple[str, bool, psutil.Process]]:
    """``(run id, is a standby, process)`` of every live driver process (spark-submit JVM, Python driver)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            cmd = proc.info["cmdline"] or []
            if proc.info["status"] == psutil.STATUS_ZOMBIE or "--run-id" not in cmd or "--stream" not in cmd:
                continue
            if proc_filter is not None and not proc_filter(cmd):
                continue
            found.append((cmd[cmd.index("--run-id") + 1], "--standby" in cmd, proc))
        except (psutil.Error, IndexError):
            continue
    return found


class CommitterMonitor:
    """Samples the drivers of one stream that can commit: every run that is not a standby, and a standby
    run once it is the recorded driver (promoted). ``max_active`` must never exceed 1."""

    def __init__(self, stream: str, driver_json: Path):
        self.stream, self.driver_json = stream, driver_json
        self.max_active = 0
        self.worst: list[str] = []
        self.seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _recorded(self) -> str | None:
        try:
            return json.loads(self.driver_json.read_text()).get("run_id")
        except (OSError, ValueError):
            return None

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            runs = _runs(lambda cmd: cmd[cmd.index("--stream") + 1] == self.stream)
            recorded = self._recorded()
            active = {run for run, standby, _ in runs if not standby or run == recorded}
            self.seen |= {run for run, _, _ in runs}
            if len(active) > self.max_active:
                self.max_active, self.worst = len(active), sorted(active)

    def __enter__(self) -> CommitterMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def kill_tree(proc: psutil.Process, same_session_only: bool = False) -> list[int]:
    """SIGKILL ``proc`` and its descendants (those of its own session only, if asked: a task's detached
    drivers run in sessions of their own and outlive the task, as they do when a worker dies)."""
    try:
        session = os.getsid(proc.pid)
        victims = [proc] + [c for c in proc.children(recursive=True)
                            if not same_session_only or _sid(c.pid) == session]
    except (psutil.Error, ProcessLookupError):
        return []
    killed = []
    for victim in victims:
        try:
            victim.send_signal(signal.SIGKILL)
            killed.append(victim.pid)
        except psutil.Error:
            pass
    return killed


def _sid(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except OSError:
        return None


class PhaseSoak:
    """The stream, its desired-state files, the tasks and supervisor passes as processes, and the checks."""

    def __init__(self, streams: Any, seed: int, name: str = "soakp", log_dir: Path | None = None):
        self.rng = random.Random(seed)
        self.seed = seed
        self.name = name
        self.streams = streams
        self.cold = desired_state_file(streams, name, probation_batches=6)
        doc = yaml.safe_load(Path(self.cold).read_text())
        doc["streams"][name]["warm_start"] = True
        self.warm = str(Path(self.cold).with_name(f"{name}-desired-warm.yaml"))
        Path(self.warm).write_text(yaml.safe_dump(doc))
        self.hook = streams.hook(streams.etl_spec(name=name))
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([PROJECT, str(Path(PROJECT, "tests"))])}
        self.log_dir = log_dir or Path(streams.path("soak-logs"))
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.fault_file = self.log_dir / "faults.json"
        self.fault_file.write_text("[]")
        self.env[faults.ENV] = str(self.fault_file)  # the failpoints of the processes it starts
        self.violations: list[str] = []
        self._recover_kills = 0
        self.passes: list[dict[str, Any]] = []
        self._n = 0

    # ------------------------------------------------------------------ processes
    def _popen(self, cmd: list[str], tag: str) -> subprocess.Popen:
        self._n += 1
        out = open(self.log_dir / f"{self._n:03d}-{tag}.out", "w")  # noqa: SIM115 - the child keeps its own copy
        err = open(self.log_dir / f"{self._n:03d}-{tag}.err", "w")  # noqa: SIM115
        proc = subprocess.Popen(cmd, env=self.env, cwd=PROJECT, stdout=out, stderr=err, text=True)
        out.close()
        err.close()
        proc.out_path = Path(out.name)  # type: ignore[attr-defined]
        return proc

    def task(self, action: str, version: str | None = None, warm: bool = False) -> subprocess.Popen:
        cmd = [sys.executable, "-m", "airflow_streaming.lifecycle", "--desired-state", self.warm if warm else self.cold,
               "--stream", self.name, "--action", action, *(["--version", version] if version else []),
               "--owner", "soak"]
        return self._popen(cmd, f"{action}-{version or ''}")

    def run_task(self, action: str, version: str | None = None, timeout: float = 600) -> int:
        proc = self.task(action, version)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            kill_tree(psutil.Process(proc.pid), same_session_only=True)
            raise

    def pass_process(self) -> subprocess.Popen:
        cmd = [sys.executable, str(Path(PROJECT, "tests", "soak_pass.py")), "--desired-state", self.cold,
               "--stream", self.name]
        return self._popen(cmd, "pass")

    def supervisor_pass(self, trial: PhaseTrial) -> dict[str, Any]:
        proc = self.pass_process()
        try:
            proc.wait(300)
        except subprocess.TimeoutExpired:
            kill_tree(psutil.Process(proc.pid), same_session_only=True)
            raise
        out = proc.out_path.read_text().strip().splitlines()  # type: ignore[attr-defined]
        result = json.loads(out[-1]) if proc.returncode == 0 and out else {"action": "ERROR", "act": None,
                                                                            "observation": None, "events": [],
                                                                            "reason": f"exit {proc.returncode}"}
        self.passes.append({"trial": trial.trial, **result})
        trial.passes += 1
        trial.events += [e["kind"] for e in result["events"]]
        o = result.get("observation") or {}
        if (o.get("desired") == "RUNNING" and o.get("liveness") == "GONE" and o.get("status") != "STOPPED"
                and not o.get("gave_up") and result["action"] == "NOTHING"):
            self.violations.append(f"trial {trial.trial}: a silent NOTHING for a wanted stream that is gone: {result}")
        if result["action"] == "ERROR":
            self.violations.append(f"trial {trial.trial}: a supervisor pass failed: {result['reason']}")
        return result

    def kill_run(self, run_id: str | None) -> list[int]:
        """SIGKILL every process of the run (as the OOM killer or a lost node would end it)."""
        killed = []
        for run, _, proc in _runs():
            if run == run_id:
                try:
                    proc.send_signal(signal.SIGKILL)
                    killed.append(proc.pid)
                except psutil.Error:
                    pass
        return killed

    # ------------------------------------------------------------------ the stream's state
    def record(self) -> dict[str, Any]:
        try:
            return json.loads(Path(self.hook.paths.root, "lifecycle.json").read_text())
        except (OSError, ValueError):
            return {}

    def current_run(self) -> str | None:
        record = self.hook.driver_record()
        return record.run_id if record is not None else None

    def deployed_version(self) -> str:
        return ((self.hook.deployed() or {}).get("spec") or {}).get("version") or "v1"

    def running(self) -> bool:
        """The recorded run is alive, RUNNING and has completed a batch."""
        record = self.hook.driver_record()
        if record is None or not self.hook.processes_of_run(record.run_id):
            return False
        doc = self.hook.status()
        return (doc is not None and doc.run_id == record.run_id and doc.state == "RUNNING"
                and doc.last_batch_id() is not None)

    def wait_step(self, steps: tuple[str, ...], timeout: float, task: subprocess.Popen) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            record = self.record()
            if record.get("step") in steps:
                return record
            if task.poll() is not None:
                return None
            time.sleep(0.2)
        return None

    def wait_process(self, match: Any, timeout: float, task: subprocess.Popen | None = None) -> psutil.Process | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for proc in psutil.process_iter(["cmdline"]):
                try:
                    if match(proc.info["cmdline"] or []):
                        return proc
                except psutil.Error:
                    continue
            if task is not None and task.poll() is not None:
                return None
            time.sleep(0.1)
        return None

    # ------------------------------------------------------------------ recovery
    def recover(self, trial: PhaseTrial, killed_at: float, budget_s: float = 300) -> None:
        """Supervisor passes (every 2 s) until the stream runs again; an unfinished action the supervisor
        reports is run again, as its notification asks a person to."""
        deadline = time.monotonic() + budget_s
        while time.monotonic() < deadline:
            result = self.supervisor_pass(trial)
            o = result.get("observation") or {}
            if result["act"] == "REPORT" and o.get("action") == "ABANDONED_OTHER":
                record = self.record()
                action, version = record.get("action"), (record.get("to_spec") or {}).get("version")
                trial.person_reran.append(f"{action} {version} (reported at {record.get('step')})")
                code = self.run_task(action, version if action in ("upgrade", "deploy") else None)
                trial.detail.setdefault("reran_exit", []).append(code)
            if self.running() and result["action"] in ("NOTHING", "RECOVERED", "NOTIFIED"):
                trial.outcome = "running"
                trial.recovery_s = round(time.time() - killed_at, 1)
                return
            time.sleep(2)
        down = [p for p in self.passes if p["trial"] == trial.trial]
        trial.outcome = "NOT RUNNING after the recovery budget"
        if not any(p["events"] for p in down):
            trial.outcome += " and NO notification"

    # ------------------------------------------------------------------ the phases
    def trial(self, index: int, phase: str) -> PhaseTrial:
        delay = round(self.rng.uniform(0, DELAY_S[phase]), 2)
        trial = PhaseTrial(index, phase, delay)
        version = self.deployed_version()
        other = "v2" if version == "v1" else "v1"
        trial.detail["from_version"] = version
        getattr(self, f"_{phase}")(trial, other)
        killed_at = trial.detail.pop("killed_at", time.time())
        self.recover(trial, killed_at)
        trial.detail["to_version"] = self.deployed_version()
        return trial

    def _deploy_start(self, trial: PhaseTrial, other: str) -> None:
        assert self.run_task("stop") == 0, "the graceful stop before the deploy failed"
        before = self.current_run()
        task = self.task("deploy", trial.detail["from_version"])
        wait_for(lambda: self.current_run() not in (None, before) or task.poll() is not None, 120,
                 "the deploy's driver record")
        run = self.current_run()
        time.sleep(trial.delay_s)
        trial.detail["status_before_kill"] = self._status_of(run)
        trial.killed = f"run {run}: pids {self.kill_run(run)}"
        trial.detail["killed_at"] = time.time()
        trial.detail["task_exit"] = task.wait(600)

    def _supervisor_restart(self, trial: PhaseTrial, other: str) -> None:
        old = self.current_run()
        self.kill_run(old)
        wait_for(lambda: not self.hook.processes_of_run(old or ""), 60, "the killed driver's processes to exit")
        result = self.supervisor_pass(trial)
        run = result.get("new_run_id")
        trial.detail["first_pass"] = result["action"]
        time.sleep(trial.delay_s)
        trial.detail["status_before_kill"] = self._status_of(run)
        trial.killed = f"run {run} (restarted by the supervisor): pids {self.kill_run(run)}"
        trial.detail["killed_at"] = time.time()

    def _supervisor_pass(self, trial: PhaseTrial, other: str) -> None:
        old = self.current_run()
        self.kill_run(old)
        wait_for(lambda: not self.hook.processes_of_run(old or ""), 60, "the killed driver's processes to exit")
        trial.detail["killed_at"] = time.time()
        if self.rng.random() < 0.5:  # at a random moment from the process's start (imports, observe, ...)
            proc = self.pass_process()
            time.sleep(trial.delay_s)
        else:
            # Inside the recovery it records, which takes well under a second (the submission returns at
            # once): a random moment is too short a target, so the failpoint kills the pass right after it
            # records a random step of its RECOVER action (before the submission, after it, at its end).
            self._recover_kills += 1  # each step in turn
            step = ("STARTING", "PLANNED", "SUCCEEDED")[self._recover_kills % 3]
            trial.detail["killed_after_recording"] = step
            self.fault_file.write_text(json.dumps([{"point": "runner.step", "match": f"recover:{step};",
                                                    "action": "kill"}]))
            proc = self.pass_process()
            proc.wait(120)
            self.fault_file.write_text("[]")
            trial.killed = (f"the supervising process {proc.pid} right after it recorded recover:{step} "
                            f"(exit {proc.returncode})")
            if proc.returncode != -signal.SIGKILL:
                self.violations.append(f"trial {trial.trial}: the failpoint recover:{step} did not fire: "
                                       f"{trial.killed}")
            return
        exited = proc.poll()
        pids = kill_tree(psutil.Process(proc.pid), same_session_only=True) if exited is None else []
        proc.wait(30)
        trial.killed = (f"the supervising process {proc.pid} mid-pass (pids {pids}), lifecycle step "
                        f"{self.record().get('action')}:{self.record().get('step')}" if pids
                        else f"nothing: the pass had ended (exit {exited}) before {trial.delay_s}s")

    def _standby(self, trial: PhaseTrial, other: str) -> None:
        task = self.task("upgrade", other, warm=True)
        standby = self.wait_process(lambda cmd: "--standby" in cmd and "--stream" in cmd and self.name in cmd, 120,
                                    task)
        if standby is None:
            trial.killed = "nothing: no standby appeared"
        else:
            cmd = standby.cmdline()
            run = cmd[cmd.index("--run-id") + 1]
            time.sleep(trial.delay_s)
            trial.detail["step_at_kill"] = self.record().get("step")
            trial.killed = f"standby run {run}: pids {self.kill_run(run)}"
            trial.detail["killed_at"] = time.time()
        trial.detail["task_exit"] = task.wait(600)
        trial.detail["action_end"] = self.record().get("step")

    def _gate(self, trial: PhaseTrial, other: str) -> None:
        task = self.task("upgrade", other)
        gate = self.wait_process(lambda cmd: "airflow_streaming.compat" in cmd and self.name in cmd, 120, task)
        if gate is None:
            trial.killed = "nothing: no gate process appeared"
        else:
            time.sleep(trial.delay_s)
            trial.killed = f"the gate process and its JVM: pids {kill_tree(gate)}"
            trial.detail["killed_at"] = time.time()
        trial.detail["task_exit"] = task.wait(600)
        trial.detail["action_end"] = self.record().get("step")

    def _probation(self, trial: PhaseTrial, other: str) -> None:
        task = self.task("upgrade", other)
        record = self.wait_step(("PROBATION",), 300, task)
        if record is None:
            trial.killed = f"nothing: the upgrade ended before its probation ({self.record().get('step')})"
        else:
            time.sleep(trial.delay_s)
            run = record.get("new_run_id")
            trial.detail["step_at_kill"] = self.record().get("step")
            trial.killed = f"the new version's run {run}: pids {self.kill_run(run)}"
            trial.detail["killed_at"] = time.time()
        trial.detail["task_exit"] = task.wait(600)
        trial.detail["action_end"] = self.record().get("step")

    def _rollback(self, trial: PhaseTrial, other: str) -> None:
        task = self.task("upgrade", "v3")  # its first batch fails: probation fails, the upgrade rolls back
        record = self.wait_step(("RESTARTING_OLD",), 400, task)
        if record is None:
            trial.killed = f"nothing: the rollback never restarted the old version ({self.record().get('step')})"
        else:
            run = wait_for(lambda: self.record().get("rollback_run_id"), 30, "the rollback's run id")
            time.sleep(trial.delay_s)
            trial.detail["step_at_kill"] = self.record().get("step")
            trial.killed = f"the rollback's restart of the old version, run {run}: pids {self.kill_run(run)}"
            trial.detail["killed_at"] = time.time()
        trial.detail["task_exit"] = task.wait(600)
        trial.detail["action_end"] = self.record().get("step")

    def _task(self, trial: PhaseTrial, other: str) -> None:
        task = self.task("upgrade", other)
        time.sleep(trial.delay_s)
        step = self.record().get("step")
        if task.poll() is not None:
            trial.killed = f"nothing: the upgrade had ended ({step}, exit {task.returncode})"
        else:
            trial.killed = f"the upgrade task at {self.record().get('action')}:{step} with its children: " \
                           f"pids {kill_tree(psutil.Process(task.pid), same_session_only=True)}"
            trial.detail["killed_at"] = time.time()
        task.wait(60)

    def _status_of(self, run: str | None) -> str:
        doc = self.hook.status()
        return doc.state if doc is not None and doc.run_id == run else "no status of this run yet"


def phase_soak(streams: Any, trials: int, seed: int, phases: tuple[str, ...] = PHASES) -> dict[str, Any]:
    """``trials`` trials cycling through ``phases`` in a seeded random order; the result as a dict."""
    soak = PhaseSoak(streams, seed)
    rng = random.Random(seed + 1)
    order = [phases[i % len(phases)] for i in range(trials)]
    rng.shuffle(order)
    feeder = EtlFeeder(streams.path("input", soak.name)).start()
    results: list[PhaseTrial] = []
    started = time.time()
    with CommitterMonitor(soak.name, Path(soak.hook.paths.driver)) as monitor:
        assert soak.run_task("deploy", "v1") == 0, "the first deploy failed"
        wait_for(soak.running, 180, "the first run makes progress")
        for index, phase in enumerate(order, 1):
            trial = soak.trial(index, phase)
            results.append(trial)
            print(f"[phase soak seed={seed}] trial {index}/{trials} {phase} +{trial.delay_s}s: {trial.killed} -> "
                  f"{trial.outcome} ({trial.recovery_s}s, {trial.passes} passes, reran {trial.person_reran})",
                  flush=True)
            if trial.outcome != "running":
                break
        expected = feeder.stop()
        wait_for(lambda: set(read_etl_output(streams.path("output", soak.name)).event_ids) >= expected, 240,
                 "every event fed during the soak in the output")
        assert soak.run_task("stop") == 0, "the final graceful stop failed"
    return {"seed": seed, "trials": [asdict(t) for t in results], "minutes": round((time.time() - started) / 60, 1),
            "exactly_once": exactly_once(streams.path("output", soak.name), expected),
            "max_committers_alive": monitor.max_active, "worst": monitor.worst, "runs_seen": len(monitor.seen),
            "violations": soak.violations, "passes": len(soak.passes)}
