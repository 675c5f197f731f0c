"""One tick of the daemon on the store: flush the spool, catch up, judge each window.

This is the part of the daemon that touches the store, kept apart so that
it can run in a fresh child process per tick (`watchdog.daemon.child`), or in
the test's own process with an injected store opener and clock. Everything
crossing the process boundary is a plain picklable value: `TickRequest` in,
`TickResult` out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from alerts.base import Notifier, Timer
from alerts.pipeline import process, process_store_error
from alerts.records import outbox_backlog
from checks.base import Report, Window
from checks.triage import with_triage
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store, open_configured
from watchdog.core.times import Clock, rfc3339
from watchdog.daemon.schedule import CatchUp, Schedule, catch_up
from watchdog.daemon.spool import SpooledRun
from watchdog.daemon.status import last_completed_at, read_status
from watchdog.daemon.telemetry import STORE_ERROR, CheckTiming, Stopwatch
from watchdog.report.files import write_reports
from watchdog.report.history import load_history
from watchdog.runner.once import run_once, window_at

log = logging.getLogger(__name__)

OpenStore = Callable[[Settings], AbstractContextManager[Store]]
STATUS_RUNS = 10  # runs in the status document served by `daemon --http`


class StopFlag(Protocol):
    """Set when the daemon is stopping (a threading or multiprocessing Event)."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class TickRequest:
    """What a tick needs from the daemon."""

    settings: Settings
    now: datetime
    last_judged: datetime | None  # end of the last window judged; None: read the run log
    log_read: bool
    spooled: tuple[SpooledRun, ...] = ()
    told: frozenset[str] = frozenset()  # notifiers already told directly that the store was down
    pages: bool = True  # write the HTML page of each judged window (watchdog.report.page)
    status: bool = False  # read `status --format json` at the end (for `daemon --http`)
    debug: bool = False


@dataclass(frozen=True)
class RunResult:
    """One window's run, for the daemon's telemetry and log."""

    window: Window
    catchup: bool
    status: str  # ok | breached | error, or store_error (the source could not be read)
    start_ns: int
    end_ns: int
    report: Report | None = None
    timings: Mapping[str, CheckTiming] = field(default_factory=dict)
    problem: str = ""
    summary: str = ""  # the alert pipeline's one line
    delivered: int = 0
    failed: tuple[str, ...] = ()  # delivery errors, one line each
    backlog: Mapping[str, int] | None = None  # pending outbox rows per notifier
    firing: tuple[str, ...] = ()  # check ids firing after it (`store` among them, maybe)

    @property
    def judged(self) -> bool:
        return self.status != STORE_ERROR

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclass(frozen=True)
class StoreDown:
    """The store itself could not be opened or written while judging the window ending `end`."""

    end: datetime
    problem: str


@dataclass
class TickResult:
    """What a tick did; the daemon turns it into telemetry, log lines and spool updates."""

    last_judged: datetime | None
    log_read: bool
    flushed: int = 0  # spooled error runs written into the run log
    plan: CatchUp | None = None
    runs: list[RunResult] = field(default_factory=list)
    stopped_before: datetime | None = None  # a stop request left this window and later ones
    store_down: StoreDown | None = None
    status: dict[str, Any] | None = None  # `status --format json`, when asked for


def aligned_window(settings: Settings, schedule: Schedule, end: datetime) -> Window:
    """The aligned window ending at `end` (its lookback long enough to judge it)."""
    return window_at(settings, end, end - schedule.previous_end(end))


