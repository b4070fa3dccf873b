"""Partition trials with real processes in network namespaces (issue 36).

Trial (a): the driver's host cut from the control storage while it runs, for longer than the lease ttl,
then healed after the new driver's first commit. Trial (d): the same cut, healed IN THE MIDDLE of the
takeover (see "Trial (d)" below). Both run one body, :func:`_cut_from_the_control_storage`, with its ``heal``.

- Host A is this test process (the root namespaces): it runs the WebHDFS-protocol STAND-IN for a
  NameNode (``tests/webhdfs_standin.py``) on its end of a veth pair; the stream's control files live there.
- Host B is ``tests/two_hosts_agent.py`` in its own network, UTS, PID and mount namespaces (the machinery
  of ``tests/integration/test_two_hosts.py``). B deploys the stream through the lifecycle (DEPLOY): its
  driver is a local-mode driver on B, so the driver's network is B's.
- The stream's input, sink, quarantine AND CHECKPOINT are on the file system both hosts share (like an
  NFS mount). That is the hard case for fencing, and a real one (a checkpoint on a shared file system
  beside control files on HDFS): the cut separates B only from the control storage, so the cut-off driver
  could go on committing batches into the checkpoint and the sink - only the lease protocol (the
  reporter's half-ttl rule, the per-batch lease check) stops it. With the checkpoint on the stand-in the cut
  itself would stop its commits and prove nothing about the lease.

While the stream runs and is fed, B's packets to and from A are DROPPED (iptables in B's network
namespace; ``ip link set down`` where iptables is missing) for longer than the lease's ttl (the spec's
``lease_ttl``, 90 s: the shortest this storage accepts in steps of 30 s - its calls may hang 10 + 30 s, and half
the ttl must exceed that, see ``docs/failover.md``; the default is 120 s). Meanwhile host A runs supervisor passes (the
reconcile core) every few seconds; once the lease is stale the pass restarts the stream, and the new
driver runs on A. Then the link is healed.

Checked: no supervisor pass acts while the lease is fresh; the pass that acts (RESTART: the lease stale) is
recorded in the history (``recover``) and notified; the cut-off driver stops itself (half the ttl without
renewal) - its query stopped and its last commit BEFORE the new driver takes the lease; every checkpoint
commit written by exactly one of the two drivers (their logs), the old one's batches all before the new
one's; after the heal the old driver's processes exit and do not come back, the lease and the status document
name the new run (the old driver's delayed writes do not land over them); the sink holds what was fed exactly
once. The cut-off driver's PROCESS may outlive the ttl (its exit path retries the unreachable storage): that is
allowed, its queries are stopped. Bound: the stream commits again within ttl + 90 s of the cut (printed with
the other timings as ``PARTITION TRIAL (a)``). The ttl sets the test's length (~2 min).

Trial (d), ``heal="mid_takeover"``: the same cut, healed at the most dangerous moment of the takeover - the
cut-off driver (its query stopped at half the ttl, its process possibly alive and retrying the storage) gets
the storage back exactly while the new driver starts. The moment: inside the supervisor pass that decided
RESTART, at the named fault point ``hook.submitted`` (:mod:`airflow_streaming.faults`, hit in this process right
after ``target.submit`` spawned the new driver's spark-submit, before its driver record is written). The test
hooks that point (it wraps ``faults.hit``) and heals there, synchronously: the lifecycle record of the RECOVER
is at STARTING (the new run chosen and submitted), the new driver's JVM is starting, and the lease file still
names the OLD run (stale, not yet taken over) - both asserted at the heal, as is the heal coming before the new
lease's ``acquired_at``. Checked on top of trial (a)'s checks: the stand-in logs each request's source address,
and after the heal host B's address writes the lease never (no renewal, no re-acquisition by the old driver) and
``status.json`` never once the new driver holds the lease. The old driver may still delete its own stale lease
(the release is a compare-and-swap on its own bytes) and write its final status while the lease names it. Same
bound: the stream commits again within ttl + 90 s of the cut (``PARTITION TRIAL (d)``).

Everything started here (host B and its driver, the stand-in, the new driver, the veth pair) is stopped by
pid at the end, also on failure.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

import psutil
import pytest

from airflow_streaming import faults
from airflow_streaming.control import contract
from airflow_streaming.lifecycle.record import Action, Step
from airflow_streaming.lifecycle.stored import read_history
from airflow_streaming.lifecycle.supervisor import supervise
from airflow_streaming.supervision.policy import RestartPolicy
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from streams import wait_for
from test_two_hosts import HOST_B, _host_b
from webhdfs_standin import PREFIX, WebHdfsStandIn

pytestmark = pytest.mark.spark

POLICY = RestartPolicy(max_attempts=3, backoff_initial_s=1, backoff_max_s=5)
#: The spec's lease ttl: the trials wait it out, so it sets their length (the default, 120 s, adds half a minute each).
LEASE_TTL_S = 90.0
#: The stream must commit again within this many seconds after the lease ttl, counted from the cut.
RESUME_BOUND_AFTER_TTL_S = 90.0


def _in_b(pid: int, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["nsenter", "-t", str(pid), "-n", *args], capture_output=True, text=True, timeout=30)


class Cut:
    """B's network cut from A: iptables DROP both ways in B's namespace, or B's veth end down."""

    def __init__(self, b_pid: int, a_ip: str):
        self.b_pid, self.a_ip = b_pid, a_ip
        self.how: str | None = None
        self.veth = next(line.split(":")[1].strip().split("@")[0]
                         for line in _in_b(b_pid, "ip", "-o", "link").stdout.splitlines() if "veth" in line or "@" in line)

    def _rules(self, flag: str) -> list[subprocess.CompletedProcess]:
        return [_in_b(self.b_pid, "iptables", flag, "OUTPUT", "-d", self.a_ip, "-j", "DROP"),
                _in_b(self.b_pid, "iptables", flag, "INPUT", "-s", self.a_ip, "-j", "DROP")]

    def cut(self) -> None:
        if shutil.which("iptables") and all(r.returncode == 0 for r in self._rules("-I")):
            self.how = "iptables DROP"
            return
        self._rules("-D")
        done = _in_b(self.b_pid, "ip", "link", "set", self.veth, "down")
        assert done.returncode == 0, done.stderr
        self.how = "link down"

    def heal(self) -> None:
        if self.how == "iptables DROP":
            assert all(r.returncode == 0 for r in self._rules("-D"))
        elif self.how == "link down":
            done = _in_b(self.b_pid, "ip", "link", "set", self.veth, "up")
            assert done.returncode == 0, done.stderr
        self.how = None


