"""Secrets: which Spark conf keys are sensitive, and masking them out of any text (one place).

Plain Python (the driver side imports it too); on the Airflow side :func:`register_secrets` also
hands the values to Airflow's own secrets masker, so task logs mask them wherever they appear.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

MASK = "***"

_SENSITIVE_WORDS = ("password", "passwd", "pwd", "secret", "token", "credential", "apikey", "api_key", "api-key",
                    "private")
_SENSITIVE_KEY_RE = re.compile(
    r"(?:" + "|".join(re.escape(w) for w in _SENSITIVE_WORDS) + r")"
    r"|(?:^|\.)(?:key|keystore|truststore\.password)$"
    r"|^fs\.azure\.account\.key\.|\.account\.key\.|^spark\.hadoop\.fs\.azure\.account\.key\.",
    re.IGNORECASE)


def is_sensitive_key(key: str) -> bool:
    """Whether a conf key names a secret (``*password*``, ``*secret*``, ``*token*``, ``*.key``,
    ``fs.azure.account.key.*``, ``fs.s3a.secret.key``...)."""
    return bool(_SENSITIVE_KEY_RE.search(key))


def split_conf(conf: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """``(plain, secret)``: the conf without and with its sensitive entries."""
    plain = {k: v for k, v in conf.items() if not is_sensitive_key(k)}
    return plain, {k: v for k, v in conf.items() if k not in plain}


def secret_values(conf: Mapping[str, Any]) -> list[str]:
    return [str(v) for k, v in conf.items() if is_sensitive_key(k) and v not in (None, "")]


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every one of ``secrets`` (3 characters or longer) replaced by ``***``."""
    for secret in sorted((s for s in secrets if s and len(s) >= 3), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text


def register_secrets(values: Iterable[str]) -> None:
    """Tell Airflow's secrets masker about ``values`` (no-op outside Airflow)."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # the driver side, or an Airflow without the task SDK
        return
    for value in values:
        if value and len(value) >= 3:
            mask_secret(value)
