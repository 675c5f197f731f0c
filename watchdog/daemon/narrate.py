"""What the daemon says of its work: one log line per run, its telemetry and metrics (docs/operations.md).

`Outputs` groups where it is said (the OpenTelemetry export, the Prometheus
registry, systemd); `Narrator` turns each window's run, each skipped
catch-up and each change of the alert lease into those lines and values.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from checks.base import Status
from watchdog.core.schedule import CatchUp
from watchdog.core.times import rfc3339
from watchdog.daemon.metrics import Metrics
from watchdog.daemon.runs import RunResult
from watchdog.daemon.systemd import Notify
from watchdog.daemon.telemetry import Telemetry
from watchdog.daemon.tick import TickResult, bounds

log = logging.getLogger("watchdog.daemon.service")  # the lines users know, under one name


@dataclass(frozen=True)
class Outputs:
    """Where the daemon says what it does: its OpenTelemetry export, metrics and systemd."""

    telemetry: Telemetry
    metrics: Metrics
    systemd: Notify

    @classmethod
    def quiet(
        cls, telemetry: Telemetry, *, source: str = "", receivers: Iterable[str] = ()
    ) -> Outputs:
        """`telemetry` with metrics on a registry of their own and no systemd (tests, --once)."""
        return cls(telemetry, Metrics(source=source, receivers=receivers), Notify())


class Narrator:
    """Says each run of a daemon's ticks; remembers whom it last stood by for."""

    def __init__(self, outputs: Outputs, source: str) -> None:
        self.outputs = outputs
        self.source = source
        self.standby: str | None = None  # who held the alert lease at the last tick, if not us

    def run(self, run: RunResult) -> None:
        """One window's run, as soon as the tick reports it: telemetry, metrics, a log line."""
        if run.standby:
            log.info(
                "standby: evaluated [%s, %s): %s; %s", *bounds(run.window), run.status, run.summary
            )
            return
        self._holding_again()  # said with its first window, not at the end of the tick
        telemetry = self.outputs.telemetry
        telemetry.record_run(
            run.window,
            status=run.status,
            start_ns=run.start_ns,
            end_ns=run.end_ns,
            catchup=run.catchup,
            report=run.report,
            timings=run.timings,
        )
        telemetry.record_notifications(run.delivered, len(run.failed))
        if run.backlog is not None:
            telemetry.record_backlog(run.backlog)
        self.outputs.metrics.record_run(run)
        for problem in run.failed:
            if problem in run.given_up:
                log.error("notification given up: %s", problem)
            else:
                log.warning("notification not delivered (the outbox retries it): %s", problem)
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
            extra={
                "source": self.source,
                "window_start": start,
                "window_end": end,
                "status": str(run.status),
                "breached": breached,
                "duration_s": round(run.duration_s, 3),
            },
        )

    def tick(self, result: TickResult, max_catchup: int) -> None:
        """What a whole tick says beyond its runs: the alert lease, skipped windows, a stop."""
        if result.run_alert:
            log.info("run alert: %s", result.run_alert)
        if result.standby is not None:
            holder = result.standby.describe()
            if holder != self.standby:
                log.info("standby: %s; this daemon evaluates and records and sends nothing", holder)
            self.standby = holder
        else:
            self._holding_again()
        if result.plan is not None:
            self._skipped(result.plan, max_catchup)
        if result.stopped_before is not None:
            log.info(
                "stopping: windows from %s on wait for the next start",
                rfc3339(result.stopped_before),
            )

    def _holding_again(self) -> None:
        if self.standby is not None:
            log.info("this daemon holds the alert lease of %s again", self.source)
            self.standby = None

    def _skipped(self, plan: CatchUp, max_catchup: int) -> None:
        if not plan.skipped:
            return
        log.warning("catch-up: %s", skipped_line(plan, max_catchup))
        self.outputs.telemetry.record_skipped(plan.skipped)
        self.outputs.metrics.record_skipped(plan.skipped)


def skipped_line(plan: CatchUp, max_catchup: int) -> str:
    """What a catch-up that skipped windows says: how many were missed, which of them are not
    judged (the oldest, and when they ended), and which are: the newest max_catchup, then the
    window due now."""
    judged = len(plan.ends) - 1  # the missed windows judged, before the one due now
    missed = plan.skipped + judged
    more = "at least " if plan.skipped_capped else ""
    first = rfc3339(plan.skipped_from) if plan.skipped_from else "?"
    last = rfc3339(plan.skipped_to) if plan.skipped_to else "?"
    if plan.skipped_capped:
        skipped = f"the oldest (at least {plan.skipped}, ending {first} to {last}) are"
    elif plan.skipped == 1:
        skipped = f"the oldest (ending {first}) is"
    else:
        skipped = f"the {plan.skipped} oldest (ending {first} to {last}) are"
    if judged == 0:
        instead = "only the window due now"
    elif judged == 1:
        instead = "the newest missed window and the one due now"
    else:
        instead = f"the {judged} newest and the one due now"
    were = "1 window was" if missed == 1 else f"{more}{missed} windows were"
    return (
        f"{were} missed, more than schedule.max_catchup = {max_catchup}:"
        f" {skipped} not judged; judging {instead}"
    )
