"""Garbage in, clear error out: truncated, wrong-typed and random bytes in every control file, the spec
and the desired-state file, fed to every entry point that reads them.

Every case must end in a safe verdict or one of the provider's named errors (naming the file when it
is about a file) - never a traceback of another kind - and must never change the checkpoint. A control
file that holds what a later action needs (history, ledger, lifecycle record, deployed spec) is never
overwritten while unreadable. Cases are generated from a seeded random source, so a failure replays.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_streaming.control import contract
from airflow_streaming.control.contract import ControlFileError
from airflow_streaming.control.storage import StorageError
from airflow_streaming.exceptions import SealError, StreamingError
from airflow_streaming.lifecycle.desired_state import DesiredStateError, load_desired_state
from airflow_streaming.control.lifecycle_lock import LifecycleLockHeld
from airflow_streaming.lifecycle.operations import stop_stream
from airflow_streaming.lifecycle.record import Action
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner, describe
from airflow_streaming.spec import SpecError, StreamSpec, as_spec
from airflow_streaming.supervision.policy import RestartPolicy
from airflow_streaming.lifecycle.supervisor import supervise
from control_fixtures import RUN_ID, deployed_stream, tree_digest

SEED = 20261123
CASES_PER_FILE = 14
NAMED_ERRORS = (ControlFileError, SealError, StorageError, StreamingError, SpecError, LifecycleLockHeld)
#: Files a later action needs: while unreadable, nothing may overwrite them.
PRECIOUS = ("history.json", "supervisor.json", "lifecycle.json", "deployed.json")


def valid_contents(spec: StreamSpec) -> dict[str, bytes]:
    """A well-formed version of every control file, as the provider writes them."""
    record = contract.DriverRecord(run_id=RUN_ID, stream="s1", version="v1", application="device_signals",
                                   host="elsewhere", command="spark-submit ...", log_path="/x/l.log", submitted_at=1.0,
                                   checkpoint_location=spec.checkpoint_location, handle={"pid": 1, "start_time": 1.0})
    lease = contract.Lease(RUN_ID, 1, 1.0, "elsewhere", 1.0, 1.0, 120.0)
    lifecycle = {"stream": "s1", "action": "upgrade", "step": "SUCCEEDED", "id": "u1", "from_spec": spec.to_dict(),
                 "to_spec": spec.to_dict(), "steps": [{"step": "PLANNED", "at": 1.0, "detail": None}]}
    return {
        "RUNNING": json.dumps({"run_id": RUN_ID, "version": "v1", "created_at": 1.0}).encode(),
        "status.json": (Path(__file__).resolve().parents[1] / "fixtures" / "status" / "device_signals_stopped.json"
                        ).read_bytes(),
        "lease.json": lease.to_json(),
        "driver.json": record.to_json(),
        "deployed.json": json.dumps({"run_id": RUN_ID, "at": 1.0, "spec": spec.to_dict()}).encode(),
        "lifecycle.json": json.dumps(lifecycle).encode(),
        "lifecycle.lock": json.dumps({"action": "upgrade", "pid": 1, "host": "elsewhere", "acquired_at": 1.0,
                                      "renewed_at": 1.0, "ttl": 120.0}).encode(),
        "history.json": json.dumps([{"id": "u0", "action": "upgrade", "outcome": "SUCCEEDED", "to_version": "v1",
                                     "from_version": None, "last_batch_before": 2}]).encode(),
        "supervisor.json": json.dumps({"failures": [1.0], "error_classes": [None], "healthy_since": None,
                                       "gave_up": False, "handled_run_ids": [RUN_ID]}).encode(),
        "notifications.json": json.dumps({"version": 1, "streams": {}}).encode(),
        "standby.json": json.dumps({"run_id": "r2", "pid": 1, "state": "READY", "error": None, "at": 1.0}).encode(),
        "standby-driver.json": record.to_json(),
    }


def mutations(name: str, good: bytes, rng: random.Random) -> list[tuple[str, bytes]]:
    cases = [("empty", b""), ("truncated", good[: len(good) // 2]), ("null", b"null"), ("list", b"[1, 2]"),
             ("string", b'"RUNNING"'), ("number", b"42"), ("binary", bytes(rng.randrange(256) for _ in range(48)))]
    try:
        doc = json.loads(good)
    except ValueError:
        doc = None
    wrong_values: list[Any] = [None, 7, "x", [], {}, True, -1.5, "9" * 400]
    if isinstance(doc, dict):
        for key in sorted(doc):
            for value in rng.sample(wrong_values, 2):
                cases.append((f"{key}={value!r:.20}", json.dumps({**doc, key: value}).encode()))
        cases.append(("missing-all-but-one", json.dumps(dict(list(doc.items())[:1])).encode()))
    elif isinstance(doc, list) and doc and isinstance(doc[0], dict):
        for key in sorted(doc[0]):
            cases.append((f"[0].{key}=[]", json.dumps([{**doc[0], key: []}]).encode()))
        cases.append(("list-of-numbers", b"[1, 2, 3]"))
    rng.shuffle(cases)
    return cases[:CASES_PER_FILE]


def _poke_unwrapped(sensor: Any) -> Any:
    """The sensor's own error: a permanent one reaches Airflow as AirflowFailException (no retries) carrying
    the provider's error (``original_error``)."""
    from airflow.providers.common.compat.sdk import AirflowFailException

    from airflow_streaming.task_failures import original_error

    try:
        return sensor.poke({})
    except AirflowFailException as exc:
        original = original_error(exc)
        assert original is not exc and str(exc) == str(original)
        raise original from None


