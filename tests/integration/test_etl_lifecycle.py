"""Deploy -> progress -> graceful stop at a batch boundary -> restart -> exactly-once output, on real Spark."""

from __future__ import annotations

import threading

import pytest

from airflow_streaming.control import contract
from airflow_streaming.exceptions import StreamAlreadyRunningError
from spark_jobs.event_generator import generate_events
from spark_jobs.outputs import count_quarantined, read_etl_output
from streams import current_status, totals, wait_for
import stream_actions

pytestmark = pytest.mark.spark


@pytest.mark.long(covered_by="tests/integration/test_kill_and_replay.py::"
                           "test_stop_timeout_kills_then_restart_replays_the_batch_exactly_once")
def test_deploy_stop_restart_is_exactly_once(streams):
    spec = streams.etl_spec()
    hook = streams.hook(spec)
    inp = streams.path("input", "etl")
    fed = [generate_events(inp, count=300, files=3, malformed_every=20, run="phase1")]

    record = stream_actions.submit(hook)
    doc = hook.wait_until_ready(record)
    assert doc.state == contract.RUNNING and doc.app_id and doc.pid != record.submit_pid

    # A second deploy of the running stream is refused before anything is submitted.
    with pytest.raises(StreamAlreadyRunningError, match="already running.*Stop it before deploying again"):
        stream_actions.submit(streams.hook(spec))
    assert hook.driver_record().run_id == record.run_id

    lines1 = fed[0].valid + fed[0].malformed
    wait_for(lambda: (totals(hook, record.run_id) or {}).get("input_rows", 0) >= lines1, 90, "phase 1 processed")
    doc = current_status(hook, record.run_id)
    query = doc.queries[0]
    assert query.recent_progress and query.recent_progress[-1]["batchId"] == query.last_batch_id
    assert sum(p["numInputRows"] for p in query.recent_progress) == lines1
    # Malformed lines are quarantined and counted; the stream keeps running.
    assert doc.totals["quarantined_rows"] == fed[0].malformed
    assert doc.state == contract.RUNNING and doc.last_exception is None

    # Graceful stop while more input is arriving: it lands on a batch boundary.
    fed.append(generate_events(inp, count=200, files=4, malformed_every=20, run="phase2", file_start_index=10))
    report = stream_actions.stop(hook)
    assert report.graceful and not report.killed and report.exit_code == contract.EXIT_GRACEFUL
    assert report.position.clean, report.to_dict()
    last_committed = report.position.last_committed
    stopped = hook.status()
    assert stopped.state == contract.STOPPED and stopped.exit["last_committed_batch"] == last_committed
    assert not hook.storage.exists(hook.paths.lease), "a graceful stop releases the lease"

    # Restart from the checkpoint with more input: it continues with the next batch id.
    fed.append(generate_events(inp, count=250, files=2, malformed_every=20, run="phase3", file_start_index=20))
    record2 = stream_actions.submit(hook)
    hook.wait_until_ready(record2)
    all_ids = {i for batch in fed for i in batch.event_ids}
    wait_for(lambda: set(read_etl_output(streams.path("output", "etl")).event_ids) >= all_ids, 120,
             "all valid events in the output")
    first_progress = current_status(hook, record2.run_id).queries[0].recent_progress[0]
    assert first_progress["batchId"] == last_committed + 1
    report2 = stream_actions.stop(hook)
    assert report2.graceful and report2.position.clean

    # Exactly once: every valid record once, nothing else; every malformed line quarantined once.
    output = read_etl_output(streams.path("output", "etl"))
    assert output.duplicates == {}
    assert set(output.event_ids) == all_ids and output.rows == len(all_ids) == sum(b.valid for b in fed)
    assert count_quarantined(streams.path("quarantine", "etl")) == sum(b.malformed for b in fed)


@pytest.mark.long(covered_by="tests/integration/test_hdfs_upgrade_rollback.py::"
                           "test_upgrade_rollback_with_control_and_checkpoint_on_webhdfs")
def test_a_rollback_that_replays_batches_with_other_boundaries_is_exactly_once(streams):
    """v2 reads 1 file per batch and commits ~8 batches before its probation fails; the rollback restores
    v1's checkpoint and v1 (5 files per batch) replays the same input in 2 batches. v2's foreachBatch
    partitions batch_id=3.. would stay beside v1's as duplicates; v1's first batch drops them."""
    from airflow_streaming.lifecycle.record import Action, Probation, Step
    from airflow_streaming.lifecycle.runner import LifecycleOptions, LifecycleRunner

    inp, out = streams.path("input", "rb"), streams.path("output", "rb")
    v1 = streams.etl_spec(name="rb").with_version("v1")
    v1 = v1.with_version("v1", application_args=[*v1.application_args, "--max-files-per-trigger", "5"])
    fed = [generate_events(inp, count=50, files=5, malformed_every=0, run="rb0")]
    deployed = LifecycleRunner(v1, Action.DEPLOY).run()
    assert deployed.step == Step.SUCCEEDED, deployed.error
    hook = streams.hook(v1)
    wait_for(lambda: set(read_etl_output(out).event_ids) >= set(fed[0].event_ids), 90, "v1's first files")
    fed.append(generate_events(inp, count=80, files=8, malformed_every=0, run="rb1", file_start_index=10))
    wait_for(lambda: set(read_etl_output(out).event_ids) >= set(fed[1].event_ids), 90, "v1 processed them")
    # v2 reads 1 file per batch; its probation cannot pass (40 batches in 30 s). Its input arrives once it
    # runs (v1 is stopped and snapshotted by then), so v2 commits ~10 one-file batches before the rollback.
    v2 = v1.with_version("v2", application_args=[*v1.application_args[:-2], "--max-files-per-trigger", "1"])
    result: list = []
    upgrade_task = threading.Thread(target=lambda: result.append(LifecycleRunner(
        v2, Action.UPGRADE, LifecycleOptions(probation=Probation(min_batches=40, window_s=30), poll_s=0.5)).run()))
    upgrade_task.start()
    try:
        wait_for(lambda: (hook.lifecycle_record() or {}).get("step") == "PROBATION", 120, "v2 in probation")
        fed.append(generate_events(inp, count=100, files=10, malformed_every=0, run="rb2", file_start_index=30))
        wait_for(lambda: ((d := hook.status()) is not None and d.version == "v2" and (d.last_batch_id() or 0) >= 6)
                 or not upgrade_task.is_alive(), 60, "v2 to commit several one-file batches")
        v2_batches = hook.status().last_batch_id() if hook.status().version == "v2" else None
    finally:
        upgrade_task.join(300)
    upgrade = result[0]
    assert upgrade.step == Step.ROLLED_BACK, (upgrade.step, upgrade.error)
    assert v2_batches is not None and upgrade.stop_batch is not None and v2_batches >= upgrade.stop_batch + 4, (
        v2_batches, upgrade.stop_batch)  # v2 wrote batches the rollback undid
    all_ids = {i for batch in fed for i in batch.event_ids}
    wait_for(lambda: set(read_etl_output(out).event_ids) >= all_ids, 120, "v1 replayed what v2 had done")
    report = stream_actions.stop(hook)
    assert report.graceful
    output = read_etl_output(out)
    assert output.duplicates == {}, f"{len(output.duplicates)} events written twice across the rollback"
    assert set(output.event_ids) == all_ids
