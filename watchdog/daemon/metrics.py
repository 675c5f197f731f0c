"""The daemon's Prometheus metrics on `/metrics` (docs/operations.md#prometheus-metrics).

`Metrics` holds the instruments on a registry handed in (never the global
one), set as each run ends, so a scrape never queries the store; no value
carries a secret or an event payload value.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

from alerts.lifecycle import STORE_CHECK
from checks.base import Report, Status
from checks.slo.budget import Bucket, SloFigures
from watchdog.daemon.outcome import RunOutcome
from watchdog.daemon.runs import RunResult

PREFIX = "memory_watchdog"
OUTCOMES = tuple(RunOutcome)
STATUSES = tuple(s.value for s in Status)
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)


class Metrics:
    """The daemon's instruments on one registry, and their exposition."""

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        *,
        source: str = "",
        version: str = "",
        receivers: Iterable[str] = (),
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.source = source
        r = self.registry
        build = Gauge(f"{PREFIX}_build_info", "The running version", ["version"], registry=r)
        build.labels(version or "unknown").set(1)
        self.last_run = Gauge(
            f"{PREFIX}_last_run_timestamp_seconds",
            "When the last run ended (any outcome), Unix time",
            registry=r,
        )
        self.last_duration = Gauge(
            f"{PREFIX}_last_run_duration_seconds", "How long the last run took", registry=r
        )
        self.duration = Histogram(
            f"{PREFIX}_run_duration_seconds",
            "How long runs take",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.last_judged = Gauge(
            f"{PREFIX}_last_judged_window_end_timestamp_seconds",
            "End of the last window whose run read the source, Unix time",
            registry=r,
        )
        self.runs = Counter(f"{PREFIX}_runs", "Runs by outcome", ["outcome"], registry=r)
        for outcome in OUTCOMES:  # every series exists from the start, at 0
            self.runs.labels(outcome)
        self.check_value = Gauge(
            f"{PREFIX}_check_value",
            "Each check's value at the last judged window",
            ["check", "source"],
            registry=r,
        )
        self.check_status = Gauge(
            f"{PREFIX}_check_status",
            "1 for each check's status at the last run, 0 for the other statuses",
            ["check", "source", "status"],
            registry=r,
        )
        self.firing = Gauge(
            f"{PREFIX}_alerts_firing", "Alerts firing after the last run", ["source"], registry=r
        )
        self.pending = Gauge(
            f"{PREFIX}_outbox_pending",
            "Notifications waiting in the outbox, per receiver",
            ["receiver"],
            registry=r,
        )
        for receiver in receivers:
            self.pending.labels(receiver).set(0)
        self.notifications = Counter(
            f"{PREFIX}_notifications",
            "Notifications delivered, or attempts that failed",
            ["outcome"],
            registry=r,
        )
        for delivery in ("delivered", "failed"):
            self.notifications.labels(delivery)
        self.skipped = Counter(
            f"{PREFIX}_windows_skipped",
            "Missed windows beyond schedule.max_catchup, not judged",
            registry=r,
        )
        self.spooled = Gauge(
            f"{PREFIX}_spooled_error_runs",
            "Error runs waiting in the local spool for the store to come back",
            registry=r,
        )

        self.slo_budget = Gauge(
            f"{PREFIX}_slo_budget_remaining",
            "Share of each SLO's error budget left over its period (negative: overspent)",
            ["slo"],
            registry=r,
        )
        self.slo_burn = Gauge(
            f"{PREFIX}_slo_burn_rate",
            "Each SLO's burn rate over each window (absent when the window holds no event)",
            ["slo", "window"],
            registry=r,
        )
        self.slo_events = Counter(
            f"{PREFIX}_slo_events",
            "Events of the SLO buckets this daemon judged, good or bad",
            ["slo", "outcome"],
            registry=r,
        )

    def record_run(self, run: RunResult) -> None:
        """A window's run, as the tick reported it."""
        self._ran(run.status, run.end_ns / 1e9, run.duration_s)
        if run.report is not None:
            self._checks(run.report)
        self._status(STORE_CHECK, Status.OK.value if run.judged else Status.ERROR.value)
        self.firing.labels(self.source).set(len(run.firing))
        self.notifications.labels("delivered").inc(run.delivered)
        self.notifications.labels("failed").inc(len(run.failed))
        if run.backlog is not None:
            for receiver, count in run.backlog.items():
                self.pending.labels(receiver).set(count)

    def record_store_down(self, end_ns: int, duration_s: float, spooled: int) -> None:
        """A run that could not open the store (its error run went to the spool)."""
        self._ran(RunOutcome.STORE_ERROR, end_ns / 1e9, duration_s)
        self._status(STORE_CHECK, Status.ERROR.value)
        self.spooled.set(spooled)

    def record_crash(self) -> None:
        """A tick whose process died before it finished (the `run` alert)."""
        self.runs.labels(RunOutcome.CRASHED).inc()

    def record_tick(self, last_judged: datetime | None, spooled: int) -> None:
        """Where judging stands after a tick."""
        if last_judged is not None:
            self.last_judged.set(last_judged.timestamp())
        self.spooled.set(spooled)

    def record_skipped(self, windows: int) -> None:
        self.skipped.inc(windows)

    def record_delivery(self, delivered: int, failed: int) -> None:
        """Notifications sent outside a run (the store alert, sent directly)."""
        self.notifications.labels("delivered").inc(delivered)
        self.notifications.labels("failed").inc(failed)

    def record_slo(self, slo: str, figures: SloFigures, judged: Iterable[Bucket] = ()) -> None:
        """An SLO at a burn tick: its budget and burns (a null one removes its series, never
        0), and the events of the buckets this tick judged (each bucket is judged once, so
        `increase()` over the counter counts every event once, restarts included)."""
        if figures.budget is None:
            self.slo_budget.remove(slo)
        else:
            self.slo_budget.labels(slo).set(figures.budget.remaining)
        for window, burn in figures.burn.items():
            if burn is None:
                self.slo_burn.remove(slo, window)
            else:
                self.slo_burn.labels(slo, window).set(burn)
        good = self.slo_events.labels(slo, "good")
        bad = self.slo_events.labels(slo, "bad")
        for bucket in judged:
            good.inc(bucket.good)
            bad.inc(bucket.bad)

    def exposition(self, accept: str | None) -> tuple[bytes, str]:
        """The metrics in the format the scraper accepts (Prometheus text, or OpenMetrics)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def _ran(self, outcome: str, ended_s: float, duration_s: float) -> None:
        self.runs.labels(outcome).inc()
        self.last_run.set(ended_s)
        self.last_duration.set(duration_s)
        self.duration.observe(duration_s)

    def _checks(self, report: Report) -> None:
        for check_id, result in report.checks.items():
            if result.value is None:
                self.check_value.remove(check_id, report.source)
            else:
                self.check_value.labels(check_id, report.source).set(float(result.value))
            self._status(check_id, result.status.value, report.source)

    def _status(self, check_id: str, status: str, source: str | None = None) -> None:
        for each in STATUSES:
            value = 1.0 if each == status else 0.0
            self.check_status.labels(check_id, source or self.source, each).set(value)
