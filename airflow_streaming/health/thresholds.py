"""Health thresholds: defaults, per-stream overrides from the spec's ``health:`` section."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HealthThresholds:
    """When a stream is called falling behind, stalled or worth a warning. All times in seconds."""

    window_seconds: float | None = None
    """Look-back window for rates and durations; default ``max(10 x trigger interval, 60)``."""
    min_batches: int = 3
    """Batches with data needed in the window before a rate verdict is given."""
    rate_ratio: float = 1.2
    """FALLING_BEHIND when average input rate > ``rate_ratio`` x average processing rate."""
    batch_duration_factor: float = 1.0
    """FALLING_BEHIND when the median batch duration > factor x trigger interval (trigger > 0)."""
    stall_trigger_intervals: float = 10.0
    """STALLED when a trigger is active and no batch completed for this many trigger intervals..."""
    stall_min_seconds: float = 120.0
    """... and at least this long (first batches and JVM warm-up take tens of seconds)."""
    heartbeat_timeout_seconds: float | None = None
    """A heartbeat older than this is missing; default ``max(3 x heartbeat interval, 30)``."""
    state_growth_rows: int = 100_000
    """Warn when state rows grow by more than this over the window with no watermark."""
    watermark_lag_seconds: float = 3600.0
    """Warn when the event-time watermark lags wall clock by more than this."""
    kafka_lag_records: int = 100_000
    """Warn when a Kafka source is more than this many offsets behind latest."""
    quarantine_ratio: float = 0.05
    """Warn when more than this share of input rows in the window was quarantined."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> HealthThresholds:
        """Build from the spec's ``health`` mapping; ``ValueError`` naming ``health.<key>`` when invalid."""
        data = dict(data or {})
        known = {f.name: f for f in dataclasses.fields(cls)}
        values: dict[str, Any] = {}
        for key, value in data.items():
            if key not in known:
                raise ValueError(f"health.{key}: unknown health threshold (known: {', '.join(sorted(known))})")
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"health.{key}: must be a number, got {type(value).__name__}")
            if value != value or value in (float("inf"), float("-inf")):
                raise ValueError(f"health.{key}: must be a finite number, got {value}")
            if value < 0:
                raise ValueError(f"health.{key}: must be >= 0, got {value}")
            is_int = known[key].type in ("int", int)
            if is_int and value != int(value):
                raise ValueError(f"health.{key}: must be a whole number, got {value}")
            values[key] = int(value) if is_int else float(value)
        return cls(**values)

    def window(self, trigger_interval: float) -> float:
        return self.window_seconds if self.window_seconds is not None else max(10 * trigger_interval, 60.0)

    def heartbeat_timeout(self, heartbeat_interval: float) -> float:
        if self.heartbeat_timeout_seconds is not None:
            return self.heartbeat_timeout_seconds
        return max(3 * heartbeat_interval, 30.0)

    def stall_after(self, trigger_interval: float) -> float:
        return max(self.stall_trigger_intervals * trigger_interval, self.stall_min_seconds)
