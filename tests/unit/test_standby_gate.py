"""The gate inside a standby driver (spark_jobs/runtime/standby_gate.py), its Spark check replaced.

The check itself runs on a real Spark in tests/integration/test_upgrade.py; here: which request is
answered, that the warm-up while preparing never answers, never raises and is not counted as the
answer, and that a failing check becomes an error in the report.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from airflow_streaming.control.contract import ControlPaths
from airflow_streaming.control.local import LocalStorage
from spark_jobs.runtime.standby_gate import StandbyGate


class Report:
    def __init__(self, n: int) -> None:
        self.n = n

    def to_dict(self) -> dict:
        return {"verdict": "COMPATIBLE", "n": self.n}


@pytest.fixture
def gate(tmp_path, monkeypatch):
    storage, paths = LocalStorage(), ControlPaths(str(tmp_path))
    calls: list[dict] = []

    def check(spark, ns, request):
        calls.append(request)
        if request.get("fail"):
            raise RuntimeError("the candidate's plan cannot be built")
        return Report(len(calls))

    monkeypatch.setattr(StandbyGate, "_check", staticmethod(check))
    g = StandbyGate(storage, paths, "run-new", every_s=0.0)
    g.calls = calls
    g.ask = lambda **req: storage.write_atomic(paths.standby_gate, json.dumps(req).encode())
    g.report = lambda: json.loads(storage.read_bytes(paths.standby_gate_report) or b"null")
    return g


NS = SimpleNamespace(checkpoint="/c", job="device_signals_v2", script=None, app_args=[], stream="s", trigger_seconds=1.0)


def test_the_warm_up_runs_the_check_once_and_the_answer_is_a_fresh_check(gate):
    gate.ask(id="u1", run_id="run-new", checkpoint="/c", dry_run=True)
    assert gate.warm_up(None, NS) is not None
    assert gate.report() is None  # the warm-up never answers: its checkpoint view is older
    gate.poll(None, NS)
    assert gate.report()["id"] == "u1" and gate.report()["report"] == {"verdict": "COMPATIBLE", "n": 2}
    assert len(gate.calls) == 2
    gate.poll(None, NS)  # answered once
    assert len(gate.calls) == 2


def test_no_request_or_another_runs_request_means_no_warm_up_and_no_answer(gate):
    assert gate.warm_up(None, NS) is None
    gate.ask(id="u1", run_id="run-other", checkpoint="/c")
    assert gate.warm_up(None, NS) is None
    gate.poll(None, NS)
    assert gate.calls == [] and gate.report() is None


def test_a_failing_check_never_raises_from_the_warm_up_and_is_an_error_in_the_answer(gate):
    gate.ask(id="u2", run_id="run-new", checkpoint="/c", fail=True)
    assert gate.warm_up(None, NS) is not None
    gate.poll(None, NS)
    answer = gate.report()
    assert answer["id"] == "u2" and "report" not in answer
    assert answer["error"] == "RuntimeError: the candidate's plan cannot be built"


def test_garbage_in_the_request_file_is_neither_warmed_up_nor_answered(gate, tmp_path):
    (tmp_path / "standby-gate.json").write_bytes(b"{not json")
    assert gate.warm_up(None, NS) is None
    gate.poll(None, NS)
    assert gate.calls == [] and gate.report() is None
