"""One tick of the daemon on the store: record crashes, flush the spool, catch up, judge each window.

The part of the daemon that touches the store, run in a child process per
tick (watchdog.daemon.child) or in a test's process; everything crossing is
a plain value (`TickRequest` in, `TickResult` out, each `RunResult` as soon
as it is judged), and a tick whose alert lease another process holds is
standby (docs/architecture.md#why-ticks-run-in-a-child-process,
docs/operations.md#two-watchdogs-on-one-store-the-alert-lease). On the
embedded store, which one process at a time may hold, the tick enqueues its
messages with the store held and delivers them once it has closed it,
opening it only for each read and write, so that a slow receiver never keeps
the receiver's loads (or `check`) out
(docs/architecture.md#one-store-one-process-at-a-time-the-receiver).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from alerts.base import Notifier, Timer
from alerts.lease import Lease, LeaseInfo, LeaseLost, holder_name
from alerts.pipeline import (
    ProcessOutcome,
    process,
    process_crash,
    process_store_error,
    settle_run_alert,
)
from checks.base import Report, Window
from watchdog.core.errors import StoreError
from watchdog.core.logs import DEFAULT_LOGS, LogSetup
from watchdog.core.schedule import CatchUp, Schedule, catch_up
from watchdog.core.settings import Settings
from watchdog.core.store import Store, open_configured
from watchdog.core.times import Clock, rfc3339
from watchdog.daemon.burn import Burned, BurnStep, SloBurn, burn
from watchdog.daemon.outcome import RunOutcome
from watchdog.daemon.runs import (
    STATUS_RUNS,
    Access,
    OpenStore,
    Progress,
    Reports,
    RunResult,
    backlog_of,
    claim_closed,
    deliver_closed,
    summary_of,
    waiting,
    with_delivery,
)
from watchdog.daemon.spool import SpooledRun
from watchdog.daemon.status import StoreRead, last_completed_at, read_store
from watchdog.daemon.telemetry import Stopwatch
from watchdog.report.files import write_reports
from watchdog.report.history import load_history
from watchdog.report.slo_page import slo_views
from watchdog.runner.backtest import run_windows
from watchdog.runner.once import run_once, window_at
from watchdog.runner.slo import judge_before_run

log = logging.getLogger(__name__)


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
    logs: LogSetup = DEFAULT_LOGS  # how the tick process logs
    holder: str = ""  # the daemon's name in the alert lease (default: this process's)
    crashes: tuple[Crash, ...] = ()  # earlier ticks that died, for the `run` alert
    burn_only: bool = False  # a burn tick: the SLO step alone, no window (watchdog.daemon.burn)
    started: datetime | None = None  # when the daemon started (the SLO events it counts)
    slo_counted: Mapping[str, datetime] = field(default_factory=dict)  # newest bucket counted


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
    status: StoreRead | None = None  # what `status` reads of the store, when asked for
    standby: LeaseInfo | None = None  # another process holds the alert lease
    crashes_recorded: int = 0  # of the request's crashes, written to the store
    run_alert: str = ""  # what recording crashes and resolving the `run` alert said
    slos: tuple[SloBurn, ...] = ()  # each SLO after the burn step (none: no SLO, or it failed)
    slo_summary: str = ""  # the SLO alerts' pipeline line


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
    reports: Reports = field(default_factory=Reports)

    @property
    def settings(self) -> Settings:
        return self.request.settings

    @property
    def delivers(self) -> bool:
        """Whether the alert pipeline delivers with the store held (else after it is closed)."""
        return not self.reports.hold

    def report(self, run: RunResult, outcome: ProcessOutcome | None = None) -> None:
        """Tell the daemon one window's run, as soon as it is judged (see Reports)."""
        self.reports.run(run, outcome)

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
    store_closed: Callable[[], None] | None = None,
) -> TickResult:
    """Judge every window due since the last judged one; a StoreError ends the tick as StoreDown.

    `progress` is told each window's run as soon as it is judged. On the embedded
    store, what the tick enqueued is delivered once the store is closed: then
    `store_closed` is called, and the last window's run is told with that delivery.
    """
    settings = request.settings
    schedule = Schedule.from_settings(settings.schedule)
    result = TickResult(last_judged=request.last_judged, log_read=request.log_read)
    reports = Reports(progress)
    later = False  # messages wait to be delivered once the store is closed
    try:
        with open_store_fn(settings) as store:
            # A server store stays held while delivering: the alert lease is renewed in it.
            reports.hold = store.url.embedded
            tick = Tick(store, request, schedule, notifiers, clock, stop, timer, reports)
            lease = Lease(store, settings, request.holder or holder_name("daemon"))
            held = False
            try:
                holder = lease.acquire()
                held = holder is None
                result = _hold(tick, lease) if holder is None else _stand_by(tick, holder)
            except LeaseLost as lost:
                held, result = False, _lost(tick, lost)
            finally:
                lease.release()
            later = held and reports.hold and result.store_down is None
            later = later and waiting(store, settings, clock())
            if later:
                claim_closed(lease)  # whoever opens the store while this one delivers stands by
    except StoreError as exc:
        if result.store_down is None:
            down = StoreDown(schedule.due_end(request.now), exc.problem)
            result = replace(result, store_down=down)
    if not later:
        reports.flush()
        return result
    if store_closed is not None:
        store_closed()
    access = Access(open_store_fn, notifiers, clock, timer, lease)
    return _deliver_closed(request, access, reports, result)


