"""`memory-watchdog daemon`: judge every aligned window exactly once, unattended, for months.

`Daemon` holds where judging stands (the last window judged, the crashes not
yet recorded) and runs each tick's store work (watchdog.daemon.tick) in a
fresh child process; what it says is `narrate`, its life in the process
(schedule, signals, `--http`, stop) is `serving`. How a tick goes, what each
failure does, SIGHUP and systemd: docs/architecture.md#why-ticks-run-in-a-child-process
and docs/operations.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from alerts.base import Notifier, Timer
from alerts.lease import holder_name
from alerts.lifecycle import STORE_CHECK
from alerts.notifiers import build_notifiers
from checks.base import Window
from watchdog.core.logs import DEFAULT_LOGS, LogSetup
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings
from watchdog.core.times import Clock, rfc3339, system_clock
from watchdog.daemon import serving, web
from watchdog.daemon.child import TICK_TIMEOUT, ChildCrashed, ChildTicks
from watchdog.daemon.metrics import Metrics
from watchdog.daemon.narrate import Narrator, Outputs
from watchdog.daemon.outage import announce_store_down
from watchdog.daemon.outcome import RunOutcome
from watchdog.daemon.reload import Reloads
from watchdog.daemon.runs import OpenStore, RunResult
from watchdog.daemon.serving import Serving
from watchdog.daemon.spool import Spool, SpooledRun
from watchdog.daemon.status import StoreRead, status_at
from watchdog.daemon.systemd import Notify
from watchdog.daemon.telemetry import Telemetry
from watchdog.daemon.tick import (
    Crash,
    TickRequest,
    TickResult,
    aligned_window,
    bounds,
    open_settings_store,
    run_tick,
)

log = logging.getLogger(__name__)

DEFAULT_STOP_TIMEOUT = timedelta(seconds=90)
# How long past its timeout a tick may still take (the child's kill, the result's way back).
STUCK_MARGIN = timedelta(minutes=5)
MAX_CRASHES = 10  # crashes kept for the `run` alert until a tick records them (the newest)


@dataclass(frozen=True)
class Running:
    """Where and how each tick runs: in a child process per tick (`ticks`, what the command
    does), or in this process with `open_store_fn` (tests hand in their store); its clock,
    the delivery timer, whether it writes the pages."""

    ticks: ChildTicks | None = None
    open_store_fn: OpenStore = open_settings_store
    clock: Clock = system_clock
    timer: Timer | None = None
    pages: bool = True
    logs: LogSetup = DEFAULT_LOGS


@dataclass
class Judging:
    """Where judging stands between ticks (the run log in the store is the truth; this is
    what the daemon carries from one tick to the next)."""

    last_judged: datetime | None = None  # end of the last window judged
    log_read: bool = False  # the run log was read since the daemon started
    store_alert_known: bool = False  # the store holds a firing `store` alert
    crashes: list[Crash] = field(default_factory=list)  # ticks that died, not yet recorded
    status: StoreRead | None = None  # what the latest tick read for `status` (--http)
    slo_counted: dict[str, datetime] = field(default_factory=dict)  # newest SLO bucket counted


class Daemon:
    """The scheduled watchdog: its collaborators handed in, its state in the store and spool."""

    def __init__(
        self,
        settings: Settings,
        *,
        schedule: Schedule,
        spool: Spool,
        outputs: Outputs,
        notifiers: Mapping[str, Notifier] | None = None,
        running: Running = Running(),
        serving: Serving = Serving(),
    ) -> None:
        self.settings = settings
        self.schedule = schedule
        self.spool = spool
        self.outputs = outputs
        self.running = running
        self.serving = serving
        # None: built from the config, and rebuilt from a reloaded one.
        self.notifiers = build_notifiers(settings) if notifiers is None else dict(notifiers)
        self.judging = Judging()
        self.narrator = Narrator(outputs, settings.source.display_name)
        self.holder = holder_name("daemon")  # this daemon in the alert lease, for all its ticks
        self._stop = threading.Event()
        self._busy = threading.Lock()
        reload = serving.reload
        self._reloads = (
            Reloads(reload, own_notifiers=notifiers is None, read_timeout=serving.reload_timeout)
            if reload
            else None
        )
        self.scheduler: Any = None  # set by `serve`: a new schedule reschedules its job
        self.tick_started: float | None = None  # time.monotonic() when the tick in progress began
        self.started_at = self.clock()  # runs due before the daemon started are not its lateness
        self.tick_finished_at: datetime | None = None  # by the daemon's clock
        self.tick_statuses: list[RunOutcome] = []  # each window's outcome in the latest tick

    # What the daemon's users (the CLI, tests, `serving`) read.
    @property
    def source(self) -> str:
        return self.settings.source.display_name

    @property
    def clock(self) -> Clock:
        return self.running.clock

    @property
    def telemetry(self) -> Telemetry:
        return self.outputs.telemetry

    @property
    def metrics(self) -> Metrics:
        return self.outputs.metrics

    @property
    def systemd(self) -> Notify:
        return self.outputs.systemd

    @property
    def last_judged(self) -> datetime | None:
        return self.judging.last_judged

    @property
    def standby(self) -> str | None:
        return self.narrator.standby

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def stuck_after(self) -> timedelta:
        """A tick going longer than its timeout and a margin is stuck: the daemon is not healthy."""
        ticks = self.running.ticks
        return (ticks.timeout if ticks is not None else TICK_TIMEOUT) + STUCK_MARGIN

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
            self.tick_finished_at = self.clock()
            self._busy.release()
        self.systemd.status(self.status_line())

    def burn(self) -> None:
        """The burn tick (at every bucket close + schedule.delay): judge the closed buckets and
        advance the SLO alerts, no window; skipped while a tick runs (it does the same step)."""
        if not self.settings.slo.enabled or self._stop.is_set():
            return
        if not self._busy.acquire(blocking=False):
            return
        try:
            self._take_reloaded()
            self._tick(burn_only=True)
        except Exception:
            log.exception("the burn tick failed unexpectedly; the daemon keeps its schedule")
        finally:
            self._busy.release()

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
        return self.scheduler is not None and bool(self.scheduler.running)

    def status_line(self) -> str:
        """One line for systemd's STATUS= (shown by `systemctl status`)."""
        last = self.judging.last_judged
        judged = f"last window judged ends {rfc3339(last)}" if last else "no window judged yet"
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

    def _tick(self, *, burn_only: bool = False) -> bool:
        """One run (`burn_only`: the SLO step alone); False when its process died (what it
        left is for the next run)."""
        now = self.clock()
        if not burn_only:
            self.tick_statuses = []
        judging, running = self.judging, self.running
        request = TickRequest(
            settings=self.settings,
            now=now,
            last_judged=judging.last_judged,
            log_read=judging.log_read,
            spooled=tuple(self.spool.runs),
            told=self.spool.told,
            pages=running.pages,
            status=self.serving.http is not None,
            logs=running.logs,
            holder=self.holder,
            crashes=tuple(judging.crashes),
            burn_only=burn_only,
            started=self.started_at,
            slo_counted=dict(judging.slo_counted),
        )
        started_ns = time.time_ns()
        try:
            if running.ticks is not None:
                result = running.ticks.run(request, progress=self._took)
            else:
                result = run_tick(
                    request,
                    open_store_fn=running.open_store_fn,
                    notifiers=self.notifiers,
                    clock=running.clock,
                    stop=self._stop,
                    timer=running.timer,
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

    def _took(self, run: RunResult) -> None:
        """One window's run, as soon as the tick reports it."""
        self.tick_statuses.append(run.status)
        if not run.standby:
            self.judging.store_alert_known = STORE_CHECK in run.firing
        self.narrator.run(run)

    def _crashed(self, crash: ChildCrashed, now: datetime) -> None:
        """A tick's process died: keep the windows it judged, remember the crash for the
        `run` alert (the next tick records it); the store is not at fault."""
        judging = self.judging
        judged = [run.window.end for run in crash.runs if run.judged and not run.standby]
        if judged:
            judging.last_judged, judging.log_read = max(judged), True
        due = self.schedule.due_end(now)
        last = judging.last_judged
        end = self.schedule.next_end(last) if last else due
        window = aligned_window(self.settings, self.schedule, min(end, due))
        start, stop = bounds(window)
        problem = f"{crash.problem}, while judging [{start}, {stop})"
        judging.crashes = [*judging.crashes, Crash(self.clock(), window, problem)][-MAX_CRASHES:]
        log.warning(
            "%s; the store was not at fault: the next run judges the windows left and"
            " raises the `run` alert",
            problem,
        )
        self.metrics.record_crash()

    def _take(self, result: TickResult, started_ns: int) -> None:
        """Turn a tick's result into spool updates, telemetry and log lines."""
        judging = self.judging
        if result.flushed:
            dropped = self.spool.state.dropped
            self.spool.clear()
            judging.store_alert_known = True
            log.info(
                "the store is back: %d spooled error run(s) written to the run log%s",
                result.flushed,
                f" ({dropped} older ones were dropped from the spool)" if dropped else "",
            )
        judging.last_judged, judging.log_read = result.last_judged, result.log_read
        judging.crashes = judging.crashes[result.crashes_recorded :]
        if result.status is not None:
            judging.status = result.status
        for slo in result.slos:
            self.metrics.record_slo(slo.name, slo.figures, slo.judged)
            if slo.judged:
                newest = max(b.start for b in slo.judged)
                judging.slo_counted[slo.name] = max(
                    newest, judging.slo_counted.get(slo.name, newest)
                )
        if result.slo_summary:
            log.info("%s", result.slo_summary)
        self.narrator.tick(result, self.settings.schedule.max_catchup)
        if result.store_down is not None:
            window = aligned_window(self.settings, self.schedule, result.store_down.end)
            self.tick_statuses.append(RunOutcome.STORE_ERROR)
            self._store_down(window, result.store_down.problem, started_ns)
        self.metrics.record_tick(judging.last_judged, len(self.spool.runs))

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
        if not self.judging.store_alert_known:
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
            self.settings, untold, window, problem, now=self.clock(), timer=self.running.timer
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
                serving.reschedule(self, pending.schedule, pending.settings)
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

    # -- serving --------------------------------------------------------------

    def serve(self, stop_timeout: timedelta = DEFAULT_STOP_TIMEOUT) -> int:
        """Run the schedule until SIGTERM/SIGINT; 0 when the last run finished, 1 when killed."""
        return serving.serve(self, stop_timeout)

    def serve_http(self) -> web.WebServer | None:
        """Start `--http` in a thread; None when not asked for (see watchdog.daemon.serving)."""
        return serving.serve_http(self)

    def finish(self, stop_timeout: timedelta) -> int:
        """After `stop`: the run in progress ends within `stop_timeout`, or is killed (exit 1)."""
        return serving.finish(self, stop_timeout)

    def stop(self) -> None:
        """Ask the daemon to stop after the window being judged (thread- and signal-safe)."""
        self._stop.set()
        if self.running.ticks is not None:
            self.running.ticks.stop_flag.set()

    def status_document(self) -> dict[str, Any]:
        """`status --format json` now, of the store as the latest tick read it (this process
        never opens the engine), with the spool and the receiver's as they are now."""
        read = self.judging.status
        if read is None:
            raise RuntimeError("no run has read the store yet")
        receiver = self.serving.receiver
        return status_at(
            read,
            self.settings,
            self.clock(),
            spool=self.spool,
            ingest=receiver() if receiver is not None else None,
        ).to_json()

    def last_run_age(self) -> timedelta | None:
        """How long ago the last judged window ended."""
        last = self.judging.last_judged
        return None if last is None else self.clock() - last

    def run_overdue(self) -> tuple[datetime, timedelta, timedelta] | None:
        """(when it was due, how late it is, what a run may take) of the run due last, when it
        has not finished within what a run may take (its timeout and margin, at most a period):
        the daemon is not judging on time (/healthz). None when it is, or before the first run."""
        now = self.clock()
        due_end = self.schedule.due_end(now)
        last = self.judging.last_judged
        finished = self.tick_finished_at
        due = max(due_end + self.schedule.delay, self.started_at)
        if last is None or last >= due_end or (finished is not None and finished >= due):
            return None  # judged, or a run came and went since (a store outage is said apart)
        allowed = min(self.stuck_after, self.period())
        late = now - due
        return (due, late, allowed) if late > allowed else None

    def period(self) -> timedelta:
        """The schedule's period (for a cron line: the current one)."""
        end = self.schedule.next_end(self.clock())
        return end - self.schedule.previous_end(end)

    def kill_run(self) -> None:
        """Kill the run in progress when it runs in a child process (an in-process one cannot be)."""
        if self.running.ticks is not None:
            self.running.ticks.kill()

    def wait_idle(self, timeout: float) -> bool:
        """Wait up to `timeout` seconds for the run in progress; True when none is left."""
        if not self._busy.acquire(timeout=max(0.0, timeout)):
            return False
        self._busy.release()
        return True
