"""`memory-watchdog status`: last runs, firing alerts, outbox backlog, next run; a health check.

The command is `watchdog.cli.status`; the daemon serves the same document on `/status`, computed
at each request (`status_at`) from what its last tick read of the store (`read_store`). It only
reads: no table is created (docs/operations.md#is-the-watchdog-alive-status-and---max-age).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from alerts.lease import LeaseInfo, current_lease
from alerts.lifecycle import Alert
from alerts.records import AlertRecord, Backlog, RunRecord, alert_states, last_runs, outbox_backlog
from alerts.state import REPLAY, readable_columns, schema_exists, table
from checks.base import Status
from watchdog.core.durations import human_duration
from watchdog.core.schedule import Schedule
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.text import printable
from watchdog.core.times import CLOCK_SKEW, from_ms, rfc3339
from watchdog.core.urls import mask_url
from watchdog.daemon.ingest.state import SpoolState, read_spool_state, spool_dir
from watchdog.daemon.spool import Spool

_NOT_JUDGED = ("breached", "error")


def last_completed_at(store: Store, settings: Settings, now: datetime) -> datetime | None:
    """The end of the newest window a live run judged (it read the source) by `now`.

    Replays (`check --notify --at`) never count, nor does a run recorded for a
    time in the future (older versions accepted `--at 2099-...`): what live runs
    resume from and what the dead man's switch measures is what live runs did.
    """
    return completed_by_source(store, settings, now).get(settings.source.display_name)


def completed_by_source(store: Store, settings: Settings, now: datetime) -> dict[str, datetime]:
    """Every source the run log holds live completed runs of, with the newest window's end
    (`last_completed_at` of each; newest first)."""
    if not schema_exists(store, settings):
        return {}
    # A run log from before `kind` existed holds live runs only.
    live = "kind != {replay:String}" if "kind" in readable_columns(store, settings, "runs") else "1"
    rows = store.query(
        "SELECT source, toUnixTimestamp64Milli(max(at)) AS at_ms"
        f" FROM {table(settings, 'runs')} FINAL"
        f" WHERE problem = '' AND {live} AND at <= {{latest:DateTime64(3, 'UTC')}}"
        " GROUP BY source ORDER BY at_ms DESC, source",
        {"replay": REPLAY, "latest": now + CLOCK_SKEW},
    ).dicts()
    return {str(row["source"]): from_ms(int(row["at_ms"])) for row in rows}


@dataclass(frozen=True)
class StoreRead:
    """What `status` reads of the store (read-only), at `read_at`: the part of the status that
    only a run or a command changes. The daemon's ticks hand theirs back (its process never
    opens the engine) and `/status` shows it at the moment it is asked for (`status_at`)."""

    read_at: datetime
    completed: tuple[tuple[str, datetime], ...]  # completed_by_source, newest first
    runs: list[RunRecord]
    alerts: list[AlertRecord]
    backlog: list[Backlog]
    lease: LeaseInfo | None


def read_store(store: Store, settings: Settings, now: datetime, runs: int) -> StoreRead:
    """Read the run log, alert states, outbox and alert lease as of `now` (read-only)."""
    return StoreRead(
        read_at=now,
        completed=tuple(completed_by_source(store, settings, now).items()),
        runs=last_runs(store, settings, runs),
        alerts=alert_states(store, settings),
        backlog=outbox_backlog(store, settings, now=now),
        lease=current_lease(store, settings, settings.source.display_name),
    )


@dataclass(frozen=True)
class DaemonStatus:
    """Everything `status` shows at `now`, of the store as read at `read_at`."""

    now: datetime
    read_at: datetime
    source: str
    store: str  # masked
    schedule: str
    next_run: datetime
    last_completed: datetime | None
    runs: list[RunRecord]
    alerts: list[AlertRecord]
    backlog: list[Backlog]
    spooled: int
    spooled_since: datetime | None
    lease: LeaseInfo | None = None  # the alert lease of the source (server stores only)
    ingest: SpoolState | None = None  # the OTLP receiver's spool, when one is configured
    # The other sources the run log holds completed runs of, each with its newest window's end:
    # a status of one source never says "no completed run" without naming them.
    elsewhere: tuple[tuple[str, datetime], ...] = ()

    @property
    def age(self) -> timedelta | None:
        return self.now - self.last_completed if self.last_completed else None

    def stale(self, max_age: timedelta) -> bool:
        """Whether the dead man's switch trips: no completed run, or one older than max_age."""
        return self.age is None or self.age > max_age

    def staleness(self, max_age: timedelta) -> str | None:
        """Why the dead man's switch trips (`last completed 5h ago`), None when it does not."""
        if not self.stale(max_age):
            return None
        if self.age is None:
            if self.elsewhere:
                return f"no completed run of {printable(self.source)}{self.elsewhere_hint()}"
            return "no completed run"
        return f"last completed {ago(self.age)}"

    def elsewhere_hint(self) -> str:
        """`; the run log holds completed runs of otel.otel_logs (last ... ago): ...`, or ''."""
        if not self.elsewhere:
            return ""
        runs = ", ".join(
            f"{printable(source)} (window ending {rfc3339(at)}, {ago(self.now - at)})"
            for source, at in self.elsewhere
        )
        return (
            f"; the run log holds completed runs of {runs}: give status the config"
            " that judges it (--config; the daemon's)"
        )

    def firing(self) -> list[AlertRecord]:
        return [r for r in self.alerts if r.alert.firing]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "now": rfc3339(self.now),
            "store_read_at": rfc3339(self.read_at),
            "source": self.source,
            "store": self.store,
            "schedule": {"describe": self.schedule, "next_run": rfc3339(self.next_run)},
            "last_completed_run": _time(self.last_completed),
            "age_s": self.age.total_seconds() if self.age is not None else None,
            "other_sources": [
                {"source": source, "last_completed_run": rfc3339(at)}
                for source, at in self.elsewhere
            ],
            "runs": [_run_json(r) for r in self.runs],
            "firing_alerts": [_alert_json(r) for r in self.firing()],
            "outbox": [b.to_json() for b in self.backlog],
            "spool": {"error_runs": self.spooled, "since": _time(self.spooled_since)},
            "alert_lease": self.lease.to_json() if self.lease is not None else None,
            "ingest": self.ingest.to_json() if self.ingest is not None else None,
        }


