"""The watchdog's own tables: alert states, the outbox, the run log and silences.

They live in `store.database` (default `watchdog`), are created on first use
with `CREATE ... IF NOT EXISTS`, and never touch a source table. Every
table is a `ReplacingMergeTree(version)`: a change is a new row with a
higher version, and readers see the latest row per key with `FINAL`, which
behaves the same on the embedded engine and on a server. Times are
`DateTime64(3, 'UTC')` written as aware datetimes and read back as epoch
milliseconds, so no client time zone can shift them. Data values are bound
parameters; the database name is an identifier validated by the config.

Read helpers for the daemon, `status` and the HTML page:

- `last_runs(store, settings, n)`: the newest evaluations of the configured
  source, newest first (`RunRecord`).
- `alert_states(store, settings)`: every alert of every source in the
  database, with its pending outbox rows and any silence (`AlertRecord`).
- `outbox_backlog(store, settings)`: per notifier, what is pending, held,
  dropped and rejected (`Backlog`).
- `check_history(store, settings, check_id, n)`: one check's status, value
  and target over the last `n` evaluations, oldest first (`CheckPoint`).

Each read helper returns empty results while the tables do not exist yet, so
a read-only user can run `status` against a fresh database.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from alerts.lifecycle import STORE_CHECK, Alert, AlertState
from checks.base import Report, Window, from_ms
from checks.sources import PRESETS
from watchdog.core.settings import Settings
from watchdog.core.store import Store

TS = "DateTime64(3, 'UTC')"

# name -> ClickHouse type; the DDL, the inserts and the reads all come from these.
ALERT_STATE: dict[str, str] = {
    "source": "String",
    "check_id": "String",
    "state": "LowCardinality(String)",  # ok | firing
    "cause": "LowCardinality(String)",  # what the latest firing episode fired for
    "streak": "UInt32",  # consecutive breached/error evaluations (pending_runs)
    "since": f"Nullable({TS})",  # when the current state began
    "fired_at": f"Nullable({TS})",  # start of the latest firing episode
    "last_at": TS,  # evaluation time of the latest evaluation applied
    "last_status": "LowCardinality(String)",
    "last_value": "Nullable(Float64)",
    "target": "Nullable(Float64)",
    "severity": "LowCardinality(String)",
    "summary": "String",
    "notified_state": "LowCardinality(String)",  # what chat was last told
    "last_notified_at": f"Nullable({TS})",
    "silenced_until": f"Nullable({TS})",
    "updated_at": TS,  # wall clock of the write
    "version": "UInt64",
}

OUTBOX: dict[str, str] = {
    "id": "String",  # deterministic: source, evaluation time, notifier, part
    "notifier": "LowCardinality(String)",
    "source": "String",
    "at": TS,  # evaluation time of the run that wrote it
    "created_at": TS,  # wall clock when enqueued; delivery goes oldest first
    "seq": "UInt32",  # order within one run
    "checks": "Array(String)",  # the check ids it announces
    "severity": "LowCardinality(String)",  # the highest among them
    "payload": "String",  # JSON: text, blocks, plain
    "status": "LowCardinality(String)",  # pending | delivered | dropped | rejected
    "attempts": "UInt32",
    "last_error": "String",  # one line, secrets masked
    "hold_until": f"Nullable({TS})",  # quiet hours: not before this, does not block others
    "retry_at": f"Nullable({TS})",  # Retry-After: not before this, later rows wait too
    "last_attempt_at": f"Nullable({TS})",
    "delivered_at": f"Nullable({TS})",
    "version": "UInt64",
}

RUNS: dict[str, str] = {
    "source": "String",
    "at": TS,  # evaluation time
    "window_start": TS,
    "window_end": TS,
    "recorded_at": TS,  # wall clock
    "status": "LowCardinality(String)",  # ok | breached | error, or the daemon's run_status
    "duration_s": "Nullable(Float64)",
    "problem": "String",  # why the source could not be read ('' when it was)
    "checks": "String",  # JSON: check id -> {status, value, target, severity, sample_size, ...}
    "notifications": "UInt32",  # announcements this run enqueued
    "version": "UInt64",
}

SILENCES: dict[str, str] = {
    "id": "String",
    "check_id": "String",  # a check id, `store`, or `all`
    "starts_at": TS,
    "ends_at": TS,
    "created_by": "String",
    "reason": "String",
    "created_at": TS,
    "removed_at": f"Nullable({TS})",
    "version": "UInt64",
}

TABLES: dict[str, tuple[dict[str, str], str]] = {
    "alert_state": (ALERT_STATE, "ORDER BY (source, check_id)"),
    "outbox": (
        OUTBOX,
        # Every version of a row expires together, so a deleted `delivered` version can
        # never uncover an older `pending` one (alerts.max_delivery_age is at most 30d).
        "ORDER BY (notifier, id)\nTTL toDateTime(created_at) + INTERVAL 90 DAY",
    ),
    # One row per (source, evaluation time): evaluating the same `at` again replaces it.
    "runs": (RUNS, "ORDER BY (source, at)\nTTL toDateTime(at) + INTERVAL 400 DAY"),
    "silences": (SILENCES, "ORDER BY id"),
}


def table(settings: Settings, name: str) -> str:
    """The qualified name of one of our tables."""
    return f"`{settings.store.database}`.{name}"


def create_table_sql(settings: Settings, name: str) -> str:
    columns, tail = TABLES[name]
    body = ",\n".join(f"    {col} {typ}" for col, typ in columns.items())
    return (
        f"CREATE TABLE IF NOT EXISTS {table(settings, name)}\n(\n{body}\n)\n"
        f"ENGINE = ReplacingMergeTree(version)\n{tail}"
    )


def ensure_schema(store: Store, settings: Settings) -> None:
    """Create the database and the four tables when they do not exist yet."""
    store.command(f"CREATE DATABASE IF NOT EXISTS `{settings.store.database}`")
    for name in TABLES:
        store.command(create_table_sql(settings, name))


def schema_exists(store: Store, settings: Settings) -> bool:
    found = store.query(
        "SELECT count() FROM system.tables WHERE database = {db:String} AND name IN {names:Array(String)}",
        {"db": settings.store.database, "names": list(TABLES)},
    ).rows
    return bool(found) and int(found[0][0]) == len(TABLES)


def select_list(columns: Mapping[str, str]) -> str:
    """Columns to select, times as epoch milliseconds (read back with `row_value`)."""
    return ", ".join(
        f"toUnixTimestamp64Milli({col}) AS {col}" if "DateTime64" in typ else col
        for col, typ in columns.items()
    )


def utc(moment: datetime | None) -> datetime | None:
    return moment.astimezone(UTC) if moment is not None else None


def from_ms_or_none(value: Any) -> datetime | None:
    return from_ms(int(value)) if value is not None else None


def source_name(settings: Settings) -> str:
    """The source's name as reports and alerts show it (the table, unless named)."""
    source = settings.source
    return source.name or source.table or PRESETS[source.preset].default_table


