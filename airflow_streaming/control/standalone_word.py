"""The Spark standalone master's word about a run's submission or application (standard library only).

A hot standby on another host than the active driver cannot see that driver's process; the master can
(:mod:`.death_proof` says which of its words are proof of death). This module asks it, from inside a Spark
driver (hence ``urllib``, no HTTP client library):

- a driver submission (standalone cluster mode): ``GET <rest>/v1/submissions/status/<id>`` on the master's
  REST submission server - ``driverState``, or ``success: false`` when the master does not know the id
  (or is not ALIVE: a standby master answers so);
- an application (a client-mode driver, on any host): the master's web UI ``/json/`` - ``status`` (the
  master's own state) and the ``id`` / ``state`` of ``activeapps`` and ``completedapps``.

Every error - a refused connection, a timeout (short: the standby asks at every look), an HTTP error, a
reply that is not the expected JSON - is an unanswered word (``Word.answered`` false), never an exception:
no word is no proof.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any
from urllib.parse import quote

from airflow_streaming.control.death_proof import RunIds, Word, WordKind

#: Seconds to wait for the master's reply.
TIMEOUT_S = 2.0


def _get_json(url: str, timeout: float) -> Any:
    """The JSON document at ``url``; ``None`` on any error (HTTP errors included: the REST server answers an
    unknown submission with HTTP 200 and ``success: false``)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 - the operator's master URL
            return json.load(resp)
    except Exception:  # noqa: BLE001 - any failure to hear the master is no word
        return None


def submission_word(rest_url: str, submission_id: str, timeout: float = TIMEOUT_S) -> Word:
    """What the master's REST server says about driver submission ``submission_id``."""
    doc = _get_json(f"{rest_url.rstrip('/')}/v1/submissions/status/{quote(submission_id, safe='')}", timeout)
    if not isinstance(doc, dict) or doc.get("action") != "SubmissionStatusResponse":
        return Word(WordKind.SUBMISSION, submission_id, answered=False)
    subject = doc.get("submissionId")
    subject = subject if isinstance(subject, str) else ""
    state = doc.get("driverState") if doc.get("success") is True else None
    return Word(WordKind.SUBMISSION, subject, answered=True, state=state if isinstance(state, str) else None)


def application_word(ui_url: str, app_id: str, timeout: float = TIMEOUT_S) -> Word:
    """What the master's ``/json/`` says about application ``app_id``."""
    doc = _get_json(f"{ui_url.rstrip('/')}/json/", timeout)
    if not isinstance(doc, dict) or not isinstance(doc.get("status"), str):
        return Word(WordKind.APPLICATION, app_id, answered=False)
    for key, completed in (("activeapps", False), ("completedapps", True)):
        apps = doc.get(key)
        for app in apps if isinstance(apps, list) else []:
            if isinstance(app, dict) and app.get("id") == app_id:
                state = app.get("state")
                return Word(WordKind.APPLICATION, app_id, answered=True, state=state if isinstance(state, str) else None,
                            completed=completed, master_status=doc["status"])
    return Word(WordKind.APPLICATION, app_id, answered=True, state=None, master_status=doc["status"])


class StandaloneWord:
    """The ``word`` of :func:`~.takeover.judge_takeover` for a standalone master: the submission's state when
    the run recorded one and a REST URL is known, else the application's when the run recorded one and the
    master's web UI is known; ``None`` (no word) otherwise."""

    def __init__(self, rest_url: str | None = None, ui_url: str | None = None, timeout: float = TIMEOUT_S):
        self.rest_url, self.ui_url, self.timeout = rest_url, ui_url, timeout

    def __call__(self, ids: RunIds) -> Word | None:
        if ids.submission_id and self.rest_url:
            return submission_word(self.rest_url, ids.submission_id, self.timeout)
        if ids.app_id and self.ui_url:
            return application_word(self.ui_url, ids.app_id, self.timeout)
        return None


__all__ = ["TIMEOUT_S", "StandaloneWord", "application_word", "submission_word"]
