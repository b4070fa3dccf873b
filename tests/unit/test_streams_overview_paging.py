"""The Streams overview for many streams (issue 23): search, filters, sort and paging on the server, counts
per value, and the per-DAG access rule kept (a user's filters, counts and pages only ever cover streams
whose deploying DAG they may read). Real control files (``tests/synthetic_fleet.py``: live stand-in
driver processes), the plugin's real FastAPI app, SimpleAuthManager with teams and the tests' metadata DB."""

from __future__ import annotations

import time

import pytest

from airflow_streaming.ui.overview import BadQuery, OverviewQuery, StreamSummary, select, summarize, supervisor_value
from airflow_streaming.ui.streams import discover
from synthetic_fleet import StandInDrivers, build_fleet


def _s(name: str, health: str = "HEALTHY", version: str | None = "v1", supervisor: str = "none",
       severity: int | None = None) -> StreamSummary:
    from airflow_streaming.ui.views import SEVERITY

    return StreamSummary(name, version, health, SEVERITY[health] if severity is None else severity, supervisor)


def test_query_parameters_are_parsed_and_bad_ones_named():
    q = OverviewQuery.from_params({"q": " Orders ", "health": "failed,STALLED", "supervisor": "gave_up",
                                   "version": "v1,v2", "sort": "name", "page": "3", "per_page": "25"})
    assert (q.q, q.health, q.supervisor, q.version) == ("orders", {"FAILED", "STALLED"}, {"gave_up"}, {"v1", "v2"})
    assert (q.sort, q.desc, q.page, q.per_page) == ("name", False, 3, 25)
    assert OverviewQuery.from_params({}) == OverviewQuery()  # severity, worst first, page 1 of 50
    for params, named in (({"health": "SICK"}, "health"), ({"supervisor": "maybe"}, "supervisor"),
                          ({"sort": "lag"}, "sort"), ({"dir": "up"}, "dir"), ({"page": "0"}, "page"),
                          ({"page": "x"}, "page"), ({"per_page": "100000"}, "per_page"), ({"q": "x" * 201}, "q")):
        with pytest.raises(BadQuery, match=f"^{named}:"):
            OverviewQuery.from_params(params)


def test_select_filters_counts_sorts_and_pages():
    summaries = [_s(f"s{i:02d}", health="FAILED" if i % 5 == 0 else "HEALTHY", version=f"v{i % 3}",
                    supervisor="gave_up" if i == 7 else "ok") for i in range(23)]
    everything = select(summaries, OverviewQuery(per_page=10))
    assert (everything.total, everything.matched, everything.pages) == (23, 23, 3)
    assert everything.facets["health"] == {"FAILED": 5, "HEALTHY": 18}
    assert everything.facets["supervisor"] == {"ok": 22, "gave_up": 1}
    assert everything.names[:5] == ["s00", "s05", "s10", "s15", "s20"]  # worst first, ties by name
    last = select(summaries, OverviewQuery(per_page=10, page=3))
    assert last.names == ["s19", "s21", "s22"] and last.page == 3
    beyond = select(summaries, OverviewQuery(per_page=10, page=99))
    assert beyond.page == 3 and beyond.names == last.names  # a page past the end shows the last one
    failed_v1 = select(summaries, OverviewQuery(health=frozenset({"FAILED"}), version=frozenset({"v1"})))
    assert failed_v1.names == ["s10"] and failed_v1.matched == 1 and failed_v1.facets == everything.facets
    search = select(summaries, OverviewQuery(q="s1", sort="name", desc=True))
    assert search.names == [f"s{i}" for i in range(19, 9, -1)]
    assert select(summaries, OverviewQuery(supervisor=frozenset({"gave_up"}))).names == ["s07"]
    assert select(summaries, OverviewQuery(q="nothing")).names == [] and select([], OverviewQuery()).pages == 1


def test_supervisor_value_of_a_ledger():
    now = 10_000.0
    assert supervisor_value(None, now) == "none"
    assert supervisor_value({"failures": [], "gave_up": False}, now) == "ok"
    assert supervisor_value({"failures": [now - 60]}, now) == "restarted"
    assert supervisor_value({"failures": [now - 7200]}, now) == "ok"  # outside the hour's window
    assert supervisor_value({"failures": [now - 60], "gave_up": True}, now) == "gave_up"


