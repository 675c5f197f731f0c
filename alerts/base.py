"""The contracts of alerting: the message a notifier sends, the notifier, its deadline.

`Message` is what one outbox row holds for one notifier: the Slack Block Kit
blocks, the Slack `text` fallback (escaped for mrkdwn) and the same text
unescaped for plain channels. `Notifier` is the interface the outbox delivers
through; `Deadline` bounds a whole delivery run and paces its retries, with
a clock and a sleep that tests replace.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from checks.base import Severity
from watchdog.core.errors import NotifyError


@dataclass(frozen=True)
class Message:
    """One chat message: Block Kit blocks, a mrkdwn `text` fallback, and plain text."""

    id: str
    text: str
    blocks: Sequence[Mapping[str, Any]]
    plain: str
    severity: Severity = Severity.CRITICAL

    def payload(self) -> dict[str, Any]:
        """The JSON document the outbox stores."""
        return {"text": self.text, "blocks": [dict(b) for b in self.blocks], "plain": self.plain}

    @classmethod
    def from_payload(cls, message_id: str, payload: Mapping[str, Any], severity: str) -> Message:
        return cls(
            id=message_id,
            text=str(payload.get("text", "")),
            blocks=tuple(payload.get("blocks", ())),
            plain=str(payload.get("plain", payload.get("text", ""))),
            severity=Severity(severity),
        )


class Failure(enum.StrEnum):
    """How a delivery failed, which decides what the outbox does next."""

    TRANSIENT = "transient"  # rate limit, 5xx, timeout, connection: retry later, keep order
    PERMANENT = "permanent"  # the notifier cannot deliver anything (bad token, no channel)
    REJECTED = "rejected"  # this one message can never be delivered (invalid payload)


class DeliveryError(NotifyError):
    """A delivery that failed; `failure` says whether to retry, and `retry_after` when."""

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
        self.retry_after = retry_after


@dataclass
class Timer:
    """Where a delivery run reads the time and waits: real by default, fake in tests."""

    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep


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


class QuietWindow(Protocol):
    """Recurring hours in which non-critical notifications are held."""

    def active(self, now: datetime) -> bool: ...

    def ends_after(self, now: datetime) -> datetime: ...


class Notifier(Protocol):
    """A chat channel the outbox delivers to.

    `send` returns when the message is delivered and raises `DeliveryError`
    otherwise; it never takes longer than the deadline allows. `describe`
    names the channel with every secret masked.
    """

    @property
    def name(self) -> str: ...

    @property
    def quiet_hours(self) -> QuietWindow | None: ...

    def describe(self) -> str: ...

    def send(self, message: Message, deadline: Deadline) -> None: ...
