"""`memory-watchdog daemon`: judge every aligned window exactly once, unattended, for months.

How a tick goes (the APScheduler job, fired `schedule.delay` after each
aligned window end; see watchdog.schedule):

1. Open the store (per tick, closed after: on the embedded engine another
   process such as `memory-watchdog check` can use it between ticks).
2. Write any spooled error runs into the run log (watchdog.spool).
3. On the first tick, read the run log: the last *completed* run (one that
   read the source) is where judging resumes.
4. Judge every window due since then, oldest first, at most
   `schedule.max_catchup` missed ones plus the one due now (the oldest
   beyond that are skipped, and the log says how many). Each window is one
   run: evaluate, then `alerts.pipeline.process` (alert lifecycle judged at
   the window end, outbox, delivery, run log). The same catch-up runs after
   a restart and after an outage, so a window is never judged twice nor
   skipped silently.

Failures never stop the daemon:

- the source cannot be read (missing table, bad schema), the store answers:
  `alerts.state.record_error_run` records an `error` run and fires the
  `store` alert once through the outbox; judging resumes from that window
  at the next tick;
- the store itself cannot be opened or written (unreachable, or the embedded
  directory locked by another process): the error run goes to the local
  spool, the `store` alert is sent directly through the notifiers (the
  outbox lives in the store), once per outage, remembered in the spool; at
  the next tick that opens the store the spool is flushed into the run log
  and the missed windows are judged;
- chat failures stay in the outbox (alerts.outbox retries them);
- anything else is logged with its traceback and the schedule goes on.

SIGTERM/SIGINT stop the scheduler, let the run in progress finish (bounded
by `--stop-timeout`; a catch-up stops after the current window), flush the
telemetry and exit 0.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

from apscheduler.triggers.base import BaseTrigger

from alerts.base import Deadline, Message, Notifier, Timer
from alerts.lifecycle import STORE_CHECK, Kind, Notification
from alerts.notifiers import build_notifiers
from alerts.outbox import message_id
from alerts.pipeline import ProcessOutcome, process, source_unreadable
from alerts.render import templates
from alerts.state import outbox_backlog, record_error_run, source_name
from checks.base import Severity, Window, rfc3339
from watchdog.config import Settings, format_duration, parse_duration
from watchdog.errors import ConfigError, StoreError, UsageError
from watchdog.runner import Clock, run_once, system_clock, window_at
from watchdog.schedule import CatchUp, Schedule, catch_up
from watchdog.spool import Spool, SpooledRun
from watchdog.status import last_completed_at
from watchdog.store import Store, open_store
from watchdog.telemetry import STORE_ERROR, RunSpan, Stopwatch, Telemetry

log = logging.getLogger(__name__)

DEFAULT_STOP_TIMEOUT = timedelta(seconds=90)
_ONE_US = timedelta(microseconds=1)


class AlignedTrigger(BaseTrigger):  # type: ignore[misc]
    """Fires `schedule.delay` after each aligned window end (APScheduler 3 trigger)."""

    def __init__(self, schedule: Schedule) -> None:
        self.schedule = schedule

    def get_next_fire_time(
        self, previous_fire_time: datetime | None, now: datetime
    ) -> datetime | None:
        """The first fire time after the previous one (or at/after `now` for the first)."""
        delay = self.schedule.delay
        if previous_fire_time is None:
            return self.schedule.next_end(now - delay - _ONE_US) + delay
        return self.schedule.next_end(previous_fire_time - delay) + delay

    def __str__(self) -> str:
        return f"aligned[{self.schedule.describe()}]"


class Daemon:
    """The scheduled watchdog: its collaborators handed in, its state in the store and spool."""

    def __init__(
        self,
        settings: Settings,
        *,
        schedule: Schedule,
        telemetry: Telemetry,
        spool: Spool,
        clock: Clock = system_clock,
        notifiers: Mapping[str, Notifier] | None = None,
        timer: Timer | None = None,
        open_store_fn: Callable[[Settings], Any] | None = None,
    ) -> None:
        self.settings = settings
        self.schedule = schedule
        self.telemetry = telemetry
        self.spool = spool
        self.clock = clock
        self.notifiers = build_notifiers(settings) if notifiers is None else dict(notifiers)
        self.timer = timer
        self.source = source_name(settings)
        self._open = open_store_fn or _open_configured
        self.last_judged: datetime | None = None  # end of the last window judged
        self._log_read = False
        self._store_alert_known = False  # the store holds a firing `store` alert
        self._stop = threading.Event()
        self._busy = threading.Lock()

    # -- one tick -------------------------------------------------------------

    def tick(self) -> None:
        """The scheduled job: judge every window due since the last one judged; never raises."""
        if self._stop.is_set() or not self._busy.acquire(blocking=False):
            return
        try:
            self._tick()
        except Exception:
            log.exception("the run failed unexpectedly; the daemon keeps its schedule")
        finally:
            self._busy.release()

    def _tick(self) -> None:
        now = self.clock()
        attempting = self.schedule.due_end(now)
        try:
            with self._open(self.settings) as store:
                self._flush_spool(store)
                if not self._log_read:
                    self.last_judged = last_completed_at(store, self.settings)
                    self._log_read = True
                plan = catch_up(
                    self.schedule, self.last_judged, now, self.settings.schedule.max_catchup
                )
                self._say_skipped(plan)
                for index, end in enumerate(plan.ends):
                    if self._stop.is_set():
                        log.info("stopping: windows from %s on wait for the next start", end)
                        return
                    attempting = end
                    if not self._judge(store, end, catchup=index < len(plan.ends) - 1):
                        return
        except StoreError as exc:
            self._store_down(self.window(attempting), exc.problem, None)

    def window(self, end: datetime) -> Window:
        """The aligned window ending at `end` (its lookback long enough to judge it)."""
        return window_at(self.settings, end, end - self.schedule.previous_end(end))

    def _say_skipped(self, plan: CatchUp) -> None:
        if not plan.skipped:
            return
        more = "more than " if plan.skipped_capped else ""
        log.warning(
            "catch-up: %s%d missed windows ending %s to %s are not judged"
            " (schedule.max_catchup = %d); judging the newest %d",
            more,
            plan.skipped,
            rfc3339(plan.skipped_from) if plan.skipped_from else "?",
            rfc3339(plan.skipped_to) if plan.skipped_to else "?",
            self.settings.schedule.max_catchup,
            len(plan.ends),
        )
        self.telemetry.record_skipped(plan.skipped)

    def _judge(self, store: Store, end: datetime, *, catchup: bool) -> bool:
        """One run over the window ending at `end`; True when it was judged."""
        window = self.window(end)
        started = time.monotonic()
        with self.telemetry.run(window, catchup=catchup) as span:
            stopwatch = Stopwatch()
            try:
                report = run_once(store, self.settings, window, timed=stopwatch)
            except StoreError as exc:
                return self._source_unreadable(store, window, exc.problem, span, started)
            self.telemetry.record_checks(span, report, stopwatch.timings)
            try:
                outcome = process(
                    store,
                    self.settings,
                    report,
                    now=self.clock(),
                    notifiers=self.notifiers,
                    duration_s=time.monotonic() - started,
                    timer=self.timer,
                )
            except StoreError as exc:
                self._store_down(window, exc.problem, span, started)
                return False
            self.last_judged = end
            self._store_alert_known = False
            self._after(store, outcome)
            status = report.status.value
            duration = time.monotonic() - started
            self.telemetry.finish_run(span, status, duration)
        breached = [r.id for r in report.ordered() if r.status.value in ("breached", "error")]
        log.info(
            "%s [%s, %s): %s%s in %.2fs; %s",
            "caught up" if catchup else "judged",
            rfc3339(window.start),
            rfc3339(window.end),
            status,
            f" ({', '.join(breached)})" if breached else "",
            duration,
            outcome.summary(),
        )
        return True

    def _source_unreadable(
        self, store: Store, window: Window, problem: str, span: RunSpan, started: float
    ) -> bool:
        """The store answers but the source cannot be read: an error run, the `store` alert."""
        log.warning("[%s, %s): could not read the source: %s", *_bounds(window), problem)
        try:
            outcome = record_error_run(
                store,
                self.settings,
                window,
                problem,
                self.clock(),
                notifiers=self.notifiers,
                duration_s=time.monotonic() - started,
                timer=self.timer,
            )
        except StoreError as exc:
            self._store_down(window, exc.problem, span, started)
            return False
        self._store_alert_known = True
        self._after(store, outcome)
        self.telemetry.finish_run(span, STORE_ERROR, time.monotonic() - started)
        return False

    def _after(self, store: Store, outcome: ProcessOutcome) -> None:
        """Notification counts and the outbox backlog, as telemetry."""
        delivery = outcome.delivery
        self.telemetry.record_notifications(len(delivery.delivered), len(delivery.errors))
        for problem in delivery.errors:
            log.warning("notification not delivered (the outbox retries it): %s", problem)
        try:
            backlog = outbox_backlog(store, self.settings, now=self.clock())
        except StoreError as exc:
            log.warning("cannot read the outbox backlog: %s", exc.problem)
            return
        self.telemetry.record_backlog({b.notifier: b.pending for b in backlog})

    # -- the store is down ----------------------------------------------------

    def _store_down(
        self, window: Window, problem: str, span: RunSpan | None, started: float | None = None
    ) -> None:
        """Spool the error run and tell the notifiers directly, once per outage."""
        started = time.monotonic() if started is None else started
        log.warning(
            "[%s, %s): the store cannot be used: %s (spooled; retried at the next tick)",
            *_bounds(window),
            problem,
        )
        self.spool.add(
            SpooledRun(
                at=window.at,
                window_start=window.start,
                problem=problem,
                recorded_at=self.clock(),
                duration_s=time.monotonic() - started,
            )
        )
        if not self._store_alert_known:
            self._announce_store_down(window, problem)
        if span is None:
            with self.telemetry.run(window) as own:
                self.telemetry.finish_run(own, STORE_ERROR, time.monotonic() - started)
        else:
            self.telemetry.finish_run(span, STORE_ERROR, time.monotonic() - started)

    def _announce_store_down(self, window: Window, problem: str) -> None:
        """Send the `store` alert straight to the notifiers not yet told (the outbox is down)."""
        untold = {n: x for n, x in self.notifiers.items() if n not in self.spool.told}
        if not untold:
            return
        notification = Notification(
            kind=Kind.FIRE,
            source=self.source,
            check_id=STORE_CHECK,
            cause="error",
            result=source_unreadable(problem),
            window=window,
            firing_since=window.at,
        )
        try:
            rendered = templates(self.settings.alerts.templates_dir).message([notification])
        except ConfigError as exc:
            log.error("cannot render the store alert: %s", exc)
            return
        told, failed = [], 0
        for name, notifier in untold.items():
            message = Message(
                id=message_id(self.source, window.at, name, "store-down"),
                text=rendered.text,
                blocks=rendered.blocks,
                plain=rendered.plain,
                severity=Severity.CRITICAL,
            )
            try:
                notifier.send(message, Deadline(self.settings.alerts.delivery_timeout, self.timer))
            except Exception as exc:  # a notifier failure never stops the daemon
                failed += 1
                log.warning("%s: store alert not delivered (retried next tick): %s", name, exc)
            else:
                told.append(name)
        self.telemetry.record_notifications(len(told), failed)
        if told:
            self.spool.mark_told(told)

    def _flush_spool(self, store: Store) -> None:
        """Write spooled error runs into the run log; notifiers told directly are not told again."""
        if not self.spool:
            return
        runs, told = self.spool.runs, self.spool.told
        untold = {n: x for n, x in self.notifiers.items() if n not in told}
        for run in runs:
            record_error_run(
                store,
                self.settings,
                run.window(self.settings.window.lookback),
                run.problem,
                self.clock(),
                notifiers=untold,
                duration_s=run.duration_s,
                timer=self.timer,
            )
        dropped = self.spool.state.dropped
        self.spool.clear()
        if runs:
            self._store_alert_known = True
        log.info(
            "the store is back: %d spooled error run(s) written to the run log%s",
            len(runs),
            f" ({dropped} older ones were dropped from the spool)" if dropped else "",
        )

    # -- serving --------------------------------------------------------------

    def stop(self) -> None:
        """Ask the daemon to stop after the window being judged (thread- and signal-safe)."""
        self._stop.set()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the run in progress; True when none is left."""
        if not self._busy.acquire(timeout=max(0.0, timeout)):
            return False
        self._busy.release()
        return True

    def serve(self, stop_timeout: timedelta = DEFAULT_STOP_TIMEOUT) -> int:
        """Run the schedule until SIGTERM/SIGINT; 0 when the last run finished in time."""
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.blocking import BlockingScheduler

        scheduler = BlockingScheduler(
            timezone=UTC, executors={"default": ThreadPoolExecutor(max_workers=1)}
        )
        grace = int(self.settings.schedule.misfire_grace.total_seconds())
        scheduler.add_job(
            self.tick,
            AlignedTrigger(self.schedule),
            id="judge",
            name="judge due windows",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, grace),
            next_run_time=datetime.now(UTC),  # catch up at once
        )

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("%s: finishing the run in progress, then exiting", signal.Signals(signum).name)
            self.stop()
            # Not from inside the handler: shutdown takes locks the interrupted code may hold.
            threading.Thread(target=_shutdown, args=(scheduler,), daemon=True).start()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        log.info(
            "daemon started: %s; source %s; next run %s",
            self.schedule.describe(),
            self.source,
            rfc3339(self.schedule.next_run(self.clock())),
        )
        try:
            if not self._stop.is_set():
                scheduler.start()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        finished = self.wait_idle(stop_timeout.total_seconds())
        if not finished:
            log.error(
                "the run in progress did not finish within %s; exiting without it",
                format_duration(stop_timeout),
            )
        self.telemetry.shutdown()
        logging.shutdown()
        if not finished:
            os._exit(1)  # the worker thread cannot be interrupted; do not wait for it
        return 0


