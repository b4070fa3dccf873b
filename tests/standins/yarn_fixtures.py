"""Pytest fixtures of the YARN stand-ins (the ResourceManager's REST API and a spark-submit that records
its calls), shared by the YARN target's tests and the `spark` connection's."""

from __future__ import annotations


import pytest

from standins import fake_spark_submit
from standins.yarn_rm import YarnRmStandIn


@pytest.fixture
def rm():
    with YarnRmStandIn() as server:
        yield server


@pytest.fixture
def submit_record(tmp_path, monkeypatch, rm):
    """The stand-in spark-submit first on PATH; returns the file it records its calls in."""
    return fake_spark_submit.put_first_on_path(tmp_path, monkeypatch, FAKE_YARN_RM=rm.url)
