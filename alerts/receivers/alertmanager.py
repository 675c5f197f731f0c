"""Prometheus Alertmanager through its API v2 (`POST <url>/api/v2/alerts`, as Prometheus
posts): bounded labels, our words as annotations, every firing alert re-sent at every run and
valid past the next, each URL of an HA pair sent every post (docs/alerts.md#alertmanager)."""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import field_validator, model_validator

from alerts.base import (
    DEFAULT_REFRESH_HORIZON,
    AlertFacts,
    Deadline,
    DeliveryError,
    Failure,
    Message,
    Receiver,
    ReceiverContext,
)
from alerts.facts import identity_labels
from alerts.receivers.http import Answer, JsonPost, classify_status, html_page, not_the_service
from watchdog.core.durations import Duration
from watchdog.core.quiet import QuietHours
from watchdog.core.settings import ScheduleSettings
from watchdog.core.settings.receivers import ReceiverModel, as_tuple, check_http_url, positive
from watchdog.core.settings.values import Secret, mask_secrets, secret_value
from watchdog.core.times import parse_time, rfc3339

API_PATH = "/api/v2/alerts"
MAX_ANNOTATION = 1024


def _clip(text: str) -> str:
    return text if len(text) <= MAX_ANNOTATION else text[: MAX_ANNOTATION - 1] + "…"


def alert_labels(alert: AlertFacts) -> dict[str, str]:
    """The alert's identity: a bounded set of labels."""
    labels = identity_labels(alert)
    if alert.check_kind:
        labels["kind"] = alert.check_kind
    return labels


def alert_annotations(alert: AlertFacts) -> dict[str, str]:
    """What the alert says: our headline and summary, the value, the window, evidence ids."""
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
    return {key: _clip(value) for key, value in found.items() if value}


def alertmanager_alerts(
    alerts: Sequence[AlertFacts], *, now: datetime, horizon: timedelta
) -> list[dict[str, Any]]:
    """The body of `POST /api/v2/alerts` for one message's alerts (see the module docstring)."""
    body = []
    for alert in alerts:
        if alert.firing:
            valid_from = max(parse_time(alert.at), now.replace(microsecond=0))
            ends = rfc3339(valid_from + horizon)
        else:
            ends = alert.ends_at or alert.at
        item: dict[str, Any] = {
            "labels": alert_labels(alert),
            "annotations": alert_annotations(alert),
            "startsAt": alert.starts_at,
            "endsAt": ends,
        }
        if alert.link:
            item["generatorURL"] = alert.link
        body.append(item)
    return body


