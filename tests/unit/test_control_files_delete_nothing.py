"""Trust boundary (issue 25, item 2): a driver record is a file on shared storage that a driver can
write, so the path it names as the run's secret properties file must never decide what is deleted.
The kill deletes only a properties file this provider wrote for that run."""

from __future__ import annotations

import os
import socket
import time

from airflow_streaming.control.contract import ControlPaths, DriverRecord
from airflow_streaming.control.local import LocalStorage
from airflow_streaming.properties_file import forget_properties_file, write_properties_file
from airflow_streaming.targets.local import LocalTarget

RUN = "20261125T000000Z-0000trst"


def _record(properties_file: str, run_id: str = RUN) -> DriverRecord:
    return DriverRecord(run_id=run_id, stream="s", version="v1", application="a.py", host=socket.gethostname(),
                        command="", log_path="", submitted_at=time.time(), checkpoint_location="/x", target="local",
                        handle={"properties_file": properties_file})


def _target(tmp_path) -> LocalTarget:
    return LocalTarget(LocalStorage(), ControlPaths(str(tmp_path / "control" / "s")), {})  # stream s's target


def test_a_forged_record_cannot_make_the_kill_delete_a_file(tmp_path, caplog):
    """The attack: driver.json names a file the Airflow user may delete (here: one of its own)."""
    victim = tmp_path / "airflow.cfg"
    victim.write_text("[core]\n")
    outcome = _target(tmp_path).kill(_record(str(victim)), grace=1)
    assert "nothing to kill" in outcome and victim.read_text() == "[core]\n"
    assert f"not deleting {victim}" in caplog.text


def test_a_look_alike_in_the_secrets_directory_of_another_run_or_a_symlink_is_not_deleted(tmp_path):
    other = write_properties_file({"spark.x.password": "p"}, "20261125T000000Z-0000othr")
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = os.path.join(os.path.dirname(other), f"{RUN}-link.properties")
    os.symlink(victim, link)
    try:
        _target(tmp_path).kill(_record(other), grace=1)
        assert os.path.exists(other)
        assert not forget_properties_file(link, RUN) and victim.read_text() == "keep"
        assert not forget_properties_file(os.path.join(os.path.dirname(other), "..", "x.properties"), RUN)
    finally:
        os.unlink(link)
        os.unlink(other)


def test_the_runs_own_properties_file_is_deleted(tmp_path):
    own = write_properties_file({"spark.x.password": "p"}, RUN)
    _target(tmp_path).kill(_record(own), grace=1)
    assert not os.path.exists(own)