def test_summaries_of_real_control_files_agree_with_the_full_rows(tmp_path):
    from airflow_streaming.ui import views
    from airflow_streaming.ui.streams import read_stream

    with StandInDrivers(2) as drivers:
        build_fleet(tmp_path, 12, drivers, failed_every=4, ledger_every=5)
        found = discover(None, [str(tmp_path / "control")])
        now = time.time()
        for ref in found.streams:
            summary = summarize(ref, now)
            row = views.overview_row(read_stream(ref, now))
            assert (summary.name, summary.version, summary.health, summary.severity) == \
                (row["name"], row["version"], row["health"]["state"], row["severity"]), ref.name
            assert summary.supervisor == ("none" if row["supervisor"] is None else "restarted"), ref.name
        assert {summarize(r, now).health for r in found.streams} == {"HEALTHY", "FAILED"}


def test_the_api_searches_filters_and_pages_only_the_users_streams(airflow_db, tmp_path, monkeypatch):
    from fastapi.testclient import TestClient

    import airflow.api_fastapi.app as airflow_app
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser
    from airflow.api_fastapi.common.db.common import _get_session
    from airflow.utils.session import create_session

    from airflow_streaming.ui import api
    from test_streams_page_trust import _dags, _drop_dags

    layout = {"paging_alpha": ("paging_bundle_alpha", "paging_alpha_team"),
              "paging_beta": ("paging_bundle_beta", "paging_beta_team")}
    monkeypatch.setenv("AIRFLOW__AIRFLOW_STREAMING__CONTROL_LOCATIONS", str(tmp_path / "control"))
    monkeypatch.setattr(airflow_app, "get_auth_manager", lambda: SimpleAuthManager())
    app = api.create_app()

    def session_dep():
        with create_session() as s:
            yield s

    app.dependency_overrides[_get_session] = session_dep
    seen = {}
    with StandInDrivers(3) as drivers:
        # 30 streams, deployed round-robin by the two DAGs; every 3rd FAILED (alpha: 0, 6, 12...: 0 mod 6)
        build_fleet(tmp_path, 30, drivers, owner_dags=list(layout), failed_every=3, versions=("v1", "v2"))
        try:
            with create_session() as session:
                _dags(session, layout)
            for user in (SimpleAuthManagerUser(username="ann", role="VIEWER", teams=["paging_alpha_team"]),
                         SimpleAuthManagerUser(username="root", role="ADMIN")):
                app.dependency_overrides[api.authorized_user] = lambda u=user: u
                client = TestClient(app)
                get = lambda **params: client.get("/api/streams", params=params)  # noqa: E731
                seen[user.username] = {
                    "first": get(per_page=4).json(), "second": get(per_page=4, page=2).json(),
                    "failed": get(health="FAILED", per_page=100).json(),
                    "search": get(q="FLEET-001", sort="name").json(),
                    "v2_by_name": get(version="v2", sort="name", dir="desc", per_page=3).json(),
                    "bad": get(health="SICK"),
                }
        finally:
            with create_session() as session:
                _drop_dags(session, list(layout), [b for b, _ in layout.values()], [t for _, t in layout.values()])
    ann, root = seen["ann"], seen["root"]
    alpha = {f"fleet-{i:04d}" for i in range(0, 30, 2)}  # owner_dags round-robin: even streams are alpha's
    assert ann["first"]["total"] == 15 and root["first"]["total"] == 30
    assert sum(ann["first"]["facets"]["health"].values()) == 15  # counts cover only ann's streams
    assert ann["first"]["facets"]["health"] == {"FAILED": 5, "HEALTHY": 10}
    assert len(ann["first"]["streams"]) == 4 and ann["first"]["pages"] == 4
    assert {r["health"]["state"] for r in ann["first"]["streams"]} == {"FAILED"}  # worst first
    page_names = [r["name"] for r in ann["first"]["streams"] + ann["second"]["streams"]]
    assert len(set(page_names)) == 8 and set(page_names) <= alpha
    assert {r["name"] for r in ann["failed"]["streams"]} == {f"fleet-{i:04d}" for i in range(2, 30, 6)} <= alpha
    assert ann["failed"]["matched"] == 5 and root["failed"]["matched"] == 10
    assert [r["name"] for r in ann["search"]["streams"]] == ["fleet-0010", "fleet-0012", "fleet-0014", "fleet-0016",
                                                            "fleet-0018"]
    assert [r["name"] for r in root["search"]["streams"]] == [f"fleet-{i:04d}" for i in range(10, 20)]
    assert [r["name"] for r in root["v2_by_name"]["streams"]] == ["fleet-0029", "fleet-0027", "fleet-0025"]
    assert {r["version"] for r in ann["v2_by_name"]["streams"]} <= {"v2"} and ann["v2_by_name"]["matched"] == 0
    assert root["bad"].status_code == 400 and "health: unknown state(s) SICK" in root["bad"].text
