"""The watchdog's own tables: alert states, the outbox, the run log and silences.

They live in `store.database` (default `watchdog`), are created on first use
with `CREATE ... IF NOT EXISTS`, and never touch a source table. Every
table is a `ReplacingMergeTree(version)`: a change is a new row with a
higher version, and readers see the latest row per key with `FINAL`, which
behaves the same on the embedded engine and on a server. Times are
`DateTime64(3, 'UTC')` written as aware datetimes and read back as epoch
milliseconds, so no client time zone can shift them. Data values are bound
parameters; the database name is an identifier validated by the config.

What the commands and the page read back from these tables is in
`alerts.records`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from alerts.lifecycle import Alert, AlertState
from checks.base import Report, Window
from watchdog.core import jsontext
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import from_ms

TS = "DateTime64(3, 'UTC')"

LIVE, REPLAY = "live", "replay"  # the kinds of run (`runs.kind`)

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
    "no_data_since": f"Nullable({TS})",  # start of the latest no_data windows (added later)
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
    "status": "LowCardinality(String)",  # pending | delivered | dropped | rejected | unconfirmed
    "attempts": "UInt32",
    "last_error": "String",  # one line, secrets masked
    "hold_until": f"Nullable({TS})",  # quiet hours: not before this, does not block others
    "retry_at": f"Nullable({TS})",  # Retry-After: not before this, later rows wait too
    "last_attempt_at": f"Nullable({TS})",
    "delivered_at": f"Nullable({TS})",
    "version": "UInt64",
    # Added later: a send in progress (set before the request, cleared with its outcome), and
    # how many sends a crash cut short before their outcome was recorded.
    "sending_at": f"Nullable({TS})",
    "unconfirmed": "UInt32",
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
    "kind": "LowCardinality(String)",  # live | replay ('' in rows written before it existed)
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

# The alert lease (alerts.lease): who runs the alert lifecycle and delivery of a source.
LEASES: dict[str, str] = {
    "source": "String",
    "term": "UInt64",  # each claim after a lease ended is the next term
    "holder": "String",  # host, command and process id of the claimant
    "claimed_at": "DateTime64(6, 'UTC')",  # the store's clock; the earliest claim of a term wins
    "expires_at": TS,  # the store's clock; renewed while the holder runs
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
    "leases": (
        LEASES,
        "ORDER BY (source, term, holder)\nTTL toDateTime(expires_at) + INTERVAL 7 DAY",
    ),
}

# Tables added after the first release: a store without them still counts as set up
# (`schema_exists`); the next write creates them (`ensure_schema`).
ADDED_TABLES = ("leases",)


# Columns added after a table was first released. A table created before gets them at its
# first write (`ensure_schema`); until then readers leave them out (`readable_columns`).
ADDED_COLUMNS: dict[str, tuple[str, ...]] = {
    "alert_state": ("no_data_since",),
    "runs": ("kind",),
    "outbox": ("sending_at", "unconfirmed"),
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
    """Create the database and the tables when they do not exist yet; add new columns.

    A table from an earlier version gets the columns added since by `ALTER TABLE ... ADD
    COLUMN IF NOT EXISTS`, sent only when one is missing: a store created by this version
    never needs the ALTER privilege. Where the ALTER is refused, the StoreError names the
    statement to run once as an administrator.
    """
    store.command(f"CREATE DATABASE IF NOT EXISTS `{settings.store.database}`")
    for name in TABLES:
        store.command(create_table_sql(settings, name))
    for name in ADDED_COLUMNS:
        for column in _missing_columns(store, settings, name):
            statement = (
                f"ALTER TABLE {table(settings, name)} ADD COLUMN IF NOT EXISTS"
                f" {column} {TABLES[name][0][column]}"
            )
            try:
                store.command(statement)
            except StoreError as exc:
                raise StoreError(
                    exc.url_masked,
                    f"{name} needs the column {column} of this version; run once, as a user"
                    f" who may alter it: {statement} ({exc.problem})",
                ) from None


def _missing_columns(store: Store, settings: Settings, name: str) -> list[str]:
    """The columns of ADDED_COLUMNS that table `name` lacks (it was created before them)."""
    added = ADDED_COLUMNS.get(name, ())
    if not added:
        return []
    found = store.query(
        "SELECT name FROM system.columns WHERE database = {db:String} AND table = {t:String}"
        " AND name IN {names:Array(String)}",
        {"db": settings.store.database, "t": name, "names": list(added)},
    ).rows
    present = {str(row[0]) for row in found}
    return [column for column in added if column not in present]


def readable_columns(store: Store, settings: Settings, name: str) -> dict[str, str]:
    """The columns of table `name` a reader may select: those added later only once present."""
    columns, _ = TABLES[name]
    missing = set(_missing_columns(store, settings, name))
    return {col: typ for col, typ in columns.items() if col not in missing}


def schema_exists(store: Store, settings: Settings) -> bool:
    """Whether the watchdog's tables exist (those of the first release: later ones may not yet)."""
    first = [name for name in TABLES if name not in ADDED_TABLES]
    found = store.query(
        "SELECT count() FROM system.tables WHERE database = {db:String} AND name IN {names:Array(String)}",
        {"db": settings.store.database, "names": first},
    ).rows
    return bool(found) and int(found[0][0]) == len(first)


