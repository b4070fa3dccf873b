"""The status view a health poll decodes (:mod:`airflow_streaming.health.view`, :func:`airflow_streaming.json_object.status_view`).

The two ways to a view - the typed decode of the file's bytes (``msgspec``, what a triggerer's poll does) and
:func:`view_of` of a parsed document (the standard library's path, and what a caller with a dict gets) - must
give the same view of every document, refuse the same garbage, and the verdict of a view must be the verdict of
the document it was made of. Documents: those recorded from real Spark drivers (``tests/fixtures/status/``),
the synthetic fleet's (``tests/synthetic_fleet.py``), and garbage made from them field by field.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

from airflow_streaming import json_object
from airflow_streaming.control.contract import ControlFileError, StatusDocument, check_view
from airflow_streaming.health.verdict import evaluate
from airflow_streaming.health.view import StatusView, view_of

FIXTURES = sorted((Path(__file__).resolve().parent.parent / "fixtures" / "status").glob("*.json"))


def documents() -> list[tuple[str, dict[str, Any]]]:
    docs = [(f.name, json.loads(f.read_text())) for f in FIXTURES]
    running = json.loads((FIXTURES[0].parent / "etl_dag_phase1_running.json").read_text())
    odd = copy.deepcopy(running)  # what a driver may write that is still valid: strings for numbers, nulls
    report = odd["queries"][0]["recent_progress"][-1]
    report.update(numInputRows="12", durationMs=None, stateOperators=None, eventTime=None, sources=None,
                  observedMetrics={"q": {"quarantined_rows": "3"}})
    docs.append(("odd-but-valid", odd))
    return docs


def both_ways(path: str, doc: dict[str, Any]) -> tuple[Any, Any]:
    """The outcome of the typed decode and of the standard library's path: a view, or the error's text."""
    raw = json.dumps(doc).encode()
    outcomes = []
    for decode in (json_object._decode_view, None):
        saved = json_object._decode_view
        json_object._decode_view = decode
        try:
            outcomes.append(json_object.status_view(path, raw))
        except ControlFileError as exc:
            outcomes.append(("refused", str(exc).startswith(path)))
        finally:
            json_object._decode_view = saved
    return outcomes[0], outcomes[1]


@pytest.mark.parametrize("name,doc", documents(), ids=[n for n, _ in documents()])
def test_the_typed_decode_and_the_dict_give_the_same_view_and_the_same_verdict(name, doc):
    assert json_object._decode_view is not None, "msgspec is installed with Airflow: the fast path must be tested"
    typed, plain = both_ways("/c/s/status.json", doc)
    assert isinstance(typed, StatusView) and typed == plain == view_of(doc)
    assert typed.checkpoints() == StatusDocument.from_dict("x", doc).checkpoints()
    for now_offset in (0.0, 30.0, 3600.0):
        now = float(doc["heartbeat_at"]) + now_offset
        for alive in (True, False, None):
            by_view = evaluate(typed, now=now, driver_alive=alive, trigger_interval=5, heartbeat_interval=5)
            by_dict = evaluate(doc, now=now, driver_alive=alive, trigger_interval=5, heartbeat_interval=5)
            assert by_view.to_dict() == by_dict.to_dict()


def _garbage() -> list[tuple[str, Any]]:
    """(what is broken, a document): each refused by StatusDocument.from_dict (the top level and the queries), or
    by the view's shape (inside a report, which the whole document's validation does not look into: there the
    verdict used to fail on it, with the same outcome, an UNKNOWN verdict saying the status is unreadable)."""
    base = json.loads((FIXTURES[0].parent / "etl_dag_phase1_running.json").read_text())
    cases = []

    def case(what: str, change: Any) -> None:
        doc = copy.deepcopy(base)
        change(doc)
        cases.append((what, doc))

    case("schema", lambda d: d.update(schema=99))
    case("state missing", lambda d: d.pop("state"))
    case("state unknown", lambda d: d.update(state="DANCING"))
    case("run_id a number", lambda d: d.update(run_id=7))
    case("pid a bool", lambda d: d.update(pid=True))
    case("heartbeat a string", lambda d: d.update(heartbeat_at="now"))
    case("totals not counts", lambda d: d["totals"].update(batches="x"))
    case("queries an object", lambda d: d.update(queries={"a": 1}))
    case("a query a list", lambda d: d.update(queries=[[1]]))
    case("a query's active missing", lambda d: d["queries"][0].pop("active"))
    case("a report a string", lambda d: d["queries"][0]["recent_progress"].append("x"))
    case("durationMs a list", lambda d: d["queries"][0]["recent_progress"][0].update(durationMs=[1]))
    case("an observed metric a number", lambda d: d["queries"][0]["recent_progress"][0].update(observedMetrics={"q": 1}))
    case("a trigger of no kind", lambda d: d["queries"][0].update(trigger={"kind": "sometimes"}))
    case("exit a string", lambda d: d.update(exit="gone"))
    case("storage_errors a list", lambda d: d.update(storage_errors=[1]))
    return cases


@pytest.mark.parametrize("what,doc", _garbage(), ids=[w for w, _ in _garbage()])
def test_garbage_is_refused_both_ways_naming_the_file(what, doc):
    typed, plain = both_ways("/c/s/status.json", doc)
    assert typed == plain == ("refused", True), (typed, plain)
    if what in ("durationMs a list", "an observed metric a number"):
        return  # inside a report: see _garbage
    with pytest.raises(ControlFileError):
        StatusDocument.from_dict("/c/s/status.json", doc)


def test_the_checks_are_the_documents_own_with_its_messages():
    doc = json.loads((FIXTURES[0].parent / "etl_dag_phase1_running.json").read_text())
    for name, value in (("state", "DANCING"), ("pid", "1"), ("stream", None), ("schema", 2)):
        broken = {**doc, name: value}
        with pytest.raises(ControlFileError) as whole:
            StatusDocument.from_dict("/p", broken)
        with pytest.raises(ControlFileError) as viewed:
            check_view("/p", view_of(broken))
        assert str(viewed.value) == str(whole.value)


def test_bytes_the_typed_decode_refuses_are_decided_by_the_standard_library():
    doc = json.loads((FIXTURES[0].parent / "etl_dag_phase1_running.json").read_text())
    raw = re.sub(rb'"numInputRows": [0-9]+', b'"numInputRows": NaN', json.dumps(doc).encode(), count=1)
    assert b"NaN" in raw
    view = json_object.status_view("/p", raw)  # msgspec refuses NaN; the standard library reads it
    assert view == view_of(json.loads(raw))
    with pytest.raises(ControlFileError, match="/p"):
        json_object.status_view("/p", b"{not json")
    with pytest.raises(ControlFileError, match="/p"):
        json_object.status_view("/p", b"[1, 2]")


def test_a_decoded_views_nodes_are_not_tracked_by_the_garbage_collector():
    """A triggerer decodes ~200 views a second: their ~100 nodes each are structs the collector never walks (a view
    is a tree, it holds no cycle to collect); only the lists and dicts in it are tracked."""
    import gc

    import msgspec

    def nodes(value: Any) -> list[Any]:
        if isinstance(value, msgspec.Struct):
            return [value] + [n for name in value.__struct_fields__ for n in nodes(getattr(value, name))]
        if isinstance(value, (list, dict)):
            return [n for item in (value.values() if isinstance(value, dict) else value) for n in nodes(item)]
        return []

    for name, doc in documents():
        view = json_object.status_view("/p", json.dumps(doc).encode())
        found = nodes(view)
        assert found and not any(gc.is_tracked(node) for node in found), name
        assert len([n for n in found if type(n).__name__ == "Report"]) == sum(
            len(q.get("recent_progress") or ()) for q in doc.get("queries") or ()), name
