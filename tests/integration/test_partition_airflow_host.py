"""Partition trial (b) of issue 36: Airflow's host cut from the driver's host and from the cluster master, but
not from the control storage.

Four hosts, the machinery of trial (c) (``test_partition_standby.three_hosts``) and a real standalone master:

- Host A is this test process (the root namespaces): it runs the WebHDFS-protocol STAND-IN for a NameNode
  (``tests/webhdfs_standin.py``); the stream's control files live there.
- The MASTER'S HOST: a REAL Spark standalone master and worker (``tests/standalone_cluster.py``; 1 core, the
  stream's one executor) listening on an address of their own - the next address on B's link, held by A's
  network namespace (added here, removed after). So the master is reached at its own address, and C can be cut
  from it alone while it still reaches the stand-in. It shares A's other namespaces (its processes are A's).
- Host B is ``tests/two_hosts_agent.py`` in its own network, UTS, PID and mount namespaces. B deploys the stream
  (lifecycle DEPLOY) in standalone CLIENT mode: the driver runs on B (``spark.driver.host`` is B's address, where
  the executor on the worker reaches it back), so the driver's host is B, its application is on the master.
- Host C is a second agent, started the same way, with its own veth pair to A: it is AIRFLOW'S HOST. It runs
  what an Airflow scheduler/worker runs for a stream: the supervisor's pass (the agent's ``supervise``, the
  reconcile core), the watch of a sensor (the agent's ``watch``: the health verdict - which asks the master
  about the stream's application, ``cluster_app_state``, and takes no answer as no word -, the status document,
  the driver record, the driver's liveness and the lease), and at the end the graceful stop. The stream has no hot standby: what C's pass could do wrong here is RESTART a driver it can
  neither see nor ask about, and so start a second one.

B and C reach each other only through A (``ip_forward`` on in A's namespace, restored after; a route in each),
and an HTTP listener in each shows the path works (``reach``, which also asks the master's ``/json/``). Input,
sink, quarantine and checkpoint are on the file system all share (like an NFS mount), as in trials (a) and (c).

The cut: ``iptables -j DROP`` in B's network namespace for C's address (both ways) and in C's for the master's
address (both ways), for ``CUT_S`` seconds (many supervisor passes) while the stream runs and is fed; ``reach``
shows C reaches neither B nor the master during the cut, while B reaches the master and both reach the stand-in.
C has no proof that the driver died (it cannot see B's processes, and the master does not answer it) and the
lease stays fresh (B renews it): every pass on C must stay quiet (nothing restarted, nothing taken over; a
notification of the stream's health is allowed), and the watch must keep naming the running driver.

Checked: every pass on C (before, during and after the cut) is quiet and starts no run; C's watch names the
driver's run throughout and never calls it FAILED or STOPPED; the lease, the driver record and the run marker
name the one run all along and the lease is never older than its ttl; every checkpoint commit is written by
that driver (its log), with no gap, and it commits during the cut; no other run ever appears (the history holds
the one deploy and nothing else - no ``recover``, ``restart`` or ``failover`` -, and the driver logs' directory
holds the one run's log); after the heal nothing changes. Then C stops the stream gracefully (the run marker, in
the control storage) and the sink holds what was fed exactly once. Figures: ``PARTITION TRIAL (b)``, with how
soon the driver quiesced after C asked for the stop and how long C's stop took. C cannot see the driver's
process; the stop ends on the control files' word (the run's status STOPPED, its lease given back:
``hook.stopped_out_of_sight``), well within the stop timeout. Before that rule reached the lifecycle's GONE wait
(``lifecycle/waits.py``) C's stop waited out the whole stop timeout (60 s) although the driver stopped at a
batch boundary and gave its lease back within seconds.

Not covered: a cluster-mode driver (on a worker, where C's look at the master's submission state is the
liveness), and a driver that dies during the cut (without a proof C's pass would wait for the stale lease, as in
trial (a)).

Everything started here (hosts B and C and the driver, the master and the worker, the listeners, the stand-in,
the veth pairs, the master's address, the routes and the cuts) is stopped by pid or removed at the end, also on
failure; ``ip_forward`` is restored.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from airflow_streaming.control import contract
from airflow_streaming.lifecycle.stored import read_history
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import read_etl_output
from standalone_cluster import class_archive_conf, standalone_cluster
from streams import wait_for
from test_partition_standby import HOST_C, POLICY, three_hosts  # noqa: F401 - three_hosts is the fixture
from test_partition_trials import QUIET, Cut, committed_by, processes_of, settled_commits
from test_two_hosts import HOST_B, _ip

pytestmark = pytest.mark.spark

#: How long Airflow's host stays cut from the driver's host and the master: many supervisor passes (one every
#: ~8 s during the cut: C's looks at the master wait out their timeouts).
CUT_S = 40.0
#: Passes on C after the heal, before the stop: nothing may change once C reaches B again.
PASSES_AFTER_HEAL = 3
#: Health states the watch must never give the running driver.
DEAD_STATES = ("FAILED", "STOPPED")


@pytest.fixture
def with_master(three_hosts, tmp_path):  # noqa: F811
    """The three hosts and a REAL standalone master and worker on a host of their own: an address of its own
    (the next one on B's link, held by host A's network namespace), so that the cut can take C off it while C
    still reaches the stand-in. Requested before ``streams``: the cluster outlives the drivers' cleanup."""
    b_ip, b, c_ip, c, nn, b_url, c_url, stack = three_hosts
    a_ip_b = nn.url.split("//", 1)[1].rsplit(":", 1)[0]
    master_ip = a_ip_b.rsplit(".", 1)[0] + ".3"
    dev = next(line.split()[1] for line in _ip("-o", "-4", "addr", "show").stdout.splitlines()
               if f" {a_ip_b}/" in line)
    added = _ip("addr", "add", f"{master_ip}/24", "dev", dev)
    assert added.returncode == 0, added.stderr
    (tmp_path / "cluster").mkdir()
    try:
        with standalone_cluster(tmp_path / "cluster", host=master_ip, cores=1, memory="1g") as cluster:
            yield (*three_hosts, master_ip, cluster)
    finally:
        _ip("addr", "del", f"{master_ip}/24", "dev", dev)


