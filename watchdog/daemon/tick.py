"""One tick of the daemon on the store: record crashes, flush the spool, catch up, judge each window.

The part of the daemon that touches the store, run in a child process per
tick (watchdog.daemon.child) or in a test's process; everything crossing is
a plain value (`TickRequest` in, `TickResult` out, each `RunResult` as soon
as it is judged), and a tick whose alert lease another process holds is
standby (docs/architecture.md#why-ticks-run-in-a-child-process,
docs/operations.md#two-watchdogs-on-one-store-the-alert-lease).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Protocol

from alerts.base import Notifier, Timer
from alerts.lease import Lease, LeaseInfo, LeaseLost, holder_name
from alerts.pipeline import process, process_crash, process_store_error, settle_run_alert
from alerts.records import outbox_backlog
from checks.base import Report, Window
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store, open_configured
from watchdog.core.times import Clock, rfc3339
from watchdog.daemon.outcome import RunOutcome
from watchdog.daemon.schedule import CatchUp, Schedule, catch_up
from watchdog.daemon.spool import SpooledRun
from watchdog.daemon.status import last_completed_at, read_status
from watchdog.daemon.telemetry import CheckTiming, Stopwatch
from watchdog.report.files import write_reports
from watchdog.report.history import load_history
from watchdog.runner.backtest import run_windows
from watchdog.runner.once import run_once, window_at

log = logging.getLogger(__name__)

OpenStore = Callable[[Settings], AbstractContextManager[Store]]
Progress = Callable[["RunResult"], None]
STATUS_RUNS = 10  # runs in the status document served by `daemon --http`


class StopFlag(Protocol):
    """Set when the daemon is stopping (a threading or multiprocessing Event)."""

    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Crash:
    """A tick whose process died before it finished, as the daemon saw it."""

    seen_at: datetime  # the wall clock when the daemon saw it
    window: Window  # the window it was judging, or the one due
    problem: str  # how it died, one line

    def alert_window(self) -> Window:
        """The window the `run` alert is judged at: ending when the death was seen."""
        return Window(at=self.seen_at, length=self.window.length, lookback=self.window.lookback)


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
    holder: str = ""  # the daemon's name in the alert lease (default: this process's)
    crashes: tuple[Crash, ...] = ()  # earlier ticks that died, for the `run` alert


@dataclass(frozen=True)
class RunResult:
    """One window's run, for the daemon's telemetry and log."""

    window: Window
    catchup: bool
    status: RunOutcome
    start_ns: int
    end_ns: int
    report: Report | None = None
    timings: Mapping[str, CheckTiming] = field(default_factory=dict)
    problem: str = ""
    summary: str = ""  # the alert pipeline's one line
    delivered: int = 0
    failed: tuple[str, ...] = ()  # delivery errors, one line each
    given_up: tuple[str, ...] = ()  # of those, the messages given up for good (dropped, ...)
    backlog: Mapping[str, int] | None = None  # pending outbox rows per notifier
    firing: tuple[str, ...] = ()  # check ids firing after it (`store` among them, maybe)
    standby: bool = False  # evaluated only: another process holds the alert lease

    @property
    def judged(self) -> bool:
        return self.status != RunOutcome.STORE_ERROR

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


@dataclass(frozen=True)
class StoreDown:
    """The store itself could not be opened or written while judging the window ending `end`."""

    end: datetime
    problem: str


@dataclass(frozen=True)
class TickResult:
    """What a tick did; the daemon turns it into telemetry, log lines and spool updates."""

    last_judged: datetime | None
    log_read: bool
    flushed: int = 0  # spooled error runs written into the run log
    plan: CatchUp | None = None
    runs: tuple[RunResult, ...] = ()
    stopped_before: datetime | None = None  # a stop request left this window and later ones
    store_down: StoreDown | None = None
    status: dict[str, Any] | None = None  # `status --format json`, when asked for
    standby: LeaseInfo | None = None  # another process holds the alert lease
    crashes_recorded: int = 0  # of the request's crashes, written to the store
    run_alert: str = ""  # what recording crashes and resolving the `run` alert said


def aligned_window(settings: Settings, schedule: Schedule, end: datetime) -> Window:
    """The aligned window ending at `end` (its lookback long enough to judge it)."""
    return window_at(settings, end, end - schedule.previous_end(end))


@dataclass(frozen=True)
class Tick:
    """One tick's store and request, with what it reports to and sends through: each step's input."""

    store: Store
    request: TickRequest
    schedule: Schedule
    notifiers: Mapping[str, Notifier]
    clock: Clock
    stop: StopFlag
    timer: Timer | None = None
    progress: Progress | None = None

    @property
    def settings(self) -> Settings:
        return self.request.settings

    def report(self, run: RunResult) -> None:
        """Tell the daemon one window's run, as soon as it is judged."""
        if self.progress is not None:
            self.progress(run)

    def due_window(self) -> Window:
        """The aligned window due at the request's time."""
        schedule = self.schedule
        return aligned_window(self.settings, schedule, schedule.due_end(self.request.now))


