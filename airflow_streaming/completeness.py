"""Which periods of a stream are complete in its sink, decided from what the checkpoint proves.

Pure: the standard library only (usable beside the driver side's pure modules), no Airflow, no clock.

A **period** is a half-open interval ``[start, end)``:

- of event time (``hourly``, ``daily``, ``every:<N>m``), in epoch milliseconds UTC, aligned to the
  rule's ``origin`` (the epoch unless set; periods are ``origin + k * length``);
- or of batch ids (``batches:<N>``, for streams without event time): ``[k * N, (k + 1) * N)``.

A time period is **complete** once a *committed* micro-batch ran with a watermark at or past its
end: in append mode that batch emits the windows that close at or before its watermark, and its
commit (``commits/<N>``) says the sink holds them. A batch-count period is complete once its last
batch id (or a later one) is committed. The *proof* of a period is the first committed batch (by
id) that satisfies this; an uncommitted batch never proves anything, whatever its watermark.

:func:`closed_periods` is a function of its arguments only: the same batches and ``after`` always
give the same events, so an event's identity (the period's start and end) comes from the checkpoint,
never from a clock. A caller keeps the last period it emitted and passes it back as ``after``:
a restart, an upgrade, a rollback (an older checkpoint whose watermark is behind) or a failover then
emits nothing twice. (Batch-count identities are batch ids: a stream given a new checkpoint starts
again at batch 0, and its periods are reported again only once its batch ids pass ``after``.)

Row counts. The rows of a time period are those of the committed batches whose watermark lies in
the period (the batches that ran while the stream's watermark was inside it); batches that ran
before the stream had a watermark (``batchWatermarkMs`` 0) count in the period of the first
positive watermark that follows them. Late rows are Spark's ``numRowsDroppedByWatermark`` of those
batches. A count is ``None`` (unknown) unless every batch it covers is present, committed and has
the count, and the batch just before them is present too (so that no earlier batch belongs to the
period); an empty period whose neighbours are known has 0 rows.

A period longer than the checkpoint's newest batches (an hour of a 10 s trigger: 360 batches) is counted from
the driver's running sums instead (:class:`Counters`, the status document's ``counters``): ``cum(b)``, the rows
of an epoch's batches up to ``b``, is the epoch's sum less the reports of the batches after ``b``. With
watermarks that never go back (Spark's), the batches of a time period are exactly those from the previous
period's proof to the one before its own proof: its rows are ``cum(last) - cum(last of the previous period)``,
and the value at the previous period's last batch comes with ``after`` (:attr:`PeriodKey.counted_through`, the
cursor's), both of the same epoch. Each event carries its own (:attr:`PeriodKey.counted_through`) for the next.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from airflow_streaming.exceptions import SpecError

__all__ = [
    "MAX_EVENTS",
    "CommittedBatch",
    "CompletenessRule",
    "CountedThrough",
    "Counters",
    "PeriodEvent",
    "PeriodKey",
    "closed_periods",
    "iso_ms",
    "parse_rule",
]

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
#: At most this many events per call of :func:`closed_periods` unless the rule says otherwise.
MAX_EVENTS = 48
_MAX_MAX_EVENTS = 10_000

_EVERY_RE = re.compile(r"every:([1-9][0-9]{0,5})m")
_BATCHES_RE = re.compile(r"batches:([1-9][0-9]{0,8})")
_FIELDS = ("period", "origin", "timezone", "max_events")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def iso_ms(ms: int) -> str:
    """Epoch milliseconds as ISO 8601 UTC with milliseconds, as Spark's progress writes them
    (``2024-01-01T00:00:50.000Z``)."""
    moment = _EPOCH + timedelta(milliseconds=ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}Z"


@dataclass(frozen=True)
class CompletenessRule:
    """When a period of a stream is complete. Build it with :func:`parse_rule`."""

    period: str
    """As written: ``hourly``, ``daily``, ``every:<N>m`` or ``batches:<N>``."""
    by_batches: bool
    """``batches:<N>``: periods of batch ids, not of event time."""
    length: int
    """Milliseconds of a time period, or batches of a batch-count period."""
    origin_ms: int = 0
    """Time periods start at ``origin_ms + k * length`` (UTC)."""
    max_events: int = MAX_EVENTS

    def period_at(self, position: int) -> PeriodKey:
        """The period holding ``position`` (epoch ms for time periods, a batch id otherwise)."""
        start = self.origin_ms + (position - self.origin_ms) // self.length * self.length
        return PeriodKey(start, start + self.length)

    def first_from(self, position: int) -> PeriodKey:
        """The first period starting at or after ``position``."""
        start = self.origin_ms - (self.origin_ms - position) // self.length * self.length
        return PeriodKey(start, start + self.length)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"period": self.period}
        if self.origin_ms:
            out["origin"] = iso_ms(self.origin_ms)
        if self.max_events != MAX_EVENTS:
            out["max_events"] = self.max_events
        return out


def _parse_origin(value: Any, field: str) -> int:
    if not isinstance(value, str):
        raise SpecError(field, f"must be an ISO 8601 UTC time such as '2024-01-01T00:30:00Z', got {type(value).__name__}")
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise SpecError(field, f"not an ISO 8601 time: {value!r} (e.g. '2024-01-01T00:30:00Z')") from None
    if moment.tzinfo is None or moment.utcoffset() != timedelta(0):
        raise SpecError(field, f"must be in UTC (end with 'Z' or '+00:00'), got {value!r}")
    delta = moment - _EPOCH
    if delta.microseconds % 1000:
        raise SpecError(field, f"finer than a millisecond: {value!r}")
    return delta // timedelta(milliseconds=1)


def parse_rule(raw: Any, field: str = "completeness") -> CompletenessRule:
    """Parse ``{"period": ..., "origin": ..., "timezone": "UTC", "max_events": ...}``.

    ``period`` is required. ``origin`` (ISO 8601 in UTC) shifts where time periods start (the epoch
    by default: hours on the hour, days at midnight UTC); ``timezone`` may only be ``UTC``;
    ``max_events`` caps the events of one call (default :data:`MAX_EVENTS`). Raises
    :class:`~airflow_streaming.exceptions.SpecError` naming the field (``<field>.<key>``).
    """
    if not isinstance(raw, Mapping):
        raise SpecError(field, f"must be a mapping with a 'period', got {type(raw).__name__}")
    unknown = sorted(str(k) for k in raw if k not in _FIELDS)
    if unknown:
        raise SpecError(f"{field}.{unknown[0]}", f"unknown field (known: {', '.join(_FIELDS)})")
    period = raw.get("period")
    where = f"{field}.period"
    if not isinstance(period, str) or not period.strip():
        raise SpecError(where, "required: 'hourly', 'daily', 'every:<N>m' or 'batches:<N>'")
    period = period.strip()
    by_batches = False
    if period == "hourly":
        length = HOUR_MS
    elif period == "daily":
        length = DAY_MS
    elif match := _EVERY_RE.fullmatch(period):
        length = int(match.group(1)) * MINUTE_MS
    elif match := _BATCHES_RE.fullmatch(period):
        length, by_batches = int(match.group(1)), True
    else:
        raise SpecError(where, f"unknown period {period!r} (expected 'hourly', 'daily', 'every:<N>m' or 'batches:<N>')")
    zone = raw.get("timezone", "UTC")
    if zone != "UTC":
        raise SpecError(f"{field}.timezone", f"only 'UTC' is supported, got {zone!r}")
    origin_ms = 0
    if raw.get("origin") is not None:
        if by_batches:
            raise SpecError(f"{field}.origin", f"only time periods have an origin, not {period!r}")
        origin_ms = _parse_origin(raw["origin"], f"{field}.origin")
    max_events = raw.get("max_events", MAX_EVENTS)
    if isinstance(max_events, bool) or not isinstance(max_events, int) or not 1 <= max_events <= _MAX_MAX_EVENTS:
        raise SpecError(f"{field}.max_events", f"must be an integer from 1 to {_MAX_MAX_EVENTS}, got {max_events!r}")
    return CompletenessRule(period, by_batches, length, origin_ms, max_events)


@dataclass(frozen=True)
class CommittedBatch:
    """What a checkpoint proves about one micro-batch."""

    batch_id: int
    watermark_ms: int
    """``batchWatermarkMs`` of ``offsets/<N>``: the watermark the batch ran with (0: none yet)."""
    committed: bool
    """``commits/<N>`` exists (and is readable): the batch's output is in the sink."""
    input_rows: int | None = None
    """``numInputRows`` of the batch's progress, when known."""
    late_rows: int | None = None
    """Rows dropped as late (``numRowsDroppedByWatermark`` summed over the state operators), when known."""
    first_event_ms: int | None = None
    """The earliest event time of the batch's input (its progress's ``eventTime.min``), when known."""


