"""The words a check's config and its results share: severity, comparison, no-data policy.

Defined once, here below the settings, which validate config with them (`[checks.<id>]`,
`[[checks.custom]]`, `alerts.*.severity`), and which checks, alerts and reports use as they are
(`checks.base` re-exports them; what each means: docs/spec.md#5-checks).
"""

from __future__ import annotations

import enum


class NoDataPolicy(enum.StrEnum):
    """What a check's `no_data` does to its alert (`[checks.<id>] no_data`), as in Grafana."""

    KEEP_STATE = "keep_state"  # the alert keeps its state; reminders say since when no data
    ALERTING = "alerting"  # no data opens an alert of its own kind, resolved when ok again


class Severity(enum.StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


class Comparison(enum.StrEnum):
    """How a value breaches its target."""

    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="

    def breaches(self, value: float, target: float) -> bool:
        if self is Comparison.GT:
            return value > target
        if self is Comparison.GE:
            return value >= target
        if self is Comparison.LT:
            return value < target
        return value <= target


# The check a telemetry outage breaches: while it breaches, every other check judges telemetry
# that stopped, so reports and chat list it first and its alert holds the others by default
# (`[[alerts.inhibit]]`, docs/alerts.md#inhibition).
FRESHNESS_CHECK_ID = "telemetry_freshness"
