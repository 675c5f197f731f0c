"""`[slo]` and `[slo.<name>]`: service level objectives over outcome-rate and quantile checks.

`[slo] bucket` cuts time into epoch-aligned buckets ("1m" or "5m"); each `[slo.<name>]` table
is one SLO (docs/slo.md#configuration): the check whose counting it follows, its
objective, its period, whether it is on, and the fewest events a tier judges. Three are built
in and on by default (`BUILTIN_SLOS`); a table of the same name changes only the keys it
writes. Which checks an SLO may follow is the registry's (a kind's `sli`): the cross-section
rules (`slo_problems`) run in `Settings`'s validator, beside the other check ids.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from fractions import Fraction
from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from watchdog.core.durations import Duration, format_duration
from watchdog.core.errors import ConfigError
from watchdog.core.settings.values import ConfigModel
from watchdog.core.units import TargetText, Unit, target_value

BUCKETS = (timedelta(minutes=1), timedelta(minutes=5))
SHORTEST_PERIOD = timedelta(days=1)
LONGEST_PERIOD = timedelta(days=90)

# The SLIs a check kind can measure: its `sli` (KindEntry) is one of these, or None.
RATIO = "ratio"  # bad = failed + lost outcomes, good = completed ones
LATENCY = "latency"  # bad = a sample at or above the check's target, good = one below it

# The built-in SLOs (docs/spec.md section 11): name -> the keys their table defaults to. An
# objective left out of a latency SLO is the check's quantile (`checks.slo.slo_specs`).
BUILTIN_SLOS: Mapping[str, Mapping[str, Any]] = {
    "observe_success": {"check": "observe_failure_rate", "objective": "99%"},
    "recall_success": {"check": "recall_failure_rate", "objective": "99%"},
    "recall_latency": {"check": "recall_latency_p95"},
}


def objective_value(written: float | str) -> Fraction:
    """An objective as written (`"99.9%"` or `0.999`), exactly, strictly between 0 and 1.

    ValueError, in words that say what to write, otherwise: 100% is refused (no bad event would
    be allowed, so the budget is spent by the first one and every burn rate is infinite).
    Exact: `"99.9%"` is 999/1000, not the float 99.9 / 100 (0.9990000000000001), so a burn
    equal to a tier's factor is equal.
    """
    target_value(written, Unit.RATIO)  # a rate as targets are written, or its own words
    if isinstance(written, str):
        share = Fraction(written.strip().removesuffix("%").strip()) / 100
    else:
        share = Fraction(repr(written))
    if share >= 1:
        raise ValueError(
            f"{written!r}: an objective is below 100% (at 100% no bad event is allowed;"
            ' write e.g. "99.9%")'
        )
    if share <= 0:
        raise ValueError(f'{written!r}: an objective is above 0% (e.g. "99%")')
    return share


class SloTable(ConfigModel):
    """`[slo.<name>]`: one SLO."""

    check: str
    # As written ("99.9%", 0.999); None: the check's quantile (latency SLOs only).
    objective: TargetText | None = None
    period: Duration = timedelta(days=30)
    enabled: bool = True
    min_events: int = Field(default=10, ge=0)

    @field_validator("objective")
    @classmethod
    def _objective(cls, value: float | str | None) -> float | str | None:
        if value is not None:
            objective_value(value)
        return value

    @field_validator("period")
    @classmethod
    def _period(cls, value: timedelta) -> timedelta:
        if not SHORTEST_PERIOD <= value <= LONGEST_PERIOD:
            raise ValueError(
                f"{format_duration(value)} is not a period of"
                f" {format_duration(SHORTEST_PERIOD)} to {format_duration(LONGEST_PERIOD)}"
            )
        return value

    @property
    def objective_number(self) -> Fraction | None:
        """The objective, exactly (999/1000), None when left to the check's quantile."""
        return None if self.objective is None else objective_value(self.objective)


class SloSettings(ConfigModel):
    """`[slo]`: the bucket, and each `[slo.<name>]` table (the built-in ones included)."""

    # The named tables are the model's extra keys, each an `SloTable` (`tables`).
    model_config = ConfigDict(extra="allow", frozen=True)
    __pydantic_extra__: dict[str, SloTable] = Field(init=False)

    bucket: Duration = timedelta(minutes=5)

    @model_validator(mode="before")
    @classmethod
    def _with_builtin(cls, data: Any) -> Any:
        """The built-in SLOs, each overlaid by the table of its name; names checked."""
        if not isinstance(data, dict):
            return data
        for name, table in data.items():
            if name == "bucket":
                continue
            if not isinstance(table, dict | SloTable):
                raise ValueError(
                    f"{name!r} is not a key of [slo] (accepted: bucket, or a table [slo.<name>])"
                )
            if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name):
                raise ValueError(f"{name!r} is not an SLO name (lowercase letters, digits, _)")
        merged = dict(data)
        for name, defaults in BUILTIN_SLOS.items():
            written = merged.get(name, {})
            if isinstance(written, dict):
                merged[name] = {**defaults, **written}
        return merged

    @field_validator("bucket")
    @classmethod
    def _bucket(cls, value: timedelta) -> timedelta:
        if value not in BUCKETS:
            accepted = ", ".join(format_duration(b) for b in BUCKETS)
            raise ValueError(f"{format_duration(value)!r} is not accepted (accepted: {accepted})")
        return value

    @property
    def tables(self) -> dict[str, SloTable]:
        """Every SLO by name: the built-in ones first, then the config's, in its order."""
        return dict(self.__pydantic_extra__ or {})

    @property
    def enabled(self) -> dict[str, SloTable]:
        """The SLOs that are on."""
        return {name: table for name, table in self.tables.items() if table.enabled}


def slo_problems(
    slo: SloSettings, sli_of: Mapping[str, str | None], eligible: Sequence[str]
) -> list[ConfigError]:
    """Each SLO whose check cannot carry it, or whose objective is missing or wrong.

    `sli_of` maps every check id to the SLI its kind measures (None: none); `eligible` lists the
    check ids an SLO may follow, as the error names them. An SLO's period holds whole buckets.
    """
    problems = []
    accepted = ", ".join(eligible) or "none"
    for name, table in slo.tables.items():
        sli = sli_of.get(table.check)
        if sli is None:
            what = (
                "a check id" if table.check not in sli_of else "an outcome-rate or quantile check"
            )
            problems.append(
                ConfigError(
                    f"slo.{name}.check", f"{table.check!r} is not {what} (accepted: {accepted})"
                )
            )
        elif sli == RATIO and table.objective is None:
            problems.append(
                ConfigError(
                    f"slo.{name}.objective",
                    'is required for an SLO over an outcome-rate check (e.g. "99.9%")',
                )
            )
        if table.period % slo.bucket:
            problems.append(
                ConfigError(
                    f"slo.{name}.period",
                    f"{format_duration(table.period)} is no whole number of buckets"
                    f" (slo.bucket = {format_duration(slo.bucket)})",
                )
            )
    return problems
