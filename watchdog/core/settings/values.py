"""Typed config values checked when the config loads: time zones, crontab lines, secrets.

Also `ConfigModel`, the base of every settings model: an unknown key is an error naming it
(docs/configuration.md#validation).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import AfterValidator, BaseModel, ConfigDict, SecretStr

from watchdog.core.cron import CronLine


class ConfigModel(BaseModel):
    """The base of every settings model: unknown keys are errors, values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def _timezone(value: str) -> str:
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"{value!r} is not an IANA time zone (e.g. UTC, Europe/Berlin)") from None
    return value


TimeZone = Annotated[str, AfterValidator(_timezone)]


def _crontab(value: str) -> str:
    """A crontab line that parses and fires at all (`0 0 31 2 *` never does)."""
    CronLine.parse(value)
    return value


Crontab = Annotated[str, AfterValidator(_crontab)]


@dataclass(frozen=True)
class MissingSecret:
    """A secret the config references as `${NAME}` while NAME is not set.

    Commands that send nothing (`status`, `alerts`, `silence`, `check`) load
    such a config; whatever would send through it says, in one line, which
    key and variable are missing (`problem`).
    """

    key: str  # e.g. alerts.slack.webhook_url
    variable: str  # e.g. SLACK_WEBHOOK_URL

    @property
    def problem(self) -> str:
        return f"{self.key}: environment variable {self.variable} is not set"


# One part of a secret as the config wrote it: its text, and None when the file holds that text,
# else the `${NAME}` reference it came from, as it may be shown (`${NAME}`, `${NAME:-***}`).
WrittenPart = tuple[str, str | None]


class WrittenSecret(SecretStr):
    """A secret the loader read, and which of its parts came from the environment.

    The value is the parts' texts joined. A receiver may show what the file says, each part
    from a `${NAME}` reference shown as that reference, and never what the environment gave
    (alerts.receivers.secrets.secret_url). A `SecretStr` made elsewhere says nothing of where
    it came from: it is shown as a secret, whole.
    """

    def __init__(self, parts: tuple[WrittenPart, ...]) -> None:
        super().__init__("".join(text for text, _ in parts))
        self.parts = parts

    def __eq__(self, other: object) -> bool:  # equal to a SecretStr of the same value, both ways
        return isinstance(other, SecretStr) and self.get_secret_value() == other.get_secret_value()

    def __hash__(self) -> int:
        return hash(self.get_secret_value())


Secret = SecretStr | MissingSecret


def secret_value(secret: Secret | None) -> str:
    """The secret's value, '' when absent; a MissingSecret is not a value (ask `missing` first)."""
    if isinstance(secret, SecretStr):
        return secret.get_secret_value()
    return ""


# A secret, or a part of one, shorter than this is masked only as part of a longer one: it holds
# no secret worth the name, and masking every `v2` or `api` in a line would garble it.
MIN_PART = 4


def mask_secrets(text: str, secrets: Iterable[tuple[str, str]]) -> str:
    """`text` with every (secret, masked) pair replaced, longest secret first."""
    for secret, masked in sorted(secrets, key=lambda pair: -len(pair[0])):
        if secret:
            text = text.replace(secret, masked)
    return text


def written_parts(secret: Secret | None) -> tuple[WrittenPart, ...] | None:
    """How the config wrote the secret (`WrittenSecret.parts`); None when that is not known."""
    return secret.parts if isinstance(secret, WrittenSecret) else None