def test_b_airflows_host_cut_from_the_drivers_host_and_the_master_restarts_nothing(with_master, streams):
    began = time.monotonic()
    b_ip, b, c_ip, c, nn, b_url, c_url, stack, master_ip, cluster = with_master
    storage_url = f"{nn.url}/webhdfs/v1/?op=GETFILESTATUS"

    master_url = f"{cluster.ui}/json/"

    def reach() -> dict[str, object]:
        """What each of B and C reaches: the other host, the stand-in and the master."""
        from_b = b.call("reach", urls=[c_url, storage_url, master_url], timeout=60)
        from_c = c.call("reach", urls=[b_url, storage_url, master_url], timeout=60)
        return {"b->c": from_b[c_url], "b->storage": from_b[storage_url], "b->master": from_b[master_url],
                "c->b": from_c[b_url], "c->storage": from_c[storage_url], "c->master": from_c[master_url]}

    # ---- three hosts; B and C reach each other (through A) and the stand-in
    me_b, me_c = b.call("whoami"), c.call("whoami")
    assert (me_b["hostname"], me_c["hostname"]) == (HOST_B, HOST_C)
    assert all(me_b["ns"][kind] != me_c["ns"][kind] for kind in ("net", "uts", "pid", "mnt")), (me_b, me_c)
    wait_for(lambda: set(reach().values()) == {200}, 30, "B and C reaching each other and the stand-in")
    before = reach()

    # A client-mode driver on B (its executor on the worker reaches it back at B's address).
    spec = streams.etl_spec(control_location=f"{nn.uri}/control", master=cluster.master, deploy_mode="client",
                            master_ui_url=cluster.ui,
                            spark_conf={"spark.sql.shuffle.partitions": 2, "spark.ui.enabled": "false",
                                        "spark.cores.max": "1", "spark.executor.memory": "512m",
                                        "spark.driver.host": b_ip, **class_archive_conf()})
    hook = streams.hook(spec)
    inp, out = streams.path("input", "etl"), streams.path("output", "etl")
    checkpoint = Path(spec.checkpoint_location)
    fed = []

    def feed(tag: str, count: int = 100, files: int = 2) -> None:
        fed.append(generate_events(inp, count=count, files=files, run=tag, file_start_index=10 * len(fed)))

    def all_fed() -> set[str]:
        return {i for f in fed for i in f.event_ids}

    passes: list[tuple[float, str, str, list]] = []  # (s after the cut, action, reason, notified)
    watches: list[tuple[float, str, str | None, str]] = []  # (s after the cut, health, status run, liveness)

    def look_from_c(since: float, run_id: str) -> None:
        """One supervisor pass and one watch on C, each checked: quiet, and naming the one run."""
        result = c.call("supervise", spec=spec.to_dict(), policy=POLICY, timeout=120)
        passes.append((round(time.time() - since, 1), result["action"], result["reason"][:160], result["notified"]))
        assert result["action"] in QUIET and result["new_run_id"] is None, passes
        seen = c.call("watch", spec=spec.to_dict(), timeout=60)
        status_run = (seen["status"] or {}).get("run_id")
        watches.append((round(time.time() - since, 1), seen["health"], status_run, seen["liveness"]))
        assert seen["health"] not in DEAD_STATES, (seen["health"], seen["summary"])
        assert status_run == run_id and (seen["record"] or {}).get("run_id") == run_id, seen
        assert (seen["lease"] or {}).get("run_id") == run_id, seen["lease"]

    # ---- B deploys: the driver runs on B
    feed("p1-before-deploy", 200)
    active = b.call("deploy", spec=spec.to_dict(), timeout=300)["run_id"]
    lease = contract.read_lease(hook.storage, hook.paths)
    assert (lease.run_id, lease.host) == (active, HOST_B), lease
    ttl = lease.ttl
    wait_for(lambda: set(read_etl_output(out).event_ids) >= all_fed(), 120, "phase 1 in the output")
    active_procs = processes_of(active)
    assert active_procs, "host B's driver is not visible from A"
    assert c.call("probe", pids=[p.pid for p in active_procs], run_id=active)["processes_with_run_id"] == []

    # ---- Airflow's host looks before the cut: quiet
    look_from_c(time.time(), active)
    passes_before, watches_before = list(passes), list(watches)
    passes.clear()
    watches.clear()

    # ---- cut C from B (not from A: the stand-in) while the stream runs and is fed
    cut, cut_master = Cut(b.proc.pid, c_ip), Cut(c.proc.pid, master_ip)
    stack.callback(cut.heal)  # a no-op once healed
    stack.callback(cut_master.heal)
    cut_at = time.time()
    cut.cut()
    cut_master.cut()
    cut_how = cut.how
    # a link down would cut B (or C) from the stand-in too
    assert cut_how == cut_master.how == "iptables DROP", (cut_how, cut_master.how)
    feed("p2-during-cut")
    during = reach()
    assert during["b->storage"] == during["c->storage"] == during["b->master"] == 200, during
    assert during["b->c"] != 200 and during["c->b"] != 200 and during["c->master"] != 200, during

    # ---- during the cut: every pass on C quiet, the watch names the driver, the lease fresh and the driver's
    renewals: set[float] = set()
    oldest_lease_s = 0.0
    while time.time() - cut_at < CUT_S:
        look_from_c(cut_at, active)
        now_lease = contract.read_lease(hook.storage, hook.paths)
        assert (now_lease.run_id, now_lease.host) == (active, HOST_B), now_lease
        renewals.add(now_lease.renewed_at)
        oldest_lease_s = max(oldest_lease_s, time.time() - now_lease.renewed_at)
        assert hook.driver_record().run_id == active
        assert contract.read_marker(hook.storage, hook.paths)["run_id"] == active
        if len(fed) < 3 and time.time() - cut_at > CUT_S / 2:
            feed("p3-mid-cut")
        time.sleep(2)
    assert oldest_lease_s < ttl, oldest_lease_s
    passes_in_cut, watches_in_cut = list(passes), list(watches)
    passes.clear()
    watches.clear()
    cut.heal()
    cut_master.heal()
    healed_at = time.time()
    after = reach()
    assert set(after.values()) == {200}, after

    # ---- after the heal: more input, all of it processed by the same driver; C's passes still quiet
    feed("p4-after-heal")
    for _ in range(PASSES_AFTER_HEAL):
        look_from_c(healed_at, active)
        time.sleep(2)
    wait_for(lambda: set(read_etl_output(out).event_ids) >= all_fed(), 120, "all input processed")
    lease = contract.read_lease(hook.storage, hook.paths)
    assert (lease.run_id, lease.host) == (active, HOST_B) and hook.driver_record().run_id == active, lease
    assert contract.read_marker(hook.storage, hook.paths)["run_id"] == active
    passes_after, watches_after = list(passes), list(watches)

    # ---- one driver all along: every commit by it (its log), none missing, some during the cut
    commits, (active_log,) = settled_commits(checkpoint, hook.driver_log_path(active))
    assert sorted(commits) == list(range(len(commits))), sorted(commits)  # no gap
    by_active = committed_by(active_log, checkpoint)
    assert by_active == set(commits), (sorted(by_active), sorted(commits))
    during_cut = sorted(i for i, at in commits.items() if cut_at <= at <= healed_at)
    assert during_cut, commits  # the driver went on committing during the cut
    history = read_history(hook)
    assert [(h.get("action"), h.get("new_run_id")) for h in history] == [("deploy", active)], history[-3:]
    driver_logs = sorted(p.name for p in Path(hook.driver_log_path(active)).parent.iterdir())
    assert all(active in name for name in driver_logs), driver_logs  # no other driver was ever launched

    # ---- exactly once
    output = read_etl_output(out)
    assert output.duplicates == {}
    assert set(output.event_ids) == all_fed() and output.rows == sum(f.valid for f in fed)
    assert nn.unsupported == []

    # ---- Airflow's host stops the stream gracefully (through the control storage; it cannot see B's processes)
    stop_asked = time.time()
    c.send("stop", spec=spec.to_dict())
    wait_for(lambda: hook.quiesced(active) or c.ready(), 120, "the driver to stop at a batch boundary", interval=0.2)
    quiesced_s = time.time() - stop_asked if hook.quiesced(active) else None
    stopped = c.result(timeout=180)
    stop_s = time.time() - stop_asked
    assert stopped["graceful"] and not stopped["killed"], stopped
    # Ended on the control files' word, not at the stop timeout: a few seconds after the driver quiesced.
    assert quiesced_s is not None and stop_s < spec.stop_timeout - 10, (quiesced_s, stop_s, spec.stop_timeout)
    wait_for(lambda: not processes_of(active), 60, "the driver's processes to exit")
    assert set(read_etl_output(out).event_ids) == all_fed() and read_etl_output(out).duplicates == {}
    # The record names a driver on B, which this host cannot check (UNKNOWN counts as alive in the fixture's
    # cleanup): its processes are gone (seen from A, the parent PID namespace), so the record is cleared.
    raw = hook.storage.read_bytes(hook.paths.driver)
    if raw is not None and active.encode() in raw:
        hook.storage.unguarded.compare_and_swap(hook.paths.driver, raw, None)

    figures = {"cut": cut_how, "cut_s": round(healed_at - cut_at, 1), "reach_before": before,
               "reach_during": during, "reach_after": after, "lease_ttl_s": ttl,
               "lease_renewals_seen_in_cut": len(renewals), "oldest_lease_seen_in_cut_s": round(oldest_lease_s, 1),
               "passes_on_c": {"before": [p[1] for p in passes_before], "in_cut": [p[1] for p in passes_in_cut],
                               "after_heal": [p[1] for p in passes_after]},
               "health_on_c_in_cut": sorted({w[1] for w in watches_in_cut}),
               "liveness_on_c": sorted({w[3] for w in watches_before + watches_in_cut + watches_after}),
               "notified_on_c": sorted({k for p in passes_before + passes_in_cut + passes_after for k in p[3]}),
               "batches": len(commits), "batches_in_cut": len(during_cut),
               "commits_in_cut_at_s": [round(commits[i] - cut_at, 1) for i in during_cut],
               "master_apps": [(a.get("id"), a.get("state")) for a in (cluster.master_json() or {}).get(
                   "activeapps", []) + (cluster.master_json() or {}).get("completedapps", [])],
               "second_driver": False, "stop_from_c": {k: stopped.get(k) for k in ("graceful", "killed", "seconds")},
               "stop_from_c_s": round(stop_s, 1),
               "driver_quiesced_after_stop_asked_s": None if quiesced_s is None else round(quiesced_s, 1),
               "events": sum(f.valid for f in fed), "test_runtime_s": round(time.monotonic() - began, 1)}
    print(f"\npasses on C during the cut (s after the cut, action, reason, notified): {json.dumps(passes_in_cut)}")
    print(f"watches on C during the cut (s after the cut, health, status run, liveness): {json.dumps(watches_in_cut)}")
    print(f"PARTITION TRIAL (b) {json.dumps(figures)}")
