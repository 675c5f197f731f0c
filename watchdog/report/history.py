"""The page's history: each check's recent windows, and what the alert lifecycle made of them.

The history is a plain value (`History`), filled from the run log by `load_history`
(alerts.records keeps one row per evaluation) or, for a store without a run log (the demo),
replayed from the source by `replay_history`, so the page and its charts are testable with known
values. Alert episodes are not judged here: `replay_alerts` folds `alerts.lifecycle.advance`,
the one state machine, over each check's points, episodes from recorded runs only, so an
evaluation the alert pipeline never saw (`check --format html`) is drawn as a value but fires
nothing (docs/operations.md#what-is-on-it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime

from alerts.lifecycle import Alert, Rules, advance
from alerts.records import check_history
from checks.base import CheckResult, Report, Status, Window
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.report.charts import Episode, Point
from watchdog.runner.once import run_once, window_at


@dataclass(frozen=True)
class History:
    """What the run log says about the recent windows: per check its points, oldest first."""

    points: Mapping[str, Sequence[Point]] = field(default_factory=dict)
    windows: int = 42
    note: str = ""  # why there is no history, or that it was replayed

    def with_report(self, report: Report, *, recorded: bool = False) -> History:
        """The history with this report's own evaluation as the newest point (once).

        The point counts as a recorded run when `recorded` says so, or when
        the history already holds this window as one (the daemon's page is
        written after its run was recorded); otherwise it is only a value.
        """
        points: dict[str, list[Point]] = {k: list(v) for k, v in self.points.items()}
        end = report.window.end
        for check_id, result in report.checks.items():
            earlier = points.get(check_id, [])
            known = any(p.window_end == end and p.recorded for p in earlier)
            series = [p for p in earlier if p.window_end != end]
            series.append(Point(end, result.value, result.status, recorded or known))
            series.sort(key=lambda p: p.window_end)
            points[check_id] = series[-self.windows :]
        return replace(self, points=points)

    def holds_run(self, report: Report) -> bool:
        """Whether the report's own window is a recorded run in this history."""
        end = report.window.end
        return any(p.window_end == end and p.recorded for s in self.points.values() for p in s)


@dataclass(frozen=True)
class AlertReplay:
    """What the alert lifecycle made of one check's points."""

    episodes: tuple[Episode, ...] = ()  # from the recorded runs only
    breaching: int = 0  # breached or errored windows in the current streak, the newest included
    breaching_since: datetime | None = None  # the window end of the first of them


def _replay(
    series: Sequence[Point], result: CheckResult, window: Window, rules: Rules
) -> AlertReplay:
    """Advance one check's alert over its points, oldest first (docs/spec.md section 8).

    Each point is applied as `result` with the point's status and value, at
    the point's window end. Two states advance side by side: the alert,
    over recorded runs only (its openings and resolutions are the
    episodes), and a shadow over every point, whose streak is the breach a
    tile reports, the page's own evaluation included.
    """
    alert = shadow = Alert(source="", check_id=result.id)
    episodes: list[Episode] = []
    since: datetime | None = None
    for p in series:
        evaluated = replace(result, status=p.status, value=p.value)
        at = replace(window, at=p.window_end)
        following = advance(shadow, evaluated, at, rules).alert
        if following.streak and not shadow.streak:
            since = p.window_end
        shadow = following
        if not p.recorded:
            continue
        step = advance(alert, evaluated, at, rules).alert
        if alert.firing and not step.firing and alert.fired_at is not None:
            episodes.append(Episode(result.id, alert.fired_at, p.window_end, _no_data(alert)))
        alert = step
    if alert.firing and alert.fired_at is not None:
        episodes.append(Episode(result.id, alert.fired_at, None, _no_data(alert)))
    return AlertReplay(tuple(episodes), shadow.streak, since if shadow.streak else None)


def _no_data(alert: Alert) -> bool:
    return alert.cause == Status.NO_DATA.value


def replay_alerts(history: History, report: Report, rules: Rules) -> dict[str, AlertReplay]:
    """Per check of `report`: its alert episodes and current breach, replayed over `history`.

    The current breach is what a tile's "since ... · N windows" says.
    """
    return {
        check_id: _replay(history.points.get(check_id, ()), result, report.window, rules)
        for check_id, result in report.checks.items()
    }


def episodes(replays: Mapping[str, AlertReplay]) -> list[Episode]:
    """Every replayed episode, oldest first."""
    found = [e for r in replays.values() for e in r.episodes]
    return sorted(found, key=lambda e: (e.fired_at, e.check_id))


def load_history(store: Store, settings: Settings, report: Report) -> History:
    """The last `report.history` windows of every check from the run log of the report's
    window length (other lengths do not share its axis), with this report."""
    windows = settings.report.history
    points: dict[str, list[Point]] = {}
    try:
        for check_id in report.checks:
            series = []
            for cp in check_history(
                store, settings, check_id, windows, length=report.window.length
            ):
                with contextlib.suppress(ValueError):
                    series.append(Point(cp.at, cp.value, Status(cp.status)))
            points[check_id] = series
    except StoreError as exc:
        note = f"the run log could not be read: {exc.problem}"
        return History(windows=windows, note=note).with_report(report)
    note = "" if any(points.values()) else "no earlier run in the run log yet"
    return History(points=points, windows=windows, note=note).with_report(report)


def replay_history(store: Store, settings: Settings, report: Report, windows: int) -> History:
    """The `windows` windows before the report's, each evaluated as a run at its end would have.

    For a store without a run log (the demo): the same numbers a daemon
    running on schedule would have recorded, and this report's window as
    its latest run, so the alerts replayed over them are the daemon's too.
    """
    points: dict[str, list[Point]] = {}
    for k in range(windows, 0, -1):
        at = report.window.at - k * report.window.length
        earlier = run_once(store, settings, window_at(settings, at, report.window.length))
        for check_id, result in earlier.checks.items():
            points.setdefault(check_id, []).append(Point(at, result.value, result.status))
    note = (
        f"History and alerts replayed from the source: {windows} earlier windows and this one,"
        " evaluated and alerted as runs then would have been."
    )
    history = History(points=points, windows=settings.report.history, note=note)
    return history.with_report(report, recorded=True)
