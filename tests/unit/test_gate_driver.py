"""The gate-only driver (``spark_jobs/launch.py --gate-only``, spark_jobs/runtime/gate_driver.py) without a
JVM: it writes its answer to ``gate-report.json``, stops the session it started, and touches nothing else."""

from __future__ import annotations

import json
import os

from airflow_streaming.control.contract import EXIT_GRACEFUL, EXIT_STARTUP_FAILED
from airflow_streaming.control.storage import StorageError
from spark_jobs.runtime.launcher import Driver, parse_args

RUN = "20260101T000000Z-0000gate"


class _Report:
    def to_dict(self):
        return {"verdict": "compatible"}


class _Session:
    def __init__(self, order):
        self.order = order

    def stop(self):
        self.order.append("session stopped")


def _driver(tmp_path, script):
    control = tmp_path / "control"
    control.mkdir()
    return Driver(parse_args(["--stream", "s1", "--version", "v2", "--run-id", RUN, "--control-dir", str(control),
                              "--checkpoint", str(tmp_path / "checkpoint"), "--script", str(script), "--gate-only"]))


def test_the_gate_driver_writes_its_answer_then_stops_its_session(tmp_path, monkeypatch):
    script = tmp_path / "app.py"
    script.write_text("pass\n")
    driver = _driver(tmp_path, script)
    order: list = []
    names: list = []
    monkeypatch.setattr(driver.session, "create", lambda name=None: (names.append(name), _Session(order))[1])
    checked: list = []

    def check(spark, ns, checkpoint, dry_run):
        checked.append((checkpoint, dry_run))
        order.append("checked")
        return _Report()

    monkeypatch.setattr("spark_jobs.runtime.standby_gate.run_check_in_driver", check)
    real_write = driver.storage.write_atomic
    monkeypatch.setattr(driver.storage, "write_atomic",
                        lambda path, data: (order.append(os.path.basename(path)), real_write(path, data))[1])
    assert driver.run() == EXIT_GRACEFUL
    assert names == ["s1:v2 compatibility gate"] and checked == [(str(tmp_path / "checkpoint"), True)]
    assert order == ["checked", "gate-report.json", "session stopped"]
    answer = json.loads(driver.storage.read_bytes(driver.paths.gate_report))
    assert answer["id"] == RUN and answer["report"] == {"verdict": "compatible"} and "host" in answer
    assert sorted(os.listdir(tmp_path / "control")) == ["gate-report.json"]  # no lease, marker or status


def test_a_gate_that_cannot_start_answers_with_its_error(tmp_path, monkeypatch):
    driver = _driver(tmp_path, tmp_path / "missing.py")
    monkeypatch.setattr(driver.session, "create", lambda name=None: 1 / 0)  # never reached
    assert driver.run() == EXIT_GRACEFUL
    answer = json.loads(driver.storage.read_bytes(driver.paths.gate_report))
    assert answer["error"].startswith("FileNotFoundError: application script") and "report" not in answer


def test_an_answer_that_cannot_be_written_is_exit_4_and_the_session_still_stops(tmp_path, monkeypatch, capsys):
    script = tmp_path / "app.py"
    script.write_text("pass\n")
    driver = _driver(tmp_path, script)
    order: list = []
    monkeypatch.setattr(driver.session, "create", lambda name=None: _Session(order))
    monkeypatch.setattr("spark_jobs.runtime.standby_gate.run_check_in_driver", lambda *a: _Report())

    def refuse(path, data):
        raise StorageError(30, "read-only file system")

    monkeypatch.setattr(driver.storage, "write_atomic", refuse)
    assert driver.run() == EXIT_STARTUP_FAILED
    assert order == ["session stopped"]
    assert "its answer cannot be written" in capsys.readouterr().err
