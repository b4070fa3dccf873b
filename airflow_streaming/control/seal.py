"""A seal on the specs the Airflow side stores on shared storage (plain Python, no I/O).

The stream's driver can write its control directory, so a spec read back from ``deployed.json``, the
lifecycle record or the history is only as trustworthy as whoever wrote it last. The Airflow side
seals every spec it stores with an HMAC over the spec's canonical JSON, under a key the driver never
gets (:mod:`airflow_streaming.sealing`); before a stored spec chooses the code, conf or cluster a
stream runs with, its seal is checked (:func:`airflow_streaming.lifecycle.trust.trusted_spec`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any

__all__ = ["SEAL_FIELD", "is_sealed_by", "seal_spec", "without_seal"]

#: The key of the seal inside a stored spec dict (``StreamSpec.from_dict`` ignores it).
SEAL_FIELD = "seal"
_SCHEME = "hmac-sha256:"


def without_seal(spec: Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` without its seal."""
    return {k: v for k, v in spec.items() if k != SEAL_FIELD}


def _digest(spec: Mapping[str, Any], key: bytes) -> str:
    canonical = json.dumps(without_seal(spec), sort_keys=True, separators=(",", ":"), default=str)
    return _SCHEME + hmac.new(key, canonical.encode("utf-8"), hashlib.sha256).hexdigest()


def seal_spec(spec: Mapping[str, Any] | None, key: bytes) -> dict[str, Any] | None:
    """``spec`` (a stored, masked spec dict) with a fresh seal; ``None`` stays ``None``."""
    if spec is None:
        return None
    return {**without_seal(spec), SEAL_FIELD: _digest(spec, key)}


def is_sealed_by(spec: Mapping[str, Any] | None, key: bytes) -> bool:
    """Whether ``spec`` carries a seal made with ``key`` over exactly its content."""
    seal = spec.get(SEAL_FIELD) if isinstance(spec, Mapping) else None
    return isinstance(seal, str) and hmac.compare_digest(seal, _digest(spec, key))
