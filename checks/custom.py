"""Custom checks from `[[checks.custom]]`: the same kinds the built-ins are made of."""

from __future__ import annotations

from fractions import Fraction

from checks.base import Comparison, NoDataPolicy, Severity
from checks.kinds import (
    Anchor,
    CheckSpec,
    Counted,
    Coverage,
    Freshness,
    KindParams,
    Obligation,
    OutcomeRate,
    Quantile,
    Share,
    Streak,
    Unit,
)
from watchdog.core.durations import duration_ms
from watchdog.core.settings.custom import (
    CoverageCheck,
    CustomCheck,
    FreshnessCheck,
    OutcomeRateCheck,
    QuantileCheck,
    ShareCheck,
    StreakCheck,
)


def _params(check: CustomCheck) -> tuple[KindParams, Unit]:
    """The kind parameters and unit of one custom check."""
    if isinstance(check, CoverageCheck):
        required = " or ".join(check.required)
        if check.trigger:
            label = f"{required} after {' or '.join(check.trigger)}"
            if check.until:
                label += f", before {' or '.join(check.until)}"
            obligation = Obligation(
                anchor=Anchor.EVENT,
                required=check.required,
                grace_ms=duration_ms(check.grace),
                lead_ms=duration_ms(check.lead),
                triggers=check.trigger,
                until=check.until,
                label=label,
            )
        else:
            obligation = Obligation(
                anchor=Anchor.START,
                required=check.required,
                grace_ms=duration_ms(check.grace),
                label=f"{required} at the start",
            )
        counted = Counted(check.count)
        return Coverage(
            obligations=(obligation,),
            noun="events" if counted is Counted.EVENTS else "sessions",
            breach_phrase=f"missed {required}",
            session_filter=check.session_filter,
            counted=counted,
        ), "count"
    if isinstance(check, OutcomeRateCheck):
        return OutcomeRate(
            started=check.started,
            completed=check.completed,
            failed=check.failed,
            grace_ms=duration_ms(check.grace),
        ), "ratio"
    if isinstance(check, QuantileCheck):
        q = Fraction(str(check.q)).limit_denominator(1_000_000)
        unit: Unit = "ms" if check.field == "latency_ms" else "count"
        return Quantile(
            events=check.events, q_num=q.numerator, q_den=q.denominator, field=check.field
        ), unit
    if isinstance(check, StreakCheck):
        return Streak(bad=check.bad, good=check.good), "count"
    if isinstance(check, ShareCheck):
        return Share(events=check.events, field=check.field, value=check.value), "ratio"
    if isinstance(check, FreshnessCheck):
        return Freshness(events=check.events), "s"
    raise TypeError(f"unknown custom check {check!r}")


def to_spec(check: CustomCheck) -> CheckSpec:
    """One `[[checks.custom]]` table as a CheckSpec."""
    params, unit = _params(check)
    return CheckSpec(
        id=check.id,
        params=params,
        target=check.target,
        comparison=Comparison(check.comparison),
        severity=Severity(check.severity),
        min_samples=check.min_samples,
        unit=unit,
        description=check.description,
        enabled=check.enabled,
        window_ms=duration_ms(check.window) if check.window is not None else None,
        no_data=NoDataPolicy(check.no_data),
    )
