"""The contracts of alerting: the message a receiver sends, the receiver, its deadline.

`Message` is what one outbox row holds for one receiver: the Slack Block Kit blocks, the Slack
`text` fallback (escaped for mrkdwn), the same text unescaped for plain channels, and each
alert's `AlertFacts` for the receivers that send facts (webhook, PagerDuty, Alertmanager,
Telegram). `Notifier` is the interface the outbox delivers through
(docs/development.md#adding-a-receiver); `Deadline` bounds a whole delivery run and paces its
retries, with a clock and a sleep that tests replace.
"""

from __future__ import annotations

import enum
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timedelta
from typing import Any, ClassVar, Protocol, TextIO

from checks.base import Severity
from watchdog.core.errors import NotifyError
from watchdog.core.settings.receivers import ReceiverModel


@dataclass(frozen=True)
class AlertFacts:
    """One announced alert as machine receivers take it: ids, states, times and our words.

    What the webhook's Alertmanager JSON and PagerDuty's events are built
    from. Every value is an id, a time, a count or a summary the watchdog
    wrote, never an event payload value. Times are RFC 3339 UTC strings.
    """

    key: str  # the firing episode's id: source, check and start (PagerDuty's dedup_key)
    status: str  # "firing" or "resolved"
    kind: str  # fire | repeat | resolve | refresh
    source: str
    check_id: str
    severity: str
    cause: str  # what it fires for: "breached", "error" or "no_data"; "resolved" once over
    headline: str  # "recall_coverage breached"
    summary: str  # the check's one line
    value: str  # formatted, with its unit
    target: str  # "> 0"
    starts_at: str  # when the firing episode began
    ends_at: str  # when it resolved; "" while firing
    at: str  # the evaluation time that announced it
    window_start: str
    window_end: str
    link: str = ""  # the window's page under report.base_url, "" when unset
    evidence_kind: str = ""  # "sessions", "events", or ""
    evidence: tuple[str, ...] = ()  # the first few ids
    evidence_more: int = 0
    check_kind: str = ""  # the check's kind (coverage, quantile, ...); "watchdog" for its own

    @property
    def firing(self) -> bool:
        return self.status == "firing"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "evidence": list(self.evidence)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AlertFacts:
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        return cls(**{**values, "evidence": tuple(values.get("evidence", ()))})


@dataclass(frozen=True)
class Message:
    """One message: Block Kit blocks, a mrkdwn `text` fallback, plain text, and the alerts' facts."""

    id: str
    text: str
    blocks: Sequence[Mapping[str, Any]]
    plain: str
    severity: Severity = Severity.CRITICAL
    alerts: tuple[AlertFacts, ...] = ()

    def payload(self) -> dict[str, Any]:
        """The JSON document the outbox stores."""
        return {
            "text": self.text,
            "blocks": [dict(b) for b in self.blocks],
            "plain": self.plain,
            "alerts": [a.to_json() for a in self.alerts],
        }

    @classmethod
    def from_payload(cls, message_id: str, payload: Mapping[str, Any], severity: str) -> Message:
        return cls(
            id=message_id,
            text=str(payload.get("text", "")),
            blocks=tuple(payload.get("blocks", ())),
            plain=str(payload.get("plain", payload.get("text", ""))),
            severity=Severity(severity),
            alerts=tuple(AlertFacts.from_json(a) for a in payload.get("alerts", ())),
        )


class Failure(enum.StrEnum):
    """How a delivery failed, which decides what the outbox does next."""

    TRANSIENT = "transient"  # rate limit, 5xx, timeout, connection: retry later, keep order
    PERMANENT = "permanent"  # the notifier cannot deliver anything (bad token, no channel)
    REJECTED = "rejected"  # this one message can never be delivered (invalid payload)


# The longest a receiver's Retry-After may hold its messages back. A 429 asking for more
# (`Retry-After: 99999999999` parked delivery until the year 5195) is taken as this.
MAX_RETRY_AFTER = timedelta(hours=1)


