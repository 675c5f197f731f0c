"""A backtest's result: each window's report, and per check how it would have behaved.

`summarize` turns the reports of a period's windows (oldest first) into a
`Backtest`: per check the windows judged, how many breached at the current
target, the value's minimum, median, p95 (nearest rank) and maximum across
the windows, and candidate targets with how many windows each would have
breached, among them the tightest that breaches in at most one window a
week. A candidate is judged by the check's own rule (its comparison; a
window with too few samples or no data breaches at no target). For a
quantile check (recall_latency_p95), the share of its sample at or above
its target in each window too. Text and JSON here (the JSON's fields:
docs/spec.md#9-looking-back-backtest-and-explain); the page in
`watchdog.report.backtest_page`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from checks.base import CheckResult, Comparison, Report, Status, Unit
from checks.verdict import percent, value_in
from watchdog.core import jsontext
from watchdog.core.durations import format_duration
from watchdog.core.text import plural, printable
from watchdog.core.times import rfc3339

WEEK = timedelta(days=7)
# The windows' values at these ranks are candidate targets too, beside the current target
# and the target of at most one breached window a week.
CANDIDATE_RANKS = (50, 75, 90, 95, 100)
# A window is judged by its value only with enough samples: these may breach.
JUDGED = (Status.OK, Status.BREACHED)
WEEKLY = "at most one window a week"


@dataclass(frozen=True)
class Candidate:
    """A target, how many windows it would have breached, and why it is offered."""

    target: float
    breached: int
    why: str  # "current", WEEKLY, or "p90" (the windows' value at that rank)

    def to_json(self, unit: Unit) -> dict[str, Any]:
        return {"target": _number(self.target, unit), "breached": self.breached, "why": self.why}


@dataclass(frozen=True)
class CheckSummary:
    """One check over the period."""

    check_id: str
    windows: int  # windows judged (every window, unless the check is disabled)
    breached: int  # at the current target
    statuses: dict[str, int]
    low: float | None
    median: float | None
    p95: float | None
    high: float | None
    candidates: tuple[Candidate, ...]
    target: float
    comparison: Comparison
    unit: Unit
    # Quantile checks: per window, the share of the sample at or above the target (None:
    # no sample in that window).
    at_or_above: tuple[float | None, ...] | None = None
    # Windows breached with no value (freshness: no event at all before the window's end),
    # which min, median, p95 and max leave out.
    breached_without_value: int = 0
    # The breaches "at most one window a week" allows: one per whole week of judged windows.
    weekly_allowed: int = 0

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "windows": self.windows,
            "breached": self.breached,
            "min": _number(self.low, self.unit),
            "median": _number(self.median, self.unit),
            "p95": _number(self.p95, self.unit),
            "max": _number(self.high, self.unit),
            "target": _number(self.target, self.unit),
            "comparison": self.comparison.value,
            "unit": self.unit.value,
            "statuses": dict(self.statuses),
            "candidates": [c.to_json(self.unit) for c in self.candidates],
            "breached_without_value": self.breached_without_value,
            "weekly_allowed": self.weekly_allowed,
        }
        if self.at_or_above is not None:
            document["at_or_above_target"] = list(self.at_or_above)
        return document


@dataclass(frozen=True)
class Running:
    """The window the period ends inside: not yet ended at `--to`, so not judged with the rest."""

    start: datetime
    end: datetime
    judged_at: datetime  # when the daemon judges it: its end plus schedule.delay

    def to_json(self) -> dict[str, str]:
        return {
            "start": rfc3339(self.start),
            "end": rfc3339(self.end),
            "judged_at": rfc3339(self.judged_at),
        }


@dataclass(frozen=True)
class Backtest:
    """The windows whose end lies in (start, end], judged, and their summary; the window still
    running at `end`, and with `--partial` its report so far (in neither the windows nor the
    summary)."""

    start: datetime
    end: datetime
    reports: tuple[Report, ...]
    summary: dict[str, CheckSummary]
    running: Running | None = None
    partial: Report | None = None

    @property
    def breached_windows(self) -> list[Report]:
        return [r for r in self.reports if r.status is not Status.OK]

    @property
    def healthy(self) -> bool:
        """No window breached or erred, the partial one included (the exit code)."""
        judged = (*self.reports, self.partial) if self.partial else self.reports
        return all(r.status is Status.OK for r in judged)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "schema_version": 1,
            "from": rfc3339(self.start),
            "to": rfc3339(self.end),
            "windows": [r.to_json() for r in self.reports],
            "summary": {check_id: s.to_json() for check_id, s in self.summary.items()},
        }
        if self.running is not None:
            document["not_yet_judged"] = self.running.to_json()
        if self.partial is not None:
            document["partial"] = self.partial.to_json()
        return document


def _number(value: float | None, unit: Unit) -> float | int | None:
    """A value as the report writes it: whole counts and seconds as integers."""
    if value is None or not math.isfinite(value):
        return None
    if float(value).is_integer() and unit is not Unit.RATIO:
        return int(value)
    return value


def nearest_rank(ordered: Sequence[float], q: float) -> float:
    """The value at rank ceil(q * n) of `ordered` (ascending, not empty): the spec's p95 rule."""
    return ordered[max(1, math.ceil(q * len(ordered))) - 1]


