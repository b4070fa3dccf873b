"""The YARN ResourceManager's word about a run's application (standard library only).

A hot standby on another host than the active driver cannot see that driver's process. In YARN cluster mode
the driver runs in its application's master container, and the ResourceManager knows when that application
ended (:mod:`.death_proof` says which of its words are proof of death). This module asks it, from inside a
Spark driver (hence ``urllib``, no HTTP client library):

- ``GET <rm>/ws/v1/cluster/apps/<id>`` (the RM's REST API, JSON): ``{"app": {"id": ..., "state": ...}}``;
  an application the RM does not know answers 404 with a ``NotFoundException`` (an answer: "unknown to it",
  never proof - an RM restarted without its state store forgets its applications).

The RMs asked are the ones the standby was LAUNCHED with (``--yarn-rm-url``: the stream's
``cluster.resourcemanager_url`` or ``yarn-site.xml``, never a control file), in order: with RM HA, a standby
RM redirects a REST call to the active one (urllib follows it) or does not answer, and the next one is asked.

Every error - a refused connection, a timeout (short: the standby asks at every look), a 5xx, a reply that
is not the expected JSON - is an unanswered word (``Word.answered`` false), never an exception: no word is no
proof. A reply about another application is an answer about THAT id (the word's ``subject``), which
:func:`~.death_proof.word_proof` never takes as proof about the recorded one.
"""

from __future__ import annotations

from urllib.parse import quote

from airflow_streaming.control.death_proof import RunIds, Word, WordKind
from airflow_streaming.control.word_http import get_json

#: Seconds to wait for one ResourceManager's reply.
TIMEOUT_S = 2.0


def yarn_application_word(rm_url: str, app_id: str, timeout: float = TIMEOUT_S) -> Word:
    """What the ResourceManager at ``rm_url`` says about application ``app_id``."""
    unanswered = Word(WordKind.YARN_APPLICATION, app_id, answered=False)
    reply = get_json(f"{rm_url.rstrip('/')}/ws/v1/cluster/apps/{quote(app_id, safe='')}", timeout)
    if reply is None:
        return unanswered
    status, doc = reply
    if status == 404 and isinstance(doc, dict) and isinstance(doc.get("RemoteException"), dict) \
            and doc["RemoteException"].get("exception") == "NotFoundException":
        return Word(WordKind.YARN_APPLICATION, app_id, answered=True, state=None)
    app = doc.get("app") if status == 200 and isinstance(doc, dict) else None
    if not isinstance(app, dict) or not isinstance(app.get("id"), str) or not isinstance(app.get("state"), str):
        return unanswered
    return Word(WordKind.YARN_APPLICATION, app["id"], answered=True, state=app["state"])


class YarnWord:
    """The ``word`` of :func:`~.takeover.judge_takeover` for YARN: the state of the application the run's
    driver record names (``RunIds.yarn_app_id``), from the first of ``rm_urls`` that answers; ``None`` (no
    word) when the run recorded none or no RM is known."""

    def __init__(self, rm_urls: list[str], timeout: float = TIMEOUT_S):
        self.rm_urls, self.timeout = [u.rstrip("/") for u in rm_urls if u], timeout

    def __call__(self, ids: RunIds) -> Word | None:
        if not ids.yarn_app_id or not self.rm_urls:
            return None
        said = Word(WordKind.YARN_APPLICATION, ids.yarn_app_id, answered=False)
        for rm in self.rm_urls:
            said = yarn_application_word(rm, ids.yarn_app_id, self.timeout)
            if said.answered:
                return said
        return said


__all__ = ["TIMEOUT_S", "YarnWord", "yarn_application_word"]
