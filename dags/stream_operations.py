"""Manual operations on a managed stream, from the Airflow UI's trigger form.

Pick a stream of the desired-state file (``[airflow_streaming] desired_state_file``), an action and
optionally a version: ``deploy`` / ``stop`` / ``restart`` / ``upgrade`` (to the chosen version, or the
wanted one) / ``rollback`` (to the version before the last successful upgrade) / ``status``. The form
rejects unknown streams and actions; a version the stream does not list fails with the list of its
versions. The desired-state file is the deployment's (set in this file or the configuration), never a
field of the form: whoever may trigger the DAG chooses among the streams it lists, not a spec file. Upgrades, restarts and rollbacks go through the same gated, snapshotted, resumable machinery
as the upgrade window (``docs/upgrades.md``); triggering the same operation again after a crash
resumes it. The task is :class:`~airflow_streaming.operators.lifecycle.SparkStreamOperationOperator`:
with ``[operators] default_deferrable = True`` every wait (the gate's report, a driver's exit, a start,
probation) runs in the triggerer and the task holds a worker slot only for the short steps.
"""

from __future__ import annotations

from pathlib import Path

import pendulum
from airflow.sdk import Param, dag

from airflow_streaming.config import desired_state_file
from airflow_streaming.operators.lifecycle import SparkStreamOperationOperator

# [airflow_streaming] desired_state_file, else $AIRFLOW_STREAMING_DESIRED_STATE, else specs/ beside this file.
DESIRED_STATE = desired_state_file(Path(__file__).resolve().parent)


def _choices() -> tuple[list[str], list[str]]:
    """Stream names and versions for the form (free text if the file cannot be read at parse time)."""
    try:
        from airflow_streaming.lifecycle.desired_state import load_desired_state

        state = load_desired_state(DESIRED_STATE)
    except Exception:  # noqa: BLE001 - the task reports the real error
        return [], []
    versions = sorted({v for t in state.streams.values() for v in t.versions})
    return list(state.streams), versions


STREAMS, VERSIONS = _choices()
ACTIONS = ["status", "deploy", "stop", "restart", "upgrade", "rollback"]


@dag(
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["streaming", "lifecycle"],
    params={
        "stream": Param(STREAMS[0] if STREAMS else "", type="string", title="Stream",
                        **({"enum": STREAMS} if STREAMS else {"minLength": 1})),
        "action": Param("status", type="string", enum=ACTIONS, title="Action"),
        "version": Param("", type="string", title="Version", description="empty: the version wanted in the "
                         "desired-state file", **({"enum": ["", *VERSIONS]} if VERSIONS else {})),
        "allow_warnings": Param(False, type="boolean", title="Allow compatibility warnings"),
    },
    doc_md=__doc__,
)
def stream_operations():
    SparkStreamOperationOperator(
        task_id="operate", stream="{{ params.stream }}", action="{{ params.action }}",
        version="{{ params.version }}", allow_warnings="{{ params.allow_warnings }}",
        desired_state=DESIRED_STATE)  # never a form field: whoever may trigger must not pick the spec file


stream_operations()
