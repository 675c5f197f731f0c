"""What `status`, `alerts`, the daemon and the page read back from the watchdog's tables: the run
log, alert states with their outbox and silences, the outbox per receiver, one check's history;
empty while the tables do not exist, so a read-only user can run `status` on a fresh database
(docs/alerts.md#where-the-state-lives)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from alerts.codec import utc
from alerts.lifecycle import Alert
from alerts.rows import OutboxStatus, RunRecord
from alerts.silences import Silence, silenced_until, silences_in_force
from alerts.state import ALERT_STATE, RUNS, readable_columns, schema_exists, table
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import from_ms, rfc3339

__all__ = [
    "AlertRecord",
    "Backlog",
    "CheckPoint",
    "RunRecord",
    "alert_states",
    "check_history",
    "last_runs",
    "outbox_backlog",
]


def last_runs(
    store: Store, settings: Settings, n: int = 10, *, source: str | None = None
) -> list[RunRecord]:
    """The newest `n` evaluations of the source (default: the configured one), newest first."""
    if not schema_exists(store, settings):
        return []
    columns = readable_columns(store, settings, "runs")  # read-only: never migrates
    rows = store.query(
        f"SELECT {RUNS.select(columns)} FROM {table(settings, 'runs')} FINAL"
        " WHERE source = {source:String} ORDER BY at DESC LIMIT {n:UInt32}",
        {"source": source or settings.source.display_name, "n": max(0, n)},
    ).dicts()
    return [RUNS.decode(r) for r in rows]


@dataclass(frozen=True)
class CheckPoint:
    """One check in one evaluation: a point of its history chart."""

    at: datetime
    status: str
    value: float | None
    target: float | None
    severity: str


def check_history(
    store: Store,
    settings: Settings,
    check_id: str,
    n: int = 42,
    *,
    source: str | None = None,
    length: timedelta | None = None,
) -> list[CheckPoint]:
    """One check over the last `n` evaluations of the source, oldest first.

    `check_id` may be the pseudo check `store` (was the source readable).
    Evaluations in which the check did not appear are left out, and with
    `length` those of windows of another length (their values are not
    comparable: a 24h window counts six times what a 4h one does).
    """
    if not schema_exists(store, settings):
        return []
    sized = (
        " AND toUnixTimestamp64Milli(window_end) - toUnixTimestamp64Milli(window_start)"
        " = {length:Int64}"
        if length is not None
        else ""
    )
    # The JSON of each run row is read in ClickHouse; only the points come back.
    rows = store.query(
        "SELECT toUnixTimestamp64Milli(at) AS at_ms,"
        " JSONExtractString(checks, {check:String}, 'status') AS status,"
        " JSONExtract(checks, {check:String}, 'value', 'Nullable(Float64)') AS value,"
        " JSONExtract(checks, {check:String}, 'target', 'Nullable(Float64)') AS target,"
        " JSONExtractString(checks, {check:String}, 'severity') AS severity"
        f" FROM {table(settings, 'runs')} FINAL"
        f" WHERE source = {{source:String}} AND JSONHas(checks, {{check:String}}){sized}"
        " ORDER BY at DESC LIMIT {n:UInt32}",
        {
            "check": check_id,
            "source": source or settings.source.display_name,
            "n": max(0, n),
            "length": 0 if length is None else length // timedelta(milliseconds=1),
        },
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
    # The evaluation time of the newest message about it a receiver took (its outbox row
    # delivered): None when nothing was sent, with no receiver, a silence or only failures.
    # `alert.last_notified_at` is when it was last announced, whether sent or not.
    last_delivered: datetime | None = None


def alert_states(
    store: Store, settings: Settings, *, now: datetime | None = None
) -> list[AlertRecord]:
    """Every alert of every source in the database, firing first.

    `silenced_until` is the end of a silence in force at `now` (default: the
    one recorded at the alert's latest evaluation).
    """
    if not schema_exists(store, settings):
        return []
    columns = readable_columns(store, settings, "alert_state")  # read-only: never migrates
    rows = store.query(
        f"SELECT {ALERT_STATE.select(columns)} FROM {table(settings, 'alert_state')} FINAL"
        " ORDER BY source, check_id"
    ).dicts()
    # Per (source, check id): its pending outbox rows, and its newest delivered message.
    outbox = store.query(
        "SELECT source, check_id, countIf(status = {pending:String}) AS n,"
        " countIf(status = {delivered:String}) AS sent,"
        " toUnixTimestamp64Milli(maxIf(at, status = {delivered:String})) AS last_ms FROM"
        f" (SELECT source, checks, status, at FROM {table(settings, 'outbox')} FINAL)"
        " ARRAY JOIN checks AS check_id GROUP BY source, check_id",
        {"pending": OutboxStatus.PENDING.value, "delivered": OutboxStatus.DELIVERED.value},
    ).rows
    waiting = {(str(s), str(c)): int(n) for s, c, n, _, _ in outbox}
    delivered = {(str(s), str(c)): from_ms(int(ms)) for s, c, _, sent, ms in outbox if int(sent)}
    silences: Sequence[Silence] = silences_in_force(store, settings, now) if now is not None else ()
    records = []
    for row in rows:
        alert = ALERT_STATE.decode(row)
        until = alert.silenced_until
        if now is not None:
            until = silenced_until(silences, alert.check_id)
        key = (alert.source, alert.check_id)
        records.append(AlertRecord(alert, waiting.get(key, 0), until, delivered.get(key)))
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
    unconfirmed: int = 0  # given up after two sends a crash cut short (maybe posted)
    silenced: int = 0  # not sent: a silence added after their run covered all their alerts

    def given_up(self) -> str:
        """`, 1 unconfirmed (...)`, `, 2 silenced (...)`: the rarer outcomes, when there are any."""
        text = ""
        if self.unconfirmed:
            text += f", {self.unconfirmed} unconfirmed (its sends cut short twice by crashes)"
        if self.silenced:
            text += f", {self.silenced} silenced (a silence added before they were sent)"
        return text

    def to_json(self) -> dict[str, Any]:
        """The notifier's entry of `alerts --format json` and of `status --format json`."""
        return {
            "notifier": self.notifier,
            "pending": self.pending,
            "held": self.held,
            "oldest_pending": rfc3339(self.oldest_pending) if self.oldest_pending else None,
            "delivered": self.delivered,
            "dropped": self.dropped,
            "rejected": self.rejected,
            "unconfirmed": self.unconfirmed,
            "silenced": self.silenced,
        }


def outbox_backlog(
    store: Store, settings: Settings, *, now: datetime | None = None
) -> list[Backlog]:
    """Per notifier: pending, held (quiet hours at `now`), delivered, dropped, rejected rows."""
    if not schema_exists(store, settings):
        return []
    moment = utc(now) or datetime.now(UTC)
    rows = store.query(
        "SELECT notifier,"
        " countIf(status = {pending:String}) AS pending,"
        " countIf(status = {pending:String} AND hold_until > {now:DateTime64(3, 'UTC')}) AS held,"
        " toUnixTimestamp64Milli(minIf(created_at, status = {pending:String})) AS oldest,"
        " countIf(status = {delivered:String}) AS delivered,"
        " countIf(status = {dropped:String}) AS dropped,"
        " countIf(status = {rejected:String}) AS rejected,"
        " countIf(status = {unconfirmed:String}) AS unconfirmed,"
        " countIf(status = {silenced:String}) AS silenced"
        f" FROM {table(settings, 'outbox')} FINAL GROUP BY notifier ORDER BY notifier",
        {"now": moment, **{status.name.lower(): status.value for status in OutboxStatus}},
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
            unconfirmed=int(u),
            silenced=int(q),
        )
        for name, p, h, oldest, d, x, r, u, q in rows
    ]