def _shutdown(scheduler: Any) -> None:
    try:
        scheduler.shutdown(wait=False)
    except Exception as exc:  # not running yet, or already stopped
        log.debug("scheduler shutdown: %s", exc)


def _bounds(window: Window) -> tuple[str, str]:
    return rfc3339(window.start), rfc3339(window.end)


@contextmanager
def _open_configured(settings: Settings) -> Iterator[Store]:
    cfg = settings.store
    with open_store(
        cfg.url,
        query_timeout_s=cfg.query_timeout.total_seconds(),
        lock_timeout_s=cfg.lock_timeout.total_seconds(),
    ) as store:
        yield store


# -- the command --------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--stop-timeout",
        default=format_duration(DEFAULT_STOP_TIMEOUT),
        help="on SIGTERM/SIGINT, how long the run in progress may take to finish (default 90s)",
    )


def cmd_daemon(args: argparse.Namespace) -> int:
    """Evaluate on the schedule until stopped; exit 0 on SIGTERM/SIGINT."""
    from watchdog.cli import load

    try:
        stop_timeout = parse_duration(args.stop_timeout)
    except ValueError as exc:
        raise UsageError(f"--stop-timeout: {exc}") from None
    settings = load(args)
    schedule = Schedule.from_settings(settings.schedule)
    logging.getLogger("watchdog").setLevel(logging.DEBUG if args.debug else logging.INFO)
    telemetry = Telemetry.from_environment(os.environ, source=source_name(settings))
    daemon = Daemon(
        settings,
        schedule=schedule,
        telemetry=telemetry,
        spool=Spool.for_settings(settings),
    )
    return daemon.serve(stop_timeout)


def add_daemon(sub: argparse._SubParsersAction[Any]) -> None:
    """Register `memory-watchdog daemon` (the CLI's COMMANDS registry calls this)."""
    from watchdog.cli import _common

    p = sub.add_parser(
        "daemon",
        help="evaluate every aligned window on the schedule, alert, survive outages (SIGTERM stops)",
    )
    _common(p)
    add_arguments(p)
    p.set_defaults(run=cmd_daemon)