def _hold(tick: Tick, lease: Lease) -> TickResult:
    """The tick's work under the alert lease: record earlier crashes, write the spooled error
    runs, judge every window due, settle the `run` alert. A StoreError ends it early, as a
    StoreDown of the window being judged (LeaseLost goes to the caller)."""
    request, settings = tick.request, tick.settings
    last_judged, log_read = request.last_judged, request.log_read
    crashes_recorded = flushed = 0
    plan: CatchUp | None = None
    stopped_before = attempting = None
    status: StoreRead | None = None
    runs: list[RunResult] = []
    said: list[str] = []
    burned: Burned | None = None

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
            slos=burned.slos if burned is not None else (),
            slo_summary=_slo_summary(burned, tick.delivers),
        )

    try:
        said = [_record_crash(tick, crash, lease) for crash in request.crashes]
        crashes_recorded = len(said)
        flushed = _flush_spooled(tick, lease)
        if not log_read:
            last_judged, log_read = last_completed_at(tick.store, settings, request.now), True
        ends: tuple[datetime, ...] = ()
        if not request.burn_only:  # a burn tick judges no window
            plan = catch_up(tick.schedule, last_judged, request.now, settings.schedule.max_catchup)
            ends = plan.ends
        windows = [aligned_window(settings, tick.schedule, end) for end in ends]
        passed = _in_one_pass(tick, windows)  # a catch-up's windows: evaluated together
        finished = True
        for index, end in enumerate(ends):
            if tick.stop.is_set():
                stopped_before, finished = end, False
                break
            attempting = end
            window = windows[index]
            catchup = index < len(ends) - 1
            run, outcome = judge(
                tick, window, catchup=catchup, guard=lease.ensure, report=passed.get(end)
            )
            runs.append(run)
            tick.report(run, outcome)
            if not run.judged:
                finished = False
                break
            last_judged = end
        if finished and not request.burn_only:
            said.append(_settle_run_alert(tick, lease))
        if not tick.stop.is_set():
            burned = _burn(tick, lease)
        status = _status(tick)
    except StoreError as exc:
        return result(StoreDown(attempting or tick.schedule.due_end(request.now), exc.problem))
    return result()


def _burn(tick: Tick, lease: Lease) -> Burned | None:
    """The SLO step (watchdog.daemon.burn): judge the closed buckets, advance the SLO alerts."""
    request = tick.request
    step = BurnStep(
        clock=tick.clock,
        notifiers=tick.notifiers,
        timer=tick.timer,
        guard=lease.ensure,
        deliver=tick.delivers,
        started=request.started,
        counted=request.slo_counted,
    )
    return burn(tick.store, tick.settings, request.now, step)


