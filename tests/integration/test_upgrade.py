"""Upgrades of the stateful bundled job under continuous input, on real Spark drivers.

Every test compares the file sink's committed output with what was fed: each (window, device) count
equals the number of events fed into it - nothing lost, nothing duplicated, state carried over.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from airflow_streaming.lifecycle.record import Action, Probation, Step
from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner, read_history
from spark_jobs.outputs import committed_sink_files, read_window_counts
from signals import Feeder, expected_windows, window_of
from streams import wait_for
import stream_actions

pytestmark = pytest.mark.spark

JOBS = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
OPTIONS = LifecycleOptions(probation=Probation(min_batches=2, window_s=120), poll_s=0.5)


def signals_spec(streams, application: str, version: str, name: str = "signals", **overrides):
    """A device-signals spec reading the shared input; output and checkpoint are named after the stream."""
    inp, out, ckpt = streams.path("input", "signals"), streams.path("output", name), streams.path("checkpoints", name)
    if application.endswith(".py"):  # a user script: INPUT OUTPUT CHECKPOINT
        args = [inp, out, ckpt]
    else:
        args = ["--input", inp, "--output", out, "--window", "1 minute", "--watermark", "30 seconds"]
    return streams.spec(name, application, args, version=version, **overrides)


def start_v1(streams):
    feeder = Feeder(streams.path("input", "signals"))
    feeder.feed(40)  # event time 0..39 s before the first start
    v1 = signals_spec(streams, "device_signals", "v1")
    hook = streams.hook(v1)
    record = stream_actions.submit(hook)
    hook.wait_until_ready(record)
    feeder.start()
    return feeder, v1, hook, record


def assert_exactly_once(out: str, feeder: Feeder) -> dict:
    last = feeder.stop()
    expected = expected_windows(last)
    wait_for(lambda: read_window_counts(out) == expected, 150,
             f"every closed window of events 0..{last} written exactly once")
    return expected


def windows_in_files(files: list[str], column: str | None = None) -> set[str]:
    import pyarrow.parquet as pq

    found = set()
    for f in files:
        table = pq.read_table(f)
        if column is None or column in table.column_names:
            found |= {v.isoformat() for v in table.column("window_start").to_pylist()}
    return found


@pytest.mark.long(covered_by="tests/integration/test_spark_runtime_upgrade.py::"
                           "test_stateful_stream_moves_from_spark_35_to_4x_keeps_state_rolls_back_to_its_old_runtime_and_refuses_a_downgrade")
def test_gate_refuses_incompatible_then_compatible_upgrade_carries_state_exactly_once(streams):
    feeder, v1, hook, r1 = start_v1(streams)
    out = streams.path("output", "signals")
    wait_for(lambda: read_window_counts(out), 120, "v1 writes closed windows")
    streams.hook(signals_spec(streams, "device_signals_v2", "v2"))  # for cleanup

    # Incompatible (a new grouping key): refused at the gate, v1 untouched and still processing.
    v3 = signals_spec(streams, str(JOBS / "device_signals_by_site.py"), "v3")
    refused = LifecycleRunner(v3, Action.UPGRADE, OPTIONS).run()
    assert refused.step == Step.REFUSED and refused.verdict == "INCOMPATIBLE"
    assert "key" in refused.error.lower() and [s["step"] for s in refused.steps] == ["PLANNED", "REFUSED"]
    assert hook.driver_record().run_id == r1.run_id and hook.alive(r1)
    batches = hook.status().totals["batches"]
    wait_for(lambda: hook.status().totals["batches"] > batches + 1, 60, "v1 keeps committing batches")

    # Compatible: stop at a batch boundary, snapshot, start v2, probation.
    v2 = signals_spec(streams, "device_signals_v2", "v2")
    done = LifecycleRunner(v2, Action.UPGRADE, OPTIONS).run()
    assert done.step == Step.SUCCEEDED, done.error
    assert [s["step"] for s in done.steps] == ["PLANNED", "CHECKED", "STOPPING", "STOPPED", "SNAPSHOTTED",
                                               "STARTING", "PROBATION", "SUCCEEDED"]
    assert done.first_new_batch == done.stop_batch + 1  # v2 continued from v1's last committed batch
    assert hook.processes_of_run(r1.run_id) == [] and hook.driver_record().run_id == done.new_run_id
    assert hook.deployed()["spec"]["version"] == "v2"
    history = read_history(hook)
    assert [(h["action"], h["from_version"], h["to_version"], h["outcome"]) for h in history] == [
        ("upgrade", "v1", "v3", "REFUSED"), ("upgrade", "v1", "v2", "SUCCEEDED")]
    assert os.path.isfile(os.path.join(done.snapshot["snapshot_dir"], "manifest.json"))
    with open(os.path.join(done.snapshot["snapshot_dir"], "spec.json")) as fh:
        assert json.load(fh)["spec"]["version"] == "v1"  # the snapshot names the version that restarts it

    # State carried over: a window holding events v1 had processed well before the stop is emitted by
    # v2 (the files with v2's new column) with its full count.
    stopping_at = next(s["at"] for s in done.steps if s["step"] == "STOPPING")
    straddling = window_of(feeder.seq_at(stopping_at - 5))
    wait_for(lambda: straddling in windows_in_files(committed_sink_files(out), "signal_band"), 120,
             f"v2 emits window {straddling}, opened under v1")
    expected = assert_exactly_once(out, feeder)
    assert straddling in {w for w, _ in expected}


@pytest.mark.long(covered_by="tests/integration/test_hdfs_upgrade_rollback.py::"
                           "test_upgrade_rollback_with_control_and_checkpoint_on_webhdfs")
def test_v2_failing_on_first_batch_rolls_back_to_v1_from_the_snapshot(streams):
    feeder, v1, hook, r1 = start_v1(streams)
    out = streams.path("output", "signals")
    wait_for(lambda: read_window_counts(out), 120, "v1 writes closed windows")
    broken = signals_spec(streams, str(JOBS / "device_signals_broken.py"), "v2-broken")
    events: list[dict] = []
    record = LifecycleRunner(broken, Action.UPGRADE, OPTIONS, notify=events.append).run()

    assert record.step == Step.ROLLED_BACK, record.error
    assert [s["step"] for s in record.steps] == ["PLANNED", "CHECKED", "STOPPING", "STOPPED", "SNAPSHOTTED",
                                                 "STARTING", "PROBATION", "ROLLING_BACK", "RESTORED",
                                                 "RESTARTING_OLD", "ROLLED_BACK"]
    assert "calibration table missing" in record.error  # the new version's own error is reported
    assert hook.driver_record().run_id == record.rollback_run_id and hook.deployed()["spec"]["version"] == "v1"
    assert hook.processes_of_run(record.new_run_id) == []
    assert hook.health().state.value in ("HEALTHY", "IDLE")
    assert [e["kind"] for e in events] == ["UPGRADE_ROLLED_BACK"] and events[0]["version"] == "v1"
    aside = [p for p in os.listdir(streams.path("checkpoints")) if ".rolled-back-" in p]
    assert aside, "the failed version's checkpoint is kept aside for forensics"
    assert read_history(hook)[-1]["outcome"] == "ROLLED_BACK"
    assert_exactly_once(out, feeder)


def test_parallel_transition_for_an_incompatible_change_ends_with_only_the_new_stream(streams):
    # Two drivers run side by side during the transition: one core each.
    feeder = Feeder(streams.path("input", "signals"))
    feeder.feed(40)
    v1 = signals_spec(streams, "device_signals", "v1", master="local[1]")
    old = streams.hook(v1)
    r1 = stream_actions.submit(old)
    old.wait_until_ready(r1)
    feeder.start()
    # The retired stream's output is checked below: let it close a window first (on a loaded machine
    # its ~20 s of running did not always get that far, and the check then had nothing to check).
    wait_for(lambda: read_window_counts(streams.path("output", "signals")), 180, "the old stream's first window")
    v3 = signals_spec(streams, str(JOBS / "device_signals_by_site.py"), "v3", name="signals-by-site",
                      master="local[1]")
    new = streams.hook(v3)
    record = LifecycleRunner(v3, Action.PARALLEL, OPTIONS, current=v1).run()

    assert record.step == Step.SUCCEEDED, record.error
    assert [s["step"] for s in record.steps] == ["PLANNED", "STARTING", "CATCHING_UP", "RETIRING", "SUCCEEDED"]
    assert old.running_driver() is None and old.processes_of_run(r1.run_id) == []
    assert old.status().exit["code"] == 0 and old.batch_position().clean  # retired gracefully
    assert new.running_driver() and new.driver_record().run_id == record.new_run_id
    assert read_history(old)[-1]["outcome"] == read_history(new)[-1]["outcome"] == "SUCCEEDED"

    # The new stream processed the whole input from its fresh checkpoint, exactly once per site.
    last = feeder.stop()
    expected = expected_windows(last)

    def by_device() -> dict:
        import pyarrow.dataset as ds

        files = committed_sink_files(streams.path("output", "signals-by-site"))
        if not files:
            return {}
        table = ds.dataset(files, format="parquet").to_table(columns=["window_start", "device_id", "events"])
        counts: dict = {}
        columns = (table.column(c).to_pylist() for c in ("window_start", "device_id", "events"))
        for w, d, n in zip(*columns, strict=True):
            counts[(w.isoformat(), d)] = counts.get((w.isoformat(), d), 0) + n
        return counts

    wait_for(lambda: by_device() == expected, 150, "the new stream's windows, summed over sites, match the input")
    # The retired stream's output is exactly once for every window it closed.
    old_counts = read_window_counts(streams.path("output", "signals"))
    assert old_counts and all(expected[k] == n for k, n in old_counts.items())
    json.dumps(record.to_dict())  # the record stays JSON-safe


@pytest.mark.long(covered_by="tests/integration/test_own_job.py::"
                           "test_a_teams_own_job_is_deployed_judged_upgraded_warm_and_failed_over_exactly_once")
def test_warm_start_prepares_the_new_driver_first_and_still_rolls_back(streams):
    """Warm start: the new version is prepared (JVM, session, planned query) beside v1, the compatibility
    gate runs inside that prepared driver, and v1 is stopped only once it passed (PREPARING -> CHECKED ->
    STOPPING); a standby that fails after promotion rolls back."""
    feeder, v1, hook, r1 = start_v1(streams)
    out = streams.path("output", "signals")
    wait_for(lambda: read_window_counts(out), 120, "v1 writes closed windows")
    warm = LifecycleOptions(probation=Probation(min_batches=2, window_s=120), poll_s=0.5, warm_start=True)

    broken = signals_spec(streams, str(JOBS / "device_signals_broken.py"), "v2-broken")
    failed = LifecycleRunner(broken, Action.UPGRADE, warm).run()
    assert failed.step == Step.ROLLED_BACK and "calibration table missing" in failed.error
    assert [s["step"] for s in failed.steps][:5] == ["PLANNED", "PREPARING", "CHECKED", "STOPPING", "STOPPED"]
    assert hook.processes_of_run(failed.new_run_id) == []

    v2 = signals_spec(streams, "device_signals_v2", "v2")
    done = LifecycleRunner(v2, Action.UPGRADE, warm).run()
    assert done.step == Step.SUCCEEDED, done.error
    assert [s["step"] for s in done.steps] == ["PLANNED", "PREPARING", "CHECKED", "STOPPING", "STOPPED",
                                               "SNAPSHOTTED", "STARTING", "PROBATION", "SUCCEEDED"]
    checked = next(s["detail"] for s in done.steps if s["step"] == "CHECKED")
    assert checked.startswith("compatibility COMPATIBLE") and "checked inside the prepared driver" in checked
    # The request was there before the standby started: it ran the check once while preparing (a warm-up
    # whose result it discards), then answered with a fresh check once READY.
    standby_log = Path(hook.driver_log_path(done.new_run_id)).read_text(errors="replace")
    assert f"warm-up check for gate request {done.id}" in standby_log, standby_log[-3000:]
    assert f"gate request {done.id} answered in" in standby_log
    # The standby replayed its job's plan once on a scratch copy (noop sink) before it was promoted, and the
    # copy is gone; the old run quiesced (stopped, lease given back) before the promotion.
    assert re.search(r"plan warm-up replayed batch \d+ \(\d+ files", standby_log), standby_log[-3000:]
    assert not list(Path(hook.paths.root, "warm-up").glob("*"))
    assert done.first_new_batch == done.stop_batch + 1
    assert hook.standby_state(done.new_run_id)["state"] == "PROMOTED"
    assert hook.driver_record().run_id == done.new_run_id and hook.deployed()["spec"]["version"] == "v2"
    assert_exactly_once(out, feeder)


def test_a_gate_that_cannot_run_refuses_and_touches_nothing(streams):
    import shutil

    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "checkpoints" / "spark42_agg_dedup"
    shutil.copytree(fixture, streams.path("checkpoints", "signals"))
    before = sorted(p.name for p in Path(streams.path("checkpoints", "signals")).rglob("*"))
    missing = signals_spec(streams, streams.path("jobs", "not_there.py"), "v9")
    record = LifecycleRunner(missing, Action.UPGRADE, OPTIONS).run()
    assert record.step == Step.REFUSED and "not_there.py" in record.error and "does not exist" in record.error
    assert sorted(p.name for p in Path(streams.path("checkpoints", "signals")).rglob("*")) == before
    assert read_history(streams.hook(missing))[-1]["outcome"] == "REFUSED"
