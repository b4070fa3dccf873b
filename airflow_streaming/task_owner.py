"""Who acts on a stream, when an Airflow task does: ``<dag_id>.<task_id>[<map index>] run <run_id> try <n>``.

``lifecycle.json``, ``history.json``, ``deployed.json`` and the lifecycle lock name their owner this way.
This module writes the form (:func:`task_owner`) and reads it back (:func:`parse_task_owner`): the lock
tells a later try of the same task instance from any other holder, and the Streams page links an action to
its DAG run and task. Plain Python (no Airflow import).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_OWNER = re.compile(r"^(?P<dag_task>\S+?)(?:\[(?P<map_index>\d+)\])? run (?P<run_id>.+) try (?P<try>\d+)$")


@dataclass(frozen=True)
class TaskOwner:
    dag_task: str
    """``<dag_id>.<task_id>`` (either may contain dots)."""
    map_index: int | None
    run_id: str
    try_number: int

    @property
    def task_instance(self) -> tuple[str, int | None, str]:
        """What stays the same across the tries of one task instance."""
        return self.dag_task, self.map_index, self.run_id


def task_owner(ti: Any) -> str:
    """The owner string of a task instance's try (the map index only for a mapped task)."""
    map_index = getattr(ti, "map_index", -1)
    mapped = f"[{map_index}]" if isinstance(map_index, int) and map_index >= 0 else ""
    return f"{ti.dag_id}.{ti.task_id}{mapped} run {ti.run_id} try {ti.try_number}"


def parse_task_owner(owner: Any) -> TaskOwner | None:
    """The task try an owner string names; ``None`` for other owners (a supervisor's pid, a person)."""
    m = _OWNER.match(owner.strip()) if isinstance(owner, str) else None
    if m is None:
        return None
    index = m.group("map_index")
    return TaskOwner(m.group("dag_task"), int(index) if index is not None else None, m.group("run_id"),
                     int(m.group("try")))
