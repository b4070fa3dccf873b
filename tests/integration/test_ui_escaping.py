"""Stored XSS on the Airflow origin (issue 25, item 4): the Streams page escapes everything it did not build.

The attack: whatever can write a stream's control directory (its own driver - a Spark exception that
quotes a record value, such as CAST_INVALID_INPUT, carries the value verbatim - or anyone with write
access to the shared storage) puts markup in a driver error, a query's status message, a lifecycle
step's detail, an action's error, version strings, a state operator's name, the Spark UI URL and a
directory name. Before, the lifecycle timeline's tooltip built HTML from those strings and ECharts set
it with ``innerHTML``: the markup ran in the viewer's Airflow session.

The real ``airflow api-server`` (PostgreSQL; no scheduler or Spark needed: the control files are
written directly into a control location the page discovers) and Debian's chromium through Playwright.
The test logs in, opens the overview and the stream's page, opens every tooltip of the lifecycle
timeline and the state chart's axis tooltip, and asserts that no element was created from the
payloads, no ``on*`` attribute exists, no ``javascript:`` link exists, the payload's scripts never ran
(``window.__pwned`` stays unset) and the payloads are shown as text.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_stack import AirflowStack, StackOptions, airflow_stack  # noqa: F401 - the fixture
from browser import CHROMIUM, chromium

pytestmark = [pytest.mark.airflow, pytest.mark.browser]

STREAM = "evil-stream"
RUN = "20261125T000000Z-0000evil"
IMG = '<img src=x onerror="window.top.__pwned=1">'
SCRIPT = "<script>window.top.__pwned=2</script>"
BREAKOUT = '" onmouseover="window.top.__pwned=3" autofocus onfocus="window.top.__pwned=3" x="'
SVG = "<svg/onload=window.top.__pwned=4>"
PAYLOAD = f"{IMG}{SCRIPT}{BREAKOUT}{SVG}"
#: What a scan finds if markup became DOM: any element of these kinds, and any inline handler.
SCAN = """() => {
  const found = [...document.querySelectorAll("img, svg, iframe, object, embed, video, audio, math, form")]
    .map((e) => e.outerHTML.slice(0, 120));
  const handlers = [...document.querySelectorAll("*")].filter((e) => [...e.attributes].some(
    (a) => a.name.toLowerCase().startsWith("on") || /^\\s*javascript:/i.test(a.value)))
    .map((e) => e.outerHTML.slice(0, 120));
  return {found, handlers, scripts: document.scripts.length, pwned: window.top.__pwned ?? null};
}"""


def _control_files(root: Path) -> Path:
    """A control location holding one stream whose every free-text field carries the payloads."""
    ctl = root / "control"
    d = ctl / STREAM
    d.mkdir(parents=True)
    now = time.time()
    iso = time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now - 20))
    progress = [{"id": "q", "runId": RUN, "name": f"q{IMG}", "timestamp": iso, "batchId": 7, "numInputRows": 10,
                 "inputRowsPerSecond": 1.0, "processedRowsPerSecond": 2.0, "durationMs": {"triggerExecution": 900},
                 "eventTime": {"watermark": iso, "max": iso},
                 "stateOperators": [{"operatorName": f"agg{IMG}{SVG}", "numRowsTotal": 5, "memoryUsedBytes": 1024}],
                 "sources": [{"description": SCRIPT}], "sink": {"description": IMG, "numOutputRows": 10}}]
    status = {"schema": 1, "stream": STREAM, "version": f"v1{IMG}", "run_id": RUN, "state": "RUNNING", "pid": 1,
              "host": f"host{SVG}", "started_at": now - 60, "heartbeat_at": now, "ready": True,
              "app_id": f"app{BREAKOUT}", "spark_ui": "javascript:window.top.__pwned=5",
              "queries": [{"id": "q", "run_id": RUN, "name": f"q{IMG}", "active": True, "last_batch_id": 7,
                           "status": {"message": f"Waiting {PAYLOAD}"}, "recent_progress": progress}],
              "last_exception": {"error_class": f"CAST_INVALID_INPUT{SVG}",
                                 "message": f"[CAST_INVALID_INPUT] The value '{PAYLOAD}' of the type \"STRING\" "
                                            "cannot be cast to \"INT\""}}
    (d / "status.json").write_text(json.dumps(status))
    spec = {"name": STREAM, "version": f"v0{SVG}", "application": f"/jobs/{IMG}.py", "control_location": str(ctl),
            "checkpoint_location": str(root / "ckpt"), "master": "local[2]",  # not sealed: a driver wrote it
            "assets": {"sources": [f"x-in://{IMG}"], "sinks": [SCRIPT, "javascript:window.top.__pwned=6"]}}
    (d / "deployed.json").write_text(json.dumps({"run_id": RUN, "at": now - 700, "spec": spec}))
    (d / "history.json").write_text(json.dumps([
        {"id": "a1", "action": "upgrade", "outcome": "FAILED", "from_version": IMG, "to_version": BREAKOUT,
         "started_at": now - 900, "ended_at": now - 800, "verdict": SVG, "owner": f"dag.task run {SCRIPT} try 1",
         "from_runtime": f"Spark 3.5.7{IMG}", "to_runtime": "Spark 4.2.0 (installed)",
         "error": f"CAST_INVALID_INPUT: The value '{PAYLOAD}' cannot be cast"}]))
    (d / "lifecycle.json").write_text(json.dumps({
        "id": "a2", "action": "restart", "step": "FAILED", "created_at": now - 600, "updated_at": now - 500,
        "owner": "dag.task run r try 1", "error": f"driver failed: {PAYLOAD}",
        "from_spec": {"version": IMG}, "to_spec": {"version": SVG},
        "steps": [{"step": "STOP_REQUESTED", "at": now - 590, "detail": f"stopping {PAYLOAD}"},
                  {"step": f"FAILED{IMG}", "at": now - 510, "detail": PAYLOAD}]}))
    # A directory whose name is markup: reported as an error (text), never a row.
    (ctl / IMG.replace("/", "")).mkdir()
    (ctl / IMG.replace("/", "") / "status.json").write_text("{}")
    return ctl


@pytest.fixture(scope="module")
def ui_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if CHROMIUM is None:
        pytest.skip("no chromium browser (apt-get install -y chromium; scripts/setup_env.sh does it)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.skip("the Python package playwright is missing (pip install -e '.[test]')")
    return tmp_path_factory.mktemp("ui-escaping")


@pytest.fixture(scope="module")
def airflow_stack_options(ui_root: Path) -> StackOptions:
    ctl = _control_files(ui_root)
    return StackOptions(services=("api-server",), env={
        "AIRFLOW__AIRFLOW_STREAMING__CONTROL_LOCATIONS": str(ctl),
        "AIRFLOW__AIRFLOW_STREAMING__UI_REFRESH_SECONDS": "2",
    })


@pytest.fixture(scope="module")
def browser(ui_root: Path) -> Iterator[Any]:
    """Debian's chromium through Playwright; its processes are stopped by pid at the end."""
    with chromium() as browser:
        yield browser


