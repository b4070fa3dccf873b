"""Who acts on a stream, as the lifecycle records and locks name an Airflow task try."""

from __future__ import annotations

from typing import Any


def task_owner(ti: Any) -> str:
    """``<dag_id>.<task_id>[<map index>] run <run_id> try <n>`` for a task instance (the map index only for a
    mapped task): what ``lifecycle.json``, ``history.json``, ``deployed.json`` and the lifecycle lock name as
    the owner; :func:`airflow_streaming.lifecycle.lock.task_attempt` reads it back."""
    map_index = getattr(ti, "map_index", -1)
    mapped = f"[{map_index}]" if isinstance(map_index, int) and map_index >= 0 else ""
    return f"{ti.dag_id}.{ti.task_id}{mapped} run {ti.run_id} try {ti.try_number}"
