"""The two alerts of every SLO on the section-8 lifecycle: `<name>:page` and `<name>:ticket`
(docs/slo.md#alerts, docs/spec.md section 11).

An SLO alert is judged like a check: its tiers' states become one `CheckResult` (`breached`
when a tier of its alert fires, `ok` when all of them are ok, else `no_data` or
`insufficient_data`, which keep the state), and `process_slos` runs it through the one
pipeline (outbox, repeat, resolve, silences, routes). A firing page alert holds its ticket
alert's announcements, as a silence holds them. The text carries the burn rates against their
factors, the budget left, the time to exhaustion and the ids of bad events of the short
window of a firing alert (`watchdog.runner.slo.with_bad_events` looks them up); never a payload
value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Unpack

from alerts.facts import SLO_KIND
from alerts.pipeline import AlertContext, DeliveryArgs, Evaluation, ProcessOutcome, run
from alerts.rows import RunKind
from alerts.state import LIVE
from checks.base import CheckResult, Report, Severity, SloSpec, Status, Window
from checks.evidence import Evidence
from checks.slo.budget import Alert, SloFigures, TierFigures, TierState
from checks.verdict import percent
from watchdog.core.durations import format_duration, human_duration
from watchdog.core.settings import Settings, slo_alert_id
from watchdog.core.store import Store

SEVERITY = {Alert.PAGE: Severity.CRITICAL, Alert.TICKET: Severity.WARNING}
MAX_BAD_EVENTS = 20  # ids kept per alert; the message shows the first five


@dataclass(frozen=True)
class SloJudgement:
    """One SLO at one bucket boundary: its spec, its figures, and the ids of bad events in the
    short window of each firing alert (none for an alert that does not fire)."""

    spec: SloSpec
    figures: SloFigures
    bad_events: Mapping[Alert, Sequence[str]] = field(default_factory=dict)


def _burn(value: float | None) -> str:
    return "no data" if value is None else f"{value:.3g}"


def _tier_text(tier: TierFigures) -> str:
    """`page-fast: burn 20.1 (1h), 25 (5m) vs 14.4, firing`."""
    t = tier.tier
    return (
        f"{t.name}: burn {_burn(tier.long_burn)} ({format_duration(t.long)}),"
        f" {_burn(tier.short_burn)} ({format_duration(t.short)}) vs {tier.factor:.3g},"
        f" {tier.state.value.replace('_', ' ')}"
    )


def _budget_text(figures: SloFigures, period: timedelta) -> str:
    budget = figures.budget
    left = "no budget yet (no event)" if budget is None else f"{percent(budget.remaining)} left"
    if figures.exhaustion_s is None:
        pace = "not burning at the 6h rate"
    elif figures.exhaustion_s == 0:
        pace = "exhausted"
    else:
        pace = f"exhausted in {human_duration(figures.exhaustion_s)} at the 6h rate"
    return f"budget over {format_duration(period)}: {left}, {pace}"


def _state(tiers: Sequence[TierFigures]) -> Status:
    """A tier fires: breached; all ok: ok; else no_data or insufficient_data (keep the state)."""
    states = {t.state for t in tiers}
    if TierState.FIRING in states:
        return Status.BREACHED
    if states == {TierState.OK}:
        return Status.OK
    if TierState.NO_DATA in states:
        return Status.NO_DATA
    return Status.INSUFFICIENT_DATA


def _decisive(tiers: Sequence[TierFigures]) -> TierFigures:
    """The tier whose slower window burns most above its factor (the one the value shows)."""

    def excess(tier: TierFigures) -> float:
        if tier.long_burn is None or tier.short_burn is None:
            return float("-inf")
        return min(tier.long_burn, tier.short_burn) / tier.factor

    return max(tiers, key=excess)


def slo_result(judgement: SloJudgement, alert: Alert) -> CheckResult:
    """One SLO alert's verdict from its tiers: what the lifecycle advances (module docstring).

    Its value is the burn of the decisive tier (the lower of its two windows' burns), its
    target that tier's factor; its summary says every tier's burns against their factors,
    the budget left and the time to exhaustion; its evidence the ids of bad events.
    """
    spec, figures = judgement.spec, judgement.figures
    tiers = [t for t in figures.tiers if t.tier.alert is alert]
    decisive = _decisive(tiers)
    burns = [b for b in (decisive.long_burn, decisive.short_burn) if b is not None]
    bad = tuple(judgement.bad_events.get(alert, ()))[:MAX_BAD_EVENTS]
    summary = "; ".join(
        [*(_tier_text(t) for t in tiers), _budget_text(figures, spec.params.period)]
    )
    return CheckResult(
        id=slo_alert_id(spec.name, alert.value),
        status=_state(tiers),
        value=min(burns) if len(burns) == 2 else None,
        target=decisive.factor,
        severity=SEVERITY[alert],
        sample_size=decisive.long_events,
        summary=f"SLO {spec.name} ({percent(float(spec.objective))}): {summary}",
        evidence=Evidence(events=bad or None),
    )


def report_judgements(report: Report) -> list[SloJudgement]:
    """The SLOs a report carries (`Report.slos`, at its bucket boundary), to judge their alerts
    after the report's own (`check --notify`)."""
    return [SloJudgement(slo.spec, slo.figures) for slo in report.slos.values()]


def slo_evaluation(
    source: str, judgements: Sequence[SloJudgement], *, kind: RunKind = LIVE
) -> Evaluation:
    """Both alerts of every SLO judged at the same bucket boundary, page first; each ticket
    alert held while its page alert fires. Not a window of the schedule: no run-log row."""
    if not judgements:
        raise ValueError("an SLO evaluation needs at least one SLO")
    ats = {j.figures.at for j in judgements}
    if len(ats) != 1:
        raise ValueError("the SLOs of one evaluation are judged at one time")
    at = ats.pop()
    bucket = judgements[0].spec.params.bucket
    results: dict[str, CheckResult] = {}
    holds: dict[str, str] = {}
    for judgement in judgements:
        for alert in Alert:
            result = slo_result(judgement, alert)
            results[result.id] = result
        name = judgement.spec.name
        holds[slo_alert_id(name, Alert.TICKET.value)] = slo_alert_id(name, Alert.PAGE.value)
    return Evaluation(
        source=source,
        window=Window(at=at, length=bucket, lookback=bucket),
        results=results,
        kind=kind,
        record=False,
        key="slo/",
        holds=holds,
        kinds=dict.fromkeys(results, SLO_KIND),
    )


def process_slos(
    store: Store,
    settings: Settings,
    judgements: Sequence[SloJudgement],
    **args: Unpack[DeliveryArgs],
) -> ProcessOutcome | None:
    """Advance, enqueue and deliver the SLO alerts of the configured source at their bucket
    boundary (`alerts.pipeline.run`); None when no SLO is configured."""
    if not judgements:
        return None
    evaluation = slo_evaluation(settings.source.display_name, judgements)
    return run(AlertContext.of(store, settings, **args), evaluation)
