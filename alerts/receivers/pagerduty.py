"""PagerDuty through its Events API v2: one event per alert (a `per_alert` receiver), the
firing episode as its dedup key, so reminders fold into the incident and the resolve closes it
(docs/alerts.md#what-pagerduty-receives)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import field_validator

from alerts.base import (
    AlertFacts,
    Deadline,
    DeliveryError,
    Failure,
    Message,
    Receiver,
    ReceiverContext,
)
from alerts.facts import SLO_KIND, identity_labels
from alerts.receivers.http import Answer, JsonPost, classify_status, not_the_service
from watchdog.core.durations import Duration
from watchdog.core.quiet import QuietHours
from watchdog.core.settings.receivers import ReceiverModel, check_http_url, positive
from watchdog.core.settings.values import Secret, mask_secrets, secret_value

PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
SEVERITIES = ("critical", "error", "warning", "info")
MAX_SUMMARY = 1024  # PagerDuty truncates beyond
CLIENT = "memory-watchdog"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pagerduty_event(alert: AlertFacts, routing_key: str) -> dict[str, Any]:
    """The Events API v2 event for one alert: a trigger while firing, else a resolve."""
    event: dict[str, Any] = {
        "routing_key": routing_key,
        "event_action": "trigger" if alert.firing else "resolve",
        "dedup_key": alert.key,
    }
    if not alert.firing:
        return event
    details: dict[str, Any] = {
        "summary": alert.summary,
        "value": alert.value,
        "breach when": alert.target,
        "window": f"{alert.window_start}/{alert.window_end}",
        "firing since": alert.starts_at,
    }
    if alert.check_kind == SLO_KIND:
        details["labels"] = identity_labels(alert)  # the SLO and its tier (page or ticket)
    if alert.evidence:
        details[alert.evidence_kind or "evidence"] = list(alert.evidence)
        if alert.evidence_more:
            details["more"] = alert.evidence_more
    event["payload"] = {
        "summary": _clip(f"{alert.headline} ({alert.source}): {alert.summary}", MAX_SUMMARY),
        "source": alert.source,
        "severity": alert.severity if alert.severity in SEVERITIES else "error",
        "timestamp": alert.at,
        "component": alert.check_id,
        "group": CLIENT,
        "class": alert.cause,
        "custom_details": details,
    }
    event["client"] = CLIENT
    if alert.link:
        event["client_url"] = alert.link
        event["links"] = [{"href": alert.link, "text": "The window's report"}]
    return event


class PagerDutySettings(ReceiverModel):
    """`[alerts.pagerduty.<name>]`: PagerDuty Events API v2, one event per alert.

    `routing_key` is the integration key of a PagerDuty service (a secret);
    `url` is the Events API endpoint (change it only for a proxy or a test).
    """

    kind: ClassVar[str] = "pagerduty"
    machine: ClassVar[bool] = True
    title: ClassVar[str] = "PagerDuty"

    routing_key: Secret
    url: str = PAGERDUTY_EVENTS_URL
    timeout: Duration = timedelta(seconds=10)  # one HTTP request

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        check_http_url(value, secret=False)
        return value

    _timeout = field_validator("timeout")(positive)


class PagerDutyNotifier:
    """PagerDuty Events API v2: triggers and resolves by the alert's dedup key."""

    per_alert: ClassVar[bool] = True

    def __init__(
        self,
        *,
        routing_key: str,
        url: str = PAGERDUTY_EVENTS_URL,
        timeout_s: float = 10.0,
        quiet_hours: QuietHours | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        name: str = "pagerduty",
    ) -> None:
        self.name = name
        self.routing_key = routing_key
        self.url = url
        self.quiet_hours = quiet_hours
        self._secrets = [(routing_key, "***")]
        self.post = JsonPost(
            name=name,
            url=url,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_base=backoff_base,
            mask=self.mask,
            read_success=True,
        )

    @classmethod
    def from_settings(
        cls, settings: PagerDutySettings, *, name: str, context: ReceiverContext | None = None
    ) -> PagerDutyNotifier:
        return cls(
            routing_key=secret_value(settings.routing_key),
            url=settings.url,
            timeout_s=settings.timeout.total_seconds(),
            quiet_hours=settings.quiet_hours,
            name=name,
        )

    def describe(self) -> str:
        return f"{self.name} (PagerDuty Events API v2 at {self.url}, routing key ***)"

    def mask(self, text: str) -> str:
        return mask_secrets(text, self._secrets)

    def send(self, message: Message, deadline: Deadline) -> None:
        """One event per alert of the message, in order (the outbox hands in one alert)."""
        if not message.alerts:
            raise DeliveryError(
                self.name,
                "the message carries no alert (written by an older version); set aside",
                failure=Failure.REJECTED,
            )
        for alert in message.alerts:
            self.post.send(pagerduty_event(alert, self.routing_key), deadline, self._classify)

    def _classify(self, answer: Answer) -> DeliveryError | None:
        key = f"alerts.{self.name}.routing_key"
        if 200 <= answer.status < 300:  # 202 {"status": "success", ...} when it took the event
            if _status(answer) == "success":
                return None
            return not_the_service(
                self.name,
                answer,
                service="PagerDuty",
                says='202 {"status": "success"}',
                url_key=f"alerts.{self.name}.url",
            )
        body = answer.body.lower()
        if answer.status == 400 and ("routing key" in body or "routing_key" in body):
            return DeliveryError(
                self.name,
                f"HTTP 400: {answer.line()}: check {key}",
                failure=Failure.PERMANENT,
            )
        return classify_status(
            self.name, answer, service="PagerDuty", key=key, url_key=f"alerts.{self.name}.url"
        )


def _status(answer: Answer) -> str | None:
    """The `status` of an Events API answer's JSON body, None without one."""
    try:
        found = json.loads(answer.body)
    except ValueError:
        return None
    status = found.get("status") if isinstance(found, dict) else None
    return status if isinstance(status, str) else None


RECEIVER = Receiver(model=PagerDutySettings, notifier=PagerDutyNotifier)
