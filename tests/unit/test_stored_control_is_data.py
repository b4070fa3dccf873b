"""Trust boundary (issue 25, items 1 and 3): what a driver can write on shared storage is data, never
configuration. Each test reproduces an attack by a driver (or anyone) that can write the stream's
control directory, and sees it refused with a named error - nothing run, sent or deleted:

- a forged ``deployed.json`` / history / lifecycle record choosing the application a restart, a
  rollback or a resumed action runs (the Airflow side seals the specs it stores: lifecycle.trust);
- a driver record naming another Kubernetes API server, and the Streams page reading a forged
  ``deployed.json`` that points the token file at ``/proc/self/environ`` and the API at a listener;
- a bearer token over plain http.

The Kubernetes API server is a stand-in (tests/standins/kube_api.py: the real REST paths and TLS);
the attacker's listener is a real HTTP server on this host.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from airflow_streaming.control.contract import DriverRecord
from airflow_streaming.exceptions import SealError
from airflow_streaming.hooks.streaming_job import SparkStreamHook
from airflow_streaming.lifecycle.record import Action
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner, restart_spec, resume_target
from airflow_streaming.sealing import sealed
from airflow_streaming.targets.base import Liveness
from airflow_streaming.targets.kubernetes import KubernetesClusterTarget
from airflow_streaming.ui.streams import discover, read_stream
from control_fixtures import deployed_stream

needs_openssl = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


class Listener:
    """The attacker's HTTP server: records every request (path and headers) and answers 200 {}."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                outer.requests.append({"path": self.path, "headers": dict(self.headers)})
                body = b"{}"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_DELETE = do_POST = do_GET  # noqa: N815

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> Listener:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _write(hook: SparkStreamHook, name: str, doc: object) -> None:
    hook.storage.unguarded.write_atomic(f"{hook.paths.root}/{name}", json.dumps(doc).encode())


def _attacker_script(tmp_path: Path) -> tuple[str, Path]:
    pwned = tmp_path / "pwned"
    script = tmp_path / "evil_job.py"
    script.write_text(f"open({str(pwned)!r}, 'w').write('ran')\n")
    return str(script), pwned


# ------------------------------------------------------------------ stored specs choose nothing


def test_a_forged_deployed_spec_is_not_what_a_restart_runs(tmp_path):
    spec, hook = deployed_stream(tmp_path)
    evil, pwned = _attacker_script(tmp_path)
    _write(hook, "deployed.json", {"run_id": "r1", "at": 1.0, "spec": {**spec.to_dict(), "application": evil}})
    with pytest.raises(SealError, match=r"deployed\.json: the spec stored for version 'v1' .* not sealed"):
        restart_spec(hook, Action.RESTART)
    # A genuine seal copied onto changed content does not help.
    genuine = sealed(spec.to_dict())
    _write(hook, "deployed.json", {"run_id": "r1", "at": 1.0, "spec": {**genuine, "application": evil}})
    with pytest.raises(SealError, match="not sealed"):
        restart_spec(hook, Action.RESTART)
    assert not pwned.exists()


def test_a_sealed_deployed_spec_restarts_with_the_callers_secrets(tmp_path):
    spec, _ = deployed_stream(tmp_path)
    with_secret = spec.with_version("v1", spark_conf={"spark.myapp.db.password": "pw-of-the-dag"})
    hook = SparkStreamHook(with_secret)
    _write(hook, "deployed.json", {"run_id": "r1", "at": 1.0, "spec": sealed(with_secret.to_dict())})
    assert json.loads((Path(hook.deployed_path)).read_text())["spec"]["spark_conf"]["spark.myapp.db.password"] == "***"
    # Another caller (not the deployed spec itself) restarts the sealed spec: the seal is what counts.
    other = SparkStreamHook(with_secret.with_version("v2"))
    restarted = restart_spec(other, Action.RESTART)
    assert restarted.version == "v1" and restarted.spark_conf["spark.myapp.db.password"] == "pw-of-the-dag"