def would_breach(result: CheckResult, target: float) -> bool:
    """Whether `result`'s window would have breached at `target`, by the check's own rule."""
    if result.status not in JUDGED:
        return False
    if result.value is None:  # freshness with no event at all: breached at any target
        return True
    return result.comparison.breaches(result.value, target)


def _beyond(value: float, unit: Unit, comparison: Comparison) -> float:
    """The nearest readable target that `value` no longer breaches under `comparison`."""
    step = 0.001 if unit is Unit.RATIO else 1.0
    if comparison is Comparison.GE:  # the target must be above the value
        return (math.floor(value / step) + 1) * step
    if comparison is Comparison.LE:  # below it
        return (math.ceil(value / step) - 1) * step
    return value  # > and <: the value itself breaches nothing equal to it


def readable(value: float, unit: Unit, comparison: Comparison | None = None) -> float:
    """`value` at the precision its text shows (0.1%, 1 ms, a duration's two largest units,
    a count's 6 digits), so a candidate is counted at the target a reader would write.

    With `comparison`, towards breaching less (up for `>`, `>=`, down for `<`, `<=`): a
    target that breached at most so many windows still does once rounded.
    """
    if not math.isfinite(value):
        return value
    step = _step(abs(value), unit)
    if comparison in (Comparison.GT, Comparison.GE):
        return math.ceil(value / step - 1e-9) * step
    if comparison in (Comparison.LT, Comparison.LE):
        return math.floor(value / step + 1e-9) * step
    return round(value / step) * step


def _step(magnitude: float, unit: Unit) -> float:
    """The smallest difference the text of a value of `magnitude` in `unit` shows."""
    if unit is Unit.RATIO:
        return 0.001
    if unit is Unit.MS:
        return 1.0
    if unit is Unit.S:  # human_duration: its two largest units
        return 1.0 if magnitude < 3600 else 60.0 if magnitude < 86400 else 3600.0
    if magnitude == 0:
        return 1.0
    return max(1.0, 10.0 ** (math.floor(math.log10(magnitude)) - 5))  # f"{value:g}"


def weekly_target(results: Sequence[CheckResult], allowed: int) -> float | None:
    """The tightest target that breaches in at most `allowed` of these windows (None: none can).

    Tightest: for a check breached by high values the lowest such target;
    by low values (`<`, `<=`) the highest. A window breached with no value
    breaches at every target, so each takes one of the `allowed`; when they
    alone breach more, no target can.
    """
    first = results[0]
    allowed -= sum(r.status is Status.BREACHED and r.value is None for r in results)
    values = [r.value for r in results if r.status in JUDGED and r.value is not None]
    if not values or allowed < 0:
        return None
    high_breaches = first.comparison in (Comparison.GT, Comparison.GE)
    ordered = sorted(values, reverse=high_breaches)
    # The (allowed + 1)-th worst value must not breach: the target sits at (or just beyond) it.
    pivot = ordered[min(allowed, len(ordered) - 1)]
    if allowed >= len(ordered):
        return ordered[-1] if first.comparison in (Comparison.GT, Comparison.LT) else pivot
    return _beyond(pivot, first.unit, first.comparison)


