"""Seals that bind what they vouch for (issue 35): the stream, its control directory, the version and
whether the version may run. Each test reproduces an attack by a driver (or anyone) that can write a
stream's control directory, with real files and the product's own readers, runner and supervisor:

- stream A's sealed spec copied into stream B's ``deployed.json``: B's restart and supervisor pass refuse
  it with :class:`SealError` (before: A's application ran with B's secrets);
- an upgrade refused by its gate: its target, copied into ``deployed.json`` (or left in the record at a
  step past the gate), never runs (before: the next supervisor pass recovered it, the gate skipped);
- seals of the previous format: refused as a deployed spec (deploy again), accepted only as the old
  version an in-flight action rolls back to (docs/security.md).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from airflow_streaming.control import contract
from airflow_streaming.control.process import process_start_time
from airflow_streaming.exceptions import SealError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.record import Action, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner, restart_spec, resume_target
from airflow_streaming.lifecycle.supervisor import _deployed_spec, supervise
from airflow_streaming.redaction import mask_spec
from airflow_streaming.sealing import seal_key, sealed
from airflow_streaming.spec import StreamSpec
from airflow_streaming.supervision.policy import RestartPolicy
from control_fixtures import FIXTURE_CHECKPOINT, deployed_stream, spec_under

VICTIM_SECRET = "victim-s3-secret-0123456789"
INCOMPATIBLE = LifecycleOptions(check=lambda *a: {"verdict": "INCOMPATIBLE", "findings": [
    {"rule": "STATE_SCHEMA", "message": "the state schema changed", "severity": "ERROR"}]})


def _write(hook: SparkStreamHook, name: str, doc: object) -> None:
    hook.storage.unguarded.write_atomic(f"{hook.paths.root}/{name}", json.dumps(doc).encode())


def _read(hook: SparkStreamHook, name: str) -> dict:
    return json.loads(Path(hook.paths.root, name).read_text())


def _attacker_script(tmp_path: Path) -> tuple[str, Path]:
    pwned = tmp_path / "pwned"
    script = tmp_path / "attacker_job.py"
    script.write_text(f"open({str(pwned)!r}, 'w').write('ran')\n")
    return str(script), pwned


def _dead_driver(hook: SparkStreamHook, spec: StreamSpec) -> str:
    """A driver record of a run that is provably gone: the supervisor's decision is a restart."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start_time(proc.pid)
    proc.wait()
    run_id = "20260102T000000Z-0000bbbb"
    record = contract.DriverRecord(
        run_id=run_id, stream=spec.name, version=spec.version, application=spec.application,
        host=socket.gethostname(), command=f"spark-submit ... --run-id {run_id}", log_path="l",
        submitted_at=time.time(), checkpoint_location=spec.checkpoint_location,
        handle={"pid": proc.pid, "start_time": start})
    hook.storage.unguarded.write_atomic(hook.paths.driver, record.to_json())
    return run_id


def _legacy(spec: dict) -> dict:
    """``spec`` sealed as the previous version of the provider sealed it: a MAC over the masked spec alone."""
    body = mask_spec({k: v for k, v in spec.items() if k != "seal"})
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return {**body, "seal": "hmac-sha256:" + hmac.new(seal_key(), canonical.encode(), hashlib.sha256).hexdigest()}


# ------------------------------------------------------------------ a sealed spec is tied to its stream


def _two_streams(tmp_path: Path) -> tuple[StreamSpec, SparkStreamHook, dict]:
    """Stream B (the victim, with a secret) deployed; stream A's spec as the Airflow side sealed it: the
    attacker's application and endpoint, the same secret key (masked at rest)."""
    victim = spec_under(tmp_path, name="victim", checkpoint_location=str(tmp_path / "ckpt" / "victim"),
                        spark_conf={"spark.hadoop.fs.s3a.secret.key": VICTIM_SECRET})
    hook = SparkStreamHook(victim)
    shutil.copytree(FIXTURE_CHECKPOINT, victim.checkpoint_location)
    _write(hook, "deployed.json", {"run_id": "r1", "at": 1.0, "spec": sealed(victim.to_dict())})
    evil, _ = _attacker_script(tmp_path)
    attacker = spec_under(tmp_path, name="attacker", application=evil, version="v1",
                          checkpoint_location=str(tmp_path / "ckpt" / "attacker"),
                          spark_conf={"spark.hadoop.fs.s3a.secret.key": "attacker-own-secret",
                                      "spark.hadoop.fs.s3a.endpoint": "http://127.0.0.1:9/attacker"})
    a_sealed = sealed(attacker.to_dict())
    assert a_sealed["spark_conf"]["spark.hadoop.fs.s3a.secret.key"] == "***"  # as stored: the key is masked
    return victim, hook, a_sealed


