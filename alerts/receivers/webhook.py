"""A generic webhook speaking Alertmanager's webhook format (version 4), one POST per
message, so tooling written for Alertmanager's receivers consumes it as it is
(docs/alerts.md#what-the-webhook-receives)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
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
from alerts.facts import identity_labels
from alerts.receivers.http import Answer, JsonPost, basic_auth, classify_status
from alerts.receivers.secrets import secret_url
from watchdog.core.durations import Duration
from watchdog.core.quiet import QuietHours
from watchdog.core.settings.receivers import ReceiverModel, check_http_url, positive
from watchdog.core.settings.values import (
    Secret,
    WrittenPart,
    mask_secrets,
    secret_value,
    written_parts,
)

VERSION = "4"
ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of an alert still firing


def labels_of(alert: AlertFacts) -> dict[str, str]:
    """The alert's identity, as Alertmanager labels."""
    return identity_labels(alert)


def annotations_of(alert: AlertFacts) -> dict[str, str]:
    """What the alert says: our headline and summary, the value, the window, the evidence ids."""
    found = {
        "summary": alert.headline,
        "description": f"{alert.summary}. Value {alert.value}, breach when {alert.target}.",
        "value": alert.value,
        "target": alert.target,
        "cause": alert.cause,
        "window": f"{alert.window_start}/{alert.window_end}",
    }
    if alert.evidence:
        more = f" and {alert.evidence_more} more" if alert.evidence_more else ""
        found["evidence"] = f"{alert.evidence_kind}: {', '.join(alert.evidence)}{more}"
    return found


def fingerprint(label_set: Mapping[str, str]) -> str:
    """A stable 16-hex-digit id of a label set, as Alertmanager gives each alert."""
    text = "\x00".join(f"{k}\x01{v}" for k, v in sorted(label_set.items()))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _common(maps: Sequence[Mapping[str, str]]) -> dict[str, str]:
    """The pairs every map holds."""
    if not maps:
        return {}
    first = maps[0]
    return {k: v for k, v in first.items() if all(m.get(k) == v for m in maps[1:])}


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def alertmanager_document(
    alerts: Sequence[AlertFacts], *, receiver: str, external_url: str = ""
) -> dict[str, Any]:
    """The webhook body for one message's alerts (all of one source)."""
    items = [
        {
            "status": a.status,
            "labels": labels_of(a),
            "annotations": annotations_of(a),
            "startsAt": a.starts_at,
            "endsAt": a.ends_at or ZERO_TIME,
            "generatorURL": a.link,
            "fingerprint": fingerprint(labels_of(a)),
        }
        for a in alerts
    ]
    source = alerts[0].source if alerts else ""
    return {
        "version": VERSION,
        "groupKey": f'{{}}:{{source="{_quoted(source)}"}}',
        "truncatedAlerts": 0,
        "status": "firing" if any(a.firing for a in alerts) else "resolved",
        "receiver": receiver,
        "groupLabels": {"source": source},
        "commonLabels": _common([labels_of(a) for a in alerts]),
        "commonAnnotations": _common([annotations_of(a) for a in alerts]),
        "externalURL": external_url,
        "alerts": items,
    }


class WebhookSettings(ReceiverModel):
    """`[alerts.webhook.<name>]`: POST Alertmanager's webhook JSON (version 4) to `url`.

    `url` is a secret (webhook URLs often carry a token): what the file writes of it is shown,
    what its `${NAME}` references give never is (alerts.receivers.secrets.secret_url);
    `bearer_token`, when set, goes in an `Authorization: Bearer` header.
    """

    kind: ClassVar[str] = "webhook"
    machine: ClassVar[bool] = True
    title: ClassVar[str] = "webhook (Alertmanager's webhook format)"

    url: Secret
    bearer_token: Secret | None = None
    timeout: Duration = timedelta(seconds=10)  # one HTTP request

    @field_validator("url")
    @classmethod
    def _http(cls, value: Secret) -> Secret:
        url = secret_value(value)
        if url:
            check_http_url(url, secret=True)
        return value

    _timeout = field_validator("timeout")(positive)


class WebhookNotifier:
    """POSTs Alertmanager's webhook JSON to a URL (a secret), with an optional bearer token.

    `url_written` is how the config wrote the URL (`WrittenSecret.parts`): what the file says
    shows, what came from `${NAME}` never does; without it the URL is masked whole.
    """

    per_alert: ClassVar[bool] = False

    def __init__(
        self,
        *,
        url: str,
        url_written: Sequence[WrittenPart] | None = None,
        bearer_token: str | None = None,
        timeout_s: float = 10.0,
        quiet_hours: QuietHours | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        external_url: str = "",
        name: str = "webhook",
    ) -> None:
        self.name = name
        self.url = url
        self.quiet_hours = quiet_hours
        self.external_url = external_url
        self._url = secret_url(url, url_written)
        self._secrets = list(self._url.secrets)
        self._bearer = bool(bearer_token)
        # Credentials in the URL are sent as Basic auth; a bearer token, when set, wins.
        target, basic = basic_auth(url)
        headers = {}
        if basic:
            headers["Authorization"] = basic
            self._secrets.append((basic.removeprefix("Basic "), "***"))
        if bearer_token:
            headers["Authorization"] = f"Bearer {bearer_token}"
            self._secrets.append((bearer_token, "***"))
        self.post = JsonPost(
            name=name,
            url=target,
            headers=headers,
            timeout_s=timeout_s,
            max_retries=max_retries,
            backoff_base=backoff_base,
            mask=self.mask,
        )

    @classmethod
    def from_settings(
        cls, settings: WebhookSettings, *, name: str, context: ReceiverContext | None = None
    ) -> WebhookNotifier:
        return cls(
            url=secret_value(settings.url),
            url_written=written_parts(settings.url),
            bearer_token=secret_value(settings.bearer_token) or None,
            timeout_s=settings.timeout.total_seconds(),
            quiet_hours=settings.quiet_hours,
            external_url=context.external_url if context is not None else "",
            name=name,
        )

    def describe(self) -> str:
        token = ", bearer token ***" if self._bearer else ""
        return f"{self.name} (Alertmanager webhook {self._url.shown}{token})"

    def mask(self, text: str) -> str:
        return mask_secrets(text, self._secrets)

    def send(self, message: Message, deadline: Deadline) -> None:
        if not message.alerts:
            raise DeliveryError(
                self.name,
                "the message carries no alert (written by an older version); set aside",
                failure=Failure.REJECTED,
            )
        document = alertmanager_document(
            message.alerts, receiver=self.name, external_url=self.external_url
        )
        self.post.send(document, deadline, self._classify)

    def _classify(self, answer: Answer) -> DeliveryError | None:
        url = f"alerts.{self.name}.url"
        key = f"alerts.{self.name}.bearer_token" if self._bearer else url
        return classify_status(self.name, answer, service="the webhook", key=key, url_key=url)


RECEIVER = Receiver(model=WebhookSettings, notifier=WebhookNotifier)
