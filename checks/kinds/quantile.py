"""Quantile: the exact nearest-rank quantile of a numeric field of some events in W.

recall_latency_p95 and `kind = "quantile"` custom checks
(docs/checks.md#your-own-checks). Judged in the window scan: each event once
(by id), its value the field of its row of those names; the sorted sample stays
in ClickHouse. Failing events (the triage's, and the evidence's) are those at
or above the target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from fractions import Fraction
from typing import Literal

from pydantic import Field, field_validator

from checks.base import CheckResult, CheckSpec, Comparison, KindParams, Status, Unit
from checks.evidence import Evidence
from checks.kinds.base import Declared, Described, Flag
from checks.scans.binder import Binder
from checks.scans.plans import Context, Judged, Plans, Reader, Row
from checks.scans.session import EVIDENCE
from checks.scans.window import LISTED, numeric_field
from checks.verdict import judge
from watchdog.core.settings.custom import CustomCheck
from watchdog.core.settings.slo import LATENCY


@dataclass(frozen=True)
class Quantile(KindParams):
    """Exact nearest-rank quantile of a numeric field of `events` in W."""

    events: tuple[str, ...]
    q_num: int  # q as the fraction q_num / q_den, so the rank is exact integer arithmetic
    q_den: int
    field: str = "latency_ms"  # a normalized column, or `payload.<key>`
    noun: str = "events"

    @property
    def label(self) -> str:
        """p95, or q<num>/<den> when q is no whole percentage."""
        if 100 % self.q_den == 0:
            return f"p{self.q_num * 100 // self.q_den}"
        return f"q{self.q_num}/{self.q_den}"


class QuantileConfig(CustomCheck):
    """Exact nearest-rank quantile of a numeric field of `events`."""

    kind: Literal["quantile"]
    events: tuple[str, ...] = Field(min_length=1)
    field: str = "latency_ms"
    q: float = Field(gt=0, le=1)
    comparison: Comparison = Comparison.GE
    min_samples: int = Field(default=20, ge=0)

    @property
    def unit(self) -> Unit:
        """Latency in milliseconds (a target may be a duration, `3s`); any other field counts."""
        return Unit.MS if self.field == "latency_ms" else Unit.COUNT

    @field_validator("field")
    @classmethod
    def _known_field(cls, value: str) -> str:
        if value in ("latency_ms", "result_count") or re.fullmatch(r"payload\.[\w.-]+", value):
            return value
        raise ValueError(
            f"{value!r} is not a numeric field (accepted: latency_ms, result_count, payload.<key>)"
        )


class QuantileKind(Declared[Quantile, QuantileConfig]):
    name = "quantile"
    params = Quantile
    config = QuantileConfig
    sli = LATENCY

    def plan(self, plans: Plans, spec: CheckSpec) -> Reader:
        p = self.of(spec)
        scan = plans.window(spec)
        tag = scan.tag()
        named = scan.member(tag, p.events)
        key = scan.bind(p.field.removeprefix("payload."), "String")
        v = scan.value(tag, named, numeric_field(p.field, key))
        target = scan.bind(float(spec.target), "Float64")
        num, den = scan.bind(p.q_num, "UInt64"), scan.bind(p.q_den, "UInt64")
        sample = f"{tag}_in AND {v} IS NOT NULL AND isFinite({v})"
        above = f"{sample} AND {v} >= {target}"
        rank = f"toUInt64(intDiv({tag}_n * {num} + {den} - 1, {den}))"
        h = scan.add_totals(
            tag,
            {
                "n": f"countIf({sample})",
                "xs": f"arraySort(groupArrayIf({v}, {sample}))",
                "value": f"if({tag}_n = 0, NULL, {tag}_xs[{rank}])",
                "above": f"countIf({above})",
                "slow": f"groupArraySortedIf({EVIDENCE})(CAST(({tag}_t, event_id) AS {LISTED}),"
                f" {above})",
            },
            shown=("n", "value", "above", "slow"),
        )
        # The failing events: at or above the target.
        carried = scan.carry_triage(tag, f"{tag}_in AND {v} >= {target}")

        def read(row: Row, ctx: Context) -> Judged:
            """Exact nearest-rank quantile: the value at rank ceil(q * n) of the sorted sample."""
            n = int(row[h["n"]])
            found = row[h["value"]]
            value = float(found) if found is not None else None
            what = "latency" if p.field == "latency_ms" else p.field
            shown = f"{value or 0:.0f} ms" if spec.unit is Unit.MS else f"{value or 0:g}"
            evidence = Evidence(
                events=tuple(e["id"] for e in row[h["slow"]]),
                at_or_above_target=int(row[h["above"]]),
            )
            result = judge(
                spec,
                value,
                n,
                f"{p.label} {what} {shown} over {n} {p.noun}",
                evidence,
                no_data=n == 0,
                no_data_summary=f"no {', '.join(p.events)} with a {p.field} in the window",
            )
            breached = result.status is Status.BREACHED
            return Judged(result, carried.read(row) if carried and breached else None)

        return read

    def flag(self, spec: CheckSpec, bind: Binder) -> Flag:
        """An event at or above the target (what the evidence and the triage list)."""
        p = self.of(spec)
        v = numeric_field(p.field, bind(p.field.removeprefix("payload."), "String"))
        shown = f"{spec.target:g} ms" if spec.unit is Unit.MS else f"{spec.target:g}"
        words = f"{p.field} at or above the target {shown}"
        return Flag(
            p.events, f"{v} >= {bind(float(spec.target), 'Float64')}", bind(words, "String")
        )

    def describe(self, params: Quantile) -> Described:
        return [("quantile", f"{params.q_num}/{params.q_den} of {params.field}, nearest rank")]

    def slo_counts(self, result: CheckResult) -> tuple[int, int]:
        """Of the quantile's sample, good: below the target; bad: at or above it."""
        above = result.evidence.at_or_above_target or 0
        return result.sample_size - above, above

    def slo_lead(self, params: Quantile) -> timedelta:
        """Nothing before the bucket: each value counts in the bucket of its event's ts."""
        return timedelta(0)

    def slo_objective(self, params: Quantile) -> Fraction:
        """The quantile: an SLO over a p95 check asks 95% of the sample below the target."""
        return Fraction(params.q_num, params.q_den)

    def payload_names(self, params: Quantile) -> tuple[str, ...]:
        return params.events if params.field.startswith("payload.") else ()

    def from_config(self, config: QuantileConfig) -> tuple[Quantile, Unit]:
        q = Fraction(str(config.q)).limit_denominator(1_000_000)
        params = Quantile(
            events=config.events, q_num=q.numerator, q_den=q.denominator, field=config.field
        )
        return params, config.unit


KIND = QuantileKind()
