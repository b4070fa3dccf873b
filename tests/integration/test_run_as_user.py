"""Issue 35 on real Spark: a local driver started as another Unix user (``run_as_user``) is outside the worker's
secrets, and the lifecycle still works.

A real second Unix user (created here, removed at the end when this test created it) runs a user's script (a
text source, a parquet sink, as a team would write it) that first tries, from inside the driver, to read the
seal key and ``airflow.cfg`` and to change, replace and delete the Airflow side's control files, and records
what happened. The same script is then planned by the compatibility check's child, which runs it as that user
too. Asserted: every attempt was refused by the kernel, the driver's processes are that user's, their
environment holds no Airflow variable and no secret and another user cannot read it, the secret conf still
reached the driver (by the private hand-off), a graceful stop, a kill and two restarts work, and the sink holds
every input line exactly once. Before any driver starts, the preflight refuses a Python the user cannot run and
an ``airflow.cfg`` it could read, naming the file.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_streaming import run_as
from airflow_streaming.compat.run import run_check
from airflow_streaming.control import contract
from airflow_streaming.exceptions import RunAsUserError
from airflow_streaming.sealing import KEY_FILE_NAME
from airflow_streaming.spec import StreamSpec
from airflow_streaming.targets.local import run_processes
from spark_jobs.outputs import committed_sink_files
from streams import wait_for
import stream_actions

pytestmark = [pytest.mark.spark,
              pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("useradd"),
                                 reason="needs root, setpriv and useradd to make a second Unix user")]

DRIVER_USER = "as-driver-test"
SECRET = "S3cr3t-run-as-" + "k" * 20

USER_SCRIPT = '''
import hashlib, json, os, sys, time
from pyspark.sql import SparkSession

source, sink, checkpoint, probes, key, cfg, control, digest = sys.argv[1:9]
for name in ("driver.json", "deployed.json"):  # written by the worker right after the submission
    deadline = time.time() + 60
    while not os.path.exists(os.path.join(control, name)) and time.time() < deadline:
        time.sleep(0.2)
seen = {"uid": os.getuid(), "airflow_env": sorted(k for k in os.environ if k.startswith("AIRFLOW")
                                                  and not k.startswith("AIRFLOW_STREAMING"))}

def attempt(what, action):
    try:
        action()
        seen[what] = "done"
    except OSError as exc:
        seen[what] = "denied %d" % exc.errno

attempt("read seal key", lambda: open(key).read())
attempt("read airflow.cfg", lambda: open(cfg).read())
for name in ("driver.json", "deployed.json", "RUNNING"):
    path = os.path.join(control, name)
    attempt("write " + name, lambda: open(path, "a").write("forged"))
    def replace():
        with open(path + ".forged", "w") as fh:
            fh.write("{}")
        try:
            os.replace(path + ".forged", path)
        finally:
            if os.path.exists(path + ".forged"):
                os.unlink(path + ".forged")
    attempt("replace " + name, replace)
    attempt("delete " + name, lambda: os.unlink(path))
spark = SparkSession.builder.appName("team-job").getOrCreate()
got = spark.conf.get("spark.hadoop.fs.s3a.secret.key", "")
seen["secret delivered"] = hashlib.sha256(got.encode()).hexdigest() == digest
with open(os.path.join(probes, "probe-%d.json" % os.getpid()), "w") as fh:
    json.dump(seen, fh)
lines = spark.readStream.format("text").load(source)
query = (lines.writeStream.format("parquet").option("path", sink)
         .option("checkpointLocation", checkpoint).trigger(processingTime="1 second").start())
query.awaitTermination()
'''


@pytest.fixture(scope="module")
def driver_user():
    created = False
    try:
        pwd.getpwnam(DRIVER_USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--create-home", "--home-dir", f"/home/{DRIVER_USER}",
                        "--shell", "/usr/sbin/nologin", DRIVER_USER], check=True, capture_output=True)
        created = True
    try:
        yield run_as.lookup(DRIVER_USER)
    finally:
        if created:
            subprocess.run(["userdel", "--remove", DRIVER_USER], capture_output=True)


def _as_user(user: run_as.UnixUser, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([*run_as.switch_command(user), *argv], capture_output=True, text=True, timeout=60)


def _feed(source: Path, name: str, lines: list[str]) -> None:
    tmp = source / f".{name}.tmp"
    tmp.write_text("".join(f"{line}\n" for line in lines))
    os.chmod(tmp, 0o644)
    os.replace(tmp, source / name)


def _sink_rows(sink: str) -> list[str]:
    import pyarrow.dataset as ds

    files = committed_sink_files(sink)
    return ds.dataset(files, format="parquet").to_table().column("value").to_pylist() if files else []


def test_a_driver_run_as_another_user_cannot_touch_the_workers_secrets_or_files(driver_user, streams, monkeypatch):
    base = Path(f"/tmp/airflow-streaming-run-as-{os.getpid()}")
    base.mkdir(mode=0o755)
    try:
        _scenario(base, driver_user, streams, monkeypatch)
    finally:
        _kill_every_process_of(base)  # by pid, before the control files that name them are gone
        shutil.rmtree(base, ignore_errors=True)


def _kill_every_process_of(base: Path) -> None:
    """Every process whose command line names a path under ``base`` (the drivers of every run, whatever their
    control files say after a failure: a driver that forged or deleted them is still killed)."""
    import psutil

    victims = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        if proc.pid != os.getpid() and any(str(base) in arg for arg in proc.info["cmdline"] or ()):
            victims.append(proc)
    for proc in victims:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(victims, timeout=30)


def _scenario(base: Path, user: run_as.UnixUser, streams, monkeypatch) -> None:
    home = base / "airflow_home"  # searchable by everyone: only the files' own modes keep the driver out
    home.mkdir(mode=0o755)
    os.chmod(home, 0o755)
    cfg = home / "airflow.cfg"
    cfg.write_text("[database]\nsql_alchemy_conn = postgresql://airflow:db-password@localhost/airflow\n")
    os.chmod(cfg, 0o644)
    monkeypatch.setenv("AIRFLOW_HOME", str(home))
    monkeypatch.delenv("AIRFLOW_CONFIG", raising=False)
    from airflow_streaming.sealing import _key_file

    _key_file()  # the seal key file, 0600, as the Airflow side makes it when no key is configured
    key = home / KEY_FILE_NAME
    assert key.exists() and (key.stat().st_mode & 0o777) == 0o600

    data = base / "data"  # the team's own files: the driver's user owns them
    for sub in ("in", "out", "probes"):
        (data / sub).mkdir(parents=True)
    for path in (data, *data.iterdir()):
        os.chown(path, user.uid, user.gid)
    script = base / "team_job.py"
    script.write_text(USER_SCRIPT)
    os.chmod(script, 0o644)
    control = base / "control"
    control.mkdir(mode=0o755)
    source, sink, checkpoint, probes = data / "in", data / "out", data / "checkpoint", data / "probes"
    fields = {
        "name": "runas", "application": str(script), "checkpoint_location": str(checkpoint),
        "control_location": str(control), "master": "local[1]", "trigger_interval": 1, "heartbeat_interval": 1,
        "stop_timeout": 60, "startup_timeout": 180, "run_as_user": user.name,
        "application_args": [str(source), str(sink), str(checkpoint), str(probes), str(key), str(cfg),
                             str(control / "runas"), hashlib.sha256(SECRET.encode()).hexdigest()],
        "spark_conf": {"spark.sql.shuffle.partitions": 1, "spark.ui.enabled": "false",
                       "spark.hadoop.fs.s3a.secret.key": SECRET},
    }

    # Preflight: nothing starts while the driver's user could read airflow.cfg, or could not run its Python.
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    assert run_as.may(user, python, run_as.RUN) is None, f"{user.name} can run no Python here"
    with pytest.raises(RunAsUserError, match="airflow.cfg"):
        stream_actions.submit(streams.hook(StreamSpec.from_dict({**fields, "env_vars": {"PYSPARK_PYTHON": python}})))
    assert not (control / "runas" / "RUNNING").exists()
    os.chmod(cfg, 0o600)
    if run_as.may(user, sys.executable, run_as.RUN) is not None:  # e.g. a Python under /root
        with pytest.raises(RunAsUserError, match="cannot run"):
            stream_actions.submit(streams.hook(StreamSpec.from_dict(fields)))
        assert not (control / "runas" / "RUNNING").exists()
    fields["env_vars"] = {"PYSPARK_PYTHON": python}
    hook = streams.hook(StreamSpec.from_dict(fields))

    _feed(source, "a.txt", [f"a-{i}" for i in range(50)])
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    wait_for(lambda: len(_sink_rows(str(sink))) >= 50, 120, "the first input in the sink", interval=0.5)

    # The driver is the other user's, with nothing of Airflow's in its environment, readable by nobody else.
    members = [p.pid for p in run_processes(record.run_id)]
    assert len(members) >= 2  # spark-submit's JVM and the Python driver at least
    for pid in members:
        status = Path(f"/proc/{pid}/status").read_text()
        uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
        assert {int(u) for u in uids} == {user.uid}, (pid, uids)
        environ = Path(f"/proc/{pid}/environ").read_bytes()
        assert SECRET.encode() not in environ and b"db-password" not in environ
        names = {entry.split(b"=", 1)[0].decode() for entry in environ.split(b"\0") if entry}
        assert not {n for n in names if n.startswith("AIRFLOW") and not n.startswith("AIRFLOW_STREAMING")}, names
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        assert SECRET.encode() not in cmdline
        other = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat",
                                f"/proc/{pid}/environ"], capture_output=True, timeout=30)
        assert other.returncode != 0 and SECRET.encode() not in other.stdout

    probe = _probes(probes)
    assert len(probe) == 1
    seen = probe[0]
    assert seen["uid"] == user.uid and seen["airflow_env"] == []
    assert seen["secret delivered"] is True
    refused = {k: v for k, v in seen.items() if k.startswith(("read ", "write ", "replace ", "delete "))}
    assert len(refused) == 11 and all(v.startswith("denied") for v in refused.values()), refused
    assert json.loads((control / "runas" / "driver.json").read_text())["run_id"] == record.run_id

    # The lifecycle: a graceful stop (the worker removes the run marker the driver cannot), a restart, a kill,
    # another restart, a graceful stop - every line exactly once.
    report = stream_actions.stop(hook)
    assert report.graceful and report.exit_code == contract.EXIT_GRACEFUL
    _feed(source, "b.txt", [f"b-{i}" for i in range(40)])
    second = stream_actions.submit(hook)
    hook.wait_until_ready(second)
    wait_for(lambda: len(_sink_rows(str(sink))) >= 90, 120, "the second input in the sink", interval=0.5)
    killed = stream_actions.kill(hook, hook.driver_record())
    assert "SIGTERM" in killed or "SIGKILL" in killed, killed
    assert not hook.processes_of_run(second.run_id)
    _feed(source, "c.txt", [f"c-{i}" for i in range(30)])
    third = stream_actions.submit(hook)
    hook.wait_until_ready(third)
    wait_for(lambda: len(_sink_rows(str(sink))) >= 120, 120, "the third input in the sink", interval=0.5)
    assert stream_actions.stop(hook).graceful
    rows = _sink_rows(str(sink))
    fed = [f"a-{i}" for i in range(50)] + [f"b-{i}" for i in range(40)] + [f"c-{i}" for i in range(30)]
    assert len(rows) == len(set(rows)) and set(rows) == set(fed)

    # The compatibility check's child runs the candidate's code too: as the same user, without Airflow's env.
    for old in probes.iterdir():
        old.unlink()
    report = run_check(hook.spec, allow_warnings=True)
    assert report["verdict"] in ("COMPATIBLE", "COMPATIBLE_WITH_WARNINGS"), report
    checked = _probes(probes)
    assert checked, "the check child did not run the script"
    for seen in checked:
        assert seen["uid"] == user.uid and seen["airflow_env"] == []
        assert seen["read seal key"].startswith("denied") and seen["read airflow.cfg"].startswith("denied")


def _probes(directory: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(directory.glob("probe-*.json"))]