@dataclass(frozen=True)
class Counters:
    """The running sums of one query's **epoch**: every batch ``from_batch..through_batch`` its drivers reported
    (the status document's ``counters``, :func:`airflow_streaming.control.contract.count_report`)."""

    epoch: str
    """Names the epoch (its query and the run that began it): sums of two epochs are never combined."""
    from_batch: int
    through_batch: int
    input_rows: int
    late_rows: int


@dataclass(frozen=True)
class CountedThrough:
    """The rows of an epoch's batches ``from_batch..batch`` (``cum(batch)``), kept with an emitted period whose
    last batch is ``batch``: the next period's counts start from it."""

    epoch: str
    epoch_from: int
    batch: int
    input_rows: int
    late_rows: int


@dataclass(frozen=True, order=True)
class PeriodKey:
    """A period's identity: ``[start, end)`` in epoch ms (time periods) or batch ids (``batches:<N>``)."""

    start: int
    end: int
    counted_through: CountedThrough | None = field(default=None, compare=False, repr=False)
    """Of an emitted period (an event's key, a cursor): the counts through its last batch, when known. Not part
    of the identity (neither compared nor hashed)."""


@dataclass(frozen=True)
class PeriodEvent:
    """A period that is complete in the sink."""

    key: PeriodKey
    period: str
    by_batches: bool
    batch_id: int
    """The first committed batch proving the period complete."""
    watermark_ms: int
    """The watermark that batch ran with."""
    batches: int
    """Committed batches counted in the period (see the module's note on row counts)."""
    input_rows: int | None
    late_rows: int | None

    @property
    def identity(self) -> str:
        """A stable text form of :attr:`key` (``<start>/<end>`` ISO times, or ``batches:<first>-<last>``)."""
        if self.by_batches:
            return f"batches:{self.key.start}-{self.key.end - 1}"
        return f"{iso_ms(self.key.start)}/{iso_ms(self.key.end)}"

    def extra(self) -> dict[str, Any]:
        """The event's extra: JSON-serialisable, the same for the same checkpoint."""
        out: dict[str, Any] = {"period": self.period, "identity": self.identity}
        if self.by_batches:
            out["first_batch_id"], out["last_batch_id"] = self.key.start, self.key.end - 1
        else:
            out["period_start"], out["period_end"] = iso_ms(self.key.start), iso_ms(self.key.end)
        out.update(batch_id=self.batch_id, watermark=iso_ms(self.watermark_ms), watermark_ms=self.watermark_ms,
                   batches=self.batches, input_rows=self.input_rows, late_rows=self.late_rows)
        return out