def entry_points(spec: StreamSpec, hook: Any) -> dict[str, Any]:
    """Everything a DAG, a sensor, the supervisor or a person calls that reads the control files."""
    from airflow_streaming.sensors.progress import SparkStreamProgressSensor

    incompatible = LifecycleOptions(check=lambda *a: {"verdict": "INCOMPATIBLE", "findings": [
        {"rule": "R", "message": "m", "severity": "ERROR"}]})
    missing_app = StreamSpec.from_dict({**spec.to_dict(), "application": "/nonexistent/job.py"})
    return {
        "health": lambda: hook.health(),
        "describe": lambda: describe(hook),
        "running_driver": lambda: hook.running_driver(),
        "supervise": lambda: supervise(hook, RestartPolicy(), lambda e: None),
        "stop": lambda: stop_stream(spec),
        "upgrade (refused at the gate)": lambda: LifecycleRunner(
            spec.with_version("v2", application="device_signals_v2"), Action.UPGRADE, incompatible).run(),
        "deploy (application missing)": lambda: LifecycleRunner(missing_app, Action.DEPLOY).run(),
        "progress sensor": lambda: _poke_unwrapped(SparkStreamProgressSensor(task_id="p", spec=spec)),
    }


@pytest.mark.parametrize("name", sorted(valid_contents(StreamSpec.from_dict({
    "name": "x", "application": "device_signals", "checkpoint_location": "/c", "control_location": "/d"}))))
def test_garbage_in_a_control_file_ends_in_a_named_error_or_a_safe_verdict(tmp_path, name):
    rng = random.Random(f"{SEED}-{name}")
    spec, hook = deployed_stream(tmp_path)
    good = valid_contents(spec)[name]
    path = f"{hook.paths.root}/{name}"
    checkpoint_before = tree_digest(spec.checkpoint_location)
    failures = []
    for case, data in mutations(name, good, rng):
        for entry, call in entry_points(spec, hook).items():
            hook.storage.unguarded.write_atomic(path, data)
            readable = _readable(name, path, data)
            try:
                call()
            except NAMED_ERRORS as exc:
                message = str(exc)
                if isinstance(exc, (ControlFileError, SealError)) and name not in message:
                    failures.append(f"{name} {case} {entry}: error does not name the file: {message[:200]}")
            except Exception as exc:  # noqa: BLE001 - this is what the test hunts for
                failures.append(f"{name} {case} {entry}: {type(exc).__name__}: {exc!s:.200}")
            if name in PRECIOUS and not readable and hook.storage.read_bytes(path) != data:
                failures.append(f"{name} {case} {entry}: the unreadable file was overwritten")
            for stale in ("lifecycle.lock",):  # a garbage lock may be taken over; leave none behind held
                hook.storage.unguarded.delete(f"{hook.paths.root}/{stale}") if name != stale else None
        hook.storage.unguarded.write_atomic(path, good)
    assert tree_digest(spec.checkpoint_location) == checkpoint_before, "the checkpoint changed"
    assert not failures, "\n".join(failures[:20])


