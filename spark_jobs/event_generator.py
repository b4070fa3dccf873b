"""Write JSON-lines event files for a Spark file-stream source to pick up.

Each call to :func:`generate_events` writes ``count`` valid events, one JSON
object per line, spread over ``files`` files, optionally interleaved with
malformed (non-JSON) lines and optionally paced at ``rate_per_second``.

Every field of an event is a deterministic function of its sequence number
(and of ``run``, ``devices``, ``event_time_start`` and ``event_time_step``), so
tests can compute the expected content of any event::

    {"event_id": "<run>-<seq:08d>", "device_id": "dev-007", "event_type": "reading",
     "ts": "2026-11-22T02:40:00.123Z", "signal": 12.5,
     "attrs": {"firmware": "1.4.2", "site": "site-3"}}

Files are published atomically: the content is written to a hidden temporary
file ``.<name>.tmp`` (Spark's file source ignores names starting with ``.`` or
``_``), flushed and fsynced, then renamed with :func:`os.replace` to
``events-<run>-<file_index:06d>.json``.

This module uses the standard library only (no pyspark import). Command line::

    python -m spark_jobs.event_generator --dir DIR --count N [--files F] [--run R]
        [--start-seq S] [--devices D] [--malformed-every K] [--rate R]
        [--step SECONDS] [--file-start-index I]

prints a one-line JSON summary
``{"files": n, "valid": n, "malformed": n, "first_event_id": ..., "last_event_id": ...}``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import secrets
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence

__all__ = [
    "EVENT_TYPES",
    "MALFORMED_LINES",
    "GeneratedBatch",
    "event_file_name",
    "event_id_for",
    "format_ts",
    "generate_events",
    "main",
    "make_event",
]

EVENT_TYPES: tuple[str, ...] = ("reading", "alert", "heartbeat")
"""Event types, chosen by ``seq % 3``."""

FIRMWARE_VERSIONS: tuple[str, ...] = ("1.4.2", "1.5.0", "2.0.1")
"""Firmware versions, chosen by ``device_index % 3``."""

SITES: int = 4
"""Number of sites; a device's site is ``f"site-{device_index % SITES}"``."""

MALFORMED_LINES: tuple[str, ...] = (
    '{"event_id": "broken',
    "not json at all",
    '{"event_id": 12, "ts": }',
)
"""Malformed lines (none is valid JSON), used in turn within one call."""

_RUN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class GeneratedBatch:
    """What one :func:`generate_events` call wrote.

    Attributes:
        files: absolute paths of the files written, in order (always ``files`` of them).
        event_ids: every valid event id written, in order.
        valid: number of valid events (== ``count``).
        malformed: number of malformed lines.
    """

    files: tuple[str, ...]
    event_ids: tuple[str, ...]
    valid: int
    malformed: int


def event_id_for(run: str, seq: int) -> str:
    """Return the event id of sequence number ``seq`` in run ``run``."""
    return f"{run}-{seq:08d}"


def event_file_name(run: str, file_index: int) -> str:
    """Return the (final, visible) file name of file ``file_index`` of run ``run``."""
    return f"events-{run}-{file_index:06d}.json"


def format_ts(moment: datetime) -> str:
    """Format ``moment`` as ISO-8601 UTC with milliseconds and ``Z``.

    Naive datetimes are taken to be UTC; aware ones are converted to UTC.
    Sub-millisecond digits are truncated.
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    else:
        moment = moment.astimezone(timezone.utc)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"


def make_event(run: str, seq: int, *, devices: int, ts: datetime) -> dict[str, Any]:
    """Build the event record for sequence number ``seq`` (keys in output order).

    - ``device_id`` is ``f"dev-{seq % devices:03d}"``;
    - ``event_type`` is ``EVENT_TYPES[seq % 3]``;
    - ``signal`` is ``round((seq * 7919 % 1000) / 10, 3)``;
    - ``attrs`` depends on the device only.
    """
    device = seq % devices
    return {
        "event_id": event_id_for(run, seq),
        "device_id": f"dev-{device:03d}",
        "event_type": EVENT_TYPES[seq % len(EVENT_TYPES)],
        "ts": format_ts(ts),
        "signal": round((seq * 7919 % 1000) / 10, 3),
        "attrs": {
            "firmware": FIRMWARE_VERSIONS[device % len(FIRMWARE_VERSIONS)],
            "site": f"site-{device % SITES}",
        },
    }


def _check_int(name: str, value: Any, minimum: int) -> None:
    """Raise ValueError naming ``name`` unless ``value`` is an int >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value!r}")


