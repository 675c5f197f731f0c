"""`[[checks.custom]]`: check instances declared in config, one model per kind.

Each table names a `kind` (coverage, outcome_rate, quantile, streak, share,
freshness) and its parameters; `checks.custom.to_spec` turns it into the same
CheckSpec the built-ins are, so custom checks get the same semantics,
evidence, alerts, history and page.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from watchdog.core.durations import Duration
from watchdog.core.settings.values import FiniteFloat

Comparison = Literal[">", ">=", "<", "<="]
SeverityName = Literal["critical", "warning", "info"]
Names = Annotated[tuple[str, ...], Field(min_length=1)]


class _Custom(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    target: FiniteFloat
    comparison: Comparison = ">"
    severity: SeverityName = "warning"
    min_samples: int = Field(default=0, ge=0)
    enabled: bool = True
    window: Duration | None = None
    description: str = ""
    no_data: Literal["keep_state", "alerting"] = "keep_state"

    @field_validator("id")
    @classmethod
    def _identifier(cls, value: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", value):
            raise ValueError(f"{value!r} is not a check id (lowercase letters, digits, _)")
        return value

    @field_validator("window")
    @classmethod
    def _positive(cls, value: timedelta | None) -> timedelta | None:
        if value is not None and value <= timedelta(0):
            raise ValueError("must be positive")
        return value


class CoverageCheck(_Custom):
    """Every session emits one of `required` within `grace` of its start (or of each trigger).

    With `until`, each trigger's deadline is the first `until` event after it
    when that comes before `grace`: "`required` before `until`, after each
    `trigger`". `count = "events"` counts the triggers instead of the sessions.
    """

    kind: Literal["coverage"]
    required: Names
    grace: Duration
    trigger: tuple[str, ...] = ()
    until: tuple[str, ...] = ()
    lead: Duration = timedelta(0)
    session_filter: str | None = None
    count: Literal["sessions", "events"] = "sessions"

    @model_validator(mode="after")
    def _needs_trigger(self) -> CoverageCheck:
        if not self.trigger:
            if self.until:
                raise ValueError("until needs trigger (the events after which it applies)")
            if self.count == "events":
                raise ValueError('count = "events" needs trigger (the events it counts)')
        return self


class OutcomeRateCheck(_Custom):
    """(failed + lost) / (completed + failed + lost) of an operation."""

    kind: Literal["outcome_rate"]
    started: Names
    completed: Names
    failed: Names
    grace: Duration
    comparison: Comparison = ">="
    min_samples: int = Field(default=20, ge=0)


class QuantileCheck(_Custom):
    """Exact nearest-rank quantile of a numeric field of `events`."""

    kind: Literal["quantile"]
    events: Names
    field: str = "latency_ms"
    q: float = Field(gt=0, le=1)
    comparison: Comparison = ">="
    min_samples: int = Field(default=20, ge=0)

    @field_validator("field")
    @classmethod
    def _known_field(cls, value: str) -> str:
        if value in ("latency_ms", "result_count") or re.fullmatch(r"payload\.[\w.-]+", value):
            return value
        raise ValueError(
            f"{value!r} is not a numeric field (accepted: latency_ms, result_count, payload.<key>)"
        )


class StreakCheck(_Custom):
    """Longest run of consecutive `bad` events among `bad + good`."""

    kind: Literal["streak"]
    bad: Names
    good: Names


class ShareCheck(_Custom):
    """Share of `events` whose payload `field` equals `value`."""

    kind: Literal["share"]
    events: Names
    field: str
    value: str
    comparison: Comparison = ">="
    min_samples: int = Field(default=20, ge=0)


class FreshnessCheck(_Custom):
    """Seconds since the newest of `events` (or of any event)."""

    kind: Literal["freshness"]
    events: tuple[str, ...] = ()


CustomCheck = Annotated[
    CoverageCheck | OutcomeRateCheck | QuantileCheck | StreakCheck | ShareCheck | FreshnessCheck,
    Field(discriminator="kind"),
]

MODELS: dict[str, type[BaseModel]] = {
    "coverage": CoverageCheck,
    "outcome_rate": OutcomeRateCheck,
    "quantile": QuantileCheck,
    "streak": StreakCheck,
    "share": ShareCheck,
    "freshness": FreshnessCheck,
}
KINDS = tuple(MODELS)
