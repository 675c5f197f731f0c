"""The outbox: every notification written down before it is sent, one row per message and
receiver (per alert for PagerDuty), marked before each send and after it, so that none is lost
and none is sent more than twice (docs/alerts.md#the-outbox-never-lost-at-most-one-duplicate);
the sending itself is alerts.delivery's."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from alerts.base import (
    AlertFacts,
    DeliveryError,
    Failure,
    Message,
    Notifier,
    Timer,
    UnreadablePayload,
)
from alerts.delivery import Halt, LaneWork, deliver_lanes
from alerts.facts import alert_facts
from alerts.lease import Guard, LeaseLost
from alerts.lifecycle import Kind, Notification, muted
from alerts.render import Templates, ordered, read_stored_context, stored_context, templates
from alerts.routing import Router
from alerts.rows import OutboxRow, OutboxStatus
from alerts.silences import silenced_until, silences_in_force
from alerts.state import OUTBOX, load_alerts, save_alerts, table
from checks.base import Severity
from watchdog.core.durations import format_duration
from watchdog.core.settings import Settings
from watchdog.core.store import Store
from watchdog.core.times import rfc3339

log = logging.getLogger(__name__)

MAX_UNCONFIRMED = 2  # sends cut short before a message is given up: at most one duplicate

_SEVERITY_RANK = {Severity.CRITICAL: 0, Severity.WARNING: 1, Severity.INFO: 2}


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
    key: str = "",
    kinds: Mapping[str, str] | None = None,
    refreshing: frozenset[str] = frozenset(),
) -> list[OutboxRow]:
    """The outbox rows of one evaluation's announcements, for each receiver they route to.

    A receiver gets one row grouping the announcements routed to it, or, when
    it is `per_alert` (PagerDuty), one row per announcement. A receiver in
    quiet hours at `now` gets the critical ones now and the rest in rows held
    until its quiet hours end. `link` is the window's page (report.base_url),
    or '' for none. `key` sets apart the rows of announcements made at the same
    evaluation time by another path (the `run` alert's), so their ids differ.
    `kinds` names each check's kind (check id -> `coverage`, ...); refreshes (firing
    alerts re-sent, not news) go only to the receivers named in `refreshing`.
    """
    if not notifications:
        return []
    first = notifications[0]
    route = router or Router()
    rendered: dict[tuple[int, ...], str] = {}

    def payload(items: Sequence[Notification]) -> str:
        key = tuple(id(n) for n in items)
        if key not in rendered:
            facts = tuple(
                alert_facts(n, link, (kinds or {}).get(n.check_id, "")) for n in ordered(items)
            )
            rendered[key] = _payload(templates, stored_context(items, link), facts)
        return rendered[key]

    rows = []
    for name, notifier in notifiers.items():
        mine = [
            n
            for n in notifications
            if route.takes(name, n.severity.value, n.check_id)
            and (n.kind is not Kind.REFRESH or name in refreshing)
        ]
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
                    id=message_id(first.source, first.at, name, key + part),
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


def _payload(templates: Templates, stored: dict[str, Any], facts: tuple[AlertFacts, ...]) -> str:
    """An outbox row's payload: the message rendered from `stored` (`stored_context`), the
    alerts' facts, and `stored` itself, from which a send may render it again."""
    text = templates.stored_message(stored)
    message = Message(id="", text=text.text, blocks=text.blocks, plain=text.plain, alerts=facts)
    return json.dumps({**message.payload(), "context": stored}, ensure_ascii=False)


def enqueue(store: Store, settings: Settings, rows: Sequence[OutboxRow]) -> None:
    """Write the rows as pending, before anything is sent."""
    store.insert(table(settings, "outbox"), [OUTBOX.row(r) for r in rows], list(OUTBOX.columns))


def _update(store: Store, settings: Settings, row: OutboxRow, **changes: Any) -> OutboxRow:
    updated = replace(row, version=row.version + 1, **changes)
    store.insert(table(settings, "outbox"), [OUTBOX.row(updated)], list(OUTBOX.columns))
    return updated


