"""Scheduled upgrade window: apply pending version changes from the desired-state file.

The desired-state file (``[airflow_streaming] desired_state_file``, else ``AIRFLOW_STREAMING_DESIRED_STATE``,
else ``dags/specs/desired_state.yaml``) lists every managed stream, its versions and the version wanted.
At the window's cron time
(``AIRFLOW_STREAMING_UPGRADE_CRON``, default Sundays 03:00) each stream whose deployed version differs
is upgraded - one stream at a time, each behind the compatibility gate, with snapshot, probation and
automatic rollback (``docs/upgrades.md``) - and a summary ends the run. The run fails if any change
did not succeed (the others still ran). Re-running a run that died mid-upgrade resumes that upgrade.

Each change is one mapped :class:`~airflow_streaming.operators.lifecycle.SparkStreamOperationOperator`
task (``apply``, one at a time); with ``[operators] default_deferrable = True`` its waits (gate, stop,
start, probation) run in the triggerer, so the window holds a worker slot only for the short steps.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pendulum
from airflow.sdk import dag, get_current_context, task

from airflow_streaming.config import desired_state_file
from airflow_streaming.operators.lifecycle import SparkStreamOperationOperator

# [airflow_streaming] desired_state_file, else $AIRFLOW_STREAMING_DESIRED_STATE, else specs/ beside this file.
DESIRED_STATE = desired_state_file(Path(__file__).resolve().parent)


@dag(
    schedule=os.environ.get("AIRFLOW_STREAMING_UPGRADE_CRON", "0 3 * * 0"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["streaming", "lifecycle"],
    doc_md=__doc__,
)
def stream_upgrade_window():
    @task
    def plan() -> list[dict]:
        from airflow_streaming.lifecycle.desired_state import load_desired_state, pending_changes
        from airflow_streaming.lifecycle.operations import deployed_versions

        ctx = get_current_context()
        state = load_desired_state(DESIRED_STATE)  # the DAG author's file, never a trigger form's
        changes = pending_changes(state, deployed_versions(state))
        for c in changes:
            print(f"pending: {c.stream} {c.from_version or '(not deployed)'} -> {c.to_version} ({c.transition})")
        if not changes:
            print(f"nothing to do: every stream in {state.path} runs its wanted version")
        ctx["ti"].xcom_push(key="changes", value=[{"stream": c.stream, "from": c.from_version, "to": c.to_version}
                                                  for c in changes])
        # One mapped `apply` task per change: deploy a stream never deployed, upgrade the others.
        return [{"stream": c.stream, "action": "deploy" if c.from_version is None else "upgrade",
                 "version": c.to_version} for c in changes]

    # One stream at a time; an outcome other than success is reported by the summary, not raised here.
    # Retries: an action resumes from its record, so a retry continues it (never a second submission) - also
    # when the window runs blocking. Deferrable, the task would get these by default anyway, for Airflow 3.3's
    # defer race (airflow_streaming/defer_race.py).
    apply = SparkStreamOperationOperator.partial(
        task_id="apply", desired_state=DESIRED_STATE, fail_on_outcome=False,
        retries=2, retry_delay=timedelta(seconds=15),
        max_active_tis_per_dagrun=1).expand_kwargs(plan())

    @task(trigger_rule="all_done")
    def summary() -> list[dict]:
        from airflow.providers.common.compat.sdk import AirflowFailException

        ti = get_current_context()["ti"]
        changes = ti.xcom_pull(task_ids="plan", key="changes") or []
        results = []
        for index, change in enumerate(changes):
            result = ti.xcom_pull(task_ids="apply", map_indexes=index) or {}
            entry = {**change, "outcome": result.get("outcome") or "ERROR", "error": result.get("error")}
            if not result:
                entry["error"] = f"the apply task [{index}] failed: see its log"
            elif result.get("started_at") and result.get("ended_at"):
                entry["seconds"] = round(float(result["ended_at"]) - float(result["started_at"]), 1)
            results.append(entry)
            print(f"{entry['stream']}: {entry['from'] or '-'} -> {entry['to']}: {entry['outcome']}"
                  + (f" in {entry['seconds']}s" if entry.get("seconds") is not None else "")
                  + (f" ({entry['error']})" if entry.get("error") else ""))
        failed = [r for r in results if r["outcome"] not in ("SUCCEEDED", "DEPLOYED", "UNCHANGED")]
        if failed:
            raise AirflowFailException(f"{len(failed)} of {len(results)} change(s) did not succeed: "
                                       + "; ".join(f"{r['stream']} {r['outcome']}" for r in failed))
        return results

    apply >> summary()


stream_upgrade_window()
