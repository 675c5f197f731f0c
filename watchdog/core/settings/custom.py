"""`[[checks.custom]]`: the keys every custom check has, and their validation by kind.

Each table names a `kind`; the kind's own module (`checks.kinds.<kind>`) defines the model of its
other keys, a subclass of `CustomCheck`, which the registry the settings are validated against
(`watchdog.core.settings.plugins`) holds. The loader validates each table with its kind's
model: one error line naming `checks.custom[<n>].<key>`, exit 2 (docs/checks.md#your-own-checks;
a new kind's model: docs/development.md#adding-a-check-kind).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from watchdog.core.durations import Duration
from watchdog.core.errors import ConfigError, ConfigErrors
from watchdog.core.units import TargetText, Unit, target_value
from watchdog.core.vocabulary import Comparison, NoDataPolicy, Severity


class CustomCheck(BaseModel):
    """The keys of every `[[checks.custom]]` table; each kind's model adds its own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    kind: str
    target: TargetText  # as written ("5%", "3s", 0.05): `target_number` reads it in `unit`
    comparison: Comparison = Comparison.GT
    severity: Severity = Severity.WARNING
    min_samples: int = Field(default=0, ge=0)
    enabled: bool = True
    window: Duration | None = None
    description: str = ""
    no_data: NoDataPolicy = NoDataPolicy.KEEP_STATE

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

    @property
    def unit(self) -> Unit:
        """What the check's value measures (each kind's model says; its target is read in it)."""
        return Unit.COUNT

    @property
    def target_number(self) -> float:
        """The target in the check's unit (`5%` of a rate: 0.05; `3s` of a latency: 3000)."""
        return target_value(self.target, self.unit)

    def reach(self, default_window: timedelta) -> timedelta:
        """How far back from `at` the check must read: its window (plus a grace, for some kinds)."""
        return self.window or default_window


class CustomKinds:
    """The declarable check kinds by name, each with the model of its table."""

    def __init__(self, models: Mapping[str, type[CustomCheck]]) -> None:
        self.models = dict(models)

    def validate(self, tables: Any) -> tuple[CustomCheck, ...]:
        """Each `[[checks.custom]]` table as its kind's model; ConfigError names every bad key."""
        if not isinstance(tables, list | tuple):
            raise ConfigError("checks.custom", "must be an array of tables ([[checks.custom]])")
        checks: list[CustomCheck] = []
        problems: list[ConfigError] = []
        for i, table in enumerate(tables):
            try:
                checks.append(self._one(f"checks.custom[{i}]", table))
            except ConfigError as exc:
                problems.append(exc)
        if problems:
            raise ConfigErrors.of(problems)
        return tuple(checks)

    def _one(self, key: str, table: Any) -> CustomCheck:
        if isinstance(table, CustomCheck):
            return table
        if not isinstance(table, dict):
            raise ConfigError(key, "must be a table")
        accepted = ", ".join(self.models)
        kind = table.get("kind")
        if kind is None:
            raise ConfigError(f"{key}.kind", f"is required (accepted: {accepted})")
        model = self.models.get(kind) if isinstance(kind, str) else None
        if model is None:
            raise ConfigError(f"{key}.kind", f"{kind!r} is not accepted (accepted: {accepted})")
        try:
            check = model.model_validate(table)
        except ValidationError as exc:
            described = (_described(error, kind, model) for error in exc.errors())
            raise ConfigErrors.of(
                [ConfigError(".".join([key, *where]), problem) for where, problem in described]
            ) from None
        try:
            check.target_number  # noqa: B018  (a target that does not fit the unit: refused here)
        except ValueError as exc:
            raise ConfigError(f"{key}.target", str(exc)) from None
        return check


def _described(error: Any, kind: str, model: type[CustomCheck]) -> tuple[Sequence[str], str]:
    """pydantic's first error inside one table: the key path under it, and the problem."""
    where = [str(part) for part in error["loc"]]
    if error["type"] == "extra_forbidden":
        return where, f"unknown key for kind {kind} (accepted: {', '.join(model.model_fields)})"
    if error["type"] == "missing":
        return where, f"is required for kind {kind}"
    if error["type"] in ("literal_error", "enum"):
        expected = error.get("ctx", {}).get("expected", "")
        return where, f"{error.get('input')!r} is not accepted (accepted: {expected})"
    return where, str(error["msg"]).removeprefix("Value error, ")
