"""Host B of ``tests/integration/test_two_hosts.py``: a long-lived process in its own network, UTS,
PID and mount namespaces that runs lifecycle operations on request.

Started as ``unshare --net --uts --pid --fork --mount-proc --kill-child python two_hosts_agent.py
HOSTNAME HOSTS_FILE``: it names its host, puts its own ``/etc/hosts`` in place (its mount namespace
is private; the rest of the file system is shared, like an NFS), then reads one JSON command per
line on stdin - ``{"op": NAME, "args": {...}}`` - and answers each with one line
``@@RESULT {"ok", "value" | "error", "started_at", "seconds"}`` on its original stdout. Everything
else it (or a child) prints goes to stderr. It exits at the end of its input.

The operations use this repository's code exactly as an Airflow worker on another host would:
only the control storage (WebHDFS) and the cluster manager's HTTP APIs, never a local pid.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import time
import traceback
from typing import Any
import stream_actions

RESULT = "@@RESULT "


def _spec(spec: dict[str, Any]):
    from airflow_streaming.spec import StreamSpec

    return StreamSpec.from_dict(spec)


def _hook(spec: dict[str, Any]):
    from airflow_streaming.hooks.streaming_job import SparkStreamHook

    return SparkStreamHook(_spec(spec))


def _options(probation: dict[str, Any] | None = None):
    from airflow_streaming.lifecycle.record import Probation
    from airflow_streaming.lifecycle.runner import LifecycleOptions

    return LifecycleOptions(probation=Probation(**(probation or {"min_batches": 1, "window_s": 150})), poll_s=0.5)


def _lease(hook) -> dict[str, Any] | None:
    from airflow_streaming.control import contract

    lease = contract.read_lease(hook.storage, hook.paths)
    return None if lease is None else {**lease.__dict__, "stale_here": lease.is_stale()}


# --------------------------------------------------------------------------- operations
def op_whoami() -> dict[str, Any]:
    """This host's name, its view of /proc and its namespaces."""
    return {"hostname": socket.gethostname(), "pid": os.getpid(),
            "proc_pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
            "ns": {kind: os.readlink(f"/proc/self/ns/{kind}") for kind in ("net", "uts", "pid", "mnt")},
            "addresses": subprocess.run(["ip", "-o", "-4", "addr"], capture_output=True, text=True).stdout}


def op_probe(pids: list[int], run_id: str) -> dict[str, Any]:
    """Whether each of ``pids`` exists here, and whether any process here carries ``run_id``."""
    import psutil

    seen = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                seen[str(pid)] = fh.read().replace(b"\0", b" ").decode(errors="replace")[:300]
        except OSError:
            seen[str(pid)] = None
    carrying = [p.pid for p in psutil.process_iter(["cmdline"]) if run_id in " ".join(p.info["cmdline"] or [])]
    return {"pids": seen, "psutil_exists": {str(p): psutil.pid_exists(p) for p in pids},
            "processes_with_run_id": carrying, "process_count": len(psutil.pids())}


def op_reach(urls: list[str]) -> dict[str, Any]:
    import urllib.request

    out = {}
    for url in urls:
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:  # noqa: S310 - test addresses
                out[url] = resp.status
        except Exception as exc:  # noqa: BLE001 - reported
            out[url] = f"{type(exc).__name__}: {exc}"
    return out


def op_watch(spec: dict[str, Any]) -> dict[str, Any]:
    """The watch of an Airflow sensor: the health verdict and the status document, and who runs it."""
    hook = _hook(spec)
    verdict = hook.health()
    doc = hook.status()
    record = hook.driver_record()
    liveness, why = hook.driver_liveness()
    return {"health": verdict.state.value, "summary": verdict.summary(),
            "status": None if doc is None else {"run_id": doc.run_id, "state": doc.state, "pid": doc.pid,
                                                "app_id": doc.app_id, "totals": doc.totals,
                                                "last_batch_id": doc.last_batch_id()},
            "record": None if record is None else {"run_id": record.run_id, "target": record.target,
                                                   "handle": record.handle, "host": record.host},
            "liveness": liveness.value, "liveness_detail": why, "lease": _lease(hook)}