def run_tick(
    request: TickRequest,
    *,
    open_store_fn: OpenStore,
    notifiers: Mapping[str, Notifier],
    clock: Clock,
    stop: StopFlag,
    timer: Timer | None = None,
    progress: Progress | None = None,
) -> TickResult:
    """Judge every window due since the last judged one; a StoreError ends the tick as StoreDown.

    `progress` is told each window's run as soon as it is judged.
    """
    settings = request.settings
    schedule = Schedule.from_settings(settings.schedule)
    result = TickResult(last_judged=request.last_judged, log_read=request.log_read)
    try:
        with open_store_fn(settings) as store:
            tick = Tick(store, request, schedule, notifiers, clock, stop, timer, progress)
            lease = Lease(store, settings, request.holder or holder_name("daemon"))
            try:
                holder = lease.acquire()
                result = _hold(tick, lease) if holder is None else _stand_by(tick, holder)
            except LeaseLost as lost:
                result = _lost(tick, lost)
            finally:
                lease.release()
    except StoreError as exc:
        if result.store_down is None:
            down = StoreDown(schedule.due_end(request.now), exc.problem)
            result = replace(result, store_down=down)
    return result


def _hold(tick: Tick, lease: Lease) -> TickResult:
    """The tick's work under the alert lease: record earlier crashes, write the spooled error
    runs, judge every window due, settle the `run` alert. A StoreError ends it early, as a
    StoreDown of the window being judged (LeaseLost goes to the caller)."""
    request, settings = tick.request, tick.settings
    last_judged, log_read = request.last_judged, request.log_read
    crashes_recorded = flushed = 0
    plan: CatchUp | None = None
    stopped_before = attempting = None
    status: dict[str, Any] | None = None
    runs: list[RunResult] = []
    said: list[str] = []

    def result(store_down: StoreDown | None = None) -> TickResult:
        return TickResult(
            last_judged=last_judged,
            log_read=log_read,
            flushed=flushed,
            plan=plan,
            runs=tuple(runs),
            stopped_before=stopped_before,
            store_down=store_down,
            status=status,
            crashes_recorded=crashes_recorded,
            run_alert="; ".join(line for line in said if line),
        )

    try:
        said = [_record_crash(tick, crash, lease) for crash in request.crashes]
        crashes_recorded = len(said)
        flushed = _flush_spooled(tick, lease)
        if not log_read:
            last_judged, log_read = last_completed_at(tick.store, settings, request.now), True
        plan = catch_up(tick.schedule, last_judged, request.now, settings.schedule.max_catchup)
        windows = [aligned_window(settings, tick.schedule, end) for end in plan.ends]
        passed = in_one_pass(tick, windows)  # a catch-up's windows: evaluated together
        finished = True
        for index, end in enumerate(plan.ends):
            if tick.stop.is_set():
                stopped_before, finished = end, False
                break
            attempting = end
            window = windows[index]
            catchup = index < len(plan.ends) - 1
            run = judge(tick, window, catchup=catchup, guard=lease.ensure, report=passed.get(end))
            runs.append(run)
            tick.report(run)
            if not run.judged:
                finished = False
                break
            last_judged = end
        if finished:
            said.append(_settle_run_alert(tick, lease))
        status = _status(tick)
    except StoreError as exc:
        return result(StoreDown(attempting or tick.schedule.due_end(request.now), exc.problem))
    return result()


def _record_crash(tick: Tick, crash: Crash, lease: Lease) -> str:
    """The `run` alert for one earlier tick that died; its summary line."""
    outcome = process_crash(
        tick.store,
        tick.settings,
        crash.alert_window(),
        crash.problem,
        now=tick.clock(),
        notifiers=tick.notifiers,
        timer=tick.timer,
        guard=lease.ensure,
    )
    return outcome.summary()


def _flush_spooled(tick: Tick, lease: Lease) -> int:
    """Write the error runs spooled while the store was down into the run log; how many."""
    request, settings = tick.request, tick.settings
    untold = {n: x for n, x in tick.notifiers.items() if n not in request.told}
    for spooled in request.spooled:
        process_store_error(
            tick.store,
            settings,
            spooled.window(settings.window.lookback),
            spooled.problem,
            now=tick.clock(),
            notifiers=untold,
            duration_s=spooled.duration_s,
            timer=tick.timer,
            guard=lease.ensure,
        )
    return len(request.spooled)


def _settle_run_alert(tick: Tick, lease: Lease) -> str:
    """Resolve the `run` alert once every due window is judged; its summary line, or ''."""
    now = tick.clock()
    window = tick.due_window()
    settled = settle_run_alert(
        tick.store,
        tick.settings,
        Window(at=now, length=window.length, lookback=window.lookback),
        now=now,
        notifiers=tick.notifiers,
        timer=tick.timer,
        guard=lease.ensure,
    )
    return settled.summary() if settled is not None else ""


