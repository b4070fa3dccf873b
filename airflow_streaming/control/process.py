"""Who a local process is: pid + start time + a token in its command line (plain Python, /proc).

A pid alone names a process only until it exits: after a reboot or a pid wrap the same number
belongs to something else. Everything we may signal or trust as "our driver" or "the lock holder" is
identified by three things recorded when it started:

- the pid,
- its start time in seconds since boot (``/proc/<pid>/stat`` field 22; boot-relative, so a wall
  clock adjustment does not make a live driver look recycled),
- a token its command line must contain (a driver's ``--run-id <id>``), or a hash of the whole
  command line.

A mismatch in any of them means "that process is gone", never "signal it".

Why ``/proc`` and not psutil (a dependency of the Airflow side): this module is on the driver side -
the driver records its own identity in the stream's lease and checks a lease holder's - which imports
only the standard library (``docs/architecture.md``; psutil is a C extension the runtime zip cannot
carry to a NodeManager or an image). One reader of identities, so that what a driver records and what
Airflow checks always agree (psutil's ``create_time`` is wall-clock based: another unit). What only
Airflow does - finding the processes of a run, signalling them - uses psutil
(:mod:`airflow_streaming.targets.local`), which re-checks a process's identity before every signal.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from dataclasses import dataclass

START_TIME_TOLERANCE_S = 0.05

#: How long a live process's command line may read as empty. While a process is inside ``execve``
#: (spark-submit is a script that execs ``spark-class``, which execs ``java``) ``/proc/<pid>/cmdline``
#: reads as empty for a moment: measured here, 5 % of the reads of a process that execs in a loop. Taken
#: as "not our process" that moment made a starting driver look gone (stop 31's CI: a start judged
#: failed and stopped). An empty command line of a process whose pid and start time still match is
#: read again until it is settled; one that stays empty this long is unreadable, not ours.
EXEC_SETTLE_S = 2.0


def process_start_time(pid: int | None) -> float | None:
    """Start time of a local process in seconds since boot; ``None`` if it does not exist or is a zombie."""
    if not pid or pid < 0:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode()
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] in ("Z", "X"):
            return None
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def process_cmdline(pid: int) -> list[str] | None:
    """The command line of a local process, ``None`` if it is gone or unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except OSError:
        return None
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def settled_cmdline(pid: int, start_time: float | None = None, settle: float = EXEC_SETTLE_S) -> list[str] | None:
    """The command line of a local process, read again while it is empty (the process is inside
    ``execve``, see :data:`EXEC_SETTLE_S`) for as long as the process with this pid and ``start_time`` (the
    one read now if not given) lives; ``None`` if it is gone, ``[]`` if it stayed empty for ``settle`` s."""
    start_time = process_start_time(pid) if start_time is None else start_time
    deadline = time.monotonic() + settle
    while True:
        cmdline = process_cmdline(pid)
        if cmdline is None:
            return None
        if cmdline:
            return cmdline
        actual = process_start_time(pid)
        if actual is None or start_time is None or abs(actual - start_time) >= START_TIME_TOLERANCE_S:
            return None  # it exited (a zombie's command line is empty too) or its pid was reused
        if time.monotonic() >= deadline:
            return []
        time.sleep(0.005)


def cmdline_hash(cmdline: list[str]) -> str:
    return hashlib.sha256("\0".join(cmdline).encode()).hexdigest()[:16]


RUN_ID_FLAG = "--run-id"


def has_token(cmdline: list[str], token: str) -> bool:
    """The command line carries ``--run-id <token>`` (a managed driver's spark-submit, JVM or Python)."""
    return any(arg == token and i > 0 and cmdline[i - 1] == RUN_ID_FLAG for i, arg in enumerate(cmdline))


