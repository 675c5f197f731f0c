"""What every receiver's settings have: `ReceiverModel`, which each receiver kind's model (in
its own module, `alerts.receivers.<kind>`) extends to describe itself (kind, table, secrets,
machine or chat), and the validators they share (docs/development.md#adding-a-receiver,
docs/configuration.md#alert-receivers-and-routes)."""

from __future__ import annotations

import types
import typing
from datetime import timedelta
from typing import Any, ClassVar
from urllib.parse import urlsplit

from pydantic import SecretStr, ValidationInfo, field_validator

from watchdog.core.quiet import QuietHours
from watchdog.core.settings.values import ConfigModel, MissingSecret, TimeZone


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


def positive(value: timedelta) -> timedelta:
    """A duration validator: ValueError unless `value` is positive."""
    if value <= timedelta(0):
        raise ValueError("must be positive")
    return value


def as_tuple(value: Any) -> Any:
    """A single string where a list is expected, as a one-item list."""
    return (value,) if isinstance(value, str) else value
