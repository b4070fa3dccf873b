"""Unit tests for spark_jobs.event_generator (stdlib only, no Spark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from spark_jobs.event_generator import (  # noqa: E402
    EVENT_TYPES,
    MALFORMED_LINES,
    GeneratedBatch,
    format_ts,
    generate_events,
    main,
)

T0 = datetime(2026, 11, 22, 2, 40, 0, 123000, tzinfo=timezone.utc)


def _lines(batch: GeneratedBatch) -> list[str]:
    """All lines of the batch's files, in file order."""
    out: list[str] = []
    for path in batch.files:
        out.extend(Path(path).read_text(encoding="utf-8").splitlines())
    return out


def _parse(line: str) -> dict | None:
    """Parse a line, returning None when it is not valid JSON."""
    try:
        return json.loads(line)
    except json.JSONDecodeError:
        return None


def _parse_ts(ts: str) -> datetime:
    """Parse the generator's ``...Z`` timestamps."""
    assert ts.endswith("Z")
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc)


def test_counts_ids_and_files_without_malformed(tmp_path: Path) -> None:
    batch = generate_events(tmp_path, count=25, files=3, run="r1", event_time_start=T0)
    assert batch.valid == 25
    assert batch.malformed == 0
    assert len(batch.files) == 3
    assert all(os.path.isabs(p) for p in batch.files)
    assert [os.path.basename(p) for p in batch.files] == [
        "events-r1-000000.json",
        "events-r1-000001.json",
        "events-r1-000002.json",
    ]
    # ceil(25 / 3) = 9 per file, last shorter
    per_file = [len(Path(p).read_text().splitlines()) for p in batch.files]
    assert per_file == [9, 9, 7]
    records = [json.loads(line) for line in _lines(batch)]
    ids = [r["event_id"] for r in records]
    assert ids == list(batch.event_ids)
    assert ids == [f"r1-{i:08d}" for i in range(25)]
    assert len(set(ids)) == 25
    assert list(records[0]) == ["event_id", "device_id", "event_type", "ts", "signal", "attrs"]


def test_malformed_lines_interleaved(tmp_path: Path) -> None:
    batch = generate_events(tmp_path, count=20, files=4, run="m", malformed_every=3, event_time_start=T0)
    lines = _lines(batch)
    assert batch.valid == 20
    assert len(lines) == batch.valid + batch.malformed
    parsed = [_parse(line) for line in lines]
    bad_positions = [i + 1 for i, p in enumerate(parsed) if p is None]
    # every 3rd line (1-based) is malformed; output ends with a valid event
    assert bad_positions == list(range(3, len(lines) + 1, 3))
    assert parsed[-1] is not None
    assert batch.malformed == len(bad_positions) == 9  # 29 lines: 3, 6, ..., 27
    for line in (lines[i - 1] for i in bad_positions):
        with pytest.raises(json.JSONDecodeError):
            json.loads(line)
        assert line in MALFORMED_LINES
    # malformed lines do not consume sequence numbers
    valid_ids = [p["event_id"] for p in parsed if p is not None]
    assert valid_ids == list(batch.event_ids) == [f"m-{i:08d}" for i in range(20)]
    # each file holds ceil(20 / 4) = 5 valid events
    for path in batch.files:
        valid_in_file = [p for p in map(_parse, Path(path).read_text().splitlines()) if p is not None]
        assert len(valid_in_file) == 5


def test_all_malformed_variants_are_invalid_json() -> None:
    assert len(MALFORMED_LINES) >= 2
    for line in MALFORMED_LINES:
        with pytest.raises(json.JSONDecodeError):
            json.loads(line)


def test_no_tmp_files_and_sorted_names(tmp_path: Path) -> None:
    out = tmp_path / "nested" / "in"
    batch = generate_events(out, count=30, files=12, run="s", file_start_index=995)
    assert out.is_dir()
    names = sorted(os.listdir(out))
    assert not [n for n in names if n.startswith(".") or n.endswith(".tmp")]
    assert names == [os.path.basename(p) for p in batch.files]
    assert names[0] == "events-s-000995.json"
    assert names[-1] == "events-s-001006.json"


def test_deterministic_fields(tmp_path: Path) -> None:
    batch = generate_events(tmp_path, count=30, run="d", start_seq=100, devices=5, event_time_start=T0)
    for record in map(json.loads, _lines(batch)):
        seq = int(record["event_id"].rsplit("-", 1)[1])
        assert record["device_id"] == f"dev-{seq % 5:03d}"
        assert record["event_type"] == EVENT_TYPES[seq % 3]
        assert record["signal"] == round((seq * 7919 % 1000) / 10, 3)
        assert isinstance(record["signal"], float)
        assert set(record["attrs"]) == {"firmware", "site"}
    # same arguments in another directory give byte-identical content
    again = generate_events(tmp_path / "again", count=30, run="d", start_seq=100, devices=5, event_time_start=T0)
    assert _lines(again) == _lines(batch)


def test_event_times_advance_by_step(tmp_path: Path) -> None:
    batch = generate_events(tmp_path, count=10, run="t", event_time_start=T0, event_time_step=0.25, malformed_every=4)
    records = [p for p in map(_parse, _lines(batch)) if p is not None]
    assert records[0]["ts"] == "2026-11-22T02:40:00.123Z"
    times = [_parse_ts(r["ts"]) for r in records]
    for i, moment in enumerate(times):
        assert moment == T0 + timedelta(seconds=0.25 * i)
    assert records[-1]["ts"] == "2026-11-22T02:40:02.373Z"


