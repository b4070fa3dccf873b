"""The decision table of ``docs/reconcile.md``, generated from :func:`~.decision.decide` (pure).

Every observable state is covered: the rows walk the observation's dimensions in order, and a row
stops at the first dimensions that already fix the decision (the rest read "any"). Regenerate the
page with ``python -m airflow_streaming.reconcile.table > docs/reconcile.md``; a unit test fails
when it is out of date.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum

from airflow_streaming.reconcile.decision import Decision, decide
from airflow_streaming.reconcile.decision import __doc__ as RULES
from airflow_streaming.reconcile.observation import DIMENSIONS, Observation, RunStatus

#: The dimensions in the order the rules read them (so that rows stop early), and the restart
#: policy's two switches the decision reads.
_ORDER = ("action", "desired", "record", "liveness", "lease", "status", "health", "start_overdue",
          "restart_on_stalled", "restart_finished", "gave_up", "failure", "budget", "recovering", "standby")
AXES: dict[str, tuple[object, ...]] = {
    name: DIMENSIONS[name] if name in DIMENSIONS else (False, True) for name in _ORDER}
POLICY_SWITCHES = ("restart_on_stalled", "restart_finished")
assert set(AXES) == {*DIMENSIONS, *POLICY_SWITCHES}


@dataclass(frozen=True)
class _Policy:
    restart_on_stalled: bool
    restart_finished: bool


def _decide(values: dict[str, object]) -> Decision:
    fields = {k: v for k, v in values.items() if k not in POLICY_SWITCHES}
    return decide(Observation(**fields, run_id="R"), _Policy(*(bool(values[k]) for k in POLICY_SWITCHES)))


def _spanned(state: dict[str, object]) -> bool:
    """``restart_finished`` is read for a run that finished by itself only (``decide``'s one use of it;
    ``tests/unit/test_reconcile_exhaustive.py`` checks it changes nothing elsewhere): the table spans it
    there, which keeps the walk near the size it had with one switch."""
    return not state.get("restart_finished") or state.get("status") in (None, RunStatus.FINISHED)


class _Unread(BaseException):  # not an Exception: nothing in decide() may catch it
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


class _Partial:
    """An observation and a policy in one, with only some dimensions fixed: reading another one raises
    :class:`_Unread` (the ``run_id``, ``step`` and ``detail`` of the table's states read as :func:`_decide`'s)."""

    __slots__ = ("values",)
    _OTHERS = {"run_id": "R", "step": None, "detail": ""}

    def __init__(self, values: dict[str, object]) -> None:
        self.values = values

    def __getattr__(self, name: str) -> object:
        if name in self.values:
            return self.values[name]
        if name in AXES:
            raise _Unread(name)
        return self._OTHERS[name]


def _paths(prefix: dict[str, object]) -> Iterator[tuple[dict[str, object], Decision]]:
    """``(the dimensions it read, decision)`` for every way :func:`decide` can go over the spanned states that
    extend ``prefix``: it is run with the dimensions it has read so far fixed, and each one it reads next is
    split on (all of its values). decide() is pure, so a path stands for every state that agrees with it on
    what it read: together they cover every state, exactly, in ~1,500 calls instead of one per state (~8 M)."""
    stack = [dict(prefix)]
    while stack:
        values = stack.pop()
        partial = _Partial(values)
        try:
            d = decide(partial, partial)  # type: ignore[arg-type]  # reads attributes only (checked below)
        except _Unread as unread:
            stack.extend({**values, unread.name: v} for v in reversed(AXES[unread.name]))
            continue
        if not _spanned(values):
            continue
        # The same on a real observation and policy (one of the path's states): a decide() that did more
        # than read attributes (an isinstance, a replace) would fail here instead of making a wrong table.
        real = _decide({**{n: AXES[n][0] for n in AXES}, **values})
        if _key(real) != _key(d):
            raise RuntimeError(f"decide() is not a function of the dimensions it reads: {values}: {real} != {d}")
        yield values, d


def state_count() -> int:
    """The states the table (and the exhaustive test) span."""
    base = 1
    for name, values in AXES.items():
        base *= len(values) if name != "restart_finished" else 1
    return base + base // len(AXES["status"])


def _key(d: Decision) -> tuple[object, ...]:
    return d.act, d.event, d.kill_first, d.reason


def rows() -> list[tuple[dict[str, object], Decision]]:
    """``(fixed dimensions, decision)``: every state matches exactly one row."""
    names = list(AXES)
    out: list[tuple[dict[str, object], Decision]] = []

    def walk(prefix: dict[str, object]) -> None:
        rest = [n for n in names if n not in prefix]
        decisions = {}
        for _, d in _paths(prefix):
            decisions.setdefault(_key(d), d)
            if len(decisions) > 1:
                break
        if len(decisions) == 1:
            out.append((dict(prefix), next(iter(decisions.values()))))
            return
        name = _split(prefix, rest)
        for value in AXES[name]:
            walk({**prefix, name: value})

    def _split(prefix: dict[str, object], rest: list[str]) -> str:
        """The dimension to split on next: the first (in rule order) seen to change the decision here.
        Only the table's size depends on this choice (seeded samples); every row is checked whole."""
        rng = random.Random(f"{sorted(map(str, prefix.items()))}")
        for name in rest:
            others = [n for n in rest if n != name]
            for _ in range(64):
                base = {**prefix, **{n: rng.choice(AXES[n]) for n in others}}
                if len({_key(_decide({**base, name: v})) for v in AXES[name]}) > 1:
                    return name
        return rest[0]

    walk({})
    return out


