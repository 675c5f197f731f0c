"""The outbox: every notification is written down before it is sent, marked after.

Guarantees (docs/spec.md section 8):

- never lost: a message is a `pending` row before any request goes out, and
  stays pending until the receiver accepted it; a run that cannot
  deliver leaves it for the next run, which tries it again, oldest first;
- at most one duplicate: only a crash between the send and the `delivered`
  mark resends a message (once, at the next run);
- in order: after a failure, that receiver's later rows wait for the next
  run too, so nothing overtakes an earlier message (a PagerDuty resolve
  never overtakes its trigger);
- bounded: within a run, retries (slack-sdk's handlers for Slack,
  `alerts.receivers.http` for webhook and PagerDuty, both honouring
  Retry-After) stop at `alerts.delivery_timeout`; a row undelivered for
  longer than `alerts.max_delivery_age` is dropped with an error line and
  counted; a permanent error (bad token, no channel) costs one request per
  run, reported in one line, never a retry storm; a message the service
  rejects as malformed is set aside (`rejected`) so it cannot block the rest.

Each receiver (Slack, stdout, a webhook, PagerDuty) has rows of its own
(the `notifier` column names it), and the guarantees hold per receiver: one
receiver's outage never holds up another's messages. Routes
(`alerts.routing`) decide which receivers get which announcements. Quiet
hours hold a receiver's non-critical announcements in their own row
(`hold_until`), which waits without blocking anything else.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from alerts.base import Deadline, DeliveryError, Failure, Message, Notifier, Timer
from alerts.facts import alert_facts
from alerts.lifecycle import Notification
from alerts.render import Templates, ordered
from alerts.routing import Router
from alerts.state import OUTBOX, from_ms_or_none, select_list, table, utc
from checks.base import Severity
from watchdog.core.durations import format_duration
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import from_ms, rfc3339

log = logging.getLogger(__name__)

PENDING, DELIVERED, DROPPED, REJECTED = "pending", "delivered", "dropped", "rejected"

_SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


@dataclass(frozen=True)
class OutboxRow:
    """One message for one notifier, and where its delivery stands."""

    id: str
    notifier: str
    source: str
    at: datetime
    created_at: datetime
    seq: int
    checks: tuple[str, ...]
    severity: str
    payload: str
    status: str = PENDING
    attempts: int = 0
    last_error: str = ""
    hold_until: datetime | None = None
    retry_at: datetime | None = None
    last_attempt_at: datetime | None = None
    delivered_at: datetime | None = None
    version: int = 1

    def message(self) -> Message:
        return Message.from_payload(self.id, json.loads(self.payload), self.severity)

    def values(self) -> list[Any]:
        return [
            self.id,
            self.notifier,
            self.source,
            utc(self.at),
            utc(self.created_at),
            self.seq,
            list(self.checks),
            self.severity,
            self.payload,
            self.status,
            self.attempts,
            self.last_error,
            utc(self.hold_until),
            utc(self.retry_at),
            utc(self.last_attempt_at),
            utc(self.delivered_at),
            self.version,
        ]


def message_id(source: str, at: datetime, notifier: str, part: str) -> str:
    """Deterministic: the same evaluation enqueued twice is one row, not two."""
    key = "\x00".join((source, rfc3339(at), notifier, part))
    return hashlib.sha256(key.encode()).hexdigest()[:24]


def _highest(notifications: Sequence[Notification]) -> Severity:
    return min((n.severity for n in notifications), key=lambda s: _SEVERITY_RANK[s])


def compose(
    notifications: Sequence[Notification],
    notifiers: Mapping[str, Notifier],
    templates: Templates,
    *,
    now: datetime,
    router: Router | None = None,
    link: str = "",
) -> list[OutboxRow]:
    """The outbox rows of one evaluation's announcements, for each receiver they route to.

    A receiver gets one row grouping the announcements routed to it, or, when
    it is `per_alert` (PagerDuty), one row per announcement. A receiver in
    quiet hours at `now` gets the critical ones now and the rest in rows held
    until its quiet hours end. `link` is the window's page (report.base_url),
    or '' for none.
    """
    if not notifications:
        return []
    first = notifications[0]
    route = router or Router()
    rendered: dict[tuple[int, ...], str] = {}

    def payload(items: Sequence[Notification]) -> str:
        key = tuple(id(n) for n in items)
        if key not in rendered:
            text = templates.message(items, link=link)
            message = Message(
                id="",
                text=text.text,
                blocks=text.blocks,
                plain=text.plain,
                alerts=tuple(alert_facts(n, link) for n in ordered(items)),
            )
            rendered[key] = json.dumps(message.payload(), ensure_ascii=False)
        return rendered[key]

    rows = []
    for name, notifier in notifiers.items():
        mine = [n for n in notifications if route.takes(name, n.severity.value, n.check_id)]
        quiet = notifier.quiet_hours
        parts: list[tuple[str, Sequence[Notification], datetime | None]]
        if quiet is not None and quiet.active(now):
            urgent = [n for n in mine if n.severity is Severity.CRITICAL]
            later = [n for n in mine if n.severity is not Severity.CRITICAL]
            parts = [("now", urgent, None), ("quiet", later, quiet.ends_after(now))]
        else:
            parts = [("now", mine, None)]
        if notifier.per_alert:
            parts = [
                (f"{part}/{n.check_id}", [n], hold)
                for part, items, hold in parts
                for n in ordered(items)
            ]
        for seq, (part, items, hold) in enumerate(parts):
            if not items:
                continue
            rows.append(
                OutboxRow(
                    id=message_id(first.source, first.at, name, part),
                    notifier=name,
                    source=first.source,
                    at=first.at,
                    created_at=now,
                    seq=seq,
                    checks=tuple(n.check_id for n in items),
                    severity=_highest(items).value,
                    payload=payload(items),
                    hold_until=hold,
                )
            )
    return rows


def enqueue(store: Store, settings: Settings, rows: Sequence[OutboxRow]) -> None:
    """Write the rows as pending, before anything is sent."""
    store.insert(table(settings, "outbox"), [r.values() for r in rows], list(OUTBOX))


def _update(store: Store, settings: Settings, row: OutboxRow, **changes: Any) -> OutboxRow:
    updated = replace(row, version=row.version + 1, **changes)
    store.insert(table(settings, "outbox"), [updated.values()], list(OUTBOX))
    return updated


def pending_rows(store: Store, settings: Settings) -> list[OutboxRow]:
    """Every pending row, oldest first (enqueue time, then order within the run)."""
    rows = store.query(
        f"SELECT {select_list(OUTBOX)} FROM {table(settings, 'outbox')} FINAL"
        " WHERE status = {pending:String} ORDER BY created_at, at, seq, id",
        {"pending": PENDING},
    ).dicts()
    return [
        OutboxRow(
            id=str(r["id"]),
            notifier=str(r["notifier"]),
            source=str(r["source"]),
            at=from_ms(int(r["at"])),
            created_at=from_ms(int(r["created_at"])),
            seq=int(r["seq"]),
            checks=tuple(str(c) for c in r["checks"]),
            severity=str(r["severity"]),
            payload=str(r["payload"]),
            status=str(r["status"]),
            attempts=int(r["attempts"]),
            last_error=str(r["last_error"]),
            hold_until=from_ms_or_none(r["hold_until"]),
            retry_at=from_ms_or_none(r["retry_at"]),
            last_attempt_at=from_ms_or_none(r["last_attempt_at"]),
            delivered_at=from_ms_or_none(r["delivered_at"]),
            version=int(r["version"]),
        )
        for r in rows
    ]


@dataclass(frozen=True)
class DeliveryReport:
    """What one delivery run did."""

    delivered: tuple[str, ...] = ()  # outbox ids, in the order they went out
    pending: int = 0  # still waiting: a failure, Retry-After, the deadline, no such notifier
    held: int = 0  # waiting for quiet hours to end
    dropped: int = 0  # older than alerts.max_delivery_age, given up
    rejected: int = 0  # refused as malformed, set aside
    errors: tuple[str, ...] = ()  # one line each, secrets masked


@dataclass
class _Tally:
    delivered: list[str] = field(default_factory=list)
    pending: int = 0
    held: int = 0
    dropped: dict[str, list[OutboxRow]] = field(default_factory=dict)
    rejected: int = 0
    failed: dict[str, DeliveryError] = field(default_factory=dict)  # notifier -> first failure
    waiting: dict[str, int] = field(default_factory=dict)  # notifier -> rows left behind
    errors: list[str] = field(default_factory=list)


def deliver_pending(
    store: Store,
    settings: Settings,
    notifiers: Mapping[str, Notifier],
    *,
    now: datetime,
    timer: Timer | None = None,
) -> DeliveryReport:
    """Deliver every pending row that may go now, oldest first, within the run's deadline."""
    deadline = Deadline(settings.alerts.delivery_timeout, timer)
    max_age = settings.alerts.max_delivery_age
    tally = _Tally()
    for row in pending_rows(store, settings):
        if row.created_at <= now - max_age:
            _update(store, settings, row, status=DROPPED, last_error="older than max_delivery_age")
            tally.dropped.setdefault(row.notifier, []).append(row)
            continue
        if row.hold_until is not None and row.hold_until > now:
            tally.held += 1
            continue
        notifier = notifiers.get(row.notifier)
        blocked = row.notifier in tally.failed or (row.retry_at is not None and row.retry_at > now)
        if notifier is None or blocked or deadline.expired():
            if notifier is not None and row.retry_at is not None and row.retry_at > now:
                tally.failed.setdefault(
                    row.notifier,
                    DeliveryError(row.notifier, f"rate limited until {rfc3339(row.retry_at)}"),
                )
            tally.pending += 1
            tally.waiting[row.notifier] = tally.waiting.get(row.notifier, 0) + 1
            continue
        _attempt(store, settings, notifier, row, deadline, now, tally)
    if deadline.expired() and tally.pending:
        tally.errors.append(
            f"alerts: delivery stopped after alerts.delivery_timeout"
            f" ({format_duration(settings.alerts.delivery_timeout)});"
            f" {tally.pending} notification(s) wait for the next run"
        )
    for name, error in tally.failed.items():
        left = tally.waiting.get(name, 0)
        kind = (
            "permanent error, fix the config"
            if error.failure is Failure.PERMANENT
            else "will retry"
        )
        described = notifiers[name].describe() if name in notifiers else name
        tally.errors.append(
            f"{described}: {error.problem} ({kind}; {left} notification(s) kept in the outbox"
            " for the next run)"
        )
    for name, rows in tally.dropped.items():
        oldest = min(r.created_at for r in rows)
        tally.errors.append(
            f"{name}: dropped {len(rows)} notification(s) undelivered for longer than"
            f" alerts.max_delivery_age ({format_duration(max_age)}; oldest from {rfc3339(oldest)})"
        )
    for line in tally.errors:  # returned to the caller, who reports them (the CLI on stderr)
        log.debug("%s", line)
    return DeliveryReport(
        delivered=tuple(tally.delivered),
        pending=tally.pending,
        held=tally.held,
        dropped=sum(len(rows) for rows in tally.dropped.values()),
        rejected=tally.rejected,
        errors=tuple(tally.errors),
    )


