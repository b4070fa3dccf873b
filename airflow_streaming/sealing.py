"""Sealing the specs the Airflow side stores, and the key it seals with (Airflow side; never given to a driver).

``[airflow_streaming] control_seal_key`` when set (give every Airflow host of a deployment the same
value, as for ``[core] fernet_key``); otherwise a random key kept in ``$AIRFLOW_HOME/airflow_streaming_seal.key``
(mode 0600, created on first use), which every Airflow process sharing that home uses. Drivers get
neither: their environment has no ``AIRFLOW__*`` variable (:mod:`airflow_streaming.targets.driver_env`)
and the key file is not on shared storage.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from typing import Any

from airflow_streaming.control.seal import DEPLOYABLE, is_sealed_by, seal_spec, sealed_field, without_seal
from airflow_streaming.redaction import mask_spec
from airflow_streaming.spec import StreamSpec

__all__ = ["KEY_FILE_NAME", "deployer_of", "seal_key", "sealed", "secret_files"]

KEY_FILE_NAME = "airflow_streaming_seal.key"


def _airflow_home() -> str:
    return os.environ.get("AIRFLOW_HOME") or os.path.join(os.path.expanduser("~"), "airflow")


def secret_files() -> list[str]:
    """The Airflow side's files that a driver must never read: the seal key file and ``airflow.cfg``."""
    home = _airflow_home()
    return [os.path.join(home, KEY_FILE_NAME), os.environ.get("AIRFLOW_CONFIG") or os.path.join(home, "airflow.cfg")]


def _key_file() -> bytes:
    home = _airflow_home()
    os.makedirs(home, exist_ok=True)
    path = os.path.join(home, KEY_FILE_NAME)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_hex(32) + "\n")
    st = os.lstat(path)
    if not os.path.isfile(path) or os.path.islink(path) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise PermissionError(f"{path}: the seal key file must be a regular file owned by this user with mode "
                              "0600; fix it, or set [airflow_streaming] control_seal_key")
    with open(path, encoding="utf-8") as fh:
        value = fh.read().strip()
    if len(value) < 32:
        raise ValueError(f"{path}: the seal key file is empty or too short; delete it to make a new one, or set "
                         "[airflow_streaming] control_seal_key")
    return value.encode()


def seal_key() -> bytes:
    """The deployment's seal key (see the module docstring)."""
    from airflow_streaming.config import get_option

    configured = get_option("control_seal_key").strip()
    material = configured.encode() if configured else _key_file()
    return hashlib.sha256(b"airflow-streaming control seal\0" + material).digest()


def sealed(spec: dict[str, Any] | None, home: StreamSpec | None = None, *, status: str = DEPLOYABLE,
           deployed_by: str | None = None) -> dict[str, Any] | None:
    """``spec`` as it is stored: secrets masked (:func:`~airflow_streaming.redaction.mask_spec`), sealed for
    the stream ``home`` (whose control directory stores it; default: the spec's own stream) with ``status``
    (:data:`~airflow_streaming.control.seal.DEPLOYABLE` or ``CANDIDATE``) and, in ``deployed.json``, who
    deployed it (:func:`deployer_of`)."""
    if spec is None:
        return None
    home = home if home is not None else StreamSpec.from_dict(mask_spec(without_seal(spec)))
    return seal_spec(mask_spec(without_seal(spec)), seal_key(), stream=home.name, control=home.control_dir,
                     status=status, deployed_by=deployed_by)


def deployer_of(deployed: Any, stream: str, control: str, key: bytes | None = None) -> str | None:
    """The owner (``<dag_id>.<task_id> run <run_id> try <n>``, the lifecycle owner of the task) that deployed
    ``stream`` (control directory ``control``) from a ``deployed.json`` document: only the ``deployed_by`` that
    the spec's seal binds, when that seal is this deployment's for this very stream and control directory;
    ``None`` otherwise (unknown, forged, edited outside the seal or copied from another stream).
    ``key``: :func:`seal_key`, when the caller checks many documents at once."""
    spec = deployed.get("spec") if isinstance(deployed, dict) else None
    if not is_sealed_by(spec, key or seal_key(), stream=stream, control=control):
        return None
    owner = sealed_field(spec, "deployed_by")
    return owner if isinstance(owner, str) else None
