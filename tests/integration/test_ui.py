"""The Streams UI in the real ``airflow api-server``, driven by headless Chromium as a person would use it.

One module-scoped real Airflow (PostgreSQL, api-server, scheduler, dag-processor, triggerer: see
``tests/airflow_stack.py``) and one real stream deployed by a DAG run through the provider. The browser
logs in through the login page, opens "Streams" in the navigation, and the test asserts on what is
rendered: the stream's row, a chart holding the points of the live ``recentProgress``, the lifecycle
history and the DAG run that deployed it, an action triggered as a DAG run of the operations DAG, the
extra links on the task page, and the row highlighted FAILED after the driver is SIGKILLed.
Screenshots go to a temporary directory, so that a suite run leaves the tracked tree as it found it; to
refresh the README's images, run it with ``AIRFLOW_STREAMING_SCREENSHOTS=docs/screenshots``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from airflow_stack import AirflowStack, StackOptions, airflow_stack  # noqa: F401 - the fixture
from browser import CHROMIUM, chromium
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.desired_state import load_desired_state
from spark_jobs.event_generator import generate_events
from streams import StreamRegistry, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.airflow, pytest.mark.browser]

REPO = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("AIRFLOW_STREAMING_SCREENSHOTS") or tempfile.mkdtemp(prefix="airflow-streaming-ui-shots-"))
FIXTURES = REPO / "tests" / "fixtures" / "status"
SECRET = "ui-test-secret-7f3a9"
STREAM = "ui-signals"

DEMO_DAG = '''
import os
import pendulum
from airflow.sdk import dag
from airflow_streaming.lifecycle.desired_state import load_desired_state
from airflow_streaming.operators.deploy import SparkStreamDeployOperator
from airflow_streaming.sensors.health import SparkStreamHealthSensor

SPEC = load_desired_state(os.environ["AIRFLOW_STREAMING_DESIRED_STATE"]).target("ui-signals").spec.to_dict()


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def ui_demo():
    deploy = SparkStreamDeployOperator(task_id="deploy", spec=SPEC)
    # report mode, deferrable: one verdict polled by the real triggerer
    deploy >> SparkStreamHealthSensor(task_id="health", spec=SPEC, mode="report", poke_interval=3, deferrable=True)


ui_demo()
'''


def _desired_state(root: Path, ui_port: int) -> str:
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
    spark.ui.enabled: "true"
    spark.ui.port: "{ui_port}"
    spark.hadoop.fs.s3a.secret.key: {SECRET}
streams:
  {STREAM}:
    version: v1
    spec: {{checkpoint_location: {root}/checkpoints/{STREAM}}}
    versions:
      v1:
        application: device_signals
        application_args: [--input, {root}/input, --output, {root}/output, --window, 10 seconds,
                           --watermark, 5 seconds]
""")
    return str(path)