def _cell(value: object) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    return "yes" if value is True else "no" if value is False else str(value)


def render() -> str:
    """The whole page, markdown."""
    table = rows()
    total = state_count()
    lines = [
        "# The reconcile decision table",
        "",
        "<!-- generated by `python -m airflow_streaming.reconcile.table > docs/reconcile.md`; do not edit -->",
        "",
        "What the supervisor (and every wait and page that asks) does with a stream in each observable state.",
        "It is generated from `airflow_streaming.reconcile.decision.decide`, the one function that decides;",
        "`tests/unit/test_reconcile_exhaustive.py` checks the invariants on every one of the "
        f"{total:,} states ({len(AXES)} dimensions) and that this page is up to date.",
        "",
        "## The rules",
        "",
        *[line[4:] if line.startswith("    ") else line for line in (RULES or "").strip().splitlines()[2:]],
        "",
        "## The dimensions",
        "",
        "| dimension | values |",
        "|---|---|",
        *[f"| `{name}` | {', '.join(_cell(v) for v in values)} |" for name, values in AXES.items()],
        "",
        "`liveness` GONE is proof (no process of the run on its own host, the cluster manager reports the "
        "driver exited, the lease was released or went stale); UNKNOWN is never acted on. `status` is the "
        "status document of the *recorded* run (one of an earlier run counts as NONE). `start_overdue`: "
        "no RUNNING status although the run was submitted longer ago than the spec's `startup_timeout`. "
        "`budget`: the restart policy's attempts and backoff. Acts: NOTHING, OBSERVE (look again), "
        "RESTART (a RECOVER action from the checkpoint; `kill` = the recorded driver is killed first), "
        "RESUME (the abandoned recovery, from its step), RERUN (a run that finished by itself, started again: "
        "not a failure), GIVE_UP (recorded in the ledger), REPORT "
        "(notify a person, change nothing).",
        "",
        f"## The table ({len(table)} rows; a blank cell means any value)",
        "",
        "| # | " + " | ".join(AXES) + " | act | event | kill | reason |",
        "|" + "---|" * (len(AXES) + 5),
    ]
    for i, (fixed, d) in enumerate(table, 1):
        cells = [_cell(fixed[n]) if n in fixed else "" for n in AXES]
        reason = d.reason.replace("|", "\\|")
        lines.append(f"| {i} | " + " | ".join(cells) + f" | **{d.act.value}** | {d.event or ''} | "
                     f"{'kill' if d.kill_first else ''} | {reason} |")
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(render(), end="")