# --- alert states ---------------------------------------------------------------------------


def load_alerts(store: Store, settings: Settings, source: str) -> dict[str, Alert]:
    """The latest state of every alert of `source`, by check id."""
    rows = store.query(
        f"SELECT {select_list(ALERT_STATE)} FROM {table(settings, 'alert_state')} FINAL"
        " WHERE source = {source:String}",
        {"source": source},
    ).dicts()
    alerts = (_alert(row) for row in rows)
    return {alert.check_id: alert for alert in alerts}


def _alert(row: Mapping[str, Any]) -> Alert:
    return Alert(
        source=str(row["source"]),
        check_id=str(row["check_id"]),
        state=AlertState(row["state"]),
        cause=str(row["cause"]),
        streak=int(row["streak"]),
        since=from_ms_or_none(row["since"]),
        fired_at=from_ms_or_none(row["fired_at"]),
        last_at=from_ms_or_none(row["last_at"]),
        last_status=str(row["last_status"]),
        last_value=row["last_value"],
        target=row["target"],
        severity=str(row["severity"]),
        summary=str(row["summary"]),
        notified_state=AlertState(row["notified_state"]),
        last_notified_at=from_ms_or_none(row["last_notified_at"]),
        silenced_until=from_ms_or_none(row["silenced_until"]),
        version=int(row["version"]),
    )