def pending_rows(store: Store, settings: Settings, source: str | None = None) -> list[OutboxRow]:
    """Every pending row (of `source`, or of every source), oldest first (enqueue time, then
    order within the run)."""
    of_source = "" if source is None else " AND source = {source:String}"
    rows = store.query(
        f"SELECT {OUTBOX.select()} FROM {table(settings, 'outbox')} FINAL"
        f" WHERE status = {{pending:String}}{of_source} ORDER BY created_at, at, seq, id",
        {"pending": OutboxStatus.PENDING.value, "source": source or ""},
    ).dicts()
    return [OUTBOX.decode(r) for r in rows]


@dataclass(frozen=True)
class DeliveryReport:
    """What one delivery run did."""

    delivered: tuple[str, ...] = ()  # outbox ids, in the order they went out
    pending: int = 0  # still waiting: a failure, Retry-After, the deadline, no such notifier
    held: int = 0  # waiting for quiet hours to end
    dropped: int = 0  # older than alerts.max_delivery_age, given up
    rejected: int = 0  # refused as malformed, set aside
    unconfirmed: int = 0  # given up after two sends cut short by crashes (maybe posted)
    silenced: int = 0  # not sent: a silence added since their run covers all their alerts
    errors: tuple[str, ...] = ()  # one line each, secrets masked
    given_up: tuple[str, ...] = ()  # the lines of `errors` about messages given up for good


@dataclass
class _Tally:
    delivered: list[str] = field(default_factory=list)
    pending: int = 0
    held: int = 0
    dropped: dict[str, list[OutboxRow]] = field(default_factory=dict)
    rejected: int = 0
    unconfirmed: dict[str, list[OutboxRow]] = field(default_factory=dict)
    silenced: int = 0
    failed: dict[str, DeliveryError] = field(default_factory=dict)  # notifier -> first failure
    waiting: dict[str, int] = field(default_factory=dict)  # notifier -> rows left behind
    errors: list[str] = field(default_factory=list)
    given_up: list[str] = field(default_factory=list)


# How delivery reaches the store: a store held open, or a way to open it for each use.
StoreAccess = Store | Callable[[], AbstractContextManager[Store]]


def deliver_pending(
    store: StoreAccess,
    settings: Settings,
    notifiers: Mapping[str, Notifier],
    *,
    now: datetime,
    timer: Timer | None = None,
    source: str | None = None,
    guard: Guard | None = None,
) -> DeliveryReport:
    """Deliver every pending row (of `source`) that may go now, each receiver's oldest
    first, every receiver at once (alerts.delivery), within `alerts.delivery_timeout`;
    `guard` (the alert lease's check) runs before each send.

    Given a way to open the store rather than a store, delivery holds it only while
    it reads or writes (the rows to send, each send's mark and outcome), never while
    a receiver answers: a process that takes turns with others on an embedded store
    (the daemon's OTLP loads) is not held up by a slow receiver.
    """
    with _opened(store) as held:
        tally, work = _plan(held, settings, notifiers, now, source)

    marked: dict[str, OutboxRow] = {}

    def before(row: OutboxRow, message: Message) -> Message | None:
        try:
            if guard is not None:
                guard()
        except LeaseLost as lost:
            tally.errors.append(f"alerts: {lost}; its holder delivers what is left")
            raise Halt from None
        with _opened(store) as held:
            try:
                sent = _unsilenced(held, settings, row, message, now)
            except UnreadablePayload as exc:  # its context, read only to leave alerts out
                _reject(held, settings, notifiers[row.notifier], row, f"cannot read {exc}", tally)
                return None
            if sent is None:
                tally.silenced += 1
                return None
            # Marked before the request goes out: a crash from here on leaves the mark behind.
            marked[row.id] = _update(
                held, settings, sent, sending_at=now, attempts=row.attempts + 1, last_attempt_at=now
            )
        return message if sent is row else sent.message()

    def after(row: OutboxRow, error: DeliveryError | None) -> bool:
        with _opened(store) as held:
            notifier = notifiers[row.notifier]
            return _record(held, settings, notifier, marked[row.id], error, now, tally)

    lanes = deliver_lanes(
        {name: LaneWork(notifiers[name], rows) for name, rows in work.items()},
        settings.alerts.delivery_timeout,
        timer=timer,
        before=before,
        after=after,
    )
    for rows in lanes.left.values():
        for row in rows:
            _wait(tally, row)
    order = {row.id: index for index, (row, _) in enumerate(p for w in work.values() for p in w)}
    tally.delivered.sort(key=lambda row_id: order.get(row_id, 0))
    return _report(settings, notifiers, lanes.timed_out, tally)