def _summary(check_id: str, results: Sequence[CheckResult], allowed: int) -> CheckSummary:
    """One check over the windows; `allowed`: the breaches "at most one window a week" allows."""
    first = results[0]
    judged = [r for r in results if r.status is not Status.DISABLED]
    statuses: dict[str, int] = {}
    for r in judged:
        statuses[r.status.value] = statuses.get(r.status.value, 0) + 1
    values = sorted(float(r.value) for r in judged if r.value is not None)

    def count(target: float) -> int:
        return sum(would_breach(r, target) for r in judged)

    # Each candidate is the target its text shows (`readable`), once: the first offered of
    # the targets reading the same (the current one, then the weekly, then the ranks).
    offered: dict[str, tuple[float, str]] = {}

    def offer(target: float, why: str) -> None:
        offered.setdefault(value_in(first.unit, target), (target, why))

    if judged:
        offer(first.target, "current")
        weekly = weekly_target(judged, allowed)
        if weekly is not None:
            offer(readable(weekly, first.unit, first.comparison), WEEKLY)
        for rank in CANDIDATE_RANKS if values else ():
            offer(readable(nearest_rank(values, rank / 100), first.unit), f"p{rank}")
    candidates = tuple(
        Candidate(target, count(target), why) for target, why in sorted(offered.values())
    )
    shares = None
    if any(r.evidence.at_or_above_target is not None for r in judged):
        shares = tuple(
            (r.evidence.at_or_above_target or 0) / r.sample_size
            if r.sample_size and r.evidence.at_or_above_target is not None
            else None
            for r in judged
        )
    return CheckSummary(
        check_id=check_id,
        windows=len(judged),
        breached=sum(r.status is Status.BREACHED for r in judged),
        statuses=statuses,
        low=values[0] if values else None,
        median=statistics.median(values) if values else None,
        p95=nearest_rank(values, 0.95) if values else None,
        high=values[-1] if values else None,
        candidates=candidates,
        target=first.target,
        comparison=first.comparison,
        unit=first.unit,
        at_or_above=shares,
        breached_without_value=sum(r.status is Status.BREACHED and r.value is None for r in judged),
        weekly_allowed=allowed,
    )


def allowed_breaches(judged: timedelta) -> int:
    """Breached windows "at most one a week" allows over windows judged for `judged` in all
    (ok or breached, not the windows without data): one per whole week."""
    return int(judged / WEEK)


def judged_time(reports: Sequence[Report], check_id: str) -> timedelta:
    """How long the windows in which the check gave a verdict (ok or breached) last in all."""
    return sum(
        (r.window.length for r in reports if r.checks[check_id].status in JUDGED), timedelta()
    )


def summarize(
    start: datetime,
    end: datetime,
    reports: Sequence[Report],
    *,
    running: Running | None = None,
    partial: Report | None = None,
) -> Backtest:
    """The backtest of the windows ending in (start, end], from their reports (oldest first);
    the window running at `end` and its partial report are carried, never summarized."""
    check_ids = list(reports[0].checks) if reports else []
    summary = {
        check_id: _summary(
            check_id,
            [r.checks[check_id] for r in reports],
            allowed_breaches(judged_time(reports, check_id)),
        )
        for check_id in check_ids
    }
    return Backtest(start, end, tuple(reports), summary, running, partial)


# --- text ----------------------------------------------------------------------------------


def render_backtest_json(backtest: Backtest) -> str:
    return jsontext.dumps(backtest.to_json(), indent=2, ensure_ascii=False) + "\n"


def _shown(s: CheckSummary, value: float | None) -> str:
    return value_in(s.unit, value)


