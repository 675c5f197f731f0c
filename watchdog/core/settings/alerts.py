"""`[alerts]`: the alert lifecycle, its receivers and the routes that pick them.

Receivers, each with outbox rows of its own (the outbox's `notifier` column
holds the receiver's name):

- `[alerts.slack]` -> `slack`, `[alerts.stdout]` -> `stdout` (one each, as
  before routes existed: a config with only these keeps working unchanged);
- `[alerts.webhook.<name>]` -> `webhook.<name>`: Alertmanager's webhook JSON;
- `[alerts.pagerduty.<name>]` -> `pagerduty.<name>`: PagerDuty Events API v2.

`[[alerts.routes]]` send an alert (one check on one source) to the receivers
of the first route whose `severity` and `checks` match it (`continue = true`
goes on to the next matching route too, as in Alertmanager); an alert no
route matches goes to `default_receivers`, by default every receiver. A
route naming a receiver that is not configured is a config error.

Secrets (`webhook_url`, `token`, `url` of a webhook, `bearer_token`,
`routing_key`) are `SecretStr`, or a `MissingSecret` when their `${NAME}`
is unset: only commands that send refuse those (see `missing_secrets`).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import Field, ValidationInfo, field_validator, model_validator

from watchdog.core.durations import Duration
from watchdog.core.errors import ConfigError
from watchdog.core.quiet import QuietHours
from watchdog.core.settings.custom import SeverityName
from watchdog.core.settings.values import ConfigModel, MissingSecret, Secret, TimeZone, secret_value

PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
_RECEIVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _http_url(value: str, key: str, *, secret: bool) -> None:
    if not value.startswith(("https://", "http://")):
        shown = " (value not shown: it is a secret)" if secret else f" ({value!r})"
        raise ValueError(
            f"{key} is not an http(s) URL{shown}" if key else f"not an http(s) URL{shown}"
        )


class _Receiver(ConfigModel):
    """What every receiver has: quiet hours, `quiet_hours = "22:00-07:00"` in `quiet_timezone`."""

    kind: ClassVar[str] = ""

    quiet_timezone: TimeZone = "UTC"
    quiet_hours: QuietHours | None = None

    @field_validator("quiet_hours", mode="before")
    @classmethod
    def _parse_quiet(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            return QuietHours.parse(value, str(info.data.get("quiet_timezone", "UTC")))
        return value

    def missing_secrets(self) -> list[MissingSecret]:
        """Its secrets referenced as `${NAME}` with NAME unset."""
        values = (getattr(self, name) for name in type(self).model_fields)
        return [value for value in values if isinstance(value, MissingSecret)]


class SlackSettings(_Receiver):
    """A Slack receiver: an incoming webhook, or a bot token and a channel.

    `webhook_url` and `token` are secrets: pydantic's SecretStr keeps them out
    of every repr, dump and log line; only the receiver reads their value.
    """

    kind: ClassVar[str] = "slack"

    webhook_url: Secret | None = None
    token: Secret | None = None
    channel: str | None = None
    base_url: str | None = None  # Slack's API root; for tests and proxies
    timeout: Duration = timedelta(seconds=10)  # one HTTP request

    @model_validator(mode="after")
    def _one_mode(self) -> SlackSettings:
        webhook, token = secret_value(self.webhook_url), secret_value(self.token)
        has_webhook = bool(webhook) or isinstance(self.webhook_url, MissingSecret)
        has_token = bool(token) or isinstance(self.token, MissingSecret)
        if has_webhook == has_token:
            raise ValueError("set webhook_url, or token and channel (exactly one mode)")
        if webhook:
            _http_url(webhook, "webhook_url", secret=True)
        if has_token and not self.channel:
            raise ValueError('token needs channel (e.g. channel = "#memory-alerts")')
        if self.timeout <= timedelta(0):
            raise ValueError("timeout must be positive")
        return self


class StdoutSettings(_Receiver):
    """The stdout receiver: the same message as plain text, for cron mail and debugging.

    Under `check` the report owns stdout, so the text goes to stderr there;
    with `file` it is appended to that file instead, wherever it runs.
    """

    kind: ClassVar[str] = "stdout"

    enabled: bool = True
    file: str | None = None


class WebhookSettings(_Receiver):
    """`[alerts.webhook.<name>]`: POST Alertmanager's webhook JSON (version 4) to `url`.

    `url` is a secret (webhook URLs often carry a token); `bearer_token`,
    when set, goes in an `Authorization: Bearer` header.
    """

    kind: ClassVar[str] = "webhook"

    url: Secret
    bearer_token: Secret | None = None
    timeout: Duration = timedelta(seconds=10)  # one HTTP request

    @field_validator("url")
    @classmethod
    def _http(cls, value: Secret) -> Secret:
        url = secret_value(value)
        if url:
            _http_url(url, "", secret=True)
        return value

    @field_validator("timeout")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be positive")
        return value


class PagerDutySettings(_Receiver):
    """`[alerts.pagerduty.<name>]`: PagerDuty Events API v2, one event per alert.

    `routing_key` is the integration key of a PagerDuty service (a secret);
    `url` is the Events API endpoint (change it only for a proxy or a test).
    """

    kind: ClassVar[str] = "pagerduty"

    routing_key: Secret
    url: str = PAGERDUTY_EVENTS_URL
    timeout: Duration = timedelta(seconds=10)  # one HTTP request

    @field_validator("url")
    @classmethod
    def _http(cls, value: str) -> str:
        _http_url(value, "", secret=False)
        return value

    @field_validator("timeout")
    @classmethod
    def _positive(cls, value: timedelta) -> timedelta:
        if value <= timedelta(0):
            raise ValueError("must be positive")
        return value


ReceiverSettings = SlackSettings | StdoutSettings | WebhookSettings | PagerDutySettings


def _as_tuple(value: Any) -> Any:
    """A single string where a list is expected, as a one-item list."""
    return (value,) if isinstance(value, str) else value


class RouteSettings(ConfigModel):
    """`[[alerts.routes]]`: which receivers get the alerts this route matches.

    An empty `severity` or `checks` matches any; both given, both must match.
    """

    severity: tuple[SeverityName, ...] = ()
    checks: tuple[str, ...] = ()
    receivers: tuple[str, ...]
    continue_: bool = Field(default=False, alias="continue")

    @field_validator("severity", "checks", "receivers", mode="before")
    @classmethod
    def _lists(cls, value: Any) -> Any:
        return _as_tuple(value)

    @field_validator("receivers")
    @classmethod
    def _some(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if not value:
            raise ValueError("must name at least one receiver")
        return value

    def matches(self, severity: str, check_id: str) -> bool:
        """Whether an alert of this severity and check id takes this route."""
        return (not self.severity or severity in self.severity) and (
            not self.checks or check_id in self.checks
        )


class AlertSettings(ConfigModel):
    """`[alerts]`: the alert lifecycle (docs/spec.md section 8), its receivers and routes."""

    repeat_interval: Duration = timedelta(hours=24)
    pending_runs: int = Field(default=1, ge=1)  # consecutive breached runs that open an alert
    max_delivery_age: Duration = timedelta(days=7)  # undelivered older than this is dropped
    delivery_timeout: Duration = timedelta(seconds=60)  # total delivery time within one run
    # How long the alert lease (alerts.lease) outlives a holder that died; renewed while it runs.
    lease_ttl: Duration = timedelta(minutes=5)
    templates_dir: str | None = None  # overrides alerts/templates/*.j2 file by file
    slack: SlackSettings | None = None
    stdout: StdoutSettings | None = None
    webhook: dict[str, WebhookSettings] = Field(default_factory=dict)
    pagerduty: dict[str, PagerDutySettings] = Field(default_factory=dict)
    routes: tuple[RouteSettings, ...] = ()
    default_receivers: tuple[str, ...] | None = None  # None: every receiver

    @field_validator("default_receivers", mode="before")
    @classmethod
    def _default_list(cls, value: Any) -> Any:
        return _as_tuple(value)

    @field_validator("webhook", "pagerduty")
    @classmethod
    def _names(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        for name in value:
            if not _RECEIVER_NAME.fullmatch(name):
                raise ConfigError(
                    f"alerts.{info.field_name}.{name}",
                    "a receiver name is 1 to 64 letters, digits, _ or -",
                )
        return value

    @model_validator(mode="after")
    def _valid(self) -> AlertSettings:
        for key in ("repeat_interval", "max_delivery_age", "delivery_timeout"):
            if getattr(self, key) <= timedelta(0):
                raise ValueError(f"{key} must be positive")
        if self.max_delivery_age > timedelta(days=30):
            raise ValueError("max_delivery_age must be at most 30d (the outbox keeps rows 90 days)")
        if not 2 * self.delivery_timeout <= self.lease_ttl <= timedelta(hours=1):
            raise ValueError(
                "lease_ttl must be at least twice delivery_timeout (its holder renews it"
                " between two messages) and at most 1h"
            )
        known = self.receivers()
        named = [(f"routes[{i}].receivers", r.receivers) for i, r in enumerate(self.routes)]
        if self.default_receivers is not None:
            named.append(("default_receivers", self.default_receivers))
        for key, names in named:
            for name in names:
                if name not in known:
                    configured = ", ".join(known) or "none; add [alerts.slack] for example"
                    raise ConfigError(
                        f"alerts.{key}",
                        f"unknown receiver {name!r} (configured: {configured})",
                    )
        if self.default_receivers == ():
            raise ConfigError(
                "alerts.default_receivers",
                "must name at least one receiver (leave it out to send to every receiver)",
            )
        return self

    def receivers(self) -> dict[str, ReceiverSettings]:
        """Every receiver configured (and enabled), by the name routes and the outbox use."""
        found: dict[str, ReceiverSettings] = {}
        if self.slack is not None:
            found["slack"] = self.slack
        if self.stdout is not None and self.stdout.enabled:
            found["stdout"] = self.stdout
        for name, webhook in self.webhook.items():
            found[f"webhook.{name}"] = webhook
        for name, pagerduty in self.pagerduty.items():
            found[f"pagerduty.{name}"] = pagerduty
        return found

    def missing_secrets(self) -> list[MissingSecret]:
        """Secrets referenced as `${NAME}` with NAME unset, in the receivers configured."""
        return [s for receiver in self.receivers().values() for s in receiver.missing_secrets()]