def save_alerts(store: Store, settings: Settings, alerts: Iterable[Alert], now: datetime) -> None:
    rows = [
        [
            a.source,
            a.check_id,
            a.state.value,
            a.cause,
            a.streak,
            utc(a.since),
            utc(a.fired_at),
            utc(a.last_at),
            a.last_status,
            a.last_value,
            a.target,
            a.severity,
            a.summary,
            a.notified_state.value,
            utc(a.last_notified_at),
            utc(a.silenced_until),
            utc(now),
            a.version,
        ]
        for a in alerts
    ]
    store.insert(table(settings, "alert_state"), rows, list(ALERT_STATE))


# --- the run log ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RunRecord:
    """One evaluation as the run log keeps it."""

    source: str
    at: datetime
    window_start: datetime
    window_end: datetime
    recorded_at: datetime
    status: str
    duration_s: float | None
    problem: str
    checks: Mapping[str, Mapping[str, Any]]
    notifications: int


def check_results_json(report: Report) -> dict[str, dict[str, Any]]:
    """Per check: status, value, target, severity, sample size, summary, evidence (ids only)."""
    checks: dict[str, dict[str, Any]] = report.to_json()["checks"]
    return checks


def record_run(
    store: Store,
    settings: Settings,
    *,
    source: str,
    window: Window,
    now: datetime,
    status: str,
    checks: Mapping[str, Mapping[str, Any]],
    duration_s: float | None = None,
    problem: str = "",
    notifications: int = 0,
) -> None:
    """Append one evaluation to the run log (the same source and `at` replace the earlier row)."""
    store.insert(
        table(settings, "runs"),
        [
            [
                source,
                utc(window.at),
                utc(window.start),
                utc(window.end),
                utc(now),
                status,
                duration_s,
                problem,
                json.dumps(checks, ensure_ascii=False, sort_keys=True),
                notifications,
                int(now.timestamp() * 1_000_000),
            ]
        ],
        list(RUNS),
    )


