"""A cluster manager's word, asked at a pace the manager can bear (standard library only: it runs inside a
hot standby's Spark driver, like the words it paces: :mod:`.standalone_word`, :mod:`.yarn_word`,
:mod:`.kube_word`)."""

from __future__ import annotations

import time
from collections.abc import Callable

from airflow_streaming.control.death_proof import RunIds, Word


class PacedWord:
    """A word asked at most once every ``every_s`` seconds (a hot standby looks every 50 ms; the master need not
    hear it that often), and after a look the master did not answer, only after a back-off that doubles from
    ``2 * every_s`` up to ``max_backoff_s`` (an unreachable master costs the standby one ``TIMEOUT_S`` wait per
    back-off, not one per look). Between two asks it gives the last word it heard about the same ids (so the
    judgement repeated under the lifecycle lock sees the proof it judged), and no word about other ids.

    :param word: the word asked (e.g. :class:`StandaloneWord`).
    :param clock: the monotonic clock (tests give their own).
    """

    def __init__(self, word: Callable[[RunIds], Word | None], every_s: float = 1.0, max_backoff_s: float = 16.0,
                 clock: Callable[[], float] | None = None):
        self.word, self.every_s, self.max_backoff_s = word, every_s, max_backoff_s
        self.clock = clock or time.monotonic
        self.next_at = 0.0
        self.backoff = 2 * every_s
        self.last: tuple[RunIds, Word | None] | None = None
        self.asked = 0
        """How many times the master was asked (for tests and logs)."""

    def __call__(self, ids: RunIds) -> Word | None:
        now = self.clock()
        if now < self.next_at:
            return self.last[1] if self.last is not None and self.last[0] == ids else None
        said = self.word(ids)
        self.asked += 1
        self.last = (ids, said)
        if said is not None and not said.answered:
            self.next_at = self.clock() + self.backoff
            self.backoff = min(self.backoff * 2, self.max_backoff_s)
        else:
            self.next_at = now + self.every_s
            self.backoff = 2 * self.every_s
        return said


__all__ = ["PacedWord"]
