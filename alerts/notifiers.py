"""`RECEIVERS`, the receiver kinds: one module each in `alerts.receivers`, each declaring its
`RECEIVER` (its settings' model and its class), found by scanning the package; and the
receivers the config turns on, each built by the class its settings' registry names. A
receiver whose secret is not set is built as an `UnavailableNotifier`, whose messages wait
(docs/development.md#adding-a-receiver)."""

from __future__ import annotations

from typing import TextIO

from alerts.base import (
    Deadline,
    DeliveryError,
    Failure,
    Message,
    Notifier,
    Receiver,
    ReceiverContext,
)
from alerts.receivers.alertmanager import AlertmanagerNotifier, refresh_horizon
from alerts.receivers.pagerduty import PagerDutyNotifier
from alerts.receivers.secrets import mask_token, mask_webhook
from alerts.receivers.slack import SlackNotifier
from alerts.receivers.stdout import StdoutNotifier
from alerts.receivers.telegram import TelegramNotifier
from alerts.receivers.webhook import WebhookNotifier
from watchdog.core.errors import RegistryError
from watchdog.core.quiet import QuietHours
from watchdog.core.settings import Settings
from watchdog.core.settings.plugins import scanned

__all__ = [
    "RECEIVERS",
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

# Every receiver kind, by module name: a new kind is a module of alerts/receivers/ defining
# RECEIVER, and no list is edited.
RECEIVERS: tuple[Receiver, ...] = tuple(scanned("alerts.receivers", "RECEIVER", Receiver))


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
        kind = receiver_of(settings, receiver.kind).notifier
        missing = receiver.missing_secrets()
        if missing:
            built[name] = UnavailableNotifier(
                name, missing[0].problem, receiver.quiet_hours, per_alert=kind.per_alert
            )
        else:
            built[name] = kind.from_settings(receiver, name=name, context=context)
    return built


def receiver_of(settings: Settings, kind: str) -> Receiver:
    """The receiver kind `kind` of the registry `settings` were validated against."""
    entry = settings.plugins.receiver(kind)
    if not isinstance(entry, Receiver):
        raise RegistryError(f"receiver kind {kind!r} is not registered with a sender")
    return entry
