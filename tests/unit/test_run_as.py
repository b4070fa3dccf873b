"""``run_as_user`` without Spark (issue 35): who may read or run what, how the switch is spelled, what the spec
refuses, and what the compatibility check's child gets. The real second user and a real driver:
tests/integration/test_run_as_user.py."""

from __future__ import annotations

import os
import stat

import pytest

from airflow_streaming import run_as
from airflow_streaming.compat.run import check_command, check_environment
from airflow_streaming.exceptions import RunAsUserError
from airflow_streaming.spec import SpecError, StreamSpec

OTHER = run_as.UnixUser("someone", 54321, 54321, frozenset({54321}), "/nonexistent")


def _spec(tmp_path, **fields):
    return StreamSpec.from_dict({"name": "s", "application": str(tmp_path / "job.py"),
                                 "checkpoint_location": str(tmp_path / "ckpt"),
                                 "control_location": str(tmp_path / "ctl"), **fields})


@pytest.fixture
def open_dir():
    """A directory every user may search (pytest's own temp root is private to its user)."""
    import shutil
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="run-as-test-", dir="/tmp"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_may_follows_modes_owners_and_every_directory_on_the_way(open_dir):
    tmp_path = open_dir
    root = tmp_path / "open"
    root.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(root, 0o755)
    secret, public, program = root / "key", root / "readme", root / "tool"
    for path, mode in ((secret, 0o600), (public, 0o644), (program, 0o755)):
        path.write_text("x")
        os.chmod(path, mode)
    assert run_as.may(OTHER, str(tmp_path), run_as.RUN) is None
    assert "key (mode 0600" in run_as.may(OTHER, str(secret), run_as.READ)
    assert run_as.may(OTHER, str(public), run_as.READ) is None
    assert run_as.may(OTHER, str(program), run_as.RUN) is None
    assert run_as.may(OTHER, str(public), run_as.WRITE) is not None
    os.chmod(root, 0o700)  # a closed directory on the way closes everything in it
    assert "cannot be searched" in run_as.may(OTHER, str(public), run_as.READ)
    os.chmod(root, 0o755)
    link = tmp_path / "link"
    hidden = tmp_path / "hidden"
    hidden.mkdir(mode=0o700)
    os.chmod(hidden, 0o700)
    (hidden / "python").write_text("#!/bin/sh\n")
    os.chmod(hidden / "python", 0o755)
    link.symlink_to(hidden / "python")  # an open link to a program under a closed directory (a venv under /root)
    assert "cannot be searched" in run_as.may(OTHER, str(link), run_as.RUN)
    group = run_as.UnixUser("member", 54322, 54322, frozenset({54322, os.stat(public).st_gid}), "/nonexistent")
    os.chmod(public, 0o640)
    assert run_as.may(group, str(public), run_as.READ) is None and run_as.may(OTHER, str(public), run_as.READ)


def test_preflight_refuses_a_readable_secret_and_a_program_the_user_cannot_run(open_dir):
    tmp_path = open_dir
    os.chmod(tmp_path, 0o755)
    cfg = tmp_path / "airflow.cfg"
    cfg.write_text("[core]\nfernet_key = x\n")
    os.chmod(cfg, 0o644)
    assert run_as.may(OTHER, str(tmp_path), run_as.RUN) is None
    with pytest.raises(RunAsUserError, match=r"could read .*airflow.cfg.*chmod 600"):
        run_as.preflight(OTHER, secret=[str(cfg)])
    os.chmod(cfg, 0o600)
    run_as.preflight(OTHER, secret=[str(cfg), str(tmp_path / "absent.key")])
    tool = tmp_path / "python"
    tool.write_text("")
    os.chmod(tool, 0o700)
    with pytest.raises(RunAsUserError, match="cannot run"):
        run_as.preflight(OTHER, run=[str(tool)])