@dataclass(frozen=True)
class ProcessIdentity:
    """What identifies one local process for as long as it lives (see the module docstring)."""

    pid: int
    start_time: float | None
    host: str
    token: str | None = None
    """A run id its command line carries as ``--run-id <token>``; ``None``: compare ``cmdline_sha``."""
    cmdline_sha: str | None = None

    @classmethod
    def of(cls, pid: int, token: str | None = None) -> ProcessIdentity:
        """The identity of live process ``pid`` now (its command line must contain ``token`` if given)."""
        cmdline = process_cmdline(pid) or []
        return cls(pid, process_start_time(pid), socket.gethostname(), token,
                   None if token else cmdline_hash(cmdline))

    @classmethod
    def current(cls, token: str | None = None) -> ProcessIdentity:
        return cls.of(os.getpid(), token)

    @property
    def local(self) -> bool:
        return self.host == socket.gethostname()

    def check(self) -> tuple[bool, str]:
        """``(True, "")`` if this very process is alive on this host; else ``(False, why not)``.

        Only call for a local identity (``local``): another host's pid says nothing here.
        """
        ok, why, _ = self.check_cmdline()
        return ok, why

    def check_cmdline(self) -> tuple[bool, str, list[str] | None]:
        """:meth:`check`, and the command line it read (``None`` when it read none): a caller that looks at
        the command line too (whose driver it is) reads ``/proc`` once."""
        if self.start_time is None:
            return False, f"pid {self.pid} has no recorded start time: it cannot be told from a recycled pid", None
        actual = process_start_time(self.pid)
        if actual is None:
            return False, f"pid {self.pid} is not running", None
        if abs(actual - self.start_time) >= START_TIME_TOLERANCE_S:
            return False, (f"pid {self.pid} now belongs to another process (started {actual:.2f}s after boot, "
                           f"recorded {self.start_time:.2f}s): the recorded process is gone"), None
        cmdline = settled_cmdline(self.pid, actual)
        if cmdline is None:
            return False, f"pid {self.pid} is not running", None
        if not cmdline:
            return False, f"pid {self.pid} has had an empty command line for {EXEC_SETTLE_S:.0f}s: not the recorded process", cmdline
        if self.token is not None and not has_token(cmdline, self.token):
            return False, (f"pid {self.pid} runs {' '.join(cmdline)[:120]!r}, which does not carry {self.token!r}: "
                           "not the recorded process"), cmdline
        if self.token is None and self.cmdline_sha is not None and cmdline_hash(cmdline) != self.cmdline_sha:
            return False, f"pid {self.pid} runs another command line than recorded: not the recorded process", cmdline
        return True, "", cmdline

    def alive(self) -> bool:
        return self.check()[0]


def process_alive(pid: int | None, start_time: float | None = None, host: str | None = None) -> bool:
    """Whether a local process is alive and (when ``start_time`` is given) is the same process.

    A process on another host cannot be checked here and counts as alive (a liveness question, where
    "alive" is the safe answer; never use this to decide whether to signal a process).
    """
    if host is not None and host != socket.gethostname():
        return True
    if not pid:
        return False
    actual = process_start_time(pid)
    if actual is None:
        return False
    return start_time is None or abs(actual - start_time) < START_TIME_TOLERANCE_S


def flag_value(cmdline: list[str], flag: str) -> str | None:
    """The value after the first ``flag`` on a command line (``None`` when it has none)."""
    for i, arg in enumerate(cmdline[:-1]):
        if arg == flag:
            return cmdline[i + 1]
    return None


def live_run_pids(run_id: str, stream: str | None = None, control_dir: str | None = None) -> list[int]:
    """Pids of the live local processes whose own command line carries ``--run-id <run_id>`` (and, when
    given, ``--stream <stream>`` and ``--control-dir <control_dir>``): this host's own proof that a driver
    of that run is alive, whatever a control file says (a hot standby's check before a takeover). Read
    from ``/proc`` (standard library only: the driver side runs it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        cmdline = process_cmdline(pid)
        if cmdline == [] and _parent(pid) not in (0, 2, None):
            # Empty while inside execve (see EXEC_SETTLE_S); kernel threads (children of pid 2) and zombies
            # are empty for good and are not read again.
            cmdline = settled_cmdline(pid, settle=0.5)
        if not cmdline or not has_token(cmdline, run_id):
            continue
        if stream is not None and flag_value(cmdline, "--stream") != stream:
            continue
        if control_dir is not None and flag_value(cmdline, "--control-dir") != control_dir:
            continue
        found.append(pid)
    return found


def _parent(pid: int) -> int | None:
    """The parent pid of a live, non-zombie local process (``None``: gone, a zombie, or unreadable)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode()
        fields = stat[stat.rindex(")") + 2 :].split()
        return None if fields[0] in ("Z", "X") else int(fields[1])
    except (OSError, ValueError, IndexError):
        return None