class AlertmanagerSettings(ReceiverModel):
    """`[alerts.alertmanager.<name>]`: Prometheus Alertmanager's API, `POST /api/v2/alerts`.

    `url` is one Alertmanager or a list (an HA pair: each gets every post, as
    Prometheus does); credentials go in `basic_auth_user`/`basic_auth_password`
    or `bearer_token` (secrets), never in the URL. Each run re-sends the alerts
    still firing, each valid until after the next run (`endsAt`).
    """

    kind: ClassVar[str] = "alertmanager"
    machine: ClassVar[bool] = True
    refreshes: ClassVar[bool] = True
    title: ClassVar[str] = "Alertmanager"

    url: tuple[str, ...]
    basic_auth_user: str | None = None
    basic_auth_password: Secret | None = None
    bearer_token: Secret | None = None
    timeout: Duration = timedelta(seconds=10)  # one HTTP request

    _list = field_validator("url", mode="before")(as_tuple)
    _timeout = field_validator("timeout")(positive)

    @field_validator("url")
    @classmethod
    def _urls(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("must name at least one Alertmanager (e.g. http://alertmanager:9093)")
        for url in value:
            check_http_url(url, secret=False)
            if "@" in urlsplit(url).netloc:
                raise ValueError(
                    "credentials go in basic_auth_user and basic_auth_password, not in the URL"
                )
        if len(set(value)) != len(value):
            raise ValueError("names the same Alertmanager twice")
        return value

    @model_validator(mode="after")
    def _one_auth(self) -> AlertmanagerSettings:
        basic = self.basic_auth_user is not None or self.basic_auth_password is not None
        if basic and (self.basic_auth_user is None or self.basic_auth_password is None):
            raise ValueError("basic_auth_user and basic_auth_password go together")
        if basic and self.bearer_token is not None:
            raise ValueError("set basic_auth_user and basic_auth_password, or bearer_token")
        return self


class AlertmanagerNotifier:
    """Alertmanager's API v2: every alert of a message posted to each configured Alertmanager."""

    per_alert: ClassVar[bool] = False

    def __init__(
        self,
        *,
        urls: Sequence[str],
        basic_auth: tuple[str, str] | None = None,
        bearer_token: str | None = None,
        horizon: timedelta = DEFAULT_REFRESH_HORIZON,
        timeout_s: float = 10.0,
        quiet_hours: QuietHours | None = None,
        max_retries: int = 3,
        backoff_base: float = 0.5,
        name: str = "alertmanager",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.name = name
        self.urls = tuple(urls)
        self.quiet_hours = quiet_hours
        self.horizon = horizon
        self.clock = clock
        self._secrets: list[tuple[str, str]] = []
        self._auth, self._auth_kind = "", ""
        headers = {}
        if basic_auth is not None:
            user, password = basic_auth
            encoded = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            headers["Authorization"] = f"Basic {encoded}"
            self._secrets += [(password, "***"), (encoded, "***")]
            self._auth, self._auth_kind = f", basic auth {user}:***", "basic"
        elif bearer_token:
            headers["Authorization"] = f"Bearer {bearer_token}"
            self._secrets.append((bearer_token, "***"))
            self._auth, self._auth_kind = ", bearer token ***", "bearer"
        self.posts = [
            JsonPost(
                name=name,
                url=url.rstrip("/") + API_PATH,
                headers=headers,
                timeout_s=timeout_s,
                max_retries=max_retries,
                backoff_base=backoff_base,
                mask=self.mask,
                read_success=True,
            )
            for url in self.urls
        ]

    @classmethod
    def from_settings(
        cls, settings: AlertmanagerSettings, *, name: str, context: ReceiverContext | None = None
    ) -> AlertmanagerNotifier:
        basic = None
        if settings.basic_auth_user is not None:
            basic = (settings.basic_auth_user, secret_value(settings.basic_auth_password))
        return cls(
            urls=settings.url,
            basic_auth=basic,
            bearer_token=secret_value(settings.bearer_token) or None,
            horizon=(context or ReceiverContext()).refresh_horizon,
            timeout_s=settings.timeout.total_seconds(),
            quiet_hours=settings.quiet_hours,
            name=name,
        )

    def describe(self) -> str:
        where = " and ".join(self.urls)
        return f"{self.name} (Alertmanager API v2 at {where}{self._auth})"

    def mask(self, text: str) -> str:
        return mask_secrets(text, self._secrets)

    def send(self, message: Message, deadline: Deadline) -> None:
        """Post the message's alerts to each Alertmanager; delivered once each accepted it."""
        if not message.alerts:
            raise DeliveryError(
                self.name,
                "the message carries no alert (written by an older version); set aside",
                failure=Failure.REJECTED,
            )
        body = alertmanager_alerts(message.alerts, now=self.clock(), horizon=self.horizon)
        failures: list[tuple[str, DeliveryError]] = []
        for url, post in zip(self.urls, self.posts, strict=True):
            try:
                post.send(body, deadline, self._classify)
            except DeliveryError as exc:
                if exc.failure is not Failure.TRANSIENT:
                    raise
                failures.append((url, exc))
        if not failures:
            return
        if len(self.posts) == 1:
            raise failures[0][1]
        url, first = failures[0]
        waits = [f.retry_after for _, f in failures if f.retry_after is not None]
        raise DeliveryError(
            self.name,
            f"{len(failures)} of {len(self.posts)} Alertmanagers did not take it"
            f" ({url}: {first.problem})",
            retry_after=max(waits) if waits else None,
        )

    def _classify(self, answer: Answer) -> DeliveryError | None:
        key = f"alerts.{self.name}"
        credentials = {
            "": f"{key}.url (this Alertmanager wants credentials)",
            "basic": f"{key}.basic_auth_user and basic_auth_password",
            "bearer": f"{key}.bearer_token",
        }[self._auth_kind]
        if 200 <= answer.status < 300 and html_page(answer):  # a login page, another service
            return not_the_service(
                self.name, answer, service="Alertmanager", says="200", url_key=f"{key}.url"
            )
        return classify_status(
            self.name, answer, service="Alertmanager", key=credentials, url_key=f"{key}.url"
        )


def refresh_horizon(schedule: ScheduleSettings) -> timedelta:
    """How long a firing post stays valid: two of the schedule's longest periods plus its
    delay (the next run, its delay, and one run of slack)."""
    return 2 * longest_period(schedule) + schedule.delay


def longest_period(schedule: ScheduleSettings) -> timedelta:
    """`every`, or the longest gap between consecutive runs of the cron line (over a year,
    or its first 1,000 runs when it runs more often): the schedule's longest window."""
    return schedule.gaps()[1]


RECEIVER = Receiver(model=AlertmanagerSettings, notifier=AlertmanagerNotifier)