def _stand_by(tick: Tick, holder: LeaseInfo) -> TickResult:
    """Another process holds the alert lease: evaluate the window due now, record nothing.

    Where judging stands is what the holder recorded (the run log); the next tick that
    holds the lease reads it again.
    """
    stepped = _step_aside(tick, holder)
    window = tick.due_window()
    start_ns = time.time_ns()
    stopwatch = Stopwatch()
    report: Report | None = None
    try:
        report = run_once(tick.store, tick.settings, window, timed=stopwatch)
    except StoreError as exc:  # the holder records and alerts it; this one only says it
        outcome, problem = RunOutcome.STORE_ERROR, exc.problem
    else:
        outcome, problem = RunOutcome.of(report.status), ""
        if tick.request.pages:
            write_page(tick.store, tick.settings, report, tick.clock())
    run = RunResult(
        window=window,
        catchup=False,
        status=outcome,
        start_ns=start_ns,
        end_ns=time.time_ns(),
        report=report,
        timings=dict(stopwatch.timings),
        problem=problem,
        summary=f"standby: {holder.describe()}; this run records and sends nothing",
        standby=True,
    )
    tick.report(run)
    return replace(stepped, runs=(run,), status=_status(tick))


def _lost(tick: Tick, lost: LeaseLost) -> TickResult:
    """The lease passed to another process mid-tick: stop; the holder carries on."""
    return replace(_step_aside(tick, lost.holder), status=_status(tick))


def _step_aside(tick: Tick, holder: LeaseInfo | None) -> TickResult:
    """Another process holds the alert lease: where judging stands is what it records."""
    last = last_completed_at(tick.store, tick.settings, tick.request.now)
    return TickResult(last_judged=last, log_read=False, standby=holder)


def _status(tick: Tick) -> dict[str, Any] | None:
    """The status document the tick hands back, when the request asks for it."""
    if not tick.request.status:
        return None
    return read_status(tick.store, tick.settings, tick.clock(), STATUS_RUNS).to_json()


def in_one_pass(tick: Tick, windows: list[Window]) -> dict[datetime, Report]:
    """A catch-up's windows evaluated in one pass, by window end (watchdog.runner.backtest).

    Each report is the one `run_once` gives for its window alone, so
    judging goes on window by window as before, the alert pipeline on each
    in turn. Empty for a single window, and when the source cannot be read
    (each window then runs alone and meets the error itself).
    """
    if len(windows) < 2:
        return {}
    try:
        reports = run_windows(tick.store, tick.settings, windows, triage=tick.request.pages)
    except StoreError as exc:
        log.warning("the windows of this catch-up are judged one by one: %s", exc.problem)
        return {}
    log.info("one pass evaluated the %d windows of this catch-up", len(reports))
    return {r.window.at: r for r in reports}


def judge(
    tick: Tick,
    window: Window,
    *,
    catchup: bool,
    guard: Callable[[], None] | None = None,
    report: Report | None = None,
) -> RunResult:
    """Evaluate one window (unless its `report` is given) and run the alert pipeline;
    StoreError when the store itself fails.

    LeaseLost (from `guard`) when another process took the alert lease over.
    """
    store, settings, clock, pages = tick.store, tick.settings, tick.clock, tick.request.pages
    start_ns, started = time.time_ns(), time.monotonic()
    stopwatch = Stopwatch()
    try:
        if report is None:
            report = run_once(store, settings, window, timed=stopwatch, triage=pages)
    except StoreError as exc:  # the store answers, the source cannot be read
        report, problem = None, exc.problem
        outcome = process_store_error(
            store,
            settings,
            window,
            problem,
            now=clock(),
            notifiers=tick.notifiers,
            duration_s=time.monotonic() - started,
            timer=tick.timer,
            guard=guard,
        )
        status = RunOutcome.STORE_ERROR
    else:
        problem, status = "", RunOutcome.of(report.status)
        outcome = process(
            store,
            settings,
            report,
            now=clock(),
            notifiers=tick.notifiers,
            duration_s=time.monotonic() - started,
            timer=tick.timer,
            guard=guard,
        )
    backlog: dict[str, int] | None
    try:
        backlog = {b.notifier: b.pending for b in outbox_backlog(store, settings, now=clock())}
    except StoreError as exc:
        log.warning("cannot read the outbox backlog: %s", exc.problem)
        backlog = None
    if pages and report is not None:
        write_page(store, settings, report, clock())
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
        given_up=tuple(outcome.delivery.given_up),
        backlog=backlog,
        firing=outcome.firing,
    )


def write_page(store: Store, settings: Settings, report: Report, now: datetime) -> None:
    """The window's HTML page with triage and history; a failure is logged, never fatal."""
    try:
        write_reports(report, load_history(store, settings, report), settings, now)
    except Exception as exc:  # the page is a view: the run is judged and recorded already
        log.warning("[%s, %s): no HTML page: %s", *bounds(report.window), exc)


def bounds(window: Window) -> tuple[str, str]:
    """The window's start and end, RFC 3339, for log lines."""
    return rfc3339(window.start), rfc3339(window.end)


def open_settings_store(settings: Settings) -> AbstractContextManager[Store]:
    """Open the configured store with its query and lock timeouts."""
    return open_configured(settings.store)
