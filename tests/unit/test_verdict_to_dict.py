"""``HealthVerdict.to_dict`` is written out by hand (a triggerer calls it a thousand times per poll round):
it must give exactly what ``dataclasses.asdict`` gives, for every verdict the rules produce from the
recorded status documents, with and without a live driver, fresh and stale."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from airflow_streaming.health.verdict import HealthVerdict, evaluate

FIXTURES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "status").glob("*.json"))


def _via_asdict(verdict: HealthVerdict) -> dict:
    d = asdict(verdict)
    d["state"] = verdict.state.value
    return d


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
@pytest.mark.parametrize("alive", [True, False, None])
@pytest.mark.parametrize("age", [0.0, 3600.0])
def test_to_dict_is_what_asdict_gives(fixture: Path, alive: bool | None, age: float) -> None:
    doc = json.loads(fixture.read_text())
    verdict = evaluate(doc, now=float(doc["heartbeat_at"]) + age, driver_alive=alive, trigger_interval=5.0,
                       heartbeat_interval=5.0)
    got = verdict.to_dict()
    assert got == _via_asdict(verdict)
    assert json.dumps(got, sort_keys=True) == json.dumps(_via_asdict(verdict), sort_keys=True)
    assert HealthVerdict.from_dict(json.loads(json.dumps(got))) == verdict
    # A copy, not a view: changing the dict leaves the verdict as it was.
    for reason in got["reasons"]:
        reason["values"]["touched"] = 1
    got["metrics"]["touched"] = 1
    assert "touched" not in verdict.metrics
    assert all("touched" not in r.values for r in verdict.reasons)


def test_no_status_document_and_unreadable() -> None:
    for verdict in (evaluate(None, now=0.0, driver_alive=False, trigger_interval=5.0, heartbeat_interval=5.0),
                    evaluate(None, now=0.0, driver_alive=None, trigger_interval=5.0, heartbeat_interval=5.0,
                             unreadable="status.json: EIO")):
        assert verdict.to_dict() == _via_asdict(verdict)