def run_tick(
    request: TickRequest,
    *,
    open_store_fn: OpenStore,
    notifiers: Mapping[str, Notifier],
    clock: Clock,
    stop: StopFlag,
    timer: Timer | None = None,
) -> TickResult:
    """Judge every window due since the last judged one; a StoreError ends the tick as StoreDown."""
    settings = request.settings
    schedule = Schedule.from_settings(settings.schedule)
    result = TickResult(last_judged=request.last_judged, log_read=request.log_read)
    attempting = schedule.due_end(request.now)
    try:
        with open_store_fn(settings) as store:
            if request.spooled:
                untold = {n: x for n, x in notifiers.items() if n not in request.told}
                for spooled in request.spooled:
                    process_store_error(
                        store,
                        settings,
                        spooled.window(settings.window.lookback),
                        spooled.problem,
                        now=clock(),
                        notifiers=untold,
                        duration_s=spooled.duration_s,
                        timer=timer,
                    )
                result.flushed = len(request.spooled)
            if not result.log_read:
                result.last_judged = last_completed_at(store, settings, request.now)
                result.log_read = True
            plan = catch_up(
                schedule, result.last_judged, request.now, settings.schedule.max_catchup
            )
            result.plan = plan
            for index, end in enumerate(plan.ends):
                if stop.is_set():
                    result.stopped_before = end
                    break
                attempting = end
                window = aligned_window(settings, schedule, end)
                run = _judge(
                    store,
                    settings,
                    window,
                    catchup=index < len(plan.ends) - 1,
                    notifiers=notifiers,
                    clock=clock,
                    timer=timer,
                    pages=request.pages,
                )
                result.runs.append(run)
                if not run.judged:
                    break
                result.last_judged = end
            if request.status:
                result.status = read_status(store, settings, clock(), STATUS_RUNS).to_json()
    except StoreError as exc:
        result.store_down = StoreDown(attempting, exc.problem)
    return result


def _judge(
    store: Store,
    settings: Settings,
    window: Window,
    *,
    catchup: bool,
    notifiers: Mapping[str, Notifier],
    clock: Clock,
    timer: Timer | None,
    pages: bool,
) -> RunResult:
    """Evaluate one window and run the alert pipeline; StoreError when the store itself fails."""
    start_ns, started = time.time_ns(), time.monotonic()
    stopwatch = Stopwatch()
    report: Report | None
    try:
        report = run_once(store, settings, window, timed=stopwatch, triage=pages)
    except StoreError as exc:  # the store answers, the source cannot be read
        report, problem = None, exc.problem
        outcome = process_store_error(
            store,
            settings,
            window,
            problem,
            now=clock(),
            notifiers=notifiers,
            duration_s=time.monotonic() - started,
            timer=timer,
        )
        status = STORE_ERROR
    else:
        problem, status = "", report.status.value
        outcome = process(
            store,
            settings,
            report,
            now=clock(),
            notifiers=notifiers,
            duration_s=time.monotonic() - started,
            timer=timer,
        )
    backlog: dict[str, int] | None
    try:
        backlog = {b.notifier: b.pending for b in outbox_backlog(store, settings, now=clock())}
    except StoreError as exc:
        log.warning("cannot read the outbox backlog: %s", exc.problem)
        backlog = None
    if pages and report is not None:
        _write_page(store, settings, report, clock())
    return RunResult(
        window=window,
        catchup=catchup,
        status=status,
        start_ns=start_ns,
        end_ns=time.time_ns(),
        report=report,
        timings=dict(stopwatch.timings),
        problem=problem,
        summary=outcome.summary(),
        delivered=len(outcome.delivery.delivered),
        failed=tuple(outcome.delivery.errors),
        backlog=backlog,
        firing=outcome.firing,
    )


def _write_page(store: Store, settings: Settings, report: Report, now: datetime) -> None:
    """The window's HTML page with triage and history; a failure is logged, never fatal."""
    try:
        report = with_triage(store, settings, report)
        write_reports(report, load_history(store, settings, report), settings, now)
    except Exception as exc:  # the page is a view: the run is judged and recorded already
        log.warning("[%s, %s): no HTML page: %s", *bounds(report.window), exc)


def bounds(window: Window) -> tuple[str, str]:
    """The window's start and end, RFC 3339, for log lines."""
    return rfc3339(window.start), rfc3339(window.end)


def open_settings_store(settings: Settings) -> AbstractContextManager[Store]:
    """Open the configured store with its query and lock timeouts."""
    return open_configured(settings.store)