def test_a_forged_history_is_not_what_a_rollback_runs(tmp_path):
    spec, hook = deployed_stream(tmp_path)
    evil, pwned = _attacker_script(tmp_path)
    v2 = spec.with_version("v2")
    _write(hook, "deployed.json", {"run_id": "r2", "at": 2.0, "spec": sealed(v2.to_dict())})
    _write(hook, "history.json", [{"id": "u1", "action": "upgrade", "outcome": "SUCCEEDED", "from_version": "v1",
                                   "to_version": "v2", "from_spec": {**spec.to_dict(), "application": evil}}])
    with pytest.raises(SealError, match=r"history\.json: the spec stored for version 'v1' .* not sealed"):
        restart_spec(SparkStreamHook(v2), Action.ROLLBACK)
    # The same entry as the Airflow side wrote it (sealed) is the rollback target.
    _write(hook, "history.json", [{"id": "u1", "action": "upgrade", "outcome": "SUCCEEDED", "from_version": "v1",
                                   "to_version": "v2", "from_spec": sealed(spec.to_dict())}])
    assert restart_spec(SparkStreamHook(v2), Action.ROLLBACK) == spec
    assert not pwned.exists()


def test_a_forged_unfinished_record_is_not_resumed(tmp_path):
    spec, hook = deployed_stream(tmp_path)
    evil, pwned = _attacker_script(tmp_path)
    record = {"stream": "s1", "action": "restart", "step": "STOPPED", "id": "x1", "from_spec": sealed(spec.to_dict()),
              "to_spec": {**spec.to_dict(), "application": evil}, "steps": [{"step": "PLANNED", "at": 1.0}]}
    _write(hook, "lifecycle.json", record)
    with pytest.raises(SealError, match=r"lifecycle\.json: the spec stored for version 'v1' .* not sealed"):
        resume_target(hook, Action.RESTART)
    assert not pwned.exists()


def test_an_upgrade_does_not_seal_a_forged_deployed_spec_as_its_rollback_target(tmp_path):
    spec, hook = deployed_stream(tmp_path)
    evil, _ = _attacker_script(tmp_path)
    _write(hook, "deployed.json", {"run_id": "r1", "at": 1.0, "spec": {**spec.with_version("v0").to_dict(),
                                                                        "application": evil}})
    with pytest.raises(SealError, match="not sealed"):
        LifecycleRunner(spec.with_version("v2"), Action.UPGRADE, LifecycleOptions()).run()
    assert not Path(hook.paths.root, "lifecycle.json").exists()


# ------------------------------------------------------------------ credentials go where Airflow says


@needs_openssl
def test_a_driver_record_naming_another_api_server_gets_no_token(tmp_path):
    from standins.kube_api import KubeApiStandIn, make_self_signed_cert

    token_file = tmp_path / "token"
    token_file.write_text("sa-token-trusted\n")
    tls = make_self_signed_cert(tmp_path)
    with KubeApiStandIn("sa-token-trusted", tls=tls) as api, Listener() as attacker:
        settings = {"image": "i", "namespace": "streams", "kube_token_file": str(token_file), "kube_ca_file": tls[0]}
        target = KubernetesClusterTarget(None, None, settings, master=f"k8s://{api.url}")
        record = DriverRecord(run_id="20261125T000000Z-0000kube", stream="s", version="v1", application="events_etl",
                              host="h", command="", log_path="", submitted_at=1.0, checkpoint_location="/c",
                              target="kubernetes", handle={"namespace": "streams", "pod": "p",
                                                           "api_server": attacker.url})
        state = target.state(record)
        assert state.liveness == Liveness.UNKNOWN and "nothing is sent" in state.detail, state
        assert attacker.requests == []