def _time(moment: datetime | None) -> str | None:
    return rfc3339(moment) if moment is not None else None


def breached_checks(run: RunRecord) -> list[str]:
    """Check ids a run found breached or could not evaluate."""
    return sorted(c for c, r in run.checks.items() if r.get("status") in _NOT_JUDGED)


def _run_json(run: RunRecord) -> dict[str, Any]:
    return {
        "at": rfc3339(run.at),
        "window": {"start": rfc3339(run.window_start), "end": rfc3339(run.window_end)},
        "status": run.status,
        "duration_s": run.duration_s,
        "recorded_at": rfc3339(run.recorded_at),
        "breached": breached_checks(run),
        "problem": run.problem,
        "notifications": run.notifications,
    }


def _alert_json(record: AlertRecord) -> dict[str, Any]:
    a = record.alert
    return {
        "source": a.source,
        "check": a.check_id,
        "severity": a.severity,
        "cause": a.cause,
        "since": _time(a.fired_at),
        "last_status": a.last_status,
        "last_value": a.last_value,
        "summary": a.summary,
        "no_data_since": _time(a.no_data_since),
        "pending_outbox": record.pending_outbox,
        "silenced_until": _time(record.silenced_until),
        "inhibited_by": a.inhibited_by or None,
    }


def read_status(store: Store, settings: Settings, now: datetime, runs: int) -> DaemonStatus:
    """Read the run log, alert states and outbox (read-only), plus the local spool."""
    return status_at(read_store(store, settings, now, runs), settings, now)