def _sum(batches: list[CommittedBatch], name: str) -> int | None:
    values = [getattr(b, name) for b in batches]
    return None if any(v is None for v in values) else sum(values)


class _Checkpoint:
    """The batches of one call, indexed for the proofs and the counts."""

    def __init__(self, batches: Iterable[CommittedBatch]) -> None:
        self.by_id = {b.batch_id: b for b in batches}  # one entry per id: a later one replaces an earlier one
        self.ids = sorted(self.by_id)
        committed = [self.by_id[i] for i in self.ids if self.by_id[i].committed]
        self.committed_ids = [b.batch_id for b in committed]
        # Running maximum of the watermarks of the committed batches in id order: the first committed
        # batch whose watermark reaches ``end`` is found by bisection, even if watermarks were not monotonic.
        self.running_max: list[int] = []
        for b in committed:
            self.running_max.append(max(b.watermark_ms, self.running_max[-1] if self.running_max else b.watermark_ms))
        # The position that counts a batch into a time period (see the module's note on row counts).
        self.position: dict[int, int] = {}
        later_positive: int | None = None
        for i in reversed(self.ids):
            wm = self.by_id[i].watermark_ms
            if wm > 0:
                later_positive = wm
            if later_positive is not None:
                self.position[i] = wm if wm > 0 else later_positive

    def first_position(self, rule: CompletenessRule) -> int | None:
        """Where a first call starts: the first positive watermark of a committed batch, or earlier, the
        earliest event time of the committed batches that ran before it (they may hold periods that
        this watermark closes at once), looking back at most ``rule.max_events`` periods."""
        first = next((b for b in map(self.by_id.get, self.committed_ids) if b.watermark_ms > 0), None)
        if first is None:
            return None
        earlier = [self.by_id[i].first_event_ms for i in self.committed_ids if i < first.batch_id]
        known = [t for t in earlier if t is not None]
        floor = rule.period_at(first.watermark_ms).start - rule.max_events * rule.length
        return max(floor, min([first.watermark_ms, *known]))

    def time_proof(self, end: int) -> CommittedBatch | None:
        at = bisect.bisect_left(self.running_max, end)
        return self.by_id[self.committed_ids[at]] if at < len(self.committed_ids) else None

    def batch_proof(self, last_id: int) -> CommittedBatch | None:
        at = bisect.bisect_left(self.committed_ids, last_id)
        return self.by_id[self.committed_ids[at]] if at < len(self.committed_ids) else None

    def counted(self, ids: list[int]) -> tuple[int, int | None, int | None]:
        """Committed batches, input rows and late rows of the batch ids ``ids``; the counts are ``None``
        unless every one of them is present and committed with its counts."""
        present = [self.by_id[i] for i in ids if i in self.by_id and self.by_id[i].committed]
        if len(present) != len(ids):
            return len(present), None, None
        return len(present), _sum(present, "input_rows"), _sum(present, "late_rows")

    def cumulative(self, counters: Counters | None, batch: int) -> CountedThrough | None:
        """``cum(batch)`` of the epoch ``counters``: its sums less the reports of the batches after ``batch``;
        ``None`` unless ``batch`` lies in the epoch (or just before it) and each of those reports is here."""
        if counters is None or not counters.from_batch - 1 <= batch <= counters.through_batch:
            return None
        rows, late = counters.input_rows, counters.late_rows
        for i in range(batch + 1, counters.through_batch + 1):
            b = self.by_id.get(i)
            if b is None or b.input_rows is None or b.late_rows is None:
                return None
            rows, late = rows - b.input_rows, late - b.late_rows
        return CountedThrough(counters.epoch, counters.from_batch, batch, rows, late)

    def time_span(self, key: PeriodKey, proof: CommittedBatch) -> tuple[list[int], bool]:
        """The batch ids counted in a time period (those before the proof whose position lies in it),
        and whether they are certainly all of them: no batch id is missing between the first of them
        and the proof, and the batch before the first is present (with watermarks that never go back,
        as Spark keeps them, no earlier batch belongs to the period) or the first is batch 0."""
        ids = [i for i in self.ids if i < proof.batch_id and key.start <= self.position.get(i, key.end) < key.end]
        lo = ids[0] if ids else proof.batch_id
        gapless = all(i in self.by_id for i in range(lo, proof.batch_id))
        return ids, gapless and (lo == 0 or lo - 1 in self.by_id)


