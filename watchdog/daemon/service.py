"""`memory-watchdog daemon`: judge every aligned window exactly once, unattended, for months.

How a tick goes (the APScheduler job, fired `schedule.delay` after each
aligned window end; see watchdog.daemon.schedule). Its store work (watchdog.daemon.tick)
runs in a fresh child process, so the embedded engine, which leaks threads
when a store is reopened in one process, never lives in the daemon itself:

1. Open the store (per tick, closed after: on the embedded engine another
   process such as `memory-watchdog check` can use it between ticks).
2. Write any spooled error runs into the run log (watchdog.daemon.spool).
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
  `alerts.pipeline.process_store_error` records an `error` run and fires the
  `store` alert once through the outbox; judging resumes from that window
  at the next tick;
- the store itself cannot be opened or written (unreachable, or the embedded
  directory locked by another process): the error run goes to the local
  spool, the `store` alert is sent directly through the notifiers (the
  outbox lives in the store), once per outage, remembered in the spool; at
  the next tick that opens the store the spool is flushed into the run log
  (never over a window that was judged) and the missed windows are judged;
- the tick's process dies (killed, out of memory): that is no store
  problem. The windows it finished keep their verdicts (it reports each as
  it is judged); a new tick starts at once (once: if it dies too, the next
  one is the scheduled one), records the crash as the `run` alert through
  the outbox, judges the windows left, and resolves the alert when it
  finishes;
- chat failures stay in the outbox (alerts.outbox retries them);
- anything else is logged with its traceback and the schedule goes on.

Two watchdogs on one store (an HA pair, or a cron `check --notify` beside
the daemon) take turns through the alert lease (alerts.lease): a tick whose
lease another process holds is standby, evaluates the window due now for
its page and says so in the log, and judging resumes from the run log when
it holds the lease again.

SIGTERM/SIGINT stop the scheduler and let the run in progress finish
(the tick's process ignores both; a catch-up stops after the current
window), bounded by `--stop-timeout`; then the telemetry is flushed and the
daemon exits 0. A tick still going at the timeout is killed (its windows are
judged at the next start) and the exit code is 1.

Under systemd (`Type=notify`, watchdog.daemon.systemd) it says READY once
the scheduler runs, pings the watchdog while `healthy()`, reports a STATUS
line after each tick, and says STOPPING on SIGTERM/SIGINT. With `--http`,
`/metrics` serves what each tick reported (watchdog.daemon.metrics).

SIGHUP reloads the config, as Prometheus and Alertmanager do (`reload`): the
file and the environment are loaded and validated again by the loader the
CLI hands in; an invalid config is logged in one line and the running one
stays. A valid one is taken by the next run (a run in progress finishes with
the settings it started with; the tick's process ignores SIGHUP), and a new
schedule takes effect at once. The store and the source are where the run
log, the alert states and the catch-up point live: changing them needs a
restart, and a reload keeps the running ones and says so.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any

from apscheduler.events import EVENT_SCHEDULER_STARTED
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.blocking import BlockingScheduler

from alerts.base import Notifier, Timer
from alerts.lease import holder_name
from alerts.lifecycle import STORE_CHECK
from alerts.notifiers import build_notifiers
from checks.base import Status, Window
from watchdog.core.durations import format_duration
from watchdog.core.settings import Settings
from watchdog.core.times import Clock, rfc3339, system_clock
from watchdog.daemon import web
from watchdog.daemon.child import TICK_TIMEOUT, ChildCrashed, ChildTicks
from watchdog.daemon.metrics import Metrics
from watchdog.daemon.outage import announce_store_down
from watchdog.daemon.outcome import RunOutcome
from watchdog.daemon.reload import Loader, Reloads
from watchdog.daemon.schedule import CatchUp, Schedule
from watchdog.daemon.spool import Spool, SpooledRun
from watchdog.daemon.systemd import Keepalive, Notify
from watchdog.daemon.telemetry import Telemetry
from watchdog.daemon.tick import (
    Crash,
    OpenStore,
    RunResult,
    TickRequest,
    TickResult,
    aligned_window,
    bounds,
    open_settings_store,
    run_tick,
)
from watchdog.daemon.trigger import AlignedTrigger, misfire_grace, shutdown_scheduler
from watchdog.report.files import report_dir

log = logging.getLogger(__name__)

DEFAULT_STOP_TIMEOUT = timedelta(seconds=90)
# How long past its timeout a tick may still take (the child's kill, the result's way back).
STUCK_MARGIN = timedelta(minutes=5)
JOB_ID = "judge"
MAX_CRASHES = 10  # crashes kept for the `run` alert until a tick records them (the newest)


class Daemon:
    """The scheduled watchdog: its collaborators handed in, its state in the store and spool.

    With `ticks` (a `ChildTicks`), each tick's store work runs in a fresh
    child process (what `memory-watchdog daemon` does); without, in this
    process with `open_store_fn` (tests hand in the shared test store).
    `reload` loads the config again for SIGHUP (without it, SIGHUP says so
    and changes nothing).
    """

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
        open_store_fn: OpenStore = open_settings_store,
        ticks: ChildTicks | None = None,
        pages: bool = True,
        http: str | None = None,
        debug: bool = False,
        metrics: Metrics | None = None,
        systemd: Notify | None = None,
        reload: Loader | None = None,
        receiver: web.ReceiverState | None = None,
    ) -> None:
        self.settings = settings
        self.schedule = schedule
        self.telemetry = telemetry
        self.spool = spool
        self.clock = clock
        self.notifiers = build_notifiers(settings) if notifiers is None else dict(notifiers)
        self.timer = timer
        self.source = settings.source.display_name
        self.metrics = metrics or Metrics(source=self.source, receivers=self.notifiers)
        self._open = open_store_fn
        self._ticks = ticks
        self._pages = pages
        self._http = http
        self._receiver = receiver  # the OTLP receiver's spool state, when it runs beside
        self._debug = debug
        self._status: dict[str, Any] | None = None  # the latest `status` document (--http)
        self.last_judged: datetime | None = None  # end of the last window judged
        self._log_read = False
        self._store_alert_known = False  # the store holds a firing `store` alert
        self.holder = holder_name("daemon")  # this daemon in the alert lease, for all its ticks
        self._crashes: list[Crash] = []  # ticks that died, not yet recorded in the store
        self.standby: str | None = None  # who held the alert lease at the last tick, if not us
        self._stop = threading.Event()
        self._busy = threading.Lock()
        self.systemd = systemd or Notify()
        own = notifiers is None  # rebuilt from a reloaded config
        self._reloads = Reloads(reload, own_notifiers=own) if reload is not None else None
        self._scheduler: Any = None  # set by `serve`: a new schedule reschedules its job
        self.tick_started: float | None = None  # time.monotonic() when the tick in progress began
        self.tick_statuses: list[
            RunOutcome
        ] = []  # the status of each window the latest tick judged
        timeout = ticks.timeout if ticks is not None else TICK_TIMEOUT
        self.stuck_after = timeout + STUCK_MARGIN  # a tick going longer is stuck: not healthy

    # -- one tick -------------------------------------------------------------

    def tick(self) -> None:
        """The scheduled job: judge every window due since the last one judged; never raises."""
        if self._stop.is_set() or not self._busy.acquire(blocking=False):
            return
        self.tick_started = time.monotonic()
        try:
            self._take_reloaded()
            if not self._tick() and not self._stop.is_set():
                log.info("starting a new run at once to judge what the one that died left")
                self._tick()  # once: if it dies too, the scheduled run is the next try
        except Exception:
            log.exception("the run failed unexpectedly; the daemon keeps its schedule")
        finally:
            self.tick_started = None
            self._busy.release()
        self.systemd.status(self.status_line())

    def healthy(self, now: float | None = None) -> bool:
        """Whether the systemd watchdog may be pinged: scheduling, and no tick stuck.

        Stuck: a tick going for longer than its timeout plus a margin (the
        child's own kill should have ended it by then). While stopping, the
        run in progress may finish: healthy as long as it is not stuck.
        """
        started = self.tick_started
        moment = time.monotonic() if now is None else now
        if started is not None and moment - started > self.stuck_after.total_seconds():
            return False
        if self._stop.is_set():
            return True
        return self._scheduler is not None and bool(self._scheduler.running)

    def status_line(self) -> str:
        """One line for systemd's STATUS= (shown by `systemctl status`)."""
        judged = (
            f"last window judged ends {rfc3339(self.last_judged)}"
            if self.last_judged is not None
            else "no window judged yet"
        )
        spooled = len(self.spool.runs)
        down = f"; store unusable, {spooled} error run(s) spooled" if spooled else ""
        return f"{judged}{down}; next run {rfc3339(self.schedule.next_run(self.clock()))}"

    def once(self) -> int:
        """One tick in this process, then return (`daemon --once`): its exit code.

        0 when every window it judged was ok, 1 when one breached, a check
        could not run or the tick's process died, 3 when the store could not be read.
        """
        self.tick()
        if RunOutcome.STORE_ERROR in self.tick_statuses or self.spool.runs:
            return 3
        return 0 if all(s == RunOutcome.OK for s in self.tick_statuses) else 1

    def _tick(self) -> bool:
        """One run; False when its process died (what it left is for the next run)."""
        now = self.clock()
        self.tick_statuses = []
        request = TickRequest(
            settings=self.settings,
            now=now,
            last_judged=self.last_judged,
            log_read=self._log_read,
            spooled=tuple(self.spool.runs),
            told=self.spool.told,
            pages=self._pages,
            status=self._http is not None,
            debug=self._debug,
            holder=self.holder,
            crashes=tuple(self._crashes),
        )
        started_ns = time.time_ns()
        try:
            if self._ticks is not None:
                result = self._ticks.run(request, progress=self._took)
            else:
                result = run_tick(
                    request,
                    open_store_fn=self._open,
                    notifiers=self.notifiers,
                    clock=self.clock,
                    stop=self._stop,
                    timer=self.timer,
                    progress=self._took,
                )
        except ChildCrashed as exc:
            if self._stop.is_set():  # killed at the stop timeout: not an outage
                log.warning("the run was stopped unfinished: %s", exc)
                return True
            self.tick_statuses.append(RunOutcome.CRASHED)
            self._crashed(exc, now)
            return False
        self._take(result, started_ns)
        return True

    def _crashed(self, crash: ChildCrashed, now: datetime) -> None:
        """A tick's process died: keep the windows it judged, remember the crash for the
        `run` alert (the next tick records it); the store is not at fault."""
        judged = [run.window.end for run in crash.runs if run.judged and not run.standby]
        if judged:
            self.last_judged, self._log_read = max(judged), True
        due = self.schedule.due_end(now)
        end = self.schedule.next_end(self.last_judged) if self.last_judged else due
        window = aligned_window(self.settings, self.schedule, min(end, due))
        start, stop = bounds(window)
        problem = f"{crash.problem}, while judging [{start}, {stop})"
        self._crashes = [*self._crashes, Crash(self.clock(), window, problem)][-MAX_CRASHES:]
        log.warning(
            "%s; the store was not at fault: the next run judges the windows left and"
            " raises the `run` alert",
            problem,
        )
        self.metrics.record_crash()

    def _take(self, result: TickResult, started_ns: int) -> None:
        """Turn a tick's result into spool updates, telemetry and log lines."""
        if result.flushed:
            dropped = self.spool.state.dropped
            self.spool.clear()
            self._store_alert_known = True
            log.info(
                "the store is back: %d spooled error run(s) written to the run log%s",
                result.flushed,
                f" ({dropped} older ones were dropped from the spool)" if dropped else "",
            )
        self.last_judged, self._log_read = result.last_judged, result.log_read
        self._crashes = self._crashes[result.crashes_recorded :]
        if result.run_alert:
            log.info("run alert: %s", result.run_alert)
        self._say_standby(result)
        if result.status is not None:
            self._status = result.status
        if result.plan is not None:
            self._say_skipped(result.plan)
        if result.stopped_before is not None:
            log.info(
                "stopping: windows from %s on wait for the next start",
                rfc3339(result.stopped_before),
            )
        if result.store_down is not None:
            window = aligned_window(self.settings, self.schedule, result.store_down.end)
            self.tick_statuses.append(RunOutcome.STORE_ERROR)
            self._store_down(window, result.store_down.problem, started_ns)
        self.metrics.record_tick(self.last_judged, len(self.spool.runs))

    def _say_standby(self, result: TickResult) -> None:
        """Log when this daemon stands by, and when it holds the alert lease again."""
        if result.standby is not None:
            holder = result.standby.describe()
            if holder != self.standby:
                log.info("standby: %s; this daemon evaluates and records and sends nothing", holder)
            self.standby = holder
        elif self.standby is not None:
            log.info("this daemon holds the alert lease of %s again", self.source)
            self.standby = None

    def _took(self, run: RunResult) -> None:
        """One window's run, as soon as the tick reports it: telemetry, metrics, a log line."""
        self.tick_statuses.append(run.status)
        if run.standby:
            log.info(
                "standby: evaluated [%s, %s): %s; %s", *bounds(run.window), run.status, run.summary
            )
            return
        if self.standby is not None:  # said with its first window, not at the end of the tick
            log.info("this daemon holds the alert lease of %s again", self.source)
            self.standby = None
        self.telemetry.record_run(
            run.window,
            status=run.status,
            start_ns=run.start_ns,
            end_ns=run.end_ns,
            catchup=run.catchup,
            report=run.report,
            timings=run.timings,
        )
        self.telemetry.record_notifications(run.delivered, len(run.failed))
        if run.backlog is not None:
            self.telemetry.record_backlog(run.backlog)
        self.metrics.record_run(run)
        for problem in run.failed:
            if problem in run.given_up:
                log.error("notification given up: %s", problem)
            else:
                log.warning("notification not delivered (the outbox retries it): %s", problem)
        self._store_alert_known = STORE_CHECK in run.firing
        start, end = bounds(run.window)
        if not run.judged:
            log.warning("[%s, %s): could not read the source: %s", start, end, run.problem)
            return
        report = run.report
        breached = (
            []
            if report is None
            else [r.id for r in report.ordered() if r.status in (Status.BREACHED, Status.ERROR)]
        )
        log.info(
            "%s [%s, %s): %s%s in %.2fs; %s",
            "caught up" if run.catchup else "judged",
            start,
            end,
            run.status,
            f" ({', '.join(breached)})" if breached else "",
            run.duration_s,
            run.summary,
        )

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
        self.metrics.record_skipped(plan.skipped)

    # -- the store is down ----------------------------------------------------

    def _store_down(self, window: Window, problem: str, started_ns: int) -> None:
        """Spool the error run and tell the notifiers directly, once per outage."""
        log.warning(
            "[%s, %s): the store cannot be used: %s (spooled; retried at the next tick)",
            *bounds(window),
            problem,
        )
        end_ns = time.time_ns()
        self.spool.add(
            SpooledRun(
                at=window.at,
                window_start=window.start,
                problem=problem,
                recorded_at=self.clock(),
                duration_s=(end_ns - started_ns) / 1e9,
            )
        )
        if not self._store_alert_known:
            self._announce_store_down(window, problem)
        self.telemetry.record_run(
            window, status=RunOutcome.STORE_ERROR, start_ns=started_ns, end_ns=end_ns
        )
        self.metrics.record_store_down(end_ns, (end_ns - started_ns) / 1e9, len(self.spool.runs))

    def _announce_store_down(self, window: Window, problem: str) -> None:
        """Send the `store` alert straight to the notifiers not yet told (the outbox is down)."""
        untold = {n: x for n, x in self.notifiers.items() if n not in self.spool.told}
        if not untold:
            return
        told, failed = announce_store_down(
            self.settings, untold, window, problem, now=self.clock(), timer=self.timer
        )
        self.telemetry.record_notifications(len(told), failed)
        self.metrics.record_delivery(len(told), failed)
        if told:
            self.spool.mark_told(told)

    # -- SIGHUP: reload the config ----------------------------------------------

    def reload(self) -> bool:
        """Load the config again (SIGHUP); the next run takes a valid one. True when valid.

        Invalid: one error line, and the running config stays. The store and the
        source stay as they are (a restart changes them), with a warning naming them.
        """
        if self._reloads is None:
            log.warning("SIGHUP: this daemon has no config to reload; nothing changed")
            return False
        self.systemd.reloading()  # systemd's reload protocol: RELOADING=1, then READY=1
        try:
            pending = self._reloads.load(self.settings)
            if pending is None:
                return False
            if pending.reschedule:
                self._reschedule(pending.schedule, pending.settings)
            if self._busy.acquire(blocking=False):  # no run in progress: take it now
                try:
                    self._take_reloaded()
                finally:
                    self._busy.release()
            return True
        finally:
            self.systemd.ready(self.status_line())

    def _take_reloaded(self) -> None:
        """Take a reloaded config (the caller holds `_busy`: no run is in progress)."""
        pending = self._reloads.take() if self._reloads is not None else None
        if pending is None:
            return
        self.settings, self.schedule = pending.settings, pending.schedule
        if pending.notifiers is not None:
            self.notifiers = dict(pending.notifiers)

    def _reschedule(self, schedule: Schedule, settings: Settings) -> None:
        """Fire the job on the new schedule from now on (when the scheduler runs)."""
        scheduler = self._scheduler
        if scheduler is None:
            return
        try:
            scheduler.reschedule_job(JOB_ID, trigger=AlignedTrigger(schedule))
            scheduler.modify_job(JOB_ID, misfire_grace_time=misfire_grace(settings))
        except Exception as exc:  # stopping: the job is gone already
            log.debug("reschedule: %s", exc)
            return
        log.info(
            "schedule now %s; next run %s",
            schedule.describe(),
            rfc3339(schedule.next_run(self.clock())),
        )

    # -- serving --------------------------------------------------------------

    def serve_http(self) -> web.BoundedHTTPServer | None:
        """Start `--http` (pages, /healthz, /status) in a thread; None when not asked for.

        `serve` calls it; stop the server it returns with `shutdown()` then `server_close()`.
        """
        if self._http is None:
            return None
        handler = web.make_handler(
            report_dir(self.settings),
            status=self.status_document,
            last_run_age=self.last_run_age,
            period=self.period(),
            metrics=self.metrics.exposition,
            receiver=self._receiver,
        )
        server, _ = web.serve(self._http, handler)
        host, port = server.server_address[:2]
        log.info("serving pages, /healthz, /status and /metrics on http://%s:%s/", host, port)
        return server

    def stop(self) -> None:
        """Ask the daemon to stop after the window being judged (thread- and signal-safe)."""
        self._stop.set()
        if self._ticks is not None:
            self._ticks.stop_flag.set()

    def status_document(self) -> dict[str, Any]:
        """`status --format json` as of the latest tick, with the spool as it is now."""
        if self._status is None:
            raise RuntimeError("no run has read the store yet")
        since = self.spool.since
        spool = {"error_runs": len(self.spool.runs), "since": rfc3339(since) if since else None}
        live = {"ingest": dict(self._receiver())} if self._receiver is not None else {}
        return {**self._status, "spool": spool, **live}

    def last_run_age(self) -> timedelta | None:
        """How long ago the last judged window ended."""
        return None if self.last_judged is None else self.clock() - self.last_judged

    def period(self) -> timedelta:
        """The schedule's period (for a cron line: the current one)."""
        end = self.schedule.next_end(self.clock())
        return end - self.schedule.previous_end(end)

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the run in progress; True when none is left."""
        if not self._busy.acquire(timeout=max(0.0, timeout)):
            return False
        self._busy.release()
        return True

    def serve(self, stop_timeout: timedelta = DEFAULT_STOP_TIMEOUT) -> int:
        """Run the schedule until SIGTERM/SIGINT; 0 when the last run finished, 1 when killed."""
        scheduler = BlockingScheduler(
            timezone=UTC, executors={"default": ThreadPoolExecutor(max_workers=1)}
        )
        scheduler.add_job(
            self.tick,
            AlignedTrigger(self.schedule),
            id=JOB_ID,
            name="judge due windows",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=misfire_grace(self.settings),
            next_run_time=datetime.now(UTC),  # catch up at once
        )
        self._scheduler = scheduler

        keepalive = Keepalive(self.systemd, self.healthy)

        def on_started(event: Any) -> None:
            self.systemd.ready(self.status_line())
            keepalive.start()

        scheduler.add_listener(on_started, EVENT_SCHEDULER_STARTED)
        self._scheduler = scheduler

        def on_signal(signum: int, frame: FrameType | None) -> None:
            log.info("%s: finishing the run in progress, then exiting", signal.Signals(signum).name)
            self.systemd.stopping("finishing the run in progress, then exiting")
            self.stop()
            # Not from inside the handler: shutdown takes locks the interrupted code may hold.
            threading.Thread(target=shutdown_scheduler, args=(scheduler,), daemon=True).start()

        def on_hangup(signum: int, frame: FrameType | None) -> None:
            # Not from inside the handler: loading logs and takes locks; one at a time.
            threading.Thread(target=self.reload, name="reload", daemon=True).start()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
        log.info(
            "daemon started: %s; source %s; next run %s",
            self.schedule.describe(),
            self.source,
            rfc3339(self.schedule.next_run(self.clock())),
        )
        server = self.serve_http()
        try:
            if not self._stop.is_set():
                scheduler.start()
        finally:
            # The scheduler has stopped: STOPPING=1 was sent, and systemd watches no more.
            keepalive.stop()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if server is not None:
                server.shutdown()
                server.server_close()
        return self.finish(stop_timeout)

    def finish(self, stop_timeout: timedelta) -> int:
        """After `stop`: let the run in progress end within `stop_timeout`, else kill it.

        Then flush the telemetry; 0 when the run finished (or none was going), 1 when killed.
        """
        finished = self.wait_idle(stop_timeout.total_seconds())
        if not finished:
            log.error(
                "the run in progress did not finish within %s; killing it (judged at the next start)",
                format_duration(stop_timeout),
            )
            if self._ticks is not None:
                self._ticks.kill()
            if not self.wait_idle(10.0):
                self.telemetry.shutdown()
                logging.shutdown()
                os._exit(1)  # an in-process run cannot be interrupted; do not wait for it
        self.telemetry.shutdown()
        return 0 if finished else 1
