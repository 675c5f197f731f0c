"""From a measured value to a CheckResult: statuses, min_samples, summaries.

What each status means: docs/checks.md#statuses.
"""

from __future__ import annotations

from decimal import Decimal

from checks.base import CheckResult, CheckSpec, Status, Unit
from checks.evidence import Evidence
from watchdog.core.durations import human_duration


def judge(
    spec: CheckSpec,
    value: float | None,
    sample_size: int,
    summary: str,
    evidence: Evidence,
    *,
    no_data: bool = False,
    no_data_summary: str = "",
) -> CheckResult:
    """Apply the status rules of docs/spec.md section 5: no_data, insufficient_data, breached, ok.

    A check never reports `ok` on nothing: no_data carries a null value and
    a zero sample size.
    """
    if no_data:
        return _result(spec, Status.NO_DATA, None, 0, no_data_summary or summary, Evidence())
    if sample_size < spec.min_samples:
        note = f"{summary} (fewer than min_samples {spec.min_samples})"
        return _result(spec, Status.INSUFFICIENT_DATA, value, sample_size, note, evidence)
    breached = value is None or spec.comparison.breaches(value, spec.target)
    status = Status.BREACHED if breached else Status.OK
    return _result(spec, status, value, sample_size, summary, evidence)


def _result(
    spec: CheckSpec,
    status: Status,
    value: float | None,
    sample_size: int,
    summary: str,
    evidence: Evidence,
) -> CheckResult:
    return CheckResult(
        id=spec.id,
        status=status,
        value=value,
        target=spec.target,
        severity=spec.severity,
        sample_size=sample_size,
        summary=summary,
        evidence=evidence,
        comparison=spec.comparison,
        unit=spec.unit,
        description=spec.description,
    )


def disabled(spec: CheckSpec) -> CheckResult:
    """The result of a check turned off in config."""
    return _result(spec, Status.DISABLED, None, 0, "disabled in config", Evidence())


def errored(spec: CheckSpec, problem: str) -> CheckResult:
    """The result of a check that could not run: reported like a breach, never a crash."""
    return _result(spec, Status.ERROR, None, 0, f"could not evaluate: {problem}", Evidence())


def percent(value: float) -> str:
    """A ratio as a percentage with one decimal: 0.0734 -> 7.3% (any finite value, never inf)."""
    if abs(value) < 1e12:
        return f"{value * 100:.1f}%"
    return f"{Decimal(repr(value)) * 100:.3g}%"


def format_value(result: CheckResult, value: float | None) -> str:
    """A value in its unit: 7, 7.3%, 3120 ms, 4h; a dash when there is none."""
    return value_in(result.unit, value)


def value_in(unit: Unit, value: float | None) -> str:
    """A value in `unit`: 7, 7.3%, 3120 ms, 4h; a dash when there is none."""
    if value is None:
        return "—"
    if unit == "ratio":
        return percent(value)
    if unit == "ms":
        return f"{value:.0f} ms" if abs(value) < 1e15 else f"{value:.3g} ms"
    if unit == "s":
        if value < 0 or value >= 1e12:  # not an age a clock gives: say the number
            return f"{value:.3g} s"
        return human_duration(value)
    return f"{value:g}"


def format_target(result: CheckResult) -> str:
    """The breach rule in words of the unit: `>= 5.0%`, `> 0`, `>= 3000 ms`."""
    return f"{result.comparison.value} {format_value(result, result.target)}"