def test_another_streams_sealed_spec_is_not_what_a_restart_runs(tmp_path):
    victim, hook, a_sealed = _two_streams(tmp_path)
    _write(hook, "deployed.json", {"run_id": "r1", "at": 1.0, "spec": a_sealed})
    # Before: _deployed_spec returned name=attacker application=attacker_job.py with the victim's secret key.
    with pytest.raises(SealError, match=r"sealed for stream 'attacker' .*, not for 'victim'") as info:
        _deployed_spec(hook)
    assert VICTIM_SECRET not in str(info.value)
    with pytest.raises(SealError, match="deployed.json"):
        restart_spec(SparkStreamHook(victim.with_version("v2")), Action.RESTART)
    with pytest.raises(SealError):  # a DAG's restart task: the same refusal
        LifecycleRunner(victim.with_version("v2"), Action.RESTART, LifecycleOptions()).run()
    assert not Path(hook.paths.root, "lifecycle.json").exists()


def test_the_same_name_in_another_control_location_is_another_stream(tmp_path):
    victim, hook, _ = _two_streams(tmp_path)
    twin = StreamSpec.from_dict({**victim.to_dict(), "control_location": str(tmp_path / "other-control"),
                                 "application": str(tmp_path / "attacker_job.py")})
    _write(hook, "deployed.json", {"run_id": "r1", "at": 1.0, "spec": sealed(twin.to_dict())})
    with pytest.raises(SealError, match="other-control"):
        _deployed_spec(SparkStreamHook(victim.with_version("v2")))


def test_the_supervisor_reports_another_streams_spec_and_submits_nothing(tmp_path):
    victim, hook, a_sealed = _two_streams(tmp_path)
    _, pwned = _attacker_script(tmp_path)
    run_id = _dead_driver(hook, victim)
    _write(hook, "deployed.json", {"run_id": run_id, "at": 1.0, "spec": a_sealed})
    events: list[dict] = []
    result = supervise(hook, RestartPolicy(backoff_initial_s=0), events.append)
    assert result.action == "REFUSED" and "sealed for stream 'attacker'" in result.reason
    assert [(e["kind"], e["error_class"]) for e in events] == [("FAILED", "SealError")]
    assert "RESTARTING" not in [e["kind"] for e in events]  # no restart was announced, none was made
    assert hook.driver_record().run_id == run_id and not pwned.exists()  # nothing submitted
    assert not Path(hook.paths.root, "lifecycle.json").exists()
    assert VICTIM_SECRET not in json.dumps(events) + result.reason


# ------------------------------------------------------------------ a refused version is not sealed runnable


def _refused_upgrade(tmp_path: Path) -> tuple[StreamSpec, SparkStreamHook, dict]:
    spec, hook = deployed_stream(tmp_path)
    evil, _ = _attacker_script(tmp_path)
    record = LifecycleRunner(spec.with_version("v3", application=evil), Action.UPGRADE, INCOMPATIBLE).run()
    assert record.step == Step.REFUSED
    stored = _read(hook, "lifecycle.json")
    assert stored["to_spec"]["version"] == "v3" and stored["to_spec"]["seal"]  # sealed (so that it can resume)
    return spec, hook, stored


def test_a_refused_version_copied_into_deployed_json_is_not_recovered(tmp_path):
    spec, hook, stored = _refused_upgrade(tmp_path)
    _, pwned = _attacker_script(tmp_path)
    run_id = _dead_driver(hook, spec)
    _write(hook, "deployed.json", {"run_id": run_id, "at": 2.0, "spec": stored["to_spec"]})
    # Before: the seal over the spec alone verified, and the next pass recovered v3 - its gate skipped.
    with pytest.raises(SealError, match=r"version 'v3'.*'candidate' only"):
        _deployed_spec(hook)
    with pytest.raises(SealError, match="candidate"):
        restart_spec(SparkStreamHook(spec.with_version("v2")), Action.RESTART)
    events: list[dict] = []
    result = supervise(hook, RestartPolicy(backoff_initial_s=0), events.append)
    assert result.action == "REFUSED" and "has not passed its compatibility gate" in result.reason
    assert [e["error_class"] for e in events] == ["SealError"]
    assert hook.driver_record().run_id == run_id and not pwned.exists()
    assert _read(hook, "lifecycle.json")["step"] == "REFUSED"  # no recovery was recorded either


def test_a_candidate_recorded_past_its_gate_is_not_resumed(tmp_path):
    spec, hook, stored = _refused_upgrade(tmp_path)
    target = spec.with_version("v3", application=stored["to_spec"]["application"])
    assert stored["to_spec"]["seal"]["status"] == "candidate"  # sealed, but only as a candidate
    # The driver rewrites the record: the refused upgrade "passed" and is about to stop the running version.
    _write(hook, "lifecycle.json", {**stored, "step": "STOPPING", "error": None})
    assert resume_target(hook, Action.UPGRADE)[1].version == "v3"  # readable (an unfinished action to resume)...
    marker_before = hook.storage.exists(hook.paths.marker)
    with pytest.raises(SealError, match=r"recorded at step STOPPING, past its compatibility gate.*'candidate' only"):
        LifecycleRunner(target, Action.UPGRADE, INCOMPATIBLE).run()  # ...but not past the gate
    assert _read(hook, "lifecycle.json")["step"] == "STOPPING" and hook.storage.exists(hook.paths.marker) == marker_before
    # Left before its gate (PLANNED), the same candidate resumes with the gate run again: refused again.
    _write(hook, "lifecycle.json", {**stored, "step": "PLANNED", "error": None})
    called = []
    options = LifecycleOptions(check=lambda *a: called.append(a) or INCOMPATIBLE.check(*a))
    assert LifecycleRunner(target, Action.UPGRADE, options).run().step == Step.REFUSED and called


