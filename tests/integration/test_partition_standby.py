"""Partition trial (c) of issue 36: the hot standby's host cut from the active driver's host, but not from the
control storage.

Three hosts, each a set of namespaces:

- Host A is this test process (the root namespaces): it runs the WebHDFS-protocol STAND-IN for a NameNode
  (``tests/webhdfs_standin.py``) on its end of host B's veth pair; the stream's control files live there.
- Host B is ``tests/two_hosts_agent.py`` in its own network, UTS, PID and mount namespaces
  (``test_two_hosts._host_b``). B deploys the stream (lifecycle DEPLOY): the ACTIVE driver is a local-mode
  driver on B.
- Host C is a second agent started the same way, with its own veth pair to A. C runs the supervisor's pass
  (the agent's ``supervise``); the pass decides PREPARE_STANDBY, so the HOT STANDBY is submitted from C and,
  in local mode, runs on C. That is where the product puts a standby: on the host that runs the pass.

B and C have no route to each other until the test builds one through A: ``ip_forward`` on in A's namespace
(restored after) and a route in each of B and C to the other's subnet via A. An HTTP listener in each of B
and C shows the path works (``reach``). Input, sink, quarantine and checkpoint are on the file system all
three share (like an NFS mount), as in trial (a).

The cut: ``iptables -j DROP`` in B's network namespace for C's address only (both ways), for ``CUT_S``
seconds while the stream runs and is fed; ``reach`` shows B and C cannot reach each other during the cut while
both still reach the stand-in. The standby has no proof that the active driver died: it cannot see its
processes (another PID namespace), in local mode there is no master to ask, and the lease stays fresh (B
renews it). So it must not take over. C's supervisor passes during the cut stay quiet. Then the cut is healed.

Checked: the lease, the driver record and the run marker name the active run all along and the lease is never
older than its ttl; the standby stays READY and never takes over (no ``took over`` in its log, no ``failover``
or ``recover`` in the history); every checkpoint commit is written by the active driver (its log), none by the
standby, and the active driver commits during the cut; the sink holds what was fed exactly once. Then B stops
the stream gracefully and the standby on C exits. The cut lasts many times the cross-host takeover time
measured with a proof of death (about 2 s, ``test_cross_host_takeover``). Figures: ``PARTITION TRIAL (c)``.

Not done here: after the heal, SIGKILL the active driver and show the standby takes over once the lease is
stale. It cannot be short: the ttl is at least 120 s, and the standby must itself see the lease unchanged for
the whole ttl (``death_proof.decide``, LEASE_EXPIRED).

Everything started here (hosts B and C and their drivers, the listeners, the stand-in, the veth pairs, the
routes and the cut) is stopped by pid or removed at the end, also on failure; ``ip_forward`` is restored.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from airflow_streaming.control import contract
from airflow_streaming.lifecycle.stored import read_history
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from streams import wait_for
from test_partition_trials import QUIET, Cut, committed_by, processes_of, settled_commits
from test_two_hosts import AGENT, HOST_B, REPO, HostB, _free_subnet, _host_b, _ip, _nsenter_ip
from webhdfs_standin import WebHdfsStandIn

pytestmark = pytest.mark.spark

HOST_C = "stream-ops-c"
#: How long B and C stay cut: many times the ~2 s cross-host takeover on a proof of death.
CUT_S = 35.0
POLICY = {"max_attempts": 3, "backoff_initial_s": 1, "backoff_max_s": 5}
LISTEN_PORT = 18765
CROSS_HOST_TAKEOVER_S = 2.1  # docs/failover.md: a takeover with a proof of death, test_cross_host_takeover


@contextlib.contextmanager
def _host_c(tmp_path: Path) -> Iterator[tuple[str, str, HostB]]:
    """Host C: the agent in its own namespaces like ``test_two_hosts._host_b`` (which names its veth pair after
    this process, so it cannot be entered twice), on a veth pair of its own; (A's address on it, C's, HostB)."""
    subnet = _free_subnet()
    a_ip, c_ip = f"10.213.{subnet}.1", f"10.213.{subnet}.2"
    veth_a, veth_c = f"tc{os.getpid() % 100000}a", f"tc{os.getpid() % 100000}c"
    hosts = tmp_path / "host-c.hosts"
    hosts.write_text(f"127.0.0.1 localhost {HOST_C}\n{a_ip} {socket.gethostname()}\n")
    log = tmp_path / "host-c.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), str(REPO / "tests"), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])}
    proc = subprocess.Popen(
        ["unshare", "--net", "--uts", "--pid", "--fork", "--mount-proc", "--kill-child",
         sys.executable, "-u", str(AGENT), HOST_C, str(hosts)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(log, "wb"), env=env, text=True,
        start_new_session=True)
    c = HostB(proc, log)
    veth_made = False
    try:
        own_net = os.readlink("/proc/self/ns/net")
        wait_for(lambda: proc.poll() is not None or os.readlink(f"/proc/{proc.pid}/ns/net") != own_net, 15,
                 "host C's network namespace")
        assert proc.poll() is None, c.tail()
        _ip("link", "del", veth_a)  # a leftover of a crashed run with this pid's names
        made = _ip("link", "add", veth_a, "type", "veth", "peer", "name", veth_c)
        assert made.returncode == 0, made.stderr
        veth_made = True
        for args in (("addr", "add", f"{a_ip}/24", "dev", veth_a), ("link", "set", veth_a, "up"),
                     ("link", "set", veth_c, "netns", str(proc.pid))):
            done = _ip(*args)
            assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr}"
        _nsenter_ip(proc.pid, "addr", "add", f"{c_ip}/24", "dev", veth_c)
        _nsenter_ip(proc.pid, "link", "set", veth_c, "up")
        _nsenter_ip(proc.pid, "link", "set", "lo", "up")
        yield a_ip, c_ip, c
    finally:
        c.close()
        if veth_made:
            _ip("link", "del", veth_a)


def _subnet(ip: str) -> str:
    return ip.rsplit(".", 1)[0] + ".0/24"


@contextlib.contextmanager
def _routed_through_a(b_pid: int, b_ip: str, a_ip_b: str, c_pid: int, c_ip: str, a_ip_c: str) -> Iterator[None]:
    """B and C reach each other through host A: forwarding on in A's namespace (its old value restored after),
    a route in each to the other's subnet via A's address on its own link (the routes go with the namespaces)."""
    forwarding = Path("/proc/sys/net/ipv4/ip_forward")
    before = forwarding.read_text().strip()
    forwarding.write_text("1")
    try:
        _nsenter_ip(b_pid, "route", "add", _subnet(c_ip), "via", a_ip_b)
        _nsenter_ip(c_pid, "route", "add", _subnet(b_ip), "via", a_ip_c)
        yield
    finally:
        forwarding.write_text(before)


@contextlib.contextmanager
def _listener(host_pid: int, ip: str, directory: Path) -> Iterator[str]:
    """An HTTP listener on ``ip`` in the host's network namespace (a process of this test, stopped by pid)."""
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(["nsenter", "-t", str(host_pid), "-n", sys.executable, "-m", "http.server", "--bind", ip,
                             str(LISTEN_PORT), "--directory", str(directory)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://{ip}:{LISTEN_PORT}/"
    finally:
        proc.kill()
        proc.wait(timeout=30)


def _pid_namespace(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


@pytest.fixture
def three_hosts(tmp_path, monkeypatch):
    """Hosts B and C, the stand-in on host A's address on B's link, the route between B and C through A and a
    listener on each (requested before ``streams``, so that they outlive the drivers' cleanup):
    (a_ip on B's link, b_ip, B, c_ip, C, stand-in, B's listener, C's listener, the stack). The stack closes
    them, and heals a cut left behind."""
    monkeypatch.setenv("AIRFLOW_STREAMING_LOG_DIR", str(tmp_path / "driver-logs"))
    with contextlib.ExitStack() as stack:
        a_ip_b, b_ip, b = stack.enter_context(_host_b(tmp_path))
        nn = stack.enter_context(WebHdfsStandIn(str(tmp_path / "hdfs"), host=a_ip_b))
        a_ip_c, c_ip, c = stack.enter_context(_host_c(tmp_path))
        stack.enter_context(_routed_through_a(b.proc.pid, b_ip, a_ip_b, c.proc.pid, c_ip, a_ip_c))
        b_url = stack.enter_context(_listener(b.proc.pid, b_ip, tmp_path / "listen-b"))
        c_url = stack.enter_context(_listener(c.proc.pid, c_ip, tmp_path / "listen-c"))
        yield b_ip, b, c_ip, c, nn, b_url, c_url, stack


def test_c_a_standby_cut_from_the_active_drivers_host_never_takes_over(three_hosts, streams):
    began = time.monotonic()
    b_ip, b, c_ip, c, nn, b_url, c_url, stack = three_hosts
    storage_url = f"{nn.url}/webhdfs/v1/?op=GETFILESTATUS"

    def reach() -> dict[str, object]:
        """What each of B and C reaches: the other host and the stand-in."""
        from_b = b.call("reach", urls=[c_url, storage_url], timeout=30)
        from_c = c.call("reach", urls=[b_url, storage_url], timeout=30)
        return {"b->c": from_b[c_url], "b->storage": from_b[storage_url],
                "c->b": from_c[b_url], "c->storage": from_c[storage_url]}

    # ---- three hosts; B and C reach each other (through A) and the stand-in
    me_b, me_c = b.call("whoami"), c.call("whoami")
    assert (me_b["hostname"], me_c["hostname"]) == (HOST_B, HOST_C)
    assert all(me_b["ns"][kind] != me_c["ns"][kind] for kind in ("net", "uts", "pid", "mnt")), (me_b, me_c)
    wait_for(lambda: set(reach().values()) == {200}, 30, "B and C reaching each other and the stand-in")
    before = reach()

    spec = streams.etl_spec(control_location=f"{nn.uri}/control", master="local[1]", hot_standby=True)
    hook = streams.hook(spec)
    inp, out = streams.path("input", "etl"), streams.path("output", "etl")
    checkpoint = Path(spec.checkpoint_location)
    fed = []

    def feed(tag: str, count: int = 100, files: int = 2) -> None:
        fed.append(generate_events(inp, count=count, files=files, run=tag, file_start_index=10 * len(fed)))

    def all_fed() -> set[str]:
        return {i for f in fed for i in f.event_ids}

    # ---- B deploys: the active driver runs on B
    feed("p1-before-deploy", 200)
    active = b.call("deploy", spec=spec.to_dict(), timeout=300)["run_id"]
    lease = contract.read_lease(hook.storage, hook.paths)
    assert (lease.run_id, lease.host) == (active, HOST_B), lease
    ttl = lease.ttl
    wait_for(lambda: set(read_etl_output(out).event_ids) >= all_fed(), 120, "phase 1 in the output")

    # ---- C's supervisor pass prepares the hot standby: it runs on C
    prepared = c.call("supervise", spec=spec.to_dict(), policy=POLICY, timeout=300)
    assert prepared["action"] == "STANDBY_PREPARED", prepared
    standby = prepared["new_run_id"]
    record = hook.standby_record()
    assert record is not None and (record.run_id, record.host) == (standby, HOST_C), record
    wait_for(lambda: (hook.hot_standby_state() or {}).get("state") == "READY", 240, "the hot standby READY on C")
    ready_at = time.time()
    active_procs, standby_procs = processes_of(active), processes_of(standby)
    assert active_procs and standby_procs, (active_procs, standby_procs)
    assert {_pid_namespace(p.pid) for p in active_procs} == {me_b["ns"]["pid"]}, active_procs
    assert {_pid_namespace(p.pid) for p in standby_procs} == {me_c["ns"]["pid"]}, standby_procs
    assert c.call("probe", pids=[], run_id=active)["processes_with_run_id"] == []  # C cannot see the active driver

    # ---- cut B from C (not from A: the stand-in) while the stream runs and is fed
    cut = Cut(b.proc.pid, c_ip)
    stack.callback(cut.heal)  # a no-op once healed
    cut_at = time.time()
    cut.cut()
    cut_how = cut.how
    assert cut_how == "iptables DROP", cut_how  # a link down would cut B from the stand-in too
    feed("p2-during-cut")
    during = reach()
    assert during["b->storage"] == during["c->storage"] == 200, during
    assert during["b->c"] != 200 and during["c->b"] != 200, during

    # ---- during the cut: C's passes stay quiet, the standby waits, the lease stays fresh and the active's
    passes: list[tuple[float, str, str]] = []
    renewals: set[float] = set()
    oldest_lease_s = 0.0
    while time.time() - cut_at < CUT_S:
        result = c.call("supervise", spec=spec.to_dict(), policy=POLICY, timeout=120)
        passes.append((round(time.time() - cut_at, 1), result["action"], result["reason"][:160]))
        assert result["action"] in QUIET, passes
        now_lease = contract.read_lease(hook.storage, hook.paths)
        assert (now_lease.run_id, now_lease.host) == (active, HOST_B), now_lease
        renewals.add(now_lease.renewed_at)
        oldest_lease_s = max(oldest_lease_s, time.time() - now_lease.renewed_at)
        assert hook.driver_record().run_id == active
        assert contract.read_marker(hook.storage, hook.paths)["run_id"] == active
        assert hook.hot_standby_state()["state"] == "READY", hook.hot_standby_state()
        if len(fed) < 3 and time.time() - cut_at > CUT_S / 2:
            feed("p3-mid-cut")
        time.sleep(3)
    assert oldest_lease_s < ttl, oldest_lease_s
    cut.heal()
    healed_at = time.time()
    after = reach()
    assert set(after.values()) == {200}, after

    # ---- after the heal: more input, all of it processed by the active driver
    feed("p4-after-heal")
    wait_for(lambda: set(read_etl_output(out).event_ids) >= all_fed(), 120, "all input processed")
    assert hook.hot_standby_state()["state"] == "READY"
    lease = contract.read_lease(hook.storage, hook.paths)
    assert (lease.run_id, lease.host) == (active, HOST_B) and hook.driver_record().run_id == active, lease

    # ---- one committing driver all along: which driver wrote which commit (its log), and when (the file)
    commits, (active_log, standby_log) = settled_commits(checkpoint, hook.driver_log_path(active),
                                                         hook.driver_log_path(standby))
    assert sorted(commits) == list(range(len(commits))), sorted(commits)  # no gap
    by_active, by_standby = committed_by(active_log, checkpoint), committed_by(standby_log, checkpoint)
    assert by_active == set(commits) and by_standby == set(), (by_active, by_standby, sorted(commits))
    during_cut = sorted(i for i, at in commits.items() if cut_at <= at <= healed_at)
    assert during_cut, commits  # the active driver went on committing during the cut
    assert "took over" not in standby_log and f"standby run {standby} of" in standby_log, standby_log[-3000:]
    history = read_history(hook)
    assert not [h for h in history if h.get("action") in ("failover", "recover")], history[-3:]

    # ---- exactly once
    output = read_etl_output(out)
    assert output.duplicates == {}
    assert set(output.event_ids) == all_fed() and output.rows == sum(f.valid for f in fed)
    assert nn.unsupported == []

    # ---- B stops the stream gracefully; the standby on C then exits by itself
    stopped = b.call("stop", spec=spec.to_dict(), timeout=180)
    assert stopped["graceful"] and stopped["clean"], stopped
    wait_for(lambda: not processes_of(active) and not processes_of(standby), 60, "both drivers' processes to exit")
    standby_doc = json.loads(hook.storage.read_bytes(hook.paths.standby) or b"null")
    assert standby_doc is None or standby_doc.get("state") == "EXPIRED", standby_doc
    # B's record names a driver on B, which this host cannot check (UNKNOWN counts as alive in the fixture's
    # cleanup): its processes are gone (seen from A, the parent PID namespace), so the record is cleared.
    raw = hook.storage.read_bytes(hook.paths.driver)
    if raw is not None and active.encode() in raw:
        hook.storage.unguarded.compare_and_swap(hook.paths.driver, raw, None)

    figures = {"cut": cut_how, "cut_s": round(healed_at - cut_at, 1),
               "standby_ready_before_cut_s": round(cut_at - ready_at, 1), "reach_before": before, "reach_during": during,
               "reach_after": after, "lease_ttl_s": ttl, "lease_renewals_seen_in_cut": len(renewals),
               "oldest_lease_seen_in_cut_s": round(oldest_lease_s, 1),
               "cut_over_cross_host_takeover": round((healed_at - cut_at) / CROSS_HOST_TAKEOVER_S, 1),
               "passes_on_c_in_cut": [a for _, a, _ in passes], "standby_state": "READY",
               "batches_active": len(by_active), "batches_active_in_cut": len(during_cut),
               "active_commits_in_cut_at_s": [round(commits[i] - cut_at, 1) for i in during_cut],
               "batches_standby": len(by_standby), "events": sum(f.valid for f in fed),
               "test_runtime_s": round(time.monotonic() - began, 1)}
    print(f"\npasses on C during the cut (s after the cut, action, reason): {json.dumps(passes)}")
    print(f"PARTITION TRIAL (c) {json.dumps(figures)}")
