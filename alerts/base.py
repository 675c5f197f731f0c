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
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import MISSING, asdict, dataclass, fields
from datetime import datetime, timedelta
from typing import Any, ClassVar, Protocol, TextIO

from alerts.lifecycle import Kind
from checks.base import Severity
from watchdog.core.errors import NotifyError
from watchdog.core.settings.receivers import ReceiverModel
from watchdog.core.times import parse_time


class UnreadablePayload(ValueError):
    """An outbox payload that is not one this version writes, so it cannot be sent.

    Its message says where (`payload.alerts[0].kind`) and what is wrong, never a value of the payload,
    which may hold anything (docs/alerts.md#the-outbox-never-lost-at-most-one-duplicate).
    """


# What a JSON value must be, by the Python type that stands for it; `list` is a list of strings.
_NOUNS: Mapping[type, str] = {
    str: "a string",
    int: "an integer",
    bool: "true or false",
    list: "a list of strings",
}


def _typed(value: object, expected: type) -> bool:
    if expected is list:
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def read_object(
    data: object, types: Mapping[str, type], where: str, *, required: Collection[str]
) -> dict[str, Any]:
    """The keys of `types` found in the JSON object `data`, each of its type (`_NOUNS`);
    `UnreadablePayload` naming `where` and the key when `data` is no object, lacks one of
    `required`, or holds a key of another type. Keys not in `types` are left out."""
    if not isinstance(data, Mapping):
        raise UnreadablePayload(f"{where}: not a JSON object")
    missing = sorted(key for key in required if key not in data)
    if missing:
        raise UnreadablePayload(f"{where}: missing {', '.join(missing)}")
    values = {}
    for key, expected in types.items():
        if key in data:
            if not _typed(data[key], expected):
                raise UnreadablePayload(f"{where}.{key}: not {_NOUNS[expected]}")
            values[key] = data[key]
    return values


def _one_of(value: str, allowed: Collection[str], where: str) -> str:
    if value not in allowed:
        raise UnreadablePayload(f"{where}: not one of {', '.join(allowed)}")
    return value


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
    def from_json(cls, data: object, where: str = "alert") -> AlertFacts:
        """The facts as `to_json` writes them; `UnreadablePayload` for anything else (a field
        missing or of another type, a status, kind or severity outside its vocabulary, a time
        that is no RFC 3339 time)."""
        values = read_object(data, _FACT_TYPES, where, required=_REQUIRED_FACTS)
        _one_of(values["status"], ("firing", "resolved"), f"{where}.status")
        _one_of(values["kind"], tuple(Kind), f"{where}.kind")
        _one_of(values["severity"], tuple(Severity), f"{where}.severity")
        for key in ("starts_at", "ends_at", "at", "window_start", "window_end"):
            if values[key] or key != "ends_at":  # "" while firing
                try:
                    parse_time(values[key])
                except ValueError:
                    raise UnreadablePayload(f"{where}.{key}: not an RFC 3339 time") from None
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
    def from_payload(cls, message_id: str, payload: object, severity: str) -> Message:
        """The message of an outbox payload (`payload` read back); `UnreadablePayload` when it
        is not one `payload` writes (each key may be missing, as in older versions)."""
        if not isinstance(payload, Mapping):
            raise UnreadablePayload("payload: not a JSON object")
        values = read_object(payload, {"text": str, "plain": str}, "payload", required=())
        blocks, alerts = payload.get("blocks", []), payload.get("alerts", [])
        if not isinstance(blocks, list) or not all(isinstance(b, Mapping) for b in blocks):
            raise UnreadablePayload("payload.blocks: not a list of JSON objects")
        if not isinstance(alerts, list):
            raise UnreadablePayload("payload.alerts: not a list")
        text = values.get("text", "")
        return cls(
            id=message_id,
            text=text,
            blocks=tuple(blocks),
            plain=values.get("plain", text),
            severity=Severity(_one_of(severity, tuple(Severity), "severity")),
            alerts=tuple(
                AlertFacts.from_json(a, f"payload.alerts[{i}]") for i, a in enumerate(alerts)
            ),
        )


# Each field of AlertFacts as a JSON type (`read_object`), and those without a default.
_FACT_TYPES: Mapping[str, type] = {
    name: list if typing.get_origin(hint) is tuple else hint
    for name, hint in typing.get_type_hints(AlertFacts).items()
}
_REQUIRED_FACTS = frozenset(f.name for f in fields(AlertFacts) if f.default is MISSING)


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