def test_a_passed_gate_seals_the_target_runnable_and_the_rollback_runs_the_old_version(tmp_path):
    """The gate passes, the new version fails to start, the runner rolls back to the sealed old version
    (both applications are missing files, so nothing runs and no JVM starts: the submissions fail)."""
    spec = spec_under(tmp_path, application=str(tmp_path / "job_v1.py"))
    hook = SparkStreamHook(spec)
    shutil.copytree(FIXTURE_CHECKPOINT, spec.checkpoint_location)
    _write(hook, "deployed.json", {"run_id": "r1", "at": 1.0, "spec": sealed(spec.to_dict())})
    status = contract.StatusDocument(stream="s1", version="v1", run_id="r1", state=contract.STOPPED, pid=1,
                                     host="elsewhere", started_at=1.0, heartbeat_at=2.0, ready=True,
                                     queries=[contract.QueryStatus("q", "r", "s1", False, last_batch_id=3)],
                                     exit={"code": 0, "reason": "graceful stop"})
    contract.write_status(hook.storage.unguarded, hook.paths, status)
    compatible = LifecycleOptions(check=lambda *a: {"verdict": "COMPATIBLE", "findings": []})
    record = LifecycleRunner(spec.with_version("v2", application=str(tmp_path / "job_v2.py")), Action.UPGRADE,
                             compatible).run()
    steps = [s["step"] for s in record.steps]
    assert "CHECKED" in steps and "RESTARTING_OLD" in steps and record.step == Step.ROLLBACK_FAILED, steps
    assert "job_v1.py" in record.error and "its seal" not in record.error  # the old version was trusted, then not found
    stored = _read(hook, "lifecycle.json")
    assert stored["to_spec"]["seal"]["status"] == "deployable"  # sealed runnable at CHECKED
    assert stored["from_spec"]["seal"] | {"mac": None} == {"stream": "s1", "control": spec.control_dir,
                                                           "version": "v1", "status": "deployable",
                                                           "deployed_by": None, "mac": None}


# ------------------------------------------------------------------ seals of the previous format


def test_a_deployed_spec_sealed_by_the_previous_version_is_refused_unless_it_is_the_callers(tmp_path):
    spec, hook = deployed_stream(tmp_path)
    v2 = spec.with_version("v2")
    _write(hook, "deployed.json", {"run_id": "r1", "at": 1.0, "spec": _legacy(v2.to_dict())})
    with pytest.raises(SealError, match="earlier version of airflow-streaming.*Deploy the stream again"):
        _deployed_spec(hook)  # the supervisor was given v1; v2 is only legacy-sealed
    assert _deployed_spec(SparkStreamHook(v2)) == v2  # the pass's own spec needs no seal: the fleet keeps recovering
    assert restart_spec(SparkStreamHook(v2), Action.RESTART) == v2


def test_an_in_flight_rollback_sealed_by_the_previous_version_still_rolls_back(tmp_path):
    """An upgrade started before the provider was upgraded, resumed after it, rolls back to its old version
    (legacy-sealed, naming this stream); the same record naming another stream's spec is refused."""
    spec = spec_under(tmp_path, application=str(tmp_path / "job_v1.py"))
    hook = SparkStreamHook(spec)
    hook.storage.makedirs(hook.paths.root)
    target = spec.with_version("v2", application=str(tmp_path / "job_v2.py"))
    record = {"stream": "s1", "action": "upgrade", "step": "RESTORED", "id": "u1", "error": "upgrade failed",
              "from_spec": _legacy(spec.to_dict()), "to_spec": _legacy(target.to_dict()),
              "steps": [{"step": "PLANNED", "at": 1.0}, {"step": "RESTORED", "at": 2.0}]}
    _write(hook, "lifecycle.json", record)
    done = LifecycleRunner(target, Action.UPGRADE, LifecycleOptions()).run()
    assert done.step == Step.ROLLBACK_FAILED and "job_v1.py" in done.error and "its seal" not in done.error
    evil, pwned = _attacker_script(tmp_path)
    other = spec_under(tmp_path, name="other", application=evil)
    _write(hook, "lifecycle.json", {**record, "from_spec": _legacy(other.to_dict())})
    done = LifecycleRunner(target, Action.UPGRADE, LifecycleOptions()).run()
    assert done.step == Step.ROLLBACK_FAILED and "SealError" in done.error and "earlier version" in done.error
    assert "job_v1.py" not in done.error and not pwned.exists()
