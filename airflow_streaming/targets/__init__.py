"""Deploy targets: where a stream's driver runs (see :mod:`airflow_streaming.targets.base`).

:func:`target_for` is the one place that maps a spec's ``master`` and ``deploy_mode`` to a target.
"""

from __future__ import annotations

from typing import Any

from airflow_streaming.control.contract import ControlPaths, DriverRecord
from airflow_streaming.control.storage import ControlStorage
from airflow_streaming.submit_fields import target_kind  # noqa: F401 - importable from here
from airflow_streaming.targets.base import DriverTarget


def target_settings(spec: Any) -> dict[str, Any]:
    """The endpoints and settings a target of ``spec`` asks and uses: its ``cluster`` settings, and its
    ``master_ui_url`` (the one place a standalone master's UI is configured besides ``cluster``)."""
    settings = dict(getattr(spec, "cluster", None) or {})
    if getattr(spec, "master_ui_url", None):
        settings.setdefault("master_ui_url", spec.master_ui_url)
    return settings


def target_for(spec: Any, storage: ControlStorage, paths: ControlPaths) -> DriverTarget:
    """The :class:`DriverTarget` for ``spec`` (its master, deploy mode and ``cluster`` settings)."""
    kind = target_kind(spec.master, spec.deploy_mode)
    settings = target_settings(spec)
    if kind == "local":
        from airflow_streaming.targets.local import LocalTarget

        return LocalTarget(storage, paths, settings)
    if kind == "standalone-cluster":
        from airflow_streaming.targets.standalone import StandaloneClusterTarget

        return StandaloneClusterTarget(storage, paths, settings, master=spec.master)
    if kind == "yarn":
        from airflow_streaming.targets.yarn import YarnClusterTarget

        return YarnClusterTarget(storage, paths, settings)
    from airflow_streaming.targets.kubernetes import KubernetesClusterTarget

    return KubernetesClusterTarget(storage, paths, settings, master=spec.master)


def target_for_record(record: DriverRecord, storage: ControlStorage, paths: ControlPaths,
                      settings: dict[str, Any] | None = None, master: str = "") -> DriverTarget:
    """The target that can check and kill the driver of ``record``: of the kind its record names, asking only
    the endpoints of ``settings`` and ``master`` (the caller's spec and connection) - never a ResourceManager,
    REST server, master UI or API server that the record's handle names (a control file must not choose whom
    the status is asked: a fake ResourceManager's RUNNING would hide a dead driver). A driver started under
    another deploy target is still checked where it runs, if the spec still configures that cluster;
    otherwise the target cannot be built (``ValueError`` naming the setting)."""
    settings = dict(settings or {})
    handle = record.handle
    if record.target == "standalone-cluster":
        from airflow_streaming.targets.standalone import StandaloneClusterTarget

        return StandaloneClusterTarget(storage, paths, settings, master=master if master.startswith("spark://") else "")
    if record.target == "yarn":
        from airflow_streaming.targets.yarn import YarnClusterTarget

        return YarnClusterTarget(storage, paths, settings)
    if record.target == "kubernetes":
        from airflow_streaming.targets.kubernetes import KubernetesClusterTarget

        where = {"namespace": handle["namespace"]} if handle.get("namespace") else {}
        if not settings.get("api_server") and not master.startswith("k8s://") and handle.get("api_server"):
            raise ValueError(f"run {record.run_id}: cluster.api_server is not set and the master is not "
                             "k8s://...: the API server of a driver record is not trusted with a token")
        return KubernetesClusterTarget(storage, paths, {**settings, **where}, master=master)
    from airflow_streaming.targets.local import LocalTarget

    return LocalTarget(storage, paths, settings)