def last_runs(
    store: Store, settings: Settings, n: int = 10, *, source: str | None = None
) -> list[RunRecord]:
    """The newest `n` evaluations of the source (default: the configured one), newest first."""
    if not schema_exists(store, settings):
        return []
    rows = store.query(
        f"SELECT {select_list(RUNS)} FROM {table(settings, 'runs')} FINAL"
        " WHERE source = {source:String} ORDER BY at DESC LIMIT {n:UInt32}",
        {"source": source or source_name(settings), "n": max(0, n)},
    ).dicts()
    return [
        RunRecord(
            source=str(r["source"]),
            at=from_ms(int(r["at"])),
            window_start=from_ms(int(r["window_start"])),
            window_end=from_ms(int(r["window_end"])),
            recorded_at=from_ms(int(r["recorded_at"])),
            status=str(r["status"]),
            duration_s=r["duration_s"],
            problem=str(r["problem"]),
            checks=json.loads(r["checks"] or "{}"),
            notifications=int(r["notifications"]),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class CheckPoint:
    """One check in one evaluation: a point of its history chart."""

    at: datetime
    status: str
    value: float | None
    target: float | None
    severity: str


def check_history(
    store: Store, settings: Settings, check_id: str, n: int = 42, *, source: str | None = None
) -> list[CheckPoint]:
    """One check over the last `n` evaluations of the source, oldest first.

    `check_id` may be the pseudo check `store` (was the source readable).
    Evaluations in which the check did not appear are left out.
    """
    if not schema_exists(store, settings):
        return []
    # The JSON of each run row is read in ClickHouse; only the points come back.
    rows = store.query(
        "SELECT toUnixTimestamp64Milli(at) AS at_ms,"
        " JSONExtractString(checks, {check:String}, 'status') AS status,"
        " JSONExtract(checks, {check:String}, 'value', 'Nullable(Float64)') AS value,"
        " JSONExtract(checks, {check:String}, 'target', 'Nullable(Float64)') AS target,"
        " JSONExtractString(checks, {check:String}, 'severity') AS severity"
        f" FROM {table(settings, 'runs')} FINAL"
        " WHERE source = {source:String} AND JSONHas(checks, {check:String})"
        " ORDER BY at DESC LIMIT {n:UInt32}",
        {"check": check_id, "source": source or source_name(settings), "n": max(0, n)},
    ).rows
    return [
        CheckPoint(from_ms(int(at)), str(status), value, target, str(severity))
        for at, status, value, target, severity in reversed(rows)
    ]


# --- what `alerts` and `status` list ---------------------------------------------------------


@dataclass(frozen=True)
class AlertRecord:
    """An alert's state with what waits for it: outbox rows and any silence."""

    alert: Alert
    pending_outbox: int
    silenced_until: datetime | None


def alert_states(
    store: Store, settings: Settings, *, now: datetime | None = None
) -> list[AlertRecord]:
    """Every alert of every source in the database, firing first.

    `silenced_until` is the end of a silence in force at `now` (default: the
    one recorded at the alert's latest evaluation).
    """
    if not schema_exists(store, settings):
        return []
    rows = store.query(
        f"SELECT {select_list(ALERT_STATE)} FROM {table(settings, 'alert_state')} FINAL"
        " ORDER BY source, check_id"
    ).dicts()
    # Pending outbox rows per (source, check id).
    pending = store.query(
        "SELECT source, check_id, count() AS n FROM"
        f" (SELECT source, checks FROM {table(settings, 'outbox')} FINAL"
        "  WHERE status = {pending:String})"
        " ARRAY JOIN checks AS check_id GROUP BY source, check_id",
        {"pending": "pending"},
    ).rows
    waiting = {(str(s), str(c)): int(n) for s, c, n in pending}
    silences: Sequence[Any] = ()
    if now is not None:
        from alerts.silences import active_silences

        silences = active_silences(store, settings, now)
    records = []
    for row in rows:
        alert = _alert(row)
        until = alert.silenced_until
        if now is not None:
            ends = [s.ends_at for s in silences if s.covers(alert.check_id)]
            until = max(ends) if ends else None
        records.append(AlertRecord(alert, waiting.get((alert.source, alert.check_id), 0), until))
    records.sort(key=lambda r: (not r.alert.firing, r.alert.source, r.alert.check_id))
    return records


@dataclass(frozen=True)
class Backlog:
    """One notifier's outbox: what waits, what was given up."""

    notifier: str
    pending: int  # waiting for delivery (including held ones)
    held: int  # of those, held by quiet hours until later
    oldest_pending: datetime | None
    delivered: int
    dropped: int  # older than alerts.max_delivery_age, never delivered
    rejected: int  # refused by the chat service as malformed


def outbox_backlog(
    store: Store, settings: Settings, *, now: datetime | None = None
) -> list[Backlog]:
    """Per notifier: pending, held (quiet hours at `now`), delivered, dropped, rejected rows."""
    if not schema_exists(store, settings):
        return []
    moment = utc(now) or datetime.now(UTC)
    rows = store.query(
        "SELECT notifier,"
        " countIf(status = 'pending') AS pending,"
        " countIf(status = 'pending' AND hold_until > {now:DateTime64(3, 'UTC')}) AS held,"
        " toUnixTimestamp64Milli(minIf(created_at, status = 'pending')) AS oldest,"
        " countIf(status = 'delivered') AS delivered,"
        " countIf(status = 'dropped') AS dropped,"
        " countIf(status = 'rejected') AS rejected"
        f" FROM {table(settings, 'outbox')} FINAL GROUP BY notifier ORDER BY notifier",
        {"now": moment},
    ).rows
    return [
        Backlog(
            notifier=str(name),
            pending=int(p),
            held=int(h),
            oldest_pending=from_ms(int(oldest)) if int(p) else None,
            delivered=int(d),
            dropped=int(x),
            rejected=int(r),
        )
        for name, p, h, oldest, d, x, r in rows
    ]


__all__ = [
    "STORE_CHECK",
    "AlertRecord",
    "Backlog",
    "CheckPoint",
    "RunRecord",
    "alert_states",
    "check_history",
    "ensure_schema",
    "last_runs",
    "outbox_backlog",
    "source_name",
]
