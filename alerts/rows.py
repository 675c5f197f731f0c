"""The rows of the watchdog's tables as values: an outbox message, a run, a silence.

Each is the dataclass its table's codec (alerts.state) is derived from; the alert's own row is
`alerts.lifecycle.Alert`. Their closed vocabularies are enums: `OutboxStatus`, `RunKind`
(the tables: docs/alerts.md#where-the-state-lives).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from alerts.base import MAX_RETRY_AFTER, Message, UnreadablePayload

ALL = "all"  # a silence of every check


class OutboxStatus(enum.StrEnum):
    """Where one outbox row stands."""

    PENDING = "pending"  # waiting to be delivered
    DELIVERED = "delivered"
    DROPPED = "dropped"  # undelivered for longer than alerts.max_delivery_age: given up
    REJECTED = "rejected"  # refused as malformed: set aside
    UNCONFIRMED = "unconfirmed"  # given up after two sends cut short by crashes (maybe posted)
    SILENCED = "silenced"  # a silence in force when it was to be sent: not sent, announced after


class RunKind(enum.StrEnum):
    """How a run came about: the daemon or `check --notify` now, or a replay of the past."""

    LIVE = "live"
    REPLAY = "replay"
    UNRECORDED = ""  # rows written before the kind of run was recorded


@dataclass(frozen=True)
class OutboxRow:
    """One message for one notifier, and where its delivery stands."""

    id: str  # deterministic: source, evaluation time, notifier, part
    notifier: str
    source: str
    at: datetime  # evaluation time of the run that wrote it
    created_at: datetime  # wall clock when enqueued; delivery goes oldest first
    seq: int  # order within one run
    checks: tuple[str, ...]  # the check ids it announces
    severity: str  # the highest among them
    payload: str  # JSON: text, blocks, plain, the alerts' facts
    status: OutboxStatus = OutboxStatus.PENDING
    attempts: int = 0
    last_error: str = ""  # one line, secrets masked
    hold_until: datetime | None = None  # quiet hours: not before this, does not block others
    retry_at: datetime | None = None  # Retry-After: not before this, later rows wait too
    last_attempt_at: datetime | None = None
    delivered_at: datetime | None = None
    version: int = 1
    sending_at: datetime | None = None  # a send began and its outcome is not recorded yet
    unconfirmed: int = 0  # sends a crash cut short

    def document(self) -> Any:
        """The payload read as JSON; `UnreadablePayload` when it is no JSON."""
        try:
            return json.loads(self.payload)
        except (ValueError, RecursionError) as exc:  # the error says where, not what
            raise UnreadablePayload(f"payload: not JSON ({type(exc).__name__})") from None

    def message(self) -> Message:
        """The message it holds; `UnreadablePayload` when its payload is not one this
        version writes (alerts.base.Message.from_payload)."""
        return Message.from_payload(self.id, self.document(), self.severity)

    def waits_until(self) -> datetime | None:
        """Until when a Retry-After holds this row back, bounded by MAX_RETRY_AFTER.

        Rows written by older versions may carry any time (one said 5195): they wait
        at most MAX_RETRY_AFTER after their last attempt too.
        """
        if self.retry_at is None:
            return None
        if self.last_attempt_at is None:
            return self.retry_at
        return min(self.retry_at, self.last_attempt_at + MAX_RETRY_AFTER)


@dataclass(frozen=True)
class RunRecord:
    """One evaluation as the run log keeps it (one row per source and evaluation time)."""

    source: str
    at: datetime  # evaluation time
    window_start: datetime
    window_end: datetime
    recorded_at: datetime  # wall clock
    status: str  # ok | breached | error, or the daemon's run_status
    duration_s: float | None
    problem: str  # why the source could not be read ('' when it was)
    # check id -> {status, value, target, severity, sample_size, summary, evidence}
    checks: Mapping[str, Mapping[str, Any]]
    notifications: int  # announcements this run enqueued
    kind: RunKind = RunKind.UNRECORDED
    version: int = 0


@dataclass(frozen=True)
class Silence:
    """A silence of one check id (or `all`) from `starts_at` to `ends_at`."""

    id: str
    check_id: str  # a check id, `store`, or `all`
    starts_at: datetime
    ends_at: datetime
    created_by: str
    reason: str
    created_at: datetime
    removed_at: datetime | None = None
    version: int = 1

    def covers(self, check_id: str) -> bool:
        return self.check_id in (ALL, check_id)

    def active(self, at: datetime) -> bool:
        return self.removed_at is None and self.starts_at <= at < self.ends_at

    def in_force_from(self, now: datetime) -> bool:
        """In force at `now`, or added since: a silence starts when it is added, so one that
        starts after `now` was added while the run that began at `now` went on."""
        return self.removed_at is None and now < self.ends_at


@dataclass(frozen=True)
class SloBucketRow:
    """One judged bucket of one SLO of one source (`slo_buckets`, docs/slo.md#the-ledger):
    judged once, when its end + schedule.delay has passed; a bucket judged again (a backfill
    over a range judged before) replaces it."""

    source: str
    slo: str
    start: datetime
    good: int
    bad: int
    judged_at: datetime  # wall clock