def _plan(
    store: Store,
    settings: Settings,
    notifiers: Mapping[str, Notifier],
    now: datetime,
    source: str | None,
) -> tuple[_Tally, dict[str, list[tuple[OutboxRow, Message]]]]:
    """The rows that may go now, by receiver; those that cannot, settled or counted."""
    tally = _Tally()
    work: dict[str, list[tuple[OutboxRow, Message]]] = {}
    for found in pending_rows(store, settings, source):
        row = _settle_cut_send(store, settings, found, tally)
        if row is None:
            continue
        if row.created_at <= now - settings.alerts.max_delivery_age:
            _update(
                store,
                settings,
                row,
                status=OutboxStatus.DROPPED,
                last_error="older than max_delivery_age",
            )
            tally.dropped.setdefault(row.notifier, []).append(row)
            continue
        if row.hold_until is not None and row.hold_until > now:
            tally.held += 1
            continue
        waits_until = row.waits_until()
        rate_limited = waits_until is not None and waits_until > now
        if row.notifier not in notifiers or row.notifier in tally.failed or rate_limited:
            if row.notifier in notifiers and waits_until is not None and rate_limited:
                tally.failed.setdefault(
                    row.notifier,
                    DeliveryError(row.notifier, f"rate limited until {rfc3339(waits_until)}"),
                )
            _wait(tally, row)
            continue
        try:
            message = row.message()
        except UnreadablePayload as exc:  # not a payload this version writes: set it aside
            _reject(store, settings, notifiers[row.notifier], row, f"cannot read {exc}", tally)
            continue
        work.setdefault(row.notifier, []).append((row, message))

    return tally, work


def _unsilenced(
    store: Store, settings: Settings, row: OutboxRow, message: Message, now: datetime
) -> OutboxRow | None:
    """`row` (holding `message`) as it may be sent now, as Alertmanager mutes at notification
    time: without the alerts a silence in force now covers, rendered again; None (the row
    settled as silenced) when it covers them all. Each such alert is recorded as held by the
    silence, so that it is announced when the silence ends (alerts.lifecycle.muted).

    `UnreadablePayload` when the context it is rendered again from cannot be read (nothing
    is recorded then)."""
    silences = silences_in_force(store, settings, now)
    quiet = {c: until for c in row.checks if (until := silenced_until(silences, c)) is not None}
    if not quiet:
        return row
    kept = tuple(c for c in row.checks if c not in quiet)
    written = row.document().get("context")
    stored = None if not kept or written is None else read_stored_context(written)
    kinds = {a.check_id: Kind(a.kind) for a in message.alerts}
    alerts = load_alerts(store, settings, row.source)
    save_alerts(
        store,
        settings,
        [
            muted(alerts[c], kinds[c], row.at, until)
            for c, until in quiet.items()
            if c in alerts and c in kinds
        ],
        now,
    )
    if not kept:
        _update(
            store,
            settings,
            row,
            status=OutboxStatus.SILENCED,
            last_error=f"not sent: silenced ({', '.join(quiet)}) when it was to be sent",
        )
        return None
    if stored is None:  # written by a version that kept no context: sent as it was written
        return row
    stored = {**stored, "alerts": [a for a in stored["alerts"] if a["check_id"] not in quiet]}
    left = tuple(a for a in message.alerts if a.check_id not in quiet)
    return replace(
        row,
        checks=kept,
        severity=min((Severity(a.severity) for a in left), key=_SEVERITY_RANK.__getitem__).value,
        payload=_payload(templates(settings.alerts.templates_dir), stored, left),
    )


def _opened(store: StoreAccess) -> AbstractContextManager[Store]:
    """The store held open as it is, or opened for this use."""
    return contextlib.nullcontext(store) if isinstance(store, Store) else store()


def _wait(tally: _Tally, row: OutboxRow) -> None:
    tally.pending += 1
    tally.waiting[row.notifier] = tally.waiting.get(row.notifier, 0) + 1


