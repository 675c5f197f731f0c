"""An SLO as a report shows it: its name, its check, its objective and its figures at the run's
time, and the `"slos"` entry of the JSON report (docs/slo.md#in-the-report).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checks.slo.budget import SloFigures
from checks.slo.specs import SloSpec
from watchdog.core.durations import format_duration
from watchdog.core.times import rfc3339


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