def table_exists(store: Store, settings: Settings, name: str) -> bool:
    """Whether one of the watchdog's tables exists (read-only callers check before reading)."""
    found = store.query(
        "SELECT count() FROM system.tables WHERE database = {db:String} AND name = {t:String}",
        {"db": settings.store.database, "t": name},
    ).rows
    return bool(found) and int(found[0][0]) == 1


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


# --- alert states ---------------------------------------------------------------------------


def load_alerts(store: Store, settings: Settings, source: str) -> dict[str, Alert]:
    """The latest state of every alert of `source`, by check id."""
    rows = store.query(
        f"SELECT {select_list(ALERT_STATE)} FROM {table(settings, 'alert_state')} FINAL"
        " WHERE source = {source:String}",
        {"source": source},
    ).dicts()
    alerts = (alert_from_row(row) for row in rows)
    return {alert.check_id: alert for alert in alerts}


def alert_from_row(row: Mapping[str, Any]) -> Alert:
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
        no_data_since=from_ms_or_none(row.get("no_data_since")),  # absent before its migration
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
            utc(a.no_data_since),
        ]
        for a in alerts
    ]
    store.insert(table(settings, "alert_state"), rows, list(ALERT_STATE))


# --- the run log ----------------------------------------------------------------------------


def check_results_json(report: Report) -> dict[str, dict[str, Any]]:
    """Per check: status, value, target, severity, sample size, summary, evidence (ids only)."""
    checks: dict[str, dict[str, Any]] = report.to_json()["checks"]
    return checks


def judged(store: Store, settings: Settings, source: str, at: datetime) -> bool:
    """Whether the run log holds a run of `source` at `at` that read the source."""
    row = store.query(
        f"SELECT count() FROM {table(settings, 'runs')} FINAL WHERE source = {{source:String}}"
        " AND at = {at:DateTime64(3, 'UTC')} AND problem = ''",
        {"source": source, "at": utc(at)},
    ).rows
    return bool(row) and int(row[0][0]) > 0


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
    kind: str = LIVE,
) -> None:
    """Append one evaluation to the run log (the same source and `at` replace the earlier row).

    `kind` is `live` for the daemon's runs and `check --notify` at the current time,
    `replay` for `check --notify --at`: a replay never moves what live runs resume from.
    """
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
                jsontext.dumps(checks, ensure_ascii=False, sort_keys=True),
                notifications,
                kind,
                int(now.timestamp() * 1_000_000),
            ]
        ],
        list(RUNS),
    )
