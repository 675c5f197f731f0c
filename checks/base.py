"""The contracts every check shares: windows, statuses, a check's spec, results, the report.

What each field means to users (status, value, target, severity, sample size, summary,
evidence): docs/spec.md#5-checks; the report they make:
docs/spec.md#6-the-report-json---format-json-schema_version-1.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from checks.breakdown import Triage
from checks.evidence import Evidence
from checks.slo.budget import SloFigures, SloParams
from watchdog.core.durations import format_duration
from watchdog.core.times import rfc3339, to_ms
from watchdog.core.units import Unit as Unit  # where checks and reports import it from
from watchdog.core.vocabulary import FRESHNESS_CHECK_ID
from watchdog.core.vocabulary import Comparison as Comparison  # (the same: one definition each)
from watchdog.core.vocabulary import NoDataPolicy as NoDataPolicy
from watchdog.core.vocabulary import Severity as Severity


class Status(enum.StrEnum):
    OK = "ok"
    BREACHED = "breached"
    INSUFFICIENT_DATA = "insufficient_data"
    NO_DATA = "no_data"
    ERROR = "error"
    DISABLED = "disabled"


@dataclass(frozen=True)
class Window:
    """The evaluation window W = [at - length, at); events exist only before `at`."""

    at: datetime
    length: timedelta
    lookback: timedelta

    def __post_init__(self) -> None:
        if self.at.tzinfo is None:
            raise ValueError("Window.at must be timezone-aware")

    @property
    def start(self) -> datetime:
        return self.at - self.length

    @property
    def end(self) -> datetime:
        return self.at

    @property
    def read_from(self) -> datetime:
        return self.at - self.lookback

    def sized(self, length_ms: int | None) -> Window:
        """The window ending at the same time, `length_ms` long (None: this one)."""
        if length_ms is None:
            return self
        return replace(self, length=timedelta(milliseconds=length_ms))

    def params(self) -> dict[str, int]:
        """The window as bound query parameters, in epoch milliseconds."""
        return {
            "at_ms": to_ms(self.at),
            "ws_ms": to_ms(self.start),
            "lb_ms": to_ms(self.read_from),
        }


@dataclass(frozen=True)
class KindParams:
    """The parameters of one check kind (`checks.kinds`): each kind's dataclass extends this."""


@dataclass(frozen=True)
class CheckSpec:
    """One configured check: its identity, verdict rule and kind parameters."""

    id: str
    params: KindParams
    target: float
    comparison: Comparison
    severity: Severity
    min_samples: int
    unit: Unit
    description: str
    enabled: bool = True
    window_ms: int | None = None  # a check-specific window length (multi-window alerting)
    no_data: NoDataPolicy = NoDataPolicy.KEEP_STATE  # what `no_data` does to its alert
    # Its kind (a checks.kinds Kind, found in the settings' registry by `configured_checks`):
    # what plans, triages and explains it (`checks.kinds.kind_of`).
    kind: object = field(default=None, compare=False, repr=False)

    def window_for(self, window: Window) -> Window:
        """The window this check is judged over: its own length if it has one, else `window`."""
        return window.sized(self.window_ms)


@dataclass(frozen=True)
class CheckResult:
    """The verdict of one check over one window (docs/spec.md section 5)."""

    id: str
    status: Status
    value: float | None
    target: float
    severity: Severity
    sample_size: int
    summary: str
    evidence: Evidence = field(default_factory=Evidence)
    comparison: Comparison = Comparison.GT
    unit: Unit = Unit.COUNT
    description: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "unit", Unit(self.unit))  # as read back from a stored report

    def to_json(self) -> dict[str, Any]:
        value: float | int | None = self.value
        if value is not None and float(value).is_integer() and self.unit in (Unit.COUNT, Unit.S):
            value = int(value)
        target: float | int = self.target
        if float(target).is_integer() and self.unit is not Unit.RATIO:
            target = int(target)
        return {
            "status": self.status.value,
            "value": value,
            "target": target,
            "severity": self.severity.value,
            "sample_size": self.sample_size,
            "summary": self.summary,
            "evidence": self.evidence.to_json(),
            "comparison": self.comparison.value,
            "unit": self.unit.value,
        }