def render_backtest_text(backtest: Backtest, *, how_to_check: str = "") -> str:
    """Per check: windows, breaches, the value's spread, candidate targets; then the breaches."""
    reports = backtest.reports
    first = reports[0] if reports else None
    breached = backtest.breached_windows
    out = [
        f"memory-watchdog backtest: {plural(len(reports), 'window')} ending in"
        f" ({rfc3339(backtest.start)}, {rfc3339(backtest.end)}]"
        + (f"  source {printable(first.source)}" if first else ""),
    ]
    if first is not None:
        out.append(
            f"each window {format_duration(first.window.length)} long, events read from"
            f" {format_duration(first.window.lookback)} back; {len(breached)} breached or erred"
        )
    out += _running_lines(backtest)
    out += ["", _row("check", "windows", "breached", "min", "median", "p95", "max", "breach at")]
    for s in backtest.summary.values():
        if not s.windows:
            out.append(_row(s.check_id, "disabled", "", "", "", "", "", ""))
            continue
        out.append(
            _row(
                s.check_id,
                str(s.windows),
                str(s.breached),
                _shown(s, s.low),
                _shown(s, s.median),
                _shown(s, s.p95),
                _shown(s, s.high),
                f"{s.comparison.value} {_shown(s, s.target)}",
            )
        )
    valueless = [
        f"{s.check_id} {s.breached_without_value}"
        for s in backtest.summary.values()
        if s.breached_without_value
    ]
    if valueless:
        out.append(
            "Breached with no value (no event at all), left out of min to max: "
            + ", ".join(valueless)
        )
    out += ["", "Candidate targets (windows each would have breached):"]
    for s in backtest.summary.values():
        if not s.candidates:
            continue
        offered = ", ".join(
            f"{s.comparison.value} {_shown(s, c.target)}: {c.breached}"
            + (f" ({c.why})" if c.why in ("current", WEEKLY) else "")
            for c in s.candidates
        )
        out.append(f"  {s.check_id}: {offered}")
        if s.breached_without_value > s.weekly_allowed:
            out.append(
                f"    no target breaches in at most one window a week:"
                f" {plural(s.breached_without_value, 'window')} breached with no value"
                f" (no event at all), {s.weekly_allowed} allowed"
            )
        if s.at_or_above is not None:
            shares = sorted(x for x in s.at_or_above if x is not None)
            if shares:
                out.append(
                    f"    at or above {_shown(s, s.target)} per window: median"
                    f" {percent(statistics.median(shares))}, p95"
                    f" {percent(nearest_rank(shares, 0.95))}, max {percent(shares[-1])}"
                )
    if breached:
        out += ["", "Windows that breached (or could not be judged):"]
        for r in breached:
            bad = [c.id for c in r.ordered() if c.status in (Status.BREACHED, Status.ERROR)]
            out.append(f"  {rfc3339(r.window.end)}  {', '.join(bad)}")
        if how_to_check:
            out.append(f"  one window in full: {how_to_check}")
    return "\n".join(out) + "\n"


def _running_lines(backtest: Backtest) -> list[str]:
    """The window still running at --to: when the daemon judges it, or its partial report."""
    running, partial = backtest.running, backtest.partial
    if running is None:
        return []
    lines = [
        f"Not yet judged: the window {rfc3339(running.start)} to {rfc3339(running.end)} ends"
        f" after --to; the daemon judges it at {rfc3339(running.judged_at)}"
        + (" (--partial judges it so far)" if partial is None else "")
    ]
    if partial is not None:
        bad = [c.id for c in partial.ordered() if c.status in (Status.BREACHED, Status.ERROR)]
        lines.append(
            f"Partial window {rfc3339(partial.window.start)} to {rfc3339(partial.window.end)}"
            f" (judged so far; the window ends at {rfc3339(running.end)}; not in the summary):"
            f" {partial.status.value}" + (f": {', '.join(bad)}" if bad else "")
        )
    return lines


def _row(*cells: str) -> str:
    widths = (28, 8, 9, 10, 10, 10, 10, 0)
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()