def test_a_token_never_goes_over_plain_http_unless_allowed(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("sa-token-plain\n")
    with Listener() as server:
        settings = {"image": "i", "namespace": "streams", "kube_token_file": str(token_file)}
        record = DriverRecord(run_id="20261125T000000Z-0000http", stream="s", version="v1", application="events_etl",
                              host="h", command="", log_path="", submitted_at=1.0, checkpoint_location="/c",
                              target="kubernetes", handle={"namespace": "streams", "pod": "p"})
        refused = KubernetesClusterTarget(None, None, settings, master=f"k8s://{server.url}").state(record)
        assert refused.liveness == Liveness.UNKNOWN and "plain http" in refused.detail and server.requests == []
        KubernetesClusterTarget(None, None, {**settings, "allow_plain_http": True},
                                master=f"k8s://{server.url}").state(record)
        assert [{k.lower(): v for k, v in r["headers"].items()}.get("authorization")
                for r in server.requests] == ["Bearer sa-token-plain"]


def test_the_streams_page_sends_nothing_where_a_forged_deployed_json_says(tmp_path):
    """The reported attack: deployed.json names the token file /proc/self/environ and a k8s master that
    is the attacker's listener; driver.json names the listener as the API server."""
    ctl = tmp_path / "control"
    with Listener() as attacker:
        stream_dir = ctl / "s1"
        stream_dir.mkdir(parents=True)
        spec = {"name": "s1", "version": "v1", "application": "events_etl", "control_location": str(ctl),
                "checkpoint_location": str(tmp_path / "ckpt"), "master": f"k8s://{attacker.url}",
                "deploy_mode": "cluster", "cluster": {"image": "i", "kube_token_file": "/proc/self/environ",
                                                      "api_server": attacker.url, "allow_plain_http": True}}
        (stream_dir / "deployed.json").write_text(json.dumps({"run_id": "r1", "at": 1.0, "spec": spec}))
        (stream_dir / "driver.json").write_text(json.dumps({
            "run_id": "20261125T000000Z-0000ui00", "stream": "s1", "version": "v1", "application": "events_etl",
            "host": "h", "command": "", "log_path": "", "submitted_at": 1.0, "checkpoint_location": str(tmp_path),
            "target": "kubernetes", "handle": {"namespace": "x", "pod": "p", "api_server": attacker.url}}))
        found = discover(None, [str(ctl)])
        (ref,) = found.streams
        snap = read_stream(ref)
        assert attacker.requests == []
    assert ref.spec.cluster == {} and not ref.spec_known and "not sealed" in (ref.note or "")
    assert "not sealed" in json.dumps(snap.errors)
    assert os.environ.get("PATH", "") not in json.dumps(snap.errors)


def test_a_forged_deployed_spec_is_not_what_a_supervisor_restart_runs(tmp_path):
    """The supervisor's recovery starts what is deployed: a forged deployed.json is refused, not run."""
    import socket
    import subprocess
    import sys
    import time

    from airflow_streaming.control import contract
    from airflow_streaming.control.process import process_start_time
    from airflow_streaming.supervision.policy import RestartPolicy
    from airflow_streaming.lifecycle.supervisor import supervise

    spec, hook = deployed_stream(tmp_path)
    evil, pwned = _attacker_script(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start_time(proc.pid)
    proc.wait()  # the recorded run is provably gone: the decision is a restart
    run_id = "20260102T000000Z-0000bbbb"
    record = contract.DriverRecord(
        run_id=run_id, stream="s1", version="v1", application=spec.application, host=socket.gethostname(),
        command=f"spark-submit ... --run-id {run_id}", log_path="l", submitted_at=time.time(),
        checkpoint_location=spec.checkpoint_location, handle={"pid": proc.pid, "start_time": start})
    hook.storage.unguarded.write_atomic(hook.paths.driver, record.to_json())
    _write(hook, "deployed.json", {"run_id": run_id, "at": 1.0, "spec": {**spec.to_dict(), "application": evil}})
    events: list[dict] = []
    result = supervise(hook, RestartPolicy(backoff_initial_s=0), events.append)  # reported, not raised
    assert result.action == "REFUSED" and "deployed.json: the spec stored for version 'v1'" in result.reason
    assert "not sealed" in result.reason and [e["error_class"] for e in events] == ["SealError"]
    assert not pwned.exists() and hook.driver_record().run_id == run_id  # nothing was submitted
