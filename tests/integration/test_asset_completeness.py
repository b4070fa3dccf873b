"""Completeness events on a real scheduler and triggerer: a DAG scheduled on a stream's hourly Asset.

One real Airflow (``tests/airflow_stack.py``: PostgreSQL, api-server, scheduler, dag-processor, triggerer).
The DAG ``downstream`` is scheduled on ``Asset("stream://asset-s/hourly")`` whose ``AssetWatcher`` runs
:class:`~airflow_streaming.triggers.completeness.SparkStreamCompletenessTrigger` in the triggerer; its task
appends the event extras it was triggered by to a file. No Spark runs: the test writes the stream's
checkpoint as Spark writes it (``offsets/<N>`` with ``batchWatermarkMs``, then ``commits/<N>``) and its
status document (with the progress reports the counts come from), with synthetic event times, so that
three hours close one after another. In order:

a. batches 0-2 committed, the watermark past 01:00: one run, for hour 00:00-01:00, with its counts;
b. batch 3 planned with a watermark past 02:00 but not committed: no run (an uncommitted batch proves nothing);
c. the triggerer is stopped, batch 3 is committed meanwhile, the triggerer starts again: one run, for
   hour 01:00-02:00 (the new triggerer resumes from the cursor: hour 00 is not emitted again);
d. batch 4 committed past 03:00: one run, for hour 02:00-03:00.

Finally: exactly three runs of ``downstream``, one event each, the three hours in order, none twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from airflow_stack import AirflowStack, StackOptions, airflow_stack, stop_process_group  # noqa: F401 - the fixture
from airflow_streaming.completeness import HOUR_MS
from airflow_streaming.control import contract
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.control.contract import ControlPaths
from airflow_streaming.hooks.completeness import CURSOR_SLOT

pytestmark = [pytest.mark.airflow]

STREAM = "asset-s"
QUERY = "6f1c2d3e-0000-4000-8000-000000000037"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z

DOWNSTREAM_DAG = '''
import json
import os
import pendulum
from airflow.sdk import Asset, AssetWatcher, dag, task
from airflow_streaming.triggers.completeness import SparkStreamCompletenessTrigger

SPEC = json.loads(open(os.environ["ASSET_TEST_SPEC"]).read())
HOURLY = Asset(name="asset-s_hourly", uri="stream://asset-s/hourly", watchers=[AssetWatcher(
    name="asset-s_hourly", trigger=SparkStreamCompletenessTrigger(spec=SPEC, rule={"period": "hourly"}, poll_interval=1))])


@dag(schedule=[HOURLY], start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def downstream():
    @task
    def record(triggering_asset_events=None, run_id=None):
        extras = [event.extra for events in triggering_asset_events.values() for event in events]
        with open(os.environ["ASSET_TEST_OUT"], "a") as fh:
            fh.write(json.dumps({"run_id": run_id, "extras": extras}) + "\\n")

    record()


downstream()
'''


def offsets(wm: int) -> bytes:
    meta = {"batchWatermarkMs": wm, "batchTimestampMs": 1_700_000_000_000, "conf": {"spark.sql.shuffle.partitions": "2"}}
    return f'v1\n{json.dumps(meta)}\n{{"logOffset":3}}'.encode()


class SyntheticStream:
    """The checkpoint and status document a running stream would leave, written one batch at a time."""

    def __init__(self, root: Path):
        self.spec = {"name": STREAM, "application": "events_etl", "checkpoint_location": str(root / "ckpt"),
                     "control_location": str(root / "control"), "master": "local[2]", "version": "v3"}
        self.ckpt = root / "ckpt"
        for sub in ("offsets", "commits"):
            (self.ckpt / sub).mkdir(parents=True)
        (self.ckpt / "metadata").write_text(json.dumps({"id": QUERY}))
        self.paths = ControlPaths(str(root / "control" / STREAM))
        self.progress: list[dict] = []

    def plan(self, batch: int, wm: int, rows: int) -> None:
        (self.ckpt / "offsets" / str(batch)).write_bytes(offsets(wm))
        self.progress.append({"id": QUERY, "batchId": batch, "numInputRows": rows,
                              "stateOperators": [{"numRowsDroppedByWatermark": batch}]})
        doc = contract.StatusDocument(
            stream=STREAM, version="v3", run_id="r1", state=contract.RUNNING, pid=1, host="h", started_at=1.0,
            heartbeat_at=2.0, queries=[contract.QueryStatus(QUERY, "r1", STREAM, True, recent_progress=self.progress)])
        contract.write_status(LocalStorage(), self.paths, doc)

    def commit(self, batch: int) -> None:
        (self.ckpt / "commits" / str(batch)).write_bytes(b'v1\n{"nextBatchWatermarkMs":0}')


@pytest.fixture(scope="module")
def stream_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("asset-stream")


@pytest.fixture(scope="module")
def stream(stream_root) -> SyntheticStream:
    return SyntheticStream(stream_root)


@pytest.fixture(scope="module")
def airflow_stack_options(tmp_path_factory, stream_root, stream) -> StackOptions:
    dags = tmp_path_factory.mktemp("dags")
    (dags / "downstream.py").write_text(DOWNSTREAM_DAG)
    (stream_root / "spec.json").write_text(json.dumps(stream.spec))
    return StackOptions(dags_folder=str(dags), services=("api-server", "scheduler", "dag-processor", "triggerer"),
                        env={"ASSET_TEST_SPEC": str(stream_root / "spec.json"),
                             "ASSET_TEST_OUT": str(stream_root / "runs.jsonl")})


def hour(k: int) -> int:
    return T0 + k * HOUR_MS


def recorded(root: Path) -> list[dict]:
    path = root / "runs.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def wait_recorded(stack: AirflowStack, root: Path, count: int, timeout: float = 90.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stack.check_alive()
        runs = recorded(root)
        if len(runs) >= count:
            return runs
        time.sleep(1)
    raise TimeoutError(f"{count} run(s) of downstream not recorded after {timeout:.0f}s (got {recorded(root)}); "
                       f"triggerer log:\n{stack.log_tail('triggerer')}\nscheduler log:\n{stack.log_tail('scheduler')}")


def identity(k: int) -> str:
    from airflow_streaming.completeness import iso_ms

    return f"{iso_ms(hour(k))}/{iso_ms(hour(k + 1))}"


def test_one_downstream_run_per_closed_hour_across_a_triggerer_restart(airflow_stack: AirflowStack, stream_root,  # noqa: F811
                                                                        stream: SyntheticStream):
    airflow_stack.wait_for_dag("downstream")

    # a. hour 0 closes once batch 2 (watermark past 01:00) is committed
    for batch, wm, rows in ((0, 0, 5), (1, hour(0) + 60_000, 7), (2, hour(1) + 60_000, 11)):
        stream.plan(batch, wm, rows)
        stream.commit(batch)
    (first,) = wait_recorded(airflow_stack, stream_root, 1)
    (extra,) = first["extras"]
    assert extra["from_trigger"] is True
    payload = extra["payload"]
    assert payload["identity"] == identity(0) and payload["stream"] == STREAM and payload["version"] == "v3"
    assert (payload["batch_id"], payload["period"], payload["period_start"]) == (2, "hourly", "2026-01-01T00:00:00.000Z")
    assert (payload["batches"], payload["input_rows"], payload["late_rows"]) == (2, 12, 1)  # batches 0 and 1

    # b. planned, not committed: nothing
    stream.plan(3, hour(2) + 60_000, 13)
    time.sleep(8)  # eight polls of the trigger
    assert len(recorded(stream_root)) == 1

    # c. the triggerer restarts; the commit lands while it is down
    old_pid = airflow_stack.processes["triggerer"].pid
    stop_process_group(airflow_stack.processes["triggerer"], "triggerer")
    stream.commit(3)
    assert airflow_stack._start_service("triggerer").pid != old_pid
    runs = wait_recorded(airflow_stack, stream_root, 2, timeout=120)
    assert [r["extras"][0]["payload"]["identity"] for r in runs] == [identity(0), identity(1)]
    assert runs[1]["extras"][0]["payload"]["batch_id"] == 3

    # d. one more hour
    stream.plan(4, hour(3) + 60_000, 17)
    stream.commit(4)
    runs = wait_recorded(airflow_stack, stream_root, 3)
    time.sleep(6)  # nothing else comes
    runs = recorded(stream_root)
    assert [len(r["extras"]) for r in runs] == [1, 1, 1]
    assert [r["extras"][0]["payload"]["identity"] for r in runs] == [identity(0), identity(1), identity(2)]
    assert len({r["run_id"] for r in runs}) == 3
    dag_runs = airflow_stack.api("GET", "/api/v2/dags/downstream/dagRuns")["dag_runs"]
    assert len(dag_runs) == 3 and {r["run_type"] for r in dag_runs} == {"asset_triggered"}
    data = next((stream_root / "control" / STREAM / "completeness").glob("*.json")).read_bytes()
    slots = [data[k * CURSOR_SLOT:(k + 1) * CURSOR_SLOT].split(b" ", 2) for k in (0, 1)]  # <crc> <seq> <json>
    cursor = max((int(seq), json.loads(doc)) for _, seq, doc in slots if seq.isdigit())[1]  # the newest slot
    assert cursor["identity"] == identity(2)