def _attempt(
    store: Store,
    settings: Settings,
    notifier: Notifier,
    row: OutboxRow,
    deadline: Deadline,
    now: datetime,
    tally: _Tally,
) -> None:
    try:
        try:
            notifier.send(row.message(), deadline)
        except DeliveryError:
            raise
        except Exception as exc:  # a notifier's bug must not end the run: retried later
            raise DeliveryError(notifier.name, f"{type(exc).__name__}: {exc}") from exc
    except DeliveryError as exc:
        attempted = {
            "attempts": row.attempts + 1,
            "last_error": exc.problem,
            "last_attempt_at": now,
        }
        if exc.failure is Failure.REJECTED:
            _update(store, settings, row, status=REJECTED, **attempted)
            tally.rejected += 1
            tally.errors.append(
                f"{notifier.describe()}: notification {row.id} set aside: {exc.problem}"
            )
            return
        retry_at = now + timedelta(seconds=exc.retry_after) if exc.retry_after else None
        _update(store, settings, row, retry_at=retry_at, **attempted)
        tally.failed[row.notifier] = exc
        tally.pending += 1
        tally.waiting[row.notifier] = tally.waiting.get(row.notifier, 0) + 1
        return
    _update(
        store,
        settings,
        row,
        status=DELIVERED,
        attempts=row.attempts + 1,
        last_error="",
        last_attempt_at=now,
        delivered_at=now,
    )
    tally.delivered.append(row.id)
