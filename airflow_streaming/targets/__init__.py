"""Deploy targets: where a stream's driver runs (see :mod:`airflow_streaming.targets.base`).

:func:`target_for` is the one place that maps a spec's ``master`` and ``deploy_mode`` to a target.
"""

from __future__ import annotations

from typing import Any

from airflow_streaming.control.contract import ControlPaths
from airflow_streaming.control.storage import ControlStorage
from airflow_streaming.targets.base import DriverTarget


def target_kind(master: str | None, deploy_mode: str | None) -> str:
    """``local`` (local[N], and client mode anywhere), ``standalone-cluster``, ``yarn`` or ``kubernetes``."""
    master = master or "local[2]"
    if (deploy_mode or "client") == "client" or master.startswith("local"):
        return "local"
    if master.startswith("spark://"):
        return "standalone-cluster"
    if master == "yarn":
        return "yarn"
    if master.startswith("k8s://"):
        return "kubernetes"
    raise ValueError(f"no deploy target for master {master!r} in {deploy_mode} mode")


def target_for(spec: Any, storage: ControlStorage, paths: ControlPaths) -> DriverTarget:
    """The :class:`DriverTarget` for ``spec`` (its master, deploy mode and ``cluster`` settings)."""
    kind = target_kind(spec.master, spec.deploy_mode)
    settings = dict(getattr(spec, "cluster", None) or {})
    if getattr(spec, "master_ui_url", None):
        settings.setdefault("master_ui_url", spec.master_ui_url)
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
