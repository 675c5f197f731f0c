"""The receivers the config turns on, built from `NOTIFIERS` (receiver kind -> its class), which
must name the kinds of `watchdog.core.settings.receivers.RECEIVERS` (checked when it loads); a
receiver whose secret is not set is built as an `UnavailableNotifier`, whose messages wait
(docs/development.md#adding-a-receiver)."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol, TextIO

from alerts.base import Deadline, DeliveryError, Failure, Message, Notifier, ReceiverContext
from alerts.receivers.alertmanager import AlertmanagerNotifier, refresh_horizon
from alerts.receivers.pagerduty import PagerDutyNotifier
from alerts.receivers.secrets import mask_token, mask_webhook
from alerts.receivers.slack import SlackNotifier
from alerts.receivers.stdout import StdoutNotifier
from alerts.receivers.telegram import TelegramNotifier
from alerts.receivers.webhook import WebhookNotifier
from watchdog.core.errors import RegistryError
from watchdog.core.quiet import QuietHours
from watchdog.core.settings import RECEIVERS, Settings

__all__ = [
    "NOTIFIERS",
    "AlertmanagerNotifier",
    "PagerDutyNotifier",
    "SlackNotifier",
    "StdoutNotifier",
    "TelegramNotifier",
    "UnavailableNotifier",
    "WebhookNotifier",
    "build_notifiers",
    "mask_token",
    "mask_webhook",
]


class ReceiverKind(Protocol):
    """A receiver class: built from its settings, and whether it takes one row per alert."""

    per_alert: ClassVar[bool]

    @classmethod
    def from_settings(
        cls, settings: Any, *, name: str, context: ReceiverContext | None = None
    ) -> Notifier: ...


# `[alerts.<kind>]` -> the receiver class it configures.
NOTIFIERS: dict[str, type[ReceiverKind]] = {
    "slack": SlackNotifier,
    "stdout": StdoutNotifier,
    "webhook": WebhookNotifier,
    "pagerduty": PagerDutyNotifier,
    "alertmanager": AlertmanagerNotifier,
    "telegram": TelegramNotifier,
}

if set(NOTIFIERS) != set(RECEIVERS):  # a kind with settings and no sender, or the reverse
    raise RegistryError(
        f"receiver kinds out of step: notifiers {sorted(NOTIFIERS)}, settings {sorted(RECEIVERS)}"
    )


class UnavailableNotifier:
    """A configured receiver that cannot send: a secret it needs is not set in the environment.

    Its messages are enqueued like any other's (one per alert for a
    `per_alert` kind) and stay pending (a permanent error, one line per
    run), so nothing is lost: they go out once the secret is set.
    """

    def __init__(
        self,
        name: str,
        problem: str,
        quiet_hours: QuietHours | None = None,
        *,
        per_alert: bool = False,
    ) -> None:
        self.name = name
        self.problem = problem
        self.quiet_hours = quiet_hours
        self.per_alert = per_alert

    def describe(self) -> str:
        return f"{self.name} (cannot send: {self.problem})"

    def send(self, message: Message, deadline: Deadline) -> None:
        raise DeliveryError(
            self.name,
            f"{self.problem} (set it where the watchdog runs, e.g. the service's EnvironmentFile)",
            failure=Failure.PERMANENT,
        )


def build_notifiers(
    settings: Settings, *, text_stream: TextIO | None = None
) -> dict[str, Notifier]:
    """Every receiver the config turns on, by name.

    `text_stream` is where the stdout receiver writes (default stdout); `check`
    hands in stderr because its report owns stdout.
    """
    context = ReceiverContext(
        text_stream=text_stream,
        external_url=settings.report.base_url or "",
        refresh_horizon=refresh_horizon(settings.schedule),
    )
    built: dict[str, Notifier] = {}
    for name, receiver in settings.alerts.receivers().items():
        kind = NOTIFIERS[receiver.kind]
        missing = receiver.missing_secrets()
        if missing:
            built[name] = UnavailableNotifier(
                name, missing[0].problem, receiver.quiet_hours, per_alert=kind.per_alert
            )
        else:
            built[name] = kind.from_settings(receiver, name=name, context=context)
    return built
