"""Many windows judged in one pass, from settings to Reports: what `backtest` and catch-up run.

Each of the checks' scans reads the period's events once for all the windows
(checks.evaluate), and each window's report is the one `run_once` gives for
that window alone; the daemon's catch-up after downtime evaluates its windows
the same way (watchdog.daemon.tick; docs/performance.md#backtest-one-pass-over-a-period).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from checks.base import Report, Window
from checks.builtin import configured_checks
from checks.evaluate import evaluate_windows
from checks.kinds import session_scopes
from checks.scans.windows import Windows
from checks.sources import open_source
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.runner.once import window_at
from watchdog.runner.slo import with_slos


def windows_ending(settings: Settings, ends: Sequence[datetime]) -> Windows:
    """The windows `check --at <end>` judges, one per end (distinct, oldest first)."""
    return Windows(tuple(window_at(settings, end) for end in sorted(set(ends))))


def run_windows(
    store: Store, settings: Settings, windows: Windows | Sequence[Window], *, triage: bool = False
) -> list[Report]:
    """Evaluate every configured check over each window, oldest first, in one pass.

    Each report is the one `run_once` gives for that window alone; with
    `triage`, each breached check of each window comes with its breakdown.
    """
    if not isinstance(windows, Windows):
        windows = Windows(tuple(windows))
    specs = configured_checks(settings)
    source = open_source(store, settings.source, session_scopes(specs))
    reports = evaluate_windows(
        store,
        source,
        windows,
        specs,
        triage=triage,
        error_classes=settings.report.error_classes,
    )
    return [with_slos(store, settings, report) for report in reports]  # as run_once's
