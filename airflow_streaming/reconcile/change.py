"""Which change brings a stream to the version its desired state names: a part of the reconcile core (pure).

The lifecycle operations (``lifecycle/operations.py``: what the DAGs call) ask :func:`choose_change` and
run the matching lifecycle action; nothing else chooses between a deploy, an in-place upgrade and a
parallel transition.
"""

from __future__ import annotations

from enum import Enum


class Change(str, Enum):
    """The change that moves a stream from what is deployed to what is wanted."""

    DEPLOY = "DEPLOY"
    """Never deployed: a deploy of the wanted version."""
    UNCHANGED = "UNCHANGED"
    """The wanted version runs already, under the wanted name: nothing to do."""
    UPGRADE = "UPGRADE"
    """An in-place change on the stream's checkpoint (gate, stop, snapshot, start, probation)."""
    PARALLEL = "PARALLEL"
    """An intentionally incompatible change: a new stream beside the old one, then the old one retired."""


def choose_change(wanted_version: str, wanted_name: str, deployed_version: str | None, deployed_name: str,
                  transition: str | None) -> Change:
    """The change from ``deployed_version`` (``None``: never deployed) of the stream ``deployed_name`` to
    ``wanted_version`` under ``wanted_name``; ``transition`` is what the desired state says of the wanted
    version (``"parallel"`` for an intentionally incompatible one)."""
    if deployed_version is None:
        return Change.DEPLOY
    if wanted_version == deployed_version and wanted_name == deployed_name:
        return Change.UNCHANGED
    return Change.PARALLEL if transition == "parallel" else Change.UPGRADE


__all__ = ["Change", "choose_change"]
