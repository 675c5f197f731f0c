"""The daemon's life in its process: the schedule, the signals, `--http`, a bounded stop (docs/operations.md).

`serve` runs APScheduler until SIGTERM/SIGINT (SIGHUP reloads the config),
says READY and pings systemd's watchdog while the daemon is healthy, serves
`--http`, and `finish` lets the run in progress end within `--stop-timeout`
before the telemetry is flushed.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any, Protocol

from apscheduler.events import EVENT_SCHEDULER_STARTED
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.blocking import BlockingScheduler

from watchdog.core.durations import format_duration
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings
from watchdog.core.times import Clock, rfc3339
from watchdog.core.urls import mask_url
from watchdog.daemon import web
from watchdog.daemon.burn import BucketTrigger
from watchdog.daemon.narrate import Outputs
from watchdog.daemon.reload import RELOAD_TIMEOUT, Loader
from watchdog.daemon.systemd import Keepalive
from watchdog.daemon.trigger import AlignedTrigger, misfire_grace, shutdown_scheduler
from watchdog.report.files import report_dir

log = logging.getLogger("watchdog.daemon.service")  # the lines users know, under one name

JOB_ID = "judge"
BURN_JOB_ID = "burn"  # the burn tick, at every SLO bucket close (watchdog.daemon.burn)


@dataclass(frozen=True)
class Serving:
    """What `serve` adds: `--http`, the OTLP receiver's state for it, and SIGHUP's config
    loader (without one, SIGHUP says so and changes nothing)."""

    http: str | None = None
    receiver: web.ReceiverState | None = None
    reload: Loader | None = None
    reload_timeout: timedelta = RELOAD_TIMEOUT  # a read of the config taking longer is given up


class Served(Protocol):
    """What serving needs of the daemon (`watchdog.daemon.service.Daemon` is one): this module
    consumes the interface, and never imports the daemon that calls it."""

    scheduler: Any  # set by `serve`: a new schedule reschedules its job

    @property
    def settings(self) -> Settings: ...
    @property
    def schedule(self) -> Schedule: ...
    @property
    def outputs(self) -> Outputs: ...
    @property
    def serving(self) -> Serving: ...
    @property
    def source(self) -> str: ...
    @property
    def stopping(self) -> bool: ...
    @property
    def clock(self) -> Clock: ...

    def tick(self) -> None: ...
    def burn(self) -> None: ...
    def healthy(self, now: float | None = None) -> bool: ...
    def status_line(self) -> str: ...
    def stop(self) -> None: ...
    def reload(self) -> bool: ...
    def status_document(self) -> dict[str, Any]: ...
    def last_run_age(self) -> timedelta | None: ...
    def run_overdue(self) -> tuple[datetime, timedelta, timedelta] | None: ...
    def period(self) -> timedelta: ...
    def kill_run(self) -> None: ...
    def wait_idle(self, timeout: float) -> bool: ...


def serve(daemon: Served, stop_timeout: timedelta) -> int:
    """Run the schedule until SIGTERM/SIGINT; 0 when the last run finished, 1 when killed."""
    systemd = daemon.outputs.systemd
    scheduler = BlockingScheduler(
        timezone=UTC, executors={"default": ThreadPoolExecutor(max_workers=1)}
    )
    scheduler.add_job(
        daemon.tick,
        AlignedTrigger(daemon.schedule),
        id=JOB_ID,
        name="judge due windows",
        max_instances=1,
        coalesce=True,
        misfire_grace_time=misfire_grace(daemon.settings),
        next_run_time=datetime.now(UTC),  # catch up at once
    )
    if daemon.settings.slo.enabled:
        scheduler.add_job(
            daemon.burn,
            BucketTrigger(daemon.settings.slo.bucket, daemon.settings.schedule.delay),
            id=BURN_JOB_ID,
            name="judge closed SLO buckets",
            max_instances=1,
            coalesce=True,
            misfire_grace_time=misfire_grace(daemon.settings),
        )
    keepalive = Keepalive(systemd, daemon.healthy)

    def on_started(event: Any) -> None:
        systemd.ready(daemon.status_line())
        keepalive.start()

    scheduler.add_listener(on_started, EVENT_SCHEDULER_STARTED)
    daemon.scheduler = scheduler

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("%s: finishing the run in progress, then exiting", signal.Signals(signum).name)
        systemd.stopping("finishing the run in progress, then exiting")
        daemon.stop()
        # Not from inside the handler: shutdown takes locks the interrupted code may hold.
        threading.Thread(target=shutdown_scheduler, args=(scheduler,), daemon=True).start()

    def on_hangup(signum: int, frame: FrameType | None) -> None:
        # Not from inside the handler: loading logs and takes locks; one at a time.
        threading.Thread(target=daemon.reload, name="reload", daemon=True).start()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, on_hangup)
    log.info(
        "daemon started: %s; store %s; source %s; next run %s",
        daemon.schedule.describe(),
        mask_url(daemon.settings.store.url),
        daemon.source,
        rfc3339(daemon.schedule.next_run(daemon.clock())),
    )
    server = serve_http(daemon)
    try:
        if not daemon.stopping:
            scheduler.start()
    finally:
        # The scheduler has stopped: STOPPING=1 was sent, and systemd watches no more.
        keepalive.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server is not None:
            server.shutdown()
            server.server_close()
    return finish(daemon, stop_timeout)


def serve_http(daemon: Served) -> web.WebServer | None:
    """Start `--http` (pages, /healthz, /status, /metrics) in a thread; None when not asked for.

    Stop the server it returns with `shutdown()` then `server_close()`.
    """
    serving = daemon.serving
    if serving.http is None:
        return None
    app = web.make_app(
        report_dir(daemon.settings),
        status=daemon.status_document,
        last_run_age=daemon.last_run_age,
        period=daemon.period(),
        metrics=daemon.outputs.metrics.registry,
        receiver=serving.receiver,
        overdue=daemon.run_overdue,
    )
    server, _ = web.serve(serving.http, app)
    host, port = server.server_address[:2]
    log.info("serving pages, /healthz, /status and /metrics on http://%s:%s/", host, port)
    return server


def finish(daemon: Served, stop_timeout: timedelta) -> int:
    """After `stop`: let the run in progress end within `stop_timeout`, else kill it.

    Then flush the telemetry; 0 when the run finished (or none was going), 1 when killed.
    """
    telemetry = daemon.outputs.telemetry
    finished = daemon.wait_idle(stop_timeout.total_seconds())
    if not finished:
        log.error(
            "the run in progress did not finish within %s; killing it (judged at the next start)",
            format_duration(stop_timeout),
        )
        daemon.kill_run()
        if not daemon.wait_idle(10.0):
            telemetry.shutdown()
            logging.shutdown()
            os._exit(1)  # an in-process run cannot be interrupted; do not wait for it
    telemetry.shutdown()
    return 0 if finished else 1


def reschedule(daemon: Served, schedule: Schedule, settings: Settings) -> None:
    """Fire the job on the new schedule from now on (when the scheduler runs)."""
    scheduler = daemon.scheduler
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
        rfc3339(schedule.next_run(daemon.clock())),
    )
