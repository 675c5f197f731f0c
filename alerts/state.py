"""The watchdog's own tables (alert states, the outbox, the run log, silences, leases), each a
codec over its row's dataclass, created on first use and given the columns added since
(docs/alerts.md#where-the-state-lives)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from alerts.codec import TS, Codec, Table, select_list, utc
from alerts.lifecycle import Alert
from alerts.rows import OutboxRow, RunKind, RunRecord, Silence, SloBucketRow
from checks.base import Report, Window
from checks.slo.budget import Sums
from watchdog.core.errors import StoreError
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import from_ms

__all__ = ["LIVE", "REPLAY", "TABLES", "select_list", "utc"]

LIVE, REPLAY = RunKind.LIVE, RunKind.REPLAY  # the kinds of run (`runs.kind`)

# Each table: its columns (name -> ClickHouse type, in DDL order) and the dataclass a row
# is; the DDL, the inserts and the reads all come from these (alerts.codec).
ALERT_STATE = Codec(
    "alert_state",
    {
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
        "inhibited_by": "String",  # the firing alert whose inhibit rule holds it (added later)
    },
    "ORDER BY (source, check_id)",
    added=("no_data_since", "inhibited_by"),
    model=Alert,
    extras=("updated_at",),
)

OUTBOX = Codec(
    "outbox",
    {
        "id": "String",
        "notifier": "LowCardinality(String)",
        "source": "String",
        "at": TS,
        "created_at": TS,
        "seq": "UInt32",
        "checks": "Array(String)",
        "severity": "LowCardinality(String)",
        "payload": "String",
        "status": "LowCardinality(String)",  # pending | delivered | dropped | rejected | unconfirmed
        "attempts": "UInt32",
        "last_error": "String",
        "hold_until": f"Nullable({TS})",
        "retry_at": f"Nullable({TS})",
        "last_attempt_at": f"Nullable({TS})",
        "delivered_at": f"Nullable({TS})",
        "version": "UInt64",
        # Added later: a send in progress (set before the request, cleared with its outcome),
        # and how many sends a crash cut short before their outcome was recorded.
        "sending_at": f"Nullable({TS})",
        "unconfirmed": "UInt32",
    },
    # Every version of a row expires together, so a deleted `delivered` version can
    # never uncover an older `pending` one (alerts.max_delivery_age is at most 30d).
    "ORDER BY (notifier, id)\nTTL toDateTime(created_at) + INTERVAL 90 DAY",
    added=("sending_at", "unconfirmed"),
    model=OutboxRow,
)

# One row per (source, evaluation time): evaluating the same `at` again replaces it.
RUNS = Codec(
    "runs",
    {
        "source": "String",
        "at": TS,
        "window_start": TS,
        "window_end": TS,
        "recorded_at": TS,
        "status": "LowCardinality(String)",
        "duration_s": "Nullable(Float64)",
        "problem": "String",
        "checks": "String",  # JSON: check id -> {status, value, target, severity, ...}
        "notifications": "UInt32",
        "kind": "LowCardinality(String)",  # live | replay ('' in rows written before it existed)
        "version": "UInt64",
    },
    "ORDER BY (source, at)\nTTL toDateTime(at) + INTERVAL 400 DAY",
    added=("kind",),
    model=RunRecord,
)

SILENCES = Codec(
    "silences",
    {
        "id": "String",
        "check_id": "String",  # a check id, `store`, or `all`
        "starts_at": TS,
        "ends_at": TS,
        "created_by": "String",
        "reason": "String",
        "created_at": TS,
        "removed_at": f"Nullable({TS})",
        "version": "UInt64",
    },
    "ORDER BY id",
    model=Silence,
)

# The alert lease (alerts.lease): who runs the alert lifecycle and delivery of a source.
# Its rows are written by INSERT ... SELECT with the store's own clock, and read as
# alerts.lease.LeaseInfo: no codec.
LEASES = Table(
    "leases",
    {
        "source": "String",
        "term": "UInt64",  # each claim after a lease ended is the next term
        "holder": "String",  # host, command and process id of the claimant
        "claimed_at": "DateTime64(6, 'UTC')",  # the store's clock; the earliest claim wins
        "expires_at": TS,  # the store's clock; renewed while the holder runs
        "version": "UInt64",
    },
    "ORDER BY (source, term, holder)\nTTL toDateTime(expires_at) + INTERVAL 7 DAY",
)

# The SLO ledger (docs/slo.md#the-ledger): one row per source, SLO and bucket, ordered by time
# within an SLO so that a window's buckets are one range read. Kept past the longest period
# (90d) and the longest burn window (3d).
SLO_BUCKETS = Codec(
    "slo_buckets",
    {
        "source": "String",
        "slo": "LowCardinality(String)",
        "start": TS,
        "good": "UInt64",
        "bad": "UInt64",
        "judged_at": TS,
        "version": "UInt64",
    },
    "ORDER BY (source, slo, start)\nTTL toDateTime(start) + INTERVAL 100 DAY",
    model=SloBucketRow,
    extras=("version",),
)

TABLES: dict[str, Table] = {
    t.name: t for t in (ALERT_STATE, OUTBOX, RUNS, SILENCES, LEASES, SLO_BUCKETS)
}

# Tables added after the first release: a store without them still counts as set up
# (`schema_exists`); the next write creates them (`ensure_schema`).
ADDED_TABLES = ("leases", "slo_buckets")


def table(settings: Settings, name: str) -> str:
    """The qualified name of one of our tables."""
    return f"`{settings.store.database}`.{name}"


def create_table_sql(settings: Settings, name: str) -> str:
    return TABLES[name].ddl(table(settings, name))


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
    for name, described in TABLES.items():
        for column in _missing_columns(store, settings, name):
            statement = (
                f"ALTER TABLE {table(settings, name)} ADD COLUMN IF NOT EXISTS"
                f" {column} {described.columns[column]}"
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
    """The columns added later that table `name` lacks (it was created before them)."""
    added = TABLES[name].added
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
    missing = set(_missing_columns(store, settings, name))
    return {col: typ for col, typ in TABLES[name].columns.items() if col not in missing}


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


# --- alert states ---------------------------------------------------------------------------


def load_alerts(store: Store, settings: Settings, source: str) -> dict[str, Alert]:
    """The latest state of every alert of `source`, by check id."""
    rows = store.query(
        f"SELECT {ALERT_STATE.select()} FROM {table(settings, 'alert_state')} FINAL"
        " WHERE source = {source:String}",
        {"source": source},
    ).dicts()
    alerts = (ALERT_STATE.decode(row) for row in rows)
    return {alert.check_id: alert for alert in alerts}


def save_alerts(store: Store, settings: Settings, alerts: Iterable[Alert], now: datetime) -> None:
    rows = [ALERT_STATE.row(a, updated_at=utc(now)) for a in alerts]
    store.insert(table(settings, "alert_state"), rows, list(ALERT_STATE.columns))


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
    kind: RunKind = LIVE,
) -> None:
    """Append one evaluation to the run log (the same source and `at` replace the earlier row).

    `kind` is `live` for the daemon's runs and `check --notify` at the current time,
    `replay` for `check --notify --at`: a replay never moves what live runs resume from.
    """
    run = RunRecord(
        source=source,
        at=window.at,
        window_start=window.start,
        window_end=window.end,
        recorded_at=now,
        status=status,
        duration_s=duration_s,
        problem=problem,
        checks=checks,
        notifications=notifications,
        kind=RunKind(kind),
        version=int(now.timestamp() * 1_000_000),
    )
    store.insert(table(settings, "runs"), [RUNS.row(run)], list(RUNS.columns))


# --- starting a source's alerts over (`alerts reset`) -------------------------------------

# What a source's alerting is made of: its alert states (what the next run is compared with,
# and the evaluation time it must be later than), its run log (where the daemon resumes) and
# its outbox (messages sent or waiting). Silences name checks, not sources, and stay; so does
# the alert lease, which expires on its own.
SOURCE_TABLES = ("alert_state", "runs", "outbox")


def _of_source(source: str | None) -> tuple[str, dict[str, Any]]:
    """The condition on a row of `source` (None: of every source) and its bound parameter."""
    if source is None:
        return "1 = 1", {}
    return "source = {source:String}", {"source": source}


def source_rows(store: Store, settings: Settings, source: str | None) -> dict[str, int]:
    """How many rows of `source` (None: of every source) each of SOURCE_TABLES holds."""
    where, parameters = _of_source(source)
    counts = {}
    for name in SOURCE_TABLES:
        if not table_exists(store, settings, name):
            counts[name] = 0
            continue
        found = store.query(
            f"SELECT count() FROM {table(settings, name)} FINAL WHERE {where}", parameters
        ).rows
        counts[name] = int(found[0][0]) if found else 0
    return counts


def clear_source(store: Store, settings: Settings, source: str | None) -> dict[str, int]:
    """Delete the alert states, run log and outbox of `source` (None: of every source) from
    the watchdog's own database; how many rows of each there were. The telemetry is never
    touched: it is not in these tables (docs/alerts.md#starting-over-alerts-reset)."""
    counts = source_rows(store, settings, source)
    where, parameters = _of_source(source)
    for name, count in counts.items():
        if count:  # a lightweight DELETE: the rows are gone for every read that follows
            store.command(f"DELETE FROM {table(settings, name)} WHERE {where}", parameters)
    return counts


# --- the SLO ledger -------------------------------------------------------------------------


def save_buckets(store: Store, settings: Settings, rows: Iterable[SloBucketRow]) -> None:
    """Record judged buckets (a bucket recorded again replaces the earlier row)."""
    encoded = [SLO_BUCKETS.row(r, version=int(r.judged_at.timestamp() * 1_000_000)) for r in rows]
    if encoded:
        store.insert(table(settings, "slo_buckets"), encoded, list(SLO_BUCKETS.columns))


def _ledger_range(
    settings: Settings, source: str, slos: Sequence[str], start: datetime, end: datetime
) -> tuple[str, dict[str, Any]]:
    """The FROM clause of the ledger's rows of `slos` of `source` starting in `[start, end)`,
    each bucket once (FINAL: the newest judging), and its parameters."""
    sql = (
        f" FROM {table(settings, 'slo_buckets')} FINAL WHERE source = {{source:String}}"
        " AND slo IN {slos:Array(String)} AND start >= {start:DateTime64(3, 'UTC')}"
        " AND start < {end:DateTime64(3, 'UTC')}"
    )
    return sql, {"source": source, "slos": list(slos), "start": utc(start), "end": utc(end)}


def load_ledger(
    store: Store,
    settings: Settings,
    source: str,
    slos: Sequence[str],
    start: datetime,
    end: datetime,
) -> dict[str, list[SloBucketRow]] | None:
    """The judged buckets of each of `slos` of `source` starting in `[start, end)`, oldest
    first, by SLO (every name present); None when the ledger does not exist yet. One range
    read of the table for all of them (a burn tick reads the ledger twice)."""
    if not table_exists(store, settings, "slo_buckets"):
        return None
    found: dict[str, list[SloBucketRow]] = {name: [] for name in slos}
    if not slos:
        return found
    within, params = _ledger_range(settings, source, slos, start, end)
    rows = store.query(
        "SELECT slo, toUnixTimestamp64Milli(start), good, bad, toUnixTimestamp64Milli(judged_at)"
        f"{within} ORDER BY slo, start",
        params,
    ).rows
    # Each time once: the SLOs share their bucket starts, and a pass judges at one time.
    times: dict[int, datetime] = {}
    for slo, begins, good, bad, judged in rows:
        begun = times.get(begins) or times.setdefault(begins, from_ms(begins))
        judged_at = times.get(judged) or times.setdefault(judged, from_ms(judged))
        found[slo].append(SloBucketRow(source, slo, begun, good, bad, judged_at))
    return found


def ledger_starts(
    store: Store,
    settings: Settings,
    source: str,
    slos: Sequence[str],
    start: datetime,
    end: datetime,
) -> dict[str, set[int]] | None:
    """The starts (epoch milliseconds) of the judged buckets of each of `slos` of `source` in
    `[start, end)`, by SLO (every name present); None when the ledger does not exist yet. What
    a catch-up asks before it judges: one row per SLO."""
    if not table_exists(store, settings, "slo_buckets"):
        return None
    found: dict[str, set[int]] = {name: set() for name in slos}
    within, params = _ledger_range(settings, source, slos, start, end)
    rows = store.query(
        f"SELECT slo, groupArray(toUnixTimestamp64Milli(start)){within} GROUP BY slo", params
    ).rows
    for slo, starts in rows:
        found[slo] = set(starts)
    return found


def ledger_sums(
    store: Store,
    settings: Settings,
    source: str,
    slos: Mapping[str, Sequence[timedelta]],
    at: datetime,
) -> dict[str, dict[timedelta, Sums]] | None:
    """For each SLO of `slos`, the sums of its judged buckets over each of its window lengths
    ending at `at` (`checks.slo.budget.Sums`; a window with no judged bucket is left out), by
    SLO and length; None when the ledger does not exist yet. One aggregation in the store: a
    burn tick reads a few rows, not a period of buckets."""
    if not table_exists(store, settings, "slo_buckets"):
        return None
    found: dict[str, dict[timedelta, Sums]] = {name: {} for name in slos}
    wanted = {name: {int(w.total_seconds() * 1000) for w in ws} for name, ws in slos.items()}
    every = sorted(set().union(*wanted.values()))
    if not every:
        return found
    within, params = _ledger_range(
        settings, source, list(slos), at - timedelta(milliseconds=every[-1]), at
    )
    rows = store.query(
        f"SELECT slo, w, sum(good), sum(bad), count() FROM (SELECT slo, start, good, bad{within})"
        " ARRAY JOIN {lengths:Array(Int64)} AS w"
        " WHERE toUnixTimestamp64Milli(start) >= {at_ms:Int64} - w GROUP BY slo, w",
        {**params, "lengths": every, "at_ms": int(at.timestamp() * 1000)},
    ).rows
    for slo, w, good, bad, count in rows:
        if int(w) in wanted[slo]:
            found[slo][timedelta(milliseconds=int(w))] = Sums(int(good), int(bad), int(count))
    return found


def load_buckets(
    store: Store, settings: Settings, source: str, slo: str, start: datetime, end: datetime
) -> list[SloBucketRow]:
    """The judged buckets of `slo` of `source` starting in `[start, end)`, oldest first (none
    when the ledger does not exist yet)."""
    return (load_ledger(store, settings, source, [slo], start, end) or {}).get(slo, [])
