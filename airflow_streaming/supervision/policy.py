"""Restart policy: attempts within a validity interval, exponential backoff with a cap, reset after health.

Like YARN's ``maxAppAttempts`` + ``attemptFailuresValidityInterval`` and Databricks' backoff that resets
after success: only failures within ``validity_interval_s`` count; the n-th restart waits
``min(initial x multiplier^(n-1), max)``; a stream healthy for ``reset_after_healthy_s`` starts over.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import Field

from airflow_streaming.models import Model



@dataclass(frozen=True)
class RestartPolicy:
    max_attempts: int = 5
    validity_interval_s: float = 3600.0
    backoff_initial_s: float = 10.0
    backoff_multiplier: float = 2.0
    backoff_max_s: float = 600.0
    reset_after_healthy_s: float = 600.0
    restart_on_stalled: bool = False
    restart_finished: bool = False
    """Start a run that finished by itself (an ``availableNow``/``once`` trigger) again at the next
    supervisor pass: the supervisor's schedule becomes the job's. Not a failure: no attempt is counted."""

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any] | None) -> RestartPolicy:
        data = dict(data or {})
        known = {f.name: f for f in dataclasses.fields(cls)}
        for key, value in data.items():
            if key not in known:
                raise ValueError(f"restart_policy.{key}: unknown (known: {', '.join(sorted(known))})")
            if key in ("restart_on_stalled", "restart_finished"):
                if not isinstance(value, bool):
                    raise ValueError(f"restart_policy.{key}: must be true or false")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"restart_policy.{key}: must be a number >= 0, got {value!r}")
        if data.get("backoff_multiplier", 2.0) < 1:
            raise ValueError("restart_policy.backoff_multiplier: must be >= 1")
        return cls(**data)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait before restart number ``attempt`` (1-based)."""
        return min(self.backoff_initial_s * self.backoff_multiplier ** max(attempt - 1, 0), self.backoff_max_s)


class BudgetAction(str, Enum):
    RESTART = "RESTART"
    WAIT = "WAIT"
    GIVE_UP = "GIVE_UP"
    NOTHING = "NOTHING"


class RestartLedger(Model):
    """What the supervisor remembers about one stream (persisted between supervisor runs, ``supervisor.json``).

    :meth:`from_dict` raises ``ValueError`` naming the field when it is not what the supervisor writes."""

    failures: list[float] = Field(default_factory=list)
    """Times of the failures that led to restarts."""
    error_classes: list[str | None] = Field(default_factory=list)
    healthy_since: float | None = None
    gave_up: bool = False
    handled_run_ids: list[str] = Field(default_factory=list)
    """Runs whose failure was already acted upon: a second supervisor pass never restarts twice."""


@dataclass(frozen=True)
class RestartBudget:
    action: BudgetAction
    reason: str
    attempt: int | None = None
    max_attempts: int | None = None
    wait_s: float | None = None


def note_healthy(ledger: RestartLedger, policy: RestartPolicy, now: float) -> bool:
    """Record a healthy observation; reset the counter after ``reset_after_healthy_s``. Returns whether it reset."""
    if ledger.healthy_since is None:
        ledger.healthy_since = now
    if ledger.failures and now - ledger.healthy_since >= policy.reset_after_healthy_s:
        ledger.failures.clear()
        ledger.error_classes.clear()
        ledger.gave_up = False
        return True
    return False


def restart_budget(policy: RestartPolicy, ledger: RestartLedger, failed_at: float, now: float) -> RestartBudget:
    """Whether one more restart is allowed now: RESTART, WAIT (backing off, ``wait_s`` left) or GIVE_UP
    (attempts within the validity interval exhausted). Only counts; says nothing of the failure's kind."""
    recent = [t for t in ledger.failures if failed_at - t <= policy.validity_interval_s]
    attempt = len(recent) + 1
    if attempt > policy.max_attempts:
        return RestartBudget(BudgetAction.GIVE_UP, f"{len(recent)} restarts within {policy.validity_interval_s:.0f}s "
                                        f"(max {policy.max_attempts})", len(recent), policy.max_attempts)
    wait = policy.backoff(attempt)
    remaining = failed_at + wait - now
    if remaining > 0:
        return RestartBudget(BudgetAction.WAIT, f"backing off {wait:.0f}s before attempt {attempt}", attempt,
                        policy.max_attempts, remaining)
    return RestartBudget(BudgetAction.RESTART, f"restart attempt {attempt} of {policy.max_attempts}", attempt,
                    policy.max_attempts, 0.0)


def record_restart(ledger: RestartLedger, run_id: str, failed_at: float, error_class: str | None) -> None:
    ledger.failures.append(failed_at)
    ledger.error_classes.append(error_class)
    ledger.handled_run_ids = (ledger.handled_run_ids + [run_id])[-50:]
    ledger.healthy_since = None


def record_give_up(ledger: RestartLedger, run_id: str, error_class: str | None) -> None:
    ledger.gave_up = True
    ledger.error_classes.append(error_class)
    ledger.handled_run_ids = (ledger.handled_run_ids + [run_id])[-50:]