def _readable(name: str, path: str, data: bytes) -> bool:
    """Whether the provider's own reader accepts ``data`` for this file."""
    from airflow_streaming.lifecycle.runner import parse_record
    from airflow_streaming.supervision.policy import RestartLedger

    try:
        doc = json.loads(data)
        if name == "lifecycle.json":
            parse_record(path, data)
        elif name == "supervisor.json":
            RestartLedger.from_dict(doc)
        elif name == "history.json":
            return isinstance(doc, list) and all(isinstance(h, dict) for h in doc)
        elif name == "deployed.json":
            return isinstance(doc, dict) and isinstance(doc.get("spec"), dict)
        return True
    except (ValueError, TypeError, KeyError, UnicodeDecodeError, ControlFileError):
        return False


def test_garbage_specs_and_desired_state_files_give_named_errors(tmp_path):
    rng = random.Random(SEED)
    good_spec = {"name": "s1", "application": "events_etl", "checkpoint_location": "/c/s1",
                 "control_location": "/d", "trigger_interval": "5 seconds", "spark_conf": {"spark.x": 1},
                 "application_args": ["--a", "b"], "cluster": {}, "health": {}}
    failures = []
    texts = [yaml.safe_dump(good_spec)]
    for key in good_spec:
        for value in (None, [], {}, "x", -3, True, "9" * 300, {"k": [1]}):
            texts.append(yaml.safe_dump({**good_spec, key: value}))
    texts += ["", "name: [unclosed", "- a\n- b", "42", "name: a\nname: b\n", "\x00\x01binary", "a: b: c",
              "/does/not/exist.yaml", "./typo-spec.yml", bytes(rng.randrange(32, 127) for _ in range(80)).decode()]
    for text in texts:
        try:
            as_spec(text)
        except SpecError:
            pass
        except Exception as exc:  # noqa: BLE001
            failures.append(f"spec {text[:60]!r}: {type(exc).__name__}: {exc}")
    with pytest.raises(SpecError, match="duplicate key 'name'"):
        as_spec("name: a\nname: b\napplication: events_etl\n")
    with pytest.raises(SpecError, match="spec file '/does/not/exist.yaml' does not exist"):
        as_spec("/does/not/exist.yaml")

    good_state = {"defaults": {"control_location": "/d", "master": "local[2]"},
                  "streams": {"s1": {"version": "v1", "spec": {"checkpoint_location": "/c/s1"},
                                     "versions": {"v1": {"application": "events_etl"}}}}}
    states = [yaml.safe_dump(good_state), "streams:\n  s1: {}\n  s1: {}\n", "", "[]", "streams: 5",
              bytes(rng.randrange(256) for _ in range(64)).decode("latin-1")]
    for key in ("version", "spec", "versions", "probation"):
        for value in (None, [], "x", 5, {"bad": 1}):
            doc = json.loads(json.dumps(good_state))
            doc["streams"]["s1"][key] = value
            states.append(yaml.safe_dump(doc))
    for i, text in enumerate(states):
        path = tmp_path / f"state{i}.yaml"
        path.write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
        try:
            load_desired_state(str(path))
        except DesiredStateError:
            pass
        except Exception as exc:  # noqa: BLE001
            failures.append(f"desired state {text[:60]!r}: {type(exc).__name__}: {exc}")
    dup = tmp_path / "dup.yaml"
    dup.write_text("streams:\n  s1: {version: v1}\n  s1: {version: v2}\n")
    with pytest.raises(DesiredStateError, match="duplicate key 's1'"):
        load_desired_state(str(dup))
    assert not failures, "\n".join(failures[:20])
