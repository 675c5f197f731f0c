"""`[alerts]`: the alert lifecycle's keys, a table per receiver kind of `RECEIVERS`, and the
routes that pick each alert's receivers (docs/configuration.md#alert-receivers-and-routes,
docs/alerts.md#receivers-and-routes)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from pydantic import Field, create_model, field_validator, model_validator

from watchdog.core.durations import Duration
from watchdog.core.errors import ConfigError
from watchdog.core.settings.receivers import (
    PAGERDUTY_EVENTS_URL,
    RECEIVER_TABLES,
    RECEIVERS,
    TELEGRAM_API_URL,
    AlertmanagerSettings,
    PagerDutySettings,
    ReceiverModel,
    ReceiverSettings,
    SlackSettings,
    StdoutSettings,
    TelegramSettings,
    WebhookSettings,
)
from watchdog.core.settings.values import ConfigModel, MissingSecret
from watchdog.core.text import printable
from watchdog.core.vocabulary import Severity

__all__ = [
    "PAGERDUTY_EVENTS_URL",
    "RECEIVERS",
    "RECEIVER_TABLES",
    "TELEGRAM_API_URL",
    "AlertSettings",
    "AlertmanagerSettings",
    "PagerDutySettings",
    "ReceiverSettings",
    "RouteSettings",
    "SlackSettings",
    "StdoutSettings",
    "TelegramSettings",
    "WebhookSettings",
]

_RECEIVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _as_tuple(value: Any) -> Any:
    """A single string where a list is expected, as a one-item list."""
    return (value,) if isinstance(value, str) else value


class RouteSettings(ConfigModel):
    """`[[alerts.routes]]`: which receivers get the alerts this route matches.

    An empty `severity` or `checks` matches any; both given, both must match.
    """

    severity: tuple[Severity, ...] = ()
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


class _AlertSettings(ConfigModel):
    """`[alerts]`: the alert lifecycle (docs/spec.md section 8), its receivers and routes.

    The receivers' tables are the fields `AlertSettings` adds, one per kind of
    RECEIVERS; read them through `receivers()`.
    """

    repeat_interval: Duration = timedelta(hours=24)
    pending_runs: int = Field(default=1, ge=1)  # consecutive breached runs that open an alert
    max_delivery_age: Duration = timedelta(days=7)  # undelivered older than this is dropped
    delivery_timeout: Duration = timedelta(seconds=60)  # total delivery time within one run
    # How long the alert lease (alerts.lease) outlives a holder that died; renewed while it runs.
    lease_ttl: Duration = timedelta(minutes=5)
    templates_dir: str | None = None  # overrides alerts/templates/*.j2 file by file
    routes: tuple[RouteSettings, ...] = ()
    default_receivers: tuple[str, ...] | None = None  # None: every receiver

    @field_validator("default_receivers", mode="before")
    @classmethod
    def _default_list(cls, value: Any) -> Any:
        return _as_tuple(value)

    @model_validator(mode="after")
    def _valid(self) -> _AlertSettings:
        for kind, model in RECEIVERS.items():
            if not model.named:
                continue
            for name in getattr(self, kind):
                if not _RECEIVER_NAME.fullmatch(name):
                    raise ConfigError(
                        f"alerts.{kind}.{printable(name, 80)}",
                        "a receiver name is 1 to 64 letters, digits, _ or -",
                    )
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

    def receivers(self) -> dict[str, ReceiverModel]:
        """Every receiver configured (and enabled), by the name routes and the outbox use."""
        found: dict[str, ReceiverModel] = {}
        for kind, model in RECEIVERS.items():
            configured = getattr(self, kind)
            if model.named:
                for name, receiver in configured.items():
                    found[f"{kind}.{name}"] = receiver
            elif configured is not None and configured.sends():
                found[kind] = configured
        return found

    def missing_secrets(self) -> list[MissingSecret]:
        """Secrets referenced as `${NAME}` with NAME unset, in the receivers configured."""
        return [s for receiver in self.receivers().values() for s in receiver.missing_secrets()]


def _receiver_fields() -> dict[str, Any]:
    """One field per receiver kind: a table, or a table of named tables."""
    fields: dict[str, Any] = {}
    for kind, model in RECEIVERS.items():
        if model.named:
            fields[kind] = (dict[str, model], Field(default_factory=dict))  # type: ignore[valid-type]
        else:
            fields[kind] = (model | None, None)
    return fields


if TYPE_CHECKING:
    AlertSettings = _AlertSettings
else:
    # `[alerts]` with a table per receiver kind: RECEIVERS is the one list of them.
    AlertSettings = create_model(
        "AlertSettings",
        __base__=_AlertSettings,
        __module__=__name__,
        __doc__=_AlertSettings.__doc__,
        **_receiver_fields(),
    )
