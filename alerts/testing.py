"""Fakes for testing code that alerts (as structlog ships structlog.testing).

`FakeTimer` makes retries instant and remembers every wait;
`RecordingNotifier` keeps what it was asked to send and fails on request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from alerts.base import Deadline, DeliveryError, Failure, Message, QuietWindow, Timer


@dataclass
class FakeTimer(Timer):
    """A timer whose sleep only advances its own clock."""

    now: float = 0.0
    slept: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.clock = self._clock
        self.sleep = self._sleep

    def _clock(self) -> float:
        return self.now

    def _sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    def lane(self) -> FakeTimer:
        """A clock of its own for one receiver's lane, whose waits are recorded here too:
        lanes run at once, so one lane's waits must not use up another's time."""
        child = FakeTimer(now=self.now)
        child.slept = self.slept
        return child


@dataclass
class RecordingNotifier:
    """A notifier that records messages; `failure` (when set) is raised instead of sending."""

    name: str = "recording"
    quiet_hours: QuietWindow | None = None
    per_alert: bool = False
    sent: list[Message] = field(default_factory=list)
    attempts: int = 0
    failure: Callable[[], DeliveryError] | None = None

    def describe(self) -> str:
        return f"{self.name} (recording)"

    def send(self, message: Message, deadline: Deadline) -> None:
        self.attempts += 1
        if self.failure is not None:
            raise self.failure()
        self.sent.append(message)

    def fail_with(self, problem: str, failure: Failure = Failure.TRANSIENT) -> None:
        self.failure = lambda: DeliveryError(self.name, problem, failure=failure)

    def recover(self) -> None:
        self.failure = None
