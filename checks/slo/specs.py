"""The configured SLOs, each with the check it follows and its exact parameters (`slo_specs`).

An SLO's objective left out is its latency check's quantile (recall_latency: 95%); the check is
the one `configured_checks` built, overrides included, so the SLO counts exactly what the check
counts: its roles, its scope, its target for latencies (docs/slo.md#configuration).
"""

from __future__ import annotations

from collections.abc import Sequence

from checks.base import CheckSpec, SloSpec
from checks.kinds import kind_of
from checks.slo.budget import TIERS, SloParams
from watchdog.core.errors import RegistryError
from watchdog.core.settings import Settings
from watchdog.core.settings.slo import LATENCY, RATIO


def slo_specs(settings: Settings, checks: Sequence[CheckSpec]) -> tuple[SloSpec, ...]:
    """The enabled SLOs of `settings`, in config order, over `checks` (`configured_checks`).

    The settings were validated when they loaded (each SLO's check exists and has an SLI);
    RegistryError on checks that do not match them.
    """
    by_id = {check.id: check for check in checks}
    found = []
    for name, table in settings.slo.enabled.items():
        check = by_id.get(table.check)
        if check is None:
            raise RegistryError(f"slo.{name}: its check {table.check!r} was not configured")
        kind = kind_of(check)
        if kind.sli not in (RATIO, LATENCY):
            raise RegistryError(f"slo.{name}: check {check.id} has no SLI")
        objective = table.objective_number or kind.slo_objective(check.params)
        if objective is None:
            raise RegistryError(f"slo.{name}: no objective, and {check.id} implies none")
        params = SloParams(
            objective=objective,
            period=table.period,
            bucket=settings.slo.bucket,
            min_events=table.min_events,
        )
        found.append(SloSpec(name=name, check=check, sli=kind.sli, params=params))
    return tuple(found)


def never_firing(slos: Sequence[SloSpec]) -> list[str]:
    """A warning for each tier of an SLO that can never fire: its factor is at or above the
    highest burn the objective allows, 1 / (1 - objective), every event bad (`config check`)."""
    warnings = []
    for slo in slos:
        params = slo.params
        highest = float(1 / params.error_share)
        for tier in TIERS:
            if not params.can_fire(tier):
                warnings.append(
                    f"slo.{slo.name}.objective: at {float(slo.objective) * 100:g}% the highest"
                    f" burn is {highest:g}, so tier {tier.name} (factor"
                    f" {float(params.factor(tier)):g}) can never fire"
                )
    return warnings