def test_the_switch_is_setpriv_from_root_and_sudo_otherwise(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert run_as.switch_command(OTHER) == ["setpriv", "--reuid=54321", "--regid=54321", "--init-groups",
                                            "--no-new-privs", "--"]
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert run_as.switch_command(OTHER) == ["sudo", "-n", "-E", "-H", "-u", "someone", "--"]
    env = run_as.switched_environment({"HOME": "/root", "PATH": "/bin"}, OTHER)
    assert env == {"HOME": "/nonexistent", "PATH": "/bin", "USER": "someone", "LOGNAME": "someone"}


def test_lookup_refuses_unknown_users_and_root():
    with pytest.raises(RunAsUserError, match="no such user"):
        run_as.lookup("no-such-user-here")
    with pytest.raises(RunAsUserError, match="is root"):
        run_as.lookup("root")


@pytest.mark.parametrize("fields,match", [
    ({"run_as_user": "Bad User"}, "Unix user name"),
    ({"run_as_user": "svc", "hot_standby": True}, "not with hot_standby"),
    ({"run_as_user": "svc", "master": "yarn", "deploy_mode": "cluster"}, "only for a driver on the Airflow worker"),
    ({"run_as_user": "svc", "control_location": "hdfs://nn/ctl"}, "needs a local control_location"),
])
def test_the_spec_refuses_what_run_as_user_cannot_do(tmp_path, fields, match):
    with pytest.raises(SpecError, match=match) as err:
        _spec(tmp_path, **fields)
    assert err.value.field == "run_as_user"


def test_a_spec_without_run_as_user_is_stored_as_before(tmp_path):
    assert "run_as_user" not in _spec(tmp_path).to_dict()
    assert _spec(tmp_path, run_as_user="svc").to_dict()["run_as_user"] == "svc"


def test_the_check_child_runs_as_the_user_without_airflows_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "postgresql://a:pw@h/db")
    monkeypatch.setenv("AIRFLOW_HOME", "/opt/airflow")
    plain = _spec(tmp_path)
    env = check_environment(plain)
    assert env is not None and not [k for k in env if k.startswith("AIRFLOW_") or k.startswith("AIRFLOW__")]
    cmd, _ = check_command(plain, allow_warnings=False)
    assert cmd[1:3] == ["-m", "airflow_streaming.compat"]

    monkeypatch.setattr(run_as, "lookup", lambda name: OTHER)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    spec = _spec(tmp_path, run_as_user="someone", env_vars={"PYSPARK_PYTHON": "/usr/bin/python3"})
    cmd, _ = check_command(spec, allow_warnings=False)
    assert cmd[:8] == ["setpriv", "--reuid=54321", "--regid=54321", "--init-groups", "--no-new-privs", "--",
                       "/usr/bin/python3", "-m"]
    env = check_environment(spec)
    assert env["HOME"] == "/nonexistent" and "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN" not in env
    assert "AIRFLOW_HOME" not in env


def test_a_shared_control_dir_is_group_writable_sticky_and_its_files_group_readable(tmp_path, monkeypatch):
    from airflow_streaming.control.local import LocalStorage

    ctl = tmp_path / "ctl"
    ctl.mkdir()
    (ctl / "status.json").write_text("{}")  # an earlier run's, another user's
    me = os.getegid()
    user = run_as.UnixUser("svc", os.geteuid() + 1, me, frozenset({me}), "/nonexistent")
    if os.geteuid() != 0:
        monkeypatch.setattr(os, "getgroups", lambda: [me])
    monkeypatch.setattr(os, "chown", lambda *a, **k: None)  # the real chown: tests/integration/test_run_as_user.py
    run_as.share_control_dir(str(ctl), user)
    mode = os.stat(ctl).st_mode
    assert mode & stat.S_ISVTX and mode & stat.S_ISGID and mode & stat.S_IWGRP
    storage = LocalStorage()
    storage.write_atomic(str(ctl / "deployed.json"), b"{}")
    assert stat.S_IMODE(os.stat(ctl / "deployed.json").st_mode) == 0o640
    plain = tmp_path / "plain"
    plain.mkdir()
    storage.write_atomic(str(plain / "deployed.json"), b"{}")
    assert stat.S_IMODE(os.stat(plain / "deployed.json").st_mode) == 0o600  # unshared: private as before