def status_at(
    read: StoreRead,
    settings: Settings,
    now: datetime,
    *,
    spool: Spool | None = None,
    ingest: SpoolState | None = None,
) -> DaemonStatus:
    """The status at `now` of the store as `read`: the age, the next run, the local spool
    (`spool`, else the one on disk) and the receiver's (`ingest`, else the spool directory's
    when the config listens) as they are at `now`."""
    schedule = Schedule.from_settings(settings.schedule)
    spool = Spool.for_settings(settings) if spool is None else spool
    if ingest is None and settings.ingest.listens:
        ingest = read_spool_state(spool_dir(settings))
    source = settings.source.display_name
    completed = dict(read.completed)
    return DaemonStatus(
        now=now,
        read_at=read.read_at,
        source=source,
        store=mask_url(settings.store.url),
        schedule=schedule.describe(),
        next_run=schedule.next_run(now),
        last_completed=completed.get(source),
        elsewhere=tuple((name, at) for name, at in read.completed if name != source),
        runs=read.runs,
        alerts=read.alerts,
        backlog=read.backlog,
        spooled=len(spool.runs),
        spooled_since=spool.since,
        lease=read.lease,
        ingest=ingest,
    )


def ago(delta: timedelta) -> str:
    if delta.total_seconds() < 0:
        return "in the future"
    return (
        f"{human_duration(delta.total_seconds())} ago" if delta.total_seconds() >= 1 else "just now"
    )


def _why(alert: Alert) -> str:
    """A firing alert's latest word: its summary, or since when its windows had no data."""
    summary = printable(alert.summary, 300)
    if alert.last_status != Status.NO_DATA.value or alert.no_data_since is None:
        return summary
    return f"no data since {rfc3339(alert.no_data_since)} (latest window: {summary})"


def render_text(status: DaemonStatus) -> str:
    """The status for people."""
    lines = [
        f"memory-watchdog status: source {printable(status.source)}, store {printable(status.store)}"
    ]
    lines.append(
        f"Schedule: {status.schedule}; next run {rfc3339(status.next_run)}"
        f" (in {human_duration((status.next_run - status.now).total_seconds())})"
    )
    if status.last_completed is None:
        lines.append(
            f"Last completed run: none of this source{status.elsewhere_hint()}"
            if status.elsewhere
            else "Last completed run: none yet"
        )
    else:
        assert status.age is not None
        lines.append(
            f"Last completed run: window ending {rfc3339(status.last_completed)}"
            f" ({ago(status.age)})"
        )
    if status.lease is not None:
        lines.append(f"Alert lease: {printable(status.lease.describe())}")
    if status.spooled:
        since = rfc3339(status.spooled_since) if status.spooled_since else "?"
        lines.append(
            f"Store outage: {status.spooled} error run(s) since {since} wait in the local spool"
        )
    if status.ingest is not None:
        lines.append(status.ingest.line())
    lines.append("")
    lines.append("Last runs (newest first):" if status.runs else "Last runs: none")
    for run in status.runs:
        duration = f"{run.duration_s:.2f}s" if run.duration_s is not None else "-"
        detail = run.problem or ", ".join(breached_checks(run))
        lines.append(
            f"  [{rfc3339(run.window_start)}, {rfc3339(run.window_end)})  {run.status:<9}"
            f" {duration:>7}  {printable(detail, 300)}".rstrip()
        )
    firing = status.firing()
    lines.append("")
    lines.append(f"Firing alerts: {len(firing)}" if firing else "Firing alerts: none")
    for record in firing:
        a = record.alert
        since = f" since {rfc3339(a.fired_at)}" if a.fired_at else ""
        held = f" (held by {printable(a.inhibited_by)})" if a.inhibited_by else ""
        lines.append(
            f"  {a.check_id} ({a.severity}) on {printable(a.source)}{since}{held}: {_why(a)}"
        )
    lines.append("")
    if not status.backlog:
        lines.append("Outbox: empty")
    for b in status.backlog:
        oldest = f", oldest {rfc3339(b.oldest_pending)}" if b.oldest_pending else ""
        lines.append(
            f"Outbox {b.notifier}: {b.pending} pending ({b.held} held){oldest};"
            f" {b.delivered} delivered, {b.dropped} dropped, {b.rejected} rejected{b.given_up()}"
        )
    return "\n".join(lines) + "\n"