def _validate(
    *,
    count: int,
    files: int,
    run: str,
    start_seq: int,
    devices: int,
    malformed_every: int,
    event_time_step: float,
    rate_per_second: float | None,
    file_start_index: int,
) -> None:
    """Validate the arguments of :func:`generate_events` (ValueError names the argument)."""
    _check_int("count", count, 0)
    _check_int("files", files, 1)
    _check_int("start_seq", start_seq, 0)
    _check_int("devices", devices, 1)
    _check_int("malformed_every", malformed_every, 0)
    _check_int("file_start_index", file_start_index, 0)
    if malformed_every == 1 and count > 0:
        raise ValueError(
            "malformed_every must be 0 (no malformed lines) or >= 2 when count > 0, got 1"
        )
    if not isinstance(run, str) or not _RUN_RE.match(run):
        raise ValueError(
            f"run must be a non-empty label of letters, digits, '_', '.', '-' "
            f"not starting with '.', '_' or '-', got {run!r}"
        )
    if (
        isinstance(event_time_step, bool)
        or not isinstance(event_time_step, (int, float))
        or not math.isfinite(event_time_step)
    ):
        raise ValueError(f"event_time_step must be a finite number of seconds, got {event_time_step!r}")
    if rate_per_second is not None:
        if (
            isinstance(rate_per_second, bool)
            or not isinstance(rate_per_second, (int, float))
            or not math.isfinite(rate_per_second)
            or rate_per_second <= 0
        ):
            raise ValueError(f"rate_per_second must be > 0, got {rate_per_second!r}")


def _plan_lines(count: int, malformed_every: int) -> list[list[int | None]]:
    """Return, for each valid event offset, the lines that end with it.

    Element ``i`` is a list of ``None`` (one per malformed line immediately
    preceding valid event ``i``) followed by ``i`` itself. Line numbers are
    1-based over the whole call; line ``n`` is malformed when
    ``malformed_every > 0 and n % malformed_every == 0``. The stream ends with
    the last valid event (no trailing malformed line).
    """
    groups: list[list[int | None]] = []
    line_no = 0
    pending: list[int | None] = []
    for offset in range(count):
        while True:
            line_no += 1
            if malformed_every and line_no % malformed_every == 0:
                pending.append(None)
            else:
                break
        pending.append(offset)
        groups.append(pending)
        pending = []
    return groups