@pytest.fixture(scope="module")
def ui_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if CHROMIUM is None:
        pytest.skip("no chromium browser (apt-get install -y chromium; scripts/setup_env.sh does it)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.skip("the Python package playwright is missing (the `test` dependency group: scripts/setup_env.sh)")
    return tmp_path_factory.mktemp("ui")


@pytest.fixture(scope="module")
def airflow_stack_options(ui_root: Path) -> StackOptions:
    from airflow_stack import free_port

    dags = ui_root / "dags"
    dags.mkdir()
    (dags / "ui_demo.py").write_text(DEMO_DAG)
    shutil.copy(REPO / "dags" / "stream_operations.py", dags / "stream_operations.py")
    desired = _desired_state(ui_root, free_port())
    # Two streams found only in a control location: a recorded stopped one, and one with garbage files.
    other = ui_root / "other-control"
    (other / "legacy-signals").mkdir(parents=True)
    shutil.copy(FIXTURES / "device_signals_stopped.json", other / "legacy-signals" / "status.json")
    (other / "broken-stream").mkdir()
    (other / "broken-stream" / "status.json").write_text("{ this is not json")
    return StackOptions(dags_folder=str(dags), env={
        "AIRFLOW_STREAMING_DESIRED_STATE": desired,
        "AIRFLOW__AIRFLOW_STREAMING__CONTROL_LOCATIONS": f"{ui_root}/control,{other}",
        "AIRFLOW__AIRFLOW_STREAMING__UI_ACTIONS": "True",
        "AIRFLOW__AIRFLOW_STREAMING__UI_REFRESH_SECONDS": "2",
    })


@pytest.fixture(scope="module")
def stream(ui_root: Path, airflow_stack: AirflowStack) -> Iterator[dict[str, Any]]:
    """Feed input continuously and clean up whatever driver the DAG starts (by pid), whatever happens."""
    spec = load_desired_state(str(ui_root / "desired_state.yaml")).target(STREAM).spec
    registry = StreamRegistry(ui_root)
    hook = registry.hook(spec)
    stop = threading.Event()
    # Event time follows the wall clock, so windows close and the watermark advances as in production.
    generate_events(str(ui_root / "input"), count=400, files=2, run="seed", event_time_step=0.01,
                    event_time_start=datetime.now(timezone.utc) - timedelta(seconds=5))

    def feed() -> None:
        i = 10
        while not stop.wait(3.0) and i < 400:  # bounded: at most ~20 minutes of input
            generate_events(str(ui_root / "input"), count=60, files=1, run=f"live{i}", file_start_index=i,
                            event_time_start=datetime.now(timezone.utc), event_time_step=0.05)
            i += 1

    feeder = threading.Thread(target=feed, name="ui-input-feeder", daemon=True)
    feeder.start()
    try:
        yield {"spec": spec, "hook": hook}
    finally:
        stop.set()
        feeder.join(10)
        registry.kill_all()


@pytest.fixture(scope="module")
def browser(ui_root: Path) -> Iterator[Any]:
    """Debian's chromium through Playwright; its processes are stopped by pid at the end."""
    with chromium() as browser:
        yield browser


def _status(hook: SparkStreamHook) -> dict[str, Any]:
    return json.loads(Path(hook.paths.status).read_text())


def _shot(page: Any, name: str) -> Path:
    SHOTS.mkdir(parents=True, exist_ok=True)
    path = SHOTS / name
    page.screenshot(path=str(path))
    return path


def _streams_frame(page: Any) -> Any:
    frame = page.frame_locator("iframe[title='Streams']")
    frame.locator("#app").wait_for()
    return frame


@pytest.mark.long(covered_by="tests/integration/test_ui_many_streams.py::"
                           "test_search_filters_and_paging_in_the_browser")
def test_streams_dashboard_in_the_real_airflow_ui(airflow_stack: AirflowStack, stream: dict[str, Any], browser: Any):
    hook: SparkStreamHook = stream["hook"]
    started = time.monotonic()

    # A real stream, deployed by a DAG run through the provider (LocalExecutor, real triggerer for the sensor).
    airflow_stack.wait_for_dag("ui_demo")
    airflow_stack.wait_for_dag("stream_operations")
    run_id = airflow_stack.trigger("ui_demo")
    airflow_stack.wait_for_task("ui_demo", run_id, "deploy", timeout=360)
    assert airflow_stack.wait_for_run("ui_demo", run_id, timeout=180) == "success"
    wait_for(lambda: len((_status(hook)["queries"] or [{}])[0].get("recent_progress") or []) >= 3, 120,
             "three batches of live progress")
    print(f"stream running after {time.monotonic() - started:.0f}s", file=sys.stderr)

    page = browser.new_page(viewport={"width": 1500, "height": 1000})
    page.set_default_timeout(60_000)
    # Log in as a person would: the UI sends us to the login page.
    page.goto(airflow_stack.base_url + "/")
    page.wait_for_url("**/auth/login**")
    page.locator("input[name=username]").fill("admin")
    page.locator("input[name=password]").fill(airflow_stack.passwords["admin"])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/login" not in url)

    # Streams in the navigation -> the overview.
    page.get_by_role("link", name="Streams").first.click()
    page.wait_for_url("**/plugin/streams**")
    frame = _streams_frame(page)
    row = frame.locator(f"tr[data-stream='{STREAM}']")
    row.wait_for()
    wait_for(lambda: row.get_attribute("data-health") in ("HEALTHY", "IDLE"), 60, "the stream judged healthy")
    assert "v1" in row.inner_text()
    assert frame.locator("tr[data-stream='legacy-signals'][data-health='STOPPED']").count() == 1
    broken = frame.locator("tr[data-stream='broken-stream']")
    assert broken.get_attribute("data-health") == "UNKNOWN" and "status.json" in broken.inner_text()
    frame.locator(f"tr[data-stream='{STREAM}'] td:nth-child(5)").get_by_text("#").wait_for()
    overview_png = _shot(page, "overview.png")

    # One stream: charts from the live recentProgress.
    frame.locator(f"tr[data-stream='{STREAM}'] a.stream-link").click()
    frame = _streams_frame(page)
    frame.locator("#chart-rates[data-points]").wait_for()

    def chart_times() -> set[float]:
        option = frame.locator("#chart-rates").evaluate(
            "n => echarts.getInstanceByDom(n).getOption().series[0].data.map(p => p[0])")
        return set(option)

    def live_times() -> set[float]:
        from airflow_streaming.ui.views import ts_ms

        progress = _status(hook)["queries"][0]["recent_progress"]
        return {ts_ms(p["timestamp"]) for p in progress}

    # The chart holds the points of the status document the driver wrote a moment ago (it refreshes live).
    live = wait_for(lambda: (t := live_times()) and len(t) >= 3 and t, 30, "live progress")
    wait_for(lambda: max(live) in chart_times(), 30, "the newest live batch in the rates chart")
    assert len(chart_times() & live) >= 3
    newer = wait_for(lambda: (t := live_times()) and max(t) > max(live) and t, 60, "a newer batch")
    wait_for(lambda: max(newer) in chart_times(), 30, "the chart refreshed with the newer batch")
    for chart in ("duration", "rows", "state", "eventtime", "timeline"):
        assert frame.locator(f"#chart-{chart}").get_attribute("data-points") not in (None, "", "0"), chart

    def series_values(chart: str) -> list[list[Any]]:
        return frame.locator(f"#chart-{chart}").evaluate(
            "n => echarts.getInstanceByDom(n).getOption().series.map(s => s.data.map(p => p[1]))")

    # The stateful job: state rows per operator and the watermark, as Spark reported them.
    wait_for(lambda: any(v for v in series_values("state")[0] if v), 60, "state rows in the state chart")
    wait_for(lambda: any(v is not None for v in series_values("eventtime")[0]), 60, "a watermark lag point")
    trigger_line = frame.locator("#chart-duration").evaluate(
        "n => echarts.getInstanceByDom(n).getOption().series[0].markLine.data[0].yAxis")
    assert trigger_line == 2000

    # Lifecycle history with the deploy, linked to the DAG run that acted on the stream.
    history = frame.locator("#history tr[data-action='deploy'][data-outcome='SUCCEEDED']")
    history.first.wait_for()
    runs = frame.locator("#dag-runs a.dag-run-link")
    runs.first.wait_for()
    assert "ui_demo / deploy" in frame.locator("#dag-runs").inner_text()
    html = frame.locator("html").inner_html()
    assert SECRET not in html and "***" in html  # the spec panel shows the masked conf key
    page.set_viewport_size({"width": 1500, "height": 1750})  # the whole page: charts and the lifecycle timeline
    frame.locator("#chart-timeline[data-points]").wait_for()
    time.sleep(1)
    stream_png = _shot(page, "stream.png")
    page.set_viewport_size({"width": 1500, "height": 1000})

    # An action is a DAG run of the operations DAG, created with the user's session through the REST API.
    frame.locator("#op-action").select_option("status")
    frame.locator("#op-trigger").click()
    frame.locator("#op-trigger").click()  # confirm
    triggered = frame.locator("#op-result a.triggered-run")
    triggered.wait_for()
    op_run = triggered.inner_text()
    run = airflow_stack.api("GET", f"/api/v2/dags/stream_operations/dagRuns/{op_run}")
    assert run["conf"]["stream"] == STREAM and run["conf"]["action"] == "status"
    assert airflow_stack.wait_for_run("stream_operations", op_run, timeout=240) == "success"

    # From the stream to the DAG run: the Airflow UI itself navigates there.
    frame.locator("#dag-runs a.dag-run-link", has_text="ui_demo / deploy").first.click()
    page.wait_for_url("**/dags/ui_demo/runs/**/tasks/deploy")
    page.locator("iframe[title='Streams']").wait_for(state="detached")  # the Airflow UI's own page now

    # From the task to the stream: the extra links, computed by the worker when the task finished.
    links = airflow_stack.api("GET", f"/api/v2/dags/ui_demo/dagRuns/{run_id}/taskInstances/deploy/links")
    dashboard = links["extra_links"]["Stream dashboard"]
    spark_ui = links["extra_links"]["Spark UI"]
    assert dashboard == f"{airflow_stack.base_url}/plugin/streams/streaming/ui/stream/{STREAM}"
    assert spark_ui and spark_ui == _status(hook)["spark_ui"]
    sensor_links = airflow_stack.api("GET", f"/api/v2/dags/ui_demo/dagRuns/{run_id}/taskInstances/health/links")
    assert sensor_links["extra_links"]["Stream dashboard"] == dashboard
    page.goto(f"{airflow_stack.base_url}/dags/ui_demo/runs/{run_id}/tasks/deploy/details")
    shown = page.get_by_role("link", name="Stream dashboard")
    shown.wait_for()
    assert shown.get_attribute("href") == dashboard
    assert page.get_by_role("link", name="Spark UI").get_attribute("href") == spark_ui
    task_png = _shot(page, "task-links.png")

    # The driver dies (SIGKILL, no graceful stop): the overview highlights the stream as FAILED.
    record = hook.driver_record()
    assert record is not None and record.submit_pid
    os.killpg(record.submit_pid, signal.SIGKILL)
    wait_for(lambda: not hook.alive(record), 30, "the killed driver gone")
    page.goto(dashboard.replace(f"stream/{STREAM}", ""))
    frame = _streams_frame(page)
    failed = frame.locator(f"tr[data-stream='{STREAM}'][data-health='FAILED']")
    failed.wait_for(timeout=30_000)
    assert "sev-3" in (failed.get_attribute("class") or "")
    assert "GONE" in failed.inner_text() and failed.locator("a.spark-ui-link").count() == 0
    background = failed.evaluate("n => getComputedStyle(n).backgroundColor")
    assert background not in ("rgba(0, 0, 0, 0)", "transparent"), background
    # FAILED sorts first by default.
    assert frame.locator("#streams tbody tr").first.get_attribute("data-stream") == STREAM
    failed_png = _shot(page, "overview-failed.png")

    for png in (overview_png, stream_png, task_png, failed_png):
        assert png.stat().st_size > 10_000, png
    print(f"UI test done in {time.monotonic() - started:.0f}s; screenshots in {SHOTS}", file=sys.stderr)
