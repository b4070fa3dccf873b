"""Device-signal input for stateful-stream tests: a continuous feeder and the expected window counts."""

from __future__ import annotations

import threading
import time
from collections import Counter
from datetime import datetime, timedelta, timezone

from spark_jobs.event_generator import generate_events

START = datetime(2026, 1, 1, tzinfo=timezone.utc)
STEP = 1.0  # seconds of event time between consecutive events
DEVICES = 4


def window_of(seq: int) -> str:
    t = START + timedelta(seconds=seq * STEP)
    return t.replace(second=0, microsecond=0, tzinfo=None).isoformat()


def expected_windows(last_seq: int, watermark_delay: float = 30) -> dict[tuple[str, str], int]:
    """Counts per (1-minute window, device) of events 0..last_seq, for the windows the watermark closed."""
    watermark = START + timedelta(seconds=last_seq * STEP - watermark_delay)
    counts: Counter = Counter()
    for seq in range(last_seq + 1):
        t = START + timedelta(seconds=seq * STEP)
        window_start = t.replace(second=0, microsecond=0)
        if window_start + timedelta(minutes=1) <= watermark:
            counts[(window_start.replace(tzinfo=None).isoformat(), f"dev-{seq % DEVICES:03d}")] += 1
    return dict(counts)


class Feeder:
    """Writes one file of ``per_file`` events every ``interval`` s in a thread, with consecutive
    sequence numbers (event time = START + seq s); remembers when each seq was written."""

    def __init__(self, directory: str, per_file: int = 4, interval: float = 1.0, run: str = "feed"):
        self.directory, self.per_file, self.interval, self.run = directory, per_file, interval, run
        self.next_seq = 0
        self.files = 0
        self.written: list[tuple[float, int]] = []  # (wall time, last seq of the file)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def feed(self, count: int) -> None:
        generate_events(self.directory, count=count, files=1, run=self.run, start_seq=self.next_seq,
                        devices=DEVICES, event_time_start=START + timedelta(seconds=self.next_seq * STEP),
                        event_time_step=STEP, file_start_index=self.files)
        self.next_seq += count
        self.files += 1
        self.written.append((time.time(), self.next_seq - 1))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.feed(self.per_file)

    def start(self) -> Feeder:
        self._thread.start()
        return self

    def stop(self) -> int:
        """Stop feeding; return the last seq written."""
        self._stop.set()
        if self._thread.ident is not None:  # never started (a failure before it): nothing to join, and
            self._thread.join(timeout=30)   # the failure, not a join error, is what the caller reports
        return self.next_seq - 1

    def seq_at(self, when: float) -> int:
        """The last seq written at or before wall time ``when`` (-1 if none)."""
        return max((seq for t, seq in self.written if t <= when), default=-1)
