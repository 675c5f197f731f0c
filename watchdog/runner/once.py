"""One evaluation, from settings to Report: thin, with its collaborators handed in.

Steps 2 and 3 of docs/architecture.md#one-evaluation-end-to-end: open the store, build the
checks, compile the source, evaluate.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from checks.base import Report, Window
from checks.builtin import configured_checks
from checks.evaluate import QueryTimer, evaluate
from checks.kinds import session_scopes
from checks.sources import open_source
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings
from watchdog.core.store import Store, open_configured
from watchdog.runner.slo import judge_before_run, with_slos


def window_at(settings: Settings, at: datetime, length: timedelta | None = None) -> Window:
    """The evaluation window ending at `at`, one schedule period long unless `length` says.

    A window longer than the lookback allows for (`--window 24h`) reads further back
    too, so that every obligation due in it can still be judged.
    """
    length = length or Schedule.from_settings(settings.schedule).length_before(at)
    return Window(at=at.astimezone(UTC), length=length, lookback=settings.window.reach(length))


def run_once(
    store: Store,
    settings: Settings,
    window: Window,
    *,
    timed: QueryTimer | None = None,
    triage: bool = False,
) -> Report:
    """Evaluate every configured check over `window` on the store's source; the SLOs at its
    time come from the ledger (watchdog.runner.slo).

    The source is compiled once, with the checks' own session filters. With
    `triage`, every breached check comes with its triage breakdown.
    """
    specs = configured_checks(settings)
    source = open_source(store, settings.source, session_scopes(specs))
    report = evaluate(
        store,
        source,
        window,
        specs,
        timed=timed,
        triage=triage,
        error_classes=settings.report.error_classes,
    )
    return with_slos(store, settings, report)


def evaluate_once(
    settings: Settings,
    at: datetime,
    length: timedelta | None,
    *,
    triage: bool = False,
    recording: datetime | None = None,
    store: Store | None = None,
) -> Report:
    """Open the store, evaluate one window (with its triage breakdown if asked), close it; on
    `store`, when the caller has it open already.

    `recording` (the wall clock of a recording run, `check --notify`): first judge the SLO
    buckets not judged yet (watchdog.runner.slo.judge_before_run).
    """
    if store is None:
        with open_configured(settings.store) as opened:
            return evaluate_once(
                settings, at, length, triage=triage, recording=recording, store=opened
            )
    if recording is not None:
        judge_before_run(store, settings, at, recording)
    return run_once(store, settings, window_at(settings, at, length), triage=triage)