def overall_status(results: Mapping[str, CheckResult]) -> Status:
    """`error` if any check errored, else `breached` if any breached, else `ok`."""
    statuses = {r.status for r in results.values()}
    if Status.ERROR in statuses:
        return Status.ERROR
    if Status.BREACHED in statuses:
        return Status.BREACHED
    return Status.OK


@dataclass(frozen=True)
class DeviationCount:
    agente: str
    tipo: str
    count: int


# ---- SLOs as a report carries them (docs/slo.md; checks.slo.specs resolves them) -------


@dataclass(frozen=True)
class SloSpec:
    """One SLO: its name, the check it follows (as configured), the SLI that check measures
    ("ratio" or "latency"), and the parameters of its figures."""

    name: str
    check: CheckSpec
    sli: str
    params: SloParams

    @property
    def objective(self) -> Fraction:
        return self.params.objective


@dataclass(frozen=True)
class SloReport:
    """One SLO at a report's time: what it follows and its figures there."""

    spec: SloSpec
    figures: SloFigures

    @property
    def name(self) -> str:
        return self.spec.name

    def to_json(self) -> dict[str, Any]:
        """The report's `slos.<name>` (docs/spec.md section 11's keys): rates as fractions,
        durations as the config writes them, a figure with no event null."""
        spec, f = self.spec, self.figures
        budget = f.budget
        return {
            "check": spec.check.id,
            "sli": spec.sli,
            "objective": float(spec.objective),
            "period": format_duration(spec.params.period),
            "bucket": format_duration(spec.params.bucket),
            "at": rfc3339(f.at),
            "good": f.good,
            "bad": f.bad,
            "total": f.total,
            "coverage": f.coverage,
            "budget": {
                "allowed": budget.allowed if budget else None,
                "consumed": budget.consumed if budget else None,
                "remaining": budget.remaining if budget else None,
            },
            "status": f.status.value,
            "burn": dict(f.burn),
            "tiers": [
                {
                    "name": t.tier.name,
                    "alert": t.tier.alert.value,
                    "long": format_duration(t.tier.long),
                    "short": format_duration(t.tier.short),
                    "factor": t.factor,
                    "state": t.state.value,
                }
                for t in f.tiers
            ],
            "exhaustion_s": f.exhaustion_s,
        }


@dataclass(frozen=True)
class Report:
    """One evaluation: every check's result over one window (docs/spec.md section 6)."""

    window: Window
    source: str
    checks: Mapping[str, CheckResult]
    deviations: tuple[DeviationCount, ...] = ()
    data_quality: Mapping[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    # Per breached check: its failing items grouped by the source's dimensions (checks.triage).
    triage: Mapping[str, Triage] = field(default_factory=dict)
    # Each enabled SLO at the report's time, by name (SloReport; docs/slo.md).
    slos: Mapping[str, SloReport] = field(default_factory=dict)

    @property
    def status(self) -> Status:
        return overall_status(self.checks)

    def ordered(self) -> list[CheckResult]:
        """Checks with the worst first: error, breached, then the rest in spec order; a breached
        telemetry_freshness before all (the telemetry stopped: the other checks judge its gap)."""
        rank = {Status.ERROR: 0, Status.BREACHED: 1}

        def key(r: CheckResult) -> int:
            if r.id == FRESHNESS_CHECK_ID and r.status is Status.BREACHED:
                return -1
            return rank.get(r.status, 2)

        return sorted(self.checks.values(), key=key)

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "schema_version": 1,
            "evaluated_at": rfc3339(self.window.at),
            "window": {"start": rfc3339(self.window.start), "end": rfc3339(self.window.end)},
            "status": self.status.value,
            "source": self.source,
            "checks": {check_id: r.to_json() for check_id, r in self.checks.items()},
            "deviations": {
                "by_agent_and_type": [
                    {"agente": d.agente, "tipo": d.tipo, "count": d.count} for d in self.deviations
                ]
            },
            "data_quality": dict(self.data_quality),
            "slos": {name: slo.to_json() for name, slo in self.slos.items()},
        }
        if self.notes:
            document["notes"] = list(self.notes)
        if self.triage:
            document["triage"] = {check_id: t.to_json() for check_id, t in self.triage.items()}
        return document
