"""Many windows judged in one pass, from settings to Reports: what `backtest` and catch-up run.

Each of the checks' scans reads the period's events once for all the windows
(checks.evaluate), and each window's report is the one `run_once` gives for
that window alone; the daemon's catch-up after downtime evaluates its windows
the same way (docs/performance.md#backtest-one-pass-over-a-period).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from checks.base import Report, Window
from checks.builtin import configured_checks
from checks.evaluate import evaluate_windows
from checks.kinds import session_scopes
from checks.scans.windows import Windows
from checks.sources import open_source
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.runner.once import window_at
from watchdog.runner.slo import with_slos

log = logging.getLogger(__name__)


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


def catch_up_reports(
    store: Store, settings: Settings, windows: Sequence[Window], *, triage: bool
) -> dict[datetime, Report]:
    """The daemon's catch-up: its windows evaluated in one pass, by window end.

    Each report is the one `run_once` gives for its window alone, so the
    daemon judges window by window as before, the alert pipeline on each in
    turn. Empty for a single window, and when the source cannot be read
    (each window then runs alone and meets the error itself).
    """
    if len(windows) < 2:
        return {}
    try:
        reports = run_windows(store, settings, windows, triage=triage)
    except StoreError as exc:
        log.warning("the windows of this catch-up are judged one by one: %s", exc.problem)
        return {}
    log.info("one pass evaluated the %d windows of this catch-up", len(reports))
    return {r.window.at: r for r in reports}
