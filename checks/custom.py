"""Custom checks from `[[checks.custom]]`: the same kinds the built-ins are made of."""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from checks.base import Comparison, Severity
from checks.kinds import (
    Anchor,
    CheckSpec,
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
from watchdog.core.custom_settings import (
    CoverageCheck,
    CustomCheck,
    FreshnessCheck,
    OutcomeRateCheck,
    QuantileCheck,
    ShareCheck,
    StreakCheck,
)
from watchdog.core.errors import ConfigError


def _ms(value: object) -> int:
    from datetime import timedelta

    assert isinstance(value, timedelta)
    return int(value.total_seconds() * 1000)


def _params(check: CustomCheck) -> tuple[KindParams, Unit]:
    """The kind parameters and unit of one custom check."""
    if isinstance(check, CoverageCheck):
        if check.trigger:
            obligation = Obligation(
                anchor=Anchor.EVENT,
                required=check.required,
                grace_ms=_ms(check.grace),
                lead_ms=_ms(check.lead),
                triggers=check.trigger,
            )
        else:
            obligation = Obligation(
                anchor=Anchor.START, required=check.required, grace_ms=_ms(check.grace)
            )
        phrase = f"missed {' or '.join(check.required)}"
        return Coverage(
            obligations=(obligation,), breach_phrase=phrase, session_filter=check.session_filter
        ), "count"
    if isinstance(check, OutcomeRateCheck):
        return OutcomeRate(
            started=check.started,
            completed=check.completed,
            failed=check.failed,
            grace_ms=_ms(check.grace),
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
        window_ms=_ms(check.window) if check.window is not None else None,
    )


def _reach_ms(spec: CheckSpec, default_window_ms: int) -> int:
    """How far back from `at` the check must read: its window plus its longest grace."""
    window = spec.window_ms or default_window_ms
    p = spec.params
    if isinstance(p, Coverage):
        return window + max(o.grace_ms for o in p.obligations)
    if isinstance(p, OutcomeRate):
        return window + p.grace_ms
    return window


def custom_specs(
    checks: Iterable[CustomCheck],
    builtin_ids: Iterable[str],
    *,
    window_ms: int,
    lookback_ms: int,
) -> list[CheckSpec]:
    """The custom checks as specs.

    Ids must be unique and not shadow a built-in; a check's window plus its
    grace must fit in the lookback, or its obligations could not be judged.
    """
    builtin = set(builtin_ids)
    taken = set(builtin)
    specs = []
    for index, check in enumerate(checks):
        if check.id in taken:
            what = "a built-in check id" if check.id in builtin else "already used above"
            raise ConfigError(f"checks.custom[{index}].id", f"{check.id!r} is {what}")
        taken.add(check.id)
        spec = to_spec(check)
        if _reach_ms(spec, window_ms) > lookback_ms:
            raise ConfigError(
                f"checks.custom[{index}].window",
                "the window plus the grace must fit in window.lookback"
                f" ({lookback_ms // 3_600_000}h); shorten it or raise the lookback",
            )
        specs.append(spec)
    return specs
