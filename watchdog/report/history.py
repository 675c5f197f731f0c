"""The page's history: each check's recent windows and its alert episodes.

The history is a plain value (`History`), filled from the run log by
`load_history` (alerts.records keeps one row per evaluation), or, for a store
without a run log (the demo), replayed from the source by `replay_history`,
so the page and its charts are testable with known values.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from alerts.records import check_history
from checks.base import Report, Status
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.report.charts import Episode, Point
from watchdog.runner.once import run_once, window_at


@dataclass(frozen=True)
class History:
    """What the run log says about the recent windows: per check its points, and alert spans."""

    points: Mapping[str, Sequence[Point]] = field(default_factory=dict)
    alerts: Sequence[Episode] = ()
    windows: int = 42
    note: str = ""  # why there is no history, when there is none

    def with_report(self, report: Report) -> History:
        """The history with this report's own evaluation as the newest point (once)."""
        points: dict[str, list[Point]] = {k: list(v) for k, v in self.points.items()}
        end = report.window.end
        for check_id, result in report.checks.items():
            series = [p for p in points.get(check_id, []) if p.window_end != end]
            series.append(Point(end, result.value, result.status))
            series.sort(key=lambda p: p.window_end)
            points[check_id] = series[-self.windows :]
        return replace(self, points=points)


def episodes(points: Mapping[str, Sequence[Point]], pending_runs: int = 1) -> list[Episode]:
    """Alert spans replayed from the run log with the lifecycle's rules (docs/spec.md section 8).

    `breached` or `error` for `pending_runs` consecutive evaluations fires;
    `ok` resolves; the other statuses keep the state.
    """
    found: list[Episode] = []
    for check_id, series in points.items():
        streak, fired_at = 0, None
        for p in series:
            if p.status in (Status.BREACHED, Status.ERROR):
                streak += 1
                if fired_at is None and streak >= pending_runs:
                    fired_at = p.window_end
            elif p.status is Status.OK:
                streak = 0
                if fired_at is not None:
                    found.append(Episode(check_id, fired_at, p.window_end))
                    fired_at = None
        if fired_at is not None:
            found.append(Episode(check_id, fired_at, None))
    return sorted(found, key=lambda e: (e.fired_at, e.check_id))


def load_history(store: Store, settings: Settings, report: Report) -> History:
    """The last `report.history` windows of every check from the run log, with this report."""
    windows = settings.report.history
    points: dict[str, list[Point]] = {}
    try:
        for check_id in report.checks:
            series = []
            for cp in check_history(store, settings, check_id, windows):
                with contextlib.suppress(ValueError):
                    series.append(Point(cp.at, cp.value, Status(cp.status)))
            points[check_id] = series
    except StoreError as exc:
        note = f"the run log could not be read: {exc.problem}"
        return History(windows=windows, note=note).with_report(report)
    note = "" if any(points.values()) else "no earlier run in the run log yet"
    history = History(points=points, windows=windows, note=note).with_report(report)
    return replace(history, alerts=episodes(history.points, settings.alerts.pending_runs))


def replay_history(store: Store, settings: Settings, report: Report, windows: int) -> History:
    """The `windows` windows before the report's, each evaluated as a run at its end would have.

    For a store without a run log (the demo): the same numbers a daemon
    running on schedule would have recorded.
    """
    points: dict[str, list[Point]] = {}
    for k in range(windows, 0, -1):
        at = report.window.at - k * report.window.length
        earlier = run_once(store, settings, window_at(settings, at, report.window.length))
        for check_id, result in earlier.checks.items():
            points.setdefault(check_id, []).append(Point(at, result.value, result.status))
    note = f"History replayed from the source: {windows} earlier windows, evaluated as runs then would have."
    history = History(points=points, windows=settings.report.history, note=note)
    history = history.with_report(report)
    return replace(history, alerts=episodes(history.points, settings.alerts.pending_runs))
