"""One HTTP GET of a cluster manager's JSON for a hot standby's word (standard library only: it runs in a driver).

Shared by :mod:`.yarn_word` and :mod:`.kube_word`: an error status with a JSON body is an answer (a
ResourceManager's or an API server's "not found"), anything else that fails is none.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from typing import Any


def get_json(url: str, timeout: float, headers: dict[str, str] | None = None,
             context: ssl.SSLContext | None = None) -> tuple[int, Any] | None:
    """``(HTTP status, JSON body)`` of ``GET url``; ``None`` on any error but an HTTP status with a JSON body.
    A redirect is followed (a standby ResourceManager's to the active one), but ``headers`` (credentials) are
    sent to ``url`` only, never to where it redirects."""
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    for name, value in (headers or {}).items():
        request.add_unredirected_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as resp:  # noqa: S310 - configured URLs
            return resp.status, json.load(resp)
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.load(exc)
        except Exception:  # noqa: BLE001 - an error page that is not JSON: no answer
            return None
        finally:
            exc.close()
    except Exception:  # noqa: BLE001 - any failure to hear the cluster manager is no word
        return None


__all__ = ["get_json"]