def _fsync_dir(directory: str) -> None:
    """Best-effort fsync of a directory so a rename is durable (POSIX only)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_atomically(directory: str, name: str, lines: Sequence[str]) -> str:
    """Write ``lines`` to ``directory/name`` via a hidden temp file; return the final path."""
    tmp_path = os.path.join(directory, f".{name}.tmp")
    final_path = os.path.join(directory, name)
    try:
        with open(tmp_path, "w", encoding="utf-8", newline="\n") as handle:
            for line in lines:
                handle.write(line)
                handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_path, final_path)
    except BaseException:
        try:
            os.unlink(tmp_path)
        except OSError:
            pass
        raise
    _fsync_dir(directory)
    return final_path


def generate_events(
    directory: str | os.PathLike[str],
    *,
    count: int,
    files: int = 1,
    run: str | None = None,
    start_seq: int = 0,
    devices: int = 8,
    malformed_every: int = 0,
    event_time_start: datetime | None = None,
    event_time_step: float = 0.1,
    rate_per_second: float | None = None,
    file_start_index: int = 0,
) -> GeneratedBatch:
    """Write ``count`` valid events split evenly over ``files`` files, plus malformed lines.

    Valid events get sequence numbers ``start_seq .. start_seq + count - 1`` and
    ids ``f"{run}-{seq:08d}"``; event ``seq`` has event time
    ``event_time_start + (seq - start_seq) * event_time_step`` seconds.

    Each file holds ``ceil(count / files)`` valid events (the last may be
    shorter, and trailing files may be empty when ``count < files``); exactly
    ``files`` files are always written, named
    ``events-{run}-{file_start_index + j:06d}.json``.

    With ``malformed_every=k > 0``, lines ``k, 2k, ...`` (1-based, counted over
    the whole call) are malformed, non-JSON lines that do not consume a
    sequence number; a malformed line goes in the same file as the valid event
    that follows it, and the output ends with the last valid event. So the
    number of lines written is ``count + malformed``. ``k == 1`` is rejected
    (no valid event could ever be written) unless ``count == 0``.

    With ``rate_per_second``, file ``j`` is published no earlier than
    ``(valid events in files 0..j) / rate_per_second`` seconds after the call
    started, so the events become visible at about that rate (a call of
    ``count`` events takes about ``count / rate_per_second`` seconds).
    Without it, files are written as fast as possible.

    Files are written atomically (hidden ``.<name>.tmp``, fsync,
    :func:`os.replace`). The directory is created if missing.

    Raises:
        ValueError: an invalid argument (the message names it): ``count >= 0``,
            ``files >= 1``, ``devices >= 1``, ``malformed_every >= 0`` (and not 1),
            ``start_seq >= 0``, ``file_start_index >= 0``, ``rate_per_second > 0``,
            finite ``event_time_step``, ``run`` a plain label.
        FileExistsError: one of the target files already exists (nothing is
            written then; use another ``run`` or ``file_start_index``).
    """
    if run is None:
        run = secrets.token_hex(4)
    _validate(
        count=count,
        files=files,
        run=run,
        start_seq=start_seq,
        devices=devices,
        malformed_every=malformed_every,
        event_time_step=event_time_step,
        rate_per_second=rate_per_second,
        file_start_index=file_start_index,
    )
    if event_time_start is None:
        event_time_start = datetime.now(timezone.utc)
    elif event_time_start.tzinfo is None:
        event_time_start = event_time_start.replace(tzinfo=timezone.utc)

    started = time.monotonic()
    out_dir = os.path.abspath(os.fspath(directory))
    os.makedirs(out_dir, exist_ok=True)

    names = [event_file_name(run, file_start_index + j) for j in range(files)]
    for name in names:
        if os.path.exists(os.path.join(out_dir, name)):
            raise FileExistsError(f"event file already exists: {os.path.join(out_dir, name)}")

    groups = _plan_lines(count, malformed_every)
    per_file = math.ceil(count / files) if count else 0

    written: list[str] = []
    event_ids: list[str] = []
    malformed = 0
    emitted = 0
    for j, name in enumerate(names):
        lines: list[str] = []
        for group in groups[j * per_file : (j + 1) * per_file]:
            for item in group:
                if item is None:
                    lines.append(MALFORMED_LINES[malformed % len(MALFORMED_LINES)])
                    malformed += 1
                else:
                    seq = start_seq + item
                    ts = event_time_start + timedelta(seconds=item * event_time_step)
                    record = make_event(run, seq, devices=devices, ts=ts)
                    lines.append(json.dumps(record))
                    event_ids.append(record["event_id"])
                    emitted += 1
        if rate_per_second is not None:
            delay = started + emitted / rate_per_second - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        written.append(_write_atomically(out_dir, name, lines))

    return GeneratedBatch(
        files=tuple(written),
        event_ids=tuple(event_ids),
        valid=len(event_ids),
        malformed=malformed,
    )


def _build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    parser = argparse.ArgumentParser(
        prog="python -m spark_jobs.event_generator",
        description="Write JSON-lines event files for a Spark file-stream source.",
    )
    parser.add_argument("--dir", required=True, help="output directory (created if missing)")
    parser.add_argument("--count", required=True, type=int, help="number of valid events")
    parser.add_argument("--files", type=int, default=1, help="number of files (default 1)")
    parser.add_argument("--run", default=None, help="run label (default: 8 random hex chars)")
    parser.add_argument("--start-seq", type=int, default=0, help="first sequence number (default 0)")
    parser.add_argument("--devices", type=int, default=8, help="number of devices (default 8)")
    parser.add_argument(
        "--malformed-every", type=int, default=0, help="make every K-th line malformed (default 0: none)"
    )
    parser.add_argument("--rate", type=float, default=None, help="events per second (default: as fast as possible)")
    parser.add_argument("--step", type=float, default=0.1, help="event-time step in seconds (default 0.1)")
    parser.add_argument("--file-start-index", type=int, default=0, help="index of the first file (default 0)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; print a one-line JSON summary and return 0.

    Invalid arguments make argparse exit with status 2.
    """
    parser = _build_parser()
    args = parser.parse_args(argv)
    try:
        batch = generate_events(
            args.dir,
            count=args.count,
            files=args.files,
            run=args.run,
            start_seq=args.start_seq,
            devices=args.devices,
            malformed_every=args.malformed_every,
            event_time_step=args.step,
            rate_per_second=args.rate,
            file_start_index=args.file_start_index,
        )
    except (ValueError, FileExistsError) as exc:
        parser.error(str(exc))
    summary = {
        "files": len(batch.files),
        "valid": batch.valid,
        "malformed": batch.malformed,
        "first_event_id": batch.event_ids[0] if batch.event_ids else None,
        "last_event_id": batch.event_ids[-1] if batch.event_ids else None,
    }
    sys.stdout.write(json.dumps(summary) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