def op_stop(spec: dict[str, Any]) -> dict[str, Any]:
    from airflow_streaming.lifecycle.operations import stop_stream

    return stop_stream(_spec(spec), _options())


def op_lifecycle(spec: dict[str, Any], action: str, probation: dict[str, Any] | None = None) -> dict[str, Any]:
    from airflow_streaming.lifecycle.operations import result_of
    from airflow_streaming.lifecycle.runner import LifecycleRunner

    runner = LifecycleRunner(_spec(spec), action, _options(probation))
    record = runner.run()
    return {**result_of(record), "verdict": record.verdict, "stop_report": runner.stop_report,
            "step_times": [(s["step"], s["at"]) for s in record.steps]}


def op_deploy(spec: dict[str, Any]) -> dict[str, Any]:
    from airflow_streaming.lifecycle.operations import deploy_stream

    return deploy_stream(_spec(spec), _options())


def op_submit(spec: dict[str, Any]) -> dict[str, Any]:
    """A plain submission of the stream from this host (what a supervisor's cold restart does): the record."""
    record = stream_actions.submit(_hook(spec))
    return {"run_id": record.run_id, "host": record.host, "pid": record.submit_pid}


def op_kill(spec: dict[str, Any]) -> dict[str, Any]:
    """Hard kill through the cluster manager (the hook's kill path), then what this host sees."""
    hook = _hook(spec)
    record = hook.driver_record()
    requested_at = time.time()
    outcome = stream_actions.kill(hook, record)
    returned_at = time.time()
    state = hook.target_of(record).state(record)
    liveness, why = hook.driver_liveness()
    return {"outcome": outcome, "requested_at": requested_at, "returned_at": returned_at,
            "run_id": record.run_id, "liveness_after": state.liveness.value, "cluster_state": state.cluster_state,
            "exited": state.exited, "driver_liveness": liveness.value, "driver_liveness_detail": why,
            "running_driver": hook.running_driver(), "health": hook.health().state.value, "lease": _lease(hook)}


def op_supervise(spec: dict[str, Any], policy: dict[str, Any] | None = None) -> dict[str, Any]:
    """One supervisor pass run on this host (the reconcile core; a PREPARE_STANDBY it decides submits the hot
    standby from here, so a local-mode standby runs here): what it did and what it notified."""
    from airflow_streaming.lifecycle.supervisor import supervise
    from airflow_streaming.supervision.policy import RestartPolicy

    events: list[dict[str, Any]] = []
    result = supervise(_hook(spec), RestartPolicy(**(policy or {})), events.append)
    return {"action": result.action, "reason": result.reason, "new_run_id": result.new_run_id,
            "notified": [e.get("kind") for e in events]}


OPS = {name[3:]: fn for name, fn in globals().items() if name.startswith("op_")}


def main() -> int:
    hostname, hosts_file = sys.argv[1], sys.argv[2]
    socket.sethostname(hostname)
    subprocess.run(["mount", "--bind", hosts_file, "/etc/hosts"], check=True)  # this mount namespace only
    results = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever else writes to stdout (this process or a child) goes to stderr
    sys.stdout = sys.stderr
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format=f"%(asctime)s {hostname} %(levelname)s %(name)s: %(message)s")
    for line in sys.stdin:
        if not line.strip():
            continue
        started = time.time()
        try:
            command = json.loads(line)
            value = OPS[command["op"]](**command.get("args", {}))
            answer: dict[str, Any] = {"ok": True, "value": value}
        except BaseException as exc:  # noqa: BLE001 - every failure is answered
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        answer.update(started_at=started, seconds=round(time.time() - started, 3))
        results.write(RESULT + json.dumps(answer, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
