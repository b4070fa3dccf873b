"""The Streams page with many streams (issue 23): search, filters and paging work in a real browser.

The real ``airflow api-server`` (PostgreSQL; no scheduler or Spark: the control files are written
directly into a control location, ``tests/synthetic_fleet.py``, with live stand-in driver processes) and
Debian's chromium through Playwright, as ``test_ui_escaping.py`` does. 60 streams: every 10th FAILED,
every 3rd with a supervisor ledger (a restart in the window), versions v1/v2/v3. Speed is measured by
``bench/scale_ui_bench.py``, not asserted here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_stack import AirflowStack, StackOptions, airflow_stack  # noqa: F401 - the fixture
from browser import CHROMIUM, chromium
from synthetic_fleet import StandInDrivers, build_fleet

pytestmark = [pytest.mark.airflow, pytest.mark.browser]

STREAMS = 60
ROWS = "table#streams tbody tr"


@pytest.fixture(scope="module")
def fleet_root(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if CHROMIUM is None:
        pytest.skip("no chromium browser (apt-get install -y chromium; scripts/setup_env.sh does it)")
    try:
        import playwright  # noqa: F401
    except ImportError:
        pytest.skip("the Python package playwright is missing (pip install -e '.[test]')")
    root = tmp_path_factory.mktemp("ui-many")
    with StandInDrivers(3, prefix="ui-many") as drivers:
        build_fleet(root, STREAMS, drivers, failed_every=10, ledger_every=3, hot_standby_every=25)
        yield root  # the stand-ins live (the streams' drivers are alive) for the module


@pytest.fixture(scope="module")
def airflow_stack_options(fleet_root: Path) -> StackOptions:
    assert os.environ.get("AIRFLOW__AIRFLOW_STREAMING__CONTROL_SEAL_KEY")  # the stack seals like the fleet did
    return StackOptions(services=("api-server",), env={
        "AIRFLOW__AIRFLOW_STREAMING__CONTROL_LOCATIONS": str(fleet_root / "control"),
        "AIRFLOW__AIRFLOW_STREAMING__UI_REFRESH_SECONDS": "3",
    })


@pytest.fixture(scope="module")
def browser(fleet_root: Path) -> Iterator[Any]:
    """Debian's chromium through Playwright; its processes are stopped by pid at the end."""
    with chromium() as browser:
        yield browser


def _names(page: Any) -> list[str]:
    return page.eval_on_selector_all(ROWS, "(rows) => rows.map((r) => r.dataset.stream)")


def _wait(page: Any, condition: str) -> None:
    page.wait_for_function(f"() => {{ const rows = [...document.querySelectorAll('{ROWS}')]; "
                           f"const info = document.querySelector('#page-info').textContent; return {condition}; }}")


def test_the_plugin_api_refuses_requests_without_a_valid_session_or_token(airflow_stack: AirflowStack):
    """No session, a forged bearer token or a garbage cookie: 401/403 and no stream's name in the answer; a signed-in
    viewer gets the overview. (Here, on this module's real api-server, rather than beside a live driver in
    test_ui.py, whose dashboard test is in the long tier.)"""
    stream = "fleet-0001"
    for path in ("/streaming/api/streams", f"/streaming/api/streams/{stream}"):
        anonymous = airflow_stack.api("GET", path, user=None, expect=None)
        assert anonymous.status_code == 401, anonymous.text
        forged = airflow_stack.api("GET", path, user=None, headers={"Authorization": "Bearer not-a-jwt"}, expect=None)
        assert forged.status_code in (401, 403), forged.text
        cookie = airflow_stack.api("GET", path, user=None, headers={"Cookie": "_token=garbage"}, expect=None)
        assert cookie.status_code in (401, 403), cookie.text
        assert "fleet-0" not in anonymous.text + forged.text + cookie.text
    assert {"streams", "errors", "settings"} <= set(airflow_stack.api("GET", "/streaming/api/streams", user="viewer"))
    body = airflow_stack.api("GET", "/streaming/api/streams", user="admin")
    assert body["streams"] and all(row["name"].startswith("fleet-") for row in body["streams"])


def test_search_filters_and_paging_in_the_browser(airflow_stack: AirflowStack, browser: Any):
    page = browser.new_page(viewport={"width": 1500, "height": 1200})
    page.set_default_timeout(60_000)
    page.goto(airflow_stack.base_url + "/auth/login")
    page.locator("input[name=username]").fill("admin")
    page.locator("input[name=password]").fill(airflow_stack.passwords["admin"])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/login" not in url)
    page.goto(airflow_stack.base_url + "/streaming/ui/")
    page.locator(ROWS).first.wait_for()

    # The first page: 50 of 60, the 6 FAILED first; counts of every stream in the header.
    _wait(page, "rows.length === 50 && info.includes('page 1 of 2')")
    assert "60 of 60 streams" in page.locator("#page-info").inner_text()
    assert {page.locator(ROWS).nth(i).get_attribute("data-health") for i in range(6)} == {"FAILED"}
    assert "6 failed" in page.locator("#counts").inner_text()

    # Paging: the next page holds the other 10; back again.
    page.locator("#page-next").click()
    _wait(page, "rows.length === 10 && info.includes('page 2 of 2')")
    second = set(_names(page))
    assert page.locator("#page-next").is_disabled()
    page.locator("#page-prev").click()
    _wait(page, "rows.length === 50 && info.includes('page 1 of 2')")
    assert second.isdisjoint(_names(page)) and len(second | set(_names(page))) == STREAMS

    # Search by name (server side, case-insensitive).
    page.locator("#stream-search").fill("FLEET-004")
    _wait(page, "rows.length === 10 && info.includes('10 of 60')")
    assert sorted(_names(page)) == [f"fleet-{i:04d}" for i in range(40, 50)]
    # fleet-0049 wants a hot standby and has none prepared: the row says so (the reconcile core's view),
    # the others of the page say nothing of a standby.
    standby = page.locator("tr[data-stream=fleet-0049] [data-standby]")
    assert standby.get_attribute("data-standby") == "MISSING" and standby.inner_text() == "hot standby missing"
    assert page.locator("[data-standby]").count() == 1
    page.locator("#stream-search").fill("")
    _wait(page, "rows.length === 50")

    # Filters: health, supervisor, version, combined (AND); options carry the counts.
    assert "FAILED (6)" in page.locator("#filter-health").inner_text()
    page.locator("#filter-health").select_option("FAILED")
    _wait(page, "rows.length === 6 && rows.every((r) => r.dataset.health === 'FAILED')")
    page.locator("#filter-version").select_option("v1")  # FAILED: 9, 19, ..., 59; v1: i % 3 == 0 -> 9, 39
    _wait(page, "rows.length === 2")
    assert sorted(_names(page)) == ["fleet-0009", "fleet-0039"]
    page.locator("#filter-health").select_option("")
    page.locator("#filter-version").select_option("")
    page.locator("#filter-supervisor").select_option("restarted")
    _wait(page, "rows.length === 20")
    assert sorted(_names(page)) == [f"fleet-{i:04d}" for i in range(0, STREAMS, 3)]
    page.locator("#filter-supervisor").select_option("")

    # Sorting by name (server side), descending on a second click; a refresh keeps the choice.
    page.locator("th[data-sort=name]").click()
    _wait(page, "rows.length === 50 && rows[0].dataset.stream === 'fleet-0000'")
    page.locator("th[data-sort=name]").click()
    _wait(page, "rows[0].dataset.stream === 'fleet-0059'")
    page.wait_for_timeout(3500)  # one refresh
    assert _names(page)[0] == "fleet-0059"
    page.close()
