"""`[alerts]`: the alert lifecycle's keys, a table per receiver kind of the registry the settings
are validated against (`alerts_model`), and the routes that pick each alert's receivers
(docs/configuration.md#alert-receivers-and-routes, docs/alerts.md#receivers-and-routes)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any, ClassVar

from pydantic import Field, create_model, field_validator, model_validator

from watchdog.core.durations import Duration
from watchdog.core.errors import ConfigError, RegistryError
from watchdog.core.settings.inhibit import DEFAULT_INHIBIT, InhibitRule
from watchdog.core.settings.plugins import Plugins
from watchdog.core.settings.receivers import ReceiverModel, as_tuple
from watchdog.core.settings.values import ConfigModel, MissingSecret
from watchdog.core.text import printable
from watchdog.core.vocabulary import Severity

__all__ = ["AlertSettings", "RouteSettings", "alerts_model"]

_RECEIVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


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
        return as_tuple(value)

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
    """`[alerts]`: the alert lifecycle (docs/spec.md section 8), its receivers and routes.

    The receivers' tables are the fields `alerts_model` adds, one per receiver kind of
    its registry (`plugins`); read them through `receivers()`.
    """

    plugins: ClassVar[Plugins] = Plugins()

    repeat_interval: Duration = timedelta(hours=24)
    pending_runs: int = Field(default=1, ge=1)  # consecutive breached runs that open an alert
    max_delivery_age: Duration = timedelta(days=7)  # undelivered older than this is dropped
    delivery_timeout: Duration = timedelta(seconds=60)  # total delivery time within one run
    # How long the alert lease (alerts.lease) outlives a holder that died; renewed while it runs.
    lease_ttl: Duration = timedelta(minutes=5)
    templates_dir: str | None = None  # overrides alerts/templates/*.j2 file by file
    routes: tuple[RouteSettings, ...] = ()
    # Alertmanager's inhibit rules; by default a breached telemetry_freshness holds the rest.
    inhibit: tuple[InhibitRule, ...] = DEFAULT_INHIBIT
    default_receivers: tuple[str, ...] | None = None  # None: every receiver

    @field_validator("default_receivers", mode="before")
    @classmethod
    def _default_list(cls, value: Any) -> Any:
        return as_tuple(value)

    @model_validator(mode="after")
    def _valid(self) -> AlertSettings:
        for model in self._models():
            kind = model.kind
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
                    tables = self.plugins.receiver_tables()
                    configured = ", ".join(known) or f"none; add one of {tables}"
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

    def _models(self) -> list[type[ReceiverModel]]:
        return [entry.model for entry in self.plugins.receivers]

    def receivers(self) -> dict[str, ReceiverModel]:
        """Every receiver configured (and enabled), by the name routes and the outbox use."""
        found: dict[str, ReceiverModel] = {}
        for model in self._models():
            kind = model.kind
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


def alerts_model(plugins: Plugins) -> type[AlertSettings]:
    """`[alerts]` with a table per receiver kind of `plugins`: one field each, a table
    (`[alerts.slack]`) or a table of named tables (`[alerts.webhook.<name>]`)."""
    fields: dict[str, Any] = {}
    for entry in plugins.receivers:
        model = entry.model
        if model.kind in AlertSettings.model_fields:
            raise RegistryError(f"receiver kind {model.kind!r} is a key of [alerts] already")
        if model.named:
            fields[model.kind] = (dict[str, model], Field(default_factory=dict))  # type: ignore[valid-type]
        else:
            fields[model.kind] = (model | None, None)
    built = create_model(
        "AlertSettings",
        __base__=AlertSettings,
        __module__=__name__,
        __doc__=AlertSettings.__doc__,
        **fields,
    )
    built.plugins = plugins
    return built