def _slo_summary(burned: Burned | None, delivered: bool) -> str:
    if burned is None or burned.outcome is None:
        return ""
    return f"SLOs at {rfc3339(burned.at)}: {summary_of(burned.outcome, delivered=delivered)}"


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
        deliver=tick.delivers,
    )
    return summary_of(outcome, delivered=tick.delivers)


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
            deliver=tick.delivers,
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
        deliver=tick.delivers,
    )
    return summary_of(settled, delivered=tick.delivers) if settled is not None else ""


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


def _status(tick: Tick) -> StoreRead | None:
    """What `status` reads of the store, handed back when the request asks for it (/status)."""
    if not tick.request.status:
        return None
    return read_store(tick.store, tick.settings, tick.clock(), STATUS_RUNS)


def _deliver_closed(
    request: TickRequest, access: Access, reports: Reports, result: TickResult
) -> TickResult:
    """The tick's delivery once the store is closed, folded into the last window's run."""
    after = deliver_closed(access, request.settings, status=request.status)
    status = after.status if after.status is not None else result.status
    held = reports.take()
    if held is None:  # no window judged (a tick that recorded a crash): said with the run alert
        delivery = after.delivery
        said = [result.run_alert, f"delivered later: {len(delivery.delivered)} message(s)"]
        said += [f"not delivered: {error}" for error in delivery.errors]
        return replace(result, status=status, run_alert="; ".join(line for line in said if line))
    run, outcome = held
    folded = with_delivery(run, outcome, after.delivery, after.backlog)
    reports.tell(folded)
    runs = tuple(folded if r is run else r for r in result.runs)
    return replace(result, runs=runs, status=status)


def _in_one_pass(tick: Tick, windows: list[Window]) -> dict[datetime, Report]:
    """A catch-up's windows evaluated in one pass, by window end (watchdog.runner.backtest).

    Each report is the one `run_once` gives for its window alone, so the
    daemon judges window by window as before, the alert pipeline on each in
    turn. Empty for a single window, and when the source cannot be read
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
) -> tuple[RunResult, ProcessOutcome]:
    """Evaluate one window (unless its `report` is given) and run the alert pipeline
    (delivering when `tick.delivers`); StoreError when the store itself fails.

    LeaseLost (from `guard`) when another process took the alert lease over.
    """
    store, settings, clock, pages = tick.store, tick.settings, tick.clock, tick.request.pages
    start_ns, started = time.time_ns(), time.monotonic()
    stopwatch = Stopwatch()
    judge_before_run(store, settings, window.at, clock())  # the SLO buckets, first
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
            deliver=tick.delivers,
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
            deliver=tick.delivers,
        )
    backlog = backlog_of(store, settings, clock())
    if pages and report is not None:
        write_page(store, settings, report, clock())
    run = RunResult(
        window=window,
        catchup=catchup,
        status=status,
        start_ns=start_ns,
        end_ns=time.time_ns(),
        report=report,
        timings=dict(stopwatch.timings),
        problem=problem,
        summary=summary_of(outcome, delivered=tick.delivers),
        delivered=len(outcome.delivery.delivered),
        failed=tuple(outcome.delivery.errors),
        given_up=tuple(outcome.delivery.given_up),
        backlog=backlog,
        firing=outcome.firing,
    )
    return run, outcome


def write_page(store: Store, settings: Settings, report: Report, now: datetime) -> None:
    """The window's HTML page with triage and history; a failure is logged, never fatal."""
    try:
        history = load_history(store, settings, report)
        write_reports(report, history, settings, now, slo_views(store, settings, report))
    except Exception as exc:  # the page is a view: the run is judged and recorded already
        log.warning("[%s, %s): no HTML page: %s", *bounds(report.window), exc)


def bounds(window: Window) -> tuple[str, str]:
    """The window's start and end, RFC 3339, for log lines."""
    return rfc3339(window.start), rfc3339(window.end)


def open_settings_store(settings: Settings) -> AbstractContextManager[Store]:
    """Open the configured store with its query and lock timeouts."""
    return open_configured(settings.store)
