"""Which streams a user of the Streams page may see: those whose deploying DAG they may read.

Airflow shows a DAG run only to users the auth manager lets read its DAG; the page does the same for
streams. A stream (its row, spec, history, charts and actions) is shown to a user who may read the
DAG whose task deployed it - the ``deployed_by`` that the seal of ``deployed.json``'s spec binds, with the
spec, this stream's name and its control directory (:func:`airflow_streaming.sealing.deployer_of`), so a
driver cannot claim another DAG, nor copy another stream's or an older deployment's deployer. Which
DAGs a user may read comes from the auth manager (``get_authorized_dag_ids``: teams and per-DAG
permissions included). A stream whose deployer is unknown (deployed before this was recorded, by
the command line, sealed by an earlier version of the provider, or a forged or copied record) is
shown only to users who may read every DAG.

A lifecycle owner names ``<dag_id>.<task_id>``, and both may contain dots: every split whose DAG
exists is a candidate, and the user must be able to read all of them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from airflow_streaming.ui.streams import StreamRef
from airflow_streaming.ui.views import parse_owner


@dataclass
class StreamAccess:
    """The streams a user may see, and whether they may read every DAG (they then also see discovery
    errors, which name other streams' directories)."""

    visible: list[StreamRef] = field(default_factory=list)
    reads_every_dag: bool = False
    hidden: int = 0


def deploying_dags(owner: str | None) -> set[str]:
    """The DAG ids a deployer owner string may name (several when dots make it ambiguous)."""
    parsed = parse_owner(owner)
    return {dag_id for dag_id, _ in parsed["candidates"]} if parsed else set()


def visible_streams(refs: Iterable[StreamRef], user: Any, session: Any, auth_manager: Any = None) -> StreamAccess:
    """Filter ``refs`` for ``user`` (see the module docstring); ``auth_manager`` defaults to Airflow's."""
    from sqlalchemy import select

    from airflow.models.dag import DagModel

    if auth_manager is None:
        from airflow.api_fastapi.app import get_auth_manager

        auth_manager = get_auth_manager()
    refs = list(refs)
    readable = set(auth_manager.get_authorized_dag_ids(user=user, method="GET", session=session))
    existing = set(session.scalars(select(DagModel.dag_id)).all())
    access = StreamAccess(reads_every_dag=existing <= readable)
    for ref in refs:
        candidates = deploying_dags(ref.deployed_by) & existing
        if candidates and candidates <= readable:
            access.visible.append(ref)
        elif not candidates and access.reads_every_dag:
            access.visible.append(ref)  # deployer unknown, or its DAG is gone: only who may read every DAG
        else:
            access.hidden += 1
    return access

