"""Share: the share of some events in W whose payload field equals a value.

write_gate_drift (discarded gate decisions) and `kind = "share"` custom checks
(docs/checks.md#your-own-checks). Judged in the window scan, each event once;
the matching events are the failing ones (evidence and triage).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from checks.base import CheckSpec, Comparison, KindParams, Status, Unit
from checks.evidence import Evidence
from checks.kinds.base import Declared, Described, Flag
from checks.scans.binder import Binder
from checks.scans.plans import Context, Judged, Plans, Reader, Row
from checks.scans.session import EVIDENCE
from checks.scans.window import LISTED
from checks.verdict import judge, percent
from watchdog.core.settings.custom import CustomCheck


@dataclass(frozen=True)
class Share(KindParams):
    """Share of `events` in W whose payload `field` equals `value`."""

    events: tuple[str, ...]
    field: str
    value: str
    noun: str = "events"


class ShareConfig(CustomCheck):
    """Share of `events` whose payload `field` equals `value`."""

    kind: Literal["share"]
    events: tuple[str, ...] = Field(min_length=1)
    field: str
    value: str
    comparison: Comparison = Comparison.GE
    min_samples: int = Field(default=20, ge=0)

    @property
    def unit(self) -> Unit:
        """A share: a target is a fraction (`0.7`) or a percentage (`70%`)."""
        return Unit.RATIO


class ShareKind(Declared[Share, ShareConfig]):
    name = "share"
    params = Share
    config = ShareConfig

    def plan(self, plans: Plans, spec: CheckSpec) -> Reader:
        p = self.of(spec)
        scan = plans.window(spec)
        tag = scan.tag()
        named = scan.member(tag, p.events)
        field = scan.bind(p.field, "String")
        v = scan.value(tag, named, f"JSONExtractString(payload, {field})")
        hit = f"{tag}_in AND {v} = {scan.bind(p.value, 'String')}"
        h = scan.add_totals(
            tag,
            {
                "n": f"countIf({tag}_in)",
                "hits": f"countIf({hit})",
                "matching": f"groupArraySortedIf({EVIDENCE})(CAST(({tag}_t, event_id) AS {LISTED}),"
                f" {hit})",
            },
            shown=("n", "hits", "matching"),
        )
        carried = scan.carry_triage(tag, hit)

        def read(row: Row, ctx: Context) -> Judged:
            n, hits = int(row[h["n"]]), int(row[h["hits"]])
            value = hits / n if n else None
            result = judge(
                spec,
                value,
                n,
                f"{percent(value or 0)} of {n} {p.noun} had {p.field} {p.value} ({hits})",
                Evidence(events=tuple(e["id"] for e in row[h["matching"]]), matching=hits),
                no_data=n == 0,
                no_data_summary=f"no {', '.join(p.events)} in the window",
            )
            breached = result.status is Status.BREACHED
            return Judged(result, carried.read(row) if carried and breached else None)

        return read

    def flag(self, spec: CheckSpec, bind: Binder) -> Flag:
        """An event whose field has the value counted (what the evidence lists)."""
        p = self.of(spec)
        field, value = bind(p.field, "String"), bind(p.value, "String")
        words = bind(f"{p.field} = {p.value}", "String")
        return Flag(p.events, f"JSONExtractString(payload, {field}) = {value}", words)

    def describe(self, params: Share) -> Described:
        return [("share of", f"{params.field} = {params.value}")]

    def payload_names(self, params: Share) -> tuple[str, ...]:
        return params.events

    def from_config(self, config: ShareConfig) -> tuple[Share, Unit]:
        return Share(events=config.events, field=config.field, value=config.value), config.unit


KIND = ShareKind()
