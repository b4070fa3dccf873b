"""A seal on the specs the Airflow side stores on shared storage (plain Python, no I/O).

The stream's driver can write its control directory, so a spec read back from ``deployed.json``, the
lifecycle record or the history is only as trustworthy as whoever wrote it last. The Airflow side
seals every spec it stores with an HMAC, under a key the driver never gets
(:mod:`airflow_streaming.sealing`); before a stored spec chooses the code, conf or cluster a stream
runs with, its seal is checked (:func:`airflow_streaming.lifecycle.trust.trusted_spec`).

A seal vouches for more than the spec's content: it binds

- ``stream``: the stream whose control directory holds the document (a spec of stream A copied into
  stream B's files does not verify for B, so B's secrets are never combined with A's application);
- ``control``: that control directory (``<control_location>/<name>``: the same name elsewhere is
  another stream);
- ``version``: the spec's version;
- ``status``: :data:`DEPLOYABLE` (the version passed its compatibility gate, or a DAG's deploy action
  chose it) or :data:`CANDIDATE` (an upgrade's target before its gate passed: never run by a restart);
- ``deployed_by``: who deployed the stream (``deployed.json`` only; the Streams page's access rule).

The seal is one dict under :data:`SEAL_FIELD`; its ``mac`` covers the spec (without its seal) and every
bound field. A seal written before these fields existed (a plain ``"hmac-sha256:..."`` string) binds
none of them; when its MAC verifies it is reported as :data:`LEGACY` (see docs/security.md: such a spec
is not trusted, except as the old version an in-flight action rolls back to).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["CANDIDATE", "DEPLOYABLE", "LEGACY", "SEAL_FIELD", "is_sealed_by", "seal_problem", "seal_spec",
           "sealed_field", "without_seal"]

#: The key of the seal inside a stored spec dict (``StreamSpec.from_dict`` ignores it).
SEAL_FIELD = "seal"
#: The version may run: it passed its gate, or a DAG's deploy action (or the desired state) chose it.
DEPLOYABLE = "deployable"
#: An upgrade's target before its gate passed: stored so that the action can resume, never run as deployed.
CANDIDATE = "candidate"
#: What :func:`seal_problem` calls a seal of the previous format (a string over the spec alone).
LEGACY = "legacy"
_SCHEME = "hmac-sha256/bound:"
_LEGACY_SCHEME = "hmac-sha256:"
_BOUND = ("stream", "control", "version", "status", "deployed_by")


def without_seal(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` without its seal."""
    return {k: v for k, v in spec.items() if k != SEAL_FIELD}


def _mac(spec: Mapping[str, Any], bound: Mapping[str, Any], key: bytes) -> str:
    canonical = json.dumps({"spec": without_seal(spec), "bound": {k: bound.get(k) for k in _BOUND}},
                           sort_keys=True, separators=(",", ":"), default=str)
    return _SCHEME + hmac.new(key, canonical.encode("utf-8"), hashlib.sha256).hexdigest()


def seal_spec(spec: Mapping[str, Any] | None, key: bytes, *, stream: str, control: str,
              status: str = DEPLOYABLE, deployed_by: str | None = None) -> dict[str, Any] | None:
    """``spec`` (a stored, masked spec dict) with a fresh seal binding it to ``stream`` and its control
    directory ``control``, its version, ``status`` and ``deployed_by``; ``None`` stays ``None``."""
    if spec is None:
        return None
    if status not in (DEPLOYABLE, CANDIDATE):
        raise ValueError(f"a seal's status is {DEPLOYABLE!r} or {CANDIDATE!r}, not {status!r}")
    bound = {"stream": stream, "control": control, "version": spec.get("version"), "status": status,
             "deployed_by": deployed_by}
    return {**without_seal(spec), SEAL_FIELD: {**bound, "mac": _mac(spec, bound, key)}}


def sealed_field(spec: Mapping[str, Any] | None, name: str) -> Any:
    """A bound field (``status``, ``deployed_by``...) of ``spec``'s seal as written; only meaningful after
    :func:`seal_problem` returned ``None`` for it."""
    seal = spec.get(SEAL_FIELD) if isinstance(spec, Mapping) else None
    return seal.get(name) if isinstance(seal, Mapping) and name in _BOUND else None


def seal_problem(spec: Mapping[str, Any] | None, key: bytes, *, stream: str, control: str,
                 statuses: Iterable[str] = (DEPLOYABLE,)) -> str | None:
    """``None`` when ``spec`` carries a seal made with ``key`` over exactly its content, for ``stream``
    in ``control``, for the spec's own version, with one of ``statuses``; otherwise what is wrong, in a
    few words (``LEGACY`` for a seal of the previous format)."""
    seal = spec.get(SEAL_FIELD) if isinstance(spec, Mapping) else None
    if isinstance(seal, str):  # the previous format: a MAC over the spec alone, binding nothing else
        canonical = json.dumps(without_seal(spec), sort_keys=True, separators=(",", ":"), default=str)  # type: ignore[arg-type]
        legacy = _LEGACY_SCHEME + hmac.new(key, canonical.encode("utf-8"), hashlib.sha256).hexdigest()
        return LEGACY if hmac.compare_digest(seal, legacy) else "not sealed by this Airflow deployment, or changed " \
            "since it was sealed"
    if not isinstance(seal, Mapping) or not isinstance(seal.get("mac"), str):
        return "not sealed"
    if not hmac.compare_digest(seal["mac"], _mac(spec, seal, key)):  # type: ignore[arg-type]
        return "not sealed by this Airflow deployment, or changed since it was sealed"
    if seal.get("stream") != stream or seal.get("control") != control:
        return f"sealed for stream {seal.get('stream')!r} in {seal.get('control')!r}, not for {stream!r} in {control!r}"
    if seal.get("version") != spec.get("version"):  # type: ignore[union-attr]
        return f"sealed for version {seal.get('version')!r}, not {spec.get('version')!r}"  # type: ignore[union-attr]
    wanted = tuple(statuses)
    if seal.get("status") not in wanted:
        return (f"sealed as {seal.get('status')!r} only (an upgrade's target that has not passed its compatibility "
                "gate)" if seal.get("status") == CANDIDATE else f"sealed as {seal.get('status')!r}") + \
            f", not as {' or '.join(repr(s) for s in wanted)}"
    return None


def is_sealed_by(spec: Mapping[str, Any] | None, key: bytes, *, stream: str, control: str,
                 statuses: Iterable[str] = (DEPLOYABLE,)) -> bool:
    """Whether ``spec``'s seal verifies for ``stream`` in ``control`` (see :func:`seal_problem`)."""
    return seal_problem(spec, key, stream=stream, control=control, statuses=statuses) is None