def _between(since: CountedThrough | None, until: CountedThrough | None) -> tuple[int, int, int] | None:
    """Batches, input rows and late rows of the batches after ``since.batch`` through ``until.batch``, when both
    are known values of the same epoch."""
    if (since is None or until is None or (since.epoch, since.epoch_from) != (until.epoch, until.epoch_from)
            or since.batch > until.batch):
        return None
    return until.batch - since.batch, until.input_rows - since.input_rows, until.late_rows - since.late_rows


def closed_periods(rule: CompletenessRule, committed: Iterable[CommittedBatch],
                   after: PeriodKey | None, counters: Counters | None = None) -> list[PeriodEvent]:
    """The periods complete in the sink and not yet emitted, oldest first.

    ``committed`` is what the checkpoint shows (:func:`airflow_streaming.checkpoint.committed.read_committed`),
    any order, uncommitted batches included (they never prove a period). ``after`` is the last period
    already emitted: only periods starting at or after its end are returned. Without ``after``, time
    periods start with the one holding the first positive watermark of a committed batch, or with
    the one holding the earliest event time (``first_event_ms``, when known) of the committed batches
    that ran before that watermark: the first watermark can close several periods at once. That look
    back is bounded to ``rule.max_events`` periods (one odd old timestamp must not start a
    decade of hourly events); pass an ``after`` to report from an earlier period. Batch-count
    periods start with the one holding the lowest batch id given.

    Periods in between are all returned, empty ones included (a report for an empty hour is still
    due), but at most ``rule.max_events`` (default :data:`MAX_EVENTS` = 48) per call: a stream whose
    watermark jumped far ahead is caught up over several calls, each passing the last event's key
    as ``after``. Deterministic: no clock is read.

    ``counters`` (the running sums of the query of ``committed``) count a period whose batches are not all
    among ``committed``: from ``after.counted_through`` for a time period, from ``cum(start - 1)`` or
    ``after.counted_through`` for a batch-count period (see the module's note). Each event's key carries
    ``cum`` at the period's last batch when it is known.
    """
    ckpt = _Checkpoint(committed)
    since = after.counted_through if after is not None else None
    if after is not None:
        key = rule.first_from(after.end)
    elif rule.by_batches:
        if not ckpt.ids:
            return []
        key = rule.period_at(ckpt.ids[0])
    else:
        first = ckpt.first_position(rule)
        if first is None:
            return []
        key = rule.period_at(first)
    events: list[PeriodEvent] = []
    while len(events) < rule.max_events:
        if rule.by_batches:
            proof = ckpt.batch_proof(key.end - 1)
            span, certain = list(range(key.start, key.end)), True
        else:
            proof = ckpt.time_proof(key.end)
            if proof is not None:
                span, certain = ckpt.time_span(key, proof)
        if proof is None:
            break
        batches, rows, late = ckpt.counted(span)
        if not certain:
            rows = late = None
        last = key.end - 1 if rule.by_batches else proof.batch_id - 1
        # A time period's last batch is known only if the proof is certainly the first to pass its end: the
        # batch before it is here, short of the end (a proof at the window's oldest batch may be a later one).
        before = ckpt.by_id.get(last)
        known = rule.by_batches or last < 0 or (before is not None and before.watermark_ms < key.end)
        through = ckpt.cumulative(counters, last) if known else None
        if rows is None or late is None:
            start = ckpt.cumulative(counters, key.start - 1) if rule.by_batches else None
            if start is None and since is not None and (not rule.by_batches or since.batch == key.start - 1):
                start = since
            counted = _between(start, through)
            if counted is not None:
                batches, rows, late = counted
        events.append(PeriodEvent(PeriodKey(key.start, key.end, through), rule.period, rule.by_batches,
                                  proof.batch_id, proof.watermark_ms, batches, rows, late))
        since = through
        key = PeriodKey(key.end, key.end + rule.length)
    return events
