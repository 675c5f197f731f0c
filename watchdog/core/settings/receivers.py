"""The receivers' settings, each model describing its receiver (kind, table, secrets, machine or
chat), and `RECEIVERS`, the registry every list of receivers is derived from
(docs/development.md#adding-a-receiver, docs/configuration.md#alert-receivers-and-routes)."""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import SecretStr, ValidationInfo, field_validator, model_validator

from watchdog.core.durations import Duration
from watchdog.core.quiet import QuietHours
from watchdog.core.settings.values import ConfigModel, MissingSecret, Secret, TimeZone, secret_value

PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
TELEGRAM_API_URL = "https://api.telegram.org"


def check_http_url(value: str, *, secret: bool) -> None:
    """ValueError unless `value` is an http(s) URL with a host; a secret is never echoed."""
    shown = " (value not shown: it is a secret)" if secret else f" ({value!r})"
    if not value.startswith(("https://", "http://")):
        raise ValueError(f"not an http(s) URL{shown}")
    try:
        parts = urlsplit(value)
        host, _ = parts.hostname, parts.port  # a bad IPv6 literal or port raises here
    except ValueError as exc:
        raise ValueError(f"not a valid URL: {exc}{shown}") from None
    if not host:
        raise ValueError(f"has no host{shown}")


def _is_secret(annotation: Any) -> bool:
    """Whether a field's type holds a Secret (SecretStr, maybe in a union)."""
    if annotation is SecretStr:
        return True
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return any(_is_secret(arg) for arg in typing.get_args(annotation))
    return False


class ReceiverModel(ConfigModel):
    """What every receiver has (quiet hours), and how a receiver kind describes itself."""

    kind: ClassVar[str] = ""
    named: ClassVar[bool] = True  # [alerts.<kind>.<name>]; False: one [alerts.<kind>]
    machine: ClassVar[bool] = False  # takes each alert's facts (fire, then resolve)
    refreshes: ClassVar[bool] = False  # gets every firing alert at every run, not news only
    title: ClassVar[str] = ""  # what it is, for people: "Slack", "Alertmanager"

    quiet_timezone: TimeZone = "UTC"
    quiet_hours: QuietHours | None = None

    @field_validator("quiet_hours", mode="before")
    @classmethod
    def _parse_quiet(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            return QuietHours.parse(value, str(info.data.get("quiet_timezone", "UTC")))
        return value

    @classmethod
    def secret_keys(cls) -> tuple[str, ...]:
        """The keys holding a secret: the fields typed `Secret`."""
        return tuple(name for name, f in cls.model_fields.items() if _is_secret(f.annotation))

    @classmethod
    def table(cls) -> str:
        """The config table: `[alerts.slack]`, `[alerts.webhook.<name>]`."""
        return f"[alerts.{cls.kind}.<name>]" if cls.named else f"[alerts.{cls.kind}]"

    def sends(self) -> bool:
        """Whether this configured receiver sends (`[alerts.stdout]` may be turned off)."""
        return True

    def missing_secrets(self) -> list[MissingSecret]:
        """Its secrets referenced as `${NAME}` with NAME unset."""
        values = (getattr(self, name) for name in type(self).model_fields)
        return [value for value in values if isinstance(value, MissingSecret)]


def _positive(value: timedelta) -> timedelta:
    if value <= timedelta(0):
        raise ValueError("must be positive")
    return value


class SlackSettings(ReceiverModel):
    """`[alerts.slack]`: an incoming webhook, or a bot token and a channel.

    `webhook_url` and `token` are secrets: pydantic's SecretStr keeps them out
    of every repr, dump and log line; only the receiver reads their value.
    """

    kind: ClassVar[str] = "slack"
    named: ClassVar[bool] = False
    title: ClassVar[str] = "Slack"

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
            try:
                check_http_url(webhook, secret=True)
            except ValueError as exc:
                raise ValueError(f"webhook_url is {exc}") from None
        if has_token and not self.channel:
            raise ValueError('token needs channel (e.g. channel = "#memory-alerts")')
        if self.base_url is not None:
            check_http_url(self.base_url, secret=False)
        if self.timeout <= timedelta(0):
            raise ValueError("timeout must be positive")
        return self


class StdoutSettings(ReceiverModel):
    """`[alerts.stdout]`: the same message as plain text, for cron mail and debugging.

    Under `check` the report owns stdout, so the text goes to stderr there;
    with `file` it is appended to that file instead, wherever it runs.
    """

    kind: ClassVar[str] = "stdout"
    named: ClassVar[bool] = False
    title: ClassVar[str] = "plain text"

    enabled: bool = True
    file: str | None = None

    def sends(self) -> bool:
        return self.enabled


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

    _timeout = field_validator("timeout")(_positive)


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

    _timeout = field_validator("timeout")(_positive)


def _as_tuple(value: Any) -> Any:
    """A single string where a list is expected, as a one-item list."""
    return (value,) if isinstance(value, str) else value


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

    _list = field_validator("url", mode="before")(_as_tuple)
    _timeout = field_validator("timeout")(_positive)

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


class TelegramSettings(ReceiverModel):
    """`[alerts.telegram.<name>]`: a Telegram chat through the Bot API's `sendMessage`.

    `bot_token` is a secret (it sits in the request's URL path); `chat_id` is a
    chat's number (`-1001234567890`) or a public channel's `@name`. `api_url`
    is the Bot API server (change it only for a local Bot API server or a test).
    """

    kind: ClassVar[str] = "telegram"
    title: ClassVar[str] = "Telegram"

    bot_token: Secret
    chat_id: str
    api_url: str = TELEGRAM_API_URL
    timeout: Duration = timedelta(seconds=10)  # one HTTP request

    _timeout = field_validator("timeout")(_positive)

    @field_validator("chat_id", mode="before")
    @classmethod
    def _chat(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if isinstance(value, str) and not re.fullmatch(
            r"-?\d{1,20}|@[A-Za-z][A-Za-z0-9_]{4,31}", value
        ):
            raise ValueError(
                f"{value!r} is not a chat id (a number such as -1001234567890, or @channelname)"
            )
        return value

    @field_validator("api_url")
    @classmethod
    def _http(cls, value: str) -> str:
        check_http_url(value, secret=False)
        return value

    @field_validator("bot_token")
    @classmethod
    def _token(cls, value: Secret) -> Secret:
        token = secret_value(value)
        if token and not re.fullmatch(r"\d{1,20}:[A-Za-z0-9_-]{20,100}", token):
            raise ValueError(
                "is not a bot token (digits, a colon, then the secret: as @BotFather gives it;"
                " value not shown)"
            )
        return value


# Every receiver kind, by its key under [alerts]. A new kind is a model here and a module
# in alerts/receivers/ (registered in alerts.notifiers.NOTIFIERS, checked against this).
RECEIVERS: Mapping[str, type[ReceiverModel]] = {
    model.kind: model
    for model in (
        SlackSettings,
        StdoutSettings,
        WebhookSettings,
        PagerDutySettings,
        AlertmanagerSettings,
        TelegramSettings,
    )
}

ReceiverSettings = ReceiverModel

# `<kind>.<key>` of every secret: an unset `${NAME}` there is a MissingSecret (the loader).
SECRET_KEYS = frozenset(
    f"{kind}.{key}" for kind, model in RECEIVERS.items() for key in model.secret_keys()
)

# The tables that configure a receiver, for "no receiver is configured (add one of ...)".
RECEIVER_TABLES = ", ".join(model.table() for model in RECEIVERS.values())