def test_default_event_time_is_now_utc(tmp_path: Path) -> None:
    before = datetime.now(timezone.utc) - timedelta(seconds=1)
    batch = generate_events(tmp_path, count=3, run="now")
    after = datetime.now(timezone.utc) + timedelta(seconds=1)
    for record in map(json.loads, _lines(batch)):
        assert before <= _parse_ts(record["ts"]) <= after


def test_format_ts_utc_milliseconds() -> None:
    plus2 = timezone(timedelta(hours=2))
    assert format_ts(datetime(2026, 1, 2, 5, 4, 5, 999999, tzinfo=plus2)) == "2026-01-02T03:04:05.999Z"
    assert format_ts(datetime(2026, 1, 2, 3, 4, 5)) == "2026-01-02T03:04:05.000Z"


def test_default_run_is_random_hex(tmp_path: Path) -> None:
    a = generate_events(tmp_path, count=1)
    b = generate_events(tmp_path, count=1)
    run_a = a.event_ids[0].rsplit("-", 1)[0]
    assert len(run_a) == 8 and all(c in "0123456789abcdef" for c in run_a)
    assert a.event_ids != b.event_ids
    assert a.files != b.files


def test_start_seq_continuation_is_contiguous(tmp_path: Path) -> None:
    first = generate_events(tmp_path, count=7, files=2, run="c", malformed_every=2)
    second = generate_events(
        tmp_path, count=5, files=2, run="c", start_seq=first.valid, file_start_index=len(first.files), malformed_every=2
    )
    ids = list(first.event_ids) + list(second.event_ids)
    assert ids == [f"c-{i:08d}" for i in range(12)]
    names = sorted(os.listdir(tmp_path))
    assert names == [os.path.basename(p) for p in first.files + second.files]


def test_existing_file_is_not_overwritten(tmp_path: Path) -> None:
    generate_events(tmp_path, count=2, run="x")
    with pytest.raises(FileExistsError):
        generate_events(tmp_path, count=2, run="x")


def test_zero_count_writes_empty_files(tmp_path: Path) -> None:
    batch = generate_events(tmp_path, count=0, files=2, run="z", malformed_every=1)
    assert batch == GeneratedBatch(files=batch.files, event_ids=(), valid=0, malformed=0)
    assert len(batch.files) == 2
    assert _lines(batch) == []


def test_fewer_events_than_files(tmp_path: Path) -> None:
    batch = generate_events(tmp_path, count=2, files=4, run="few")
    assert len(batch.files) == 4
    assert [len(Path(p).read_text().splitlines()) for p in batch.files] == [1, 1, 0, 0]


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"count": -1}, "count"),
        ({"count": 1, "files": 0}, "files"),
        ({"count": 1, "devices": 0}, "devices"),
        ({"count": 1, "malformed_every": -1}, "malformed_every"),
        ({"count": 1, "malformed_every": 1}, "malformed_every"),
        ({"count": 1, "rate_per_second": 0}, "rate_per_second"),
        ({"count": 1, "rate_per_second": -5.0}, "rate_per_second"),
        ({"count": 1, "start_seq": -1}, "start_seq"),
        ({"count": 1, "file_start_index": -1}, "file_start_index"),
        ({"count": 1, "run": "a/b"}, "run"),
        ({"count": 1, "run": ""}, "run"),
        ({"count": 1, "event_time_step": float("nan")}, "event_time_step"),
        ({"count": 1.5}, "count"),
    ],
)
def test_argument_validation(tmp_path: Path, kwargs: dict, name: str) -> None:
    target = tmp_path / "out"
    with pytest.raises(ValueError, match=name):
        generate_events(target, **kwargs)
    assert not target.exists() or not os.listdir(target)


def test_rate_is_roughly_respected(tmp_path: Path) -> None:
    started = time.monotonic()
    batch = generate_events(tmp_path, count=30, files=3, run="rate", rate_per_second=100.0)
    elapsed = time.monotonic() - started
    assert batch.valid == 30
    assert 0.2 <= elapsed < 2.0


def test_without_rate_is_fast(tmp_path: Path) -> None:
    started = time.monotonic()
    generate_events(tmp_path, count=2000, files=5, run="fast")
    assert time.monotonic() - started < 2.0


def test_main_in_process(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["--dir", str(tmp_path), "--count", "10", "--files", "2", "--run", "cli", "--malformed-every", "4"])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary == {
        "files": 2,
        "valid": 10,
        "malformed": 3,
        "first_event_id": "cli-00000000",
        "last_event_id": "cli-00000009",
    }


def test_main_rejects_bad_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--dir", str(tmp_path), "--count", "5", "--devices", "0"])
    assert info.value.code == 2
    assert "devices" in capsys.readouterr().err


def test_cli_subprocess(tmp_path: Path) -> None:
    out = tmp_path / "cli"
    proc = subprocess.run(
        [
            sys.executable, "-m", "spark_jobs.event_generator",
            "--dir", str(out), "--count", "12", "--files", "3", "--run", "sub",
            "--start-seq", "40", "--devices", "3", "--malformed-every", "5",
            "--step", "0.5", "--file-start-index", "7",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out_lines = proc.stdout.strip().splitlines()
    assert len(out_lines) == 1
    assert json.loads(out_lines[0]) == {
        "files": 3,
        "valid": 12,
        "malformed": 2,
        "first_event_id": "sub-00000040",
        "last_event_id": "sub-00000051",
    }
    assert sorted(os.listdir(out)) == [f"events-sub-{i:06d}.json" for i in (7, 8, 9)]


def test_cli_subprocess_bad_input_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "spark_jobs.event_generator", "--dir", str(tmp_path), "--count", "-3"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "count" in proc.stderr
    assert proc.stdout == ""