def _settle_cut_send(
    store: Store, settings: Settings, row: OutboxRow, tally: _Tally
) -> OutboxRow | None:
    """A row still marked as being sent had its send cut short by a crash: count it.

    The message is sent once more after the first such send; after the second it is
    given up (`unconfirmed`): each may have been posted, and a third could be a second
    duplicate. None when it was given up.
    """
    if row.sending_at is None:
        return row
    cut = row.unconfirmed + 1
    problem = f"a crash cut its send of {rfc3339(row.sending_at)} short"
    if cut < MAX_UNCONFIRMED:
        return _update(store, settings, row, sending_at=None, unconfirmed=cut, last_error=problem)
    _update(
        store,
        settings,
        row,
        sending_at=None,
        unconfirmed=cut,
        status=OutboxStatus.UNCONFIRMED,
        last_error=f"{problem}, the second time: given up (it may have been posted)",
    )
    tally.unconfirmed.setdefault(row.notifier, []).append(row)
    return None


def _report(
    settings: Settings,
    notifiers: Mapping[str, Notifier],
    timed_out: frozenset[str],
    tally: _Tally,
) -> DeliveryReport:
    """The run's report, and one line per problem."""
    max_age = settings.alerts.max_delivery_age
    if timed_out and tally.pending:
        tally.errors.append(
            f"alerts: delivery to {', '.join(sorted(timed_out))} stopped after"
            f" alerts.delivery_timeout ({format_duration(settings.alerts.delivery_timeout)});"
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
    for name, dropped in tally.dropped.items():
        oldest = min(r.created_at for r in dropped)
        tally.given_up.append(
            f"{name}: dropped {len(dropped)} notification(s) undelivered for longer than"
            f" alerts.max_delivery_age ({format_duration(max_age)}; oldest from {rfc3339(oldest)});"
            " they will not be sent"
        )
    for name, cut in tally.unconfirmed.items():
        tally.given_up.append(
            f"{name}: gave up {len(cut)} notification(s) whose send a crash cut short twice"
            f" ({', '.join(r.id for r in cut[:5])}): each may have been posted, once or twice;"
            " they will not be sent again"
        )
    errors = [*tally.errors, *tally.given_up]
    for line in errors:  # returned to the caller, who reports them (the CLI on stderr)
        log.debug("%s", line)
    return DeliveryReport(
        delivered=tuple(tally.delivered),
        pending=tally.pending,
        held=tally.held,
        dropped=sum(len(rows) for rows in tally.dropped.values()),
        rejected=tally.rejected,
        unconfirmed=sum(len(rows) for rows in tally.unconfirmed.values()),
        silenced=tally.silenced,
        errors=tuple(errors),
        given_up=tuple(tally.given_up),
    )


def _reject(
    store: Store,
    settings: Settings,
    notifier: Notifier,
    row: OutboxRow,
    problem: str,
    tally: _Tally,
) -> None:
    """Set `row` aside for good: it will not be sent (`problem` names no value of its payload)."""
    _update(store, settings, row, status=OutboxStatus.REJECTED, sending_at=None, last_error=problem)
    tally.rejected += 1
    tally.given_up.append(
        f"{notifier.describe()}: notification {row.id} set aside, it will not be sent: {problem}"
    )


def _record(
    store: Store,
    settings: Settings,
    notifier: Notifier,
    row: OutboxRow,
    error: DeliveryError | None,
    now: datetime,
    tally: _Tally,
) -> bool:
    """A send's outcome in the outbox (clearing its mark); whether the lane goes on."""
    if error is None:
        _update(
            store,
            settings,
            row,
            status=OutboxStatus.DELIVERED,
            sending_at=None,
            last_error="",
            delivered_at=now,
        )
        tally.delivered.append(row.id)
        return True
    if error.failure is Failure.REJECTED:
        _reject(store, settings, notifier, row, error.problem, tally)
        return True
    retry_at = now + timedelta(seconds=error.retry_after) if error.retry_after else None
    _update(store, settings, row, retry_at=retry_at, sending_at=None, last_error=error.problem)
    tally.failed[row.notifier] = error
    _wait(tally, row)
    return False