def _clean(page: Any, where: str) -> dict[str, Any]:
    scan = page.evaluate(SCAN)
    assert scan["found"] == [] and scan["handlers"] == [], (where, scan)
    assert scan["pwned"] is None, (where, scan)
    assert scan["scripts"] == 3, (where, scan)  # index.html's own three
    return scan


def _show_tips(page: Any, chart: str) -> list[str]:
    """Open the tooltip of every data item of every series of ``chart``; return the tooltip texts."""
    texts = []
    count = page.evaluate(f"() => echarts.getInstanceByDom(document.getElementById('chart-{chart}'))"
                          ".getOption().series.length")
    for series in range(count):
        for index in (0, 1):
            page.evaluate(f"""() => echarts.getInstanceByDom(document.getElementById('chart-{chart}'))
                .dispatchAction({{type: 'showTip', seriesIndex: {series}, dataIndex: {index}}})""")
            page.wait_for_timeout(150)
            texts.append(page.evaluate(f"() => document.getElementById('chart-{chart}').innerText"))
    return texts


def test_markup_in_control_files_creates_no_element_and_runs_no_script(airflow_stack: AirflowStack, browser: Any):
    page = browser.new_page(viewport={"width": 1500, "height": 1800})
    page.set_default_timeout(60_000)
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.goto(airflow_stack.base_url + "/auth/login")
    page.locator("input[name=username]").fill("admin")
    page.locator("input[name=password]").fill(airflow_stack.passwords["admin"])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/login" not in url)

    # The overview: the row, its version, driver error and last action; the directory named with markup.
    page.goto(airflow_stack.base_url + "/streaming/ui/")
    row = page.locator(f"tr[data-stream='{STREAM}']")
    row.wait_for()
    text = page.locator("#app").inner_text()
    assert "onerror=" in text and "not a valid stream name" in text  # the payloads are there, as text
    assert page.locator("a.spark-ui-link").count() == 0  # javascript: is no link
    _clean(page, "overview")

    # The stream's page: header, reasons, driver error, history, spec, queries, every chart.
    page.goto(airflow_stack.base_url + f"/streaming/ui/stream/{STREAM}")
    page.locator("#history tr[data-outcome='FAILED']").first.wait_for()
    page.locator("#chart-timeline[data-points='2']").wait_for()
    for summary in page.locator("#panels details > summary").all():
        summary.click()  # open the spec, driver and steps panels
    text = page.locator("#app").inner_text()
    assert IMG in text and SCRIPT in text and SVG in text and "CAST_INVALID_INPUT" in text
    # The declared Assets (Airflow knows none of them here: no link), as text.
    assets = page.locator("#assets").inner_text()
    assert f"x-in://{IMG}" in assets and SCRIPT in assets and "javascript:window.top.__pwned=6" in assets, assets
    assert page.locator("#assets a").count() == 0
    # Each version's Spark: the history row of a runtime change shows both, as text.
    runtimes = page.locator("#history tr[data-outcome='FAILED'] .runtime").first.inner_text()
    assert runtimes == f"Spark 3.5.7{IMG} → Spark 4.2.0 (installed)", runtimes
    _clean(page, "stream page")

    # The reported attack: the lifecycle timeline's tooltips (step detail, action error, versions).
    tips = _show_tips(page, "timeline")
    _clean(page, "timeline tooltips")
    assert any("stopping <img src=x" in t for t in tips), tips
    assert any("driver failed: <img" in t for t in tips), tips
    assert any(f"{IMG}→{SVG}" in t for t in tips), tips
    # ECharts' own axis tooltip names the series: the state operator's name comes from the driver.
    for chart in ("state", "rates", "eventtime"):
        _show_tips(page, chart)
        _clean(page, f"{chart} tooltip")
    page.mouse.move(700, 900)
    page.wait_for_timeout(300)
    _clean(page, "after hovering")
    time.sleep(2.5)  # a refresh re-renders everything from the API
    _clean(page, "after a refresh")
    assert dialogs == []