def processes_of(run_id: str) -> list[psutil.Process]:
    """The processes (seen from host A, the parent PID namespace) whose command line carries ``run_id``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        with contextlib.suppress(psutil.Error):
            if proc.info["status"] != psutil.STATUS_ZOMBIE and run_id in " ".join(proc.info["cmdline"] or []):
                found.append(proc)
    return found


QUIET = ("NOTHING", "NOTIFIED", "WAITING", "SKIPPED", "OBSERVE")


def committed_by(log: str, checkpoint: Path) -> set[int]:
    """The batch ids whose checkpoint commit file a driver's log shows it writing."""
    marker = f"Writing atomically to file:{checkpoint.resolve()}/commits/"
    return {int(m.group(1)) for m in re.finditer(re.escape(marker) + r"(\d+) ", log)}


def query_stopped_at(log: str) -> float | None:
    """When the driver's log says its query ended, as ``time.time()``: it stopped (``graceful_stop``), or its
    batch was refused by the per-batch lease check (``lease_check``: the query fails with it, writing nothing)."""
    found = re.findall(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*(?:query \S+ stopped after|LEASE_LOST: refusing "
                       r"to write batch)", log, re.M)
    if not found:
        return None
    stamp, ms = found[-1]
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S")) + int(ms) / 1000


def commit_times(checkpoint: Path) -> dict[int, float]:
    """Batch id -> mtime of the checkpoint's commit file."""
    return {int(p.name): p.stat().st_mtime for p in (checkpoint / "commits").iterdir() if p.name.isdigit()}


def settled_commits(checkpoint: Path, *logs: str, timeout: float = 60) -> tuple[dict[int, float], list[str]]:
    """The commit files and the drivers' logs (paths) read once they agree: every commit a log shows written is
    a file, and every file is in a log. A running driver logs a commit before its file is renamed into place
    and may commit a trailing batch after its output is read, so one read of each, at two moments, can
    disagree (seen in the long run: trial c, batch 3 in the log, not yet a file). After ``timeout`` (a commit
    nobody logged: what the trials look for) what was read last is returned, for the caller's checks."""
    deadline = time.monotonic() + timeout
    while True:
        texts = [Path(log).read_text(errors="replace") for log in logs]
        commits = commit_times(checkpoint)
        logged = set().union(*(committed_by(text, checkpoint) for text in texts))
        if logged == set(commits) or time.monotonic() > deadline:
            return commits, texts
        time.sleep(0.2)


WRITE_OPS = ("CREATE", "APPEND", "DELETE", "RENAME")


class Requests:
    """The stand-in's requests with their source address (which host sent them), recorded from now on."""

    def __init__(self, nn: WebHdfsStandIn):
        self.seen: list[tuple[float, str, str, str, str]] = []  # (at, address, op, HDFS path, rename destination)
        seen = self.seen
        for server in nn._servers.values():
            class Recording(server.RequestHandlerClass):  # type: ignore[name-defined,misc]
                def _serve(self, method: str) -> None:
                    url = urlparse(self.path)
                    params = {k.lower(): v[-1] for k, v in parse_qs(url.query).items()}
                    seen.append((time.time(), self.client_address[0], params.get("op", "").upper(),
                                 unquote(url.path[len(PREFIX):]), params.get("destination", "")))
                    super()._serve(method)
            server.RequestHandlerClass = Recording

    def writes(self, address: str, path: str, since: float) -> list[tuple[float, str]]:
        """(time, op) of the requests from ``address`` since ``since`` that put a file at ``path`` (the rename
        that commits every whole-file write, a create) or delete it."""
        return [(at, op) for at, addr, op, where, dest in list(self.seen)
                if addr == address and at >= since and (dest == path or (where == path and op in WRITE_OPS))]


@pytest.fixture
def partitioned(tmp_path, monkeypatch):
    """Host B and the stand-in on host A's veth address (requested before ``streams``, so that they outlive
    the drivers' cleanup); the stack closes them, and heals a cut left behind."""
    monkeypatch.setenv("AIRFLOW_STREAMING_LOG_DIR", str(tmp_path / "driver-logs"))
    with contextlib.ExitStack() as stack:
        a_ip, b_ip, b = stack.enter_context(_host_b(tmp_path))
        nn = stack.enter_context(WebHdfsStandIn(str(tmp_path / "hdfs"), host=a_ip))
        yield a_ip, b_ip, b, nn, stack


def test_a_driver_cut_from_the_control_storage_stops_itself_and_the_supervisor_restarts_it(partitioned, streams,
                                                                                          monkeypatch):
    _cut_from_the_control_storage(partitioned, streams, monkeypatch, heal="after_resume")


def test_d_a_partition_that_heals_in_the_middle_of_the_takeover(partitioned, streams, monkeypatch):
    _cut_from_the_control_storage(partitioned, streams, monkeypatch, heal="mid_takeover")


def _cut_from_the_control_storage(partitioned, streams, monkeypatch, heal: str) -> None:
    """Host B's driver cut from the control storage for longer than the lease ttl, healed ``after_resume``
    (trial a: after the new driver's first commit) or ``mid_takeover`` (trial d: at ``hook.submitted`` in the
    pass that restarts the stream, before the new driver takes the lease)."""
    assert heal in ("after_resume", "mid_takeover"), heal
    trial = "a" if heal == "after_resume" else "d"
    began = time.monotonic()
    a_ip, b_ip, b, nn, stack = partitioned
    spec = streams.etl_spec(control_location=f"{nn.uri}/control", master="local[1]", lease_ttl=LEASE_TTL_S)
    hook = streams.hook(spec)
    inp, out = streams.path("input", "etl"), streams.path("output", "etl")
    checkpoint = Path(spec.checkpoint_location)
    fed = []

    def feed(tag: str, count: int = 100, files: int = 2) -> None:
        fed.append(generate_events(inp, count=count, files=files, run=tag, file_start_index=10 * len(fed)))

    # ---- host B deploys; its local driver holds the lease
    assert b.call("whoami")["hostname"] == HOST_B
    feed("p1-before-deploy", 200)
    deployed = b.call("deploy", spec=spec.to_dict(), timeout=300)
    old = deployed["run_id"]
    lease = contract.read_lease(hook.storage, hook.paths)
    assert (lease.run_id, lease.host) == (old, HOST_B), lease
    ttl = lease.ttl
    assert ttl == LEASE_TTL_S, ttl  # the spec's
    wait_for(lambda: set(read_etl_output(out).event_ids) >= {i for f in fed for i in f.event_ids}, 120,
             "phase 1 in the output")
    old_procs = processes_of(old)
    assert old_procs, "host B's driver is not visible from A"

    # ---- cut B from A while it runs and is fed
    requests = Requests(nn)
    cut = Cut(b.proc.pid, a_ip)
    cut_at = time.time()
    cut.cut()
    cut_how = cut.how
    stack.callback(cut.heal)  # a no-op once healed
    assert b.call("reach", urls=[f"{nn.url}/webhdfs/v1/?op=GETFILESTATUS"], timeout=30)[
        f"{nn.url}/webhdfs/v1/?op=GETFILESTATUS"] != 200
    feed("p2-during-cut")

    # ---- trial (d): heal inside the pass that restarts the stream, right after it submitted the new driver
    at_heal: dict = {}
    if heal == "mid_takeover":
        hit = faults.hit

        def heal_mid_takeover(point: str, subject: str = "") -> None:
            hit(point, subject)
            if point == "hook.submitted" and cut.how is not None:
                # Before the heal: the lease as the new driver will find it, and the record of the takeover.
                at_heal.update(run_id=subject, lease=contract.read_lease(hook.storage, hook.paths),
                               record=hook.lifecycle_record(), old_alive=bool(processes_of(old)))
                cut.heal()
                at_heal["at"] = time.time()

        monkeypatch.setattr(faults, "hit", heal_mid_takeover)

    # ---- host A: supervisor passes until the pass restarts the stream
    passes: list[tuple[float, str, str]] = []
    events: list[dict] = []
    restarted = None
    while time.time() - cut_at < ttl + RESUME_BOUND_AFTER_TTL_S:
        result = supervise(hook, POLICY, events.append)
        passes.append((round(time.time() - cut_at, 1), result.action, result.reason[:200]))
        if result.action not in QUIET:
            restarted = result
            break
        if time.time() - cut_at > 0.75 * ttl and len(fed) < 3:
            feed("p3-late-in-cut")  # after the old driver's half-ttl stop: for the new driver only
        time.sleep(3)
    print(f"\nsupervisor passes (s after the cut, action, reason): {json.dumps(passes)}")
    assert restarted is not None and restarted.action == "RESTARTED", (restarted, passes)
    new = restarted.new_run_id
    decided_at = cut_at + passes[-1][0]
    if heal == "mid_takeover":  # healed at hook.submitted of this pass: the RECOVER at STARTING, its run submitted
        assert at_heal and at_heal["run_id"] == new, at_heal
        record = at_heal["record"] or {}
        assert (record.get("action"), record.get("step"), record.get("new_run_id")) == (
            Action.RECOVER.value, Step.STARTING.value, new), record
    # The old lease, as the pass found it: stale, last renewed before the cut; no pass acted while it was fresh.
    # Trial (d) reads it at the heal (the old driver may delete its own stale lease once healed).
    old_lease = at_heal["lease"] if at_heal else contract.read_lease(hook.storage, hook.paths)
    assert old_lease.run_id == old and old_lease.renewed_at <= cut_at, old_lease
    assert decided_at >= old_lease.renewed_at + ttl and all(a in QUIET for _, a, _ in passes[:-1]), passes
    wait_for(lambda: getattr(contract.read_lease(hook.storage, hook.paths), "run_id", None) == new, 120,
             "the new driver's lease", interval=0.2)  # trial (d): none a moment (the old driver deleted its own)
    new_lease = contract.read_lease(hook.storage, hook.paths)
    assert new_lease.run_id == new != old and new_lease.host != HOST_B, new_lease
    if heal == "mid_takeover":  # the heal came before the new driver held the lease
        healed_at, old_alive_at_heal = at_heal["at"], at_heal["old_alive"]
        assert healed_at < new_lease.acquired_at, (healed_at, new_lease.acquired_at)

    # ---- the stream runs again; trial (a) heals the link only then: the old driver does not come back
    wait_for(lambda: (d := hook.status()) is not None and d.run_id == new and d.totals["batches"] >= 1, 120,
             "the new driver's first committed batch", interval=0.2)
    resumed_s = time.time() - cut_at
    if heal == "after_resume":
        old_alive_at_heal = bool(processes_of(old))
        cut.heal()
        healed_at = time.time()
    feed("p4-after-heal")
    wait_for(lambda: set(read_etl_output(out).event_ids) >= {i for f in fed for i in f.event_ids}, 120,
             "all input processed")
    wait_for(lambda: not processes_of(old), 60, "the cut-off driver's processes to exit")
    old_exit_s = time.time() - cut_at
    assert contract.read_lease(hook.storage, hook.paths).run_id == new
    assert b.call("watch", spec=spec.to_dict(), timeout=60)["record"]["run_id"] == new  # B sees the new one
    # After the heal host B never writes the lease (no renewal or re-take by the old driver; deleting its own
    # stale lease is allowed), nor the status document once the new driver wrote its own.
    lease_path, status_path = urlparse(hook.paths.lease).path, urlparse(hook.paths.status).path
    b_lease_writes = requests.writes(b_ip, lease_path, healed_at)
    b_status_writes = requests.writes(b_ip, status_path, healed_at)
    new_status_at = min(at for at, addr, _, _, dest in requests.seen
                        if addr != b_ip and dest == status_path and at >= new_lease.acquired_at)
    assert all(op == "DELETE" for _, op in b_lease_writes), b_lease_writes
    assert all(at < new_status_at for at, _ in b_status_writes), (b_status_writes, new_status_at)

    # ---- one committing driver at a time: which driver wrote which commit (its log), and when (the file)
    commits = commit_times(checkpoint)
    assert sorted(commits) == list(range(len(commits))), sorted(commits)  # no gap
    old_log = Path(hook.driver_log_path(old)).read_text(errors="replace")
    new_log = Path(hook.driver_log_path(new)).read_text(errors="replace")
    by_old, by_new = committed_by(old_log, checkpoint), committed_by(new_log, checkpoint)
    assert by_old and by_new and not by_old & by_new, (by_old, by_new)  # no batch committed twice
    # The new driver runs on: a batch it logs after the commit files were listed is not among them (seen once
    # under load, trial d: batch 4). The old driver is gone: every commit it logged is among them.
    later = {i for i in by_new if i > max(commits)}
    assert by_old | (by_new - later) == set(commits) and max(by_old) < min(by_new), (by_old, by_new, sorted(commits))
    by_new -= later
    old_last_commit = max(commits[i] for i in by_old)
    assert old_last_commit < new_lease.acquired_at < min(commits[i] for i in by_new)
    # The cut-off driver stopped itself (half the ttl without renewal) before the new lease was taken.
    assert "stopping so that no second driver can start beside this one" in old_log, old_log[-3000:]
    stopped = query_stopped_at(old_log)
    assert stopped is not None and stopped < new_lease.acquired_at, (stopped, new_lease.acquired_at)
    assert old_last_commit < stopped

    # ---- decided by the reconcile core, recorded and notified
    kinds = [e["kind"] for e in restarted.events] or [e["kind"] for e in events]
    print(f"notified: {kinds}; history: {read_history(hook)[-2:]}")
    assert kinds, events
    history = [h for h in read_history(hook) if new in json.dumps(h)]
    assert history, read_history(hook)[-3:]

    # ---- exactly once
    own_lines = "\n".join(line for line in old_log.splitlines() if "airflow_streaming" in line or "airflow-streaming" in line)
    assert hook.status().run_id == new, f"the cut-off driver's status over the new one's; its log:\n{own_lines[-4000:]}"
    output = read_etl_output(out)
    assert output.duplicates == {}
    assert set(output.event_ids) == {i for f in fed for i in f.event_ids}
    assert output.rows == sum(f.valid for f in fed)
    assert nn.unsupported == []

    figures = {"cut": cut_how, "lease_ttl_s": ttl, "lease_last_renewed_before_cut_s": round(cut_at - old_lease.renewed_at, 1),
               "old_last_commit_after_cut_s": round(old_last_commit - cut_at, 1),
               "old_query_stopped_after_cut_s": round(stopped - cut_at, 1),
               "old_processes_gone_after_cut_s": round(old_exit_s, 1), "old_alive_at_heal": old_alive_at_heal,
               "healed_after_cut_s": round(healed_at - cut_at, 1),
               "restart_decided_after_cut_s": passes[-1][0], "new_lease_after_cut_s": round(new_lease.acquired_at - cut_at, 1),
               "first_new_commit_after_cut_s": round(resumed_s, 1), "bound_s": ttl + RESUME_BOUND_AFTER_TTL_S,
               "batches_old": sorted(by_old), "batches_new": len(by_new), "events": sum(f.valid for f in fed),
               "notified": kinds, "history": [h.get("action") for h in history], "test_runtime_s": round(time.monotonic() - began, 1)}
    if heal == "mid_takeover":
        figures.update({"healed_at": "hook.submitted (lifecycle RECOVER at STARTING, new driver spawned)",
                        "healed_before_new_lease_s": round(new_lease.acquired_at - healed_at, 2),
                        "b_lease_writes_after_heal": [op for _, op in b_lease_writes],
                        "b_status_writes_after_heal": len(b_status_writes),
                        "b_last_status_write_before_new_status_s": round(
                            new_status_at - max(at for at, _ in b_status_writes), 2) if b_status_writes else None})
    print(f"PARTITION TRIAL ({trial}) {json.dumps(figures)}")
    assert resumed_s < ttl + RESUME_BOUND_AFTER_TTL_S
