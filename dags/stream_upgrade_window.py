"""Scheduled upgrade window: apply pending version changes from the desired-state file.

The desired-state file (``[airflow_streaming] desired_state_file``, else ``AIRFLOW_STREAMING_DESIRED_STATE``,
else ``dags/specs/desired_state.yaml``) lists every managed stream, its versions and the version wanted.
At the window's cron time
(``AIRFLOW_STREAMING_UPGRADE_CRON``, default Sundays 03:00) each stream whose deployed version differs
is upgraded - one stream at a time, each behind the compatibility gate, with snapshot, probation and
automatic rollback (``docs/upgrades.md``) - and a summary ends the run. The run fails if any change
did not succeed (the others still ran). Re-running a run that died mid-upgrade resumes that upgrade.
"""

from __future__ import annotations

import os
from pathlib import Path

import pendulum
from airflow.sdk import Param, dag, get_current_context, task

from airflow_streaming.config import desired_state_file

# [airflow_streaming] desired_state_file, else $AIRFLOW_STREAMING_DESIRED_STATE, else specs/ beside this file.
DESIRED_STATE = desired_state_file(Path(__file__).resolve().parent)


@dag(
    schedule=os.environ.get("AIRFLOW_STREAMING_UPGRADE_CRON", "0 3 * * 0"),
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["streaming", "lifecycle"],
    params={"desired_state": Param(DESIRED_STATE, type="string", description="path of the desired-state YAML")},
    doc_md=__doc__,
)
def stream_upgrade_window():
    @task
    def plan() -> list[dict]:
        from airflow_streaming.lifecycle.desired_state import load_desired_state, pending_changes
        from airflow_streaming.lifecycle.operations import deployed_versions

        state = load_desired_state(get_current_context()["params"]["desired_state"])
        changes = pending_changes(state, deployed_versions(state))
        for c in changes:
            print(f"pending: {c.stream} {c.from_version or '(not deployed)'} -> {c.to_version} ({c.transition})")
        if not changes:
            print(f"nothing to do: every stream in {state.path} runs its wanted version")
        return [{"stream": c.stream, "from": c.from_version, "to": c.to_version} for c in changes]

    @task
    def apply(planned: list[dict]) -> list[dict]:
        from airflow_streaming.lifecycle.desired_state import load_desired_state
        from airflow_streaming.lifecycle.operations import apply_pending

        ctx = get_current_context()
        ti = ctx["ti"]
        owner = f"{ti.dag_id}.{ti.task_id} run {ti.run_id} try {ti.try_number}"
        return apply_pending(load_desired_state(ctx["params"]["desired_state"]), owner=owner)

    @task
    def summary(results: list[dict]) -> list[dict]:
        from airflow.providers.common.compat.sdk import AirflowFailException

        for r in results:
            print(f"{r['stream']}: {r['from'] or '-'} -> {r['to']}: {r['outcome']} in {r['seconds']}s"
                  + (f" ({r['error']})" if r.get("error") else ""))
        failed = [r for r in results if r["outcome"] not in ("SUCCEEDED", "DEPLOYED", "UNCHANGED")]
        if failed:
            raise AirflowFailException(f"{len(failed)} of {len(results)} change(s) did not succeed: "
                                       + "; ".join(f"{r['stream']} {r['outcome']}" for r in failed))
        return results

    summary(apply(plan()))


stream_upgrade_window()