def bounded_retry_after(seconds: float | None) -> float | None:
    """A Retry-After in seconds, within [0, MAX_RETRY_AFTER]; None for none or not a number."""
    if seconds is None or math.isnan(seconds):
        return None
    return min(max(0.0, seconds), MAX_RETRY_AFTER.total_seconds())


class DeliveryError(NotifyError):
    """A delivery that failed; `failure` says whether to retry, and `retry_after` when.

    `retry_after` is bounded by MAX_RETRY_AFTER, whatever the receiver asked.
    """

    def __init__(
        self,
        notifier: str,
        problem: str,
        *,
        failure: Failure = Failure.TRANSIENT,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(notifier, problem)
        self.failure = failure
        self.retry_after = bounded_retry_after(retry_after)


@dataclass
class Timer:
    """Where a delivery run reads the time and waits: real by default, fake in tests."""

    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def lane(self) -> Timer:
        """The timer of one receiver's lane (alerts.delivery): the same one, for real time."""
        return self


class Deadline:
    """The time left for one delivery run (`alerts.delivery_timeout`)."""

    def __init__(self, total: timedelta, timer: Timer | None = None) -> None:
        self.timer = timer or Timer()
        self._end = self.timer.clock() + total.total_seconds()

    def remaining(self) -> float:
        return max(0.0, self._end - self.timer.clock())

    def expired(self) -> bool:
        return self.remaining() <= 0.0

    def allows(self, wait: float) -> bool:
        """Whether waiting `wait` seconds still leaves time to try again."""
        return wait < self.remaining()

    def sleep(self, seconds: float) -> None:
        self.timer.sleep(max(0.0, min(seconds, self.remaining())))


# Two periods of the default schedule (4h) and its delay (2m).
DEFAULT_REFRESH_HORIZON = timedelta(hours=8, minutes=2)


@dataclass(frozen=True)
class ReceiverContext:
    """What building a receiver takes besides its own settings."""

    text_stream: TextIO | None = None  # the stdout receiver's stream (`check` hands in stderr)
    external_url: str = ""  # report.base_url: where the watchdog's pages are served
    # How long a firing alert posted to a receiver that refreshes it stays valid
    # (alerts.receivers.alertmanager.refresh_horizon of the schedule).
    refresh_horizon: timedelta = DEFAULT_REFRESH_HORIZON


class QuietWindow(Protocol):
    """Recurring hours in which non-critical notifications are held."""

    def active(self, now: datetime) -> bool: ...

    def ends_after(self, now: datetime) -> datetime: ...


class Notifier(Protocol):
    """A receiver the outbox delivers to (Slack, stdout, a webhook, PagerDuty).

    `send` returns when the message is delivered and raises `DeliveryError`
    otherwise; it never takes longer than the deadline allows. `describe`
    names the receiver with every secret masked. A `per_alert` receiver
    (PagerDuty: one event per alert) gets one outbox row per alert, so each
    is delivered, retried and marked on its own; the others get one message
    per evaluation grouping its announcements.
    """

    @property
    def name(self) -> str: ...

    @property
    def quiet_hours(self) -> QuietWindow | None: ...

    @property
    def per_alert(self) -> bool: ...

    def describe(self) -> str: ...

    def send(self, message: Message, deadline: Deadline) -> None: ...


class ReceiverKind(Protocol):
    """A receiver class: built from its settings, and whether it takes one row per alert."""

    per_alert: ClassVar[bool]

    @classmethod
    def from_settings(
        cls, settings: Any, *, name: str, context: ReceiverContext | None = None
    ) -> Notifier: ...


@dataclass(frozen=True)
class Receiver:
    """One receiver kind, declared once in its module (`RECEIVER`, alerts.receivers.<kind>):
    the model of its `[alerts.<kind>]` table, and the class that sends what it configures."""

    model: type[ReceiverModel]
    notifier: type[ReceiverKind]

    @property
    def kind(self) -> str:
        return self.model.kind
